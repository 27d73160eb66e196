// TcpStoreServer (tcp_store.h): the store's protocol on the poll-server core
// (common/poll_server.h): the token handshake per connection, request dispatch, parked
// Get/Wait requests, and the limits on connections that have not proved the token.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <tuple>
#include <unordered_map>

#include "common/poll_server.h"
#include "runner/rendezvous/store_auth.h"
#include "runner/rendezvous/store_codec.h"
#include "runner/rendezvous/tcp_store.h"

namespace ringtrain::rendezvous {
namespace {

using codec::Clamp;
using codec::Op;
using codec::Reply;

// "10.0.0.7" and "10.0.0.7:41234".
std::pair<std::string, std::string> PeerName(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return {"unknown", "unknown peer"};
  }
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
  return {ip, std::string(ip) + ":" + std::to_string(ntohs(addr.sin_port))};
}

// One warning line per period for a kind of event a stranger can cause at will (refused
// connections, wrong tokens), with the count of the lines it held back, so probing the port
// cannot flood the log.
class RateLimitedWarning {
 public:
  explicit RateLimitedWarning(Duration period) : period_(period) {}
  template <typename... Args>
  void Warn(spdlog::format_string_t<Args...> fmt, Args&&... args) {
    auto now = std::chrono::steady_clock::now();
    if (logged_ && now - last_ < period_) {
      ++suppressed_;
      return;
    }
    std::string line = fmt::format(fmt, std::forward<Args>(args)...);
    if (suppressed_ > 0) line += fmt::format(" ({} similar suppressed)", suppressed_);
    spdlog::warn("{}", line);
    logged_ = true;
    last_ = now;
    suppressed_ = 0;
  }

 private:
  Duration period_;
  bool logged_ = false;
  SteadyTime last_;
  std::uint64_t suppressed_ = 0;
};

constexpr Duration kWarningPeriod{std::chrono::seconds(10)};
// After EMFILE/ENFILE the listener stays readable: stop polling it this long instead of
// spinning on accept until a descriptor frees up.
constexpr Duration kAcceptPause{std::chrono::milliseconds(200)};

std::string JoinKeys(const std::vector<std::string>& keys) {
  // Bounded so a gang of thousands cannot produce a megabyte error message.
  constexpr std::size_t kMaxListed = 32;
  std::string out;
  for (std::size_t i = 0; i < keys.size() && i < kMaxListed; ++i) {
    if (i > 0) out += ", ";
    out += keys[i];
  }
  if (keys.size() > kMaxListed) {
    out += " and " + std::to_string(keys.size() - kMaxListed) + " more";
  }
  return out;
}

// The core's `deadline` is the auth deadline until the token is proved, then the parked
// request's deadline while one is parked, else none.
struct Conn : net::PollConn {
  std::string peer;
  std::string peer_ip;  // per-address limits count unauthenticated connections by this
  std::string nonce;
  bool authed = false;
  // A Get or Wait whose keys are not all there yet. Clients send one request at a time, so a
  // parked connection has nothing else to do until this one is answered.
  bool parked = false;
  Op parked_op = Op::kGet;
  std::vector<std::string> keys;
  Duration timeout{0};
};

Conn& AsConn(net::PollConn& c) { return static_cast<Conn&>(c); }

// Answers queued on a connection and not yet taken by its client.
std::size_t Pending(const Conn& c) { return c.out.size() - c.out_off; }

// How much of its answers a client may leave untaken before the store reads no more of its
// requests (one answer may be larger: a value of up to kMaxFrameBytes).
constexpr std::size_t kMaxPendingReplyBytes = std::size_t{1} << 20;

}  // namespace

struct TcpStoreServer::State final : net::PollHandler {
  State(std::string token, const TcpStoreServerLimits& limits)
      : token(std::move(token)), limits(limits) {}

  std::string token;
  TcpStoreServerLimits limits;
  std::unordered_map<std::string, std::string> data;
  RateLimitedWarning refused_warning{kWarningPeriod};
  RateLimitedWarning token_warning{kWarningPeriod};
  RateLimitedWarning limit_warning{kWarningPeriod};
  bool changed = false;  // a key was written since parked requests were last checked

  // --- net::PollHandler

