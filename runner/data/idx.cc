#include "runner/data/idx.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>

#include "runner/data/data_file.h"
#include "runner/data/table.h"

namespace ringtrain::data {
namespace {

std::uint32_t BigEndian32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// Returns the dimensions after checking the magic (type 0x08 = unsigned byte).
StatusOr<std::vector<std::uint32_t>> ReadHeader(DataFile& file, int ndims) {
  const std::string& path = file.path();
  std::array<unsigned char, 4> magic{};
  RETURN_IF_ERROR(file.ReadExact(magic.data(), 4, "the header"));
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] != ndims) {
    return DataLoss(path + ": not an IDX file of " + std::to_string(ndims) +
                    "-dimensional unsigned bytes (bad magic number)");
  }
  std::vector<std::uint32_t> dims(static_cast<std::size_t>(ndims));
  for (auto& d : dims) {
    std::array<unsigned char, 4> b{};
    RETURN_IF_ERROR(file.ReadExact(b.data(), 4, "the header"));
    d = BigEndian32(b.data());
  }
  return dims;
}

std::string DimsString(const std::vector<std::uint32_t>& dims) {
  std::string s;
  for (auto d : dims) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

// The payload size the header announces, checked before anything is allocated: the product
// must not overflow, must stay under kMaxIdxBytes, and must fit the file (exactly for a plain
// file; within deflate's best ratio for a gzip one).
StatusOr<std::uint64_t> PayloadBytes(const DataFile& file, const std::vector<std::uint32_t>& dims) {
  const std::string& path = file.path();
  std::uint64_t total = 1;
  for (auto d : dims) {
    if (d == 0 || __builtin_mul_overflow(total, std::uint64_t{d}, &total) || total > kMaxIdxBytes) {
      return DataLoss(path + ": implausible dimensions " + DimsString(dims) +
                      " (empty, or more than " + std::to_string(kMaxIdxBytes) + " bytes)");
    }
  }
  const std::uint64_t header = 4 * (1 + dims.size());
  if (!file.gzip()) {
    const std::uint64_t have = file.size() - std::min(file.size(), header);
    if (have < total) {
      return DataLoss(path + ": truncated file: the header announces " + DimsString(dims) + " = " +
                      std::to_string(total) + " bytes, the file holds " + std::to_string(have));
    }
    if (have > total) return DataLoss(path + ": more data than the header announces");
  } else if (total + header > file.max_content_bytes()) {
    return DataLoss(path + ": truncated or corrupt file: the header announces " + DimsString(dims) +
                    " = " + std::to_string(total) + " bytes, more than " +
                    std::to_string(file.size()) + " compressed bytes can hold");
  }
  return total;
}

}  // namespace

StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path,
                          int classes) {
  Dataset ds;
  ds.images_path = images_path;
  ds.labels_path = labels_path;
  {
    ASSIGN_OR_RETURN(DataFile file, DataFile::Open(images_path));
    ASSIGN_OR_RETURN(auto dims, ReadHeader(file, 3));
    if (dims[1] > 4096 || dims[2] > 4096) {
      return DataLoss(images_path + ": implausible dimensions " + DimsString(dims) +
                      " (images larger than 4096x4096)");
    }
    ASSIGN_OR_RETURN(std::uint64_t bytes, PayloadBytes(file, dims));
    ds.count = dims[0];
    ds.rows = static_cast<int>(dims[1]);
    ds.cols = static_cast<int>(dims[2]);
    RETURN_IF_ERROR(file.ReadPayload(bytes, ds.images, "the pixels"));
    RETURN_IF_ERROR(file.ExpectEnd());
  }
  {
    ASSIGN_OR_RETURN(DataFile file, DataFile::Open(labels_path));
    ASSIGN_OR_RETURN(auto dims, ReadHeader(file, 1));
    if (dims[0] != ds.count) {
      return DataLoss(labels_path + ": " + std::to_string(dims[0]) + " labels for " +
                      std::to_string(ds.count) + " images in " + images_path);
    }
    ASSIGN_OR_RETURN(std::uint64_t bytes, PayloadBytes(file, dims));
    RETURN_IF_ERROR(file.ReadPayload(bytes, ds.labels, "the labels"));
    RETURN_IF_ERROR(file.ExpectEnd());
  }
  for (std::size_t i = 0; i < ds.count; ++i) {
    if (ds.labels[i] >= classes) {
      return DataLoss(labels_path + ": label " + std::to_string(ds.labels[i]) + " at index " +
                      std::to_string(i) + " is not below " + std::to_string(classes));
    }
  }
  return ds;
}

