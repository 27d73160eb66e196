// Fuzz target: the kubeconfig loader (`ringtrain controller --kubeconfig FILE`), then the client
// built from what it accepted (server URI, CA and client key material), as the controller does
// at start. Any file must give a client or an error naming the file, never an abort.
#include <spdlog/spdlog.h>

#include <cstdint>
#include <string>

#include "controller/kube/kube_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ringtrain;
  const std::string path = fuzz::TempDir() + "/kubeconfig";
  fuzz::WriteFile(path, std::string(reinterpret_cast<const char*>(data), size));
  auto config = kube::LoadKubeconfig(path);
  if (config.ok()) (void)kube::NewKubeClient(*config);
  return 0;
}
