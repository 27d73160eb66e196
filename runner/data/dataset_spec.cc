#include "runner/data/dataset_spec.h"

#include <array>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "common/json_fields.h"

namespace ringtrain::data {
namespace {

using Json = nlohmann::json;

// A dataset spec is a flat object: anything nested this deep is hostile (and nlohmann's dump,
// used by error messages, recurses).
constexpr int kMaxDepth = 16;
constexpr int kMaxShapeDims = 4;
constexpr int kMaxShapeDim = 1 << 16;
constexpr int kMaxLabelIndex = 1 << 16;

bool TooDeep(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (ch == '\\') {
        ++i;
      } else if (ch == '"') {
        in_string = false;
      }
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > kMaxDepth) return true;
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return false;
}

constexpr std::array<std::string_view, 3> kFormats{"idx", "csv", "npy"};
constexpr std::array<std::string_view, 4> kHeaders{"auto", "none", "header", "sklearn"};
constexpr std::array<std::string_view, 2> kTasks{"classification", "regression"};

struct DelimiterName {
  char ch;
  std::string_view name;
};
constexpr std::array<DelimiterName, 5> kDelimiters{{
    {0, "auto"},
    {',', ","},
    {';', ";"},
    {'\t', "\t"},
    {' ', " "},
}};

std::string_view HeaderName(CsvHeader h) {
  switch (h) {
    case CsvHeader::kAuto:
      return kHeaders[0];
    case CsvHeader::kNone:
      return kHeaders[1];
    case CsvHeader::kHeader:
      return kHeaders[2];
    case CsvHeader::kSklearnCounts:
      return kHeaders[3];
  }
  return kHeaders[0];
}

std::string_view DelimiterNameOf(char ch) {
  for (const DelimiterName& d : kDelimiters) {
    if (d.ch == ch) return d.name;
  }
  return kDelimiters[0].name;
}

template <std::size_t N>
std::vector<std::string> Names(const std::array<std::string_view, N>& names) {
  return {names.begin(), names.end()};
}

template <std::size_t N>
std::size_t IndexOf(const std::array<std::string_view, N>& names, const std::string& name) {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == name) return i;
  }
  return 0;
}

// A key the format does not use is an error, not silently ignored.
Status NotFor(Fields& f, DatasetFormat format, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    if (f.Find(key) != nullptr) {
      return InvalidArgument(f.Path(key) + ": not a key of format " + std::string(NameOf(format)));
    }
  }
  return Status::Ok();
}

Status RequireFile(const Fields& f, const char* key, const std::string& value) {
  if (value.empty()) return InvalidArgument(f.Path(key) + ": required (a file path)");
  return Status::Ok();
}

Status RequireTestFile(const Fields& f, const char* key, const std::string& value) {
  if (value.empty()) {
    return InvalidArgument(f.Path(key) +
                           ": required (a file path), or a testFraction to hold out of train");
  }
  return Status::Ok();
}

Status ParseLabel(Fields& f, DatasetSpec& spec) {
  const Json* v = f.Find("label");
  if (v == nullptr) return Status::Ok();
  if (v->is_string()) {
    spec.label_name = v->get<std::string>();
    if (spec.label_name.empty()) return InvalidArgument(f.Path("label") + ": must not be empty");
    return Status::Ok();
  }
  if (!v->is_number_integer()) {
    return InvalidArgument(f.Path("label") + ": must be a column name or an integer index, got " +
                           JsonTypeName(*v) + " " + QuoteJson(*v) +
                           (v->is_boolean() ? " (YAML reads y, n, yes, no, on, off, true and "
                                              "false as booleans: quote a column of such a name)"
                                            : ""));
  }
  return f.Int("label", -kMaxLabelIndex, kMaxLabelIndex, &spec.label_index);
}

