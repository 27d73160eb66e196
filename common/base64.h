// Base64 (RFC 4648), standard and URL alphabets, as Kubernetes uses it for Secret data,
// kubeconfig *-data fields and list continue tokens.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ringtrain {

std::string Base64Encode(std::string_view data, bool url = false);
// Accepts either alphabet, with or without '=' padding; ignores '\r' and '\n' as Go's decoder
// does. nullopt for any other character or a truncated final group.
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace ringtrain
