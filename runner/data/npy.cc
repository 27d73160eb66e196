#include "runner/data/npy.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

#include "runner/data/data_file.h"

namespace ringtrain::data {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;

std::uint32_t LittleEndian(const unsigned char* p, int bytes) {
  std::uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A cursor over the header's Python literal: {'descr': '<f4', 'fortran_order': False,
// 'shape': (3, 4), } and nothing more general.
class DictParser {
 public:
  DictParser(std::string_view text, std::string path) : s_(text), path_(std::move(path)) {}

  Status Parse(std::string* descr, std::optional<bool>* fortran,
               std::optional<std::vector<std::uint64_t>>* shape) {
    RETURN_IF_ERROR(Expect('{'));
    while (true) {
      SkipSpace();
      if (Peek() == '}') break;
      ASSIGN_OR_RETURN(std::string key, String());
      RETURN_IF_ERROR(Expect(':'));
      SkipSpace();
      if (key == "descr") {
        if (!descr->empty()) return Bad("'descr' twice");
        ASSIGN_OR_RETURN(*descr, String());
        if (descr->empty()) return Bad("an empty 'descr'");
      } else if (key == "fortran_order") {
        if (fortran->has_value()) return Bad("'fortran_order' twice");
        ASSIGN_OR_RETURN(*fortran, Bool());
      } else if (key == "shape") {
        if (shape->has_value()) return Bad("'shape' twice");
        ASSIGN_OR_RETURN(*shape, Tuple());
      } else {
        return Bad("an unknown key '" + key.substr(0, 32) + "'");
      }
      SkipSpace();
      if (Peek() == ',') {
        ++i_;
        continue;
      }
      if (Peek() != '}') return Bad("no ',' or '}' after the value of '" + key + "'");
    }
    ++i_;
    SkipSpace();
    if (i_ != s_.size()) return Bad("text after the dict");
    return Status::Ok();
  }

 private:
  char Peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t')) ++i_;
  }
  Status Bad(const std::string& what) const {
    return DataLoss(path_ + ": malformed .npy header: " + what + " at byte " + std::to_string(i_) +
                    " of the dict");
  }
  Status Expect(char c) {
    SkipSpace();
    if (Peek() != c) return Bad(std::string("expected '") + c + "'");
    ++i_;
    return Status::Ok();
  }
  StatusOr<std::string> String() {
    SkipSpace();
    const char q = Peek();
    if (q != '\'' && q != '"') return Bad("expected a quoted string");
    const std::size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos) return Bad("an unterminated string");
    std::string out(s_.substr(i_ + 1, end - i_ - 1));
    i_ = end + 1;
    return out;
  }
  StatusOr<bool> Bool() {
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    return Bad("expected True or False");
  }
  StatusOr<std::vector<std::uint64_t>> Tuple() {
    RETURN_IF_ERROR(Expect('('));
    std::vector<std::uint64_t> dims;
    while (true) {
      SkipSpace();
      if (Peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(Peek()))) return Bad("expected a dimension");
      std::uint64_t d = 0;
      while (std::isdigit(static_cast<unsigned char>(Peek()))) {
        if (__builtin_mul_overflow(d, std::uint64_t{10}, &d) ||
            __builtin_add_overflow(d, static_cast<std::uint64_t>(Peek() - '0'), &d)) {
          return Bad("a dimension over 2^64");
        }
        ++i_;
      }
      if (Peek() == 'L') ++i_;  // Python 2 wrote longs as 3L
      if (dims.size() == 32) return Bad("more than 32 dimensions");
      dims.push_back(d);
      SkipSpace();
      if (Peek() == ',') {
        ++i_;
      } else if (Peek() != ')') {
        return Bad("no ',' or ')' in the shape");
      }
    }
    ++i_;
    return dims;
  }

  std::string_view s_;
  std::string path_;
  std::size_t i_ = 0;
};

std::size_t ItemSize(NpyHeader::Dtype t) {
  switch (t) {
    case NpyHeader::Dtype::kUint8:
      return 1;
    case NpyHeader::Dtype::kInt32:
    case NpyHeader::Dtype::kFloat32:
      return 4;
    case NpyHeader::Dtype::kInt64:
    case NpyHeader::Dtype::kFloat64:
      return 8;
  }
  return 1;
}

