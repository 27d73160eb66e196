#include "controller/kube/kube_config.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>

#include "common/base64.h"
#include "common/yaml_guard.h"
#include "controller/kube/tls_material.h"

namespace ringtrain::kube {
namespace {

using Json = nlohmann::json;

constexpr std::size_t kMaxKubeconfigBytes = 16 << 20;
constexpr int kMaxExtensionDepth = 32;
constexpr int kMaxExtensionNodes = 10'000;

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  std::size_t start = s.find_first_not_of(" \n\r");
  return start == std::string::npos ? "" : s.substr(start);
}

const char* KindName(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "a scalar";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Null:
      return "null";
    default:
      return "undefined";
  }
}

// Reads of one kubeconfig: every accessor checks the node's shape first (yaml-cpp throws on a
// subscript of a scalar or a conversion of a map) and names the field path in its error.
class Reader {
 public:
  Reader(std::string source, std::filesystem::path base)
      : source_(std::move(source)), base_(std::move(base)) {}

  Status Fail(const std::string& what) const {
    return InvalidArgument("kubeconfig " + source_ + ": " + what);
  }

  // The child `key` of a map: Undefined when absent or null; an error when `node` is no map.
  StatusOr<YAML::Node> Child(const YAML::Node& node, const char* key,
                             const std::string& field) const {
    if (!node || node.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
    if (!node.IsMap()) return Fail(field + " must be a map, got " + KindName(node));
    YAML::Node child = node[key];
    if (!child || child.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
    return child;
  }

  StatusOr<std::string> String(const YAML::Node& node, const char* key,
                               const std::string& field) const {
    ASSIGN_OR_RETURN(YAML::Node child, Child(node, key, field));
    if (!child) return std::string();
    if (!child.IsScalar()) {
      return Fail(field + "." + key + " must be a string, got " + KindName(child));
    }
    return child.Scalar();
  }

  StatusOr<bool> Bool(const YAML::Node& node, const char* key, const std::string& field) const {
    ASSIGN_OR_RETURN(std::string v, String(node, key, field));
    if (v.empty() || v == "false" || v == "False" || v == "FALSE") return false;
    if (v == "true" || v == "True" || v == "TRUE") return true;
    return Fail(field + "." + key + " must be true or false, got \"" + v.substr(0, 64) + "\"");
  }

  StatusOr<std::vector<std::string>> Strings(const YAML::Node& node, const char* key,
                                             const std::string& field) const {
    ASSIGN_OR_RETURN(YAML::Node child, Child(node, key, field));
    std::vector<std::string> out;
    if (!child) return out;
    if (!child.IsSequence()) {
      return Fail(field + "." + key + " must be a list, got " + KindName(child));
    }
    for (std::size_t i = 0; i < child.size(); ++i) {
      if (!child[i].IsScalar()) {
        return Fail(field + "." + key + "[" + std::to_string(i) + "] must be a string, got " +
                    KindName(child[i]));
      }
      out.push_back(child[i].Scalar());
    }
    return out;
  }

  // The `field` (cluster, user, context) of the entry of `list` named `name`: the last such
  // entry, as client-go's conversion into a map by name keeps the last.
  StatusOr<YAML::Node> Named(const YAML::Node& root, const char* list_key, const std::string& name,
                             const char* field, std::string* path) const {
    ASSIGN_OR_RETURN(YAML::Node list, Child(root, list_key, "the top level"));
    if (!list) return YAML::Node(YAML::NodeType::Undefined);
    if (!list.IsSequence())
      return Fail(std::string(list_key) + " must be a list, got " + KindName(list));
    YAML::Node found(YAML::NodeType::Undefined);
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string at = std::string(list_key) + "[" + std::to_string(i) + "]";
      ASSIGN_OR_RETURN(std::string entry_name, String(list[i], "name", at));
      if (entry_name != name) continue;
      ASSIGN_OR_RETURN(YAML::Node value, Child(list[i], field, at));
      *path = at + "." + field;
      if (!value) return Fail(*path + " (\"" + name + "\") is missing");
      if (!value.IsMap())
        return Fail(*path + " (\"" + name + "\") must be a map, got " + KindName(value));
      found.reset(value);
    }
    return found;
  }

  std::string Resolve(const std::string& file) const {
    if (file.empty()) return "";
    std::filesystem::path p(file);
    return p.is_absolute() ? file : (base_ / p).lexically_normal().string();
  }

  // A `*-data` field: base64 of PEM.
  StatusOr<std::string> Data(const YAML::Node& node, const char* key,
                             const std::string& field) const {
    ASSIGN_OR_RETURN(std::string text, String(node, key, field));
    if (text.empty()) return std::string();
    auto decoded = Base64Decode(text);
    if (!decoded) return Fail(field + "." + key + ": invalid base64");
    return *decoded;
  }

  // Bounded YAML → JSON for the exec extension's free-form config (aliases may make a cycle).
  StatusOr<Json> ToJson(const YAML::Node& node, const std::string& field, int depth,
                        int* budget) const {
    if (depth > kMaxExtensionDepth || --*budget < 0) {
      return Fail(field + " is nested too deeply or too large");
    }
    switch (node.Type()) {
      case YAML::NodeType::Scalar:
        return Json(node.Scalar());
      case YAML::NodeType::Sequence: {
        Json out = Json::array();
        for (const auto& item : node) {
          ASSIGN_OR_RETURN(Json j, ToJson(item, field, depth + 1, budget));
          out.push_back(std::move(j));
        }
        return out;
      }
      case YAML::NodeType::Map: {
        Json out = Json::object();
        for (const auto& kv : node) {
          if (!kv.first.IsScalar()) return Fail(field + " has a key that is not a string");
          ASSIGN_OR_RETURN(Json j, ToJson(kv.second, field, depth + 1, budget));
          out[kv.first.Scalar()] = std::move(j);
        }
        return out;
      }
      default:
        return Json(nullptr);
    }
  }

 private:
  std::string source_;
  std::filesystem::path base_;
};

// Refusals of what client-go would do and we do not, so that such a kubeconfig never silently
// becomes system:anonymous.
std::string AuthProviderAdvice(const std::string& name) {
  if (name == "gcp")
    return "use the exec plugin gke-gcloud-auth-plugin (gcloud components install "
           "gke-gcloud-auth-plugin, then gcloud container clusters get-credentials)";
  if (name == "azure") return "use the exec plugin kubelogin (kubelogin convert-kubeconfig)";
  if (name == "oidc") return "use an exec plugin such as kubelogin (kubectl oidc-login)";
  return "use an exec credential plugin, a token or a client certificate";
}

Status ParseExec(const Reader& r, const YAML::Node& exec, const std::string& field,
                 ExecConfig* out) {
  ASSIGN_OR_RETURN(out->command, r.String(exec, "command", field));
  if (out->command.empty()) return r.Fail(field + ".command is missing");
  // Like clientcmd: only a command with a path separator is relative to the kubeconfig.
  if (out->command.find('/') != std::string::npos) out->command = r.Resolve(out->command);
  ASSIGN_OR_RETURN(out->args, r.Strings(exec, "args", field));
  ASSIGN_OR_RETURN(YAML::Node env, r.Child(exec, "env", field));
  if (env) {
    if (!env.IsSequence()) return r.Fail(field + ".env must be a list, got " + KindName(env));
    for (std::size_t i = 0; i < env.size(); ++i) {
      const std::string at = field + ".env[" + std::to_string(i) + "]";
      if (!env[i].IsMap()) return r.Fail(at + " must be a map with name and value");
      ASSIGN_OR_RETURN(std::string name, r.String(env[i], "name", at));
      ASSIGN_OR_RETURN(std::string value, r.String(env[i], "value", at));
      if (name.empty()) return r.Fail(at + ".name is missing");
      if (name.find('=') != std::string::npos || name.find('\0') != std::string::npos) {
        return r.Fail(at + ".name \"" + name.substr(0, 64) + "\" is not a variable name");
      }
      out->env.emplace_back(std::move(name), std::move(value));
    }
  }
  ASSIGN_OR_RETURN(out->api_version, r.String(exec, "apiVersion", field));
  if (out->api_version.empty()) return r.Fail(field + ".apiVersion is missing");
  if (out->api_version != kExecApiV1 && out->api_version != kExecApiV1beta1) {
    return r.Fail(field + ".apiVersion \"" + out->api_version.substr(0, 100) +
                  "\" is not supported; use " + kExecApiV1 + " or " + kExecApiV1beta1);
  }
  ASSIGN_OR_RETURN(out->install_hint, r.String(exec, "installHint", field));
  ASSIGN_OR_RETURN(out->interactive_mode, r.String(exec, "interactiveMode", field));
  if (out->interactive_mode.empty()) {
    // clientcmd's defaulting: v1beta1 may omit it, v1 must say.
    if (out->api_version == kExecApiV1) {
      return r.Fail(field + ".interactiveMode must be specified for " + kExecApiV1 +
                    " (Never, IfAvailable or Always)");
    }
    out->interactive_mode = "IfAvailable";
  }
  if (out->interactive_mode != "Never" && out->interactive_mode != "IfAvailable" &&
      out->interactive_mode != "Always") {
    return r.Fail(field + ".interactiveMode \"" + out->interactive_mode.substr(0, 64) +
                  "\" is not one of Never, IfAvailable, Always");
  }
  if (out->interactive_mode == "Always") {
    return r.Fail(field +
                  ".interactiveMode is Always, but the controller has no terminal to prompt on");
  }
  ASSIGN_OR_RETURN(out->provide_cluster_info, r.Bool(exec, "provideClusterInfo", field));
  return Status::Ok();
}

Status CheckPemFile(const Reader& r, const std::string& path, const std::string& field, bool key,
                    std::string* content) {
  auto data = ReadSmallFile(path);
  if (!data.ok()) return r.Fail(field + ": " + data.status().message());
  Status s = key ? CheckPemPrivateKey(*data, field + " " + path)
                 : CheckPemCertificates(*data, field + " " + path);
  if (!s.ok()) return r.Fail(s.message());
  *content = std::move(*data);
  return Status::Ok();
}

StatusOr<KubeConfig> Parse(const Reader& r, const YAML::Node& root) {
  if (!root.IsMap()) return r.Fail(std::string("not a YAML map (got ") + KindName(root) + ")");
  ASSIGN_OR_RETURN(std::string current, r.String(root, "current-context", "the top level"));
  if (current.empty()) return r.Fail("current-context is not set");
  std::string context_path, cluster_path, user_path;
  ASSIGN_OR_RETURN(YAML::Node context,
                   r.Named(root, "contexts", current, "context", &context_path));
  if (!context)
    return r.Fail("context \"" + current + "\" (current-context) not found in contexts");
  ASSIGN_OR_RETURN(std::string cluster_name, r.String(context, "cluster", context_path));
  if (cluster_name.empty()) return r.Fail("context \"" + current + "\" has no cluster");
  ASSIGN_OR_RETURN(YAML::Node cluster,
                   r.Named(root, "clusters", cluster_name, "cluster", &cluster_path));
  if (!cluster) return r.Fail("cluster \"" + cluster_name + "\" not found in clusters");

  KubeConfig config;
  ASSIGN_OR_RETURN(config.server, r.String(cluster, "server", cluster_path));
  if (config.server.empty()) return r.Fail("cluster \"" + cluster_name + "\" has no server");
  for (const char* unsupported : {"proxy-url", "tls-server-name"}) {
    ASSIGN_OR_RETURN(std::string v, r.String(cluster, unsupported, cluster_path));
    if (!v.empty()) {
      return r.Fail(cluster_path + "." + unsupported + " is not supported by ringtrain");
    }
  }
  std::string ca_pem;
  ASSIGN_OR_RETURN(config.ca_data, r.Data(cluster, "certificate-authority-data", cluster_path));
  ASSIGN_OR_RETURN(std::string ca_file, r.String(cluster, "certificate-authority", cluster_path));
  if (!config.ca_data.empty()) {
    Status s = CheckPemCertificates(config.ca_data, cluster_path + ".certificate-authority-data");
    if (!s.ok()) return r.Fail(s.message());
    ca_pem = config.ca_data;
  } else if (!ca_file.empty()) {
    config.ca_file = r.Resolve(ca_file);
    RETURN_IF_ERROR(
        CheckPemFile(r, config.ca_file, cluster_path + ".certificate-authority", false, &ca_pem));
  }
  ASSIGN_OR_RETURN(config.insecure_skip_tls_verify,
                   r.Bool(cluster, "insecure-skip-tls-verify", cluster_path));

  ASSIGN_OR_RETURN(std::string user_name, r.String(context, "user", context_path));
  if (!user_name.empty()) {
    ASSIGN_OR_RETURN(YAML::Node user, r.Named(root, "users", user_name, "user", &user_path));
    if (!user) return r.Fail("user \"" + user_name + "\" not found in users");
    const std::string& at = user_path;
    ASSIGN_OR_RETURN(YAML::Node provider, r.Child(user, "auth-provider", at));
    if (provider) {
      ASSIGN_OR_RETURN(std::string name, r.String(provider, "name", at + ".auth-provider"));
      return r.Fail(at + ".auth-provider \"" + name +
                    "\" is not supported (client-go removed the legacy auth providers in "
                    "v1.26): " +
                    AuthProviderAdvice(name));
    }
    for (const char* unsupported : {"username", "password"}) {
      ASSIGN_OR_RETURN(std::string v, r.String(user, unsupported, at));
      if (!v.empty()) {
        return r.Fail(at + "." + unsupported +
                      ": basic authentication is not supported (Kubernetes removed it in "
                      "v1.19); use a token, a client certificate or an exec plugin");
      }
    }
    for (const char* unsupported : {"act-as", "act-as-uid", "act-as-groups", "act-as-user-extra"}) {
      ASSIGN_OR_RETURN(YAML::Node v, r.Child(user, unsupported, at));
      if (v) return r.Fail(at + "." + unsupported + ": impersonation is not supported");
    }
    ASSIGN_OR_RETURN(config.token, r.String(user, "token", at));
    ASSIGN_OR_RETURN(std::string token_file, r.String(user, "tokenFile", at));
    if (!token_file.empty() && config.token.empty()) {
      config.token_file = r.Resolve(token_file);
      auto token = ReadSmallFile(config.token_file, 1 << 20);
      if (!token.ok()) return r.Fail(at + ".tokenFile: " + token.status().message());
      config.token = Trim(*token);
      if (config.token.empty()) return r.Fail(at + ".tokenFile " + config.token_file + " is empty");
    }

    ASSIGN_OR_RETURN(config.client_cert_data, r.Data(user, "client-certificate-data", at));
    ASSIGN_OR_RETURN(config.client_key_data, r.Data(user, "client-key-data", at));
    ASSIGN_OR_RETURN(std::string cert_file, r.String(user, "client-certificate", at));
    ASSIGN_OR_RETURN(std::string key_file, r.String(user, "client-key", at));
    std::string cert_pem = config.client_cert_data, key_pem = config.client_key_data;
    if (!config.client_cert_data.empty()) {
      Status s = CheckPemCertificates(cert_pem, at + ".client-certificate-data");
      if (!s.ok()) return r.Fail(s.message());
    } else if (!cert_file.empty()) {
      config.client_cert_file = r.Resolve(cert_file);
      RETURN_IF_ERROR(
          CheckPemFile(r, config.client_cert_file, at + ".client-certificate", false, &cert_pem));
    }
    if (!config.client_key_data.empty()) {
      Status s = CheckPemPrivateKey(key_pem, at + ".client-key-data");
      if (!s.ok()) return r.Fail(s.message());
    } else if (!key_file.empty()) {
      config.client_key_file = r.Resolve(key_file);
      RETURN_IF_ERROR(CheckPemFile(r, config.client_key_file, at + ".client-key", true, &key_pem));
    }
    if (cert_pem.empty() != key_pem.empty()) {
      return r.Fail("user \"" + user_name + "\" needs both client-certificate and client-key");
    }
    if (!cert_pem.empty()) {
      Status s = CheckKeyMatchesCertificate(cert_pem, key_pem, at);
      if (!s.ok()) return r.Fail(s.message());
    }

    ASSIGN_OR_RETURN(YAML::Node exec, r.Child(user, "exec", at));
    if (exec) {
      if (!exec.IsMap()) return r.Fail(at + ".exec must be a map, got " + KindName(exec));
      ExecConfig e;
      RETURN_IF_ERROR(ParseExec(r, exec, at + ".exec", &e));
      if (e.provide_cluster_info) {
        e.cluster_info = {{"server", config.server}};
        if (config.insecure_skip_tls_verify) e.cluster_info["insecure-skip-tls-verify"] = true;
        if (!ca_pem.empty()) e.cluster_info["certificate-authority-data"] = Base64Encode(ca_pem);
        ASSIGN_OR_RETURN(YAML::Node extensions, r.Child(cluster, "extensions", cluster_path));
        if (extensions && !extensions.IsSequence()) {
          return r.Fail(cluster_path + ".extensions must be a list, got " + KindName(extensions));
        }
        for (std::size_t i = 0; extensions && i < extensions.size(); ++i) {
          const std::string ext_at = cluster_path + ".extensions[" + std::to_string(i) + "]";
          ASSIGN_OR_RETURN(std::string name, r.String(extensions[i], "name", ext_at));
          if (name != "client.authentication.k8s.io/exec") continue;
          ASSIGN_OR_RETURN(YAML::Node ext, r.Child(extensions[i], "extension", ext_at));
          int budget = kMaxExtensionNodes;
          if (ext) {
            ASSIGN_OR_RETURN(e.cluster_info["config"],
                             r.ToJson(ext, ext_at + ".extension", 0, &budget));
          }
        }
      }
      // client-go: a token or client certificate in the same user takes precedence.
      if (config.token.empty() && cert_pem.empty()) config.exec = std::move(e);
    }
  }
  ASSIGN_OR_RETURN(std::string ns, r.String(context, "namespace", context_path));
  if (!ns.empty()) config.ns = ns;
  return config;
}

}  // namespace

