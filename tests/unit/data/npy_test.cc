#include "runner/data/npy.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/unit/data/npy_writer.h"

namespace ringtrain::data {
namespace {

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("npy_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::string WriteGz(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    return path;
  }
  // Labels 0, 2 for two samples, as int64.
  std::string Labels() { return Write("y.npy", Npy("<i8", "(2,)", Bytes<std::int64_t>({0, 2}))); }
  template <typename T>
  static std::string Error(const StatusOr<T>& s) {
    return s.ok() ? "" : s.status().message();
  }

  std::filesystem::path dir_;
};

TEST_F(NpyTest, ReadsUint8ImagesScaledToUnitRangeAndInt64Labels) {
  const auto x = Write("x.npy", Npy("|u1", "(2, 2, 3)",
                                    std::string("\x00\xff\x33\x01\x02\x03"
                                                "\x04\x05\x06\x07\x08\x09",
                                                12)));
  auto t = ReadNpy({x, Labels()}, NpyOptions{});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->n, 2u);
  EXPECT_EQ(t->features, 6u);
  EXPECT_EQ(t->shape, (std::vector<std::size_t>{2, 3}));
  EXPECT_FLOAT_EQ(t->x[1], 1.0f);
  EXPECT_FLOAT_EQ(t->x[2], 0.2f);
  EXPECT_EQ(t->labels, (std::vector<std::int32_t>{0, 2}));
  EXPECT_EQ(t->task.classes, 3);
  // Said by the labels: which one.
  EXPECT_EQ(t->classes_from, "the largest label, 2 (" + Labels() + " sample 1), plus one");
  EXPECT_TRUE(ValidateTable(*t).ok());
}

TEST_F(NpyTest, HeaderVersionsTwoAndThreeAndGzip) {
  for (int version : {2, 3}) {
    const auto x = Write("x" + std::to_string(version) + ".npy",
                         Npy("<f4", "(2, 1)", Bytes<float>({1.5f, -2}), version));
    auto t = ReadNpy({x, Labels()}, NpyOptions{});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->x, (std::vector<float>{1.5f, -2}));
  }
  const auto gz = WriteGz("x.npy.gz", Npy("<i4", "(2,)", Bytes<std::int32_t>({7, -3})));
  auto t = ReadNpy({gz, Labels()}, NpyOptions{});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->x, (std::vector<float>{7, -3}));
  EXPECT_EQ(t->shape, (std::vector<std::size_t>{1}));
}

TEST_F(NpyTest, RegressionTargetsOfAnyDtype) {
  const auto x = Write("x.npy", Npy("<f8", "(2, 2)", Bytes<double>({1, 2, 3, 4})));
  const auto y = Write("yr.npy", Npy("<f4", "(2, 2)", Bytes<float>({0.5f, 1, 2, 3})));
  NpyOptions o;
  o.task.kind = Task::Kind::kRegression;
  auto t = ReadNpy({x, y}, o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->task.targets, 2);
  EXPECT_EQ(t->targets, (std::vector<float>{0.5f, 1, 2, 3}));
  o.task.targets = 1;
  EXPECT_NE(Error(ReadNpy({x, y}, o)).find("1 targets per sample"), std::string::npos);
}