  std::unique_ptr<net::PollConn> OnAccept(net::Socket sock, net::PollConns& conns) override {
    auto c = std::make_unique<Conn>();
    c->sock = std::move(sock);
    int one = 1;
    setsockopt(c->sock.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::tie(c->peer_ip, c->peer) = PeerName(c->sock.fd());
    MakeRoomFor(c->peer_ip, conns);
    c->deadline = DeadlineAfter(kStoreAuthTimeout);
    auto nonce = auth::MakeNonce();
    if (!nonce.ok()) {
      spdlog::error("{}; dropping {}", nonce.status().message(), c->peer);
      return nullptr;
    }
    c->nonce = std::move(nonce).value();
    c->Send(codec::Frame(auth::Hello(c->nonce)));
    return c;
  }

  // Above max_connections newcomers are refused (tcp_store.h).
  net::PollConn* OnFull(const net::Socket& newcomer, net::PollConns& conns) override {
    limit_warning.Warn("rendezvous store: refused {}: {} connections are open",
                       PeerName(newcomer.fd()).second, conns.size());
    return nullptr;
  }

  void OnData(net::PollConn& c) override { Process(AsConn(c)); }

  void OnOversize(net::PollConn& c) override { ProtocolError(AsConn(c), "request too large"); }

  void OnDeadline(net::PollConn& pc) override {
    Conn& c = AsConn(pc);
    if (!c.authed) {
      refused_warning.Warn("rendezvous store: dropping {}: no token within {}", c.peer,
                           FormatDuration(kStoreAuthTimeout));
      c.dead = true;
      return;
    }
    if (c.parked) {
      Expire(c);
      Process(c);
      return;
    }
    c.deadline = SteadyTime::max();
  }

  // Written keys may satisfy parked requests, whose answers may unblock buffered requests that
  // write more keys: repeat until quiet.
  void AfterEvents(net::PollConns& conns) override {
    // Requests held back while their connection's answers were not taken (Process).
    for (auto& pc : conns) {
      Conn& c = AsConn(*pc);
      if (c.authed && !c.dead && !c.parked && !c.in.empty() &&
          Pending(c) <= kMaxPendingReplyBytes) {
        Process(c);
      }
    }
    while (changed) {
      changed = false;
      for (auto& pc : conns) {
        Conn& c = AsConn(*pc);
        if (c.parked && !c.dead && Missing(c.keys).empty()) {
          Answer(c);
          Process(c);
        }
      }
    }
  }

  void OnAcceptPaused(int err) override {
    limit_warning.Warn("rendezvous store: cannot accept: {}; pausing accepts for {}",
                       std::strerror(err), FormatDuration(kAcceptPause));
  }

  // --- the store

  bool Has(const std::string& k) const { return data.count(k) != 0; }

  std::vector<std::string> Missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (!Has(k)) missing.push_back(k);
    }
    return missing;
  }

  void Unpark(Conn& c) {
    c.parked = false;
    c.keys.clear();
    c.deadline = SteadyTime::max();
  }

  void Answer(Conn& c) {
    if (c.parked_op == Op::kGet) {
      c.Send(Reply(StatusCode::kOk, data[c.keys[0]]));
    } else {
      c.Send(Reply(StatusCode::kOk, ""));
    }
    Unpark(c);
  }

  void Expire(Conn& c) {
    std::string msg;
    if (c.parked_op == Op::kGet) {
      msg = "store get timed out after " + FormatDuration(c.timeout) + " waiting for key " +
            c.keys[0];
    } else {
      msg = "store wait timed out after " + FormatDuration(c.timeout) +
            "; missing keys: " + JoinKeys(Missing(c.keys));
    }
    c.Send(Reply(DeadlineExceeded(msg)));
    Unpark(c);
  }

  void Park(Conn& c, Op op, std::vector<std::string> keys, std::uint64_t timeout_ms) {
    c.parked_op = op;
    c.keys = std::move(keys);
    c.timeout = Clamp(Duration(static_cast<Duration::rep>(std::min<std::uint64_t>(
        timeout_ms, static_cast<std::uint64_t>(codec::kMaxTimeout.count())))));
    if (Missing(c.keys).empty()) {
      Answer(c);
      return;
    }
    c.parked = true;
    c.deadline = DeadlineAfter(c.timeout);
  }

  void Handle(Conn& c, std::string_view payload) {
    codec::Reader r(payload);
    std::uint8_t op_byte = 0;
    if (!r.U8(op_byte)) return ProtocolError(c, "empty request");
    switch (static_cast<Op>(op_byte)) {
      case Op::kSet: {
        std::string key, value;
        if (!r.String(key) || !r.String(value) || !r.done()) return ProtocolError(c, "bad set");
        data[key] = std::move(value);
        changed = true;
        return c.Send(Reply(StatusCode::kOk, ""));
      }
      case Op::kGet: {
        std::string key;
        std::uint64_t timeout_ms;
        if (!r.String(key) || !r.U64(timeout_ms) || !r.done()) return ProtocolError(c, "bad get");
        return Park(c, Op::kGet, {std::move(key)}, timeout_ms);
      }
      case Op::kAdd: {
        std::string key;
        std::uint64_t delta;
        if (!r.String(key) || !r.U64(delta) || !r.done()) return ProtocolError(c, "bad add");
        std::int64_t now = 0;
        auto it = data.find(key);
        if (it != data.end()) {
          const std::string& v = it->second;
          auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), now);
          if (ec != std::errc() || ptr != v.data() + v.size()) {
            return c.Send(
                Reply(InvalidArgument("store add: key " + key + " holds a non-integer value")));
          }
        }
        if (__builtin_add_overflow(now, static_cast<std::int64_t>(delta), &now)) {
          return c.Send(Reply(InvalidArgument("store add: key " + key + " would overflow int64")));
        }
        data[key] = std::to_string(now);
        changed = true;
        std::string body;
        codec::PutU64(body, static_cast<std::uint64_t>(now));
        return c.Send(Reply(StatusCode::kOk, body));
      }
      case Op::kCompareSet: {
        std::string key, expected, desired;
        if (!r.String(key) || !r.String(expected) || !r.String(desired) || !r.done()) {
          return ProtocolError(c, "bad compare-set");
        }
        auto it = data.find(key);
        if ((it == data.end() && expected.empty()) ||
            (it != data.end() && it->second == expected)) {
          data[key] = desired;
          changed = true;
          return c.Send(Reply(StatusCode::kOk, desired));
        }
        return c.Send(Reply(StatusCode::kOk, it == data.end() ? "" : it->second));
      }
      case Op::kWait: {
        std::uint32_t n;
        if (!r.U32(n)) return ProtocolError(c, "bad wait");
        std::vector<std::string> keys;
        for (std::uint32_t i = 0; i < n; ++i) {
          std::string k;
          if (!r.String(k)) return ProtocolError(c, "bad wait");
          keys.push_back(std::move(k));
        }
        std::uint64_t timeout_ms;
        if (!r.U64(timeout_ms) || !r.done()) return ProtocolError(c, "bad wait");
        return Park(c, Op::kWait, std::move(keys), timeout_ms);
      }
    }
    ProtocolError(c, "unknown op " + std::to_string(op_byte));
  }

  void ProtocolError(Conn& c, const std::string& what) {
    refused_warning.Warn("rendezvous store: dropping {}: protocol error: {}", c.peer, what);
    c.dead = true;
  }

  void Authenticate(Conn& c, std::string_view payload) {
    if (!auth::Verify(token, c.nonce, payload)) {
      token_warning.Warn("rendezvous store: refused {}: wrong job token", c.peer);
      c.closing = true;
      c.reading = false;
      c.deadline = SteadyTime::max();
      return c.Send(Reply(PermissionDenied(auth::kRefusedToken)));
    }
    c.authed = true;
    c.deadline = SteadyTime::max();
    c.Send(Reply(StatusCode::kOk, ""));
  }

  // Handles every complete frame buffered on `c` until it parks, closes, or holds more than
  // kMaxPendingReplyBytes of answers it has not taken: its further requests wait in `c.in`
  // (where a client that goes on sending meets max_input_bytes) until it reads, and
  // AfterEvents resumes them. Without this, a client pipelining Gets of a large value without
  // reading the answers grew the store host's memory by the value per request (300 Gets of a
  // 1 MiB value: +309 MB).
  void Process(Conn& c) {
    std::size_t pos = 0;
    while (!c.dead && !c.closing && !c.parked && Pending(c) <= kMaxPendingReplyBytes) {
      std::string_view rest = std::string_view(c.in).substr(pos);
      auto len = codec::PeekFrameLength(rest);
      if (!len.has_value()) break;
      if (*len > codec::kMaxFrameBytes || (!c.authed && *len != auth::kMacBytes)) {
        ProtocolError(c, "bad frame length " + std::to_string(*len));
        break;
      }
      if (rest.size() - codec::kFrameHeaderBytes < *len) break;
      std::string_view payload = rest.substr(codec::kFrameHeaderBytes, *len);
      if (c.authed) {
        Handle(c, payload);
      } else {
        Authenticate(c, payload);
      }
      pos += codec::kFrameHeaderBytes + *len;
    }
    c.in.erase(0, pos);
  }

  // A stranger's connections that have not proved the token are the ones that go when a limit
  // is reached, oldest first, so a flood cannot hold the slot a rank needs for its handshake.
  void MakeRoomFor(const std::string& ip, net::PollConns& conns) {
    int total = 0, from_ip = 0;
    Conn* oldest = nullptr;
    Conn* oldest_from_ip = nullptr;
    for (auto& pc : conns) {
      Conn& c = AsConn(*pc);
      if (c.authed || c.dead) continue;
      ++total;
      if (oldest == nullptr) oldest = &c;
      if (c.peer_ip == ip) {
        ++from_ip;
        if (oldest_from_ip == nullptr) oldest_from_ip = &c;
      }
    }
    Conn* victim = nullptr;
    if (from_ip >= limits.max_unauthenticated_per_peer) {
      victim = oldest_from_ip;
    } else if (total >= limits.max_unauthenticated) {
      victim = oldest;
    }
    if (victim != nullptr) {
      limit_warning.Warn("rendezvous store: dropping {}: too many connections without the token",
                         victim->peer);
      victim->dead = true;
    }
  }
};

