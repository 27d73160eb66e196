// NumPy .npy datasets (plain or .gz) into a Table: x and y arrays in separate files, format
// versions 1-3, C order. Owns the binary format only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runner/data/table.h"

namespace ringtrain::data {

// The most bytes one .npy payload may hold, and the most elements (each becomes a float in
// memory): checked against the header before anything is allocated.
inline constexpr std::uint64_t kMaxNpyBytes = std::uint64_t{4} << 30;
inline constexpr std::uint64_t kMaxNpyElements = kMaxNpyBytes / sizeof(float);
// numpy itself refuses headers over 10000 bytes unless told otherwise; allow some slack.
inline constexpr std::uint32_t kMaxNpyHeaderBytes = 1u << 16;

// An array's header: what 'descr', 'fortran_order' and 'shape' say.
struct NpyHeader {
  enum class Dtype { kUint8, kInt32, kInt64, kFloat32, kFloat64 };
  Dtype dtype = Dtype::kUint8;
  std::vector<std::uint64_t> shape;
  int version = 1;
  std::size_t data_offset = 0;  // bytes before the payload
};

// Parses the header at the start of `bytes` (magic, version, the dict). Unknown dtypes
// ('|u1' '<i4' '<i8' '<f4' '<f8' are known), big-endian data, fortran_order True, a malformed
// dict or a header over kMaxNpyHeaderBytes are InvalidArgument/DataLoss naming `path`.
StatusOr<NpyHeader> ParseNpyHeader(const std::string& path, const std::string& bytes);

struct NpyOptions {
  // Classification needs integer labels in [0, classes) (classes 0: the largest training
  // label + 1); regression takes y of shape (n,) or (n, t) of any dtype.
  Task task;
  // Standardise every feature with the training split's statistics (off: uint8 features are
  // only scaled to [0, 1], other dtypes kept as they are).
  bool standardize = false;
};

struct NpySplitFiles {
  std::string x;  // shape (n, ...): the sample shape is the rest
  std::string y;  // shape (n,) or (n, t)
};

// Reads one split (no standardisation): x as floats (uint8 divided by 255), y as labels or
// targets. Each header's sizes are checked against kMaxNpyBytes/kMaxNpyElements and the file's
// size before allocating.
StatusOr<Table> ReadNpy(const NpySplitFiles& files, const NpyOptions& options);

// Reads the training and test splits (the test split takes the training split's classes and must
// have its sample shape), then standardises both with the training statistics when asked.
StatusOr<TrainTest> LoadNpy(const NpySplitFiles& train, const NpySplitFiles& test,
                            const NpyOptions& options);

}  // namespace ringtrain::data
