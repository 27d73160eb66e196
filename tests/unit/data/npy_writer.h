// Test data: .npy files as numpy writes them, built in memory (npy_test, user_model_test,
// model_data_test, local_dataset_test).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace ringtrain::data {

// A .npy file as numpy writes it: magic, version, header length, the dict padded with spaces
// to a multiple of 64 bytes and ended by '\n', then the payload.
inline std::string Npy(const std::string& descr, const std::string& shape,
                       const std::string& payload, int version = 1,
                       const std::string& fortran = "False") {
  std::string dict =
      "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  const std::size_t pre = version == 1 ? 10 : 12;
  while ((pre + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(version);
  out += '\0';
  const auto len = static_cast<std::uint32_t>(dict.size());
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>((len >> 8) & 0xff);
  if (version != 1) {
    out += static_cast<char>((len >> 16) & 0xff);
    out += static_cast<char>(len >> 24);
  }
  return out + dict + payload;
}

template <typename T>
inline std::string Bytes(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

}  // namespace ringtrain::data
