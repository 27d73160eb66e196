// Kubeconfig and in-cluster config loading from files in a temporary directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/base64.h"
#include "controller/kube/kube_config.h"

namespace ringtrain::kube {
namespace {

namespace fs = std::filesystem;

// Real PEM for the checks the loader now makes: a CA, a client certificate and its key, and a
// second key that does not match. Made once by the openssl tool (skipped without it).
struct Pems {
  std::string ca, cert, key, other_key;
};

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

const Pems* TestPems() {
  static const Pems* pems = []() -> const Pems* {
    fs::path d = fs::temp_directory_path() / ("rt-kubeconfig-pem-" + std::to_string(::getpid()));
    fs::create_directories(d);
    std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::string cmd =
        "(cd " + d.string() + " && openssl req -x509" + ec +
        " -keyout ca.key -out ca.crt -days 1 -subj /CN=ca && openssl req" + ec +
        " -keyout cli.key -out cli.csr -subj /CN=alice && openssl x509 -req -in cli.csr -CA ca.crt"
        " -CAkey ca.key -CAcreateserial -out cli.crt -days 1 && openssl genpkey -algorithm EC"
        " -pkeyopt ec_paramgen_curve:prime256v1 -out other.key) > /dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) return nullptr;
    auto* p = new Pems{ReadAll(d / "ca.crt"), ReadAll(d / "cli.crt"), ReadAll(d / "cli.key"),
                       ReadAll(d / "other.key")};
    fs::remove_all(d);
    return p;
  }();
  return pems;
}

std::string B64(const std::string& s) { return Base64Encode(s); }

class KubeConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pems_ = TestPems();
    if (pems_ == nullptr) GTEST_SKIP() << "no openssl";
    dir_ = fs::temp_directory_path() /
           ("rt-kubeconfig-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }

  // The message of a kubeconfig that must fail, checked to name the file and `fields`.
  std::string Refused(const std::string& text, std::vector<std::string> fields) {
    std::string path = Write("kubeconfig", text);
    auto c = LoadKubeconfig(path);
    EXPECT_FALSE(c.ok()) << text;
    if (c.ok()) return "";
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().ToString();
    fields.push_back(path);
    for (const auto& f : fields) {
      EXPECT_NE(c.status().message().find(f), std::string::npos)
          << "no \"" << f << "\" in: " << c.status().message();
    }
    return c.status().message();
  }

  fs::path dir_;
  const Pems* pems_ = nullptr;
};

constexpr const char* kTokenKubeconfig = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: other
  cluster: {server: "https://other:6443"}
- name: kind
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: ca.crt
contexts:
- name: dev
  context: {cluster: kind, user: alice, namespace: training}
users:
- name: alice
  user: {token: s3cret}
)";

TEST_F(KubeConfigTest, TokenAndCaFileOfTheCurrentContext) {
  Write("ca.crt", pems_->ca);
  std::string path = Write("kubeconfig", kTokenKubeconfig);
  auto c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->server, "https://127.0.0.1:6443");
  EXPECT_EQ(c->token, "s3cret");
  EXPECT_EQ(c->ca_file, (dir_ / "ca.crt").string());  // relative to the kubeconfig's folder
  EXPECT_EQ(c->ns, "training");
  EXPECT_FALSE(c->insecure_skip_tls_verify);
}

TEST_F(KubeConfigTest, ClientCertificateDataIsDecoded) {
  std::string path = Write("kubeconfig", R"(current-context: c
clusters:
- name: k
  cluster:
    server: https://10.0.0.1:443
    certificate-authority-data: )" + B64(pems_->ca) +
                                             R"(
    insecure-skip-tls-verify: true
contexts:
- name: c
  context: {cluster: k, user: u}
users:
- name: u
  user:
    client-certificate-data: )" + B64(pems_->cert) +
                                             R"(
    client-key-data: )" + B64(pems_->key) + R"(
)");
  auto c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->ca_data, pems_->ca);
  EXPECT_EQ(c->client_cert_data, pems_->cert);
  EXPECT_EQ(c->client_key_data, pems_->key);
  EXPECT_TRUE(c->insecure_skip_tls_verify);
  EXPECT_EQ(c->ns, "default");
  EXPECT_TRUE(c->token.empty());
}

