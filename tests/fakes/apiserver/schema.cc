#include "tests/fakes/apiserver/schema.h"

#include <cmath>
#include <cstdio>
#include <regex>

namespace ringtrain::fake {
namespace {

using nlohmann::json;

std::string Child(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

bool PreservesUnknown(const json& schema) {
  auto it = schema.find("x-kubernetes-preserve-unknown-fields");
  return it != schema.end() && it->is_boolean() && it->get<bool>();
}

const json* Find(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string JsonType(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

bool HasType(const json& v, const std::string& type) {
  if (type == "integer") {
    if (v.is_number_integer() || v.is_number_unsigned()) return true;
    return v.is_number_float() && std::floor(v.get<double>()) == v.get<double>();
  }
  if (type == "number") return v.is_number();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  return true;
}

std::string FormatNumber(double d) {
  if (std::floor(d) == d && std::fabs(d) < 1e15) return std::to_string(static_cast<long long>(d));
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", d);
  return buf;
}

void Invalid(const std::string& path, const json& value, const std::string& detail,
             std::vector<Cause>* causes) {
  causes->push_back(
      {"FieldValueInvalid", "Invalid value: " + GoValue(value) + ": " + detail, path});
}

void Validate(const json& schema, const json& value, const std::string& path,
              std::vector<Cause>* causes) {
  if (!schema.is_object()) return;
  if (value.is_null()) {
    const json* nullable = Find(schema, "nullable");
    if (nullable != nullptr && nullable->is_boolean() && nullable->get<bool>()) return;
  }
  bool int_or_string = false;
  if (const json* ios = Find(schema, "x-kubernetes-int-or-string"); ios && ios->is_boolean()) {
    int_or_string = ios->get<bool>();
  }
  if (int_or_string) {
    if (!value.is_string() && !HasType(value, "integer")) {
      causes->push_back({"FieldValueTypeInvalid",
                         "Invalid value: \"" + JsonType(value) + "\": " + path +
                             " in body must be of type integer,string: \"" + JsonType(value) + "\"",
                         path});
      return;
    }
  } else if (const json* type = Find(schema, "type"); type != nullptr && type->is_string()) {
    std::string t = type->get<std::string>();
    if (!HasType(value, t)) {
      std::string got = JsonType(value);
      causes->push_back({"FieldValueTypeInvalid",
                         "Invalid value: \"" + got + "\": " + path + " in body must be of type " +
                             t + ": \"" + got + "\"",
                         path});
      return;
    }
  }
  if (const json* e = Find(schema, "enum"); e != nullptr && e->is_array()) {
    bool found = false;
    for (const auto& a : *e) found = found || a == value;
    if (!found) {
      std::string list;
      for (const auto& a : *e) list += (list.empty() ? "" : ", ") + GoValue(a);
      causes->push_back({"FieldValueNotSupported",
                         "Unsupported value: " + GoValue(value) + ": supported values: " + list,
                         path});
    }
  }
  if (value.is_number()) {
    double d = value.get<double>();
    if (const json* min = Find(schema, "minimum"); min != nullptr && min->is_number()) {
      const json* ex = Find(schema, "exclusiveMinimum");
      bool exclusive = ex != nullptr && ex->is_boolean() && ex->get<bool>();
      double m = min->get<double>();
      if (exclusive ? d <= m : d < m) {
        Invalid(path, value,
                path + " in body should be greater than " + (exclusive ? "" : "or equal to ") +
                    FormatNumber(m),
                causes);
      }
    }
    if (const json* max = Find(schema, "maximum"); max != nullptr && max->is_number()) {
      const json* ex = Find(schema, "exclusiveMaximum");
      bool exclusive = ex != nullptr && ex->is_boolean() && ex->get<bool>();
      double m = max->get<double>();
      if (exclusive ? d >= m : d > m) {
        Invalid(path, value,
                path + " in body should be less than " + (exclusive ? "" : "or equal to ") +
                    FormatNumber(m),
                causes);
      }
    }
  }
  if (value.is_string()) {
    auto len = static_cast<std::int64_t>(value.get<std::string>().size());
    if (const json* m = Find(schema, "minLength"); m && m->is_number() && len < m->get<int>()) {
      Invalid(path, value,
              path + " in body should be at least " + std::to_string(m->get<int>()) + " chars long",
              causes);
    }
    if (const json* m = Find(schema, "maxLength"); m && m->is_number() && len > m->get<int>()) {
      Invalid(path, value,
              path + " in body should be at most " + std::to_string(m->get<int>()) + " chars long",
              causes);
    }
    if (const json* p = Find(schema, "pattern"); p && p->is_string()) {
      try {
        if (!std::regex_search(value.get<std::string>(), std::regex(p->get<std::string>()))) {
          Invalid(path, value, path + " in body should match '" + p->get<std::string>() + "'",
                  causes);
        }
      } catch (const std::regex_error&) {
      }
    }
  }
  if (value.is_array()) {
    auto n = static_cast<int>(value.size());
    if (const json* m = Find(schema, "minItems"); m && m->is_number() && n < m->get<int>()) {
      Invalid(path, value,
              path + " in body should have at least " + std::to_string(m->get<int>()) + " items",
              causes);
    }
    if (const json* m = Find(schema, "maxItems"); m && m->is_number() && n > m->get<int>()) {
      causes->push_back({"TooMany",
                         "Too many: " + std::to_string(n) + ": must have at most " +
                             std::to_string(m->get<int>()) + " items",
                         path});
    }
    if (const json* items = Find(schema, "items"); items != nullptr) {
      for (std::size_t i = 0; i < value.size(); ++i) {
        Validate(*items, value[i], path + "[" + std::to_string(i) + "]", causes);
      }
    }
  }
  if (value.is_object()) {
    if (const json* req = Find(schema, "required"); req != nullptr && req->is_array()) {
      for (const auto& r : *req) {
        if (r.is_string() && !value.contains(r.get<std::string>())) {
          causes->push_back(
              {"FieldValueRequired", "Required value", Child(path, r.get<std::string>())});
        }
      }
    }
    const json* props = Find(schema, "properties");
    const json* additional = Find(schema, "additionalProperties");
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (path.empty() &&
          (it.key() == "metadata" || it.key() == "apiVersion" || it.key() == "kind")) {
        continue;
      }
      if (props != nullptr && props->contains(it.key())) {
        Validate((*props)[it.key()], it.value(), Child(path, it.key()), causes);
      } else if (additional != nullptr && additional->is_object()) {
        Validate(*additional, it.value(), Child(path, it.key()), causes);
      }
    }
  }
}

}  // namespace

std::string GoValue(const json& value) {
  if (value.is_string()) return json(value.get<std::string>()).dump();
  if (value.is_number_float()) return FormatNumber(value.get<double>());
  if (value.is_null()) return "null";
  return value.dump();
}

void PruneUnknownFields(const json& schema, json* value, std::vector<std::string>* pruned) {
  struct Item {
    const json* schema;
    json* value;
    std::string path;
  };
  std::vector<Item> stack = {{&schema, value, ""}};
  while (!stack.empty()) {
    Item item = stack.back();
    stack.pop_back();
    if (!item.schema->is_object() || PreservesUnknown(*item.schema)) continue;
    if (item.value->is_object()) {
      const json* props = Find(*item.schema, "properties");
      const json* additional = Find(*item.schema, "additionalProperties");
      std::vector<std::string> drop;
      for (auto it = item.value->begin(); it != item.value->end(); ++it) {
        const std::string& key = it.key();
        if (item.path.empty() && (key == "apiVersion" || key == "kind" || key == "metadata")) {
          continue;
        }
        if (props != nullptr && props->contains(key)) {
          stack.push_back({&(*props)[key], &it.value(), Child(item.path, key)});
        } else if (additional != nullptr && additional->is_object()) {
          stack.push_back({additional, &it.value(), Child(item.path, key)});
        } else if (additional == nullptr || !additional->is_boolean() || !additional->get<bool>()) {
          drop.push_back(key);
        }
      }
      for (const auto& key : drop) {
        pruned->push_back(Child(item.path, key));
        item.value->erase(key);
      }
    } else if (item.value->is_array()) {
      if (const json* items = Find(*item.schema, "items"); items != nullptr) {
        for (std::size_t i = 0; i < item.value->size(); ++i) {
          stack.push_back({items, &(*item.value)[i], item.path + "[" + std::to_string(i) + "]"});
        }
      }
    }
  }
}

void ApplyDefaults(const json& schema, json* value) {
  if (!schema.is_object()) return;
  if (value->is_object()) {
    if (const json* props = Find(schema, "properties"); props != nullptr && props->is_object()) {
      for (auto it = props->begin(); it != props->end(); ++it) {
        auto existing = value->find(it.key());
        const json* def = Find(it.value(), "default");
        if (def != nullptr) {
          // A null for a non-nullable field with a default is dropped, then defaulted.
          const json* nullable = Find(it.value(), "nullable");
          bool is_nullable = nullable != nullptr && nullable->is_boolean() && nullable->get<bool>();
          if (existing == value->end() || (existing->is_null() && !is_nullable)) {
            (*value)[it.key()] = *def;
          }
        }
        if (auto child = value->find(it.key()); child != value->end()) {
          ApplyDefaults(it.value(), &child.value());
        }
      }
    }
  } else if (value->is_array()) {
    if (const json* items = Find(schema, "items"); items != nullptr) {
      for (auto& v : *value) ApplyDefaults(*items, &v);
    }
  }
}

void ValidateSchema(const json& schema, const json& value, std::vector<Cause>* causes) {
  Validate(schema, value, "", causes);
}

}  // namespace ringtrain::fake
