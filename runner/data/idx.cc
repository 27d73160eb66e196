#include "runner/data/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <array>
#include <memory>

namespace ringtrain::data {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

std::uint32_t BigEndian32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// Reads exactly `len` bytes; a short read means the file was truncated or is corrupt.
Status ReadExact(gzFile f, void* buf, std::size_t len, const std::string& path, const char* what) {
  auto* p = static_cast<unsigned char*>(buf);
  while (len > 0) {
    unsigned chunk = len > (1u << 30) ? (1u << 30) : static_cast<unsigned>(len);
    int n = gzread(f, p, chunk);
    if (n < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      return DataLoss(path + ": corrupt file while reading " + what + ": " + msg);
    }
    if (n == 0) return DataLoss(path + ": truncated file while reading " + what);
    p += n;
    len -= static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

StatusOr<GzFile> Open(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return NotFound(path + ": no such file");
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) return NotFound(path + ": cannot open");
  gzbuffer(f.get(), 1 << 20);
  return f;
}

// Returns the dimensions after checking the magic (type 0x08 = unsigned byte).
StatusOr<std::vector<std::uint32_t>> ReadHeader(gzFile f, const std::string& path, int ndims) {
  std::array<unsigned char, 4> magic{};
  RETURN_IF_ERROR(ReadExact(f, magic.data(), 4, path, "the header"));
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] != ndims) {
    return DataLoss(path + ": not an IDX file of " + std::to_string(ndims) +
                    "-dimensional unsigned bytes (bad magic number)");
  }
  std::vector<std::uint32_t> dims(static_cast<std::size_t>(ndims));
  for (auto& d : dims) {
    std::array<unsigned char, 4> b{};
    RETURN_IF_ERROR(ReadExact(f, b.data(), 4, path, "the header"));
    d = BigEndian32(b.data());
  }
  return dims;
}

// After the payload the stream must end: trailing bytes mean a mismatched header.
Status ExpectEnd(gzFile f, const std::string& path) {
  unsigned char extra = 0;
  int n = gzread(f, &extra, 1);
  if (n < 0) {
    int err = 0;
    return DataLoss(path + ": corrupt file: " + gzerror(f, &err));
  }
  if (n > 0) return DataLoss(path + ": more data than the header announces");
  return Status::Ok();
}

}  // namespace

StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path,
                          int classes) {
  Dataset ds;
  {
    ASSIGN_OR_RETURN(GzFile f, Open(images_path));
    ASSIGN_OR_RETURN(auto dims, ReadHeader(f.get(), images_path, 3));
    if (dims[0] == 0 || dims[1] == 0 || dims[2] == 0 || dims[1] > 4096 || dims[2] > 4096 ||
        dims[0] > (1u << 28)) {
      return DataLoss(images_path + ": implausible dimensions " + std::to_string(dims[0]) + "x" +
                      std::to_string(dims[1]) + "x" + std::to_string(dims[2]));
    }
    ds.count = dims[0];
    ds.rows = static_cast<int>(dims[1]);
    ds.cols = static_cast<int>(dims[2]);
    ds.images.resize(ds.count * static_cast<std::size_t>(ds.rows) * ds.cols);
    RETURN_IF_ERROR(
        ReadExact(f.get(), ds.images.data(), ds.images.size(), images_path, "the pixels"));
    RETURN_IF_ERROR(ExpectEnd(f.get(), images_path));
  }
  {
    ASSIGN_OR_RETURN(GzFile f, Open(labels_path));
    ASSIGN_OR_RETURN(auto dims, ReadHeader(f.get(), labels_path, 1));
    if (dims[0] != ds.count) {
      return DataLoss(labels_path + ": " + std::to_string(dims[0]) + " labels for " +
                      std::to_string(ds.count) + " images in " + images_path);
    }
    ds.labels.resize(ds.count);
    RETURN_IF_ERROR(
        ReadExact(f.get(), ds.labels.data(), ds.labels.size(), labels_path, "the labels"));
    RETURN_IF_ERROR(ExpectEnd(f.get(), labels_path));
  }
  for (std::size_t i = 0; i < ds.count; ++i) {
    if (ds.labels[i] >= classes) {
      return DataLoss(labels_path + ": label " + std::to_string(ds.labels[i]) + " at index " +
                      std::to_string(i) + " is not below " + std::to_string(classes));
    }
  }
  return ds;
}

StatusOr<Dataset> LoadFashionMnist(const std::string& dir, bool train) {
  std::string prefix = dir + "/" + (train ? "train" : "t10k");
  auto pick = [](const std::string& base) {
    struct stat st {};
    return ::stat((base + ".gz").c_str(), &st) == 0 ? base + ".gz" : base;
  };
  return LoadIdx(pick(prefix + "-images-idx3-ubyte"), pick(prefix + "-labels-idx1-ubyte"));
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