bool IsInteger(NpyHeader::Dtype t) {
  return t == NpyHeader::Dtype::kUint8 || t == NpyHeader::Dtype::kInt32 ||
         t == NpyHeader::Dtype::kInt64;
}

std::string ShapeString(const std::vector<std::uint64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + (shape.size() == 1 ? ",)" : ")");
}

// Element i of a little-endian payload as a double (exact for every int32 and float; int64
// beyond 2^53 rounds, which only matters for a label, and those are checked below 2^16).
double Element(NpyHeader::Dtype t, const unsigned char* p, std::size_t i) {
  switch (t) {
    case NpyHeader::Dtype::kUint8:
      return p[i];
    case NpyHeader::Dtype::kInt32: {
      std::uint32_t u = 0;
      std::memcpy(&u, p + 4 * i, 4);
      return static_cast<double>(static_cast<std::int32_t>(u));
    }
    case NpyHeader::Dtype::kInt64: {
      std::uint64_t u = 0;
      std::memcpy(&u, p + 8 * i, 8);
      return static_cast<double>(static_cast<std::int64_t>(u));
    }
    case NpyHeader::Dtype::kFloat32: {
      float f = 0;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case NpyHeader::Dtype::kFloat64: {
      double d = 0;
      std::memcpy(&d, p + 8 * i, 8);
      return d;
    }
  }
  return 0;
}

struct Array {
  NpyHeader header;
  std::vector<unsigned char> payload;
  std::uint64_t elements = 0;
};

// Reads one array after checking its header's sizes against the caps and the file.
StatusOr<Array> ReadArray(const std::string& path) {
  ASSIGN_OR_RETURN(DataFile file, DataFile::Open(path));
  std::string head(10, '\0');
  RETURN_IF_ERROR(file.ReadExact(head.data(), 10, "the .npy preamble"));
  if (head.compare(0, kMagicLen, kMagic, kMagicLen) != 0) {
    return DataLoss(path + ": not a .npy file (bad magic string)");
  }
  const auto major = static_cast<unsigned char>(head[6]);
  std::size_t len_bytes = major == 1 ? 2 : 4;
  if (major < 1 || major > 3) {
    return DataLoss(path + ": .npy format version " + std::to_string(major) +
                    " (versions 1 to 3 are known)");
  }
  head.resize(8 + len_bytes);
  if (len_bytes == 4) RETURN_IF_ERROR(file.ReadExact(head.data() + 10, 2, "the .npy preamble"));
  const std::uint32_t hlen = LittleEndian(reinterpret_cast<const unsigned char*>(head.data()) + 8,
                                          static_cast<int>(len_bytes));
  if (hlen > kMaxNpyHeaderBytes) {
    return DataLoss(path + ": .npy header of " + std::to_string(hlen) + " bytes (more than " +
                    std::to_string(kMaxNpyHeaderBytes) + ")");
  }
  const std::size_t at = head.size();
  head.resize(at + hlen);
  RETURN_IF_ERROR(file.ReadExact(head.data() + at, hlen, "the .npy header"));
  Array a;
  ASSIGN_OR_RETURN(a.header, ParseNpyHeader(path, head));
  std::uint64_t elements = 1;
  for (auto d : a.header.shape) {
    if (__builtin_mul_overflow(elements, d, &elements) || elements > kMaxNpyElements) {
      return DataLoss(path + ": implausible shape " + ShapeString(a.header.shape) + " (more than " +
                      std::to_string(kMaxNpyElements) + " elements)");
    }
  }
  const std::uint64_t bytes = elements * ItemSize(a.header.dtype);
  if (bytes > kMaxNpyBytes) {
    return DataLoss(path + ": shape " + ShapeString(a.header.shape) + " holds more than " +
                    std::to_string(kMaxNpyBytes) + " bytes");
  }
  const std::uint64_t room =
      file.max_content_bytes() -
      std::min<std::uint64_t>(file.max_content_bytes(), a.header.data_offset);
  if (bytes > room) {
    return DataLoss(path + ": truncated file: the header announces shape " +
                    ShapeString(a.header.shape) + " = " + std::to_string(bytes) +
                    " bytes, the file holds at most " + std::to_string(room));
  }
  RETURN_IF_ERROR(file.ReadPayload(bytes, a.payload, "the array"));
  RETURN_IF_ERROR(file.ExpectEnd());
  a.elements = elements;
  return a;
}

// Why a value is no float32 sample: NaN or an infinity, or a finite double beyond float32's range
// (numpy's isfinite says True of 1e300: "not finite" would send the user looking for the wrong
// thing).
std::string NotAFloat32(double v) {
  if (!std::isfinite(v)) return " is not a finite number";
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return " is " + std::string(text) + ", beyond float32's range (|x| <= 3.4e38)";
}

}  // namespace

