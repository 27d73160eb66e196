#include "tests/fakes/apiserver/cel.h"

#include <functional>
#include <map>
#include <optional>
#include <regex>

namespace ringtrain::fake {
namespace {

using nlohmann::json;

// nullopt: the rule does not apply (a transition rule on create).
using Predicate = std::function<std::optional<bool>(const json& self, const json* old)>;

const json* Field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string StringField(const json& obj, const char* key) {
  const json* v = Field(obj, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : "";
}

const std::map<std::string, Predicate>& Rules() {
  static const auto* rules = new std::map<std::string, Predicate>{
      {"self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && "
       "size(self.metadata.name) <= 50",
       [](const json& self, const json*) -> std::optional<bool> {
         const json* meta = Field(self, "metadata");
         const std::string name = meta != nullptr ? StringField(*meta, "name") : "";
         static const std::regex kDns1035("^[a-z]([-a-z0-9]*[a-z0-9])?$");
         // CEL's size() counts code points; names are ASCII once the regex matched.
         return std::regex_search(name, kDns1035) && name.size() <= 50;
       }},
      {"self.backend != 'nccl' || self.gpusPerReplica >= 1",
       [](const json& self, const json*) -> std::optional<bool> {
         const json* gpus = Field(self, "gpusPerReplica");
         return StringField(self, "backend") != "nccl" ||
                (gpus != nullptr && gpus->is_number() && gpus->get<double>() >= 1);
       }},
      {"self == oldSelf",
       [](const json& self, const json* old) -> std::optional<bool> {
         if (old == nullptr) return std::nullopt;
         return self == *old;
       }},
      {"self == '' || self.startsWith('/')",
       [](const json& self, const json*) -> std::optional<bool> {
         return self.is_string() &&
                (self.get<std::string>().empty() || self.get<std::string>().front() == '/');
       }},
      {"has(self.volumeClaim) == has(oldSelf.volumeClaim)",
       [](const json& self, const json* old) -> std::optional<bool> {
         if (old == nullptr) return std::nullopt;
         return (Field(self, "volumeClaim") != nullptr) == (Field(*old, "volumeClaim") != nullptr);
       }},
      {"!(has(self.volumeClaim) && has(self.volume))",
       [](const json& self, const json*) -> std::optional<bool> {
         return !(Field(self, "volumeClaim") != nullptr && Field(self, "volume") != nullptr);
       }},
  };
  return *rules;
}

std::string Child(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// The type name CEL errors show: the schema's type ("object", "string", "integer", ...).
std::string TypeName(const json& schema) {
  const json* t = Field(schema, "type");
  if (t != nullptr && t->is_string()) return t->get<std::string>();
  return "object";
}

void Validate(const json& schema, const json& value, const json* old, const std::string& path,
              std::vector<Cause>* causes) {
  if (!schema.is_object()) return;
  if (const json* rules = Field(schema, "x-kubernetes-validations");
      rules != nullptr && rules->is_array()) {
    for (const auto& r : *rules) {
      auto it = Rules().find(StringField(r, "rule"));
      if (it == Rules().end()) continue;  // refused when the CRD was registered
      std::optional<bool> ok = it->second(value, old);
      if (!ok.has_value() || *ok) continue;
      std::string message = StringField(r, "message");
      if (message.empty()) message = "failed rule: " + StringField(r, "rule");
      std::string field = path.empty() ? "<nil>" : path;
      if (std::string fp = StringField(r, "fieldPath"); !fp.empty()) {
        field = (path.empty() ? "" : path) + fp;
        if (!field.empty() && field.front() == '.') field.erase(0, 1);
      }
      causes->push_back(
          {"FieldValueInvalid", "Invalid value: \"" + TypeName(schema) + "\": " + message, field});
    }
  }
  if (value.is_object()) {
    const json* props = Field(schema, "properties");
    if (props == nullptr || !props->is_object()) return;
    for (auto it = props->begin(); it != props->end(); ++it) {
      auto child = value.find(it.key());
      if (child == value.end()) continue;
      const json* old_child = nullptr;
      if (old != nullptr && old->is_object()) {
        if (auto o = old->find(it.key()); o != old->end()) old_child = &*o;
      }
      Validate(it.value(), *child, old_child, Child(path, it.key()), causes);
    }
  } else if (value.is_array()) {
    const json* items = Field(schema, "items");
    if (items == nullptr) return;
    for (std::size_t i = 0; i < value.size(); ++i) {
      // Transition rules on list items need list-type keys to pair old and new: none here.
      Validate(*items, value[i], nullptr, path + "[" + std::to_string(i) + "]", causes);
    }
  }
}

void CollectUnknown(const json& schema, std::vector<std::string>* unknown) {
  if (schema.is_object()) {
    if (const json* rules = Field(schema, "x-kubernetes-validations");
        rules != nullptr && rules->is_array()) {
      for (const auto& r : *rules) {
        const std::string rule = StringField(r, "rule");
        if (Rules().count(rule) == 0) unknown->push_back(rule);
      }
    }
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      if (it.key() != "x-kubernetes-validations" && it.key() != "default" && it.key() != "enum" &&
          it.key() != "example") {
        CollectUnknown(it.value(), unknown);
      }
    }
  } else if (schema.is_array()) {
    for (const auto& s : schema) CollectUnknown(s, unknown);
  }
}

}  // namespace

void UntypedCelRules(const json& schema, const std::string& path, std::vector<Cause>* causes) {
  if (!schema.is_object()) return;
  const json* rules = Field(schema, "x-kubernetes-validations");
  const json* type = Field(schema, "type");
  const json* ios = Field(schema, "x-kubernetes-int-or-string");
  const bool typed = (type != nullptr && type->is_string() && !type->get<std::string>().empty()) ||
                     (ios != nullptr && ios->is_boolean() && ios->get<bool>());
  if (rules != nullptr && rules->is_array() && !rules->empty() && !typed) {
    const json* preserve = Field(schema, "x-kubernetes-preserve-unknown-fields");
    const bool p = preserve != nullptr && preserve->is_boolean() && preserve->get<bool>();
    // apiextensions-apiserver: SchemaDeclType is nil for a node without a type, and the rule
    // compiler refuses it.
    causes->push_back({"InternalError",
                       "Internal error: rule compiler initialization error: rule declared on "
                       "schema that does not support validation rules type: ''  "
                       "x-kubernetes-preserve-unknown-fields: '" +
                           std::string(p ? "true" : "false") + "'",
                       path + ".x-kubernetes-validations"});
  }
  if (const json* props = Field(schema, "properties"); props != nullptr && props->is_object()) {
    for (auto it = props->begin(); it != props->end(); ++it) {
      UntypedCelRules(it.value(), path + ".properties[" + it.key() + "]", causes);
    }
  }
  if (const json* items = Field(schema, "items"); items != nullptr) {
    UntypedCelRules(*items, path + ".items", causes);
  }
  if (const json* extra = Field(schema, "additionalProperties"); extra != nullptr) {
    UntypedCelRules(*extra, path + ".additionalProperties", causes);
  }
}

std::vector<std::string> UnknownCelRules(const json& schema) {
  std::vector<std::string> unknown;
  CollectUnknown(schema, &unknown);
  return unknown;
}

void ValidateCelRules(const json& schema, const json& value, const json* old,
                      std::vector<Cause>* causes) {
  Validate(schema, value, old, "", causes);
}

}  // namespace ringtrain::fake
