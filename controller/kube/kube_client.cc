// KubeClient over cpprestsdk's http_client (asio, HTTP/1.1, http and https). Every cpprestsdk
// call is wrapped: its exceptions stop here and become Status values.
#include <cpprest/http_client.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <future>
#include <mutex>
#include <system_error>
#include <thread>

#include "common/backoff.h"
#include "common/json_fields.h"
#include "common/stop.h"
#include "controller/kube/kube_config.h"
#include "controller/kube/tls_material.h"
#include "controller/kube/token_bucket.h"

namespace ringtrain::kube {
namespace {

namespace http = web::http;
namespace client = web::http::client;

// Slack on top of a watch's timeoutSeconds before the client gives up on a silent stream.
constexpr Duration kWatchIdleSlack{30'000};
constexpr std::size_t kWatchReadBytes = 64 * 1024;

// How often a wait for the API server looks at the client's stop flag.
constexpr Duration kStopPollInterval{50};

// Waits for a cpprestsdk task for at most `timeout`; on timeout, cancels through `cts`. Once
// `stopped()` holds (asked every kStopPollInterval) it cancels too and returns kCancelled, so a
// shutdown never waits out a request to an API server that does not answer.
template <typename T, typename Stopped>
StatusOr<T> Await(pplx::task<T> task, Duration timeout, pplx::cancellation_token_source* cts,
                  const Stopped& stopped, const std::string& what) {
  auto promise = std::make_shared<std::promise<T>>();
  auto future = promise->get_future();
  task.then([promise](pplx::task<T> t) {
    try {
      promise->set_value(t.get());
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  const SteadyTime deadline = DeadlineAfter(timeout);
  for (;;) {
    const Duration left(MillisLeft(deadline));
    if (future.wait_for(std::min(left, kStopPollInterval)) == std::future_status::ready) break;
    if (stopped()) {
      if (cts != nullptr) cts->cancel();
      return Cancelled(what + ": the client is stopping");
    }
    if (left <= kStopPollInterval) {
      if (cts != nullptr) cts->cancel();
      return DeadlineExceeded(what + ": no answer within " + std::to_string(timeout.count()) +
                              " ms");
    }
  }
  try {
    return future.get();
  } catch (const http::http_exception& e) {
    if (e.error_code() == std::errc::timed_out) return DeadlineExceeded(what + ": " + e.what());
    return Unavailable(what + ": " + e.what());
  } catch (const pplx::task_canceled&) {
    return Cancelled(what + ": cancelled");
  } catch (const std::exception& e) {
    return Unavailable(what + ": " + e.what());
  }
}

StatusCode CodeForHttp(int http_code, const std::string& reason) {
  switch (http_code) {
    case 400:
      return StatusCode::kInvalidArgument;
    case 401:
      return StatusCode::kUnauthenticated;
    case 403:
      return StatusCode::kPermissionDenied;
    case 404:
      return StatusCode::kNotFound;
    case 409:
      return reason == "AlreadyExists" ? StatusCode::kAlreadyExists : StatusCode::kAborted;
    case 410:
      return StatusCode::kGone;
    case 422:
      return StatusCode::kInvalidArgument;
    case 429:
      return StatusCode::kResourceExhausted;
    case 504:
      return StatusCode::kDeadlineExceeded;
    default:
      return http_code >= 500 ? StatusCode::kUnavailable : StatusCode::kInternal;
  }
}

// A Status from an API error: the code from the HTTP code (and the reason, for 409), the
// server's message, and every cause of a 422 that the message does not already spell out.
Status StatusFromApi(int http_code, const Json& status_body, const std::string& raw) {
  std::string message;
  std::string reason;
  if (status_body.is_object() && StringField(status_body, "kind") == "Status") {
    message = StringField(status_body, "message");
    reason = StringField(status_body, "reason");
    const Json* details = status_body.contains("details") ? &status_body["details"] : nullptr;
    if (details != nullptr && details->is_object() && details->contains("causes") &&
        (*details)["causes"].is_array()) {
      std::string extra;
      for (const auto& cause : (*details)["causes"]) {
        if (!cause.is_object()) continue;
        std::string text = StringField(cause, "field");
        std::string cause_message = StringField(cause, "message");
        if (!text.empty() && !cause_message.empty()) text += ": ";
        text += cause_message;
        if (text.empty() || message.find(text) != std::string::npos) continue;
        extra += extra.empty() ? "" : "; ";
        extra += text;
      }
      if (!extra.empty()) message += (message.empty() ? "" : " (causes: ") + extra + ")";
    }
  } else {
    message = raw;
    while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) {
      message.pop_back();
    }
  }
  if (message.empty()) message = "HTTP " + std::to_string(http_code);
  return Status(CodeForHttp(http_code, reason), message);
}

// Transport errors that prove the server never got the whole request (so never acted on it):
// safe to retry even for writes. A pooled keep-alive connection that the server closed (it
// restarted) fails this way. cpprestsdk reports them only through its messages.
bool NeverReachedServer(const Status& s) {
  if (s.code() != StatusCode::kUnavailable) return false;
  const std::string& m = s.message();
  return m.find("Failed to connect") != std::string::npos ||
         m.find("Failed to write request") != std::string::npos;
}

std::string PercentEncode(const std::string& s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

// One watch: a reader thread turns the chunked body into events; Next() takes them off a queue.
class RestWatchStream final : public WatchStream {
 public:
  RestWatchStream(std::unique_ptr<client::http_client> http, http::http_response response,
                  std::shared_ptr<pplx::cancellation_token_source> cts)
      : http_(std::move(http)), response_(std::move(response)), cts_(std::move(cts)) {
    reader_ = std::thread([this] { Read(); });
  }

  ~RestWatchStream() override {
    Close();
    if (reader_.joinable()) reader_.join();
  }

  StatusOr<std::optional<WatchEvent>> Next(Duration timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto ready_now = [&] { return !events_.empty() || ended_ || closed_; };
    if (!ready_now()) blocked_nexts_.Bump();
    bool ready = cv_.wait_for(lock, timeout, ready_now);
    if (!events_.empty()) {
      WatchEvent e = std::move(events_.front());
      events_.pop_front();
      return std::optional<WatchEvent>(std::move(e));
    }
    if (closed_) return std::optional<WatchEvent>();
    if (!ready)
      return DeadlineExceeded("watch: no event within " + std::to_string(timeout.count()) + " ms");
    if (!end_status_.ok()) return end_status_;
    return std::optional<WatchEvent>();
  }

  const EventCounter& BlockedNextsForTest() const override { return blocked_nexts_; }

  void Close() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
    }
    cts_->cancel();
    cv_.notify_all();
  }

 private:
  void Read() {
    Status end;
    try {
      auto buf = response_.body().streambuf();
      std::vector<std::uint8_t> chunk(kWatchReadBytes);
      std::string line_buffer;
      for (;;) {
        // getn waits for all it asks for unless the stream ends, so ask for 1 byte, then the rest.
        std::size_t n = buf.getn(chunk.data(), 1).get();
        if (n == 0) {
          if (buf.exception() != nullptr) std::rethrow_exception(buf.exception());
          break;
        }
        std::size_t avail = buf.in_avail();
        if (avail > 0) {
          n += buf.getn(chunk.data() + 1, std::min(avail, chunk.size() - 1)).get();
        }
        line_buffer.append(reinterpret_cast<const char*>(chunk.data()), n);
        std::size_t start = 0;
        for (std::size_t nl; (nl = line_buffer.find('\n', start)) != std::string::npos;
             start = nl + 1) {
          std::string_view line(line_buffer.data() + start, nl - start);
          if (line.empty() || line == "\r") continue;
          Json j = Json::parse(line, nullptr, false);
          if (j.is_discarded() || !j.is_object() || !j.contains("type")) {
            throw std::runtime_error("watch: malformed event line: " +
                                     std::string(line.substr(0, 200)));
          }
          WatchEvent event{j["type"].get<std::string>(), std::move(j["object"])};
          {
            std::lock_guard<std::mutex> lock(mu_);
            events_.push_back(std::move(event));
          }
          cv_.notify_all();
        }
        line_buffer.erase(0, start);
        if (Closed()) break;
      }
    } catch (const std::exception& e) {
      end = Unavailable(std::string("watch stream broken: ") + e.what());
    } catch (...) {
      end = Unavailable("watch stream broken");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ended_ = true;
      end_status_ = end;
    }
    cv_.notify_all();
  }

  bool Closed() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }

  std::unique_ptr<client::http_client> http_;
  http::http_response response_;
  std::shared_ptr<pplx::cancellation_token_source> cts_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<WatchEvent> events_;
  bool ended_ = false;
  bool closed_ = false;
  EventCounter blocked_nexts_;
  Status end_status_;
  std::thread reader_;
};

// The credential one request is sent with: a bearer token (static, from a file, or from an exec
// plugin) and, from a plugin, possibly a client certificate.
struct Auth {
  std::string token;
  std::shared_ptr<const ExecCredential> exec;  // set when an exec plugin made it
};

class RestKubeClient final : public KubeClient {
 public:
  RestKubeClient(KubeConfig config, ClientOptions options)
      : config_(std::move(config)),
        options_(std::move(options)),
        clock_(options_.clock != nullptr ? options_.clock : &real_clock_),
        limiter_(options_.qps, options_.burst, clock_),
        file_token_(config_.token),
        file_token_read_(clock_->SteadyNow()) {
    if (config_.exec && config_.token.empty() && config_.client_cert_file.empty() &&
        config_.client_cert_data.empty()) {
      exec_ = std::make_unique<ExecAuthenticator>(
          *config_.exec, clock_,
          options_.exec_stop != nullptr ? options_.exec_stop : options_.stop);
    }
  }

  Status Init() {
    try {
      http_ = std::make_shared<client::http_client>(web::uri(config_.server),
                                                    HttpConfig(options_.request_timeout, nullptr));
    } catch (const std::exception& e) {
      return InvalidArgument("kube client for \"" + config_.server + "\": " + e.what());
    }
    return Status::Ok();
  }

  StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& name) override {
    return Do(http::methods::GET, ObjectPath(r, ns, name), nullptr, "", false);
  }

  StatusOr<Json> List(const Resource& r, const std::string& ns,
                      const ListOptions& options) override {
    std::string query;
    AddQuery(&query, "labelSelector", options.label_selector);
    AddQuery(&query, "fieldSelector", options.field_selector);
    AddQuery(&query, "resourceVersion", options.resource_version);
    if (options.limit > 0) AddQuery(&query, "limit", std::to_string(options.limit));
    return Do(http::methods::GET, CollectionPath(r, ns) + query, nullptr, "", false);
  }

  StatusOr<Json> Create(const Resource& r, const std::string& ns, const Json& object) override {
    return Do(http::methods::POST, CollectionPath(r, NamespaceFor(r, ns, object)), &object,
              "application/json", true);
  }

  StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& object) override {
    return Do(http::methods::PUT, ObjectPath(r, NamespaceFor(r, ns, object), NameOf(object)),
              &object, "application/json", true);
  }

  StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns,
                              const Json& object) override {
    return Do(http::methods::PUT,
              ObjectPath(r, NamespaceFor(r, ns, object), NameOf(object)) + "/status", &object,
              "application/json", true);
  }

  StatusOr<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                       const Json& patch, PatchType type, bool status) override {
    const char* content_type = type == PatchType::kMerge ? "application/merge-patch+json"
                               : type == PatchType::kStrategicMerge
                                   ? "application/strategic-merge-patch+json"
                                   : "application/json-patch+json";
    return Do(http::methods::PATCH, ObjectPath(r, ns, name) + (status ? "/status" : ""), &patch,
              content_type, true);
  }

  Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                const DeleteOptions& options) override {
    Json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
    if (!options.propagation_policy.empty()) body["propagationPolicy"] = options.propagation_policy;
    if (!options.precondition_uid.empty())
      body["preconditions"] = {{"uid", options.precondition_uid}};
    if (options.grace_period_seconds) body["gracePeriodSeconds"] = *options.grace_period_seconds;
    return Do(http::methods::DEL, ObjectPath(r, ns, name), &body, "application/json", true)
        .status();
  }

  StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource& r, const std::string& ns,
                                               const WatchOptions& options) override {
    std::string query = "?watch=1";
    AddQuery(&query, "labelSelector", options.label_selector);
    AddQuery(&query, "resourceVersion", options.resource_version);
    if (options.allow_bookmarks) AddQuery(&query, "allowWatchBookmarks", "true");
    if (options.timeout_seconds > 0) {
      AddQuery(&query, "timeoutSeconds", std::to_string(options.timeout_seconds));
    }
    const std::string path = CollectionPath(r, ns) + query;
    const std::string what = "GET " + path;
    auto stopped = [this] { return Stopped(); };
    Duration idle = options.timeout_seconds > 0
                        ? Duration(options.timeout_seconds * 1000LL) + kWatchIdleSlack
                        : Duration(3'600'000);
    for (bool refreshed = false;; refreshed = true) {
      if (Stopped()) return Cancelled(what + ": the client is stopping");
      auto auth = CurrentAuth();
      if (!auth.ok()) return auth.status().WithContext(what);
      std::unique_ptr<client::http_client> http;
      try {
        http = std::make_unique<client::http_client>(web::uri(config_.server),
                                                     HttpConfig(idle, auth->exec.get()));
      } catch (const std::exception& e) {
        return InvalidArgument(what + ": " + e.what());
      }
      auto cts = std::make_shared<pplx::cancellation_token_source>();
      pplx::task<http::http_response> task;
      try {
        task = http->request(Request(http::methods::GET, path, nullptr, "", auth->token),
                             cts->get_token());
      } catch (const std::exception& e) {
        return Unavailable(what + ": " + e.what());
      }
      auto response = Await(task, options_.request_timeout, cts.get(), stopped, what);
      if (!response.ok()) return response.status();
      if (response->status_code() != http::status_codes::OK) {
        auto body = Await(response->extract_utf8string(true), options_.request_timeout, cts.get(),
                          stopped, what);
        std::string raw = body.ok() ? *body : "";
        Status error =
            StatusFromApi(response->status_code(), Json::parse(raw, nullptr, false), raw);
        if (error.code() == StatusCode::kUnauthenticated && !refreshed) {
          auto again = RefreshAfterUnauthorized(*auth, error, what);
          if (!again.ok()) return again.status();
          if (*again) continue;
        }
        return error;
      }
      return std::unique_ptr<WatchStream>(
          std::make_unique<RestWatchStream>(std::move(http), std::move(*response), std::move(cts)));
    }
  }

 private:
  // The current credential, running the exec plugin or re-reading the token file when due.
  StatusOr<Auth> CurrentAuth() {
    if (exec_) {
      ASSIGN_OR_RETURN(auto cred, exec_->Get());
      return Auth{cred->token, cred};
    }
    if (config_.token_file.empty()) return Auth{config_.token, nullptr};
    std::lock_guard<std::mutex> lock(token_mu_);
    if (clock_->SteadyNow() - file_token_read_ >= kTokenFileRefresh) {
      ReadTokenFileLocked();
    }
    return Auth{file_token_, nullptr};
  }

  // Keeps the last good token when the file is briefly missing or empty (the kubelet replaces it
  // with a rename, but a reader may still race a non-atomic writer).
  void ReadTokenFileLocked() {
    file_token_read_ = clock_->SteadyNow();
    auto text = ReadSmallFile(config_.token_file, 1 << 20);
    std::string token = text.ok() ? *text : "";
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) {
      token.pop_back();
    }
    if (token.empty()) {
      spdlog::warn("kube: cannot re-read the token file {}: {}; keeping the previous token",
                   config_.token_file, text.ok() ? "it is empty" : text.status().message());
      return;
    }
    file_token_ = token;
  }

  // After a 401 sent with `used`: a fresh credential, as client-go fetches one. True when the
  // request is worth sending again (the credential can have changed).
  StatusOr<bool> RefreshAfterUnauthorized(const Auth& used, const Status& unauthorized,
                                          const std::string& what) {
    if (exec_) {
      Status s = exec_->RefreshAfterUnauthorized(used.exec);
      if (!s.ok()) {
        return Status(s.code(), what + ": " + unauthorized.message() +
                                    "; refreshing the exec credential: " + s.message());
      }
      return true;
    }
    if (config_.token_file.empty()) return false;
    std::lock_guard<std::mutex> lock(token_mu_);
    if (file_token_ == used.token) ReadTokenFileLocked();
    return file_token_ != used.token;
  }

  // The pooled client for a credential: rebuilt when an exec plugin rotated the client
  // certificate, so no connection keeps the old one (client-go closes them likewise).
  std::shared_ptr<client::http_client> ClientFor(const Auth& auth) {
    std::lock_guard<std::mutex> lock(http_mu_);
    bool has_cert = auth.exec && !auth.exec->client_cert_pem.empty();
    if (has_cert && auth.exec != http_cred_) {
      try {
        http_ = std::make_shared<client::http_client>(
            web::uri(config_.server), HttpConfig(options_.request_timeout, auth.exec.get()));
        http_cred_ = auth.exec;
      } catch (const std::exception& e) {
        spdlog::warn("kube: new client for a rotated certificate: {}", e.what());
      }
    }
    return http_;
  }

  // The client's stop flag is set, or the process was asked to stop (SleepOrStop's flag).
  bool Stopped() const {
    return (options_.stop != nullptr && options_.stop->load()) || StopRequested();
  }

  // Sleeps `d`, waking early when the client is told to stop.
  bool SleepUnlessStopped(Duration d) {
    const SteadyTime until = DeadlineAfter(d);
    while (MillisLeft(until) > 0) {
      if (Stopped()) return false;
      std::this_thread::sleep_for(
          std::min<Duration>(Duration(MillisLeft(until)), kStopPollInterval));
    }
    return !Stopped();
  }

  client::http_client_config HttpConfig(Duration timeout, const ExecCredential* cred) const {
    client::http_client_config c;
    c.set_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
    c.set_validate_certificates(!config_.insecure_skip_tls_verify);
    KubeConfig tls = config_;
    tls.exec.reset();
    if (cred != nullptr && !cred->client_cert_pem.empty()) {
      tls.client_cert_data = cred->client_cert_pem;
      tls.client_key_data = cred->client_key_pem;
    }
    c.set_ssl_context_callback([tls](boost::asio::ssl::context& ctx) {
      // Throws boost::system::system_error on bad PEM; cpprestsdk turns it into a failed request.
      if (!tls.ca_file.empty()) ctx.load_verify_file(tls.ca_file);
      if (!tls.ca_data.empty()) ctx.add_certificate_authority(boost::asio::buffer(tls.ca_data));
      if (!tls.client_cert_file.empty()) ctx.use_certificate_chain_file(tls.client_cert_file);
      if (!tls.client_cert_data.empty())
        ctx.use_certificate_chain(boost::asio::buffer(tls.client_cert_data));
      if (!tls.client_key_file.empty()) {
        ctx.use_private_key_file(tls.client_key_file, boost::asio::ssl::context::pem);
      }
      if (!tls.client_key_data.empty()) {
        ctx.use_private_key(boost::asio::buffer(tls.client_key_data),
                            boost::asio::ssl::context::pem);
      }
    });
    return c;
  }

  http::http_request Request(const http::method& method, const std::string& path, const Json* body,
                             const std::string& content_type, const std::string& token) const {
    http::http_request req(method);
    req.set_request_uri(path);
    req.headers().add("Accept", "application/json");
    req.headers().add("User-Agent", options_.user_agent);
    if (!token.empty()) req.headers().add("Authorization", "Bearer " + token);
    if (body != nullptr) req.set_body(body->dump(), content_type);
    return req;
  }

  // One API call with its retries: reads retry 429, 5xx and transport errors; writes only 429,
  // since a write that reached the server may have been applied.
  StatusOr<Json> Do(const http::method& method, const std::string& path, const Json* body,
                    const std::string& content_type, bool write) {
    const std::string what = method + " " + path;
    auto stopped = [this] { return Stopped(); };
    Backoff backoff(BackoffOptions{Duration(200), Duration(5'000), 2.0});
    bool refreshed = false;
    for (int attempt = 0;; ++attempt) {
      // Nothing new is sent once stopping: a write half sent and then abandoned helps no one.
      if (Stopped()) return Cancelled(what + ": the client is stopping");
      if (write) {
        auto wait = limiter_.Reserve(options_.max_throttle_wait);
        if (!wait.ok()) return wait.status().WithContext(what);
        if (wait->count() > 0 && !SleepUnlessStopped(*wait)) return StoppedStatus(what);
      }
      std::optional<Duration> retry_after;
      Status error;
      auto auth = CurrentAuth();
      if (!auth.ok()) return auth.status().WithContext(what);
      auto http_client = ClientFor(*auth);
      auto cts = std::make_shared<pplx::cancellation_token_source>();
      pplx::task<http::http_response> task;
      try {
        task = http_client->request(Request(method, path, body, content_type, auth->token),
                                    cts->get_token());
      } catch (const std::exception& e) {
        return Unavailable(what + ": " + e.what());
      }
      auto response = Await(task, options_.request_timeout, cts.get(), stopped, what);
      if (!response.ok()) {
        error = response.status();
      } else {
        auto text = Await(response->extract_utf8string(true), options_.request_timeout, cts.get(),
                          stopped, what);
        if (!text.ok()) {
          error = text.status();
        } else {
          int code = response->status_code();
          if (code >= 200 && code < 300) {
            if (text->empty()) return Json::object();
            Json j = Json::parse(*text, nullptr, false);
            if (j.is_discarded()) return DataLoss(what + ": response is not JSON");
            return j;
          }
          error = StatusFromApi(code, Json::parse(*text, nullptr, false), *text);
          // 401 means authentication failed before anything was done, so even a write may be
          // sent again, once, with a fresh credential; it does not count as a retry.
          if (error.code() == StatusCode::kUnauthenticated && !refreshed) {
            refreshed = true;
            ASSIGN_OR_RETURN(bool again, RefreshAfterUnauthorized(*auth, error, what));
            if (again) {
              --attempt;
              continue;
            }
          }
          if (response->headers().has("Retry-After")) {
            long seconds = std::strtol(response->headers()["Retry-After"].c_str(), nullptr, 10);
            if (seconds >= 0)
              retry_after = std::min<Duration>(Duration(seconds * 1000), options_.max_retry_after);
          }
        }
      }
      bool retryable = error.code() == StatusCode::kResourceExhausted ||
                       (!write && (error.code() == StatusCode::kUnavailable ||
                                   error.code() == StatusCode::kDeadlineExceeded)) ||
                       NeverReachedServer(error);
      if (!retryable || attempt >= options_.max_retries) return error;
      Duration wait = retry_after.value_or(backoff.Next());
      spdlog::debug("kube: {} failed ({}), retry {} in {} ms", what, error.ToString(), attempt + 1,
                    wait.count());
      if (!SleepUnlessStopped(wait)) return Cancelled(what + ": stopped: " + error.message());
    }
  }

  static void AddQuery(std::string* query, const char* key, const std::string& value) {
    if (value.empty()) return;
    *query += query->empty() ? "?" : "&";
    *query += key;
    *query += "=";
    *query += PercentEncode(value);
  }

  static std::string NameOf(const Json& object) {
    if (!object.contains("metadata") || !object["metadata"].is_object()) return "";
    return StringField(object["metadata"], "name");
  }

  std::string NamespaceFor(const Resource& r, const std::string& ns, const Json& object) const {
    if (!r.namespaced || !ns.empty()) return ns;
    if (object.contains("metadata") && object["metadata"].is_object()) {
      std::string from_object = StringField(object["metadata"], "namespace");
      if (!from_object.empty()) return from_object;
    }
    return config_.ns;
  }

  static std::string CollectionPath(const Resource& r, const std::string& ns) {
    std::string p = r.group.empty() ? "/api/" + r.version : "/apis/" + r.group + "/" + r.version;
    if (r.namespaced && !ns.empty()) p += "/namespaces/" + ns;
    return p + "/" + r.plural;
  }

  std::string ObjectPath(const Resource& r, const std::string& ns, const std::string& name) const {
    std::string effective = r.namespaced && ns.empty() ? config_.ns : ns;
    return CollectionPath(r, effective) + "/" + PercentEncode(name);
  }

  KubeConfig config_;
  ClientOptions options_;
  RealClock real_clock_;
  const Clock* clock_;
  TokenBucket limiter_;
  std::unique_ptr<ExecAuthenticator> exec_;
  std::mutex token_mu_;
  std::string file_token_;
  SteadyTime file_token_read_;
  std::mutex http_mu_;
  std::shared_ptr<client::http_client> http_;
  std::shared_ptr<const ExecCredential> http_cred_;  // whose certificate http_ presents
};

}  // namespace

StatusOr<std::unique_ptr<KubeClient>> NewKubeClient(const KubeConfig& config,
                                                    const ClientOptions& options) {
  if (config.server.rfind("http://", 0) != 0 && config.server.rfind("https://", 0) != 0) {
    return InvalidArgument("kube client: server \"" + config.server +
                           "\" must start with http:// or https://");
  }
  RETURN_IF_ERROR(ValidateTlsMaterial(config).WithContext("kube client"));
  auto c = std::make_unique<RestKubeClient>(config, options);
  RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<KubeClient>(std::move(c));
}

}  // namespace ringtrain::kube
