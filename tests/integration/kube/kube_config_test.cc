// Kubeconfig and in-cluster config loading from files in a temporary directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "controller/kube/kube_config.h"

namespace ringtrain::kube {
namespace {

namespace fs = std::filesystem;

class KubeConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
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

  fs::path dir_;
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
  // base64("-----CERT-----") and base64("-----KEY-----"), base64("-----CA-----").
  std::string path = Write("kubeconfig", R"(current-context: c
clusters:
- name: k
  cluster:
    server: https://10.0.0.1:443
    certificate-authority-data: LS0tLS1DQS0tLS0t
    insecure-skip-tls-verify: true
contexts:
- name: c
  context: {cluster: k, user: u}
users:
- name: u
  user:
    client-certificate-data: LS0tLS1DRVJULS0tLS0=
    client-key-data: LS0tLS1LRVktLS0tLQ==
)");
  auto c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->ca_data, "-----CA-----");
  EXPECT_EQ(c->client_cert_data, "-----CERT-----");
  EXPECT_EQ(c->client_key_data, "-----KEY-----");
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
  Write("ca.crt", "-----BEGIN CERTIFICATE-----\n");
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

TEST(NewKubeClientTest, RejectsServerWithoutScheme) {
  KubeConfig config;
  config.server = "127.0.0.1:6443";
  auto c = NewKubeClient(config);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringtrain::kube
