// Reading a dataset file (plain or gzip) for the IDX, CSV and NPY readers: sizes bounded before
// memory grows. Internal to runner/data.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringtrain::data {

// An open dataset file; gzip is detected from its first two bytes, not from its name.
class DataFile {
 public:
  // NotFound (a missing file cannot appear by restarting), PermissionDenied, InvalidArgument
  // for something that is not a regular file, or Unavailable (retryable) for an error the volume
  // may heal (EIO, ESTALE, ETIMEDOUT, EMFILE, ENOMEM); the message names `path`.
  static StatusOr<DataFile> Open(const std::string& path);

  DataFile(DataFile&&) noexcept;
  DataFile& operator=(DataFile&&) noexcept;
  ~DataFile();

  const std::string& path() const { return path_; }
  bool gzip() const { return gzip_; }
  // Bytes on disk.
  std::uint64_t size() const { return size_; }
  // The most bytes the file can yield: its size, or size × deflate's best ratio for gzip.
  std::uint64_t max_content_bytes() const;

  // A gzip stream cut short is DataLoss "truncated gzip stream" naming the file wherever it
  // ends: zlib alone would report it as the end of the file. A read error the volume may heal
  // (EIO, ESTALE, ETIMEDOUT) is Unavailable naming the file and the error, not a corrupt file.
  // Reads exactly `len` bytes: DataLoss naming the file and `what` when it ends first.
  Status ReadExact(void* buf, std::size_t len, const char* what);
  // Appends up to `len` bytes to `out`, growing it only as bytes arrive; returns how many came
  // (fewer only at the end of the file).
  StatusOr<std::size_t> ReadUpTo(std::size_t len, std::string& out);
  // Reads `total` bytes into `out`, in chunks, so a header that lies costs at most one chunk;
  // `out`'s room for all of them is reserved first (address space, touched as bytes arrive), so
  // the payload is never copied to a larger buffer.
  Status ReadPayload(std::uint64_t total, std::vector<unsigned char>& out, const char* what);
  // DataLoss unless the file has no more bytes.
  Status ExpectEnd();
  // StoppedStatus naming the file once a stop (SIGTERM, SIGINT) is requested: the reads above
  // check it between their chunks, and a reader's own loops over what it read may too.
  Status CheckNotStopped() const;

 private:
  struct Impl;
  explicit DataFile(std::unique_ptr<Impl> impl, std::string path, std::uint64_t size, bool gzip);
  std::unique_ptr<Impl> impl_;
  std::string path_;
  std::uint64_t size_ = 0;
  bool gzip_ = false;
};

}  // namespace ringtrain::data
