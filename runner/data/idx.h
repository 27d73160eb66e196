// Fashion-MNIST/MNIST IDX files (plain or .gz): reading, validation and normalization.
// Owns the on-disk format only; sampling and batching live in sampler.h and loader.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringtrain::data {

// Images as stored (uint8, n × rows × cols) with their labels; normalization happens per batch.
struct Dataset {
  std::vector<std::uint8_t> images;
  std::vector<std::uint8_t> labels;
  std::size_t count = 0;
  int rows = 0;
  int cols = 0;
  int sample_size() const { return rows * cols; }
};

// Reads an image file (magic 0x803) and its label file (magic 0x801). Truncated or corrupt
// files are DataLoss, a count mismatch or a label ≥ `classes` is DataLoss; errors name the file.
StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path,
                          int classes = 10);

// The four standard names under `dir` ("train-images-idx3-ubyte.gz", ...); `.gz` optional.
StatusOr<Dataset> LoadFashionMnist(const std::string& dir, bool train);

// Fashion-MNIST training-set statistics, used for every split.
inline constexpr float kFashionMean = 0.2860f;
inline constexpr float kFashionStd = 0.3530f;

// Writes samples idx[0..n) as normalized floats into x (n × sample_size) and labels into y.
void Gather(const Dataset& ds, const std::size_t* idx, int n, float* x, std::int32_t* y);

}  // namespace ringtrain::data
