// A text-level check run before yaml-cpp sees a manifest or a kubeconfig. yaml-cpp 0.7 (Debian
// 12) never returns on some tiny inputs: a ',' at the document's root level when the root is not
// a block mapping (", b", "- a\n, b", "[a] , b", "&x , b") or in a later document ("a: 1\n---\n,"),
// allocating without bound. Both files are one block mapping (or one JSON object), so anything
// else is refused here with a clear error, as is deep flow nesting (yaml-cpp's scanner costs
// about 150 bytes a bracket before its own depth guard trips). Pure text: knows nothing of the
// documents' meaning.
#pragma once

#include <string_view>

#include "common/status.h"

namespace ringtrain {

// Flow collections nested deeper than this are refused before yaml-cpp reads them.
inline constexpr int kMaxFlowDepth = 256;

// InvalidArgument naming `source` and the line when `text` is not one document whose root is a
// block mapping (its first content line a key at column 0) or one JSON value; Ok otherwise
// (also for a text with no content, which the caller reports as empty).
Status CheckYamlDocumentShape(std::string_view text, std::string_view source);

}  // namespace ringtrain