TEST_F(KubeConfigTest, TokenFileIsRead) {
  Write("token", "from-file\n");
  std::string path = Write("kubeconfig", R"(current-context: c
clusters: [{name: k, cluster: {server: "http://127.0.0.1:8080"}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
users: [{name: u, user: {tokenFile: token}}]
)");
  auto c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->token, "from-file");
}

TEST_F(KubeConfigTest, MissingCurrentContextIsNamed) {
  std::string text = kTokenKubeconfig;
  text.replace(text.find("current-context: dev"), 20, "current-context: staging");
  std::string path = Write("kubeconfig", text);
  auto c = LoadKubeconfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("staging"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find(path), std::string::npos) << c.status().message();
}

TEST_F(KubeConfigTest, MissingFieldsAreNamed) {
  std::string path = Write("kubeconfig", "clusters: []\n");
  auto c = LoadKubeconfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("current-context"), std::string::npos);

  path = Write("kubeconfig2", R"(current-context: c
clusters: [{name: k, cluster: {certificate-authority: x}}]
contexts: [{name: c, context: {cluster: k}}]
)");
  c = LoadKubeconfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("server"), std::string::npos) << c.status().message();

  c = LoadKubeconfig((dir_ / "absent").string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("absent"), std::string::npos);
}

TEST_F(KubeConfigTest, InClusterFromServiceAccountDir) {
  Write("token", "sa-token\n");
  Write("ca.crt", pems_->ca);
  Write("namespace", "ringtrain-system");
  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto c = InClusterConfig(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  EXPECT_EQ(c->token, "sa-token");
  EXPECT_EQ(c->ca_file, (dir_ / "ca.crt").string());
  EXPECT_EQ(c->ns, "ringtrain-system");

  ::setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  c = InClusterConfig(dir_.string());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->server, "https://[fd00::1]:443");

  ::unsetenv("KUBERNETES_SERVICE_HOST");
  c = InClusterConfig(dir_.string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("KUBERNETES_SERVICE_HOST"), std::string::npos);
  ::unsetenv("KUBERNETES_SERVICE_PORT");
}

TEST_F(KubeConfigTest, InClusterWithoutTokenFails) {
  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto c = InClusterConfig(dir_.string());
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("token"), std::string::npos);
}

