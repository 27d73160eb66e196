// The runner's own series and /status, driven directly: the recovery counter accrues while the
// rank does not train (on a fake clock), /status and the samples/s gauge read "recovering" and 0
// meanwhile, a running rank that completes no step for longer than its stall threshold reads
// "stalled" and 0 until its next step (unless it evaluates or writes a checkpoint), the last
// step's time is a gauge, and the loss and test series exist only once they have a value of
// their kind.
#include "runner/metrics/runner_metrics.h"

#include <chrono>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/runner_status.h"
#include "tests/fakes/fake_clock.h"

namespace ringtrain::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The value of the one series of family `name` in Prometheus text; nullopt when it has none.
std::optional<double> Sample(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::optional<double> out;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    EXPECT_FALSE(out.has_value()) << "more than one series of " << name;
    out = std::stod(line.substr(line.rfind(' ') + 1));
  }
  return out;
}

double RecoverySeconds(const RunnerMetrics& m) {
  return Sample(m.RenderText(), "ringtrain_recovery_seconds_total").value_or(-1);
}

RunnerLabels Rank0() { return {"mnist", "team-a", 0}; }

contract::RunnerStatus Status(const RunnerMetrics& m) {
  auto s = contract::ParseRunnerStatus(m.RenderStatusJson());
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : contract::RunnerStatus{};
}

class RunnerMetricsRecoveryTest : public ::testing::Test {
 protected:
  testing::FakeClock clock_;
  RunnerMetrics m_{Rank0(), clock_};

  void Advance(double seconds) {
    clock_.Advance(std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds)));
  }
};

// rate() of the counter is the fraction of time lost at any moment: it moves with the outage,
// not in one lump when training resumes.
TEST_F(RunnerMetricsRecoveryTest, CounterAccruesDuringTheOutageNotInALumpAfterIt) {
  EXPECT_EQ(RecoverySeconds(m_), 0);
  const SteadyTime failed = clock_.SteadyNow();
  Advance(0.5);  // the rank noticed the loss half a second before it starts waiting
  m_.BeginRecovery(failed);
  EXPECT_DOUBLE_EQ(RecoverySeconds(m_), 0.5);
  Advance(2);
  EXPECT_DOUBLE_EQ(RecoverySeconds(m_), 2.5);
  Advance(1);
  EXPECT_DOUBLE_EQ(RecoverySeconds(m_), 3.5);
  Advance(0.25);
  // The gang's account of the outage started 1 s before this rank noticed: the rest is added.
  m_.ObserveRecovery(4.75, 1);
  EXPECT_DOUBLE_EQ(RecoverySeconds(m_), 4.75);
  const std::string text = m_.RenderText();
  EXPECT_EQ(Sample(text, "ringtrain_recoveries_total"), 1);
  EXPECT_EQ(Sample(text, "ringtrain_recovery_steps_lost_total"), 1);
  Advance(60);  // training again: nothing accrues
  EXPECT_DOUBLE_EQ(RecoverySeconds(m_), 4.75);
}

TEST_F(RunnerMetricsRecoveryTest, AccruesWithoutReadsAndNeverGoesBack) {
  m_.BeginRecovery(clock_.SteadyNow());
  Advance(3);
  // The gang's account is shorter than what this rank lived through (it excludes the state
  // transfer): a counter never goes back.
  m_.ObserveRecovery(2.5, 0);
  EXPECT_DOUBLE_EQ(RecoverySeconds(m_), 3);
  // A second outage adds to the first.
  m_.BeginRecovery(clock_.SteadyNow());
  Advance(1);
  EXPECT_DOUBLE_EQ(RecoverySeconds(m_), 4);
  m_.ObserveRecovery(1, 0);
  EXPECT_DOUBLE_EQ(RecoverySeconds(m_), 4);
  EXPECT_EQ(Sample(m_.RenderText(), "ringtrain_recoveries_total"), 2);
}

TEST_F(RunnerMetricsRecoveryTest, ARecoveryRoundThatFailsKeepsTheOutagesStart) {
  const SteadyTime failed = clock_.SteadyNow();
  m_.BeginRecovery(failed);
  Advance(2);
  m_.BeginRecovery(clock_.SteadyNow());  // the replacement was lost too: the same outage
  Advance(1);
  m_.ObserveRecovery(3, 1);
  EXPECT_DOUBLE_EQ(RecoverySeconds(m_), 3);
}

