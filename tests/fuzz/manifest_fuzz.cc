// Fuzz target: a TrainingJob manifest through the CLI's path (YAML parse, conversion, defaults,
// validation) and the operator's (the API server's JSON), then what is built from a valid one.
// Any input must give a job or an error, never a crash, a hang or an unbounded allocation.
#include <spdlog/spdlog.h>

#include <cstdint>
#include <string>

#include "controller/api/training_job.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ringtrain;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto yaml = api::ParseManifestYaml(text, "fuzz.yaml");
  if (yaml.ok()) {
    FUZZ_CHECK(yaml->spec.replicas >= 1);
    (void)api::RunnerArgs(yaml->spec, "/ckpt");
    (void)api::StatusToJson(yaml->status);
  }
  auto json = api::ParseJobJson(text);
  if (json.ok()) (void)api::StatusToJson(json->status);
  return 0;
}
