// The controller's per-job series (labels namespace and job, the TrainingJob's): one phase
// series per job, its step and last evaluation while the status has them, all gone with the job
// or with the lead; the counts by phase follow.
#include "controller/executors/kubernetes/controller_metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace ringtrain::op {
namespace {

bool Has(const ControllerMetrics& m, const std::string& line) {
  return m.RenderText().find(line) != std::string::npos;
}

TEST(ControllerMetricsJobs, EachJobHasItsPhaseAndFigures) {
  ControllerMetrics m;
  m.SetJobPhase("ml/mnist", "Running");
  m.SetJobFigures("ml/mnist", 938, 0.8528, -1);
  EXPECT_TRUE(
      Has(m, R"(ringtrain_controller_job_phase{job="mnist",namespace="ml",phase="Running"} 1)"));
  EXPECT_TRUE(Has(m, R"(ringtrain_controller_job_step{job="mnist",namespace="ml"} 938)"));
  EXPECT_TRUE(
      Has(m, R"(ringtrain_controller_job_test_accuracy_ratio{job="mnist",namespace="ml"} 0.8528)"));
  EXPECT_FALSE(Has(m, R"(ringtrain_controller_job_test_mse{)")) << "no regression figure";
  EXPECT_TRUE(Has(m, R"(ringtrain_controller_jobs{phase="Running"} 1)"));

  // A new phase replaces the old one's series; the counts follow.
  m.SetJobPhase("ml/mnist", "Succeeded");
  m.SetJobFigures("ml/mnist", 4690, 0.8945, -1);
  EXPECT_FALSE(Has(m, R"(phase="Running"} 1)"));
  EXPECT_TRUE(
      Has(m, R"(ringtrain_controller_job_phase{job="mnist",namespace="ml",phase="Succeeded"} 1)"));
  EXPECT_TRUE(Has(m, R"(ringtrain_controller_jobs{phase="Succeeded"} 1)"));
  EXPECT_TRUE(Has(m, R"(ringtrain_controller_job_step{job="mnist",namespace="ml"} 4690)"));

  // A second job, a regression model's.
  m.SetJobPhase("default/housing", "Running");
  m.SetJobFigures("default/housing", 12, -1, 0.0123);
  EXPECT_TRUE(
      Has(m, R"(ringtrain_controller_job_test_mse{job="housing",namespace="default"} 0.0123)"));
  // A figure the status no longer has goes (a new job of the same name, no progress yet).
  m.SetJobFigures("default/housing", -1, -1, -1);
  EXPECT_FALSE(Has(m, R"(job="housing",namespace="default"} )"));
  EXPECT_TRUE(Has(m, R"(ringtrain_controller_job_phase{job="housing")"));

  // A job never named by SetJobPhase is not exported.
  m.SetJobFigures("ml/ghost", 5, 0.5, -1);
  EXPECT_FALSE(Has(m, R"(job="ghost")"));

  // A deleted job's series go.
  m.SetJobPhase("ml/mnist", "");
  EXPECT_FALSE(Has(m, R"(job="mnist")"));
  EXPECT_TRUE(Has(m, R"(ringtrain_controller_jobs{phase="Succeeded"} 0)"));
  EXPECT_TRUE(Has(m, R"(ringtrain_controller_jobs{phase="Running"} 1)"));

  // Losing the lead forgets every job: only the leader's figures are current.
  m.SetLeader(true);
  m.SetLeader(false);
  EXPECT_FALSE(Has(m, R"(job="housing")"));
  EXPECT_TRUE(Has(m, R"(ringtrain_controller_jobs{phase="Running"} 0)"));
  EXPECT_TRUE(Has(m, R"(ringtrain_controller_is_leader 0)"));
}

}  // namespace
}  // namespace ringtrain::op
