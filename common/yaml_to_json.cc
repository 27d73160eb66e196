#include "common/yaml_to_json.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include "common/utf8.h"
#include "common/yaml_guard.h"

namespace ringtrain {
namespace {

using nlohmann::json;

// Aliases make a small file expand without bound (yaml-cpp shares aliased nodes, so "billion
// laughs" parses in microseconds and only the conversion expands it), hence the caps on
// converted nodes and bytes, not just on the text.
constexpr int kMaxDepth = 64;

bool IsUtf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    for (std::size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
    static constexpr std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
    i += n + 1;
  }
  return true;
}

// Plain scalars typed as kubectl and client-go type them (sigs.k8s.io/yaml: go-yaml v2's YAML
// 1.1 resolver, then JSON), so that a manifest means here what it means to a cluster (review:
// `replicas: 010` ran 10 ranks here and 8 there): y/yes/on and n/no/off (any of their three
// casings) are booleans, Null and NULL null; an integer takes Go's base prefixes (0x, 0o, 0b,
// and a leading 0 for octal) and underscores (1_000); a float without a fraction (1e1, 2.0) is
// the integer JSON makes of it. Quoted scalars stay strings. Merge keys (<<) merge, the map's
// own keys first. Every node converted counts against the caps above, aliases once per use.
//
// Go's strconv.ParseInt/ParseUint(s, 0, 64) of a number without underscores, as its sign
// (negative) and magnitude: a base prefix (0x, 0o, 0b; a leading 0 is octal, 010 is 8), then
// digits of that base; nullopt for none, a digit outside the base, or more than 2^64-1.
struct GoDigits {
  bool negative = false;
  bool signed_text = false;  // a sign was written (ParseUint takes none)
  std::uint64_t magnitude = 0;
};
std::optional<GoDigits> ReadGoDigits(const std::string& s) {
  GoDigits out;
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    out.signed_text = true;
    out.negative = s[i++] == '-';
  }
  int base = 10;
  if (s.size() - i >= 2 && s[i] == '0') {
    const char p = static_cast<char>(s[i + 1] | 0x20);
    if (p == 'x' || p == 'o' || p == 'b') {
      base = p == 'x' ? 16 : p == 'o' ? 8 : 2;
      i += 2;
    } else {
      base = 8;
      i += 1;
    }
  }
  if (i >= s.size()) return std::nullopt;  // "0o", "-": no digits
  for (; i < s.size(); ++i) {
    const char c = s[i];
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : 99;
    if (d >= base) return std::nullopt;
    const auto digit = static_cast<std::uint64_t>(d);
    if (out.magnitude > (UINT64_MAX - digit) / static_cast<std::uint64_t>(base)) {
      return std::nullopt;
    }
    out.magnitude = out.magnitude * static_cast<std::uint64_t>(base) + digit;
  }
  return out;
}

// strconv.ParseInt(s, 0, 64): within [-2^63, 2^63-1].
std::optional<std::int64_t> GoInt(const std::string& s) {
  const std::optional<GoDigits> n = ReadGoDigits(s);
  if (!n) return std::nullopt;
  constexpr auto kMax = static_cast<std::uint64_t>(INT64_MAX);
  if (!n->negative) {
    return n->magnitude <= kMax
               ? std::optional<std::int64_t>(static_cast<std::int64_t>(n->magnitude))
               : std::nullopt;
  }
  if (n->magnitude > kMax + 1) return std::nullopt;
  return n->magnitude == kMax + 1 ? INT64_MIN : -static_cast<std::int64_t>(n->magnitude);
}

// strconv.ParseUint(s, 0, 64): a positive number past int64 (0xFFFFFFFFFFFFFFFF); no sign.
std::optional<std::uint64_t> GoUint(const std::string& s) {
  const std::optional<GoDigits> n = ReadGoDigits(s);
  if (!n || n->signed_text) return std::nullopt;
  return n->magnitude;
}

// Every _ stands between two digits.
bool UnderscoresBetweenDigits(const std::string& s) {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && (i == 0 || i + 1 == s.size() || !digit(s[i - 1]) || !digit(s[i + 1]))) {
      return false;
    }
  }
  return true;
}

// go-yaml's float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool YamlFloatSyntax(const std::string& s) {
  std::size_t i = 0;
  auto digits = [&] {
    const std::size_t from = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i > from;
  };
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits()) return false;
  } else {
    if (!digits()) return false;
    if (i < s.size() && s[i] == '.') {
      ++i;
      digits();
    }
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == s.size();
}

class YamlConverter {
 public:
  explicit YamlConverter(const YamlLimits& limits)
      : max_nodes_(limits.max_nodes), max_bytes_(4 * limits.max_bytes) {}

