// The x-kubernetes-validations (CEL) rules of a CRD's schema, as kube-apiserver evaluates them
// after defaulting: one cause per broken rule, with the real server's field ("<nil>" for the
// root, fieldPath appended) and message ("Invalid value: \"<type>\": <message>"); transition
// rules (oldSelf) only on updates where the old value exists. This is no CEL interpreter: each
// rule text our CRDs use maps to a C++ predicate, and a CRD with any other rule is refused.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/fakes/apiserver/schema.h"

namespace ringtrain::fake {

// Rule texts in `schema` this fake cannot evaluate (empty: all known).
std::vector<std::string> UnknownCelRules(const nlohmann::json& schema);

// Causes for rules on nodes CEL cannot type, as kube-apiserver refuses the CRD: a node without
// `type` (x-kubernetes-preserve-unknown-fields alone; x-kubernetes-int-or-string is typed dyn).
// `path` is the schema's field path ("spec.versions[0].schema.openAPIV3Schema").
void UntypedCelRules(const nlohmann::json& schema, const std::string& path,
                     std::vector<Cause>* causes);

// `old` is null on create. Properties are visited in name order, a node's rules before its
// children's.
void ValidateCelRules(const nlohmann::json& schema, const nlohmann::json& value,
                      const nlohmann::json* old, std::vector<Cause>* causes);

}  // namespace ringtrain::fake
