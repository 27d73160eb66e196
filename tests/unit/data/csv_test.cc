#include "runner/data/csv.h"

#include <csignal>

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/stop.h"
#include "runner/data/table.h"

namespace ringtrain::data {
namespace {

class CsvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("csv_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string WriteGz(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
    return path;
  }
  // An error's message, or "" when `s` is OK.
  template <typename T>
  static std::string Error(const StatusOr<T>& s) {
    return s.ok() ? "" : s.status().message();
  }

  std::filesystem::path dir_;
};

TEST_F(CsvTest, ReadsHeaderAndLabelColumnByName) {
  const auto path = Write("a.csv", "f1,label,f2\n1,2,3\n4,0,6.5\n");
  CsvOptions o;
  o.label_name = "label";
  auto t = ReadCsv({path, ""}, o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->n, 2u);
  EXPECT_EQ(t->features, 2u);
  EXPECT_EQ(t->x, (std::vector<float>{1, 3, 4, 6.5f}));
  EXPECT_EQ(t->labels, (std::vector<std::int32_t>{2, 0}));
  EXPECT_EQ(t->task.classes, 3);  // the largest label + 1
  EXPECT_EQ(t->shape, (std::vector<std::size_t>{2}));
}

// A SIGTERM while a dataset loads ends the load (Cancelled, naming the file) instead of waiting
// for the whole file to be read and parsed (7.9 s for a 180 MB CSV). The request comes before
// the read here; a stop during it is seen between its chunks in the same way.
TEST_F(CsvTest, AStopRequestEndsTheLoadNamingTheFile) {
  const auto path = Write("a.csv", "f1,label\n1,2\n4,0\n");
  CsvOptions o;
  o.label_name = "label";
  ResetStopForTest();
  RequestStop(SIGTERM);
  auto t = ReadCsv({path, ""}, o);
  ResetStopForTest();
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kCancelled) << t.status().ToString();
  EXPECT_NE(Error(t).find("stopped by SIGTERM during data loading (reading " + path + ")"),
            std::string::npos)
      << Error(t);
  // And without one, the same file loads.
  EXPECT_TRUE(ReadCsv({path, ""}, o).ok());
}

TEST_F(CsvTest, NoHeaderLabelIndexFromTheStartOrTheEnd) {
  const auto path = Write("a.csv", "1,2,3\r\n4,5,6\r\n\r\n");
  CsvOptions o;
  o.label_index = 0;
  o.task.classes = 10;
  auto t = ReadCsv({path, ""}, o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->labels, (std::vector<std::int32_t>{1, 4}));
  EXPECT_EQ(t->x, (std::vector<float>{2, 3, 5, 6}));
  o.label_index = -2;
  t = ReadCsv({path, ""}, o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->labels, (std::vector<std::int32_t>{2, 5}));
  o.label_index = 3;
  EXPECT_NE(Error(ReadCsv({path, ""}, o)).find("label column index 3"), std::string::npos);
  o.header = CsvHeader::kHeader;  // the first line is then names: one sample left
  o.label_index = -1;
  t = ReadCsv({path, ""}, o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->n, 1u);
}