StatusOr<KubeConfig> ParseKubeconfig(std::string_view text, const std::string& source,
                                     const std::filesystem::path& base_dir) {
  Reader r(source, base_dir);
  if (text.size() > kMaxKubeconfigBytes) return r.Fail("larger than 16 MiB");
  RETURN_IF_ERROR(CheckYamlDocumentShape(text, "kubeconfig " + source));
  try {
    YAML::Node root = YAML::Load(std::string(text));
    return Parse(r, root);
  } catch (const YAML::DeepRecursion& e) {
    return r.Fail("nested too deeply at line " + std::to_string(e.mark.line + 1));
  } catch (const YAML::Exception& e) {
    return r.Fail(e.what());
  } catch (const std::exception& e) {
    return r.Fail(e.what());
  }
}

StatusOr<KubeConfig> LoadKubeconfig(const std::string& path) {
  auto text = ReadSmallFile(path, kMaxKubeconfigBytes);
  if (!text.ok()) return InvalidArgument("kubeconfig " + path + ": " + text.status().message());
  return ParseKubeconfig(*text, path, std::filesystem::path(path).parent_path());
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
  config.token_file = dir + "/token";
  auto token = ReadSmallFile(config.token_file, 1 << 20);
  if (!token.ok())
    return NotFound("in-cluster config: service account token: " + token.status().message());
  config.token = Trim(*token);
  if (config.token.empty()) return InvalidArgument("in-cluster config: " + dir + "/token is empty");
  config.ca_file = dir + "/ca.crt";
  auto ca = ReadSmallFile(config.ca_file);
  if (!ca.ok()) return NotFound("in-cluster config: " + ca.status().message());
  RETURN_IF_ERROR(CheckPemCertificates(*ca, config.ca_file).WithContext("in-cluster config"));
  if (auto ns = ReadSmallFile(dir + "/namespace", 4096); ns.ok() && !Trim(*ns).empty()) {
    config.ns = Trim(*ns);
  }
  return config;
}

