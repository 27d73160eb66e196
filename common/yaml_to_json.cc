#include "common/yaml_to_json.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <nlohmann/json.hpp>
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

// YAML → JSON with YAML 1.2 core-schema typing of plain scalars; quoted scalars stay strings.
// Every node converted counts against the caps above, aliases once per use.
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
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) return InvalidArgument(Where(path) + "map keys must be strings");
      const std::string& key = kv.first.Scalar();
      RETURN_IF_ERROR(CountBytes(key.size(), path));
      if (!IsUtf8(key)) return InvalidArgument(Where(path) + "a key is not valid UTF-8");
      const std::string child = path.empty() ? key : path + "." + key;
      // yaml-cpp keeps one of two equal keys without a word; kubectl refuses them.
      if (obj.contains(key)) return InvalidArgument(Where(child) + "duplicate key");
      ASSIGN_OR_RETURN(json v, Convert(kv.second, child));
      obj[key] = std::move(v);
    }
    return obj;
  }

  static StatusOr<json> ScalarToJson(const YAML::Node& node, const std::string& s,
                                     const std::string& path) {
    if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") return json(s);
    if (s == "null" || s == "~" || s.empty()) return json(nullptr);
    if (s == "true" || s == "True" || s == "TRUE") return json(true);
    if (s == "false" || s == "False" || s == "FALSE") return json(false);
    if (auto i = ParseInt(s, path); i.ok()) return json(*i);
    if (auto d = ParseDouble(s, path); d.ok() && s.find_first_of("0123456789") == 0) {
      return json(*d);
    }
    if (auto d = ParseDouble(s, path); d.ok() && (s[0] == '-' || s[0] == '+' || s[0] == '.')) {
      return json(*d);
    }
    return json(s);
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
