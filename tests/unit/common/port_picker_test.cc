// The picker never hands out one port twice, even from a kernel that hands a released port to
// the next bind(0) (what a local gang's rendezvous and metrics ports once collided on). The
// kernel is scripted; no port here is bound by anyone but the picker's own checks.
#include "common/port_picker.h"

#include <gtest/gtest.h>

#include <deque>
#include <set>

namespace ringtrain::net {
namespace {

// Answers from `script` first, then from the real kernel.
PortPicker::Probe Scripted(std::deque<int> script) {
  return [script = std::move(script)]() mutable -> StatusOr<int> {
    if (script.empty()) return PortPicker::BindAndRelease();
    const int port = script.front();
    script.pop_front();
    return port;
  };
}

int RealFreePort() {
  auto p = PortPicker::BindAndRelease();
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : 0;
}

TEST(PortPickerTest, PortTheKernelHandsOutAgainIsNotHandedOutTwice) {
  const int port = RealFreePort();
  // The rendezvous port, then two ranks' metrics ports: the kernel repeats itself twice.
  PortPicker picker(Scripted({port, port, port}));
  auto master = picker.Pick();
  auto metrics0 = picker.Pick();
  auto metrics1 = picker.Pick();
  ASSERT_TRUE(master.ok() && metrics0.ok() && metrics1.ok());
  EXPECT_EQ(*master, port);
  EXPECT_EQ((std::set<int>{*master, *metrics0, *metrics1}).size(), 3u)
      << *master << " " << *metrics0 << " " << *metrics1;
}

TEST(PortPickerTest, RangeOverlappingAPortHandedOutIsSkipped) {
  const int port = RealFreePort();
  ASSERT_GT(port, 1024);
  PortPicker picker(Scripted({port, port - 1}));
  auto single = picker.Pick();
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  // port - 1 and port: the second is taken by the first pick.
  auto base = picker.PickRange(2);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  EXPECT_NE(*base, port - 1);
  EXPECT_NE(*base, port);
  EXPECT_NE(*base + 1, port);
}

TEST(PortPickerTest, KernelThatOnlyRepeatsIsAnErrorNotAHang) {
  PortPicker picker([]() -> StatusOr<int> { return 40001; });
  ASSERT_TRUE(picker.Pick().ok());
  auto again = picker.Pick();
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(again.status().message().find("handed out before"), std::string::npos)
      << again.status().ToString();
}

TEST(PortPickerTest, ProbeErrorIsReturned) {
  PortPicker picker([]() -> StatusOr<int> { return Unavailable("no descriptors"); });
  auto p = picker.Pick();
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("no descriptors"), std::string::npos);
}

}  // namespace
}  // namespace ringtrain::net