Status ParseInputShape(Fields& f, DatasetSpec& spec) {
  const Json* v = f.Find("inputShape");
  if (v == nullptr) return Status::Ok();
  const std::string at = f.Path("inputShape");
  if (!v->is_array() || v->empty() || v->size() > kMaxShapeDims) {
    return InvalidArgument(at + ": must be a list of 1 to " + std::to_string(kMaxShapeDims) +
                           " positive integers, got " + QuoteJson(*v));
  }
  for (std::size_t i = 0; i < v->size(); ++i) {
    const Json& d = (*v)[i];
    const std::string di = at + "[" + std::to_string(i) + "]";
    if (!d.is_number_integer() && !d.is_number_unsigned()) {
      return InvalidArgument(di + ": must be an integer, got " + QuoteJson(d));
    }
    // [features] as wide as a table may be (model.input takes as many), each of several
    // dimensions at most kMaxShapeDim.
    const std::uint64_t most = v->size() == 1 ? std::uint64_t{std::numeric_limits<int>::max()}
                                              : std::uint64_t{kMaxShapeDim};
    const bool in_range = d.is_number_unsigned()
                              ? d.get<std::uint64_t>() >= 1 && d.get<std::uint64_t>() <= most
                              : d.get<std::int64_t>() >= 1 &&
                                    static_cast<std::uint64_t>(d.get<std::int64_t>()) <= most;
    if (!in_range) {
      return InvalidArgument(di + ": must be 1.." + std::to_string(most) + ", got " + QuoteJson(d));
    }
    spec.input_shape.push_back(static_cast<int>(d.get<std::int64_t>()));
  }
  return Status::Ok();
}

}  // namespace

std::string_view NameOf(DatasetFormat format) { return kFormats[static_cast<std::size_t>(format)]; }