TEST_F(CsvTest, NonNumericCellNamesFileLineAndColumn) {
  const auto path = Write("a.csv", "a,b,y\n1,2,0\n3,x7,1\n");
  auto t = ReadCsv({path, ""}, CsvOptions{});
  EXPECT_EQ(t.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(Error(t).find(path + ": line 3, column 2 (\"b\"): \"x7\" is not a number"),
            std::string::npos)
      << Error(t);
  const auto empty = Write("b.csv", "1,,0\n");
  EXPECT_NE(Error(ReadCsv({empty, ""}, CsvOptions{})).find("line 1, column 2: empty cell"),
            std::string::npos);
  const auto nan = Write("c.csv", "1,nan,0\n");
  EXPECT_NE(Error(ReadCsv({nan, ""}, CsvOptions{}))
                .find("line 1, column 2: \"nan\" is not a finite number"),
            std::string::npos);
  // Finite, but no float32: said so, not "not finite" (which sends the user looking for NaNs).
  const auto huge = Write("d.csv", "1,1e39,0\n");
  EXPECT_NE(Error(ReadCsv({huge, ""}, CsvOptions{}))
                .find("\"1e39\" is beyond float32's range (|x| <= 3.4e38)"),
            std::string::npos)
      << Error(ReadCsv({huge, ""}, CsvOptions{}));
}

TEST_F(CsvTest, ASemicolonFileIsReadWithoutSayingTheDelimiter) {
  // Excel writes ';' where the decimal mark is a comma; pandas' sep=None sniffs it too.
  const auto path = Write("a.csv", "f0;species;f1\n1;0;2.5\n3;1;4\n");
  CsvOptions o;
  o.label_name = "species";
  auto t = ReadCsv({path, ""}, o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->x, (std::vector<float>{1, 2.5f, 3, 4}));
  EXPECT_EQ(t->labels, (std::vector<std::int32_t>{0, 1}));
  // Without a header too.
  const auto bare = Write("b.csv", "1;2.5;0\n3;4;1\n");
  auto u = ReadCsv({bare, ""}, CsvOptions{});
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->features, 2u);
  // A tab-separated file whose names hold a ';' is still tab-separated.
  const auto tabbed = Write("d.csv", "a;x\tspecies\n1.5\t0\n2.5\t1\n");
  auto w = ReadCsv({tabbed, ""}, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->feature_names, std::vector<std::string>{"a;x"});
  // A delimiter it cannot guess: the message says what the lines were split on.
  const auto piped = Write("c.csv", "a|species\n1|0\n");
  EXPECT_EQ(Error(ReadCsv({piped, ""}, o)),
            piped +
                ": no column named \"species\" in the header, which names \"a|species\" (its "
                "lines split on blanks; "
                "set the dataset's delimiter, spec.train.dataset.delimiter in a TrainingJob, "
                "if it is another)");
}

TEST_F(CsvTest, AHeaderThatNamesTheLabelColumnIsAHeaderWhateverItsOtherNames) {
  // Years as column names: line 1 has numbers, but it names the label column.
  const auto path = Write("a.csv", "2019,2020,species,2021\n1,2,0,3\n4,5,1,6\n");
  CsvOptions o;
  o.label_name = "species";
  auto t = ReadCsv({path, ""}, o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->n, 2u);
  EXPECT_EQ(t->feature_names, (std::vector<std::string>{"2019", "2020", "2021"}));
}

TEST_F(CsvTest, AColumnThatCouldBeTheLabelOrAnIndexIsRefusedNotTrainedOn) {
  CsvOptions o;
  o.label_name = "species";
  // pandas' df.to_csv() writes its index as an unnamed first column.
  const auto indexed = Write("a.csv", ",f0,species\n0,1.5,0\n1,2.5,1\n");
  EXPECT_EQ(Error(ReadCsv({indexed, ""}, o)),
            indexed +
                ": column 1 has no name in the header: a row index, as pandas' to_csv "
                "writes it (write the file with index=False), would be trained on as a "
                "feature");
  const auto twice = Write("b.csv", "species,f0,species\n0,1.5,0\n1,2.5,1\n");
  EXPECT_EQ(Error(ReadCsv({twice, ""}, o)),
            twice +
                ": the header names two columns \"species\" (columns 1 and 3): which is the "
                "label?");
  // Written without the index: read.
  const auto plain = Write("c.csv", "f0,species\n1.5,0\n2.5,1\n");
  EXPECT_TRUE(ReadCsv({plain, ""}, o).ok());
}

