// fake-apiserver: serves the fake kube-apiserver on 127.0.0.1 until SIGTERM or SIGINT.
//   fake-apiserver [--port N] [--bookmark-interval-ms N]
// Prints "http://127.0.0.1:PORT" on the first line of stdout once it accepts connections.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/fakes/apiserver/fake_apiserver.h"

int main(int argc, char** argv) {
  ringtrain::fake::FakeApiServerOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--port" && i + 1 < argc) {
      options.port = std::atoi(argv[++i]);
    } else if (arg == "--bookmark-interval-ms" && i + 1 < argc) {
      options.bookmark_interval = std::chrono::milliseconds(std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: fake-apiserver [--port N] [--bookmark-interval-ms N]\n");
      return 2;
    }
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  // Blocked before any thread starts, so only sigwait below sees them.
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto server = ringtrain::fake::FakeApiServer::Create(options);
  if (auto st = server->Start(); !st.ok()) {
    std::fprintf(stderr, "fake-apiserver: %s\n", st.ToString().c_str());
    return 1;
  }
  std::printf("%s\n", server->url().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  server->Stop();
  return 0;
}
