// `ringtrain run`'s progress line: what rank 0's last /status read says, in one short line; a
// rank 0 that trains without progress (a hung peer, a lost one) says so in words, not only as
// 0 samples/s.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "common/runner_status.h"
#include "controller/executors/local/local_executor.h"
#include "controller/reconcile/observe_status.h"

namespace ringtrain::executors {
namespace {

api::TrainingJob Job() {
  api::TrainingJob job;
  job.spec.replicas = 2;
  job.spec.train.epochs = 10;
  job.status.phase = "Running";
  job.status.attempt = 1;
  job.status.restarts = 1;
  return job;
}

std::optional<reconcile::ObservedProgress> Read(const std::string& body) {
  return reconcile::ObserveRunnerStatus(contract::ParseRunnerStatus(body));
}

TEST(ProgressLine, ShowsRankZerosLastRead) {
  EXPECT_EQ(FormatProgressLine(Job(), std::nullopt),
            "Running | attempt 1 | starting 2 replicas | restarts 1");
  EXPECT_EQ(FormatProgressLine(Job(), Read(R"({"state": "running", "step": 1200, "epoch": 1,
                                               "loss": 0.421, "samplesPerSecond": 5120.4})")),
            "Running | attempt 1 | epoch 2/10 | step 1200 | loss 0.4210 | 5120 samples/s | "
            "restarts 1");
}

// The last evaluation: rank 0's, else the job's (a restarted rank 0 has not evaluated yet).
TEST(ProgressLine, ShowsTheLastEvaluation) {
  EXPECT_EQ(FormatProgressLine(Job(), Read(R"({"state": "running", "step": 1876, "epoch": 2,
                                               "loss": 0.35, "samplesPerSecond": 5120,
                                               "test_accuracy": 0.87119996547699})")),
            "Running | attempt 1 | epoch 3/10 | step 1876 | loss 0.3500 | test accuracy 0.8712 | "
            "5120 samples/s | restarts 1");
  EXPECT_EQ(FormatProgressLine(Job(), Read(R"({"state": "running", "step": 40, "epoch": 2,
                                               "loss": 0.5, "samplesPerSecond": 80,
                                               "test_mse": 0.01234})")),
            "Running | attempt 1 | epoch 3/10 | step 40 | loss 0.5000 | test MSE 0.01234 | "
            "80 samples/s | restarts 1");
  auto job = Job();
  job.status.progress = api::Progress{1876, 2, 0, 0.35, "2026-11-27T10:00:00Z"};
  job.status.progress->test_accuracy = 0.8712;
  EXPECT_EQ(FormatProgressLine(job, Read(R"({"state": "running", "step": 2000, "epoch": 2,
                                               "loss": 0.3, "samplesPerSecond": 5120})")),
            "Running | attempt 1 | epoch 3/10 | step 2000 | loss 0.3000 | test accuracy 0.8712 | "
            "5120 samples/s | restarts 1");
}

TEST(ProgressLine, ARankZeroWithoutProgressSaysWhy) {
  EXPECT_EQ(FormatProgressLine(Job(), Read(R"({"state": "stalled", "step": 1200, "epoch": 1,
                                               "loss": 0.421, "samplesPerSecond": 0})")),
            "Running | attempt 1 | epoch 2/10 | step 1200 | loss 0.4210 | 0 samples/s, stalled | "
            "restarts 1");
  EXPECT_EQ(FormatProgressLine(Job(), Read(R"({"state": "recovering", "step": 7, "epoch": 0,
                                               "loss": 1.5, "samplesPerSecond": 0})")),
            "Running | attempt 1 | epoch 1/10 | step 7 | loss 1.5000 | 0 samples/s, recovering | "
            "restarts 1");
  // Another word from a rank (or a hostile one) is not printed: the line stays short and ours.
  const std::string odd = FormatProgressLine(
      Job(), Read(R"({"state": "\u001b[2Jpwned", "step": 7, "samplesPerSecond": 3})"));
  EXPECT_EQ(odd.find("pwned"), std::string::npos) << odd;
  EXPECT_LT(odd.size(), 256u);
}

}  // namespace
}  // namespace ringtrain::executors