TEST_F(CsvTest, AnotherFormatsFileIsRefusedAsNoText) {
  constexpr char kNpy[] = "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, }";
  const std::string npy(kNpy, sizeof(kNpy) - 1);
  const auto path = Write("x.npy", npy);
  auto t = ReadCsv({path, ""}, CsvOptions{});
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Error(t), path +
                          ": not a text file (byte 7 is NUL): it is a .npy file; say format: "
                          "npy and trainX/trainY");
  const auto idx = Write("images-idx3-ubyte", std::string("\0\0\x08\x03\0\0\0\x02", 8));
  EXPECT_NE(Error(ReadCsv({idx, ""}, CsvOptions{})).find(idx + ": not a text file (byte 0 is NUL)"),
            std::string::npos);
}

TEST_F(CsvTest, RaggedRowsAndBadHeaderAreErrors) {
  const auto ragged = Write("a.csv", "1,2,0\n3,1\n");
  EXPECT_NE(Error(ReadCsv({ragged, ""}, CsvOptions{})).find("line 2 has 2 columns, line 1 has 3"),
            std::string::npos);
  const auto header = Write("b.csv", "a,b\n1,2,0\n");
  EXPECT_NE(Error(ReadCsv({header, ""}, CsvOptions{})).find("the header names 2 columns"),
            std::string::npos);
  CsvOptions o;
  o.label_name = "missing";
  const auto named = Write("c.csv", "a,y\n1,0\n");
  EXPECT_NE(Error(ReadCsv({named, ""}, o))
                .find("no column named \"missing\" in the header, which "
                      "names \"a\", \"y\""),
            std::string::npos)
      << Error(ReadCsv({named, ""}, o));
  // A Latin-1 name is quoted as text (a summary's JSON refuses broken UTF-8); UTF-8 stays.
  o.label_name = "nope";
  const auto latin1 = Write("l.csv", "f\xE9,\xC3\xA9t\xC3\xA9,y\n1,2,0\n");
  EXPECT_NE(
      Error(ReadCsv({latin1, ""}, o)).find("which names \"f\\xE9\", \"\xC3\xA9t\xC3\xA9\", \"y\""),
      std::string::npos)
      << Error(ReadCsv({latin1, ""}, o));
  const auto plain = Write("d.csv", "1,0\n");
  EXPECT_NE(Error(ReadCsv({plain, ""}, o)).find("no header line"), std::string::npos);
  EXPECT_NE(Error(ReadCsv({Write("e.csv", "\n\n"), ""}, CsvOptions{})).find("no samples"),
            std::string::npos);
  EXPECT_EQ(ReadCsv({(dir_ / "absent.csv").string(), ""}, CsvOptions{}).status().code(),
            StatusCode::kNotFound);
}