StatusOr<DatasetSpec> ParseDatasetSpec(std::string_view text, std::string_view where) {
  const std::string root(where);
  if (TooDeep(text)) {
    return InvalidArgument(root + ": nested deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  const Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument(root + ": not valid JSON");
  if (!doc.is_object()) return InvalidArgument(root + ": must be an object");
  Fields f(doc, root);
  DatasetSpec spec;

  if (f.Find("format") == nullptr) {
    return InvalidArgument(f.Path("format") + ": required (idx, csv or npy)");
  }
  std::string format(kFormats[0]);
  RETURN_IF_ERROR(f.Enum("format", Names(kFormats), &format));
  spec.format = static_cast<DatasetFormat>(IndexOf(kFormats, format));

  RETURN_IF_ERROR(ParseInputShape(f, spec));
  RETURN_IF_ERROR(f.Int("classes", 0, kMaxClasses, &spec.classes));

  if (spec.format == DatasetFormat::kIdx) {
    RETURN_IF_ERROR(
        NotFor(f, spec.format,
               {"test", "trainLabels", "testLabels", "trainX", "trainY", "testX", "testY", "header",
                "delimiter", "label", "task", "standardize", "testFraction"}));
    RETURN_IF_ERROR(f.String("train", &spec.train));
    if (spec.train.empty()) return InvalidArgument(f.Path("train") + ": required (a directory)");
    RETURN_IF_ERROR(f.NoUnknown());
    return spec;
  }

  std::string task(kTasks[0]);
  RETURN_IF_ERROR(f.Enum("task", Names(kTasks), &task));
  if (task == kTasks[1]) spec.task = Task::Kind::kRegression;
  if (spec.task == Task::Kind::kRegression && spec.classes != 0) {
    return InvalidArgument(f.Path("classes") + ": only for task classification");
  }
  RETURN_IF_ERROR(f.Bool("standardize", &spec.standardize));
  if (const Json* v = f.Find("testFraction"); v != nullptr) {
    if (!v->is_number() || !(v->get<double>() >= 0 && v->get<double>() < 1)) {
      return InvalidArgument(f.Path("testFraction") + ": must be a number in [0, 1), got " +
                             QuoteJson(*v));
    }
    spec.test_fraction = v->get<double>();
  }
  const bool holdout = spec.test_fraction > 0;

  if (spec.format == DatasetFormat::kCsv) {
    RETURN_IF_ERROR(NotFor(f, spec.format, {"trainX", "trainY", "testX", "testY"}));
    RETURN_IF_ERROR(f.String("train", &spec.train));
    RETURN_IF_ERROR(f.String("test", &spec.test));
    RETURN_IF_ERROR(f.String("trainLabels", &spec.train_labels));
    RETURN_IF_ERROR(f.String("testLabels", &spec.test_labels));
    RETURN_IF_ERROR(RequireFile(f, "train", spec.train));
    if (holdout) {
      if (!spec.test.empty() || !spec.test_labels.empty()) {
        return InvalidArgument(f.Path(spec.test.empty() ? "testLabels" : "test") +
                               ": not with testFraction (the test split is held out of train)");
      }
    } else {
      RETURN_IF_ERROR(RequireTestFile(f, "test", spec.test));
    }
    if (!spec.train_labels.empty() && !holdout && spec.test_labels.empty()) {
      return InvalidArgument(f.Path("testLabels") + ": required with trainLabels");
    }
    if (spec.train_labels.empty() && !spec.test_labels.empty()) {
      return InvalidArgument(f.Path("trainLabels") + ": required with testLabels");
    }
    std::string header(kHeaders[0]);
    RETURN_IF_ERROR(f.Enum("header", Names(kHeaders), &header));
    spec.header = static_cast<CsvHeader>(IndexOf(kHeaders, header));
    std::string delimiter(kDelimiters[0].name);
    std::vector<std::string> delimiters;
    for (const DelimiterName& d : kDelimiters) delimiters.emplace_back(d.name);
    RETURN_IF_ERROR(f.Enum("delimiter", delimiters, &delimiter));
    for (const DelimiterName& d : kDelimiters) {
      if (d.name == delimiter) spec.delimiter = d.ch;
    }
    RETURN_IF_ERROR(ParseLabel(f, spec));
    if (!spec.train_labels.empty() && f.Find("label") != nullptr) {
      return InvalidArgument(f.Path("label") +
                             ": not with trainLabels (every column of that file is a label)");
    }
  } else {
    RETURN_IF_ERROR(NotFor(f, spec.format,
                           {"test", "trainLabels", "testLabels", "header", "delimiter", "label"}));
    if (f.Find("train") != nullptr) {
      return InvalidArgument(f.Path("train") + ": format npy takes trainX and trainY");
    }
    RETURN_IF_ERROR(f.String("trainX", &spec.train_x));
    RETURN_IF_ERROR(f.String("trainY", &spec.train_y));
    RETURN_IF_ERROR(f.String("testX", &spec.test_x));
    RETURN_IF_ERROR(f.String("testY", &spec.test_y));
    RETURN_IF_ERROR(RequireFile(f, "trainX", spec.train_x));
    RETURN_IF_ERROR(RequireFile(f, "trainY", spec.train_y));
    if (holdout) {
      if (!spec.test_x.empty() || !spec.test_y.empty()) {
        return InvalidArgument(f.Path(spec.test_x.empty() ? "testY" : "testX") +
                               ": not with testFraction (the test split is held out of train)");
      }
    } else {
      RETURN_IF_ERROR(RequireTestFile(f, "testX", spec.test_x));
      RETURN_IF_ERROR(RequireTestFile(f, "testY", spec.test_y));
    }
  }
  RETURN_IF_ERROR(f.NoUnknown());
  return spec;
}

std::string DatasetSpecJson(const DatasetSpec& spec) {
  Json j = Json::object();  // std::map keys: sorted, so the dump is canonical
  j["format"] = std::string(NameOf(spec.format));
  if (!spec.input_shape.empty()) j["inputShape"] = spec.input_shape;
  if (spec.format == DatasetFormat::kIdx) {
    j["train"] = spec.train;
    if (spec.classes != 0) j["classes"] = spec.classes;
    return j.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  }
  const bool regression = spec.task == Task::Kind::kRegression;
  j["task"] = std::string(kTasks[regression ? 1 : 0]);
  if (!regression) j["classes"] = spec.classes;
  j["standardize"] = spec.standardize;
  j["testFraction"] = spec.test_fraction;
  const auto file = [&j](const char* key, const std::string& value) {
    if (!value.empty()) j[key] = value;
  };
  if (spec.format == DatasetFormat::kCsv) {
    file("train", spec.train);
    file("test", spec.test);
    file("trainLabels", spec.train_labels);
    file("testLabels", spec.test_labels);
    j["header"] = std::string(HeaderName(spec.header));
    j["delimiter"] = std::string(DelimiterNameOf(spec.delimiter));
    if (spec.train_labels.empty()) {
      if (!spec.label_name.empty()) {
        j["label"] = spec.label_name;
      } else {
        j["label"] = spec.label_index;
      }
    }
  } else {
    file("trainX", spec.train_x);
    file("trainY", spec.train_y);
    file("testX", spec.test_x);
    file("testY", spec.test_y);
  }
  return j.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

}  // namespace ringtrain::data
