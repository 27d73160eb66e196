#include "controller/kube/kube_config.h"

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/base64.h"
#include "common/json_fields.h"
#include "common/yaml_to_json.h"
#include "controller/kube/tls_material.h"

namespace ringtrain::kube {
namespace {

using Json = nlohmann::json;

constexpr std::size_t kMaxKubeconfigBytes = 16 << 20;
// A kubeconfig is mostly base64 of certificates: far fewer nodes per byte than a manifest.
constexpr std::size_t kMaxKubeconfigNodes = 1'000'000;

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  std::size_t start = s.find_first_not_of(" \n\r");
  return start == std::string::npos ? "" : s.substr(start);
}

std::string At(const std::string& list, std::size_t i) {
  return list + "[" + std::to_string(i) + "]";
}

// Reads of one kubeconfig, already JSON (common/yaml_to_json.h): the field reads of
// common/json_fields.h, whose errors name the field's full path, with the file in front.
// Kubeconfigs carry fields for other clients (preferences, extensions): unknown ones are fine.
class Reader {
 public:
  Reader(std::string source, std::filesystem::path base)
      : source_(std::move(source)), base_(std::move(base)) {}

  Status Fail(const std::string& what) const {
    return InvalidArgument("kubeconfig " + source_ + ": " + what);
  }
  Status Check(const Status& s) const { return s.ok() ? s : Fail(s.message()); }

  // `key` of the object `obj` at `path`: "" (false, {}, nullptr) when absent or null.
  StatusOr<std::string> String(const Json& obj, const std::string& path, const char* key) const {
    std::string out;
    RETURN_IF_ERROR(Check(Fields(obj, path).String(key, &out)));
    return out;
  }
  StatusOr<bool> Bool(const Json& obj, const std::string& path, const char* key) const {
    bool out = false;
    RETURN_IF_ERROR(Check(Fields(obj, path).Bool(key, &out)));
    return out;
  }
  StatusOr<std::vector<std::string>> Strings(const Json& obj, const std::string& path,
                                             const char* key) const {
    std::vector<std::string> out;
    RETURN_IF_ERROR(Check(Fields(obj, path).Strings(key, &out)));
    return out;
  }
  StatusOr<const Json*> Object(const Json& obj, const std::string& path, const char* key) const {
    auto out = Fields(obj, path).Object(key);
    if (!out.ok()) return Check(out.status());
    return *out;
  }
  StatusOr<const Json*> List(const Json& obj, const std::string& path, const char* key) const {
    Fields f(obj, path);
    const Json* v = f.Find(key);
    if (v != nullptr && !v->is_array()) {
      return Fail(f.Path(key) + ": must be a list, got " + JsonTypeName(*v));
    }
    return v;
  }

  // The `field` (cluster, user, context) of the entry of `list_key` named `name`: the last such
  // entry, as client-go's conversion into a map by name keeps the last.
  StatusOr<const Json*> Named(const Json& root, const char* list_key, const std::string& name,
                              const char* field, std::string* path) const {
    ASSIGN_OR_RETURN(const Json* list, List(root, "", list_key));
    const Json* found = nullptr;
    for (std::size_t i = 0; list != nullptr && i < list->size(); ++i) {
      const std::string at = At(list_key, i);
      const Json& entry = (*list)[i];
      if (!entry.is_object()) {
        return Fail(at + ": must be an object with name and " + field + ", got " +
                    JsonTypeName(entry));
      }
      ASSIGN_OR_RETURN(std::string entry_name, String(entry, at, "name"));
      if (entry_name != name) continue;
      ASSIGN_OR_RETURN(const Json* value, Object(entry, at, field));
      *path = FieldPath(at, field);
      if (value == nullptr) return Fail(*path + " (\"" + name + "\") is missing");
      found = value;
    }
    return found;
  }

  std::string Resolve(const std::string& file) const {
    if (file.empty()) return "";
    std::filesystem::path p(file);
    return p.is_absolute() ? file : (base_ / p).lexically_normal().string();
  }