StatusOr<NpyHeader> ParseNpyHeader(const std::string& path, const std::string& bytes) {
  if (bytes.size() < 10 || bytes.compare(0, kMagicLen, kMagic, kMagicLen) != 0) {
    return DataLoss(path + ": not a .npy file (bad magic string)");
  }
  NpyHeader h;
  h.version = static_cast<unsigned char>(bytes[6]);
  if (h.version < 1 || h.version > 3) {
    return DataLoss(path + ": .npy format version " + std::to_string(h.version) +
                    " (versions 1 to 3 are known)");
  }
  const int len_bytes = h.version == 1 ? 2 : 4;
  if (bytes.size() < static_cast<std::size_t>(8 + len_bytes)) {
    return DataLoss(path + ": truncated .npy preamble");
  }
  const std::uint32_t hlen =
      LittleEndian(reinterpret_cast<const unsigned char*>(bytes.data()) + 8, len_bytes);
  if (hlen > kMaxNpyHeaderBytes) {
    return DataLoss(path + ": .npy header of " + std::to_string(hlen) + " bytes (more than " +
                    std::to_string(kMaxNpyHeaderBytes) + ")");
  }
  h.data_offset = 8 + static_cast<std::size_t>(len_bytes) + hlen;
  if (bytes.size() < h.data_offset) return DataLoss(path + ": truncated .npy header");
  std::string_view text(bytes.data() + 8 + len_bytes, hlen);
  // The dict is padded with spaces and ends in '\n'; v1/v2 promise latin-1, v3 UTF-8, but every
  // byte that matters here is ASCII.
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\0')) {
    text.remove_suffix(1);
  }
  std::string descr;
  std::optional<bool> fortran;
  std::optional<std::vector<std::uint64_t>> shape;
  RETURN_IF_ERROR(DictParser(text, path).Parse(&descr, &fortran, &shape));
  if (descr.empty() || !fortran || !shape) {
    return DataLoss(path + ": .npy header lacks " +
                    std::string(descr.empty() ? "'descr'"
                                : !fortran    ? "'fortran_order'"
                                              : "'shape'"));
  }
  if (*fortran) {
    return InvalidArgument(path + ": fortran_order is True; only C-order arrays are read " +
                           "(save with numpy.ascontiguousarray)");
  }
  if (descr[0] == '>') {
    return InvalidArgument(path + ": big-endian dtype '" + descr.substr(0, 16) +
                           "' (save the array as little-endian)");
  }
  if (descr == "|u1" || descr == "<u1" || descr == "u1") {
    h.dtype = NpyHeader::Dtype::kUint8;
  } else if (descr == "<i4") {
    h.dtype = NpyHeader::Dtype::kInt32;
  } else if (descr == "<i8") {
    h.dtype = NpyHeader::Dtype::kInt64;
  } else if (descr == "<f4") {
    h.dtype = NpyHeader::Dtype::kFloat32;
  } else if (descr == "<f8") {
    h.dtype = NpyHeader::Dtype::kFloat64;
  } else {
    return InvalidArgument(path + ": dtype '" + descr.substr(0, 16) +
                           "' is not one of |u1 <i4 <i8 <f4 <f8");
  }
  h.shape = std::move(*shape);
  return h;
}

