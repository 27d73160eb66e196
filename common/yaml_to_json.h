// Bounded YAML → JSON for files a user wrote (TrainingJob manifests, kubeconfigs): one document,
// typed as kubectl types it (sigs.k8s.io/yaml: go-yaml v2's YAML 1.1 resolver, then JSON), caps
// on size, depth, nodes and expanded bytes (hostile input).
// The JSON is then read by common/json_fields.h. Knows nothing of any schema.
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "common/status.h"

namespace ringtrain {

// Bounds on what one manifest may cost to read. A real TrainingJob is a few KiB; the API
// server itself refuses objects over 1.5 MiB.
inline constexpr std::size_t kMaxManifestBytes = 1024 * 1024;

// What one document may cost: its text, and the nodes it expands to (aliases count once per
// use). The values it expands to may total four times the text.
struct YamlLimits {
  std::size_t max_bytes = kMaxManifestBytes;
  std::size_t max_nodes = 100'000;
};

// The one YAML document of `yaml` as JSON; errors start with `source` and name the path of the
// offending node. A second non-empty document is an error that tells to put one `kind` per file.
StatusOr<nlohmann::json> YamlToJson(const std::string& yaml, const std::string& source,
                                    const std::string& kind, const YamlLimits& limits = {});

// Text from the file in an error: bounded so that an error never echoes a huge key or value,
// and cut on a character boundary so that it stays UTF-8.
std::string BoundedText(const std::string& text, std::size_t max = 160);

}  // namespace ringtrain
