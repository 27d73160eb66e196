// Fuzz target: the NPY dataset reader (plain and gzip), from files as a user's volume would hold
// them. Input layout: [flags u8][x part length u16 BE][x file][y file]. Flags: bit 0 gzips the x
// file, bit 1 the y file; bit 2 regression; bit 3 standardise; bit 4 fixes the classes at 10.
#include <spdlog/spdlog.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runner/data/npy.h"
#include "tests/fuzz/data_files.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ringtrain;
  using namespace ringtrain::fuzz;
  const auto files = WriteDataFiles(data, size, 0, "x.npy", "y.npy");
  if (!files) return 0;
  const int flags = files->flags;
  const std::string& x_path = files->first_path;
  const std::string& y_path = files->second_path;

  data::NpyOptions o;
  if (flags & 4) o.task.kind = data::Task::Kind::kRegression;
  o.standardize = (flags & 8) != 0;
  if (flags & 16) o.task.classes = 10;
  // The header parser on its own, on the raw bytes (it must never read past them).
  (void)data::ParseNpyHeader(x_path, files->first_raw);
  auto tt = data::LoadNpy({x_path, y_path}, {x_path, y_path}, o);
  if (tt.ok()) {
    CheckTable(tt->train);
    CheckTable(tt->test);
    FUZZ_CHECK(tt->train.x == tt->test.x);
  }
  return 0;
}
