#include "runner/data/csv.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "common/stop.h"
#include "runner/data/data_file.h"

namespace ringtrain::data {
namespace {

// The text of a whole file, refused as soon as it passes `max_bytes` (at most kMaxCsvBytes):
// memory grows only as bytes arrive, so a gzip bomb costs at most the cap.
StatusOr<std::string> ReadText(const std::string& path, std::uint64_t max_bytes) {
  ASSIGN_OR_RETURN(DataFile file, DataFile::Open(path));
  const std::uint64_t cap = std::min(max_bytes, kMaxCsvBytes);
  std::string text;
  // A plain file's size is its text's: room for it at once, not grown by doubling (a gzip's is
  // unknown, and grows as bytes arrive).
  if (!file.gzip()) text.reserve(static_cast<std::size_t>(std::min(file.size(), cap + 1)));
  ASSIGN_OR_RETURN(std::size_t got, file.ReadUpTo(static_cast<std::size_t>(cap) + 1, text));
  if (got > cap) {
    return InvalidArgument(path + ": more than " + std::to_string(cap) +
                           " bytes (decompressed), the most a CSV dataset may hold in memory");
  }
  return text;
}

struct Line {
  std::size_t number = 0;  // 1-based, for messages
  std::vector<std::string_view> cells;
};

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// A cell's text without surrounding quotes ("a ""b""" keeps its inner quotes doubled: such a cell
// is only ever a header name or an error message).
std::string_view Unquote(std::string_view s) {
  s = Trim(s);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

// Splits one line into `cells` (cleared first, its room reused); a quoted cell may hold the
// delimiter. `delim` ' ' splits on runs of blanks.
void SplitCells(std::string_view line, char delim, std::vector<std::string_view>& cells) {
  cells.clear();
  if (delim == ' ') {
    std::size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && IsSpace(line[i])) ++i;
      if (i == line.size()) break;
      const std::size_t start = i;
      bool quoted = false;
      while (i < line.size() && (quoted || !IsSpace(line[i]))) {
        if (line[i] == '"') quoted = !quoted;
        ++i;
      }
      cells.push_back(Unquote(line.substr(start, i - start)));
    }
    return;
  }
  std::size_t start = 0;
  bool quoted = false;
  for (std::size_t i = 0; i <= line.size(); ++i) {
    if (i < line.size() && line[i] == '"') quoted = !quoted;
    if (i == line.size() || (line[i] == delim && !quoted)) {
      cells.push_back(Unquote(line.substr(start, i - start)));
      start = i + 1;
    }
  }
}

// Every 4096 rows: StoppedStatus naming the file once a stop (SIGTERM, SIGINT) is requested, so a
// large file is not parsed to its end first.
Status CheckNotStopped(std::size_t row, const std::string& path) {
  if (row % 4096 != 0 || !StopRequested()) return Status::Ok();
  return StoppedStatus("data loading (parsing " + path + ")");
}

// A non-blank line of the file, not yet split: its cells are split where they are read, into
// one reused vector. Kept split, a file's cells took 16 bytes of view each and their vectors'
// slack (a CSV of small integers peaked at 12 times its size).
struct RawLine {
  std::size_t number = 0;  // 1-based, for messages
  std::string_view text;
};

Line Split(const RawLine& raw, char delim) {
  Line line{raw.number, {}};
  SplitCells(raw.text, delim, line.cells);
  return line;
}

// The non-blank lines of `text`.
std::vector<RawLine> SplitLines(std::string_view text) {
  std::vector<RawLine> lines;
  std::size_t number = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view raw = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++number;
    if (Trim(raw).empty()) continue;
    lines.push_back({number, raw});
  }
  return lines;
}

// The first line's delimiter: ',' where it has one, else a tab, else ';' (Excel's CSV where the
// decimal mark is a comma), else runs of blanks. A tab before ';': a tab-separated file whose
// names hold a ';' was read as tab-separated before ';' was looked for.
char PickDelimiter(std::string_view text, char requested) {
  if (requested != 0) return requested;
  const std::string_view first = text.substr(0, text.find('\n'));
  if (first.find(',') != std::string_view::npos) return ',';
  if (first.find('\t') != std::string_view::npos) return '\t';
  if (first.find(';') != std::string_view::npos) return ';';
  return ' ';
}

