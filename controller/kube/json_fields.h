// Lenient field readers for API objects: a missing field, a null or a value of the wrong type
// reads as the default instead of throwing (nlohmann's value() throws on a type mismatch).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace ringtrain::kube {

inline std::string StringField(const nlohmann::json& o, const char* key,
                               const std::string& fallback = "") {
  if (!o.is_object()) return fallback;
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : fallback;
}

inline long long IntField(const nlohmann::json& o, const char* key, long long fallback = 0) {
  if (!o.is_object()) return fallback;
  auto it = o.find(key);
  return it != o.end() && it->is_number_integer() ? it->get<long long>() : fallback;
}

}  // namespace ringtrain::kube
