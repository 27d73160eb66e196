// The runner's modes as enums, with the one spelling flags and manifests use: parsed once at
// the edge (runner flags, the TrainingJob's spec), never compared as strings further in. The
// controller validates a manifest's fields against the same name lists the runner accepts, and
// RunnerArgs writes the runner's flags by these names.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringtrain::contract {

enum class LrScaling { kLinear, kNone };  // lr × world size (Goyal et al.), or not
enum class LrSchedule { kConstant, kCosine };
enum class Device { kAuto, kCpu, kCuda };
enum class Backend { kAuto, kNccl, kTcp };
enum class Precision { kFp32, kTf32 };
enum class Input { kDevice, kHost };
enum class CudaGraph { kAuto, kOn, kOff };

template <typename E>
struct EnumNames;
template <>
struct EnumNames<LrScaling> {
  static constexpr std::array<std::string_view, 2> kNames{"linear", "none"};
};
template <>
struct EnumNames<LrSchedule> {
  static constexpr std::array<std::string_view, 2> kNames{"constant", "cosine"};
};
template <>
struct EnumNames<Device> {
  static constexpr std::array<std::string_view, 3> kNames{"auto", "cpu", "cuda"};
};
template <>
struct EnumNames<Backend> {
  static constexpr std::array<std::string_view, 3> kNames{"auto", "nccl", "tcp"};
};
template <>
struct EnumNames<Precision> {
  static constexpr std::array<std::string_view, 2> kNames{"fp32", "tf32"};
};
template <>
struct EnumNames<Input> {
  static constexpr std::array<std::string_view, 2> kNames{"device", "host"};
};
template <>
struct EnumNames<CudaGraph> {
  static constexpr std::array<std::string_view, 3> kNames{"auto", "on", "off"};
};

template <typename E>
constexpr std::string_view NameOf(E e) {
  return EnumNames<E>::kNames[static_cast<std::size_t>(e)];
}

template <typename E>
std::optional<E> EnumFromName(std::string_view name) {
  const auto& names = EnumNames<E>::kNames;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<E>(i);
  }
  return std::nullopt;
}

template <typename E>
std::vector<std::string> NamesOf() {
  return {EnumNames<E>::kNames.begin(), EnumNames<E>::kNames.end()};
}

// The models and optimizers the runner builds (runner/model), by name.
inline const std::vector<std::string>& ModelNames() {
  static const std::vector<std::string> names{"mlp", "cnn"};
  return names;
}
inline const std::vector<std::string>& OptimizerNames() {
  static const std::vector<std::string> names{"sgd", "adam"};
  return names;
}

}  // namespace ringtrain::contract
