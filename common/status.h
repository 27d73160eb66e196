// Errors as values: Status and StatusOr<T>, the only way errors cross a module boundary.
// Owns the error codes and the exit-code mapping; must not depend on anything else in the tree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ringtrain {

enum class StatusCode : std::uint8_t {
  kOk = 0,
  kInvalidArgument,  // bad spec, bad flag, bad file content: permanent
  kNotFound,         // missing file or key
  kAlreadyExists,
  kFailedPrecondition,
  kDataLoss,           // corrupt or truncated data: permanent
  kPermissionDenied,   // wrong token (HTTP 403), EACCES on a path: permanent
  kDeadlineExceeded,   // a blocking call ran out of time: retryable
  kUnavailable,        // peer lost, connection refused, port busy: retryable
  kAborted,            // the collective was aborted by this or another rank: retryable
  kCancelled,          // shutdown requested
  kUnauthenticated,    // no or bad credentials (HTTP 401)
  kResourceExhausted,  // throttled (HTTP 429): retry later
  kGone,               // a resourceVersion or continue token expired (HTTP 410): relist
  kInternal,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

  // Adds one breadcrumb, outermost first, the way NCCL's check macros build a backtrace.
  Status WithContext(std::string_view context) const;

  // Whether a gang restart can fix this (peer lost, timeout) as opposed to a permanent error.
  bool retryable() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status DeadlineExceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// errno-based error with the operation named: "connect 10.0.0.1:29500: Connection refused".
Status ErrnoStatus(StatusCode code, std::string_view what, int err);

// The code for an errno of a file or socket call, by whether a gang restart can heal it:
// EACCES/EPERM/EROFS → PermissionDenied, ENOSPC/EDQUOT (a full volume stays full) and
// ENOTDIR/EISDIR/ELOOP/ENAMETOOLONG/EFBIG → FailedPrecondition, ENOENT → NotFound, all
// permanent; EIO, resource shortage, network and anything else → Unavailable (retryable).
StatusCode StatusCodeForErrno(int err);
// ErrnoStatus with StatusCodeForErrno's code; `what` names the operation and the path, e.g.
// ErrnoStatus("checkpoint dir /ckpt", EACCES) → PERMISSION_DENIED "checkpoint dir /ckpt:
// Permission denied".
Status ErrnoStatus(std::string_view what, int err);

// Process exit codes of the contract in DESIGN.md: 0 ok, 1-127 permanent, 128-255 retryable.
constexpr int kExitOk = 0;
constexpr int kExitPermanent = 1;
constexpr int kExitRetryable = 128 + 10;  // 138: peer lost / timeout, distinct from signals
int ExitCodeFor(const Status& status);

// StatusOr's value() on an error: prints "StatusOr::value() on an error: <status>" to stderr
// and exits with kExitPermanent (a bug a restart cannot heal).
[[noreturn]] void DieOnValueOfError(const Status& status);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit like absl::StatusOr
  StatusOr(Status status) : status_(std::move(status)) {
    if (status_.ok()) status_ = Internal("StatusOr constructed from an ok Status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // The value; on an error these print the status and exit permanently (a caller's bug, never
  // undefined behaviour).
  T& value() & { return Checked(); }
  const T& value() const& { return Checked(); }
  T&& value() && { return std::move(Checked()); }
  T& operator*() & { return Checked(); }
  const T& operator*() const& { return Checked(); }
  T* operator->() { return &Checked(); }
  const T* operator->() const { return &Checked(); }

 private:
  T& Checked() {
    if (!value_) DieOnValueOfError(status_);
    return *value_;
  }
  const T& Checked() const {
    if (!value_) DieOnValueOfError(status_);
    return *value_;
  }

  Status status_;
  std::optional<T> value_;
};

#define RT_CONCAT_INNER(a, b) a##b
#define RT_CONCAT(a, b) RT_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::ringtrain::Status rt_status_ = (expr); \
    if (!rt_status_.ok()) return rt_status_; \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(RT_CONCAT(rt_statusor_, __LINE__), lhs, expr)

}  // namespace ringtrain
