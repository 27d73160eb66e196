#include "runner/data/data_file.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <new>
#include <stdexcept>

#include "common/stop.h"
#include "runner/data/idx.h"

namespace ringtrain::data {
namespace {

// " while reading the pixels", or "" when the caller names nothing.
std::string While(const char* what) {
  return what == nullptr ? std::string() : std::string(" while reading ") + what;
}

// What a system error says of the file: one the volume may heal (EIO, ESTALE, ETIMEDOUT on a
// network file system; EMFILE, ENOMEM) is Unavailable, retryable, as a checkpoint read's is: the
// gang restarts and reads the file again; no permission, and anything that no restart changes,
// keep `permanent`.
Status FileError(StatusCode permanent, const std::string& what, int err) {
  const StatusCode code = StatusCodeForErrno(err);
  return ErrnoStatus(code == StatusCode::kUnavailable ? code : permanent, what, err);
}

// After gzread failed (`n` < 0, `err_no` the errno it left): a read error of the system (zlib's
// Z_ERRNO), classified by FileError, else a corrupt stream (DataLoss).
Status ReadFailed(gzFile f, int err_no, const std::string& path, const char* what) {
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  if (err == Z_ERRNO)
    return FileError(StatusCode::kDataLoss, path + ": read error" + While(what), err_no);
  return DataLoss(path + ": corrupt file" + While(what) + ": " + msg);
}

// After gzread gave no bytes: zlib reports a gzip stream cut short (no end-of-stream marker, or
// no trailer) as the end of the file, with Z_BUF_ERROR "unexpected end of file" left in
// gzerror; that is a truncated file, not the end of the data.
Status CheckEnd(gzFile f, const std::string& path, const char* what) {
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  if (err == Z_BUF_ERROR) {
    return DataLoss(path + ": truncated gzip stream" + While(what) + " (" + msg + ")");
  }
  return Status::Ok();
}

}  // namespace

struct DataFile::Impl {
  gzFile f = nullptr;
  ~Impl() {
    if (f != nullptr) gzclose(f);
  }
};

DataFile::DataFile(std::unique_ptr<Impl> impl, std::string path, std::uint64_t size, bool gzip)
    : impl_(std::move(impl)), path_(std::move(path)), size_(size), gzip_(gzip) {}
DataFile::DataFile(DataFile&&) noexcept = default;
DataFile& DataFile::operator=(DataFile&&) noexcept = default;
DataFile::~DataFile() = default;

StatusOr<DataFile> DataFile::Open(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return FileError(StatusCode::kNotFound, path, errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file");
  bool gzip = false;
  if (FILE* raw = std::fopen(path.c_str(), "rb")) {
    unsigned char m[2] = {0, 0};
    gzip = std::fread(m, 1, 2, raw) == 2 && m[0] == 0x1f && m[1] == 0x8b;
    std::fclose(raw);
  } else {
    return FileError(errno == EACCES ? StatusCode::kPermissionDenied : StatusCode::kNotFound, path,
                     errno);
  }
  auto impl = std::make_unique<Impl>();
  impl->f = gzopen(path.c_str(), "rb");
  if (impl->f == nullptr) return FileError(StatusCode::kNotFound, path, errno);
  gzbuffer(impl->f, 1 << 20);
  return DataFile(std::move(impl), path, static_cast<std::uint64_t>(st.st_size), gzip);
}

Status DataFile::CheckNotStopped() const {
  if (StopRequested()) return StoppedStatus("data loading (reading " + path_ + ")");
  return Status::Ok();
}

std::uint64_t DataFile::max_content_bytes() const {
  if (!gzip_) return size_;
  std::uint64_t bound = 0;
  if (__builtin_mul_overflow(size_, kMaxDeflateRatio, &bound)) return UINT64_MAX;
  return bound;
}

StatusOr<std::size_t> DataFile::ReadUpTo(std::size_t len, std::string& out) {
  // Through a small buffer: growing `out` by a large zeroed chunk per call would cost more than
  // the small files themselves.
  char buf[1 << 16];
  std::size_t got = 0;
  while (got < len) {
    RETURN_IF_ERROR(CheckNotStopped());
    const auto want = static_cast<unsigned>(std::min(len - got, sizeof buf));
    const int n = gzread(impl_->f, buf, want);
    if (n < 0) return ReadFailed(impl_->f, errno, path_, nullptr);
    if (n == 0) {
      RETURN_IF_ERROR(CheckEnd(impl_->f, path_, nullptr));
      break;
    }
    out.append(buf, static_cast<std::size_t>(n));
    got += static_cast<std::size_t>(n);
  }
  return got;
}

Status DataFile::ReadExact(void* buf, std::size_t len, const char* what) {
  auto* p = static_cast<unsigned char*>(buf);
  while (len > 0) {
    RETURN_IF_ERROR(CheckNotStopped());
    // 8 MB at a time: a SIGTERM is noticed between them, not after a whole file of the slow
    // volume.
    const unsigned chunk = len > (8u << 20) ? (8u << 20) : static_cast<unsigned>(len);
    const int n = gzread(impl_->f, p, chunk);
    if (n < 0) return ReadFailed(impl_->f, errno, path_, what);
    if (n == 0) {
      RETURN_IF_ERROR(CheckEnd(impl_->f, path_, what));
      return DataLoss(path_ + ": truncated file while reading " + what);
    }
    p += n;
    len -= static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

Status DataFile::ReadPayload(std::uint64_t total, std::vector<unsigned char>& out,
                             const char* what) {
  constexpr std::uint64_t kChunk = 16u << 20;
  out.clear();
  // The whole payload's room at once: grown chunk by chunk, the vector doubled its capacity and
  // copied, so reading 47 MB peaked at 96 MB. Untouched, the room is address space only: the
  // pages are written as the chunks arrive, so a header that lies still costs at most one chunk
  // of memory. Room that cannot be had (a gzip header's lie of more than the machine's memory)
  // is grown as the bytes arrive instead.
  if (out.capacity() < total) {
    try {
      std::vector<unsigned char>().swap(out);
      out.reserve(static_cast<std::size_t>(total));
    } catch (const std::bad_alloc&) {
    } catch (const std::length_error&) {
    }
  }
  while (out.size() < total) {
    const std::size_t done = out.size();
    const auto next = static_cast<std::size_t>(std::min<std::uint64_t>(total, done + kChunk));
    out.resize(next);
    RETURN_IF_ERROR(ReadExact(out.data() + done, next - done, what));
  }
  return Status::Ok();
}

Status DataFile::ExpectEnd() {
  unsigned char extra = 0;
  const int n = gzread(impl_->f, &extra, 1);
  if (n < 0) return ReadFailed(impl_->f, errno, path_, nullptr);
  if (n > 0) return DataLoss(path_ + ": more data than the header announces");
  return CheckEnd(impl_->f, path_, nullptr);
}

}  // namespace ringtrain::data