Status ValidateForModel(const Dataset& ds, int rows, int cols, int classes, std::string_view whose,
                        std::string_view hint) {
  const std::string images = ds.images_path.empty() ? "in-memory images" : ds.images_path;
  const std::string labels = ds.labels_path.empty() ? "in-memory labels" : ds.labels_path;
  if (ds.count == 0) return InvalidArgument(images + ": no samples");
  if (ds.rows != rows || ds.cols != cols) {
    return InvalidArgument(images + ": images are " + std::to_string(ds.rows) + "x" +
                           std::to_string(ds.cols) + ", the model takes " + std::to_string(rows) +
                           "x" + std::to_string(cols) + " (the training images' shape)");
  }
  if (ds.images.size() != ds.count * static_cast<std::size_t>(ds.sample_size()) ||
      ds.labels.size() != ds.count) {
    return InvalidArgument(images + ": " + std::to_string(ds.images.size()) + " pixels and " +
                           std::to_string(ds.labels.size()) + " labels for " +
                           std::to_string(ds.count) + " samples");
  }
  for (std::size_t i = 0; i < ds.count; ++i) {
    if (ds.labels[i] >= classes) {
      return InvalidArgument(labels + ": label " + std::to_string(ds.labels[i]) + " at index " +
                             std::to_string(i) + " is not below " + std::string(whose) + " " +
                             std::to_string(classes) + " classes" + std::string(hint));
    }
  }
  return Status::Ok();
}

Status CheckDeclaredShape(const std::vector<int>& declared, std::string_view field,
                          const Dataset& ds) {
  if (declared.empty()) return Status::Ok();
  const DeclaredShape said = DescribeDeclaredShape(declared);
  const auto& d = declared;
  bool fits = said.values == static_cast<std::size_t>(ds.sample_size());
  if (d.size() == 3) fits = fits && d[0] == 1 && d[1] == ds.rows && d[2] == ds.cols;
  if (d.size() == 2) fits = fits && d[0] == ds.rows && d[1] == ds.cols;
  if (fits) return Status::Ok();
  return InvalidArgument(
      std::string(field) + ": says " + said.text + " per sample but " +
      (ds.images_path.empty() ? std::string("the in-memory images") : ds.images_path) +
      " has images of 1x" + std::to_string(ds.rows) + "x" + std::to_string(ds.cols));
}

StatusOr<Dataset> LoadFashionMnist(const std::string& dir, bool train, int classes) {
  std::string prefix = dir + "/" + (train ? "train" : "t10k");
  auto pick = [](const std::string& base) {
    struct stat st {};
    return ::stat((base + ".gz").c_str(), &st) == 0 ? base + ".gz" : base;
  };
  return LoadIdx(pick(prefix + "-images-idx3-ubyte"), pick(prefix + "-labels-idx1-ubyte"), classes);
}

void Gather(const Dataset& ds, const std::size_t* idx, int n, float* x, std::int32_t* y) {
  const int sz = ds.sample_size();
  constexpr float kScale = 1.0f / (255.0f * kFashionStd);
  constexpr float kShift = kFashionMean / kFashionStd;
  for (int i = 0; i < n; ++i) {
    const std::uint8_t* src = ds.images.data() + idx[i] * static_cast<std::size_t>(sz);
    float* dst = x + static_cast<std::size_t>(i) * sz;
    for (int j = 0; j < sz; ++j) dst[j] = static_cast<float>(src[j]) * kScale - kShift;
    y[i] = ds.labels[idx[i]];
  }
}

}  // namespace ringtrain::data
