// What the dataset-reader fuzz targets (IDX, CSV, NPY) share: two files cut from one input as a
// user's volume would hold them, plain or gzipped, and the check of a table a reader accepted.
// Input layout: [flags u8][options: `extra` bytes][first part length u16 BE][first file][second
// file]; flag bit 0 gzips the first file, bit 1 the second (the bytes inside stay the fuzzer's,
// so both read paths and gzip's size amplification are reached).
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runner/data/table.h"
#include "tests/fuzz/fuzz_util.h"

namespace ringtrain::fuzz {

inline std::string Gzip(const std::string& raw) {
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

struct DataFiles {
  int flags = 0;
  const std::uint8_t* options = nullptr;  // the `extra` option bytes after the flags
  std::string first_raw;                  // the first file's bytes before any gzip
  std::string first_path;
  std::string second_path;
};

// Cuts `data` as above and writes TempDir()/first_name and second_name (".gz" added to a gzipped
// one); nullopt when the input is too short to hold the layout.
inline std::optional<DataFiles> WriteDataFiles(const std::uint8_t* data, std::size_t size,
                                               std::size_t extra, const std::string& first_name,
                                               const std::string& second_name) {
  const std::size_t head = 1 + extra + 2;
  if (size < head) return std::nullopt;
  DataFiles f;
  f.flags = data[0];
  f.options = data + 1;
  std::size_t split = (std::size_t{data[1 + extra]} << 8) | data[2 + extra];
  const char* rest = reinterpret_cast<const char*>(data) + head;
  const std::size_t rest_size = size - head;
  if (split > rest_size) split = rest_size;
  f.first_raw.assign(rest, split);
  std::string first = f.first_raw;
  std::string second(rest + split, rest_size - split);
  if (f.flags & 1) first = Gzip(first);
  if (f.flags & 2) second = Gzip(second);
  f.first_path = TempDir() + "/" + first_name + ((f.flags & 1) ? ".gz" : "");
  f.second_path = TempDir() + "/" + second_name + ((f.flags & 2) ? ".gz" : "");
  WriteFile(f.first_path, first);
  WriteFile(f.second_path, second);
  return f;
}

// What the engines will do with a table a reader accepted: validate it and copy its first and
// last samples.
inline void CheckTable(const data::Table& t) {
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

}  // namespace ringtrain::fuzz
