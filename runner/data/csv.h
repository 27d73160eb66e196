// CSV datasets (plain or .gz) into a Table: numeric features, the label column by name or index,
// optional standardisation fitted on the training split. Owns the text format only.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "runner/data/table.h"

namespace ringtrain::data {

// The most bytes one CSV file may hold (decompressed; checked as bytes arrive, and for a gzip
// file against deflate's best ratio first): the whole dataset stays in memory on every rank.
inline constexpr std::uint64_t kMaxCsvBytes = std::uint64_t{1} << 30;

enum class CsvHeader {
  // A first line with no numeric cell is a header, and so is one whose numbers are pandas'
  // integer column names 0, 1, 2, ... beside a named column ("0,1,2,label"); a line of only
  // 0, 1, ..., n-1 is refused as ambiguous (say kHeader or kNone). A sklearn counts line is
  // recognised.
  kAuto,
  kNone,    // every line is a sample
  kHeader,  // the first line names the columns
  // sklearn's "n_samples,n_features,class names..." first line (iris.csv, wine_data.csv,
  // breast_cancer.csv, boston_house_prices.csv), checked against the data, possibly followed by
  // a header line (detected as in kAuto). Its class names set Task::classes when that is 0.
  kSklearnCounts,
};

struct CsvOptions {
  // ',' ';' '\t' or ' ' (any run of spaces and tabs, as in sklearn's diabetes and linnerud
  // files); 0 picks ',' when the first line has one, else '\t', else ';', else ' '.
  char delimiter = 0;
  CsvHeader header = CsvHeader::kAuto;
  // The label column, by header name when `label_name` is set, else by index (negative counts
  // from the end: -1 is the last column). Ignored when the labels come from their own file.
  std::string label_name;
  int label_index = -1;
  // Classification labels must be integers (2 or 2.0) in [0, classes); they are not mapped
  // from strings. Regression reads one target from the label column, or every column of a
  // labels file.
  Task task;
  // Standardise every feature with the training split's mean and standard deviation.
  bool standardize = true;
  // The most bytes a file may yield once decompressed (a gzip bomb stops here).
  std::uint64_t max_bytes = kMaxCsvBytes;
};

// Where a split's samples are: one file with the label column, or a features file whose every
// column is a feature plus a labels file whose every column is a label/target (diabetes_data_raw
// + diabetes_target, linnerud_exercise + linnerud_physiological).
struct CsvSplitFiles {
  std::string features;
  std::string labels;  // empty: the label column is in `features`
};

// Reads one split (no standardisation). Malformed input is DataLoss or InvalidArgument naming
// the file, the line and the column: a non-numeric or non-finite cell, a ragged row, a label
// that is not an integer in [0, classes), a counts line the data contradicts.
StatusOr<Table> ReadCsv(const CsvSplitFiles& files, const CsvOptions& options);

// Reads the training and test splits (the test split takes the training split's classes and must
// have its features), then standardises both with the training statistics when asked.
StatusOr<TrainTest> LoadCsv(const CsvSplitFiles& train, const CsvSplitFiles& test,
                            const CsvOptions& options);

}  // namespace ringtrain::data
