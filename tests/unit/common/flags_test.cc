// The one flag parser: both value forms, bool forms, positionals, every error naming its flag,
// range checks, last-wins repetition and the generated usage.
#include "common/flags.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ringtrain::flags {
namespace {

struct Values {
  std::string name = "default";
  std::string model = "mlp";
  int epochs = 10;
  std::int64_t steps = -1;
  std::uint64_t seed = 42;
  double rate = 0.5;
  double qps = 50;
  bool overlap = true;
  bool elect = false;
  contract::Device device = contract::Device::kAuto;
  std::string manifest;
  std::string extra;
};

FlagSet Declare(Values& v, bool positionals = false) {
  FlagSet f("test [flags]", "epilogue line\n");
  f.String("name", &v.name, "a name", "NAME");
  f.Choice("model", &v.model, {"mlp", "cnn"}, "the model");
  f.Int("epochs", &v.epochs, "passes", {.min = 1});
  f.Int("steps", &v.steps, "steps", {.min = -1, .max = 1000});
  f.Int("seed", &v.seed, "seed");
  f.Double("rate", &v.rate, "a rate", {.min = 0});
  f.Double("qps", &v.qps, "per second", {.min = 0, .exclusive_min = true});
  f.Bool("overlap", &v.overlap, "overlap");
  f.Bool("elect", &v.elect, "elect");
  f.Enum("device", &v.device, "where");
  if (positionals) {
    f.Positional("JOB.yaml", &v.manifest, "the manifest");
    f.Positional("EXTRA", &v.extra, "optional", /*required=*/false);
  }
  return f;
}

Status ParseInto(Values& v, const std::vector<std::string>& args, bool positionals = false) {
  FlagSet f = Declare(v, positionals);
  return f.Parse(args);
}

TEST(Flags, SpaceAndEqualsFormsSetEveryKind) {
  for (bool equals : {false, true}) {
    std::vector<std::pair<std::string, std::string>> pairs = {
        {"name", "x=y"},  {"model", "cnn"}, {"epochs", "3"},    {"steps", "-1"},     {"seed", "7"},
        {"rate", "0.25"}, {"qps", "1e-3"},  {"device", "cuda"}, {"overlap", "false"}};
    std::vector<std::string> args;
    for (const auto& [k, val] : pairs) {
      if (equals) {
        args.push_back("--" + k + "=" + val);
      } else {
        args.insert(args.end(), {"--" + k, val});
      }
    }
    Values v;
    ASSERT_TRUE(ParseInto(v, args).ok()) << (equals ? "= form" : "space form");
    EXPECT_EQ(v.name, "x=y");
    EXPECT_EQ(v.model, "cnn");
    EXPECT_EQ(v.epochs, 3);
    EXPECT_EQ(v.steps, -1);
    EXPECT_EQ(v.seed, 7u);
    EXPECT_EQ(v.rate, 0.25);
    EXPECT_EQ(v.qps, 1e-3);
    EXPECT_EQ(v.device, contract::Device::kCuda);
    EXPECT_FALSE(v.overlap);
  }
}

TEST(Flags, AnEmptyValueIsAValue) {
  Values v;
  ASSERT_TRUE(ParseInto(v, {"--name="}).ok());
  EXPECT_EQ(v.name, "");
  v.name = "x";
  ASSERT_TRUE(ParseInto(v, {"--name", ""}).ok());
  EXPECT_EQ(v.name, "");
}

TEST(Flags, BoolForms) {
  const std::pair<std::vector<std::string>, bool> cases[] = {
      {{"--elect"}, true},           {{"--elect=true"}, true},
      {{"--elect=1"}, true},         {{"--elect=false"}, false},
      {{"--elect=0"}, false},        {{"--elect", "true"}, true},
      {{"--elect", "false"}, false}, {{"--elect", "--elect=false"}, false},
  };
  for (const auto& [args, want] : cases) {
    Values v;
    v.elect = !want;
    ASSERT_TRUE(ParseInto(v, args).ok()) << args[0];
    EXPECT_EQ(v.elect, want) << args[0] << " " << (args.size() > 1 ? args[1] : "");
  }
  // A bare bool does not swallow a following positional.
  Values v;
  ASSERT_TRUE(ParseInto(v, {"--elect", "job.yaml"}, true).ok());
  EXPECT_TRUE(v.elect);
  EXPECT_EQ(v.manifest, "job.yaml");
}

TEST(Flags, RepeatedFlagLastWins) {
  Values v;
  ASSERT_TRUE(ParseInto(v, {"--epochs", "2", "--epochs=5", "--name", "a", "--name", "b"}).ok());
  EXPECT_EQ(v.epochs, 5);
  EXPECT_EQ(v.name, "b");
}

TEST(Flags, EveryErrorNamesItsFlag) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--epochs", "x"}, "--epochs: 'x' is not an integer"},
      {{"--epochs=1.5"}, "--epochs: '1.5' is not an integer"},
      {{"--epochs", ""}, "--epochs: '' is not an integer"},
      {{"--seed", "99999999999999999999"}, "--seed: '99999999999999999999' is not an integer"},
      {{"--rate", "fast"}, "--rate: 'fast' is not a number"},
      {{"--rate", "nan"}, "--rate: 'nan' is not a number"},
      {{"--name"}, "--name: missing value"},
      {{"--epochs"}, "--epochs: missing value"},
      {{"--foo"}, "unknown flag --foo"},
      {{"--foo=1"}, "unknown flag --foo"},
      {{"stray"}, "unexpected argument 'stray'"},
      {{"-x"}, "unexpected argument '-x'"},
      {{"--elect=maybe"}, "--elect: 'maybe' is not true or false"},
      {{"--elect", "maybe"}, "unexpected argument 'maybe'"},
      {{"--model", "rnn"}, "--model: 'rnn' is not one of mlp, cnn"},
      {{"--device=tpu"}, "--device: 'tpu' is not one of auto, cpu, cuda"},
  };
  for (const auto& [args, message] : cases) {
    Values v;
    Status s = ParseInto(v, args);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << message;
    EXPECT_EQ(s.message(), message);
  }
}

