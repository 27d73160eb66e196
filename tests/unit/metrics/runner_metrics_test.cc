// The runner's own series, driven directly: the loss and test series exist only once they have a
// value of their kind.
#include "runner/metrics/runner_metrics.h"

#include <map>
#include <optional>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

RunnerLabels Rank0() { return {"mnist", "team-a", 0}; }

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

}  // namespace
}  // namespace ringtrain::metrics
