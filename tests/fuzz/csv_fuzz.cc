// Fuzz target: the CSV dataset reader (plain and gzip), from files as a user's volume would hold
// them. Input layout: [flags u8][options u8][first part length u16 BE][first file][second file].
// Flags: bit 0 gzips the first file, bit 1 the second; bit 2 makes the second file the first's
// labels file (else it is the test split); bit 3 regression; bit 4 standardise. Options: bits 0-1
// the header mode, bits 2-4 the delimiter, bits 5-7 the label column (index or name).
#include <spdlog/spdlog.h>
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runner/data/csv.h"
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
  FUZZ_CHECK(t.x.size() == t.n * t.features);
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
  if (size < 4) return 0;
  const int flags = data[0];
  const int opts = data[1];
  std::size_t split = (std::size_t{data[2]} << 8) | data[3];
  const char* rest = reinterpret_cast<const char*>(data) + 4;
  const std::size_t rest_size = size - 4;
  if (split > rest_size) split = rest_size;
  std::string first(rest, split);
  std::string second(rest + split, rest_size - split);
  if (flags & 1) first = Gzip(first);
  if (flags & 2) second = Gzip(second);
  const std::string first_path = TempDir() + "/first.csv" + ((flags & 1) ? ".gz" : "");
  const std::string second_path = TempDir() + "/second.csv" + ((flags & 2) ? ".gz" : "");
  WriteFile(first_path, first);
  WriteFile(second_path, second);

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