TEST(Flags, RangeChecks) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--epochs", "0"}, "--epochs: must be at least 1, got 0"},
      {{"--steps", "-2"}, "--steps: must be in [-1, 1000], got -2"},
      {{"--steps", "1001"}, "--steps: must be in [-1, 1000], got 1001"},
      // An unsigned variable takes no negative value; an int none beyond its type.
      {{"--seed", "-1"}, "--seed: must be at least 0, got -1"},
      {{"--epochs", "2147483648"}, "--epochs: must be in [1, 2147483647], got 2147483648"},
      {{"--rate", "-0.5"}, "--rate: must be at least 0, got -0.5"},
      {{"--qps", "0"}, "--qps: must be greater than 0, got 0"},
  };
  for (const auto& [args, message] : cases) {
    Values v;
    Status s = ParseInto(v, args);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << message;
    EXPECT_EQ(s.message(), message);
  }
  Values v;
  ASSERT_TRUE(ParseInto(v, {"--epochs=1", "--steps=1000", "--rate=0", "--qps=0.001"}).ok());
  EXPECT_EQ(v.epochs, 1);
  EXPECT_EQ(v.steps, 1000);
  EXPECT_EQ(v.rate, 0);
}

TEST(Flags, PositionalsInterleaveWithFlags) {
  Values v;
  ASSERT_TRUE(ParseInto(v, {"--epochs", "3", "job.yaml", "--name=n"}, true).ok());
  EXPECT_EQ(v.manifest, "job.yaml");
  EXPECT_EQ(v.extra, "");
  EXPECT_EQ(v.epochs, 3);
  EXPECT_EQ(v.name, "n");
  Values w;
  ASSERT_TRUE(ParseInto(w, {"a", "b"}, true).ok());
  EXPECT_EQ(w.extra, "b");
  Values x;
  EXPECT_EQ(ParseInto(x, {"a", "b", "c"}, true).message(), "unexpected argument 'c'");
  Values y;
  EXPECT_EQ(ParseInto(y, {"--epochs=2"}, true).message(), "missing argument JOB.yaml");
}

TEST(Flags, DoubleDashEndsTheFlags) {
  Values v;
  ASSERT_TRUE(ParseInto(v, {"--epochs=2", "--", "--odd-name.yaml"}, true).ok());
  EXPECT_EQ(v.manifest, "--odd-name.yaml");
  EXPECT_FALSE(HelpRequested({"--", "--help"}));
}

TEST(Flags, HelpAnywhereParsesNothing) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--help"}, {"-h"}, {"--epochs", "0", "--help"}, {"--foo", "-h"}}) {
    Values v;
    FlagSet f = Declare(v);
    EXPECT_TRUE(HelpRequested(args));
    ASSERT_TRUE(f.Parse(args).ok()) << args[0];
    EXPECT_TRUE(f.help_requested());
    EXPECT_EQ(v.epochs, 10);
  }
  Values v;
  FlagSet f = Declare(v);
  ASSERT_TRUE(f.Parse({"--epochs=2"}).ok());
  EXPECT_FALSE(f.help_requested());
}

TEST(Flags, UsageListsEveryFlagWithItsDefault) {
  Values v;
  FlagSet f = Declare(v, true);
  const std::string usage = f.Usage();
  EXPECT_EQ(usage.rfind("usage: test [flags]\n", 0), 0u) << usage;
  for (const std::string& name : f.Names()) {
    EXPECT_NE(usage.find("  --" + name + " "), std::string::npos) << name << "\n" << usage;
  }
  EXPECT_NE(usage.find("--model mlp|cnn"), std::string::npos) << usage;
  EXPECT_NE(usage.find("--device auto|cpu|cuda"), std::string::npos) << usage;
  EXPECT_NE(usage.find("--overlap [true|false]"), std::string::npos) << usage;
  EXPECT_NE(usage.find("--name NAME"), std::string::npos) << usage;
  EXPECT_NE(usage.find("passes (default 10)"), std::string::npos) << usage;
  EXPECT_NE(usage.find("(default auto)"), std::string::npos) << usage;
  EXPECT_NE(usage.find("JOB.yaml"), std::string::npos) << usage;
  EXPECT_NE(usage.find("[EXTRA]"), std::string::npos) << usage;
  EXPECT_NE(usage.find("--help"), std::string::npos) << usage;
  EXPECT_EQ(usage.substr(usage.size() - 14), "epilogue line\n");
  EXPECT_EQ(f.Names().size(), 10u);
  EXPECT_EQ(f.Names().front(), "name");
}

}  // namespace
}  // namespace ringtrain::flags