TEST_F(CsvTest, ClassificationLabelsMustBeIntegersBelowClasses) {
  CsvOptions o;
  o.task.classes = 3;
  EXPECT_NE(Error(ReadCsv({Write("a.csv", "1,2\n1,1.5\n"), ""}, o))
                .find("line 2, column 2: label \"1.5\" is not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(Error(ReadCsv({Write("b.csv", "1,-1\n"), ""}, o)).find("not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(Error(ReadCsv({Write("c.csv", "1,3\n"), ""}, o)).find("label 3 is not below the 3"),
            std::string::npos);
  EXPECT_NE(Error(ReadCsv({Write("d.csv", "1,0\n1,cat\n"), ""}, o)).find("\"cat\""),
            std::string::npos);
  o.task.classes = 0;
  EXPECT_NE(Error(ReadCsv({Write("e.csv", "1,100000\n"), ""}, o)).find("a model may have"),
            std::string::npos);
  auto t = ReadCsv({Write("f.csv", "1,2.0\n"), ""}, o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->labels[0], 2);
}

TEST_F(CsvTest, SklearnCountsLineIsRecognisedAndChecked) {
  const auto path = Write("iris.csv", "3,2,setosa,versicolor,virginica\n1,2,0\n3,4,2\n5,6,1\n");
  auto t = ReadCsv({path, ""}, CsvOptions{});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->n, 3u);
  EXPECT_EQ(t->task.classes, 3);  // from the class names
  EXPECT_EQ(t->labels, (std::vector<std::int32_t>{0, 2, 1}));
  const auto short_file = Write("short.csv", "4,2,a,b,c\n1,2,0\n3,4,2\n5,6,1\n");
  EXPECT_NE(Error(ReadCsv({short_file, ""}, CsvOptions{}))
                .find("the counts line announces 4 samples, the file has 3"),
            std::string::npos);
  const auto wide = Write("wide.csv", "1,3,a,b\n1,2,0\n");
  EXPECT_NE(Error(ReadCsv({wide, ""}, CsvOptions{})).find("announces 3 features"),
            std::string::npos);
  // boston_house_prices.csv: counts with empty names, then a header line.
  const auto boston = Write("boston.csv", "2,2,,\n\"A\",\"B\",\"MEDV\"\n1,2,24\n3,4,21.6\n");
  CsvOptions reg;
  reg.task.kind = Task::Kind::kRegression;
  reg.label_name = "MEDV";
  t = ReadCsv({boston, ""}, reg);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->targets, (std::vector<float>{24, 21.6f}));
  EXPECT_EQ(t->task.targets, 1);
  CsvOptions forced;
  forced.header = CsvHeader::kSklearnCounts;
  EXPECT_NE(Error(ReadCsv({Write("nocounts.csv", "1.5,2,0\n"), ""}, forced))
                .find("not a sklearn counts line"),
            std::string::npos);
}

TEST_F(CsvTest, WhitespaceDelimitedFeaturesWithATargetsFile) {
  const auto x = WriteGz("x.csv.gz", "59 2 32.1\n48  1\t21.6\n");
  const auto y = Write("y.csv", "Weight Waist\n191 36\n189 37\n");
  CsvOptions o;
  o.task.kind = Task::Kind::kRegression;
  auto t = ReadCsv({x, y}, o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->features, 3u);
  EXPECT_EQ(t->x, (std::vector<float>{59, 2, 32.1f, 48, 1, 21.6f}));
  EXPECT_EQ(t->task.targets, 2);
  EXPECT_EQ(t->targets, (std::vector<float>{191, 36, 189, 37}));
  EXPECT_EQ(t->labels_path, y);
  const auto y_short = Write("y2.csv", "1\n");
  EXPECT_NE(Error(ReadCsv({x, y_short}, o)).find("1 label lines for 2 samples"), std::string::npos);
  o.task = Task{};  // classification takes one label column
  EXPECT_NE(Error(ReadCsv({x, y}, o)).find("2 label columns"), std::string::npos);
}

TEST_F(CsvTest, AGzipBombStopsAtTheByteCap) {
  // 1 MiB of digits compresses to about 1 KiB; the reader stops one byte past the cap.
  const auto bomb = WriteGz("bomb.csv.gz", std::string(1 << 20, '1'));
  CsvOptions o;
  o.max_bytes = 4096;
  auto t = ReadCsv({bomb, ""}, o);
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(Error(t).find(bomb + ": more than 4096 bytes"), std::string::npos) << Error(t);
}

// zlib reports a gzip stream cut short as the end of the file; cut where the text before the cut
// ends at a line (a full flush there), the rows before it would parse as a smaller dataset.
TEST_F(CsvTest, ATruncatedGzipIsDataLossNotFewerSamples) {
  const std::string path = (dir_ / "cut.csv.gz").string();
  gzFile f = gzopen(path.c_str(), "wb");
  std::uintmax_t cut = 0;
  for (int i = 0; i < 5000; ++i) {
    const std::string row =
        std::to_string(i) + "," + std::to_string(i % 7) + "," + std::to_string(i % 2) + "\n";
    gzwrite(f, row.data(), static_cast<unsigned>(row.size()));
    if (i == 1824) {
      gzflush(f, Z_FULL_FLUSH);
      cut = std::filesystem::file_size(path);
    }
  }
  gzclose(f);
  auto whole = ReadCsv({path, ""}, CsvOptions{});
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->n, 5000u);
  std::filesystem::resize_file(path, cut);
  auto t = ReadCsv({path, ""}, CsvOptions{});
  ASSERT_FALSE(t.ok()) << t->n << " samples";
  EXPECT_EQ(t.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(Error(t).find(path + ": truncated gzip stream"), std::string::npos) << Error(t);
}

