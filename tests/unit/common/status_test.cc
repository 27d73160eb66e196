// Exit-code classification: a restart can heal a lost peer or a timeout, never a permission,
// a missing dataset or bad input — those must fail the job at once.
#include "common/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace ringtrain {
namespace {

TEST(StatusTest, ErrorsARestartCannotHealArePermanent) {
  for (const Status& s :
       {PermissionDenied("checkpoint dir /ckpt: Permission denied"), FailedPrecondition("x"),
        InvalidArgument("x"), NotFound("x"), DataLoss("x"), Internal("x")}) {
    EXPECT_FALSE(s.retryable()) << s.ToString();
    EXPECT_GE(ExitCodeFor(s), 1) << s.ToString();
    EXPECT_LE(ExitCodeFor(s), 127) << s.ToString();
  }
}

TEST(StatusTest, PeerLossTimeoutsAndAbortsAreRetryable) {
  for (const Status& s : {Unavailable("lost peer rank 1"), DeadlineExceeded("x"), Aborted("x")}) {
    EXPECT_TRUE(s.retryable()) << s.ToString();
    EXPECT_EQ(ExitCodeFor(s), kExitRetryable) << s.ToString();
  }
  EXPECT_EQ(ExitCodeFor(Status::Ok()), 0);
}

TEST(StatusTest, FileErrnosThatCannotHealArePermanentAndNameThePath) {
  struct Case {
    int err;
    StatusCode code;
  };
  for (Case c :
       {Case{EACCES, StatusCode::kPermissionDenied}, Case{EPERM, StatusCode::kPermissionDenied},
        Case{EROFS, StatusCode::kPermissionDenied}, Case{ENOSPC, StatusCode::kFailedPrecondition},
        Case{EDQUOT, StatusCode::kFailedPrecondition},
        Case{ENOTDIR, StatusCode::kFailedPrecondition}, Case{ENOENT, StatusCode::kNotFound}}) {
    Status s = ErrnoStatus("checkpoint dir /ckpt", c.err);
    EXPECT_EQ(s.code(), c.code) << s.ToString();
    EXPECT_FALSE(s.retryable()) << s.ToString();
    EXPECT_LT(ExitCodeFor(s), 128) << s.ToString();
    EXPECT_EQ(s.message().rfind("checkpoint dir /ckpt: ", 0), 0u) << s.message();
  }
  EXPECT_EQ(ErrnoStatus("checkpoint dir /ckpt", EACCES).message(),
            "checkpoint dir /ckpt: Permission denied");
}

TEST(StatusTest, TransientErrnosAreRetryable) {
  for (int err : {ECONNREFUSED, ECONNRESET, EMFILE, ENOMEM, ETIMEDOUT, ESTALE}) {
    Status s = ErrnoStatus("open /data/x", err);
    EXPECT_TRUE(s.retryable()) << s.ToString();
  }
}

TEST(StatusOrDeathTest, ValueOfAnErrorExitsPermanentlyWithTheStatus) {
  StatusOr<int> bad = NotFound("no checkpoint in /ckpt");
  EXPECT_EXIT((void)bad.value(), ::testing::ExitedWithCode(kExitPermanent),
              "StatusOr::value\\(\\) on an error: .*no checkpoint in /ckpt");
  EXPECT_EXIT((void)*bad, ::testing::ExitedWithCode(kExitPermanent), "on an error");
  StatusOr<std::string> bad_string = Unavailable("peer lost");
  EXPECT_EXIT((void)bad_string->size(), ::testing::ExitedWithCode(kExitPermanent), "peer lost");
  StatusOr<int> good = 7;
  EXPECT_EQ(good.value(), 7);
}

}  // namespace
}  // namespace ringtrain