StatusOr<Table> ReadNpy(const NpySplitFiles& files, const NpyOptions& o) {
  if (o.task.classes < 0 || o.task.classes > kMaxClasses || o.task.targets < 0) {
    return InvalidArgument("npy options: classes must be in [0, " + std::to_string(kMaxClasses) +
                           "] and targets non-negative");
  }
  ASSIGN_OR_RETURN(Array xa, ReadArray(files.x));
  const auto& xs = xa.header.shape;
  if (xs.empty() || xs[0] == 0) {
    return InvalidArgument(files.x + ": x has shape " + ShapeString(xs) +
                           "; it must be (n, ...) with n > 0 samples");
  }
  Table t;
  t.path = files.x;
  t.labels_path = files.y;
  t.task = o.task;
  t.n = xs[0];
  t.features = xa.elements / xs[0];
  t.shape.assign(xs.begin() + 1, xs.end());
  if (t.shape.empty()) t.shape = {1};
  if (t.features == 0)
    return InvalidArgument(files.x + ": x has shape " + ShapeString(xs) + ": no features");
  t.x.resize(xa.elements);
  const double scale = xa.header.dtype == NpyHeader::Dtype::kUint8 ? 1.0 / 255.0 : 1.0;
  for (std::size_t i = 0; i < xa.elements; ++i) {
    const double v = Element(xa.header.dtype, xa.payload.data(), i) * scale;
    if (!std::isfinite(v) || std::abs(v) > 3.4e38) {
      return DataLoss(files.x + ": sample " + std::to_string(i / t.features) + ", feature " +
                      std::to_string(i % t.features) + NotAFloat32(v));
    }
    t.x[i] = static_cast<float>(v);
  }
  xa.payload = {};

  ASSIGN_OR_RETURN(Array ya, ReadArray(files.y));
  const auto& ys = ya.header.shape;
  if (ys.empty() || ys.size() > 2 || ys[0] != t.n) {
    return InvalidArgument(files.y + ": y has shape " + ShapeString(ys) + "; it must be (" +
                           std::to_string(t.n) + ",) or (" + std::to_string(t.n) +
                           ", t) for the samples of " + files.x);
  }
  const std::uint64_t per = ys.size() == 2 ? ys[1] : 1;
  if (t.task.classification()) {
    if (!IsInteger(ya.header.dtype)) {
      return InvalidArgument(files.y + ": classification labels must be integers (|u1, <i4 or " +
                             "<i8), not floats");
    }
    if (per != 1) {
      return InvalidArgument(files.y + ": y has shape " + ShapeString(ys) +
                             "; classification takes one label per sample");
    }
    const int limit = t.task.classes > 0 ? t.task.classes : kMaxClasses;
    t.labels.resize(t.n);
    std::int32_t top = -1;
    std::size_t top_sample = 0;
    for (std::size_t i = 0; i < t.n; ++i) {
      const double v = Element(ya.header.dtype, ya.payload.data(), i);
      if (!(v >= 0 && v < limit)) {
        return DataLoss(files.y + ": label " + std::to_string(static_cast<long long>(v)) +
                        " of sample " + std::to_string(i) + " is not in [0, " +
                        std::to_string(limit) + ")");
      }
      t.labels[i] = static_cast<std::int32_t>(v);
      if (t.labels[i] > top) {
        top = t.labels[i];
        top_sample = i;
      }
    }
    if (t.task.classes == 0) {
      t.task.classes = top + 1;
      t.classes_from = "the largest label, " + std::to_string(top) + " (" + files.y + " sample " +
                       std::to_string(top_sample) + "), plus one";
    }
  } else {
    if (per == 0 || (t.task.targets != 0 && per != static_cast<std::uint64_t>(t.task.targets))) {
      return InvalidArgument(files.y + ": y has shape " + ShapeString(ys) + ", the task has " +
                             std::to_string(t.task.targets) + " targets per sample");
    }
    t.task.targets = static_cast<int>(per);
    t.targets.resize(ya.elements);
    for (std::size_t i = 0; i < ya.elements; ++i) {
      const double v = Element(ya.header.dtype, ya.payload.data(), i);
      if (!std::isfinite(v) || std::abs(v) > 3.4e38) {
        return DataLoss(files.y + ": the target of sample " + std::to_string(i / per) +
                        NotAFloat32(v));
      }
      t.targets[i] = static_cast<float>(v);
    }
  }
  return t;
}

StatusOr<TrainTest> LoadNpy(const NpySplitFiles& train, const NpySplitFiles& test,
                            const NpyOptions& options) {
  return LoadTrainTest(
      [&](const Task* train_task) {
        NpyOptions o = options;
        if (train_task != nullptr) o.task = *train_task;
        return ReadNpy(train_task == nullptr ? train : test, o);
      },
      options.standardize);
}

}  // namespace ringtrain::data