constexpr const char* kHead = R"(current-context: c
clusters: [{name: k, cluster: {server: "https://127.0.0.1:6443"}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
)";

// issue 10 item 9: every malformed shape is an error naming the file and the field, never an
// exception (a scalar `user:` aborted the controller with an uncaught yaml-cpp exception).
TEST_F(KubeConfigTest, MalformedShapesAreErrorsNamingTheField) {
  std::string head = kHead;
  Refused(head + "users: [{name: u, user: alice}]\n",
          {"users[0].user: must be an object, got a string"});
  Refused(head + "users: [{name: u, user: [a, b]}]\n", {"users[0].user", "a list"});
  Refused(head + "users: [{name: u}]\n", {"users[0].user", "missing"});
  Refused(head + "users: {u: {token: x}}\n", {"users: must be a list, got an object"});
  Refused(head + "users: [alice]\n", {"users[0]: must be an object"});
  Refused(head + "users: [{name: [u], user: {}}]\n", {"users[0].name", "must be a string"});
  Refused(head + "users: [{name: u, user: {token: {a: b}}}]\n", {"users[0].user.token"});
  Refused(head + "users: [{name: u, user: {exec: run-me}}]\n", {"users[0].user.exec"});
  Refused(head +
              "users: [{name: u, user: {exec: {command: x, apiVersion: "
              "client.authentication.k8s.io/v1, interactiveMode: Never, args: a}}}]\n",
          {"users[0].user.exec.args", "must be a list"});
  Refused(head +
              "users: [{name: u, user: {exec: {command: x, apiVersion: "
              "client.authentication.k8s.io/v1, interactiveMode: Never, env: [FOO=bar]}}}]\n",
          {"users[0].user.exec.env[0]"});
  Refused(
      "current-context: c\nclusters: [{name: k, cluster: https://x}]\n"
      "contexts: [{name: c, context: {cluster: k}}]\n",
      {"clusters[0].cluster: must be an object"});
  Refused(
      "current-context: c\nclusters: [{name: k, cluster: {server: [a]}}]\n"
      "contexts: [{name: c, context: {cluster: k}}]\n",
      {"clusters[0].cluster.server", "must be a string"});
  Refused(
      "current-context: c\nclusters: [{name: k, cluster: {server: x, "
      "insecure-skip-tls-verify: maybe}}]\ncontexts: [{name: c, context: {cluster: k}}]\n",
      {"insecure-skip-tls-verify", "true or false"});
  Refused("current-context: c\ncontexts: [{name: c, context: dev}]\n",
          {"contexts[0].context: must be an object"});
  Refused("current-context: c\ncontexts: [{name: c, context: {cluster: {a: b}}}]\n",
          {"contexts[0].context.cluster", "must be a string"});
  Refused("current-context: [c]\n", {"current-context", "must be a string"});
  // Plain scalars are typed as YAML 1.2 (and kubectl) type them: a number is no token.
  Refused(head + "users: [{name: u, user: {token: 12345}}]\n",
          {"users[0].user.token: must be a string, got an integer 12345"});
  Refused("- a\n- b\n", {"not a YAML map"});
  Refused("a: [\n", {"kubeconfig"});             // a syntax error
  Refused("a: b\n---\nc: d\n", {"kubeconfig"});  // two documents (yaml-cpp's Load refuses)
  // A cycle is refused where it is, before any field is read.
  Refused("x: &x [*x]\ncurrent-context: *x\n",
          {"x[0]: an alias refers to a node that contains it"});
}

// The fuzzing entry point never throws, whatever bytes it gets; a sample of hostile shapes.
TEST_F(KubeConfigTest, ParseFromMemoryNeverThrows) {
  const std::vector<std::string> inputs = {
      "",
      std::string("\0\xff\xfe", 3),
      "{",
      "current-context: c\ncontexts: [[[[]]]]\n",
      "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
      "clusters: [{name: k, cluster: {server: s, extensions: 7}}]\nusers: [{name: u, user: "
      "{exec: {command: c, apiVersion: client.authentication.k8s.io/v1beta1, "
      "provideClusterInfo: true}}}]\n",
      "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
      "clusters: [{name: k, cluster: {server: s, extensions: [{name: "
      "client.authentication.k8s.io/exec, extension: &e [*e]}]}}]\nusers: [{name: u, user: "
      "{exec: {command: c, apiVersion: client.authentication.k8s.io/v1beta1, "
      "provideClusterInfo: true}}}]\n",
      std::string(5000, '[') + std::string(5000, ']'),
  };
  for (const auto& text : inputs) {
    StatusOr<KubeConfig> c = InvalidArgument("unset");
    EXPECT_NO_THROW(c = ParseKubeconfig(text, "fuzz-input", dir_)) << text.substr(0, 80);
    if (!c.ok()) {
      EXPECT_NE(c.status().message().find("fuzz-input"), std::string::npos);
    }
  }
  // Refused before yaml-cpp queues a token per bracket (gigabytes for 16 MiB of them).
  auto deep = ParseKubeconfig(std::string(1 << 20, '['), "deep", dir_);
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("nested deeper than 256"), std::string::npos)
      << deep.status().message();
  // Block nesting reaches yaml-cpp's own depth guard.
  std::string block;
  for (int i = 0; i < 600; ++i) block += std::string(i, ' ') + "a:\n";
  deep = ParseKubeconfig(block, "deep", dir_);
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("nested too deeply"), std::string::npos)
      << deep.status().message();
}