TcpStoreServer::TcpStoreServer(int port, std::unique_ptr<State> state)
    : port_(port), state_(std::move(state)) {}

StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Create(
    const std::string& host, int port, const std::string& token,
    const TcpStoreServerLimits& limits) {
  if (token.empty()) return InvalidArgument("rendezvous store: the job token is empty");
  if (limits.max_connections < 1 || limits.max_unauthenticated < 1 ||
      limits.max_unauthenticated_per_peer < 1) {
    return InvalidArgument("rendezvous store: connection limits must be at least 1");
  }
  auto listener = net::Listen(host, port);
  if (!listener.ok()) return listener.status().WithContext("rendezvous store");
  ASSIGN_OR_RETURN(int bound, net::LocalPort(*listener));
  std::unique_ptr<TcpStoreServer> server(
      new TcpStoreServer(bound, std::make_unique<State>(token, limits)));
  net::PollServerOptions core;
  core.max_connections = limits.max_connections;
  // A whole frame and the next one's header may be buffered; a longer request is an error.
  core.max_input_bytes = codec::kMaxFrameBytes + codec::kFrameHeaderBytes;
  core.accept_pause = kAcceptPause;
  core.name = "rendezvous store";
  auto started = net::PollServer::Start(std::move(listener).value(), *server->state_, core);
  if (!started.ok()) return started.status().WithContext("rendezvous store");
  server->core_ = std::move(started).value();
  spdlog::info("rendezvous store listening on {}:{}", host.empty() ? "0.0.0.0" : host, bound);
  return server;
}

TcpStoreServer::~TcpStoreServer() { Stop(); }

void TcpStoreServer::Stop() {
  if (core_ != nullptr) core_->Stop();
}

std::uint64_t TcpStoreServer::poll_wakeups() const {
  return core_ == nullptr ? 0 : core_->stats().wakeups;
}

std::uint64_t TcpStoreServer::accept_pauses() const {
  return core_ == nullptr ? 0 : core_->stats().accept_pauses;
}

const EventCounter* TcpStoreServer::accept_pause_events() const {
  return core_ == nullptr ? nullptr : &core_->accept_pause_events();
}

}  // namespace ringtrain::rendezvous
