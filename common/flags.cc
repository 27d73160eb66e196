#include "common/flags.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include "common/env.h"

namespace ringtrain::flags {
namespace {

constexpr std::string_view kTerminator = "--";

std::string Join(const std::vector<std::string>& names, std::string_view sep) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : std::string(sep)) + n;
  return out;
}

std::optional<bool> BoolFromName(const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  return std::nullopt;
}

}  // namespace

bool HelpRequested(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == kTerminator) return false;
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

FlagSet::FlagSet(std::string usage, std::string epilogue)
    : usage_(std::move(usage)), epilogue_(std::move(epilogue)) {}

void FlagSet::Add(Flag flag) {
  if (Find(flag.name) != nullptr || flag.name == "help") {
    // Two declarations of one flag: a bug in the table, not bad input.
    std::fprintf(stderr, "flags: --%s declared twice\n", flag.name.c_str());
    std::abort();
  }
  flags_.push_back(std::move(flag));
}

const FlagSet::Flag* FlagSet::Find(std::string_view name) const {
  for (const auto& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

void FlagSet::String(std::string_view name, std::string* out, std::string help,
                     std::string metavar) {
  Add({std::string(name), std::move(metavar), std::move(help), *out, false,
       [out](const std::string& v) {
         *out = v;
         return Status::Ok();
       }});
}

void FlagSet::Choice(std::string_view name, std::string* out, std::vector<std::string> allowed,
                     std::string help) {
  AddChoice(name, *out, std::move(help), std::move(allowed),
            [out](const std::string& v) { *out = v; });
}

void FlagSet::AddChoice(std::string_view name, std::string default_value, std::string help,
                        std::vector<std::string> allowed,
                        std::function<void(const std::string&)> store) {
  std::string flag = "--" + std::string(name);
  std::string metavar = Join(allowed, "|");
  Add({std::string(name), std::move(metavar), std::move(help), std::move(default_value), false,
       [flag, allowed = std::move(allowed), store = std::move(store)](const std::string& v) {
         for (const auto& a : allowed) {
           if (a == v) {
             store(v);
             return Status::Ok();
           }
         }
         return InvalidArgument(flag + ": '" + v + "' is not one of " + Join(allowed, ", "));
       }});
}

void FlagSet::Bool(std::string_view name, bool* out, std::string help) {
  std::string flag = "--" + std::string(name);
  Add({std::string(name), "[true|false]", std::move(help), *out ? "true" : "false", true,
       [flag, out](const std::string& v) {
         auto b = BoolFromName(v);
         if (!b) return InvalidArgument(flag + ": '" + v + "' is not true or false");
         *out = *b;
         return Status::Ok();
       }});
}

void FlagSet::Double(std::string_view name, double* out, std::string help, DoubleRange range) {
  std::string flag = "--" + std::string(name);
  Add({std::string(name), "X", std::move(help), ShortestNumber(*out), false,
       [flag, out, range](const std::string& v) {
         auto n = ParseDouble(v, flag);
         if (!n.ok() || !std::isfinite(*n)) {
           return InvalidArgument(flag + ": '" + v + "' is not a number");
         }
         if (range.exclusive_min && !(*n > range.min)) {
           return InvalidArgument(flag + ": must be greater than " + ShortestNumber(range.min) +
                                  ", got " + v);
         }
         if (*n < range.min || *n > range.max) {
           if (std::isinf(range.max)) {
             return InvalidArgument(flag + ": must be at least " + ShortestNumber(range.min) +
                                    ", got " + v);
           }
           return InvalidArgument(flag + ": must be in [" + ShortestNumber(range.min) + ", " +
                                  ShortestNumber(range.max) + "], got " + v);
         }
         *out = *n;
         return Status::Ok();
       }});
}

void FlagSet::AddInt(std::string_view name, std::string default_value, std::string help,
                     IntRange range, bool has_max, std::function<void(std::int64_t)> store) {
  std::string flag = "--" + std::string(name);
  Add({std::string(name), "N", std::move(help), std::move(default_value), false,
       [flag, range, has_max, store = std::move(store)](const std::string& v) {
         auto n = ParseInt(v, flag);
         if (!n.ok()) return InvalidArgument(flag + ": '" + v + "' is not an integer");
         if (*n < range.min || *n > range.max) {
           if (*n < range.min && !has_max) {
             return InvalidArgument(flag + ": must be at least " + std::to_string(range.min) +
                                    ", got " + v);
           }
           return InvalidArgument(flag + ": must be in [" + std::to_string(range.min) + ", " +
                                  std::to_string(range.max) + "], got " + v);
         }
         store(*n);
         return Status::Ok();
       }});
}

void FlagSet::Positional(std::string_view name, std::string* out, std::string help, bool required) {
  positionals_.push_back({std::string(name), std::move(help), required, out});
}

Status FlagSet::Parse(const std::vector<std::string>& args) {
  help_requested_ = HelpRequested(args);
  if (help_requested_) return Status::Ok();
  std::size_t next_positional = 0;
  auto positional = [&](const std::string& a) -> Status {
    if (next_positional >= positionals_.size()) {
      return InvalidArgument("unexpected argument '" + a + "'");
    }
    *positionals_[next_positional++].out = a;
    return Status::Ok();
  };
  bool flags_done = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (flags_done || a.rfind("--", 0) != 0) {
      RETURN_IF_ERROR(positional(a));
      continue;
    }
    if (a == kTerminator) {
      flags_done = true;
      continue;
    }
    std::string name = a.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    const Flag* flag = Find(name);
    if (flag == nullptr) return InvalidArgument("unknown flag --" + name);
    if (!value) {
      if (flag->is_bool) {
        // A bare bool is true; "--overlap false" (the runner's old form) still reads its value.
        value = "true";
        if (i + 1 < args.size() && BoolFromName(args[i + 1])) value = args[++i];
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return InvalidArgument("--" + name + ": missing value");
      }
    }
    RETURN_IF_ERROR(flag->set(*value));
  }
  for (std::size_t p = next_positional; p < positionals_.size(); ++p) {
    if (positionals_[p].required) {
      return InvalidArgument("missing argument " + positionals_[p].name);
    }
  }
  return Status::Ok();
}

std::string FlagSet::Usage() const {
  std::vector<std::pair<std::string, std::string>> rows;  // left column, help
  for (const auto& p : positionals_) {
    rows.emplace_back(p.required ? p.name : "[" + p.name + "]", p.help);
  }
  for (const auto& f : flags_) {
    std::string help = f.help;
    if (!f.default_value.empty()) help += " (default " + f.default_value + ")";
    rows.emplace_back("--" + f.name + " " + f.metavar, help);
  }
  rows.emplace_back("--help", "print this usage");
  std::size_t width = 0;
  for (const auto& [left, help] : rows) width = std::max(width, left.size());
  std::string out = "usage: " + usage_ + "\n";
  for (const auto& [left, help] : rows) {
    out += "  " + left + std::string(width - left.size() + 2, ' ') + help + "\n";
  }
  out += epilogue_;
  return out;
}

std::vector<std::string> FlagSet::Names() const {
  std::vector<std::string> names;
  names.reserve(flags_.size());
  for (const auto& f : flags_) names.push_back(f.name);
  return names;
}

std::string ShortestNumber(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest exact round-trip form
  return {buf, r.ptr};
}

}  // namespace ringtrain::flags
