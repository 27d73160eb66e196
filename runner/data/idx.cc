#include "runner/data/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
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

struct OpenedFile {
  GzFile f;
  std::uint64_t size = 0;  // bytes on disk
  bool gzip = false;
};

StatusOr<OpenedFile> Open(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    // A missing dataset file cannot appear by restarting: NotFound is permanent.
    return ErrnoStatus(StatusCode::kNotFound, path, errno);
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file");
  OpenedFile out;
  out.size = static_cast<std::uint64_t>(st.st_size);
  if (FILE* raw = std::fopen(path.c_str(), "rb")) {
    unsigned char m[2] = {0, 0};
    out.gzip = std::fread(m, 1, 2, raw) == 2 && m[0] == 0x1f && m[1] == 0x8b;
    std::fclose(raw);
  } else {
    return ErrnoStatus(errno == EACCES ? StatusCode::kPermissionDenied : StatusCode::kNotFound,
                       path, errno);
  }
  out.f.reset(gzopen(path.c_str(), "rb"));
  if (!out.f) return ErrnoStatus(StatusCode::kNotFound, path, errno);
  gzbuffer(out.f.get(), 1 << 20);
  return out;
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

std::string DimsString(const std::vector<std::uint32_t>& dims) {
  std::string s;
  for (auto d : dims) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

// The payload size the header announces, checked before anything is allocated: the product
// must not overflow, must stay under kMaxIdxBytes, and must fit the file (exactly for a plain
// file; within deflate's best ratio for a gzip one).
StatusOr<std::uint64_t> PayloadBytes(const OpenedFile& file, const std::vector<std::uint32_t>& dims,
                                     const std::string& path) {
  std::uint64_t total = 1;
  for (auto d : dims) {
    if (d == 0 || __builtin_mul_overflow(total, std::uint64_t{d}, &total) || total > kMaxIdxBytes) {
      return DataLoss(path + ": implausible dimensions " + DimsString(dims) +
                      " (empty, or more than " + std::to_string(kMaxIdxBytes) + " bytes)");
    }
  }
  const std::uint64_t header = 4 * (1 + dims.size());
  if (!file.gzip) {
    const std::uint64_t have = file.size - std::min(file.size, header);
    if (have < total) {
      return DataLoss(path + ": truncated file: the header announces " + DimsString(dims) + " = " +
                      std::to_string(total) + " bytes, the file holds " + std::to_string(have));
    }
    if (have > total) return DataLoss(path + ": more data than the header announces");
  } else if (total + header > file.size * kMaxDeflateRatio) {
    return DataLoss(path + ": truncated or corrupt file: the header announces " + DimsString(dims) +
                    " = " + std::to_string(total) + " bytes, more than " +
                    std::to_string(file.size) + " compressed bytes can hold");
  }
  return total;
}

// Reads the announced payload, growing `out` only as bytes arrive, so a header that lies about
// a compressed file costs at most one chunk beyond what the file really holds.
Status ReadPayload(gzFile f, std::uint64_t total, std::vector<std::uint8_t>& out,
                   const std::string& path, const char* what) {
  constexpr std::uint64_t kChunk = 16u << 20;
  out.clear();
  while (out.size() < total) {
    const std::size_t done = out.size();
    const std::size_t next =
        static_cast<std::size_t>(std::min<std::uint64_t>(total, done + kChunk));
    out.resize(next);
    RETURN_IF_ERROR(ReadExact(f, out.data() + done, next - done, path, what));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path,
                          int classes) {
  Dataset ds;
  ds.images_path = images_path;
  ds.labels_path = labels_path;
  {
    ASSIGN_OR_RETURN(OpenedFile file, Open(images_path));
    ASSIGN_OR_RETURN(auto dims, ReadHeader(file.f.get(), images_path, 3));
    if (dims[1] > 4096 || dims[2] > 4096) {
      return DataLoss(images_path + ": implausible dimensions " + DimsString(dims) +
                      " (images larger than 4096x4096)");
    }
    ASSIGN_OR_RETURN(std::uint64_t bytes, PayloadBytes(file, dims, images_path));
    ds.count = dims[0];
    ds.rows = static_cast<int>(dims[1]);
    ds.cols = static_cast<int>(dims[2]);
    RETURN_IF_ERROR(ReadPayload(file.f.get(), bytes, ds.images, images_path, "the pixels"));
    RETURN_IF_ERROR(ExpectEnd(file.f.get(), images_path));
  }
  {
    ASSIGN_OR_RETURN(OpenedFile file, Open(labels_path));
    ASSIGN_OR_RETURN(auto dims, ReadHeader(file.f.get(), labels_path, 1));
    if (dims[0] != ds.count) {
      return DataLoss(labels_path + ": " + std::to_string(dims[0]) + " labels for " +
                      std::to_string(ds.count) + " images in " + images_path);
    }
    ASSIGN_OR_RETURN(std::uint64_t bytes, PayloadBytes(file, dims, labels_path));
    RETURN_IF_ERROR(ReadPayload(file.f.get(), bytes, ds.labels, labels_path, "the labels"));
    RETURN_IF_ERROR(ExpectEnd(file.f.get(), labels_path));
  }
  for (std::size_t i = 0; i < ds.count; ++i) {
    if (ds.labels[i] >= classes) {
      return DataLoss(labels_path + ": label " + std::to_string(ds.labels[i]) + " at index " +
                      std::to_string(i) + " is not below " + std::to_string(classes));
    }
  }
  return ds;
}

Status ValidateForModel(const Dataset& ds, int rows, int cols, int classes) {
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
                             std::to_string(i) + " is not below the model's " +
                             std::to_string(classes) + " classes");
    }
  }
  return Status::Ok();
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
