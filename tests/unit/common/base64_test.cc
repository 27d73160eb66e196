#include "common/base64.h"

#include <gtest/gtest.h>

namespace ringtrain {
namespace {

TEST(Base64, RoundTripsRfc4648Vectors) {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(Base64Encode(plain), encoded);
    EXPECT_EQ(Base64Decode(encoded), std::string(plain)) << encoded;
  }
}

TEST(Base64, UrlAlphabetAndUnpadded) {
  std::string bytes = "\xfb\xff\xbf";
  EXPECT_EQ(Base64Encode(bytes), "+/+/");
  EXPECT_EQ(Base64Encode(bytes, /*url=*/true), "-_-_");
  EXPECT_EQ(Base64Decode("-_-_"), bytes);
  EXPECT_EQ(Base64Decode("Zm8"), std::string("fo"));
}

TEST(Base64, IgnoresLineBreaksRejectsGarbage) {
  EXPECT_EQ(Base64Decode("Zm9v\nYmFy\r\n"), std::string("foobar"));
  EXPECT_FALSE(Base64Decode("Zm9v YmFy").has_value());
  EXPECT_FALSE(Base64Decode("Zm9v*").has_value());
  EXPECT_FALSE(Base64Decode("Z").has_value());
}

}  // namespace
}  // namespace ringtrain
