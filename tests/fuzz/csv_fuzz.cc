// Fuzz target: the CSV dataset reader (plain and gzip), from files as a user's volume would hold
// them. Input layout: [flags u8][options u8][first part length u16 BE][first file][second file].
// Flags: bit 0 gzips the first file, bit 1 the second; bit 2 makes the second file the first's
// labels file (else it is the test split); bit 3 regression; bit 4 standardise. Options: bits 0-1
// the header mode, bits 2-4 the delimiter, bits 5-7 the label column (index or name).
#include <spdlog/spdlog.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runner/data/csv.h"
#include "tests/fuzz/data_files.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ringtrain;
  using namespace ringtrain::fuzz;
  const auto files = WriteDataFiles(data, size, 1, "first.csv", "second.csv");
  if (!files) return 0;
  const int flags = files->flags;
  const int opts = files->options[0];
  const std::string& first_path = files->first_path;
  const std::string& second_path = files->second_path;

  data::CsvOptions o;
  constexpr data::CsvHeader kHeaders[] = {data::CsvHeader::kAuto, data::CsvHeader::kNone,
                                          data::CsvHeader::kHeader,
                                          data::CsvHeader::kSklearnCounts};
  o.header = kHeaders[opts & 3];
  constexpr char kDelimiters[] = {0, ',', ';', '\t', ' ', 0, ',', ' '};
  o.delimiter = kDelimiters[(opts >> 2) & 7];
  const int label = (opts >> 5) & 7;
  if (label == 7) {
    o.label_name = "y";
  } else {
    o.label_index = label - 3;  // -3 .. 3: from the end, and from the start
  }
  if (flags & 8) o.task.kind = data::Task::Kind::kRegression;
  o.standardize = (flags & 16) != 0;

  if (flags & 4) {
    auto t = data::ReadCsv({first_path, second_path}, o);
    if (t.ok()) CheckTable(*t);
  } else {
    auto tt = data::LoadCsv({first_path, ""}, {second_path, ""}, o);
    if (tt.ok()) {
      CheckTable(tt->train);
      CheckTable(tt->test);
      FUZZ_CHECK(tt->test.features == tt->train.features);
    }
    auto one = data::ReadCsv({first_path, ""}, o);
    if (one.ok() && one->n >= 2) {
      auto split_tables = data::SplitHoldout(*std::move(one), 0.25, 1);
      FUZZ_CHECK(split_tables.ok());
      CheckTable(split_tables->train);
      CheckTable(split_tables->test);
    }
  }
  return 0;
}