// A read error the volume may heal (EIO here: offset 0 of this process's own memory is never
// mapped) is retryable and names the file and the error; it is not a corrupt file.
TEST_F(CsvTest, AnIoErrorIsUnavailableNotACorruptFile) {
  const auto train = Write("train.csv", "1,5,0\n3,5,1\n");
  const std::string test = (dir_ / "test.csv").string();
  std::filesystem::create_symlink("/proc/self/mem", test);
  auto tt = LoadCsv({train, ""}, {test, ""}, CsvOptions{});
  ASSERT_FALSE(tt.ok());
  EXPECT_EQ(tt.status().code(), StatusCode::kUnavailable) << tt.status().ToString();
  EXPECT_TRUE(tt.status().retryable());
  EXPECT_NE(Error(tt).find(test + ": read error: " + std::strerror(EIO)), std::string::npos)
      << Error(tt);
}

// pandas names the columns of a DataFrame built from an array 0, 1, 2, ...: beside a named label
// column that line is a header; a line of nothing but 0..n-1 is refused as ambiguous rather than
// silently read as a sample (or silently dropped).
TEST_F(CsvTest, PandasIntegerColumnNamesAreAHeaderOrRefusedAsAmbiguous) {
  CsvOptions o;
  o.label_name = "label";
  const auto named = Write("named.csv", "0,1,2,label\n5,6,7,1\n8,9,10,0\n");
  auto t = ReadCsv({named, ""}, o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->n, 2u);
  EXPECT_EQ(t->x, (std::vector<float>{5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(t->feature_names, (std::vector<std::string>{"0", "1", "2"}));

  const auto numbers = Write("numbers.csv", "0,1,2,3\n5,6,7,1\n8,9,10,0\n");
  t = ReadCsv({numbers, ""}, CsvOptions{});
  ASSERT_FALSE(t.ok()) << t->n << " samples";
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(Error(t).find(numbers + ": line 1 is 0, 1, ..., 3: pandas' integer column names or "
                                    "a sample?"),
            std::string::npos)
      << Error(t);
  EXPECT_NE(Error(t).find("spec.train.dataset.header"), std::string::npos) << Error(t);
  CsvOptions said;
  said.header = CsvHeader::kHeader;
  t = ReadCsv({numbers, ""}, said);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->n, 2u);
  said.header = CsvHeader::kNone;
  said.task.classes = 4;
  t = ReadCsv({numbers, ""}, said);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->n, 3u);
  // Numbers that are not 0, 1, 2, ... are a sample, as before.
  t = ReadCsv({Write("data.csv", "0,2,1\n3,4,0\n"), ""}, CsvOptions{});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->n, 2u);
}

TEST_F(CsvTest, QuotedCellsMayHoldTheDelimiter) {
  const auto path = Write("q.csv", "\"a,1\",\"y\"\n\"1\",\"0\"\n");
  CsvOptions o;
  o.label_name = "y";
  auto t = ReadCsv({path, ""}, o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->x, (std::vector<float>{1}));
  o.delimiter = '|';
  EXPECT_NE(Error(ReadCsv({path, ""}, o)).find("unsupported delimiter"), std::string::npos);
}

