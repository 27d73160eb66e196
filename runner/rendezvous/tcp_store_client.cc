// TcpStoreClient (tcp_store.h): blocking requests over one authenticated connection.
#include "runner/rendezvous/tcp_store.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "common/backoff.h"
#include "common/stop.h"
#include "runner/rendezvous/store_auth.h"
#include "runner/rendezvous/store_codec.h"

namespace ringtrain::rendezvous {

using codec::Clamp;
using codec::Op;
using codec::PutString;
using codec::PutU32;
using codec::PutU64;
using codec::Reader;
using codec::RecvFrame;
using codec::SendFrame;

StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Create(
    const TcpStoreClientOptions& options) {
  if (options.token.empty()) return InvalidArgument("rendezvous store: the job token is empty");
  std::unique_ptr<TcpStoreClient> client(new TcpStoreClient(options));
  RETURN_IF_ERROR(client->ConnectLocked(DeadlineAfter(Clamp(options.connect_timeout)), true));
  return client;
}

Status TcpStoreClient::ConnectLocked(SteadyTime deadline, bool retry) {
  std::string where = "rendezvous store " + options_.host + ":" + std::to_string(options_.port);
  const Duration attempt = Clamp(options_.connect_attempt_timeout);
  Backoff backoff;
  for (int tries = 1;; ++tries) {
    auto sock = retry ? net::ConnectWithRetry(options_.host, options_.port, deadline, attempt)
                      : net::ConnectAttempt(options_.host, options_.port, deadline, attempt);
    if (!sock.ok()) return sock.status().WithContext(where);
    // On first connect the handshake gets its own op budget: a connect that took the whole
    // rendezvous timeout (rank 0 started late) must not leave nothing for the token exchange.
    // A reconnect inside a call stays within that call's deadline.
    SteadyTime hs_deadline = retry ? DeadlineAfter(Clamp(options_.op_timeout)) : deadline;
    Status hs = auth::ClientHandshake(*sock, options_.token, hs_deadline, where);
    if (hs.ok()) {
      socket_ = std::move(sock).value();
      return Status::Ok();
    }
    // A store may close a connection before it is through the handshake (evicted as the
    // oldest unproved one from its address, its host going away): a first connect tries
    // again within the rendezvous timeout, as a refused one does. A wrong token or a silent
    // server is no better on the next try.
    if (!retry || hs.code() != StatusCode::kUnavailable) return hs;
    const Duration wait = backoff.Next();
    if (std::chrono::steady_clock::now() + wait >= deadline) return hs;
    if (tries == 1) spdlog::warn("{}; retrying until the rendezvous timeout", hs.ToString());
    if (!SleepOrStop(wait)) return StoppedStatus(where + ": handshake");
  }
}

StatusOr<std::string> TcpStoreClient::Call(const std::string& request, SteadyTime deadline) {
  std::string where = "rendezvous store " + options_.host + ":" + std::to_string(options_.port);
  {
    std::unique_lock lock(mu_);
    if (!idle_.wait_until(lock, deadline, [&] { return !busy_; })) {
      return DeadlineExceeded(where + ": timed out behind another request on this client");
    }
    busy_ = true;
  }
  struct Release {
    TcpStoreClient* c;
    ~Release() {
      {
        std::lock_guard lock(c->mu_);
        c->busy_ = false;
      }
      c->idle_.notify_one();
    }
  } release{this};
  if (!socket_.valid()) RETURN_IF_ERROR(ConnectLocked(deadline, false));
  Status sent = SendFrame(socket_, request, deadline);
  if (!sent.ok()) {
    socket_.Close();
    return sent.WithContext(where);
  }
  auto reply = RecvFrame(socket_, deadline);
  if (!reply.ok()) {
    // The reply may still arrive later and would be read as the next call's: start over.
    socket_.Close();
    return reply.status().WithContext(where);
  }
  if (reply->empty()) {
    socket_.Close();
    return Unavailable(where + ": empty reply");
  }
  auto code = static_cast<StatusCode>((*reply)[0]);
  if (code != StatusCode::kOk) return Status(code, reply->substr(1));
  return reply->substr(1);
}

Status TcpStoreClient::Set(const std::string& key, const std::string& value) {
  std::string req(1, static_cast<char>(Op::kSet));
  PutString(req, key);
  PutString(req, value);
  return Call(req, DeadlineAfter(Clamp(options_.op_timeout))).status();
}

StatusOr<std::string> TcpStoreClient::Get(const std::string& key, Duration timeout) {
  timeout = Clamp(timeout);
  std::string req(1, static_cast<char>(Op::kGet));
  PutString(req, key);
  PutU64(req, static_cast<std::uint64_t>(timeout.count()));
  return Call(req, DeadlineAfter(timeout + ReplySlack()));
}

StatusOr<std::int64_t> TcpStoreClient::Add(const std::string& key, std::int64_t delta) {
  std::string req(1, static_cast<char>(Op::kAdd));
  PutString(req, key);
  PutU64(req, static_cast<std::uint64_t>(delta));
  ASSIGN_OR_RETURN(std::string body, Call(req, DeadlineAfter(Clamp(options_.op_timeout))));
  Reader r(body);
  std::uint64_t v;
  if (!r.U64(v)) return Unavailable("rendezvous store: malformed add reply");
  return static_cast<std::int64_t>(v);
}

StatusOr<std::string> TcpStoreClient::CompareSet(const std::string& key,
                                                 const std::string& expected,
                                                 const std::string& desired) {
  return CompareSetWithin(key, expected, desired, options_.op_timeout);
}

StatusOr<std::string> TcpStoreClient::CompareSetWithin(const std::string& key,
                                                       const std::string& expected,
                                                       const std::string& desired,
                                                       Duration timeout) {
  std::string req(1, static_cast<char>(Op::kCompareSet));
  PutString(req, key);
  PutString(req, expected);
  PutString(req, desired);
  return Call(req, DeadlineAfter(Clamp(timeout)));
}

Status TcpStoreClient::Wait(const std::vector<std::string>& keys, Duration timeout) {
  timeout = Clamp(timeout);
  std::string req(1, static_cast<char>(Op::kWait));
  PutU32(req, static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) PutString(req, k);
  PutU64(req, static_cast<std::uint64_t>(timeout.count()));
  return Call(req, DeadlineAfter(timeout + ReplySlack())).status();
}

}  // namespace ringtrain::rendezvous
