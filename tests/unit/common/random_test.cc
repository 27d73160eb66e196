#include "common/random.h"

#include <gtest/gtest.h>

#include <set>

namespace ringtrain {
namespace {

TEST(RandomToken, IsLowercaseHexOfTwiceTheBytes) {
  for (std::size_t bytes : {1u, 16u, 32u}) {
    const std::string t = RandomToken(bytes);
    EXPECT_EQ(t.size(), 2 * bytes);
    EXPECT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos) << t;
  }
  EXPECT_EQ(RandomToken().size(), 32u);  // 128 bits by default
}

TEST(RandomToken, DoesNotRepeat) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(seen.insert(RandomToken()).second);
}

}  // namespace
}  // namespace ringtrain