TEST_F(CsvTest, StandardisationUsesTheTrainingSplitOnly) {
  const auto train = Write("train.csv", "1,5,0\n3,5,1\n");
  const auto test = Write("test.csv", "5,7,1\n");
  auto tt = LoadCsv({train, ""}, {test, ""}, CsvOptions{});
  ASSERT_TRUE(tt.ok()) << tt.status().ToString();
  // Column 0: mean 2, std 1. Column 1 is constant in training: centred, not divided by zero.
  EXPECT_EQ(tt->train.x, (std::vector<float>{-1, 0, 1, 0}));
  EXPECT_EQ(tt->test.x, (std::vector<float>{3, 2}));
  EXPECT_EQ(tt->scaling.mean, (std::vector<float>{2, 5}));
  EXPECT_EQ(tt->test.task.classes, 2);
  CsvOptions raw;
  raw.standardize = false;
  tt = LoadCsv({train, ""}, {test, ""}, raw);
  ASSERT_TRUE(tt.ok());
  EXPECT_EQ(tt->test.x, (std::vector<float>{5, 7}));
  EXPECT_TRUE(tt->scaling.mean.empty());
}

TEST_F(CsvTest, TestSplitMustMatchTheTrainingSplit) {
  const auto train = Write("train.csv", "1,5,0\n3,5,1\n");
  const auto wide = Write("wide.csv", "1,2,3,0\n");
  EXPECT_NE(Error(LoadCsv({train, ""}, {wide, ""}, CsvOptions{})).find("3 features"),
            std::string::npos);
  const auto unseen = Write("unseen.csv", "1,2,2\n");
  auto tt = LoadCsv({train, ""}, {unseen, ""}, CsvOptions{});
  EXPECT_NE(Error(tt).find(unseen + ": line 1, column 3: label 2 is not below the 2 classes"),
            std::string::npos)
      << Error(tt);
  // Where the 2 came from, and what sets it.
  EXPECT_NE(Error(tt).find("(the training split's classes: the largest label, 1 (" + train +
                           " line 2), plus one; spec.train.dataset.classes says how many)"),
            std::string::npos)
      << Error(tt);
}

