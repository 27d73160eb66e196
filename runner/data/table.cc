#include "runner/data/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>

namespace ringtrain::data {

// A cell or a name as the messages quote it: at most 64 bytes, a control character as '?', and
// a byte that is no part of a UTF-8 character (a Latin-1 header) as \xNN, so that the message
// stays text (a summary's or a status's JSON refuses broken UTF-8).
std::string QuoteText(std::string_view s) {
  std::string out = "\"";
  // At most 64 bytes, not through a character: back over at most 3 continuation bytes.
  std::size_t cut = std::min<std::size_t>(s.size(), 64);
  for (int k = 0;
       k < 3 && cut < s.size() && cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80;
       ++k) {
    --cut;
  }
  const std::string_view head = s.substr(0, cut);
  for (std::size_t i = 0; i < head.size();) {
    const auto c = static_cast<unsigned char>(head[i]);
    if (c < 0x80) {
      out += c < 0x20 ? '?' : static_cast<char>(c);
      ++i;
      continue;
    }
    // A well-formed sequence (RFC 3629, as JSON writers check it): its lead byte's length and
    // second byte's range (no overlong form, no surrogate, nothing past U+10FFFF).
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    bool whole = len > 0 && i + len <= head.size();
    for (std::size_t k = 1; whole && k < len; ++k) {
      const auto b = static_cast<unsigned char>(head[i + k]);
      whole = k == 1 ? (b >= lo && b <= hi) : (b & 0xC0) == 0x80;
    }
    if (whole) {
      out.append(head.substr(i, len));
      i += len;
      continue;
    }
    char hex[8];
    std::snprintf(hex, sizeof(hex), "\\x%02X", c);
    out += hex;
    ++i;
  }
  return out + (head.size() < s.size() ? "...\"" : "\"");
}
namespace {

std::string Name(const std::string& path, const char* fallback) {
  return path.empty() ? fallback : path;
}

// A per-sample shape as NumPy prints it: "(2, 2)", "(4,)".
std::string ShapeString(const std::vector<std::size_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + (shape.size() == 1 ? ",)" : ")");
}

// The rows `order[begin, end)` of `all`, with its features, task and paths.
Table Rows(const Table& all, const std::vector<std::size_t>& order, std::size_t begin,
           std::size_t end) {
  Table t;
  t.n = end - begin;
  t.features = all.features;
  t.shape = all.shape;
  t.task = all.task;
  t.feature_names = all.feature_names;
  t.path = all.path;
  t.labels_path = all.labels_path;
  t.classes_from = all.classes_from;
  t.x.resize(t.n * t.features);
  const std::size_t tw = static_cast<std::size_t>(all.task.targets);
  if (all.task.classification()) {
    t.labels.resize(t.n);
  } else {
    t.targets.resize(t.n * tw);
  }
  Gather(all, order.data() + begin, static_cast<int>(t.n), t.x.data(),
         t.labels.empty() ? nullptr : t.labels.data(),
         t.targets.empty() ? nullptr : t.targets.data());
  return t;
}

}  // namespace

FeatureScaling FitStandardization(const Table& t) {
  const std::size_t d = t.features;
  std::vector<double> sum(d, 0.0);
  for (std::size_t i = 0; i < t.n; ++i) {
    const float* row = t.x.data() + i * d;
    for (std::size_t j = 0; j < d; ++j) sum[j] += row[j];
  }
  std::vector<double> mean(d, 0.0);
  for (std::size_t j = 0; j < d; ++j) mean[j] = t.n > 0 ? sum[j] / static_cast<double>(t.n) : 0.0;
  // Two passes (mean, then squared deviations): one-pass variance cancels badly for columns
  // such as breast_cancer's areas (~1000) with small spread.
  std::vector<double> sq(d, 0.0);
  for (std::size_t i = 0; i < t.n; ++i) {
    const float* row = t.x.data() + i * d;
    for (std::size_t j = 0; j < d; ++j) {
      const double dev = row[j] - mean[j];
      sq[j] += dev * dev;
    }
  }
  FeatureScaling s;
  s.mean.resize(d);
  s.scale.resize(d);
  for (std::size_t j = 0; j < d; ++j) {
    const double sd = t.n > 0 ? std::sqrt(sq[j] / static_cast<double>(t.n)) : 0.0;
    s.mean[j] = static_cast<float>(mean[j]);
    // A constant column (digits' always-blank corner pixels) is centred to zero, not divided by
    // zero; so is one whose spread is lost in float rounding.
    s.scale[j] =
        sd > 1e-12 * std::max(1.0, std::abs(mean[j])) ? static_cast<float>(1.0 / sd) : 1.0f;
  }
  return s;
}

Status ApplyStandardization(const FeatureScaling& s, Table& t) {
  if (s.mean.size() != t.features || s.scale.size() != t.features) {
    return InvalidArgument(Name(t.path, "in-memory table") + ": " + std::to_string(t.features) +
                           " features, the standardisation has " + std::to_string(s.mean.size()));
  }
  const std::size_t d = t.features;
  for (std::size_t i = 0; i < t.n; ++i) {
    float* row = t.x.data() + i * d;
    for (std::size_t j = 0; j < d; ++j) row[j] = (row[j] - s.mean[j]) * s.scale[j];
  }
  return Status::Ok();
}

Status ValidateTable(const Table& t, const Table* reference) {
  const std::string x = Name(t.path, "in-memory features");
  const std::string y = Name(t.labels_path, "in-memory labels");
  if (t.n == 0) return InvalidArgument(x + ": no samples");
  if (t.features == 0) return InvalidArgument(x + ": no features");
  std::size_t shape_product = 1;
  for (auto d : t.shape) shape_product *= d;
  if (t.shape.empty() || shape_product != t.features) {
    return InvalidArgument(x + ": the sample shape does not hold " + std::to_string(t.features) +
                           " features");
  }
  if (t.x.size() != t.n * t.features) {
    return InvalidArgument(x + ": " + std::to_string(t.x.size()) + " values for " +
                           std::to_string(t.n) + " samples of " + std::to_string(t.features) +
                           " features");
  }
  for (std::size_t i = 0; i < t.x.size(); ++i) {
    if (!std::isfinite(t.x[i])) {
      return InvalidArgument(x + ": sample " + std::to_string(i / t.features) + ", feature " +
                             std::to_string(i % t.features) + " is not a finite number");
    }
  }
  if (t.task.classification()) {
    if (t.task.classes < 1) return InvalidArgument(y + ": no classes");
    if (t.labels.size() != t.n || !t.targets.empty()) {
      return InvalidArgument(y + ": " + std::to_string(t.labels.size()) + " labels for " +
                             std::to_string(t.n) + " samples");
    }
    for (std::size_t i = 0; i < t.n; ++i) {
      if (t.labels[i] < 0 || t.labels[i] >= t.task.classes) {
        return InvalidArgument(y + ": label " + std::to_string(t.labels[i]) + " of sample " +
                               std::to_string(i) + " is not in [0, " +
                               std::to_string(t.task.classes) + ")");
      }
    }
  } else {
    if (t.task.targets < 1) return InvalidArgument(y + ": no regression targets");
    if (t.targets.size() != t.n * static_cast<std::size_t>(t.task.targets) || !t.labels.empty()) {
      return InvalidArgument(y + ": " + std::to_string(t.targets.size()) + " targets for " +
                             std::to_string(t.n) + " samples of " + std::to_string(t.task.targets));
    }
    for (std::size_t i = 0; i < t.targets.size(); ++i) {
      if (!std::isfinite(t.targets[i])) {
        return InvalidArgument(y + ": the target of sample " +
                               std::to_string(i / static_cast<std::size_t>(t.task.targets)) +
                               " is not a finite number");
      }
    }
  }
  if (reference != nullptr) {
    if (t.features != reference->features) {
      return InvalidArgument(x + ": samples of " + std::to_string(t.features) +
                             " features, the training set (" + reference->path + ") has " +
                             std::to_string(reference->features));
    }
    if (t.shape != reference->shape) {
      // As many values in another layout: (4,) rows against (2, 2) images.
      return InvalidArgument(x + ": samples of shape " + ShapeString(t.shape) +
                             ", the training set (" + reference->path + ") has " +
                             ShapeString(reference->shape));
    }
    const auto& names = t.feature_names;
    const auto& ref = reference->feature_names;
    if (!names.empty() && !ref.empty() && names != ref) {
      // sklearn refuses the same (a model fitted with feature names, given them in another
      // order): read by position, every sample's values would meet the wrong weights.
      const auto i = static_cast<std::size_t>(
          std::mismatch(names.begin(), names.end(), ref.begin(), ref.end()).first - names.begin());
      auto name = [](const std::vector<std::string>& v, std::size_t k) {
        return k < v.size() ? QuoteText(v[k]) : std::string("nothing");
      };
      return InvalidArgument(x + ": the header names feature " + std::to_string(i + 1) + " " +
                             name(names, i) + ", the training set (" + reference->path +
                             ") names it " + name(ref, i) +
                             ": both header lines must name the same feature columns in the same "
                             "order");
    }
    if (t.task.kind != reference->task.kind || t.task.targets != reference->task.targets) {
      return InvalidArgument(y + ": not the task of the training set (" + reference->labels_path +
                             ")");
    }
    if (t.task.classification() && t.task.classes > reference->task.classes) {
      return InvalidArgument(y + ": " + std::to_string(t.task.classes) +
                             " classes, the training set has " +
                             std::to_string(reference->task.classes));
    }
  }
  return Status::Ok();
}

DeclaredShape DescribeDeclaredShape(const std::vector<int>& declared) {
  DeclaredShape out;
  out.values = 1;
  for (const int d : declared) {
    out.values *= static_cast<std::size_t>(std::max(d, 0));
    out.text += (out.text.empty() ? "[" : ", ") + std::to_string(d);
  }
  out.text += "]";
  return out;
}

Status ApplyDeclaredShape(const std::vector<int>& declared, std::string_view field, Table& t) {
  if (declared.empty()) return Status::Ok();
  if (std::any_of(declared.begin(), declared.end(), [](int d) { return d < 1; })) {
    return InvalidArgument(std::string(field) + ": every dimension must be positive");
  }
  const DeclaredShape said = DescribeDeclaredShape(declared);
  if (said.values != t.features) {
    std::string stored;
    for (const std::size_t d : t.shape) stored += (stored.empty() ? "" : "x") + std::to_string(d);
    return InvalidArgument(std::string(field) + ": says " + said.text + " (" +
                           std::to_string(said.values) + " values) per sample but " +
                           Name(t.path, "the in-memory table") + " has " +
                           std::to_string(t.features) + " (" + stored + ")");
  }
  t.shape.assign(declared.begin(), declared.end());
  return Status::Ok();
}

StatusOr<TrainTest> SplitHoldout(Table all, double test_fraction, std::uint64_t seed) {
  if (!(test_fraction > 0.0 && test_fraction < 1.0)) {
    return InvalidArgument("test fraction " + std::to_string(test_fraction) + " is not in (0, 1)");
  }
  if (all.n < 2) {
    return InvalidArgument(Name(all.path, "in-memory table") + ": " + std::to_string(all.n) +
                           " samples cannot be split into training and test sets");
  }
  std::size_t test_n =
      static_cast<std::size_t>(std::llround(test_fraction * static_cast<double>(all.n)));
  test_n = std::clamp<std::size_t>(test_n, 1, all.n - 1);
  std::vector<std::size_t> order(all.n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  // Fisher-Yates with the engine's raw output: std::shuffle's distribution is not specified, so
  // it could differ between standard libraries; this split is the same everywhere.
  std::mt19937_64 rng(seed);
  for (std::size_t i = all.n - 1; i > 0; --i) std::swap(order[i], order[rng() % (i + 1)]);
  TrainTest out;
  out.train = Rows(all, order, 0, all.n - test_n);
  out.test = Rows(all, order, all.n - test_n, all.n);
  return out;
}

void Gather(const Table& t, const std::size_t* idx, int n, float* x, std::int32_t* labels,
            float* targets) {
  const std::size_t d = t.features;
  const auto tw = static_cast<std::size_t>(t.task.targets);
  for (int i = 0; i < n; ++i) {
    const std::size_t r = idx[i];
    std::memcpy(x + static_cast<std::size_t>(i) * d, t.x.data() + r * d, d * sizeof(float));
    if (labels != nullptr) labels[i] = t.labels[r];
    if (targets != nullptr) {
      std::memcpy(targets + static_cast<std::size_t>(i) * tw, t.targets.data() + r * tw,
                  tw * sizeof(float));
    }
  }
}

StatusOr<TrainTest> LoadTrainTest(const SplitReader& read, bool standardize) {
  TrainTest out;
  ASSIGN_OR_RETURN(out.train, read(nullptr));
  RETURN_IF_ERROR(ValidateTable(out.train));
  auto test = read(&out.train.task);
  if (!test.ok()) {
    // A test label past the classes the training split gave (its largest label + 1): where the
    // count came from, and what sets it (review: "label 2 is not below the 2 classes" beside a
    // model of 3 units).
    const std::string& m = test.status().message();
    if (!out.train.classes_from.empty() && (m.find(" is not below the ") != std::string::npos ||
                                            m.find(" is not in [0, ") != std::string::npos)) {
      return Status(test.status().code(),
                    m + " (the training split's classes: " + out.train.classes_from +
                        "; spec.train.dataset.classes says how many)");
    }
    return test.status();
  }
  out.test = *std::move(test);
  RETURN_IF_ERROR(ValidateTable(out.test, &out.train));
  if (standardize) {
    out.scaling = FitStandardization(out.train);
    RETURN_IF_ERROR(ApplyStandardization(out.scaling, out.train));
    RETURN_IF_ERROR(ApplyStandardization(out.scaling, out.test));
  }
  return out;
}

}  // namespace ringtrain::data
