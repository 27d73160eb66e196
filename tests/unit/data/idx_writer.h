// Test data: an IDX directory as Fashion-MNIST ships it, uncompressed (model_data_test,
// local_dataset_test).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace ringtrain::data {

// Writes train-/t10k-images-idx3-ubyte and -labels-idx1-ubyte under `dir` (which must exist):
// `n` training and `n` test images of rows × cols bytes, sample i labelled i % classes.
inline void WriteIdxDir(const std::string& dir, int n, int rows, int cols, int classes) {
  auto be32 = [](std::string& s, std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((v >> shift) & 0xff);
  };
  for (const char* split : {"train", "t10k"}) {
    std::string images("\0\0\x08\x03", 4);
    be32(images, static_cast<std::uint32_t>(n));
    be32(images, static_cast<std::uint32_t>(rows));
    be32(images, static_cast<std::uint32_t>(cols));
    std::string labels("\0\0\x08\x01", 4);
    be32(labels, static_cast<std::uint32_t>(n));
    for (int i = 0; i < n; ++i) {
      for (int p = 0; p < rows * cols; ++p) images += static_cast<char>((i * 7 + p) % 256);
      labels += static_cast<char>(i % classes);
    }
    std::ofstream(dir + "/" + split + "-images-idx3-ubyte", std::ios::binary) << images;
    std::ofstream(dir + "/" + split + "-labels-idx1-ubyte", std::ios::binary) << labels;
  }
}

}  // namespace ringtrain::data