// Both splits name their columns: the test split's are matched by name, never by position alone
// (sklearn refuses features named in another order; so does this).
TEST_F(CsvTest, TestHeaderMustNameTheTrainingFeaturesInTheSameOrder) {
  CsvOptions o;
  o.label_name = "label";
  o.standardize = false;
  const auto train = Write("train.csv", "a,b,label\n1,5,0\n3,6,1\n");
  const auto swapped = Write("swapped.csv", "b,a,label\n5,1,0\n");
  auto tt = LoadCsv({train, ""}, {swapped, ""}, o);
  ASSERT_FALSE(tt.ok());
  EXPECT_EQ(tt.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(Error(tt).find(swapped + ": the header names feature 1 \"b\", the training set (" +
                           train + ") names it \"a\""),
            std::string::npos)
      << Error(tt);
  const auto renamed = Write("renamed.csv", "a,c,label\n1,5,0\n");
  EXPECT_NE(Error(LoadCsv({train, ""}, {renamed, ""}, o)).find("feature 2 \"c\""),
            std::string::npos);
  // The label column is found by its name wherever it is; the features keep their order.
  const auto moved = Write("moved.csv", "label,a,b\n1,2,7\n");
  tt = LoadCsv({train, ""}, {moved, ""}, o);
  ASSERT_TRUE(tt.ok()) << tt.status().ToString();
  EXPECT_EQ(tt->test.x, (std::vector<float>{2, 7}));
  EXPECT_EQ(tt->test.labels, (std::vector<std::int32_t>{1}));
  // A test file without a header is read by position, as before.
  const auto bare = Write("bare.csv", "2,7,1\n");
  o.label_name.clear();
  tt = LoadCsv({train, ""}, {bare, ""}, o);
  ASSERT_TRUE(tt.ok()) << tt.status().ToString();
  EXPECT_EQ(tt->test.x, (std::vector<float>{2, 7}));
}

// A UTF-8 byte order mark (Excel's "CSV UTF-8") is read past, as pandas reads it: the header's
// first name is the one the test file gives without it, and a file without a header parses.
TEST_F(CsvTest, AByteOrderMarkIsNoPartOfTheFirstCell) {
  CsvOptions o;
  o.label_name = "label";
  o.standardize = false;
  const auto train = Write("bom.csv",
                           "\xEF\xBB\xBF"
                           "a,b,label\n1,5,0\n3,6,1\n");
  const auto test = Write("plain.csv", "a,b,label\n2,7,1\n");
  auto tt = LoadCsv({train, ""}, {test, ""}, o);
  ASSERT_TRUE(tt.ok()) << tt.status().ToString();
  EXPECT_EQ(tt->train.x, (std::vector<float>{1, 5, 3, 6}));
  EXPECT_EQ(tt->test.x, (std::vector<float>{2, 7}));
  o.label_name.clear();
  o.header = CsvHeader::kNone;
  const auto bare = Write("bom-bare.csv",
                          "\xEF\xBB\xBF"
                          "1,5,0\n3,6,1\n");
  auto table = ReadCsv({bare, ""}, o);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(table->x, (std::vector<float>{1, 5, 3, 6}));
}

TEST_F(CsvTest, SplitHoldoutAndGatherCopyRows) {
  std::string text;
  for (int i = 0; i < 10; ++i) text += std::to_string(i) + "," + std::to_string(i % 2) + "\n";
  auto all = ReadCsv({Write("all.csv", text), ""}, CsvOptions{});
  ASSERT_TRUE(all.ok());
  auto a = SplitHoldout(*all, 0.3, 7);
  auto b = SplitHoldout(*all, 0.3, 7);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->train.n, 7u);
  EXPECT_EQ(a->test.n, 3u);
  EXPECT_EQ(a->test.x, b->test.x);  // the same seed gives the same split
  std::vector<float> seen = a->train.x;
  seen.insert(seen.end(), a->test.x.begin(), a->test.x.end());
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, all->x);  // every sample lands on exactly one side
  for (std::size_t i = 0; i < a->test.n; ++i) {
    EXPECT_EQ(a->test.labels[i], static_cast<int>(a->test.x[i]) % 2);
  }
  EXPECT_FALSE(SplitHoldout(*all, 1.0, 7).ok());
  std::size_t idx[2] = {3, 1};
  float x[2];
  std::int32_t y[2];
  Gather(*all, idx, 2, x, y, nullptr);
  EXPECT_EQ(x[0], 3);
  EXPECT_EQ(y[0], 1);
  EXPECT_EQ(x[1], 1);
}

// The files Debian's python3-sklearn ships (scripts/deps.sh installs it).
constexpr char kSklearn[] = "/usr/lib/python3/dist-packages/sklearn/datasets/data/";

class SklearnCsvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(kSklearn) + "iris.csv")) {
      GTEST_SKIP() << "python3-sklearn is not installed (" << kSklearn << ")";
    }
  }
  static std::string F(const char* name) { return std::string(kSklearn) + name; }
};

TEST_F(SklearnCsvTest, ClassificationFilesWithCountsLines) {
  struct Case {
    const char* file;
    std::size_t n, features;
    int classes;
  };
  for (const Case& c : {Case{"iris.csv", 150, 4, 3}, Case{"wine_data.csv", 178, 13, 3},
                        Case{"breast_cancer.csv", 569, 30, 2}}) {
    auto t = ReadCsv({F(c.file), ""}, CsvOptions{});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->n, c.n) << c.file;
    EXPECT_EQ(t->features, c.features) << c.file;
    EXPECT_EQ(t->task.classes, c.classes) << c.file;
    EXPECT_TRUE(ValidateTable(*t).ok()) << c.file;
  }
}

