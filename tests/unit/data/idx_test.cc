#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/stop.h"
#include "runner/data/idx.h"

namespace ringtrain::data {
namespace {

std::vector<unsigned char> Header(int ndims, const std::vector<std::uint32_t>& dims) {
  std::vector<unsigned char> h = {0, 0, 0x08, static_cast<unsigned char>(ndims)};
  for (auto d : dims) {
    h.push_back(static_cast<unsigned char>(d >> 24));
    h.push_back(static_cast<unsigned char>(d >> 16));
    h.push_back(static_cast<unsigned char>(d >> 8));
    h.push_back(static_cast<unsigned char>(d));
  }
  return h;
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("idx_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string WriteGz(const std::string& name, const std::vector<unsigned char>& bytes) {
    std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    return path;
  }
  std::string WriteRaw(const std::string& name, const std::vector<unsigned char>& bytes) {
    std::string path = (dir_ / name).string();
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    return path;
  }
  // 3 images of 2x2 and their labels.
  void WriteValid(std::string* images, std::string* labels) {
    auto img = Header(3, {3, 2, 2});
    for (int i = 0; i < 12; ++i) img.push_back(static_cast<unsigned char>(i * 20));
    auto lab = Header(1, {3});
    lab.insert(lab.end(), {7, 0, 9});
    *images = WriteGz("img.gz", img);
    *labels = WriteGz("lab.gz", lab);
  }

  std::filesystem::path dir_;
};

TEST_F(IdxTest, ReadsGzippedImagesAndLabels) {
  std::string images, labels;
  WriteValid(&images, &labels);
  auto ds = LoadIdx(images, labels);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->count, 3u);
  EXPECT_EQ(ds->rows, 2);
  EXPECT_EQ(ds->cols, 2);
  EXPECT_EQ(ds->images[5], 100);
  EXPECT_EQ(ds->labels[2], 9);
}

TEST_F(IdxTest, ReadsUncompressedFiles) {
  auto img = Header(3, {1, 1, 2});
  img.insert(img.end(), {0, 255});
  auto lab = Header(1, {1});
  lab.push_back(3);
  auto ds = LoadIdx(WriteRaw("i", img), WriteRaw("l", lab));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->images[1], 255);
}

TEST_F(IdxTest, TruncatedFileIsDataLossNamingTheFile) {
  auto img = Header(3, {3, 2, 2});
  for (int i = 0; i < 7; ++i) img.push_back(1);  // 12 announced, 7 present
  auto lab = Header(1, {3});
  lab.insert(lab.end(), {1, 2, 3});
  std::string path = WriteGz("short.gz", img);
  auto ds = LoadIdx(path, WriteGz("lab.gz", lab));
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(ds.status().message().find(path), std::string::npos);
  EXPECT_NE(ds.status().message().find("truncated"), std::string::npos);
  EXPECT_FALSE(ds.status().retryable());
}

TEST_F(IdxTest, CorruptCompressedStreamIsDataLoss) {
  std::string images, labels;
  WriteValid(&images, &labels);
  // Flip bytes in the middle of the deflate stream.
  FILE* f = std::fopen(images.c_str(), "r+b");
  std::fseek(f, 14, SEEK_SET);
  const unsigned char junk[8] = {0xff, 0x00, 0xff, 0x13, 0x37, 0xaa, 0x55, 0x99};
  std::fwrite(junk, 1, sizeof(junk), f);
  std::fclose(f);
  auto ds = LoadIdx(images, labels);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(ds.status().message().find(images), std::string::npos);
}

// Every pixel is there but the gzip trailer (CRC and length) is cut off: zlib reports the end
// of the file, and only the error it leaves behind says the stream was cut short.
TEST_F(IdxTest, AGzipCutShortIsDataLossEvenWithEveryByteAnnounced) {
  std::string images, labels;
  WriteValid(&images, &labels);
  std::filesystem::resize_file(labels, std::filesystem::file_size(labels) - 4);
  auto ds = LoadIdx(images, labels);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(ds.status().message().find(labels + ": truncated gzip stream"), std::string::npos)
      << ds.status().message();
  // Cut inside the pixels: the same, naming what was being read.
  WriteValid(&images, &labels);
  std::filesystem::resize_file(images, std::filesystem::file_size(images) - 12);
  ds = LoadIdx(images, labels);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find(images + ": truncated gzip stream"), std::string::npos)
      << ds.status().message();
}