  StatusOr<json> Convert(const YAML::Node& node, const std::string& path) {
    if (++nodes_ > max_nodes_) {
      return InvalidArgument(Where(path) + "the document expands to more than " +
                             std::to_string(max_nodes_) + " nodes (aliases?)");
    }
    if (node.IsSequence() || node.IsMap()) {
      for (const YAML::Node& open : ancestors_) {
        if (open.is(node)) {
          return InvalidArgument(Where(path) + "an alias refers to a node that contains it");
        }
      }
      if (ancestors_.size() >= kMaxDepth) {
        return InvalidArgument(Where(path) + "nested deeper than " + std::to_string(kMaxDepth) +
                               " levels");
      }
      ancestors_.push_back(node);
      auto out = node.IsMap() ? ConvertMap(node, path) : ConvertSequence(node, path);
      ancestors_.pop_back();
      return out;
    }
    if (!node.IsScalar()) return json(nullptr);
    const std::string& s = node.Scalar();
    RETURN_IF_ERROR(CountBytes(s.size(), path));
    if (!IsUtf8(s)) return InvalidArgument(Where(path) + "not valid UTF-8");
    return ScalarToJson(node, s);
  }

 private:
  static std::string Where(const std::string& path) {
    return path.empty() ? "" : BoundedText(path) + ": ";
  }

  Status CountBytes(std::size_t n, const std::string& path) {
    bytes_ += n;
    if (bytes_ > max_bytes_) {
      return InvalidArgument(Where(path) + "the document expands to more than " +
                             std::to_string(max_bytes_) + " bytes of values (aliases?)");
    }
    return Status::Ok();
  }

  StatusOr<json> ConvertSequence(const YAML::Node& node, const std::string& path) {
    json arr = json::array();
    std::size_t i = 0;
    for (const YAML::Node& item : node) {
      ASSIGN_OR_RETURN(json v, Convert(item, path + "[" + std::to_string(i++) + "]"));
      arr.push_back(std::move(v));
    }
    return arr;
  }

  StatusOr<json> ConvertMap(const YAML::Node& node, const std::string& path) {
    json obj = json::object();
    std::set<std::string> written;  // the keys this map names itself
    const std::string merge_path = path.empty() ? "<<" : path + ".<<";
    for (const auto& kv : node) {
      if (kv.first.IsNull()) return InvalidArgument(Where(path) + "a key is null");
      if (!kv.first.IsScalar()) return InvalidArgument(Where(path) + "map keys must be strings");
      const bool plain = kv.first.Tag() != "!";
      if (kv.first.Scalar() == "<<" && plain) {
        // Merged where it stands, as go-yaml v2 merges: over the keys before it, under the
        // keys after it; of a list of maps, the earlier wins.
        ASSIGN_OR_RETURN(json from, Convert(kv.second, merge_path));
        std::vector<json*> maps;
        if (from.is_object()) {
          maps.push_back(&from);
        } else if (from.is_array()) {
          for (auto it = from.rbegin(); it != from.rend(); ++it) maps.push_back(&*it);
        }
        if (maps.empty() && !from.is_array()) {
          return InvalidArgument(Where(merge_path) + "a merge key takes a map or a list of maps");
        }
        for (json* m : maps) {
          if (!m->is_object()) {
            return InvalidArgument(Where(merge_path) + "a merge key takes a map or a list of maps");
          }
          for (auto& [k, v] : m->items()) obj[k] = std::move(v);
        }
        continue;
      }
      ASSIGN_OR_RETURN(const std::string key, KeyText(kv.first, path));
      RETURN_IF_ERROR(CountBytes(key.size(), path));
      if (!IsUtf8(key)) return InvalidArgument(Where(path) + "a key is not valid UTF-8");
      const std::string child = path.empty() ? key : path + "." + key;
      // yaml-cpp keeps one of two equal keys without a word; kubectl refuses them.
      if (!written.insert(key).second) return InvalidArgument(Where(child) + "duplicate key");
      ASSIGN_OR_RETURN(json v, Convert(kv.second, child));
      obj[key] = std::move(v);
    }
    return obj;
  }

  // A key as sigs.k8s.io/yaml writes it into JSON: a plain key typed as a value is (y and on
  // are "true", 010 is "8", 1e3 is "1000"), then written as text; a null key is refused.
  static StatusOr<std::string> KeyText(const YAML::Node& key, const std::string& path) {
    const std::string& s = key.Scalar();
    const json typed = ScalarToJson(key, s, /*as_json=*/false);
    if (typed.is_string()) return typed.get<std::string>();
    if (typed.is_null()) return InvalidArgument(Where(path) + "a key is null");
    if (typed.is_boolean()) return std::string(typed.get<bool>() ? "true" : "false");
    if (typed.is_number_unsigned()) return std::to_string(typed.get<std::uint64_t>());
    if (typed.is_number_integer()) return std::to_string(typed.get<std::int64_t>());
    return GoFloat32Text(typed.get<double>());
  }