TEST_F(SklearnCsvTest, DigitsIsGzipWithoutHeader) {
  auto t = ReadCsv({F("digits.csv.gz"), ""}, CsvOptions{});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->n, 1797u);
  EXPECT_EQ(t->features, 64u);
  EXPECT_EQ(t->task.classes, 10);
  EXPECT_EQ(t->labels[0], 0);
  auto tt = SplitHoldout(*std::move(t), 0.2, 1);
  ASSERT_TRUE(tt.ok());
  const FeatureScaling s = FitStandardization(tt->train);
  ASSERT_TRUE(ApplyStandardization(s, tt->train).ok());
  // Pixel 0 is blank in every image: centred to zero, not NaN.
  EXPECT_EQ(tt->train.x[0], 0.0f);
  EXPECT_TRUE(ValidateTable(tt->train).ok());
}

TEST_F(SklearnCsvTest, RegressionFiles) {
  CsvOptions o;
  o.task.kind = Task::Kind::kRegression;
  auto diabetes = ReadCsv({F("diabetes_data_raw.csv.gz"), F("diabetes_target.csv.gz")}, o);
  ASSERT_TRUE(diabetes.ok()) << diabetes.status().ToString();
  EXPECT_EQ(diabetes->n, 442u);
  EXPECT_EQ(diabetes->features, 10u);
  EXPECT_EQ(diabetes->targets[0], 151.0f);
  auto linnerud = ReadCsv({F("linnerud_exercise.csv"), F("linnerud_physiological.csv")}, o);
  ASSERT_TRUE(linnerud.ok()) << linnerud.status().ToString();
  EXPECT_EQ(linnerud->n, 20u);
  EXPECT_EQ(linnerud->task.targets, 3);
  if (std::filesystem::exists(F("boston_house_prices.csv"))) {
    o.label_name = "MEDV";
    auto boston = ReadCsv({F("boston_house_prices.csv"), ""}, o);
    ASSERT_TRUE(boston.ok()) << boston.status().ToString();
    EXPECT_EQ(boston->n, 506u);
    EXPECT_EQ(boston->features, 13u);
  }
}

}  // namespace
}  // namespace ringtrain::data

namespace ringtrain::data {
namespace {

// What messages quote stays text JSON can hold (a summary's dump refuses broken UTF-8: review
// found overlong forms, surrogates, lead bytes F5-FF and a cut through a character let through).
TEST(QuoteTextTest, OnlyWellFormedUtf8IsKept) {
  const struct {
    std::string in;
    std::string want;
  } cases[] = {
      {"plain", "\"plain\""},
      {"\xC3\xA9t\xC3\xA9", "\"\xC3\xA9t\xC3\xA9\""},    // UTF-8 kept
      {"f\xE9", "\"f\\xE9\""},                           // Latin-1
      {"\xF5\x80\x80\x80", "\"\\xF5\\x80\\x80\\x80\""},  // no such lead byte
      {"\xE0\x80\x80", "\"\\xE0\\x80\\x80\""},           // overlong
      {"\xED\xA0\x80", "\"\\xED\\xA0\\x80\""},           // a surrogate
      {"\xF4\x90\x80\x80", "\"\\xF4\\x90\\x80\\x80\""},  // past U+10FFFF
      {"\xC0\xAF", "\"\\xC0\\xAF\""},                    // overlong '/'
      {"\xF0\x9F\x98\x80", "\"\xF0\x9F\x98\x80\""},      // U+1F600 kept
      {"a\tb", "\"a?b\""},
      {std::string(63, 'a') + "\xC3\xA9", "\"" + std::string(63, 'a') + "...\""},  // not cut
  };
  for (const auto& c : cases) {
    const std::string quoted = QuoteText(c.in);
    EXPECT_EQ(quoted, c.want);
    EXPECT_NO_THROW((void)nlohmann::json(quoted).dump()) << quoted;
  }
}

}  // namespace
}  // namespace ringtrain::data
