// Fuzz target: the IDX reader (plain and gzip), from files as a user's volume would hold them.
// Input layout: [flags u8][image part length u16 BE][image file][label file]. Flag bit 0 gzips
// the image file, bit 1 the label file (the bytes inside are still the fuzzer's), so both of
// LoadIdx's paths and gzip's size amplification are reached.
#include <spdlog/spdlog.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runner/data/idx.h"
#include "tests/fuzz/data_files.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ringtrain;
  using namespace ringtrain::fuzz;
  const auto files = WriteDataFiles(data, size, 0, "images-idx3-ubyte", "labels-idx1-ubyte");
  if (!files) return 0;

  auto ds = data::LoadIdx(files->first_path, files->second_path, 10);
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