// What the delimiter is called in a message.
std::string DelimiterName(char delim) {
  switch (delim) {
    case '\t':
      return "tab";
    case ' ':
      return "blanks";
    default:
      return std::string("'") + delim + "'";
  }
}

// Which delimiter split the lines, for a message where another would have found the columns.
std::string SplitOn(char delim) {
  return " (its lines split on " + DelimiterName(delim) +
         "; set the dataset's delimiter, spec.train.dataset.delimiter in a TrainingJob, if it is "
         "another)";
}

std::optional<double> ParseNumber(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return std::nullopt;
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::int64_t> ParseCount(std::string_view s) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

// A header names columns: no cell of it is a number. A first line with some numbers and a bad
// cell is a sample, so that it is reported rather than taken for names.
bool LooksLikeHeader(const Line& line) {
  return std::none_of(line.cells.begin(), line.cells.end(),
                      [](std::string_view c) { return ParseNumber(c).has_value(); });
}

// Whether the numbers of `line` are 0, 1, 2, ... in order, at least two of them: the integer
// column names pandas writes for a DataFrame built from an array ("0,1,2,label"; "0,1,2,3" when
// the label column got an integer name too).
bool HasPandasIntegerNames(const Line& line) {
  std::int64_t next = 0;
  for (const std::string_view c : line.cells) {
    if (!ParseNumber(c)) continue;
    const auto v = ParseCount(c);
    if (!v || *v != next) return false;
    ++next;
  }
  return next >= 2;
}

// sklearn's "150,4,setosa,versicolor,virginica": two counts, then names or empty cells.
bool LooksLikeCounts(const Line& line) {
  if (line.cells.size() < 3 || !ParseCount(line.cells[0]) || !ParseCount(line.cells[1])) {
    return false;
  }
  return std::none_of(line.cells.begin() + 2, line.cells.end(),
                      [](std::string_view c) { return ParseNumber(c).has_value(); });
}

std::string Quote(std::string_view s) { return QuoteText(s); }

// One file's cells as numbers: the header and counts lines taken off, every row checked.
struct Parsed {
  std::string path;
  std::vector<std::string> names;  // from the header line, if any
  std::vector<std::string> class_names;
  std::optional<std::int64_t> announced_samples;
  std::optional<std::int64_t> announced_features;
  std::size_t columns = 0;
  char delim = ',';
  std::vector<RawLine> rows;
  // Owns what `rows` view: on the heap, so that moving a Parsed (and a short string's inline
  // buffer with it) does not leave the views dangling.
  std::unique_ptr<std::string> text;
};

StatusOr<Parsed> Parse(const std::string& path, const CsvOptions& o) {
  Parsed p;
  p.path = path;
  ASSIGN_OR_RETURN(std::string text, ReadText(path, o.max_bytes));
  // A UTF-8 byte order mark (Excel's "CSV UTF-8", PowerShell's Export-Csv) is no part of the
  // first cell, as pandas reads it: else its header name differs, invisibly, from the test
  // file's, and a first number does not parse.
  if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
  // A NUL byte is in no text: another format's file (a .npy, an IDX file) parsed as text fails
  // on its "columns" or cells otherwise, naming neither the file's kind nor the fix.
  if (const std::size_t nul = text.find('\0'); nul != std::string::npos) {
    const bool npy = text.starts_with("\x93NUMPY");
    return InvalidArgument(path + ": not a text file (byte " + std::to_string(nul) + " is NUL)" +
                           (npy ? ": it is a .npy file; say format: npy and trainX/trainY"
                                : ": a CSV dataset is text, comma, semicolon, tab or blank "
                                  "separated"));
  }
  p.text = std::make_unique<std::string>(std::move(text));
  const char delim = PickDelimiter(*p.text, o.delimiter);
  if (delim != ',' && delim != ';' && delim != '\t' && delim != ' ') {
    return InvalidArgument(path + ": unsupported delimiter " + Quote(std::string(1, delim)) +
                           " (use ',', ';', tab or ' ')");
  }
  p.delim = delim;
  std::vector<RawLine> lines = SplitLines(*p.text);
  std::size_t first = 0;
  if (lines.empty()) return InvalidArgument(path + ": no samples (the file is empty)");
  const Line line0 = Split(lines[0], delim);
  const bool counts = o.header == CsvHeader::kSklearnCounts ||
                      (o.header == CsvHeader::kAuto && LooksLikeCounts(line0));
  if (counts) {
    const Line& c = line0;
    if (c.cells.size() < 2 || !ParseCount(c.cells[0]) || !ParseCount(c.cells[1])) {
      return InvalidArgument(path + ": line " + std::to_string(c.number) +
                             " is not a sklearn counts line (n_samples,n_features,names...)");
    }
    p.announced_samples = ParseCount(c.cells[0]);
    p.announced_features = ParseCount(c.cells[1]);
    for (std::size_t i = 2; i < c.cells.size(); ++i) {
      if (!c.cells[i].empty()) p.class_names.emplace_back(c.cells[i]);
    }
    first = 1;
  }
  bool header = o.header == CsvHeader::kHeader;
  const Line head = first < lines.size() ? Split(lines[first], delim) : Line{};
  if (!header && o.header != CsvHeader::kNone && first < lines.size()) {
    const Line& l = head;
    // A line naming the label column is its header, whatever other names look like numbers
    // (years: "2019,2020,species").
    header = LooksLikeHeader(l) ||
             (!o.label_name.empty() && !ParseNumber(o.label_name) &&
              std::find(l.cells.begin(), l.cells.end(), o.label_name) != l.cells.end());
    if (!header && HasPandasIntegerNames(l)) {
      // pandas' integer names beside named columns are a header; a line of nothing but
      // 0, 1, ..., n-1 may be either, and guessing would add or drop a sample silently.
      if (std::all_of(l.cells.begin(), l.cells.end(),
                      [](std::string_view c) { return ParseNumber(c).has_value(); })) {
        return InvalidArgument(path + ": line " + std::to_string(l.number) + " is 0, 1, ..., " +
                               std::to_string(l.cells.size() - 1) +
                               ": pandas' integer column names or a sample? Set the dataset's "
                               "header (spec.train.dataset.header in a TrainingJob) to header "
                               "or none");
      }
      header = true;
    }
  }
  if (header && first < lines.size()) {
    for (auto c : head.cells) p.names.emplace_back(c);
    ++first;
  }
  lines.erase(lines.begin(), lines.begin() + static_cast<std::ptrdiff_t>(first));
  p.rows = std::move(lines);
  if (p.rows.empty()) return InvalidArgument(path + ": no samples (no line after the header)");
  std::vector<std::string_view> cells;
  SplitCells(p.rows[0].text, delim, cells);
  p.columns = cells.size();
  if (!p.names.empty() && p.names.size() != p.columns) {
    return DataLoss(path + ": the header names " + std::to_string(p.names.size()) +
                    " columns, line " + std::to_string(p.rows[0].number) + " has " +
                    std::to_string(p.columns) + SplitOn(delim));
  }
  std::size_t seen = 0;
  for (const RawLine& r : p.rows) {
    RETURN_IF_ERROR(CheckNotStopped(++seen, path));
    SplitCells(r.text, delim, cells);
    if (cells.size() != p.columns) {
      return DataLoss(path + ": line " + std::to_string(r.number) + " has " +
                      std::to_string(cells.size()) + " columns, line " +
                      std::to_string(p.rows[0].number) + " has " + std::to_string(p.columns) +
                      SplitOn(delim));
    }
  }
  if (p.announced_samples && static_cast<std::uint64_t>(*p.announced_samples) != p.rows.size()) {
    return DataLoss(path + ": the counts line announces " + std::to_string(*p.announced_samples) +
                    " samples, the file has " + std::to_string(p.rows.size()));
  }
  return p;
}

std::string ColumnName(const Parsed& p, std::size_t col) {
  std::string s = "column " + std::to_string(col + 1);
  if (col < p.names.size()) s += " (" + Quote(p.names[col]) + ")";
  return s;
}

// The cell `col` of `row` (split into `cells`) as a float. The message of a bad cell is made
// only for it: made for every cell, it took most of the parse's time.
StatusOr<float> Cell(const Parsed& p, const RawLine& row,
                     const std::vector<std::string_view>& cells, std::size_t col) {
  const std::string_view text = cells[col];
  const auto v = ParseNumber(text);
  if (v && std::isfinite(*v) && std::abs(*v) <= 3.4e38) return static_cast<float>(*v);
  const std::string where =
      p.path + ": line " + std::to_string(row.number) + ", " + ColumnName(p, col) + ": ";
  if (!v) {
    return DataLoss(where + (text.empty() ? std::string("empty cell (missing value)")
                                          : Quote(text) + " is not a number"));
  }
  if (std::isfinite(*v)) {
    return DataLoss(where + Quote(text) + " is beyond float32's range (|x| <= 3.4e38)");
  }
  return DataLoss(where + Quote(text) + " is not a finite number");
}

StatusOr<std::int32_t> Label(const Parsed& p, const RawLine& row,
                             const std::vector<std::string_view>& cells, std::size_t col) {
  const std::string_view text = cells[col];
  const auto v = ParseNumber(text);
  if (!v || !(*v >= 0 && *v < 2147483647.0) || std::floor(*v) != *v) {
    return DataLoss(p.path + ": line " + std::to_string(row.number) + ", " + ColumnName(p, col) +
                    ": label " + Quote(text) + " is not a non-negative integer");
  }
  return static_cast<std::int32_t>(*v);
}

StatusOr<std::size_t> LabelColumn(const Parsed& p, const CsvOptions& o) {
  if (!o.label_name.empty()) {
    if (p.names.empty()) {
      return InvalidArgument(p.path + ": the label column is named " + Quote(o.label_name) +
                             " but the file has no header line");
    }
    const auto it = std::find(p.names.begin(), p.names.end(), o.label_name);
    if (it == p.names.end()) {
      // The names it has (a label of another case, a name mistyped), the first 12 of them.
      std::string names;
      for (std::size_t i = 0; i < p.names.size() && i < 12; ++i) {
        names += (names.empty() ? "" : ", ") + Quote(p.names[i]);
      }
      if (p.names.size() > 12) names += ", ... (" + std::to_string(p.names.size()) + " in all)";
      return InvalidArgument(p.path + ": no column named " + Quote(o.label_name) +
                             " in the header, which names " + names + SplitOn(p.delim));
    }
    // Two columns of the label's name: taking the first would train on the other as a feature.
    if (const auto again = std::find(it + 1, p.names.end(), o.label_name); again != p.names.end()) {
      return InvalidArgument(p.path + ": the header names two columns " + Quote(o.label_name) +
                             " (columns " + std::to_string(it - p.names.begin() + 1) + " and " +
                             std::to_string(again - p.names.begin() + 1) +
                             "): which is the label?");
    }
    return static_cast<std::size_t>(it - p.names.begin());
  }
  const auto cols = static_cast<std::int64_t>(p.columns);
  const std::int64_t i = o.label_index < 0 ? cols + o.label_index : o.label_index;
  if (i < 0 || i >= cols) {
    return InvalidArgument(p.path + ": label column index " + std::to_string(o.label_index) +
                           " is outside the file's " + std::to_string(cols) + " columns");
  }
  return static_cast<std::size_t>(i);
}

}  // namespace

