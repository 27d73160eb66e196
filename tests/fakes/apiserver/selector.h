// Label and field selectors as the API server parses them (equality and set-based), matched
// against objects held as JSON. Owns only parsing and matching; knows nothing of HTTP.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringtrain::fake {

struct Requirement {
  enum class Op { kEquals, kNotEquals, kIn, kNotIn, kExists, kDoesNotExist };
  std::string key;
  Op op = Op::kExists;
  std::vector<std::string> values;
};

class LabelSelector {
 public:
  // "a=b,c!=d,e in (f,g),h notin (i),j,!k"; an error message matches the API server's 400.
  static StatusOr<LabelSelector> Parse(const std::string& text);
  bool Matches(const nlohmann::json& object) const;
  bool empty() const { return requirements_.empty(); }

 private:
  std::vector<Requirement> requirements_;
};

// "metadata.name=x,status.phase!=Running": dotted paths into the object, compared as strings.
class FieldSelector {
 public:
  static StatusOr<FieldSelector> Parse(const std::string& text);
  bool Matches(const nlohmann::json& object) const;

 private:
  std::vector<Requirement> requirements_;
};

}  // namespace ringtrain::fake