// issue 10 item 9: a missing or garbage CA, certificate or key fails at load, naming the file
// and the field, instead of failing every TLS handshake later.
TEST_F(KubeConfigTest, BrokenTlsMaterialFailsAtLoad) {
  auto with_cluster = [](const std::string& fields) {
    return "current-context: c\nclusters: [{name: k, cluster: {server: \"https://h:6443\", " +
           fields + "}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n";
  };
  Refused(with_cluster("certificate-authority: absent.crt") + "users: [{name: u, user: {}}]\n",
          {"clusters[0].cluster.certificate-authority", (dir_ / "absent.crt").string()});
  Write("garbage.crt", "this is not a certificate\n");
  Refused(with_cluster("certificate-authority: garbage.crt") + "users: [{name: u, user: {}}]\n",
          {"certificate-authority", "garbage.crt", "no PEM certificate"});
  Write("truncated.crt", pems_->ca.substr(0, pems_->ca.size() / 2));
  Refused(with_cluster("certificate-authority: truncated.crt") + "users: [{name: u, user: {}}]\n",
          {"certificate-authority", "truncated.crt"});
  Refused(with_cluster("certificate-authority-data: " + B64("garbage")) +
              "users: [{name: u, user: {}}]\n",
          {"clusters[0].cluster.certificate-authority-data", "no PEM certificate"});
  Refused(with_cluster("certificate-authority-data: '%%%'") + "users: [{name: u, user: {}}]\n",
          {"certificate-authority-data", "invalid base64"});
  // A device would never end (or block, as /dev/stdin does): regular files only.
  Refused(with_cluster("certificate-authority: /dev/zero") + "users: [{name: u, user: {}}]\n",
          {"certificate-authority", "/dev/zero is not a regular file"});

  Write("cli.crt", pems_->cert);
  Write("cli.key", pems_->key);
  Write("other.key", pems_->other_key);
  Write("garbage.key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
  std::string c = with_cluster("insecure-skip-tls-verify: true");
  Refused(c + "users: [{name: u, user: {client-certificate: cli.crt, client-key: absent.key}}]\n",
          {"users[0].user.client-key", (dir_ / "absent.key").string()});
  Refused(c + "users: [{name: u, user: {client-certificate: cli.crt, client-key: garbage.key}}]\n",
          {"users[0].user.client-key", "garbage.key", "private key"});
  Refused(c + "users: [{name: u, user: {client-certificate: cli.crt, client-key: other.key}}]\n",
          {"users[0].user", "does not match"});
  Refused(c + "users: [{name: u, user: {client-certificate: cli.key, client-key: cli.key}}]\n",
          {"users[0].user.client-certificate", "no PEM certificate"});
  Refused(c + "users: [{name: u, user: {client-key-data: " + B64("nope") + "}}]\n",
          {"users[0].user.client-key-data"});
  Refused(c + "users: [{name: u, user: {client-certificate: cli.crt}}]\n",
          {"needs both client-certificate and client-key"});

  std::string path =
      Write("kubeconfig-ok",
            c + "users: [{name: u, user: {client-certificate: cli.crt, client-key: cli.key}}]\n");
  auto ok = LoadKubeconfig(path);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->client_cert_file, (dir_ / "cli.crt").string());
}

TEST_F(KubeConfigTest, InClusterGarbageCaFailsAtStart) {
  Write("token", "sa-token\n");
  Write("ca.crt", "garbage\n");
  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto c = InClusterConfig(dir_.string());
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find((dir_ / "ca.crt").string()), std::string::npos)
      << c.status().message();
}

TEST_F(KubeConfigTest, NewKubeClientChecksTlsMaterialOfAnyConfig) {
  KubeConfig config;
  config.server = "https://127.0.0.1:6443";
  config.ca_file = Write("bad-ca.crt", "garbage");
  auto c = NewKubeClient(config);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("bad-ca.crt"), std::string::npos) << c.status().message();
  config.ca_file.clear();
  config.client_cert_data = pems_->cert;
  config.client_key_data = pems_->other_key;
  c = NewKubeClient(config);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("does not match"), std::string::npos);
}

