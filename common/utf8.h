// Cutting UTF-8 text to a size without cutting through a character: a JSON dump of the result
// (a job's status, an Event) refuses a broken one.
#pragma once

#include <cstddef>
#include <string_view>

namespace ringtrain {

// The length of the longest prefix of `text` of at most `max` bytes that ends between
// characters (`text` itself when it is no longer).
inline std::size_t Utf8Cut(std::string_view text, std::size_t max) {
  if (text.size() <= max) return text.size();
  std::size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}

}  // namespace ringtrain
