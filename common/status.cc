#include "common/status.h"

#include <cstdio>
#include <cstdlib>

#include <cerrno>
#include <cstring>

namespace ringtrain {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kDataLoss:
      return "DATA_LOSS";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kAborted:
      return "ABORTED";
    case StatusCode::kCancelled:
      return "CANCELLED";
    case StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kGone:
      return "GONE";
    case StatusCode::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

bool Status::retryable() const {
  switch (code_) {
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kUnavailable:
    case StatusCode::kAborted:
    case StatusCode::kCancelled:
    case StatusCode::kResourceExhausted:
      return true;
    default:
      return false;
  }
}

Status ErrnoStatus(StatusCode code, std::string_view what, int err) {
  std::string m(what);
  m += ": ";
  m += std::strerror(err);
  return Status(code, std::move(m));
}

StatusCode StatusCodeForErrno(int err) {
  switch (err) {
    case EACCES:
    case EPERM:
    case EROFS:
      return StatusCode::kPermissionDenied;
    case ENOSPC:
    case EDQUOT:
    case ENOTDIR:
    case EISDIR:
    case ELOOP:
    case ENAMETOOLONG:
    case EEXIST:
    case EXDEV:
    case EFBIG:
      return StatusCode::kFailedPrecondition;
    case ENOENT:
      return StatusCode::kNotFound;
    case EINVAL:
      return StatusCode::kInvalidArgument;
    default:
      // EIO (a failing disk, a network file system's hiccup: a restart may land elsewhere),
      // EMFILE, ENOMEM, EAGAIN, ESTALE, EBUSY, connection errors: may be gone after a restart.
      return StatusCode::kUnavailable;
  }
}

Status ErrnoStatus(std::string_view what, int err) {
  return ErrnoStatus(StatusCodeForErrno(err), what, err);
}

int ExitCodeFor(const Status& status) {
  if (status.ok()) return kExitOk;
  return status.retryable() ? kExitRetryable : kExitPermanent;
}

void DieOnValueOfError(const Status& status) {
  std::fprintf(stderr, "StatusOr::value() on an error: %s\n", status.ToString().c_str());
  std::fflush(stderr);
  std::_Exit(kExitPermanent);
}

}  // namespace ringtrain
