// Fashion-MNIST/MNIST IDX files (plain or .gz): reading, validation and normalization.
// Owns the on-disk format only; sampling and batching live in sampler.h and loader.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
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
  std::string images_path;  // where it was read from, for error messages
  std::string labels_path;
  // Declared other than an image (dataset.inputShape [features], or of four dimensions): the
  // model takes each image as rows x cols values in a row, as it takes a table's features, not
  // as a 1 x rows x cols image (DeclaredFlat).
  bool flat = false;
  int sample_size() const { return rows * cols; }
};

// The most bytes one IDX file may hold (decompressed): the whole dataset stays in memory on
// every rank, so a header announcing more is rejected before anything is allocated.
inline constexpr std::uint64_t kMaxIdxBytes = std::uint64_t{4} << 30;
// deflate's best compression ratio is 1032:1, so a .gz file of c bytes cannot honestly hold
// more than c × 1032 bytes: a header announcing more is rejected before allocating.
inline constexpr std::uint64_t kMaxDeflateRatio = 1032;

// Reads an image file (magic 0x803) and its label file (magic 0x801). Truncated or corrupt
// files are DataLoss, a count mismatch or a label ≥ `classes` is DataLoss, a read error the
// volume may heal (EIO, ESTALE, ETIMEDOUT) is Unavailable (retryable); errors name the file.
// The header's dimensions are checked against the file's size (and kMaxIdxBytes) before any
// allocation, and memory grows only as bytes actually arrive.
StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path,
                          int classes = 10);

// The values a label byte can take: LoadIdx(..., kIdxLabelValues) checks no label against a
// class count, leaving that to ValidateForModel with the model's classes.
inline constexpr int kIdxLabelValues = 256;

// The four standard names under `dir` ("train-images-idx3-ubyte.gz", ...); `.gz` optional.
// Labels are checked below `classes` as LoadIdx does (10: Fashion-MNIST's).
StatusOr<Dataset> LoadFashionMnist(const std::string& dir, bool train, int classes = 10);

// Whether `ds` fits a model of rows × cols inputs and `classes` outputs: a test set of another
// shape than the training set, or a label the model cannot output, is InvalidArgument naming the
// file (checked once at load, because Gather trusts the shape and the indices). The message says
// "not below <whose> <classes> classes<hint>": the model's, or the dataset's with what sets them.
Status ValidateForModel(const Dataset& ds, int rows, int cols, int classes,
                        std::string_view whose = "the model's", std::string_view hint = {});

// Whether a declared dataset.inputShape makes IDX images flat: one that is no image ([h, w],
// [1, h, w]), as model::InputShapeOf reads a declared shape for the operator and for tables.
inline bool DeclaredFlat(const std::vector<int>& declared) {
  return !declared.empty() && declared.size() != 2 && declared.size() != 3;
}

// Whether `ds`'s images have the per-sample shape a dataset declares (inputShape; empty: none),
// for the runner and for `ringtrain validate`/`run` alike: [c, h, w] must be 1 × rows × cols
// ([h, w] is [1, h, w]); [features] (or more dimensions) needs as many values. IDX images keep
// their shape. InvalidArgument naming `field` (where the shape was declared) and the images file
// otherwise.
Status CheckDeclaredShape(const std::vector<int>& declared, std::string_view field,
                          const Dataset& ds);

// Fashion-MNIST training-set statistics, used for every split.
inline constexpr float kFashionMean = 0.2860f;
inline constexpr float kFashionStd = 0.3530f;

// Writes samples idx[0..n) as normalized floats into x (n × sample_size) and labels into y.
// Every idx[i] must be below ds.count (the sampler guarantees it); no checks on this hot path.
void Gather(const Dataset& ds, const std::size_t* idx, int n, float* x, std::int32_t* y);

}  // namespace ringtrain::data
