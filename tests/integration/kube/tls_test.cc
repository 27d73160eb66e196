// The https path (CA file and data, client certificates, insecure-skip-tls-verify) against
// `openssl s_server -www`, which answers any request with an HTML page: a handshake that worked
// shows up as kDataLoss ("not JSON"), one that failed as kUnavailable. Skipped without openssl.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/net.h"
#include "controller/kube/kube_config.h"
#include "tests/integration/kube/kube_test_util.h"

namespace ringtrain::kube {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("openssl version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl";
    dir_ = fs::temp_directory_path() / ("rt-kube-tls-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::string d = dir_.string();
    std::string script =
        "cd " + d +
        " && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1"
        " -subj /CN=testca"
        " && openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=127.0.0.1"
        " && printf 'subjectAltName=IP:127.0.0.1\\n' > ext"
        " && openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out srv.crt"
        " -days 1 -extfile ext"
        " && openssl req -newkey rsa:2048 -nodes -keyout cli.key -out cli.csr -subj /CN=alice"
        " && openssl x509 -req -in cli.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out cli.crt"
        " -days 1) > /dev/null 2>&1";
    script = "(" + script;
    ASSERT_EQ(std::system(script.c_str()), 0);
    // A free port: bind 0, read it, close, hand it to s_server.
    auto listener = net::Listen("127.0.0.1", 0);
    ASSERT_TRUE(listener.ok());
    port_ = *net::LocalPort(*listener);
    listener->Close();
    // Everything the child needs is built before fork: only async-signal-safe calls after it.
    const std::string accept = "127.0.0.1:" + std::to_string(port_);
    const std::string cert = d + "/srv.crt", key = d + "/srv.key", ca = d + "/ca.crt";
    const int devnull = ::open("/dev/null", O_WRONLY);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(devnull, 1);
      ::dup2(devnull, 2);
      ::execlp("openssl", "openssl", "s_server", "-quiet", "-www", "-accept", accept.c_str(),
               "-cert", cert.c_str(), "-key", key.c_str(), "-Verify", "1", "-CAfile", ca.c_str(),
               static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(devnull);
    ASSERT_TRUE(testing::Eventually(
        [&] { return net::Connect("127.0.0.1", port_, DeadlineAfter(Duration(200))).ok(); }));
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  StatusCode GetCode(KubeConfig config) {
    config.server = "https://127.0.0.1:" + std::to_string(port_);
    ClientOptions options;
    options.request_timeout = Duration(5'000);
    options.max_retries = 0;
    auto c = NewKubeClient(config, options);
    if (!c.ok()) return c.status().code();
    return (*c)->Get(kPods, "default", "x").status().code();
  }

  fs::path dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

TEST_F(TlsTest, CaAndClientCertificateFiles) {
  KubeConfig c;
  c.ca_file = (dir_ / "ca.crt").string();
  c.client_cert_file = (dir_ / "cli.crt").string();
  c.client_key_file = (dir_ / "cli.key").string();
  EXPECT_EQ(GetCode(c), StatusCode::kDataLoss);
}

TEST_F(TlsTest, CaAndClientCertificateData) {
  KubeConfig c;
  c.ca_data = Slurp(dir_ / "ca.crt");
  c.client_cert_data = Slurp(dir_ / "cli.crt");
  c.client_key_data = Slurp(dir_ / "cli.key");
  EXPECT_EQ(GetCode(c), StatusCode::kDataLoss);
}

TEST_F(TlsTest, UnknownCaOrNoClientCertificateFails) {
  KubeConfig no_ca;
  no_ca.client_cert_file = (dir_ / "cli.crt").string();
  no_ca.client_key_file = (dir_ / "cli.key").string();
  EXPECT_EQ(GetCode(no_ca), StatusCode::kUnavailable);

  KubeConfig insecure = no_ca;
  insecure.insecure_skip_tls_verify = true;
  EXPECT_EQ(GetCode(insecure), StatusCode::kDataLoss);

  KubeConfig no_cert;
  no_cert.ca_file = (dir_ / "ca.crt").string();
  EXPECT_EQ(GetCode(no_cert), StatusCode::kUnavailable);
}

// An exec plugin that answers with a client certificate (clientCertificateData/clientKeyData),
// as some managed clusters' plugins do: the handshake presents it.
TEST_F(TlsTest, ClientCertificateFromAnExecPlugin) {
  nlohmann::json cred = {{"apiVersion", "client.authentication.k8s.io/v1"},
                         {"kind", "ExecCredential"},
                         {"status",
                          {{"clientCertificateData", Slurp(dir_ / "cli.crt")},
                           {"clientKeyData", Slurp(dir_ / "cli.key")},
                           {"expirationTimestamp", "2099-01-01T00:00:00Z"}}}};
  std::ofstream(dir_ / "cred.json") << cred.dump();
  std::ofstream(dir_ / "plugin.sh") << "#!/bin/sh\ncat '" << (dir_ / "cred.json").string() << "'\n";
  ::chmod((dir_ / "plugin.sh").c_str(), 0755);
  KubeConfig c;
  c.ca_file = (dir_ / "ca.crt").string();
  c.exec = ExecConfig{};
  c.exec->command = (dir_ / "plugin.sh").string();
  c.exec->api_version = kExecApiV1;
  c.exec->interactive_mode = "Never";
  EXPECT_EQ(GetCode(c), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ringtrain::kube
