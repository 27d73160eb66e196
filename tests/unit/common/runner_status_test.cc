// The /status parser shared by the operator and `ringtrain run`: lenient with what is harmless,
// an error (never an exception) for what is wrong.
#include "common/runner_status.h"

#include <gtest/gtest.h>

#include <string>

#include "common/http.h"

namespace ringtrain::contract {
namespace {

TEST(RunnerStatus, ReadsTheRunnersFields) {
  auto s = ParseRunnerStatus(
      R"({"job":"j","rank":0,"state":"running","epoch":2,"step":532,"steps_total":3752,)"
      R"("samples_per_second":21526.5,"loss":0.42,"message":"","extra":{"x":[1]}})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->step, 532);
  EXPECT_EQ(s->epoch, 2);
  EXPECT_DOUBLE_EQ(s->samples_per_second, 21526.5);
  EXPECT_DOUBLE_EQ(s->loss, 0.42);
  EXPECT_EQ(s->state, "running");
  auto camel = ParseRunnerStatus(R"({"step":1,"samplesPerSecond":7,"resumeWarning":"a\nb"})");
  ASSERT_TRUE(camel.ok()) << camel.status().ToString();
  EXPECT_DOUBLE_EQ(camel->samples_per_second, 7);
  EXPECT_EQ(camel->resume_warning, "a b");
  EXPECT_EQ(camel->start_step, -1) << "absent";
  EXPECT_EQ(camel->recoveries, 0);
  EXPECT_EQ(camel->test_accuracy, -1) << "absent: no evaluation yet";
  EXPECT_EQ(camel->test_mse, -1);
}

// The last evaluation, as the runner writes it (runner_metrics.cc: test_accuracy for a
// classification model, test_mse for a regression one), or in the status's own spelling.
TEST(RunnerStatus, ReadsTheLastEvaluation) {
  auto s =
      ParseRunnerStatus(R"({"step":938,"state":"running","test_accuracy":0.8945000171661377})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_DOUBLE_EQ(s->test_accuracy, 0.8945000171661377);
  EXPECT_EQ(s->test_mse, -1);
  auto mse = ParseRunnerStatus(R"({"step":5,"test_mse":0.0123})");
  ASSERT_TRUE(mse.ok()) << mse.status().ToString();
  EXPECT_DOUBLE_EQ(mse->test_mse, 0.0123);
  EXPECT_EQ(mse->test_accuracy, -1);
  auto camel = ParseRunnerStatus(R"({"testAccuracy":1,"test_accuracy":0.5,"testMSE":0})");
  ASSERT_TRUE(camel.ok()) << camel.status().ToString();
  EXPECT_DOUBLE_EQ(camel->test_accuracy, 1);
  EXPECT_DOUBLE_EQ(camel->test_mse, 0);
  auto null = ParseRunnerStatus(R"({"test_accuracy":null})");
  ASSERT_TRUE(null.ok());
  EXPECT_EQ(null->test_accuracy, -1);
}

// The gang's account of its in-place recoveries, as the runner writes it (runner_metrics.cc).
TEST(RunnerStatus, ReadsTheRecoveryAccount) {
  auto s =
      ParseRunnerStatus(R"({"step":2400,"state":"running","startStep":1000,"recoveries":2,)"
                        R"("recoveryStepsLost":1,"recoverySeconds":7.25,"lastRecoveryStep":2372})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->start_step, 1000);
  EXPECT_EQ(s->recoveries, 2);
  EXPECT_EQ(s->recovery_steps_lost, 1);
  EXPECT_DOUBLE_EQ(s->recovery_seconds, 7.25);
  EXPECT_EQ(s->last_recovery_step, 2372);
  EXPECT_FALSE(ParseRunnerStatus(R"({"recoveries":-1})").ok());
  EXPECT_FALSE(ParseRunnerStatus(R"({"recoveryStepsLost":"1"})").ok());
}

TEST(RunnerStatus, MissingAndNullFieldsKeepDefaults) {
  auto s = ParseRunnerStatus(R"({"step":5,"loss":null})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->step, 5);
  EXPECT_EQ(s->loss, 0);
  EXPECT_EQ(s->epoch, 0);
}

TEST(RunnerStatus, WrongTypesAndRangesAreErrorsNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"step":"12"})", "step: must be an integer"},
      {R"({"step":1.5})", "step: must be an integer"},
      {R"({"step":-1})", "step: out of range"},
      {R"({"step":18446744073709551615})", "step: out of range"},
      {R"({"epoch":4294967296})", "epoch: out of range"},
      {R"({"loss":"low"})", "loss: must be a number"},
      {R"({"samples_per_second":[1]})", "samples_per_second: must be a number"},
      // The job's status (CRD minimum: 0) refuses these: the status write would fail forever.
      {R"({"samplesPerSecond":-3.5})", "samplesPerSecond: out of range"},
      {R"({"samples_per_second":-1})", "samples_per_second: out of range"},
      {R"({"recoverySeconds":-0.5})", "recoverySeconds: out of range"},
      {R"({"test_accuracy":1.5})", "test_accuracy: out of range"},
      {R"({"testAccuracy":-0.1})", "testAccuracy: out of range"},
      {R"({"test_accuracy":"0.9"})", "test_accuracy: must be a number"},
      {R"({"test_mse":-2})", "test_mse: out of range"},
      {R"({"testMSE":{}})", "testMSE: must be a number"},
      {R"({"state":3})", "state: must be a string"},
      {R"([1,2])", "not a JSON object"},
      {R"("x")", "not a JSON object"},
      {"{\"step\":1", "not valid JSON"},
      {"{\"state\":\"\xff\"}", "not valid JSON"},
      {"", "not valid JSON"},
  };
  for (const auto& [body, want] : cases) {
    auto s = ParseRunnerStatus(body);
    ASSERT_FALSE(s.ok()) << body;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_NE(s.status().message().find(want), std::string::npos)
        << body << " -> " << s.status().message();
  }
  EXPECT_FALSE(ParseRunnerStatus(std::string(kMaxStatusBytes + 1, ' ')).ok());
  EXPECT_FALSE(ParseRunnerStatus(std::string(20000, '[') + std::string(20000, ']')).ok());
}

TEST(RunnerStatus, FetchSaysUnavailableOrMalformed) {
  auto server = http::Server::Create(
      "127.0.0.1", 0, {{"/status", [] {
                          return http::Response{200, "application/json", R"({"step":3})"};
                        }}});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto s = FetchRunnerStatus("127.0.0.1", (*server)->port(), Duration(2000));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->step, 3);
  auto bad = http::Server::Create(
      "127.0.0.1", 0, {{"/status", [] {
                          return http::Response{200, "application/json", R"({"step":"3"})"};
                        }}});
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(FetchRunnerStatus("127.0.0.1", (*bad)->port(), Duration(2000)).status().code(),
            StatusCode::kInvalidArgument);
  const int gone = (*bad)->port();
  bad->reset();
  EXPECT_EQ(FetchRunnerStatus("127.0.0.1", gone, Duration(2000)).status().code(),
            StatusCode::kUnavailable);
}

// A text field is kept to 1024 bytes, cut between characters: it goes into the job's status and
// events, which must stay valid UTF-8 (the status's JSON dump throws on a cut character: every
// pass of the job would fail).
TEST(RunnerStatus, ALongTextIsCutBetweenCharacters) {
  std::string cause = "x";  // one byte, then two-byte characters: byte 1024 is inside one
  for (int i = 0; i < 600; ++i) cause += "\u00e9";
  auto s =
      ParseRunnerStatus(R"({"step":1,"state":"recovering","recoveryCause":")" + cause + R"("})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->recovery_cause.size(), 1023u);
  EXPECT_EQ(s->recovery_cause.substr(0, 3), "x\u00e9");
  EXPECT_EQ(s->recovery_cause.substr(s->recovery_cause.size() - 2), "\u00e9");
  auto wrong = ParseRunnerStatus(R"({"step":1,"recoveryCause":7})");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("recoveryCause"), std::string::npos);
  auto age = ParseRunnerStatus(R"({"step":1,"state":"recovering","recoveringSeconds":12.5})");
  ASSERT_TRUE(age.ok()) << age.status().ToString();
  EXPECT_EQ(age->recovering_seconds, 12.5);
  EXPECT_EQ(s->recovering_seconds, -1) << "absent";
  EXPECT_FALSE(ParseRunnerStatus(R"({"step":1,"recoveringSeconds":-3})").ok());
}

}  // namespace
}  // namespace ringtrain::contract