TEST_F(NpyTest, HeaderErrorsNameTheFile) {
  const auto y = Labels();
  struct Case {
    std::string bytes, expect;
  };
  const std::vector<Case> cases = {
      {Npy("<f4", "(2,)", Bytes<float>({1, 2}), 1, "True"), "fortran_order is True"},
      {Npy(">f4", "(2,)", Bytes<float>({1, 2})), "big-endian"},
      {Npy("<c16", "(2,)", std::string(32, '\0')), "dtype '<c16' is not one of"},
      {Npy("<f4", "(2,)", Bytes<float>({1, 2}), 4), "format version 4"},
      {std::string("\x93NUMPX\x01\x00\x00\x00", 10), "bad magic"},
      {std::string("\x93NUMPY\x01\x00\xff\xff", 10),
       "truncated file while reading the .npy header"},
      {std::string("\x93NUMPY\x02\x00\x00\x00\x00\x01", 12), "more than 65536"},
      {Npy("<f4", "(2,", Bytes<float>({1, 2})), "malformed .npy header"},
      {Npy("<f4", "(2,)", Bytes<float>({1, 2})).replace(10, 1, "["), "malformed .npy header"},
      {Npy("<f4", "()", Bytes<float>({1})), "it must be (n, ...)"},
      {Npy("<f4", "(0, 3)", ""), "n > 0 samples"},
      {Npy("<f4", "(2, 0)", ""), "no features"},
      {Npy("<f4", "(2,)", Bytes<float>({1})), "truncated file"},
      {Npy("<f4", "(2,)", Bytes<float>({1, 2, 3})), "more data than the header announces"},
      {Npy("<f4", "(2,)", Bytes<float>({1, std::numeric_limits<float>::infinity()})),
       "sample 1, feature 0 is not a finite number"},
      // Finite (numpy's isfinite says True) but no float32: said so, not "not finite".
      {Npy("<f8", "(2,)", Bytes<double>({1, 1.6e301})),
       "sample 1, feature 0 is 1.6e+301, beyond float32's range (|x| <= 3.4e38)"},
      {Npy("<f4", "(99999999999999999999,)", ""), "over 2^64"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const auto x = Write("bad" + std::to_string(i++) + ".npy", c.bytes);
    auto t = ReadNpy({x, y}, NpyOptions{});
    EXPECT_FALSE(t.ok()) << c.expect;
    EXPECT_NE(Error(t).find(x + ": "), std::string::npos) << Error(t);
    EXPECT_NE(Error(t).find(c.expect), std::string::npos) << Error(t);
  }
}

TEST_F(NpyTest, AHugeShapeIsRefusedBeforeAllocating) {
  // 10^12 elements in a 100-byte file: refused from the header (ASan's allocation limit and the
  // test's memory would trip otherwise).
  const auto x = Write("huge.npy", Npy("|u1", "(1000000, 1000000)", "tiny"));
  auto t = ReadNpy({x, Labels()}, NpyOptions{});
  EXPECT_EQ(t.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(Error(t).find("implausible shape (1000000, 1000000)"), std::string::npos) << Error(t);
  // Within the caps but beyond what the bytes on disk can hold, plain or gzip.
  const auto lie = Write("lie.npy", Npy("<f4", "(1000000, 100)", "tiny"));
  EXPECT_NE(Error(ReadNpy({lie, Labels()}, NpyOptions{})).find("the file holds at most"),
            std::string::npos);
  const auto gz = WriteGz("lie.npy.gz", Npy("<f4", "(1000000, 100)", "tiny"));
  EXPECT_NE(Error(ReadNpy({gz, Labels()}, NpyOptions{})).find("the file holds at most"),
            std::string::npos);
}

TEST_F(NpyTest, LabelsMustMatchSamplesAndClasses) {
  const auto x = Write("x.npy", Npy("|u1", "(2, 1)", std::string("\x01\x02", 2)));
  const auto three = Write("y3.npy", Npy("<i8", "(3,)", Bytes<std::int64_t>({0, 1, 1})));
  EXPECT_NE(Error(ReadNpy({x, three}, NpyOptions{})).find("y has shape (3,)"), std::string::npos);
  const auto floats = Write("yf.npy", Npy("<f4", "(2,)", Bytes<float>({0, 1})));
  EXPECT_NE(Error(ReadNpy({x, floats}, NpyOptions{})).find("must be integers"), std::string::npos);
  const auto wide = Write("yw.npy", Npy("|u1", "(2, 2)", std::string(4, '\0')));
  EXPECT_NE(Error(ReadNpy({x, wide}, NpyOptions{})).find("one label per sample"),
            std::string::npos);
  const auto negative = Write("yn.npy", Npy("<i4", "(2,)", Bytes<std::int32_t>({0, -1})));
  EXPECT_NE(Error(ReadNpy({x, negative}, NpyOptions{})).find("label -1 of sample 1"),
            std::string::npos);
  NpyOptions o;
  o.task.classes = 2;
  EXPECT_NE(Error(ReadNpy({x, Labels()}, o)).find("label 2 of sample 1 is not in [0, 2)"),
            std::string::npos);
  const auto column = Write("yc.npy", Npy("<i8", "(2, 1)", Bytes<std::int64_t>({1, 0})));
  auto t = ReadNpy({x, column}, NpyOptions{});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->labels, (std::vector<std::int32_t>{1, 0}));
}

TEST_F(NpyTest, LoadNpyChecksTheTestSplitAndStandardises) {
  const auto x = Write("x.npy", Npy("<f4", "(2, 2)", Bytes<float>({1, 4, 3, 4})));
  const auto x_test = Write("xt.npy", Npy("<f4", "(1, 2)", Bytes<float>({5, 9})));
  const auto y_test = Write("yt.npy", Npy("|u1", "(1,)", std::string("\x01", 1)));
  NpyOptions o;
  o.standardize = true;
  auto tt = LoadNpy({x, Labels()}, {x_test, y_test}, o);
  ASSERT_TRUE(tt.ok()) << tt.status().ToString();
  EXPECT_EQ(tt->train.x, (std::vector<float>{-1, 0, 1, 0}));
  EXPECT_EQ(tt->test.x, (std::vector<float>{3, 5}));
  EXPECT_EQ(tt->test.task.classes, 3);
  const auto x_wide = Write("xw.npy", Npy("<f4", "(1, 3)", Bytes<float>({5, 9, 1})));
  EXPECT_NE(Error(LoadNpy({x, Labels()}, {x_wide, y_test}, o)).find("samples of 3 features"),
            std::string::npos);
}

// As many values per sample in another layout: the error names both shapes, not the (equal)
// feature counts.
TEST_F(NpyTest, ATestSplitOfAnotherSampleShapeNamesBothShapes) {
  const auto x = Write("x.npy", Npy("<f4", "(2, 2, 2)", Bytes<float>({1, 2, 3, 4, 5, 6, 7, 8})));
  const auto x_test = Write("xt.npy", Npy("<f4", "(1, 4)", Bytes<float>({1, 2, 3, 4})));
  const auto y_test = Write("yt.npy", Npy("|u1", "(1,)", std::string("\x01", 1)));
  EXPECT_EQ(Error(LoadNpy({x, Labels()}, {x_test, y_test}, NpyOptions{})),
            x_test + ": samples of shape (4,), the training set (" + x + ") has (2, 2)");
}

}  // namespace
}  // namespace ringtrain::data