TEST_F(IdxTest, AnIoErrorIsRetryableNamingTheFileAndWhatWasRead) {
  std::string images, labels;
  WriteValid(&images, &labels);
  std::filesystem::remove(images);
  std::filesystem::create_symlink("/proc/self/mem", images);  // EIO at offset 0
  auto ds = LoadIdx(images, labels);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kUnavailable) << ds.status().ToString();
  EXPECT_NE(ds.status().message().find(
                images + ": read error while reading the header: " + std::strerror(EIO)),
            std::string::npos)
      << ds.status().message();
}

TEST_F(IdxTest, BadMagicIsRejected) {
  std::vector<unsigned char> img = {0x1f, 0x00, 0x08, 0x03, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 5};
  auto lab = Header(1, {1});
  lab.push_back(1);
  auto ds = LoadIdx(WriteRaw("i", img), WriteRaw("l", lab));
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("magic"), std::string::npos);
}

TEST_F(IdxTest, CountMismatchAndBadLabelAreRejected) {
  std::string images, labels;
  WriteValid(&images, &labels);
  auto lab = Header(1, {2});
  lab.insert(lab.end(), {1, 2});
  auto ds = LoadIdx(images, WriteGz("two.gz", lab));
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("2 labels for 3 images"), std::string::npos);

  auto lab3 = Header(1, {3});
  lab3.insert(lab3.end(), {1, 10, 2});
  ds = LoadIdx(images, WriteGz("big.gz", lab3));
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("label 10 at index 1"), std::string::npos);
}

TEST_F(IdxTest, TrailingBytesAreRejected) {
  auto img = Header(3, {1, 1, 1});
  img.insert(img.end(), {1, 2});
  auto lab = Header(1, {1});
  lab.push_back(0);
  auto ds = LoadIdx(WriteRaw("i", img), WriteRaw("l", lab));
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("more data"), std::string::npos);
}

TEST_F(IdxTest, MissingFileIsNotFound) {
  auto ds = LoadFashionMnist((dir_ / "nothing").string(), true);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ds.status().message().find("train-images-idx3-ubyte"), std::string::npos);
}

TEST_F(IdxTest, GatherNormalizes) {
  std::string images, labels;
  WriteValid(&images, &labels);
  auto ds = LoadIdx(images, labels);
  ASSERT_TRUE(ds.ok());
  std::size_t idx[2] = {2, 0};
  float x[8];
  std::int32_t y[2];
  Gather(*ds, idx, 2, x, y);
  EXPECT_EQ(y[0], 9);
  EXPECT_EQ(y[1], 7);
  EXPECT_NEAR(x[0], (160 / 255.0f - kFashionMean) / kFashionStd, 1e-5);
  EXPECT_NEAR(x[4], (0 - kFashionMean) / kFashionStd, 1e-5);
}

// Issue 10 item 3: a header's dimensions are checked against the file before allocating.
TEST_F(IdxTest, HugeDimensionsAreRejectedBeforeAllocation) {
  auto lab = Header(1, {1});
  lab.push_back(0);
  for (const auto& dims : {std::vector<std::uint32_t>{1u << 28, 4096, 4096},
                           std::vector<std::uint32_t>{0xffffffffu, 4096, 4096},
                           std::vector<std::uint32_t>{0xffffffffu, 0xffffffffu, 0xffffffffu}}) {
    auto img = Header(3, dims);
    img.insert(img.end(), {1, 2, 3});
    for (bool gz : {false, true}) {
      std::string path = gz ? WriteGz("huge.gz", img) : WriteRaw("huge", img);
      auto ds = LoadIdx(path, WriteRaw("l", lab));
      ASSERT_FALSE(ds.ok());
      EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
      EXPECT_NE(ds.status().message().find(path), std::string::npos);
      EXPECT_NE(ds.status().message().find("implausible dimensions"), std::string::npos)
          << ds.status().message();
    }
  }
}

TEST_F(IdxTest, HeaderLargerThanThePlainFileIsTruncationBeforeAllocation) {
  auto img = Header(3, {2000000, 28, 28});  // 1.6 GB announced, 100 bytes present
  img.resize(img.size() + 100, 7);
  auto lab = Header(1, {2000000});
  std::string path = WriteRaw("lying", img);
  auto ds = LoadIdx(path, WriteRaw("l", lab));
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(ds.status().message().find(path + ": truncated file"), std::string::npos)
      << ds.status().message();
  EXPECT_NE(ds.status().message().find("the file holds 100"), std::string::npos)
      << ds.status().message();
}

