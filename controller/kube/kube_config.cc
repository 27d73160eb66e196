#include "controller/kube/kube_config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/base64.h"

namespace ringtrain::kube {
namespace {

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  std::size_t start = s.find_first_not_of(" \n\r");
  return start == std::string::npos ? "" : s.substr(start);
}

// The entry of a named list (clusters, users, contexts) whose name matches, or an invalid node.
YAML::Node FindNamed(const YAML::Node& list, const std::string& name, const char* field) {
  if (!list || !list.IsSequence()) return YAML::Node(YAML::NodeType::Undefined);
  for (const auto& entry : list) {
    if (entry["name"] && entry["name"].as<std::string>() == name) return entry[field];
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

std::string Str(const YAML::Node& node, const char* key) {
  if (!node || !node[key] || !node[key].IsScalar()) return "";
  return node[key].as<std::string>();
}

std::string Resolve(const std::filesystem::path& base, const std::string& file) {
  if (file.empty()) return "";
  std::filesystem::path p(file);
  return p.is_absolute() ? file : (base / p).string();
}

}  // namespace

StatusOr<KubeConfig> LoadKubeconfig(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const std::exception& e) {
    return InvalidArgument("kubeconfig " + path + ": " + e.what());
  }
  auto fail = [&](const std::string& what) {
    return InvalidArgument("kubeconfig " + path + ": " + what);
  };
  if (!root.IsMap()) return fail("not a YAML map");
  std::string current = Str(root, "current-context");
  if (current.empty()) return fail("current-context is not set");
  YAML::Node context = FindNamed(root["contexts"], current, "context");
  if (!context) return fail("context \"" + current + "\" (current-context) not found in contexts");
  std::string cluster_name = Str(context, "cluster");
  if (cluster_name.empty()) return fail("context \"" + current + "\" has no cluster");
  YAML::Node cluster = FindNamed(root["clusters"], cluster_name, "cluster");
  if (!cluster) return fail("cluster \"" + cluster_name + "\" not found in clusters");

  const auto base = std::filesystem::path(path).parent_path();
  KubeConfig config;
  config.server = Str(cluster, "server");
  if (config.server.empty()) return fail("cluster \"" + cluster_name + "\" has no server");
  config.ca_file = Resolve(base, Str(cluster, "certificate-authority"));
  if (std::string data = Str(cluster, "certificate-authority-data"); !data.empty()) {
    auto pem = Base64Decode(data);
    if (!pem)
      return fail("cluster \"" + cluster_name + "\" certificate-authority-data: invalid base64");
    config.ca_data = *pem;
  }
  config.insecure_skip_tls_verify = Str(cluster, "insecure-skip-tls-verify") == "true";

  std::string user_name = Str(context, "user");
  if (!user_name.empty()) {
    YAML::Node user = FindNamed(root["users"], user_name, "user");
    if (!user) return fail("user \"" + user_name + "\" not found in users");
    config.token = Str(user, "token");
    if (std::string file = Str(user, "tokenFile"); !file.empty() && config.token.empty()) {
      auto token = ReadFile(Resolve(base, file));
      if (!token.ok())
        return fail("user \"" + user_name + "\" tokenFile: " + token.status().message());
      config.token = Trim(*token);
    }
    config.client_cert_file = Resolve(base, Str(user, "client-certificate"));
    config.client_key_file = Resolve(base, Str(user, "client-key"));
    for (auto [key, out] : {std::pair{"client-certificate-data", &config.client_cert_data},
                            std::pair{"client-key-data", &config.client_key_data}}) {
      if (std::string data = Str(user, key); !data.empty()) {
        auto pem = Base64Decode(data);
        if (!pem) return fail("user \"" + user_name + "\" " + key + ": invalid base64");
        *out = *pem;
      }
    }
    bool has_cert = !config.client_cert_file.empty() || !config.client_cert_data.empty();
    bool has_key = !config.client_key_file.empty() || !config.client_key_data.empty();
    if (has_cert != has_key) {
      return fail("user \"" + user_name + "\" needs both client-certificate and client-key");
    }
  }
  if (std::string ns = Str(context, "namespace"); !ns.empty()) config.ns = ns;
  return config;
}

StatusOr<KubeConfig> InClusterConfig(const std::string& dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return FailedPrecondition(
        "not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set");
  }
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6
  KubeConfig config;
  config.server = "https://" + h + ":" + port;
  auto token = ReadFile(dir + "/token");
  if (!token.ok())
    return NotFound("in-cluster config: service account token: " + token.status().message());
  config.token = Trim(*token);
  if (config.token.empty()) return InvalidArgument("in-cluster config: " + dir + "/token is empty");
  config.ca_file = dir + "/ca.crt";
  if (!std::filesystem::exists(config.ca_file)) {
    return NotFound("in-cluster config: cannot read " + config.ca_file);
  }
  if (auto ns = ReadFile(dir + "/namespace"); ns.ok() && !Trim(*ns).empty()) config.ns = Trim(*ns);
  return config;
}

}  // namespace ringtrain::kube
