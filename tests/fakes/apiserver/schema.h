// The structural-schema checks a CRD's openAPIV3Schema gets in kube-apiserver: pruning of unknown
// fields, defaulting, then validation (type, required, enum, bounds, lengths) with the same
// cause reasons and messages. Pure functions on JSON; knows nothing of HTTP or storage.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ringtrain::fake {

struct Cause {
  std::string reason;  // FieldValueInvalid | FieldValueRequired | FieldValueTypeInvalid | ...
  std::string message;
  std::string field;
};

// Removes fields the schema does not declare (x-kubernetes-preserve-unknown-fields stops it);
// appends "spec.foo" for each one removed. The root keeps apiVersion, kind and metadata.
void PruneUnknownFields(const nlohmann::json& schema, nlohmann::json* value,
                        std::vector<std::string>* pruned);
// Fills absent properties that have a default, recursively (defaults of defaults included).
void ApplyDefaults(const nlohmann::json& schema, nlohmann::json* value);
// Appends one cause per violation, properties visited in name order.
void ValidateSchema(const nlohmann::json& schema, const nlohmann::json& value,
                    std::vector<Cause>* causes);

// How Go's %v prints a JSON value inside "Invalid value: ..." (strings quoted).
std::string GoValue(const nlohmann::json& value);

}  // namespace ringtrain::fake
