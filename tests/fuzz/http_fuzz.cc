// Fuzz target: the HTTP request path of the runner's metrics/status server. RunnerMetrics serves
// on loopback in this process, as `ringtrain-runner` does; each input is one connection's bytes
// (request line, headers, body, garbage), after which the harness half-closes and reads the
// answer. A sanitizer report in the server thread ends the process like one here.
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "runner/metrics/runner_metrics.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

ringtrain::metrics::RunnerMetrics* Metrics() {
  static auto* m = [] {
    auto* metrics = new ringtrain::metrics::RunnerMetrics({"fuzz", "default", 0});
    auto s = metrics->Serve("127.0.0.1", 0);
    FUZZ_CHECK(s.ok());
    ringtrain::metrics::Progress p;
    p.state = "running";
    p.step = 42;
    p.message = "fuzz \"quoted\" message";
    metrics->UpdateProgress(p);
    return metrics;
  }();
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  Metrics();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ringtrain::fuzz;
  int fd = ConnectLoopback(Metrics()->port());
  FUZZ_CHECK(fd >= 0);
  SendAll(fd, std::string_view(reinterpret_cast<const char*>(data), size));
  ::shutdown(fd, SHUT_WR);
  std::string reply = RecvUntilQuiet(fd, 2000);
  ::close(fd);
  // RINGTRAIN_FUZZ_VERBOSE=1 shows what the server answered: a check that inputs reach it.
  static const bool verbose = std::getenv("RINGTRAIN_FUZZ_VERBOSE") != nullptr;
  if (verbose) {
    std::fprintf(stderr, "http_fuzz: %zu-byte reply: %.40s\n", reply.size(), reply.c_str());
  }
  return 0;
}
