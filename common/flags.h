// The one command-line flag parser of both binaries (runner flags, `ringtrain run|validate`,
// `ringtrain controller`): flags are declared once with a pointer, help text and bounds, and the
// parser, the errors and the usage text all come from that one table. Knows nothing of what the
// flags mean.
//
//   --name value and --name=value; a bool as --name, --name=true|false or --name true|false;
//   a repeated flag: the last one wins; "--" ends the flags; --help or -h anywhere asks for the
//   usage and nothing else is parsed. Errors are InvalidArgument naming the flag:
//   "--epochs: 'x' is not an integer", "--name: missing value", "unknown flag --foo",
//   "unexpected argument 'x'".
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/runner_flags.h"
#include "common/status.h"

namespace ringtrain::flags {

// Inclusive bounds of an integer flag, clamped to its variable's type.
struct IntRange {
  std::int64_t min = std::numeric_limits<std::int64_t>::min();
  std::int64_t max = std::numeric_limits<std::int64_t>::max();
};

// Bounds of a number flag; `exclusive_min`: the value must be greater than min (a rate).
struct DoubleRange {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool exclusive_min = false;
};

// Whether args ask for the usage: "--help" or "-h" before any "--".
bool HelpRequested(const std::vector<std::string>& args);

class FlagSet {
 public:
  // `usage`: the first line after "usage: " (e.g. "ringtrain run JOB.yaml [flags]");
  // `epilogue`: lines printed after the flag table (environment variables, exit codes).
  explicit FlagSet(std::string usage, std::string epilogue = "");

  void String(std::string_view name, std::string* out, std::string help,
              std::string metavar = "VALUE");
  // A string from a fixed list (model names, optimizer names).
  void Choice(std::string_view name, std::string* out, std::vector<std::string> allowed,
              std::string help);
  void Bool(std::string_view name, bool* out, std::string help);
  void Double(std::string_view name, double* out, std::string help, DoubleRange range = {});

  template <typename T>
  requires std::is_integral_v<T> &&
      (!std::is_same_v<T, bool>)void Int(std::string_view name, T* out, std::string help,
                                         IntRange range = {}) {
    const bool has_max = range.max != IntRange{}.max;
    range.min = std::max(range.min, TypeMin<T>());
    range.max = std::min(range.max, TypeMax<T>());
    AddInt(name, std::to_string(*out), std::move(help), range, has_max,
           [out](std::int64_t v) { *out = static_cast<T>(v); });
  }

  // A closed set of common/runner_flags.h, by the names flags and manifests share.
  template <typename E>
  void Enum(std::string_view name, E* out, std::string help) {
    AddChoice(name, std::string(contract::NameOf(*out)), std::move(help), contract::NamesOf<E>(),
              [out](const std::string& v) { *out = *contract::EnumFromName<E>(v); });
  }

  // Arguments that are not flags, in order; a missing required one is an error naming it.
  void Positional(std::string_view name, std::string* out, std::string help, bool required = true);

  // Parses args into the registered variables; on an error the variables may be half set.
  Status Parse(const std::vector<std::string>& args);
  bool help_requested() const { return help_requested_; }

  // The generated usage: the usage line, every positional and flag with its help and default.
  std::string Usage() const;
  // The flag names, without "--", in the order they were declared.
  std::vector<std::string> Names() const;

 private:
  struct Flag {
    std::string name;
    std::string metavar;  // "N", "X", "DIR", "a|b|c"; "[true|false]" for a bool
    std::string help;
    std::string default_value;
    bool is_bool = false;
    std::function<Status(const std::string& value)> set;
  };
  struct Arg {
    std::string name;
    std::string help;
    bool required;
    std::string* out;
  };

  template <typename T>
  static constexpr std::int64_t TypeMin() {
    if constexpr (std::is_signed_v<T>) return std::numeric_limits<T>::min();
    return 0;
  }
  template <typename T>
  static constexpr std::int64_t TypeMax() {
    constexpr auto kMax = std::numeric_limits<T>::max();
    if constexpr (static_cast<std::uint64_t>(kMax) >
                  static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return std::numeric_limits<std::int64_t>::max();
    }
    return static_cast<std::int64_t>(kMax);
  }

  // `has_max`: the table bounds the flag above (else only its type does).
  void AddInt(std::string_view name, std::string default_value, std::string help, IntRange range,
              bool has_max, std::function<void(std::int64_t)> store);
  void AddChoice(std::string_view name, std::string default_value, std::string help,
                 std::vector<std::string> allowed, std::function<void(const std::string&)> store);
  void Add(Flag flag);
  const Flag* Find(std::string_view name) const;

  std::string usage_;
  std::string epilogue_;
  std::vector<Flag> flags_;
  std::vector<Arg> positionals_;
  bool help_requested_ = false;
};

// The shortest text that reads back as exactly `v` ("0.001", "1e-08"): how a flag's value is
// written, in help and on a command line built for the runner.
std::string ShortestNumber(double v);

}  // namespace ringtrain::flags