StatusOr<Table> ReadCsv(const CsvSplitFiles& files, const CsvOptions& o) {
  if (o.task.classes < 0 || o.task.classes > kMaxClasses || o.task.targets < 0) {
    return InvalidArgument("csv options: classes must be in [0, " + std::to_string(kMaxClasses) +
                           "] and targets non-negative");
  }
  ASSIGN_OR_RETURN(Parsed px, Parse(files.features, o));
  const bool separate = !files.labels.empty();
  Table t;
  t.path = files.features;
  t.labels_path = separate ? files.labels : files.features;
  t.task = o.task;
  t.n = px.rows.size();
  std::optional<std::size_t> label_col;
  if (!separate) {
    ASSIGN_OR_RETURN(label_col, LabelColumn(px, o));
    if (px.columns < 2) {
      return InvalidArgument(px.path + ": one column: no features beside the label column" +
                             SplitOn(px.delim));
    }
  }
  // A first column without a name is the row index pandas' to_csv (and R's write.csv) writes
  // unless told not to: trained on as a feature, it leaks the order of the rows.
  if (!px.names.empty() && px.names[0].empty() && !(label_col && *label_col == 0)) {
    return InvalidArgument(px.path +
                           ": column 1 has no name in the header: a row index, as "
                           "pandas' to_csv writes it (write the file with index=False), would be "
                           "trained on as a feature");
  }
  t.features = px.columns - (label_col ? 1 : 0);
  t.shape = {t.features};
  if (px.announced_features && static_cast<std::uint64_t>(*px.announced_features) != t.features) {
    return DataLoss(px.path + ": the counts line announces " +
                    std::to_string(*px.announced_features) + " features, the file has " +
                    std::to_string(t.features));
  }
  for (std::size_t c = 0; c < px.names.size(); ++c) {
    if (!label_col || c != *label_col) t.feature_names.push_back(px.names[c]);
  }
  t.x.reserve(t.n * t.features);
  std::vector<std::string_view> cells;
  std::size_t seen = 0;
  for (const RawLine& row : px.rows) {
    RETURN_IF_ERROR(CheckNotStopped(++seen, px.path));
    SplitCells(row.text, px.delim, cells);
    for (std::size_t c = 0; c < px.columns; ++c) {
      if (label_col && c == *label_col) continue;
      ASSIGN_OR_RETURN(float v, Cell(px, row, cells, c));
      t.x.push_back(v);
    }
  }
  // The labels' cells: the label column, or every column of the labels file.
  Parsed py;
  const Parsed* ys = &px;
  std::size_t y_first = label_col.value_or(0);
  std::size_t y_count = 1;
  if (separate) {
    ASSIGN_OR_RETURN(py, Parse(files.labels, o));
    ys = &py;
    y_count = py.columns;
    if (py.rows.size() != t.n) {
      return DataLoss(py.path + ": " + std::to_string(py.rows.size()) + " label lines for " +
                      std::to_string(t.n) + " samples in " + px.path);
    }
  }
  const std::vector<std::string>& class_names =
      separate && !py.class_names.empty() ? py.class_names : px.class_names;
  if (t.task.classification()) {
    if (y_count != 1) {
      return InvalidArgument(ys->path + ": " + std::to_string(y_count) +
                             " label columns; classification takes one");
    }
    if (t.task.classes == 0 && !class_names.empty()) {
      if (class_names.size() > static_cast<std::size_t>(kMaxClasses)) {
        return DataLoss(ys->path + ": the counts line names " + std::to_string(class_names.size()) +
                        " classes, more than " + std::to_string(kMaxClasses));
      }
      t.task.classes = static_cast<int>(class_names.size());
    }
    t.labels.reserve(t.n);
    std::int32_t top = -1;
    std::size_t top_line = 0;
    for (const RawLine& row : ys->rows) {
      SplitCells(row.text, ys->delim, cells);
      ASSIGN_OR_RETURN(std::int32_t label, Label(*ys, row, cells, y_first));
      const int limit = t.task.classes > 0 ? t.task.classes : kMaxClasses;
      if (label >= limit) {
        return DataLoss(ys->path + ": line " + std::to_string(row.number) + ", " +
                        ColumnName(*ys, y_first) + ": label " + std::to_string(label) +
                        " is not below the " + std::to_string(limit) +
                        (t.task.classes > 0 ? " classes" : " classes a model may have"));
      }
      if (label > top) {
        top = label;
        top_line = row.number;
      }
      t.labels.push_back(label);
    }
    if (t.task.classes == 0) {
      t.task.classes = top + 1;
      t.classes_from = "the largest label, " + std::to_string(top) + " (" + ys->path + " line " +
                       std::to_string(top_line) + "), plus one";
    }
  } else {
    if (t.task.targets != 0 && static_cast<std::size_t>(t.task.targets) != y_count) {
      return InvalidArgument(ys->path + ": " + std::to_string(y_count) +
                             " target columns, the task has " + std::to_string(t.task.targets));
    }
    t.task.targets = static_cast<int>(y_count);
    t.targets.reserve(t.n * y_count);
    for (const RawLine& row : ys->rows) {
      SplitCells(row.text, ys->delim, cells);
      for (std::size_t c = y_first; c < y_first + y_count; ++c) {
        ASSIGN_OR_RETURN(float v, Cell(*ys, row, cells, c));
        t.targets.push_back(v);
      }
    }
  }
  return t;
}

StatusOr<TrainTest> LoadCsv(const CsvSplitFiles& train, const CsvSplitFiles& test,
                            const CsvOptions& options) {
  return LoadTrainTest(
      [&](const Task* train_task) {
        CsvOptions o = options;
        if (train_task != nullptr) o.task = *train_task;
        return ReadCsv(train_task == nullptr ? train : test, o);
      },
      options.standardize);
}

}  // namespace ringtrain::data
