#include "runner/rendezvous/gang_gate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "common/stop.h"
#include "tests/fakes/fake_clock.h"

namespace ringtrain::rendezvous {
namespace {

class GangGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gang_gate_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/placed";
    ResetStopForTest();
  }
  void TearDown() override {
    std::remove(path_.c_str());
    ::rmdir(dir_.c_str());
    ResetStopForTest();
  }
  void Write(const std::string& text) { std::ofstream(path_, std::ios::trunc) << text; }

  // Sleeps by moving the fake clock; runs `at_sleep(n)` before the n-th sleep returns.
  GateSleep Sleeper(std::function<void(int)> at_sleep) {
    return [this, at_sleep](Duration d) {
      clock_.Advance(d);
      at_sleep(++sleeps_);
      return !StopRequested();
    };
  }

  testing::FakeClock clock_;
  std::string dir_;
  std::string path_;
  int sleeps_ = 0;
};

TEST_F(GangGateTest, OpensWhenTheFileGetsAValue) {
  Write("");  // the kubelet's projection of an absent annotation: an empty file
  Status s = WaitForGangGate(path_, std::chrono::seconds(60), clock_, Sleeper([this](int n) {
                               if (n == 5) Write("true");
                             }));
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(sleeps_, 5);
}

TEST_F(GangGateTest, AnOpenGateDoesNotWait) {
  Write("true\n");
  Status s = WaitForGangGate(path_, std::chrono::seconds(60), clock_, Sleeper([](int) {}));
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(sleeps_, 0);
}

TEST_F(GangGateTest, AMissingFileIsClosedNotAnError) {
  Status s = WaitForGangGate(path_, std::chrono::seconds(60), clock_, Sleeper([this](int n) {
                               if (n == 3) Write("true");
                             }));
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(sleeps_, 3);
}

TEST_F(GangGateTest, WhitespaceIsStillClosedAndTheBoundEndsTheWait) {
  Write(" \n\t");
  Status s = WaitForGangGate(path_, std::chrono::seconds(2), clock_, Sleeper([](int) {}),
                             std::chrono::milliseconds(100));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("not placed within 2s"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(path_), std::string::npos) << s.message();
  EXPECT_EQ(sleeps_, 20);
}

TEST_F(GangGateTest, AStopEndsTheWait) {
  Write("");
  Status s = WaitForGangGate(path_, std::chrono::seconds(60), clock_, Sleeper([](int n) {
                               if (n == 2) RequestStop(15);
                             }));
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
  EXPECT_EQ(sleeps_, 2);
}

TEST_F(GangGateTest, AnUnreadableGateIsAnError) {
  // A directory where the file should be: it exists, and reading it fails at once.
  Status s = WaitForGangGate(dir_, std::chrono::seconds(60), clock_, Sleeper([](int) {}));
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(sleeps_, 0);
}

}  // namespace
}  // namespace ringtrain::rendezvous
