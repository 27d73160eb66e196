// Fuzz target: the NPY dataset reader (plain and gzip), from files as a user's volume would hold
// them. Input layout: [flags u8][x part length u16 BE][x file][y file]. Flags: bit 0 gzips the x
// file, bit 1 the y file; bit 2 regression; bit 3 standardise; bit 4 fixes the classes at 10.
#include <spdlog/spdlog.h>
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runner/data/npy.h"
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

// What the engines will do with a table the reader accepted: copy its first and last samples.
void CheckTable(const ringtrain::data::Table& t) {
  using namespace ringtrain;
  FUZZ_CHECK(data::ValidateTable(t).ok());
  std::size_t idx[2] = {0, t.n - 1};
  std::vector<float> x(2 * t.features);
  std::int32_t labels[2] = {-1, -1};
  std::vector<float> targets(2 * static_cast<std::size_t>(t.task.targets));
  if (t.task.classification()) {
    data::Gather(t, idx, 2, x.data(), labels, nullptr);
    FUZZ_CHECK(labels[0] >= 0 && labels[0] < t.task.classes);
    FUZZ_CHECK(labels[1] >= 0 && labels[1] < t.task.classes);
  } else {
    data::Gather(t, idx, 2, x.data(), nullptr, targets.data());
  }
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
  std::string x(rest, split);
  std::string y(rest + split, rest_size - split);
  if (flags & 1) x = Gzip(x);
  if (flags & 2) y = Gzip(y);
  const std::string x_path = TempDir() + "/x.npy" + ((flags & 1) ? ".gz" : "");
  const std::string y_path = TempDir() + "/y.npy" + ((flags & 2) ? ".gz" : "");
  WriteFile(x_path, x);
  WriteFile(y_path, y);

  data::NpyOptions o;
  if (flags & 4) o.task.kind = data::Task::Kind::kRegression;
  o.standardize = (flags & 8) != 0;
  if (flags & 16) o.task.classes = 10;
  // The header parser on its own, on the raw bytes (it must never read past them).
  (void)data::ParseNpyHeader(x_path, std::string(rest, split));
  auto tt = data::LoadNpy({x_path, y_path}, {x_path, y_path}, o);
  if (tt.ok()) {
    CheckTable(tt->train);
    CheckTable(tt->test);
    FUZZ_CHECK(tt->train.x == tt->test.x);
  }
  return 0;
}