  // Go's strconv.FormatFloat(v, 'g', -1, 32): the shortest digits that read back as the same
  // float32, in %e form when the exponent is below -4 or at least 6.
  static std::string GoFloat32Text(double v) {
    const float f = static_cast<float>(v);
    char buf[64];
    int digits = 1;
    for (; digits <= 9; ++digits) {
      std::snprintf(buf, sizeof(buf), "%.*e", digits - 1, static_cast<double>(f));
      if (std::strtof(buf, nullptr) == f) break;
    }
    const char* e = std::strchr(buf, 'e');
    const int exp = e != nullptr ? std::atoi(e + 1) : 0;
    if (exp < -4 || exp >= 6) return buf;
    std::snprintf(buf, sizeof(buf), "%.*f", std::max(digits - 1 - exp, 0), static_cast<double>(f));
    return buf;
  }

  // `as_json`: a float without a fraction is the integer JSON makes of it (a value); else it
  // stays a float (a key, which sigs.k8s.io/yaml formats as a float).
  static json ScalarToJson(const YAML::Node& node, const std::string& s, bool as_json = true) {
    if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") return json(s);
    static const std::set<std::string> kNull = {"", "~", "null", "Null", "NULL"};
    static const std::set<std::string> kTrue = {"y",    "Y",    "yes", "Yes", "YES", "true",
                                                "True", "TRUE", "on",  "On",  "ON"};
    static const std::set<std::string> kFalse = {"n",     "N",     "no",  "No",  "NO", "false",
                                                 "False", "FALSE", "off", "Off", "OFF"};
    if (kNull.contains(s)) return json(nullptr);
    if (kTrue.contains(s)) return json(true);
    if (kFalse.contains(s)) return json(false);
    const char first = s[0];
    if (!(first >= '0' && first <= '9') && first != '+' && first != '-' && first != '.') {
      return json(s);
    }
    std::string plain;
    for (char c : s) {
      if (c != '_') plain.push_back(c);
    }
    if (first != '.') {
      if (const auto i = GoInt(plain)) return json(*i);
      if (const auto u = GoUint(plain)) return json(*u);
    } else if (!UnderscoresBetweenDigits(s)) {
      return json(s);  // Go's ParseFloat of the text itself takes _ only between digits
    }
    if (!YamlFloatSyntax(plain)) return json(s);
    errno = 0;
    const double d = std::strtod(plain.c_str(), nullptr);
    if (errno == ERANGE && std::isinf(d)) return json(s);  // beyond float64: Go keeps the text
    // Go's JSON writes a float without a fraction as an integer (1e1 is 10), and the API
    // server reads one in int64's range as one.
    if (as_json && std::trunc(d) == d && d >= -0x1p63 && d < 0x1p63) {
      return json(static_cast<std::int64_t>(d));
    }
    return json(d);
  }

  std::vector<YAML::Node> ancestors_;
  std::size_t max_nodes_;
  std::size_t max_bytes_;
  std::size_t nodes_ = 0;
  std::size_t bytes_ = 0;
};
}  // namespace

std::string BoundedText(const std::string& text, std::size_t max) {
  if (text.size() <= max) return text;
  return text.substr(0, Utf8Cut(text, max)) + "...";
}

StatusOr<json> YamlToJson(const std::string& yaml, const std::string& source,
                          const std::string& kind, const YamlLimits& limits) {
  if (yaml.size() > limits.max_bytes) {
    return InvalidArgument(source + ": larger than the limit of " +
                           std::to_string(limits.max_bytes) + " bytes for a " + kind);
  }
  RETURN_IF_ERROR(CheckYamlDocumentShape(yaml, source));
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(yaml);
  } catch (const YAML::DeepRecursion& e) {
    return InvalidArgument(source + ": nested too deeply at line " +
                           std::to_string(e.mark.line + 1));
  } catch (const std::exception& e) {  // YAML::Exception, and whatever else yaml-cpp lets out
    return InvalidArgument(source + ": not valid YAML: " + BoundedText(e.what(), 300));
  }
  // One job per file, as `ringtrain run` runs one job: a second would be silently ignored.
  for (std::size_t i = 1; i < docs.size(); ++i) {
    if (!docs[i].IsNull()) {
      return InvalidArgument(source + ": a second YAML document (after '---'): put one " + kind +
                             " in each file");
    }
  }
  YAML::Node root = docs.empty() ? YAML::Node() : docs[0];
  auto doc = YamlConverter(limits).Convert(root, "");
  if (!doc.ok()) return doc.status().WithContext(source);
  return doc;
}

}  // namespace ringtrain
