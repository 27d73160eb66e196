#include "common/json_fields.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace ringtrain {
namespace {

using nlohmann::json;

TEST(FieldsTest, ReadsTypedValuesAndKeepsDefaultsForAbsentOrNull) {
  json obj = json::parse(R"({"n": 5, "d": 0.5, "b": true, "s": "x", "l": ["a", "b"], "z": null})");
  Fields f(obj, "spec.runPolicy");
  std::int64_t n = 0;
  int absent = 7;
  int null_value = 9;
  double d = 0;
  bool b = false;
  std::string s;
  std::vector<std::string> l;
  ASSERT_TRUE(f.Int("n", 0, 10, &n).ok());
  ASSERT_TRUE(f.Int("missing", 0, 10, &absent).ok());
  ASSERT_TRUE(f.Int("z", 0, 10, &null_value).ok());
  ASSERT_TRUE(f.Number("d", 0, true, &d).ok());
  ASSERT_TRUE(f.Bool("b", &b).ok());
  ASSERT_TRUE(f.String("s", &s).ok());
  ASSERT_TRUE(f.Strings("l", &l).ok());
  EXPECT_EQ(n, 5);
  EXPECT_EQ(absent, 7);
  EXPECT_EQ(null_value, 9);
  EXPECT_EQ(d, 0.5);
  EXPECT_TRUE(b);
  EXPECT_EQ(s, "x");
  EXPECT_EQ(l, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(f.NoUnknown().ok());
}

TEST(FieldsTest, ErrorsNameTheFullFieldPath) {
  json obj = json::parse(
      R"({"backoffLimit": -1, "limit": "3", "rate": 0, "flag": "yes", "mode": "Some",
          "cmd": ["a", 2], "group": 3, "big": 18446744073709551615})");
  Fields f(obj, "spec.runPolicy");
  int i = 0;
  std::int64_t big = 0;
  double d = 1;
  bool b = false;
  std::string e = "None";
  std::vector<std::string> l;
  EXPECT_EQ(f.Int("backoffLimit", 0, 1000, &i).message(),
            "spec.runPolicy.backoffLimit: must be at least 0, got -1");
  EXPECT_EQ(f.Int("limit", 0, 1000, &i).message(),
            "spec.runPolicy.limit: must be an integer, got a string \"3\"");
  EXPECT_EQ(f.Int("big", 0, 100, &big).message(),
            "spec.runPolicy.big: must be at most 100, got 18446744073709551615");
  EXPECT_EQ(f.Number("rate", 0, true, &d).message(),
            "spec.runPolicy.rate: must be greater than 0.0, got 0");
  EXPECT_EQ(f.Bool("flag", &b).message(),
            "spec.runPolicy.flag: must be true or false, got \"yes\"");
  EXPECT_EQ(f.Enum("mode", {"None", "All"}, &e).message(),
            "spec.runPolicy.mode: must be one of None, All, got \"Some\"");
  EXPECT_EQ(e, "None");
  // Choices that are no plain word (delimiters) are quoted, else the list cannot be read.
  EXPECT_EQ(f.Enum("mode", {"auto", ",", "\t", " "}, &e).message(),
            "spec.runPolicy.mode: must be one of auto, \",\", \"\\t\", \" \", got \"Some\"");
  EXPECT_EQ(f.Strings("cmd", &l).message(),
            "spec.runPolicy.cmd[1]: must be a string, got an integer 2");
  EXPECT_TRUE(l.empty());
  EXPECT_EQ(f.Object("group").status().message(),
            "spec.runPolicy.group: must be an object, got an integer");
  EXPECT_EQ(i, 0);
  EXPECT_EQ(d, 1);
}

TEST(FieldsTest, NoUnknownNamesTheFirstKeyNeverRead) {
  json obj = json::parse(R"({"replicas": 2, "replica": 3})");
  Fields f(obj, "spec");
  int replicas = 1;
  ASSERT_TRUE(f.Int("replicas", 1, 10, &replicas).ok());
  EXPECT_EQ(f.NoUnknown().message(), "spec.replica: unknown field");
  Fields top(obj, "");
  EXPECT_EQ(top.Path("replicas"), "replicas");
}

TEST(FieldsTest, LenientReadsFallBackOnMissingOrMistypedFields) {
  json obj = json::parse(R"({"name": "a", "code": 410, "ratio": 0.5, "wrong": [1]})");
  EXPECT_EQ(StringField(obj, "name"), "a");
  EXPECT_EQ(StringField(obj, "wrong", "fb"), "fb");
  EXPECT_EQ(StringField(json("scalar"), "name", "fb"), "fb");
  EXPECT_EQ(IntField(obj, "code"), 410);
  EXPECT_EQ(IntField(obj, "ratio", -1), -1);
  EXPECT_EQ(NumberField(obj, "ratio"), 0.5);
  EXPECT_EQ(NumberField(obj, "code"), 410.0);
  EXPECT_EQ(NumberField(obj, "name", 2.0), 2.0);
}

TEST(FieldsTest, QuoteIsBoundedAscii) {
  EXPECT_EQ(QuoteJson(json("\xc3\xa9")), "\"\\u00e9\"");
  const std::string quoted = QuoteJson(json(std::string(200, 'x')));
  EXPECT_EQ(quoted.size(), 60u);
  EXPECT_EQ(quoted.substr(57), "...");
  EXPECT_EQ(JsonTypeName(json::array()), "a list");
}

}  // namespace
}  // namespace ringtrain