  // A `*-data` field: base64 of PEM.
  StatusOr<std::string> Data(const Json& obj, const std::string& path, const char* key) const {
    ASSIGN_OR_RETURN(std::string text, String(obj, path, key));
    if (text.empty()) return std::string();
    auto decoded = Base64Decode(text);
    if (!decoded) return Fail(FieldPath(path, key) + ": invalid base64");
    return *decoded;
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

Status ParseExec(const Reader& r, const Json& exec, const std::string& field, ExecConfig* out) {
  ASSIGN_OR_RETURN(out->command, r.String(exec, field, "command"));
  if (out->command.empty()) return r.Fail(field + ".command is missing");
  // Like clientcmd: only a command with a path separator is relative to the kubeconfig.
  if (out->command.find('/') != std::string::npos) out->command = r.Resolve(out->command);
  ASSIGN_OR_RETURN(out->args, r.Strings(exec, field, "args"));
  ASSIGN_OR_RETURN(const Json* env, r.List(exec, field, "env"));
  for (std::size_t i = 0; env != nullptr && i < env->size(); ++i) {
    const std::string at = At(field + ".env", i);
    const Json& entry = (*env)[i];
    if (!entry.is_object()) {
      return r.Fail(at + ": must be an object with name and value, got " + JsonTypeName(entry));
    }
    ASSIGN_OR_RETURN(std::string name, r.String(entry, at, "name"));
    ASSIGN_OR_RETURN(std::string value, r.String(entry, at, "value"));
    if (name.empty()) return r.Fail(at + ".name is missing");
    if (name.find('=') != std::string::npos || name.find('\0') != std::string::npos) {
      return r.Fail(at + ".name \"" + name.substr(0, 64) + "\" is not a variable name");
    }
    out->env.emplace_back(std::move(name), std::move(value));
  }
  ASSIGN_OR_RETURN(out->api_version, r.String(exec, field, "apiVersion"));
  if (out->api_version.empty()) return r.Fail(field + ".apiVersion is missing");
  if (out->api_version != kExecApiV1 && out->api_version != kExecApiV1beta1) {
    return r.Fail(field + ".apiVersion \"" + out->api_version.substr(0, 100) +
                  "\" is not supported; use " + kExecApiV1 + " or " + kExecApiV1beta1);
  }
  ASSIGN_OR_RETURN(out->install_hint, r.String(exec, field, "installHint"));
  ASSIGN_OR_RETURN(out->interactive_mode, r.String(exec, field, "interactiveMode"));
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
  ASSIGN_OR_RETURN(out->provide_cluster_info, r.Bool(exec, field, "provideClusterInfo"));
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

StatusOr<KubeConfig> Parse(const Reader& r, const Json& root) {
  if (!root.is_object()) return r.Fail("not a YAML map (got " + JsonTypeName(root) + ")");
  ASSIGN_OR_RETURN(std::string current, r.String(root, "", "current-context"));
  if (current.empty()) return r.Fail("current-context is not set");
  std::string context_path, cluster_path, user_path;
  ASSIGN_OR_RETURN(const Json* context,
                   r.Named(root, "contexts", current, "context", &context_path));
  if (context == nullptr) {
    return r.Fail("context \"" + current + "\" (current-context) not found in contexts");
  }
  ASSIGN_OR_RETURN(std::string cluster_name, r.String(*context, context_path, "cluster"));
  if (cluster_name.empty()) return r.Fail("context \"" + current + "\" has no cluster");
  ASSIGN_OR_RETURN(const Json* cluster_ptr,
                   r.Named(root, "clusters", cluster_name, "cluster", &cluster_path));
  if (cluster_ptr == nullptr) {
    return r.Fail("cluster \"" + cluster_name + "\" not found in clusters");
  }
  const Json& cluster = *cluster_ptr;

  KubeConfig config;
  ASSIGN_OR_RETURN(config.server, r.String(cluster, cluster_path, "server"));
  if (config.server.empty()) return r.Fail("cluster \"" + cluster_name + "\" has no server");
  for (const char* unsupported : {"proxy-url", "tls-server-name"}) {
    ASSIGN_OR_RETURN(std::string v, r.String(cluster, cluster_path, unsupported));
    if (!v.empty()) {
      return r.Fail(cluster_path + "." + unsupported + " is not supported by ringtrain");
    }
  }
  std::string ca_pem;
  ASSIGN_OR_RETURN(config.ca_data, r.Data(cluster, cluster_path, "certificate-authority-data"));
  ASSIGN_OR_RETURN(std::string ca_file, r.String(cluster, cluster_path, "certificate-authority"));
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
                   r.Bool(cluster, cluster_path, "insecure-skip-tls-verify"));

  ASSIGN_OR_RETURN(std::string user_name, r.String(*context, context_path, "user"));
  if (!user_name.empty()) {
    ASSIGN_OR_RETURN(const Json* user_ptr, r.Named(root, "users", user_name, "user", &user_path));
    if (user_ptr == nullptr) return r.Fail("user \"" + user_name + "\" not found in users");
    const Json& user = *user_ptr;
    const std::string& at = user_path;
    ASSIGN_OR_RETURN(const Json* provider, r.Object(user, at, "auth-provider"));
    if (provider != nullptr) {
      ASSIGN_OR_RETURN(std::string name, r.String(*provider, at + ".auth-provider", "name"));
      return r.Fail(at + ".auth-provider \"" + name +
                    "\" is not supported (client-go removed the legacy auth providers in "
                    "v1.26): " +
                    AuthProviderAdvice(name));
    }
    for (const char* unsupported : {"username", "password"}) {
      ASSIGN_OR_RETURN(std::string v, r.String(user, at, unsupported));
      if (!v.empty()) {
        return r.Fail(at + "." + unsupported +
                      ": basic authentication is not supported (Kubernetes removed it in "
                      "v1.19); use a token, a client certificate or an exec plugin");
      }
    }
    // client-go's names for them (clientcmd/api/v1 AuthInfo: Impersonate*, kubectl's --as).
    for (const char* unsupported : {"as", "as-uid", "as-groups", "as-user-extra"}) {
      if (Fields(user, at).Find(unsupported) != nullptr) {
        return r.Fail(at + "." + unsupported + ": impersonation is not supported");
      }
    }
    ASSIGN_OR_RETURN(config.token, r.String(user, at, "token"));
    ASSIGN_OR_RETURN(std::string token_file, r.String(user, at, "tokenFile"));
    if (!token_file.empty() && config.token.empty()) {
      config.token_file = r.Resolve(token_file);
      auto token = ReadSmallFile(config.token_file, 1 << 20);
      if (!token.ok()) return r.Fail(at + ".tokenFile: " + token.status().message());
      config.token = Trim(*token);
      if (config.token.empty()) return r.Fail(at + ".tokenFile " + config.token_file + " is empty");
    }

    ASSIGN_OR_RETURN(config.client_cert_data, r.Data(user, at, "client-certificate-data"));
    ASSIGN_OR_RETURN(config.client_key_data, r.Data(user, at, "client-key-data"));
    ASSIGN_OR_RETURN(std::string cert_file, r.String(user, at, "client-certificate"));
    ASSIGN_OR_RETURN(std::string key_file, r.String(user, at, "client-key"));
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

    ASSIGN_OR_RETURN(const Json* exec, r.Object(user, at, "exec"));
    if (exec != nullptr) {
      ExecConfig e;
      RETURN_IF_ERROR(ParseExec(r, *exec, at + ".exec", &e));
      if (e.provide_cluster_info) {
        e.cluster_info = {{"server", config.server}};
        if (config.insecure_skip_tls_verify) e.cluster_info["insecure-skip-tls-verify"] = true;
        if (!ca_pem.empty()) e.cluster_info["certificate-authority-data"] = Base64Encode(ca_pem);
        ASSIGN_OR_RETURN(const Json* extensions, r.List(cluster, cluster_path, "extensions"));
        for (std::size_t i = 0; extensions != nullptr && i < extensions->size(); ++i) {
          const std::string ext_at = At(cluster_path + ".extensions", i);
          const Json& ext = (*extensions)[i];
          if (!ext.is_object()) {
            return r.Fail(ext_at + ": must be an object with name and extension, got " +
                          JsonTypeName(ext));
          }
          ASSIGN_OR_RETURN(std::string name, r.String(ext, ext_at, "name"));
          if (name != "client.authentication.k8s.io/exec") continue;
          if (const Json* config_json = Fields(ext, ext_at).Find("extension")) {
            e.cluster_info["config"] = *config_json;
          }
        }
      }
      // client-go: a token or client certificate in the same user takes precedence.
      if (config.token.empty() && cert_pem.empty()) config.exec = std::move(e);
    }
  }
  ASSIGN_OR_RETURN(std::string ns, r.String(*context, context_path, "namespace"));
  if (!ns.empty()) config.ns = ns;
  return config;
}

}  // namespace

StatusOr<KubeConfig> ParseKubeconfig(std::string_view text, const std::string& source,
                                     const std::filesystem::path& base_dir) {
  Reader r(source, base_dir);
  auto root = YamlToJson(std::string(text), "kubeconfig " + source, "kubeconfig",
                         {.max_bytes = kMaxKubeconfigBytes, .max_nodes = kMaxKubeconfigNodes});
  if (!root.ok()) return root.status();
  return Parse(r, *root);
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