// A replacement was not in the outage: the survivors' series hold its seconds, and a lump now
// would read as time lost after training resumed.
TEST_F(RunnerMetricsRecoveryTest, AReplacementCountsTheRecoveryButNotTheSecondsBeforeIt) {
  Advance(10);
  m_.ObserveRecovery(7, 1);
  const std::string text = m_.RenderText();
  EXPECT_EQ(Sample(text, "ringtrain_recovery_seconds_total"), 0);
  EXPECT_EQ(Sample(text, "ringtrain_recoveries_total"), 1);
  EXPECT_EQ(Sample(text, "ringtrain_recovery_steps_lost_total"), 1);
}

TEST_F(RunnerMetricsRecoveryTest, EndRecoveryStopsTheCounterWithoutAnAccount) {
  m_.BeginRecovery(clock_.SteadyNow());
  Advance(2);
  m_.EndRecovery();  // the gang started over: no in-place recovery to count
  Advance(5);
  const std::string text = m_.RenderText();
  EXPECT_EQ(Sample(text, "ringtrain_recovery_seconds_total"), 2);
  EXPECT_EQ(Sample(text, "ringtrain_recoveries_total"), 0);
}

TEST_F(RunnerMetricsRecoveryTest, StatusSaysRecoveringWithNoThroughputUntilTheNextReport) {
  Progress p;
  p.state = "running";
  p.step = 120;
  p.samples_per_second = 5000;
  p.loss = 0.5;
  m_.UpdateProgress(p);
  m_.SetSamplesPerSecond(2500);
  m_.BeginRecovery(clock_.SteadyNow());
  contract::RunnerStatus s = Status(m_);
  EXPECT_EQ(s.state, "recovering");
  EXPECT_EQ(s.samples_per_second, 0);
  EXPECT_EQ(s.step, 120) << "the last step the rank reported";
  EXPECT_EQ(s.loss, 0.5);
  EXPECT_EQ(Sample(m_.RenderText(), "ringtrain_samples_per_second"), 0);
  // The first report after training resumes replaces it.
  p.step = 121;
  p.samples_per_second = 4000;
  m_.UpdateProgress(p);
  m_.SetSamplesPerSecond(2000);
  s = Status(m_);
  EXPECT_EQ(s.state, "running");
  EXPECT_EQ(s.samples_per_second, 4000);
  EXPECT_EQ(Sample(m_.RenderText(), "ringtrain_samples_per_second"), 2000);
}

class RunnerMetricsStallTest : public RunnerMetricsRecoveryTest {
 protected:
  // The trainer's first report of a pass: running at `rate` samples/s per rank (world of 2).
  void Report(double rate, long long step) {
    Progress p;
    p.state = "running";
    p.world_size = 2;
    p.step = step;
    p.samples_per_second = rate * 2;
    m_.UpdateProgress(p);
    m_.SetSamplesPerSecond(rate);
  }
  double Gauge() { return Sample(m_.RenderText(), "ringtrain_samples_per_second").value_or(-1); }
};

TEST_F(RunnerMetricsStallTest, ARunningRankWithoutAStepPastTheThresholdReadsStalledUntilItsNext) {
  m_.ObserveStep(0.1, 32);
  Report(320, 1);
  EXPECT_EQ(m_.stall_threshold_seconds(), RunnerMetrics::kStallFloorSeconds);
  Advance(RunnerMetrics::kStallFloorSeconds);  // at the threshold: not yet
  EXPECT_EQ(Status(m_).state, "running");
  EXPECT_EQ(Status(m_).samples_per_second, 640);
  EXPECT_EQ(Gauge(), 320);
  Advance(0.5);
  contract::RunnerStatus s = Status(m_);
  EXPECT_EQ(s.state, "stalled");
  EXPECT_EQ(s.samples_per_second, 0);
  EXPECT_EQ(s.step, 1) << "the last step it reported";
  EXPECT_EQ(Gauge(), 0);
  EXPECT_THAT(m_.RenderStatusJson(), HasSubstr("no step completed for 10s"));
  EXPECT_EQ(m_.progress().state, "stalled");
  Advance(300);  // a peer hung in a collective: minutes, until the collective timeout
  EXPECT_EQ(Status(m_).state, "stalled");
  EXPECT_EQ(Gauge(), 0);
  // The next step ends it, and the trainer's report right after it gives the real rate.
  m_.ObserveStep(310.5, 32);
  EXPECT_EQ(Status(m_).state, "running");
  Report(1.5, 2);
  s = Status(m_);
  EXPECT_EQ(s.state, "running");
  EXPECT_EQ(s.samples_per_second, 3);
  EXPECT_EQ(s.step, 2);
  EXPECT_EQ(Gauge(), 1.5);
}

