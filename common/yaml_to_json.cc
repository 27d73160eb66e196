#include "common/yaml_to_json.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include "common/env.h"
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
// Go's strconv.ParseInt(s, 0, 64) of a number without underscores; nullopt where it fails.
std::optional<std::int64_t> GoInt(const std::string& s) {
  std::size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  int base = 10;
  if (s.size() - i >= 2 && s[i] == '0') {
    const char p = static_cast<char>(s[i + 1] | 0x20);
    if (p == 'x' || p == 'o' || p == 'b') {
      base = p == 'x' ? 16 : p == 'o' ? 8 : 2;
      i += 2;
    } else {
      base = 8;  // 010 is 8
      i += 1;
    }
  }
  if (i >= s.size()) return base == 8 ? std::optional<std::int64_t>(0) : std::nullopt;
  // At most 2^63 for a negative number, 2^63-1 otherwise.
  const std::uint64_t limit = static_cast<std::uint64_t>(INT64_MAX) + (negative ? 1 : 0);
  std::uint64_t v = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : 99;
    if (d >= base) return std::nullopt;
    const auto digit = static_cast<std::uint64_t>(d);
    if (v > (limit - digit) / static_cast<std::uint64_t>(base)) return std::nullopt;
    v = v * static_cast<std::uint64_t>(base) + digit;
  }
  if (!negative) return static_cast<std::int64_t>(v);
  return v == limit ? INT64_MIN : -static_cast<std::int64_t>(v);
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
    return ScalarToJson(node, s, path);
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
    std::vector<YAML::Node> merges;
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) return InvalidArgument(Where(path) + "map keys must be strings");
      const std::string& key = kv.first.Scalar();
      if (key == "<<" && kv.first.Tag() != "!") {
        merges.push_back(kv.second);
        continue;
      }
      RETURN_IF_ERROR(CountBytes(key.size(), path));
      if (!IsUtf8(key)) return InvalidArgument(Where(path) + "a key is not valid UTF-8");
      const std::string child = path.empty() ? key : path + "." + key;
      // yaml-cpp keeps one of two equal keys without a word; kubectl refuses them.
      if (obj.contains(key)) return InvalidArgument(Where(child) + "duplicate key");
      ASSIGN_OR_RETURN(json v, Convert(kv.second, child));
      obj[key] = std::move(v);
    }
    // A merge key's map (or maps, the earlier first) gives the keys the map does not set.
    const std::string merge_path = path.empty() ? "<<" : path + ".<<";
    for (const YAML::Node& merge : merges) {
      ASSIGN_OR_RETURN(json from, Convert(merge, merge_path));
      if (!from.is_object() && !from.is_array()) {
        return InvalidArgument(Where(merge_path) + "a merge key takes a map or a list of maps");
      }
      std::vector<json> maps;
      if (from.is_object()) {
        maps.push_back(std::move(from));
      } else {
        for (auto& m : from) maps.push_back(std::move(m));
      }
      for (json& m : maps) {
        if (!m.is_object()) {
          return InvalidArgument(Where(merge_path) + "a merge key takes a map or a list of maps");
        }
        for (auto& [k, v] : m.items()) {
          if (!obj.contains(k)) obj[k] = std::move(v);
        }
      }
    }
    return obj;
  }

  static StatusOr<json> ScalarToJson(const YAML::Node& node, const std::string& s,
                                     const std::string& path) {
    (void)path;
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
    }
    if (!YamlFloatSyntax(first == '.' ? s : plain)) return json(s);
    errno = 0;
    char* end = nullptr;
    const std::string& text = first == '.' ? s : plain;
    const double d = std::strtod(text.c_str(), &end);
    if (errno == ERANGE && std::isinf(d)) return json(s);  // beyond float64: Go keeps the text
    // Go's JSON writes a float without a fraction as an integer (1e1 is 10), and the API
    // server reads it as one.
    if (std::trunc(d) == d && std::fabs(d) < 9.2e18) return json(static_cast<std::int64_t>(d));
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
