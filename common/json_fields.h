// Typed reads of fields of a JSON document, shared by the TrainingJob parser, the kubeconfig
// reader and the Kubernetes client. Owns the wording of field errors ("<path>: must be ...");
// does no I/O and knows no schema.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringtrain {

// "an integer", "a string", ... for an error about a value of the wrong type.
std::string JsonTypeName(const nlohmann::json& v);
// The value as JSON, ASCII only and cut to about 60 characters, for an error message.
std::string QuoteJson(const nlohmann::json& v);
// "<path>.<key>", or "<key>" at the top.
std::string FieldPath(const std::string& path, const std::string& key);

// Lenient reads for objects the API server wrote: a missing field, a null, a value of the wrong
// type or a non-object `o` reads as the fallback instead of throwing.
std::string StringField(const nlohmann::json& o, const char* key, const std::string& fallback = "");
long long IntField(const nlohmann::json& o, const char* key, long long fallback = 0);
double NumberField(const nlohmann::json& o, const char* key, double fallback = 0);

// Strict reads of one JSON object a user wrote: every error names "<path>.<key>", a null reads as
// absent (the output keeps its default), and NoUnknown() flags keys never read as unknown fields
// (kubectl's strict field validation does the same). The object must outlive the reader.
class Fields {
 public:
  Fields(const nlohmann::json& obj, std::string path);

  std::string Path(const std::string& key) const { return FieldPath(path_, key); }
  // The value of `key`, nullptr when absent or null; marks the key as read.
  const nlohmann::json* Find(const std::string& key);

  Status Int(const std::string& key, std::int64_t min, std::int64_t max, std::int64_t* out);
  Status Int(const std::string& key, std::int64_t min, std::int64_t max, int* out);
  Status OptInt(const std::string& key, std::int64_t min, std::int64_t max,
                std::optional<std::int64_t>* out);
  Status Number(const std::string& key, double min, bool exclusive_min, double* out);
  Status Bool(const std::string& key, bool* out);
  Status String(const std::string& key, std::string* out);
  Status Strings(const std::string& key, std::vector<std::string>* out);
  // A string out of `allowed`; the error lists them.
  Status Enum(const std::string& key, const std::vector<std::string>& allowed, std::string* out);
  // A nested object (nullptr when absent), an error when the value is no object.
  StatusOr<const nlohmann::json*> Object(const std::string& key);
  Status NoUnknown() const;

 private:
  const nlohmann::json& obj_;
  std::string path_;
  std::set<std::string> seen_;
};

}  // namespace ringtrain