Status ValidateTlsMaterial(const KubeConfig& config) {
  std::string cert = config.client_cert_data, key = config.client_key_data;
  auto file = [](const std::string& path, const char* field, std::string* out) -> Status {
    auto data = ReadSmallFile(path);
    if (!data.ok())
      return Status(data.status().code(), std::string(field) + ": " + data.status().message());
    *out = std::move(*data);
    return Status::Ok();
  };
  if (!config.ca_data.empty()) {
    RETURN_IF_ERROR(CheckPemCertificates(config.ca_data, "certificate-authority-data"));
  }
  if (!config.ca_file.empty()) {
    std::string ca;
    RETURN_IF_ERROR(file(config.ca_file, "certificate-authority", &ca));
    RETURN_IF_ERROR(CheckPemCertificates(ca, "certificate-authority " + config.ca_file));
  }
  if (cert.empty() && !config.client_cert_file.empty()) {
    RETURN_IF_ERROR(file(config.client_cert_file, "client-certificate", &cert));
  }
  if (key.empty() && !config.client_key_file.empty()) {
    RETURN_IF_ERROR(file(config.client_key_file, "client-key", &key));
  }
  if (cert.empty() != key.empty()) {
    return InvalidArgument("a client certificate needs a client key and a key needs a certificate");
  }
  if (!cert.empty()) {
    RETURN_IF_ERROR(CheckPemCertificates(cert, "client-certificate"));
    RETURN_IF_ERROR(CheckPemPrivateKey(key, "client-key"));
    RETURN_IF_ERROR(CheckKeyMatchesCertificate(cert, key, "client-certificate/client-key"));
  }
  return Status::Ok();
}

}  // namespace ringtrain::kube