TEST_F(RunnerMetricsStallTest, TheThresholdIsTenMeanStepsWhenThatIsLongerThanTheFloor) {
  for (int i = 0; i < 3; ++i) {
    Advance(4);
    m_.ObserveStep(4, 32);
  }
  Report(8, 3);
  EXPECT_DOUBLE_EQ(m_.stall_threshold_seconds(), 40);
  Advance(39);
  EXPECT_EQ(Status(m_).state, "running") << "slow steps are not a stall";
  Advance(2);
  EXPECT_EQ(Status(m_).state, "stalled");
  // One slow step moves the mean by a tenth of the difference.
  m_.ObserveStep(44, 32);
  EXPECT_DOUBLE_EQ(m_.stall_threshold_seconds(), 10 * (4 + 0.1 * 40));
}

TEST_F(RunnerMetricsStallTest, ARankThatStartsRunningIsNotLateForAStepBeforeIt) {
  m_.ObserveStep(0.1, 32);
  Advance(60);  // e.g. an in-place recovery: the last step is a minute old
  m_.BeginRecovery(clock_.SteadyNow());
  Advance(60);
  EXPECT_EQ(Status(m_).state, "recovering");
  Report(0, 1);  // the gang trains again: the clock counts from here
  Advance(5);
  EXPECT_EQ(Status(m_).state, "running");
  Advance(6);
  EXPECT_EQ(Status(m_).state, "stalled") << "no step since it started running";
}

TEST_F(RunnerMetricsStallTest, OnlyARunningRankStalls) {
  Advance(600);
  EXPECT_EQ(Status(m_).state, "starting");  // a rendezvous takes what it takes
  for (const char* state : {"evaluating", "succeeded", "failed"}) {
    Progress p;
    p.state = state;
    p.samples_per_second = 100;
    m_.UpdateProgress(p);
    m_.SetSamplesPerSecond(50);
    Advance(600);
    contract::RunnerStatus s = Status(m_);
    EXPECT_EQ(s.state, state);
    EXPECT_EQ(s.samples_per_second, 100) << state;
    EXPECT_EQ(Gauge(), 50) << state;
  }
}

// An evaluation or a checkpoint write is no stall, however long; the stall clock restarts at its
// end.
TEST_F(RunnerMetricsStallTest, WorkBetweenStepsIsNoStall) {
  m_.ObserveStep(0.1, 32);
  Report(320, 1);
  Advance(5);
  m_.BeginWorkBetweenSteps();
  Advance(600);
  EXPECT_EQ(Status(m_).state, "running");
  EXPECT_EQ(Gauge(), 320);
  m_.EndWorkBetweenSteps();
  Advance(10);
  EXPECT_EQ(Status(m_).state, "running");
  Advance(1);
  EXPECT_EQ(Status(m_).state, "stalled");
}

// A rank that does not write the checkpoint waits for it in its next step: that step ends the
// work, and its time (the wait) does not count in the mean step time.
TEST_F(RunnerMetricsStallTest, TheNextStepEndsWorkBetweenStepsAndStaysOutOfTheMean) {
  m_.ObserveStep(0.1, 32);
  Report(320, 1);
  m_.BeginWorkBetweenSteps();
  Advance(120);
  EXPECT_EQ(Status(m_).state, "running");
  m_.ObserveStep(120, 32);
  EXPECT_EQ(m_.stall_threshold_seconds(), RunnerMetrics::kStallFloorSeconds)
      << "the mean is still 0.1 s";
  Advance(11);
  EXPECT_EQ(Status(m_).state, "stalled") << "the work ended with that step";
}

TEST_F(RunnerMetricsStallTest, TheLastStepsUnixTimeIsAGaugeFromTheFirstStep) {
  const std::string name = "ringtrain_last_step_timestamp_seconds";
  EXPECT_THAT(m_.RenderText(), Not(HasSubstr(name))) << "no step, no series";
  Advance(2.5);
  m_.ObserveStep(0.5, 32);
  const double at = std::chrono::duration<double>(clock_.Now().time_since_epoch()).count();
  EXPECT_EQ(at, 1767225602.5);  // FakeClock's 2026-01-01T00:00:00Z, 2.5 s on
  EXPECT_EQ(Sample(m_.RenderText(), name), at);
  Advance(30);
  EXPECT_EQ(Sample(m_.RenderText(), name), at) << "it holds while no step completes";
  m_.ObserveStep(30, 32);
  EXPECT_EQ(Sample(m_.RenderText(), name), at + 30);
}

