#include "common/json_fields.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace ringtrain {

using nlohmann::json;

std::string JsonTypeName(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  return "an object";
}

std::string QuoteJson(const json& v) {
  // ASCII escapes keep a cut through a character from leaving broken UTF-8 in the message, and
  // the replace handler keeps a stray byte from throwing (nlohmann's dump throws by default).
  std::string s = v.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::string FieldPath(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string StringField(const json& o, const char* key, const std::string& fallback) {
  if (!o.is_object()) return fallback;
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : fallback;
}

long long IntField(const json& o, const char* key, long long fallback) {
  if (!o.is_object()) return fallback;
  auto it = o.find(key);
  return it != o.end() && it->is_number_integer() ? it->get<long long>() : fallback;
}

double NumberField(const json& o, const char* key, double fallback) {
  if (!o.is_object()) return fallback;
  auto it = o.find(key);
  return it != o.end() && it->is_number() ? it->get<double>() : fallback;
}

Fields::Fields(const json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

const json* Fields::Find(const std::string& key) {
  seen_.insert(key);
  if (!obj_.is_object()) return nullptr;
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

Status Fields::Int(const std::string& key, std::int64_t min, std::int64_t max, std::int64_t* out) {
  const json* v = Find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number_integer() && !v->is_number_unsigned()) {
    return InvalidArgument(Path(key) + ": must be an integer, got " + JsonTypeName(*v) + " " +
                           QuoteJson(*v));
  }
  if (v->is_number_unsigned() &&
      v->get<std::uint64_t>() >
          static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return InvalidArgument(Path(key) + ": must be at most " + std::to_string(max) + ", got " +
                           QuoteJson(*v));
  }
  const auto n = v->get<std::int64_t>();
  if (n < min) {
    return InvalidArgument(Path(key) + ": must be at least " + std::to_string(min) + ", got " +
                           std::to_string(n));
  }
  if (n > max) {
    return InvalidArgument(Path(key) + ": must be at most " + std::to_string(max) + ", got " +
                           std::to_string(n));
  }
  *out = n;
  return Status::Ok();
}

Status Fields::Int(const std::string& key, std::int64_t min, std::int64_t max, int* out) {
  std::int64_t v = *out;
  RETURN_IF_ERROR(Int(key, min, max, &v));
  *out = static_cast<int>(v);
  return Status::Ok();
}

Status Fields::OptInt(const std::string& key, std::int64_t min, std::int64_t max,
                      std::optional<std::int64_t>* out) {
  if (Find(key) == nullptr) return Status::Ok();
  std::int64_t v = 0;
  RETURN_IF_ERROR(Int(key, min, max, &v));
  *out = v;
  return Status::Ok();
}

Status Fields::Number(const std::string& key, double min, bool exclusive_min, double* out) {
  const json* v = Find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number()) {
    return InvalidArgument(Path(key) + ": must be a number, got " + JsonTypeName(*v) + " " +
                           QuoteJson(*v));
  }
  const auto d = v->get<double>();
  if (!std::isfinite(d) || d < min || (exclusive_min && d == min)) {
    return InvalidArgument(Path(key) + ": must be " +
                           (exclusive_min ? "greater than " : "at least ") + QuoteJson(json(min)) +
                           ", got " + QuoteJson(*v));
  }
  *out = d;
  return Status::Ok();
}

Status Fields::Bool(const std::string& key, bool* out) {
  const json* v = Find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_boolean()) {
    return InvalidArgument(Path(key) + ": must be true or false, got " + QuoteJson(*v));
  }
  *out = v->get<bool>();
  return Status::Ok();
}

Status Fields::String(const std::string& key, std::string* out) {
  const json* v = Find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_string()) {
    return InvalidArgument(Path(key) + ": must be a string, got " + JsonTypeName(*v) + " " +
                           QuoteJson(*v));
  }
  *out = v->get<std::string>();
  return Status::Ok();
}

Status Fields::Strings(const std::string& key, std::vector<std::string>* out) {
  const json* v = Find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_array()) {
    return InvalidArgument(Path(key) + ": must be a list of strings, got " + JsonTypeName(*v));
  }
  std::vector<std::string> list;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& item = (*v)[i];
    if (!item.is_string()) {
      return InvalidArgument(Path(key) + "[" + std::to_string(i) + "]: must be a string, got " +
                             JsonTypeName(item) + " " + QuoteJson(item));
    }
    list.push_back(item.get<std::string>());
  }
  *out = std::move(list);
  return Status::Ok();
}

Status Fields::Enum(const std::string& key, const std::vector<std::string>& allowed,
                    std::string* out) {
  std::string v = *out;
  RETURN_IF_ERROR(String(key, &v));
  for (const auto& a : allowed) {
    if (a == v) {
      *out = v;
      return Status::Ok();
    }
  }
  // A choice that is no plain word (a delimiter: ",", a tab, a blank) is quoted as JSON, else
  // the list cannot be read.
  const auto plain = [](const std::string& a) {
    return !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
    });
  };
  std::string list;
  for (const auto& a : allowed) {
    list += (list.empty() ? "" : ", ") + (plain(a) ? a : QuoteJson(json(a)));
  }
  return InvalidArgument(Path(key) + ": must be one of " + list + ", got " + QuoteJson(json(v)));
}

StatusOr<const json*> Fields::Object(const std::string& key) {
  const json* v = Find(key);
  if (v != nullptr && !v->is_object()) {
    return InvalidArgument(Path(key) + ": must be an object, got " + JsonTypeName(*v));
  }
  return v;
}

Status Fields::NoUnknown() const {
  if (!obj_.is_object()) return Status::Ok();
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    if (seen_.count(it.key()) == 0) return InvalidArgument(Path(it.key()) + ": unknown field");
  }
  return Status::Ok();
}

}  // namespace ringtrain