TEST_F(IdxTest, HeaderLargerThanTheGzipCanHoldIsRejectedBeforeAllocation) {
  auto img = Header(3, {2000000, 28, 28});
  img.resize(img.size() + 100, 7);
  std::string path = WriteGz("lying.gz", img);
  auto ds = LoadIdx(path, WriteRaw("l", Header(1, {2000000})));
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(ds.status().message().find("compressed bytes can hold"), std::string::npos)
      << ds.status().message();
}

TEST_F(IdxTest, HighlyCompressedButHonestGzipStillLoads) {
  // 1000 x 64 x 64 zero pixels compress ~1000:1 and are within deflate's ratio: accepted.
  auto img = Header(3, {1000, 64, 64});
  img.resize(img.size() + 1000 * 64 * 64, 0);
  std::vector<unsigned char> lab = Header(1, {1000});
  lab.resize(lab.size() + 1000, 1);
  auto ds = LoadIdx(WriteGz("zeros.gz", img), WriteGz("lab.gz", lab));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->images.size(), 1000u * 64 * 64);
}

// The payload goes into one buffer of its own size: grown 16 MB at a time, the vector doubled and
// copied (21 MB of pixels in a 32 MB buffer, after holding 16 + 32 MB), so loading a dataset
// peaked at about twice its size.
TEST_F(IdxTest, APayloadIsReadIntoOneBufferOfItsOwnSize) {
  constexpr std::uint32_t kCount = 5200;  // x 64 x 64 = 21.3 MB: more than one 16 MB chunk
  auto img = Header(3, {kCount, 64, 64});
  for (std::size_t i = 0; i < std::size_t{kCount} * 64 * 64; ++i) {
    img.push_back(static_cast<unsigned char>(i * 7 + i / 4096));
  }
  std::vector<unsigned char> lab = Header(1, {kCount});
  lab.resize(lab.size() + kCount, 3);
  for (bool gz : {false, true}) {
    SCOPED_TRACE(gz ? "gzip" : "plain");
    auto ds = gz ? LoadIdx(WriteGz("big.gz", img), WriteGz("lab.gz", lab))
                 : LoadIdx(WriteRaw("big", img), WriteRaw("lab", lab));
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    ASSERT_EQ(ds->images.size(), std::size_t{kCount} * 64 * 64);
    EXPECT_EQ(ds->images.capacity(), ds->images.size());
    EXPECT_TRUE(std::equal(ds->images.begin(), ds->images.end(), img.begin() + 16));
  }
}

// A SIGTERM while the images load ends the load between two chunks (Cancelled, naming the
// file), not after the whole file.
TEST_F(IdxTest, AStopRequestEndsTheLoadNamingTheFile) {
  std::string images, labels;
  WriteValid(&images, &labels);
  ResetStopForTest();
  RequestStop(SIGTERM);
  auto ds = LoadIdx(images, labels);
  ResetStopForTest();
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kCancelled) << ds.status().ToString();
  EXPECT_NE(ds.status().message().find("during data loading (reading " + images + ")"),
            std::string::npos)
      << ds.status().message();
  EXPECT_TRUE(LoadIdx(images, labels).ok());
}

// Issue 10 item 1: a test set of another shape than the model's input is refused at load.
TEST_F(IdxTest, ValidateForModelNamesTheFileOfTheWrongShape) {
  std::string images, labels;
  WriteValid(&images, &labels);  // 2x2
  auto ds = LoadIdx(images, labels);
  ASSERT_TRUE(ds.ok());
  EXPECT_TRUE(ValidateForModel(*ds, 2, 2, 10).ok());
  Status s = ValidateForModel(*ds, 28, 28, 10);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(images + ": images are 2x2, the model takes 28x28"), std::string::npos)
      << s.message();
  s = ValidateForModel(*ds, 2, 2, 8);  // label 9 for a model of 8 classes
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(labels + ": label 9 at index 2"), std::string::npos) << s.message();
  EXPECT_EQ(ExitCodeFor(s), kExitPermanent);
}

TEST(FashionMnist, ShippedDatasetLoadsWhenInstalled) {
  const char* dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " not installed";
  auto train = LoadFashionMnist(dir, true);
  ASSERT_TRUE(train.ok()) << train.status().ToString();
  EXPECT_EQ(train->count, 60000u);
  EXPECT_EQ(train->rows, 28);
  auto test = LoadFashionMnist(dir, false);
  ASSERT_TRUE(test.ok()) << test.status().ToString();
  EXPECT_EQ(test->count, 10000u);
}

}  // namespace
}  // namespace ringtrain::data