// issue 9 item 8: legacy auth providers and other unsupported auth used to become
// system:anonymous silently; now each is refused by name with what to use instead.
TEST_F(KubeConfigTest, UnsupportedAuthIsRefusedByName) {
  std::string head = kHead;
  Refused(head + "users: [{name: u, user: {auth-provider: {name: gcp, config: {}}}}]\n",
          {"users[0].user.auth-provider", "\"gcp\"", "gke-gcloud-auth-plugin"});
  Refused(head + "users: [{name: u, user: {auth-provider: {name: azure}}}]\n",
          {"auth-provider \"azure\"", "kubelogin"});
  Refused(head + "users: [{name: u, user: {auth-provider: {name: oidc}}}]\n",
          {"auth-provider \"oidc\""});
  Refused(head + "users: [{name: u, user: {username: admin, password: pw}}]\n",
          {"users[0].user.username", "basic authentication"});
  // The keys client-go writes (kubectl config set-credentials --as, --as-group, --as-uid).
  Refused(head + "users: [{name: u, user: {token: t, as: bob}}]\n",
          {"users[0].user.as: impersonation is not supported"});
  Refused(head + "users: [{name: u, user: {token: t, as-groups: [system:masters]}}]\n",
          {"users[0].user.as-groups: impersonation is not supported"});
  Refused(head + "users: [{name: u, user: {token: t, as-uid: \"1\"}}]\n",
          {"users[0].user.as-uid: impersonation is not supported"});
  Refused(head + "users: [{name: u, user: {token: t, as-user-extra: {scopes: [a]}}}]\n",
          {"users[0].user.as-user-extra: impersonation is not supported"});
  Refused(
      "current-context: c\nclusters: [{name: k, cluster: {server: s, proxy-url: "
      "\"http://proxy:3128\"}}]\ncontexts: [{name: c, context: {cluster: k}}]\n",
      {"clusters[0].cluster.proxy-url", "not supported"});
  Refused(head +
              "users: [{name: u, user: {exec: {command: x, apiVersion: "
              "client.authentication.k8s.io/v1alpha1}}}]\n",
          {"users[0].user.exec.apiVersion", "v1alpha1", "not supported"});
  Refused(head +
              "users: [{name: u, user: {exec: {command: x, apiVersion: "
              "client.authentication.k8s.io/v1}}}]\n",
          {"users[0].user.exec.interactiveMode must be specified"});
  Refused(head +
              "users: [{name: u, user: {exec: {command: x, apiVersion: "
              "client.authentication.k8s.io/v1, interactiveMode: Always}}}]\n",
          {"interactiveMode is Always", "no terminal"});
  Refused(head +
              "users: [{name: u, user: {exec: {apiVersion: "
              "client.authentication.k8s.io/v1, interactiveMode: Never}}}]\n",
          {"users[0].user.exec.command is missing"});
}

TEST_F(KubeConfigTest, ExecStanzaIsRead) {
  std::string path = Write("kubeconfig", std::string(kHead) + R"(users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: ./bin/get-token
      args: [--region, eu-west-1]
      env: [{name: AWS_PROFILE, value: prod}]
      installHint: install get-token
)");
  auto c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->exec.has_value());
  // A command with a slash is relative to the kubeconfig, as clientcmd resolves it.
  EXPECT_EQ(c->exec->command, (dir_ / "bin/get-token").string());
  EXPECT_EQ(c->exec->args, (std::vector<std::string>{"--region", "eu-west-1"}));
  ASSERT_EQ(c->exec->env.size(), 1u);
  EXPECT_EQ(c->exec->env[0], (std::pair<std::string, std::string>{"AWS_PROFILE", "prod"}));
  EXPECT_EQ(c->exec->install_hint, "install get-token");
  EXPECT_EQ(c->exec->interactive_mode, "IfAvailable");
  EXPECT_FALSE(c->exec->provide_cluster_info);

  // A bare name stays a PATH lookup; a token in the same user wins over the plugin (client-go).
  path = Write("kubeconfig2", std::string(kHead) + R"(users:
- name: u
  user:
    token: static
    exec: {apiVersion: client.authentication.k8s.io/v1, command: aws, interactiveMode: Never}
)");
  c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->exec.has_value());
  EXPECT_EQ(c->token, "static");
}

TEST(NewKubeClientTest, RejectsServerWithoutScheme) {
  KubeConfig config;
  config.server = "127.0.0.1:6443";
  auto c = NewKubeClient(config);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringtrain::kube
