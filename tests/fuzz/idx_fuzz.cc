// Fuzz target: the IDX reader (plain and gzip), from files as a user's volume would hold them.
// Input layout: [flags u8][image part length u16 BE][image file][label file]. Flag bit 0 gzips
// the image file, bit 1 the label file (the bytes inside are still the fuzzer's), so both of
// LoadIdx's paths and gzip's size amplification are reached.
#include <spdlog/spdlog.h>
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runner/data/idx.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::string Gzip(const std::string& raw) {
  z_stream z{};
  FUZZ_CHECK(deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, raw.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  FUZZ_CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ringtrain;
  using namespace ringtrain::fuzz;
  if (size < 3) return 0;
  const int flags = data[0];
  std::size_t split = (std::size_t{data[1]} << 8) | data[2];
  const char* rest = reinterpret_cast<const char*>(data) + 3;
  const std::size_t rest_size = size - 3;
  if (split > rest_size) split = rest_size;
  std::string images(rest, split);
  std::string labels(rest + split, rest_size - split);
  if (flags & 1) images = Gzip(images);
  if (flags & 2) labels = Gzip(labels);
  const std::string images_path = TempDir() + "/images-idx3-ubyte" + ((flags & 1) ? ".gz" : "");
  const std::string labels_path = TempDir() + "/labels-idx1-ubyte" + ((flags & 2) ? ".gz" : "");
  WriteFile(images_path, images);
  WriteFile(labels_path, labels);

  auto ds = data::LoadIdx(images_path, labels_path, 10);
  if (ds.ok()) {
    // What the loader then does with a dataset it accepted: every sample is in bounds.
    FUZZ_CHECK(ds->labels.size() == ds->count);
    FUZZ_CHECK(ds->images.size() == ds->count * static_cast<std::size_t>(ds->sample_size()));
    if (ds->count > 0) {
      std::size_t idx[2] = {0, ds->count - 1};
      std::vector<float> x(2 * static_cast<std::size_t>(ds->sample_size()));
      std::int32_t y[2];
      data::Gather(*ds, idx, 2, x.data(), y);
      FUZZ_CHECK(y[0] >= 0 && y[0] < 10 && y[1] >= 0 && y[1] < 10);
    }
  }
  return 0;
}