TEST(RunnerMetricsTest, LossAndTestSeriesExistOnlyFromTheirFirstValue) {
  RunnerMetrics m(Rank0());
  std::string text = m.RenderText();
  for (const char* name :
       {"ringtrain_loss", "ringtrain_test_accuracy_ratio", "ringtrain_test_mse"}) {
    EXPECT_THAT(text, Not(HasSubstr(name))) << "no value yet, no series";
  }
  EXPECT_THAT(text, HasSubstr("ringtrain_samples_per_second{"));  // the others from the start
  m.SetLoss(2.25);
  m.SetLoss(1.5);
  text = m.RenderText();
  EXPECT_EQ(Sample(text, "ringtrain_loss"), 1.5);
  EXPECT_THAT(text, HasSubstr("rank=\"0\""));
  EXPECT_EQ(Sample(text, "ringtrain_test_accuracy_ratio"), std::nullopt);
  // A classification job evaluates an accuracy and never gets a test MSE series.
  m.SetTestAccuracy(0.0);
  text = m.RenderText();
  EXPECT_EQ(Sample(text, "ringtrain_test_accuracy_ratio"), 0.0);
  EXPECT_THAT(text, Not(HasSubstr("ringtrain_test_mse")));
}

TEST(RunnerMetricsTest, ARegressionJobGetsATestMseSeriesAndNoAccuracy) {
  RunnerMetrics m(Rank0());
  m.SetTestMse(0.125);
  const std::string text = m.RenderText();
  EXPECT_EQ(Sample(text, "ringtrain_test_mse"), 0.125);
  EXPECT_THAT(text, Not(HasSubstr("ringtrain_test_accuracy_ratio")));
}

// The operator shows why a job whose pods all run does not train (a hung peer): /status carries
// the loss rank 0 recovers from, one line, while it recovers, and not once it trains again.
TEST_F(RunnerMetricsRecoveryTest, StatusCarriesTheLossWhileItRecovers) {
  Progress p;
  p.state = "running";
  p.step = 20516;
  m_.UpdateProgress(p);
  EXPECT_EQ(Status(m_).recovery_cause, "");
  m_.BeginRecovery(clock_.SteadyNow(),
                   "step 20625: gradient all-reduce:\nall-reduce: timed out after 10s waiting "
                   "for rank 1");
  EXPECT_EQ(Status(m_).recovery_cause,
            "step 20625: gradient all-reduce: all-reduce: timed out after 10s waiting for rank 1");
  EXPECT_EQ(Status(m_).recovering_seconds, 0);
  Advance(3);
  EXPECT_EQ(Status(m_).recovering_seconds, 3) << "the outage's age, for the operator";
  // The replacement was lost too: the latest loss is the one waited on.
  m_.BeginRecovery(clock_.SteadyNow(), "rendezvous: rank 1 left");
  EXPECT_EQ(Status(m_).recovery_cause, "rendezvous: rank 1 left");
  EXPECT_EQ(Status(m_).recovering_seconds, 3) << "the same outage: its start is kept";
  // A cause of any length stays within what the operator reads.
  m_.BeginRecovery(clock_.SteadyNow(), std::string(100000, 'x'));
  EXPECT_EQ(Status(m_).recovery_cause.size(), 1024u);
  // Cut between characters, not through one (which the JSON would carry as U+FFFD): "x" and
  // two-byte characters, whose 1024th byte is the first of one.
  std::string accented = "x";
  for (int i = 0; i < 600; ++i) accented += "\u00e9";
  m_.BeginRecovery(clock_.SteadyNow(), accented);
  EXPECT_THAT(m_.RenderStatusJson(), Not(HasSubstr("\ufffd")));
  EXPECT_EQ(Status(m_).recovery_cause, accented.substr(0, 1023));
  // The outage counted as over before the next report says running: no age (not 0, a new one).
  m_.ObserveRecovery(12, 109);
  EXPECT_EQ(Status(m_).state, "recovering");
  EXPECT_EQ(Status(m_).recovering_seconds, -1);
  p.step = 20517;
  m_.UpdateProgress(p);
  EXPECT_EQ(Status(m_).state, "running");
  EXPECT_EQ(Status(m_).recovery_cause, "");
  EXPECT_THAT(m_.RenderStatusJson(), Not(HasSubstr("recoveryCause")));
  EXPECT_THAT(m_.RenderStatusJson(), Not(HasSubstr("recoveringSeconds")));
  EXPECT_EQ(Status(m_).recovering_seconds, -1);
}

}  // namespace
}  // namespace ringtrain::metrics
