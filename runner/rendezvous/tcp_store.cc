#include "runner/rendezvous/tcp_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <tuple>
#include <unordered_map>

namespace ringtrain::rendezvous {
namespace {

// Wire format: every message is a frame, a big-endian u32 length then the payload. Requests are
// [op u8][fields]; strings are [u32 length][bytes], integers big-endian u64. Replies are
// [status code u8][body]: the op's result when ok, the error message otherwise.
enum class Op : std::uint8_t { kSet = 1, kGet, kAdd, kCompareSet, kWait };

constexpr char kMagic[4] = {'R', 'T', 'S', '1'};
constexpr std::size_t kNonceBytes = 32;
constexpr std::size_t kMacBytes = 32;
// A frame longer than this is a protocol error (or not our client): drop the connection.
constexpr std::uint32_t kMaxFrameBytes = 64u << 20;
// Caps a caller's timeout so deadline arithmetic cannot overflow.
constexpr Duration kMaxTimeout{std::chrono::hours(24 * 365)};
constexpr const char* kRefusedToken = "rendezvous store refused the job token";

Duration Clamp(Duration d) { return std::clamp(d, Duration(0), kMaxTimeout); }

void PutU32(std::string& out, std::uint32_t v) {
  std::uint32_t be = htonl(v);
  out.append(reinterpret_cast<const char*>(&be), sizeof(be));
}

void PutU64(std::string& out, std::uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(v >> shift));
}

void PutString(std::string& out, const std::string& s) {
  PutU32(out, static_cast<std::uint32_t>(s.size()));
  out += s;
}

// Bounds-checked reader over one frame's payload.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool U8(std::uint8_t& v) {
    if (data_.size() < 1) return false;
    v = static_cast<std::uint8_t>(data_[0]);
    data_.remove_prefix(1);
    return true;
  }
  bool U32(std::uint32_t& v) {
    if (data_.size() < 4) return false;
    std::uint32_t be;
    std::memcpy(&be, data_.data(), 4);
    v = ntohl(be);
    data_.remove_prefix(4);
    return true;
  }
  bool U64(std::uint64_t& v) {
    if (data_.size() < 8) return false;
    v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<std::uint8_t>(data_[i]);
    data_.remove_prefix(8);
    return true;
  }
  bool String(std::string& s) {
    std::uint32_t n;
    if (!U32(n) || data_.size() < n) return false;
    s.assign(data_.data(), n);
    data_.remove_prefix(n);
    return true;
  }
  std::string_view rest() const { return data_; }
  bool done() const { return data_.empty(); }

 private:
  std::string_view data_;
};

std::string Frame(std::string_view payload) {
  std::string out;
  out.reserve(4 + payload.size());
  PutU32(out, static_cast<std::uint32_t>(payload.size()));
  out.append(payload);
  return out;
}

std::string Reply(StatusCode code, std::string_view body) {
  std::string payload(1, static_cast<char>(code));
  payload.append(body);
  return Frame(payload);
}

std::string Reply(const Status& s) { return Reply(s.code(), s.message()); }

std::string Mac(const std::string& token, std::string_view nonce) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(nonce.data()), nonce.size(), mac, &len);
  return std::string(reinterpret_cast<const char*>(mac), len);
}

Status SendFrame(const net::Socket& s, std::string_view payload, SteadyTime deadline) {
  std::string frame = Frame(payload);
  return net::SendAll(s, frame.data(), frame.size(), deadline);
}

StatusOr<std::string> RecvFrame(const net::Socket& s, SteadyTime deadline) {
  std::uint32_t be;
  RETURN_IF_ERROR(net::RecvAll(s, &be, sizeof(be), deadline));
  std::uint32_t len = ntohl(be);
  if (len > kMaxFrameBytes) return DataLoss("frame of " + std::to_string(len) + " bytes");
  std::string payload(len, '\0');
  RETURN_IF_ERROR(net::RecvAll(s, payload.data(), len, deadline));
  return payload;
}

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
  std::uint64_t suppressed() const { return suppressed_; }

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

// ---------------------------------------------------------------------------------------------
// Server

struct Conn {
  net::Socket sock;
  std::string peer;
  std::string peer_ip;  // per-address limits count unauthenticated connections by this
  std::string in;
  std::string out;
  std::size_t out_off = 0;
  std::string nonce;
  bool authed = false;
  bool closing = false;  // close once `out` is flushed
  bool dead = false;
  SteadyTime auth_deadline;
  // A Get or Wait whose keys are not all there yet. Clients send one request at a time, so a
  // parked connection has nothing else to do until this one is answered.
  bool parked = false;
  Op parked_op = Op::kGet;
  std::vector<std::string> keys;
  Duration timeout{0};
  SteadyTime deadline;
};

}  // namespace

struct TcpStoreServer::State {
  std::unordered_map<std::string, std::string> data;
  std::vector<std::unique_ptr<Conn>> conns;
  RateLimitedWarning refused_warning{kWarningPeriod};
  RateLimitedWarning token_warning{kWarningPeriod};
  RateLimitedWarning limit_warning{kWarningPeriod};
  SteadyTime accept_paused_until;
  bool changed = false;  // a key was written since parked requests were last checked
  std::string recv_buf = std::string(64 * 1024, '\0');

  bool Has(const std::string& k) const { return data.count(k) != 0; }

  std::vector<std::string> Missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (!Has(k)) missing.push_back(k);
    }
    return missing;
  }

  void Flush(Conn& c) {
    while (c.out_off < c.out.size()) {
      ssize_t n = ::send(c.sock.fd(), c.out.data() + c.out_off, c.out.size() - c.out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_off += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      c.dead = true;
      return;
    }
    c.out.clear();
    c.out_off = 0;
    if (c.closing) c.dead = true;
  }

  void Send(Conn& c, std::string frame) {
    c.out += frame;
    Flush(c);
  }

  void Answer(Conn& c) {
    if (c.parked_op == Op::kGet) {
      Send(c, Reply(StatusCode::kOk, data[c.keys[0]]));
    } else {
      Send(c, Reply(StatusCode::kOk, ""));
    }
    c.parked = false;
    c.keys.clear();
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
    Send(c, Reply(DeadlineExceeded(msg)));
    c.parked = false;
    c.keys.clear();
  }

  void Park(Conn& c, Op op, std::vector<std::string> keys, std::uint64_t timeout_ms) {
    c.parked_op = op;
    c.keys = std::move(keys);
    c.timeout = Clamp(Duration(static_cast<Duration::rep>(
        std::min<std::uint64_t>(timeout_ms, static_cast<std::uint64_t>(kMaxTimeout.count())))));
    if (Missing(c.keys).empty()) {
      Answer(c);
      return;
    }
    c.parked = true;
    c.deadline = DeadlineAfter(c.timeout);
  }

  void Handle(Conn& c, std::string_view payload) {
    Reader r(payload);
    std::uint8_t op_byte = 0;
    if (!r.U8(op_byte)) return ProtocolError(c, "empty request");
    switch (static_cast<Op>(op_byte)) {
      case Op::kSet: {
        std::string key, value;
        if (!r.String(key) || !r.String(value) || !r.done()) return ProtocolError(c, "bad set");
        data[key] = std::move(value);
        changed = true;
        return Send(c, Reply(StatusCode::kOk, ""));
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
            return Send(
                c, Reply(InvalidArgument("store add: key " + key + " holds a non-integer value")));
          }
        }
        if (__builtin_add_overflow(now, static_cast<std::int64_t>(delta), &now)) {
          return Send(c, Reply(InvalidArgument("store add: key " + key + " would overflow int64")));
        }
        data[key] = std::to_string(now);
        changed = true;
        std::string body;
        PutU64(body, static_cast<std::uint64_t>(now));
        return Send(c, Reply(StatusCode::kOk, body));
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
          return Send(c, Reply(StatusCode::kOk, desired));
        }
        return Send(c, Reply(StatusCode::kOk, it == data.end() ? "" : it->second));
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

  void Authenticate(Conn& c, std::string_view payload, const std::string& token) {
    std::string expected = Mac(token, c.nonce);
    if (payload.size() != expected.size() ||
        CRYPTO_memcmp(payload.data(), expected.data(), expected.size()) != 0) {
      token_warning.Warn("rendezvous store: refused {}: wrong job token", c.peer);
      c.closing = true;
      return Send(c, Reply(PermissionDenied(kRefusedToken)));
    }
    c.authed = true;
    Send(c, Reply(StatusCode::kOk, ""));
  }

  // Handles every complete frame buffered on `c` until it parks or closes.
  void Process(Conn& c, const std::string& token) {
    std::size_t pos = 0;
    while (!c.dead && !c.closing && !c.parked && c.in.size() - pos >= 4) {
      std::uint32_t be;
      std::memcpy(&be, c.in.data() + pos, 4);
      std::uint32_t len = ntohl(be);
      if (len > kMaxFrameBytes || (!c.authed && len != kMacBytes)) {
        ProtocolError(c, "bad frame length " + std::to_string(len));
        break;
      }
      if (c.in.size() - pos - 4 < len) break;
      std::string_view payload(c.in.data() + pos + 4, len);
      if (c.authed) {
        Handle(c, payload);
      } else {
        Authenticate(c, payload, token);
      }
      pos += 4 + len;
    }
    c.in.erase(0, pos);
  }

  // Drains the listener's backlog under the limits (tcp_store.h). A stranger's connections
  // that have not proved the token are the ones that go when a limit is reached, oldest
  // first, so a flood cannot hold the slot a rank needs for its handshake.
  void AcceptAll(const net::Socket& listener, const TcpStoreServerLimits& limits) {
    for (;;) {
      int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          // EMFILE/ENFILE/ENOBUFS: the connection stays queued and the listener readable.
          limit_warning.Warn("rendezvous store: cannot accept: {}; pausing accepts for {}",
                             std::strerror(errno), FormatDuration(kAcceptPause));
          accept_paused_until = DeadlineAfter(kAcceptPause);
        }
        return;
      }
      auto c = std::make_unique<Conn>();
      c->sock = net::Socket(fd);
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      std::tie(c->peer_ip, c->peer) = PeerName(fd);
      if (static_cast<int>(conns.size()) >= limits.max_connections) {
        limit_warning.Warn("rendezvous store: refused {}: {} connections are open", c->peer,
                           conns.size());
        continue;
      }
      MakeRoomFor(c->peer_ip, limits);
      c->auth_deadline = DeadlineAfter(kStoreAuthTimeout);
      c->nonce.assign(kNonceBytes, '\0');
      if (RAND_bytes(reinterpret_cast<unsigned char*>(c->nonce.data()), kNonceBytes) != 1) {
        spdlog::error("rendezvous store: RAND_bytes failed; dropping {}", c->peer);
        continue;
      }
      Send(*c, Frame(std::string(kMagic, sizeof(kMagic)) + c->nonce));
      conns.push_back(std::move(c));
    }
  }

  void MakeRoomFor(const std::string& ip, const TcpStoreServerLimits& limits) {
    int total = 0, from_ip = 0;
    Conn* oldest = nullptr;
    Conn* oldest_from_ip = nullptr;
    for (auto& c : conns) {
      if (c->authed || c->dead) continue;
      ++total;
      if (oldest == nullptr) oldest = c.get();
      if (c->peer_ip == ip) {
        ++from_ip;
        if (oldest_from_ip == nullptr) oldest_from_ip = c.get();
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

  void Read(Conn& c, const std::string& token) {
    for (;;) {
      ssize_t n = ::recv(c.sock.fd(), recv_buf.data(), recv_buf.size(), MSG_DONTWAIT);
      if (n > 0) {
        c.in.append(recv_buf.data(), static_cast<std::size_t>(n));
        if (c.in.size() > kMaxFrameBytes + 4) {
          ProtocolError(c, "request too large");
          return;
        }
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
      c.dead = true;  // closed or reset: a client that went away, nothing to answer
      return;
    }
    Process(c, token);
  }
};

TcpStoreServer::TcpStoreServer(net::Socket listener, int port, std::string token,
                               const TcpStoreServerLimits& limits)
    : listener_(std::move(listener)),
      port_(port),
      token_(std::move(token)),
      limits_(limits),
      state_(std::make_unique<State>()) {}

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
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) return ErrnoStatus(StatusCode::kInternal, "rendezvous store: eventfd", errno);
  std::unique_ptr<TcpStoreServer> server(
      new TcpStoreServer(std::move(listener).value(), bound, token, limits));
  server->wake_fd_ = wake;
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  spdlog::info("rendezvous store listening on {}:{}", host.empty() ? "0.0.0.0" : host, bound);
  return server;
}

TcpStoreServer::~TcpStoreServer() {
  Stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void TcpStoreServer::Stop() {
  if (stopping_.exchange(true)) return;
  std::uint64_t one = 1;
  // The eventfd counter cannot overflow from one write, so this cannot fail usefully.
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

void TcpStoreServer::Serve() {
  State& st = *state_;
  std::vector<pollfd> fds;
  while (!stopping_.load()) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    SteadyTime next = SteadyTime::max();
    const bool accepting = std::chrono::steady_clock::now() >= st.accept_paused_until;
    if (!accepting) next = st.accept_paused_until;
    fds.push_back({listener_.fd(), static_cast<short>(accepting ? POLLIN : 0), 0});
    for (const auto& c : st.conns) {
      short events = c->out.empty() ? POLLIN : static_cast<short>(POLLIN | POLLOUT);
      fds.push_back({c->sock.fd(), events, 0});
      if (!c->authed) next = std::min(next, c->auth_deadline);
      if (c->parked) next = std::min(next, c->deadline);
    }
    int timeout_ms = next == SteadyTime::max() ? -1 : MillisLeft(next);
    int r = ::poll(fds.data(), fds.size(), timeout_ms);
    if (r < 0 && errno != EINTR) {
      spdlog::error("rendezvous store: poll: {}", std::strerror(errno));
      break;
    }
    if (stopping_.load()) break;

    // Connections accepted now are appended after the ones polled, so index i stays aligned.
    std::size_t polled = st.conns.size();
    for (std::size_t i = 0; i < polled; ++i) {
      Conn& c = *st.conns[i];
      short rev = fds[i + 2].revents;
      if (rev & POLLOUT) st.Flush(c);
      if (!c.dead && (rev & (POLLIN | POLLHUP | POLLERR))) st.Read(c, token_);
    }
    if (fds[1].revents & POLLIN) st.AcceptAll(listener_, limits_);
    // Written keys may satisfy parked requests, whose answers may unblock buffered requests
    // that write more keys: repeat until quiet.
    while (st.changed) {
      st.changed = false;
      for (auto& c : st.conns) {
        if (c->parked && !c->dead && st.Missing(c->keys).empty()) {
          st.Answer(*c);
          st.Process(*c, token_);
        }
      }
    }
    auto now = std::chrono::steady_clock::now();
    for (auto& c : st.conns) {
      if (!c->authed && !c->closing && now >= c->auth_deadline) {
        st.refused_warning.Warn("rendezvous store: dropping {}: no token within {}", c->peer,
                                FormatDuration(kStoreAuthTimeout));
        c->dead = true;
      }
      if (c->parked && !c->dead && now >= c->deadline) {
        st.Expire(*c);
        st.Process(*c, token_);
      }
    }
    std::erase_if(st.conns, [](const auto& c) { return c->dead; });
  }
  st.conns.clear();
  listener_.Close();
}

// ---------------------------------------------------------------------------------------------
// Client

StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Create(
    const TcpStoreClientOptions& options) {
  if (options.token.empty()) return InvalidArgument("rendezvous store: the job token is empty");
  std::unique_ptr<TcpStoreClient> client(new TcpStoreClient(options));
  RETURN_IF_ERROR(client->ConnectLocked(DeadlineAfter(Clamp(options.connect_timeout)), true));
  return client;
}

Status TcpStoreClient::ConnectLocked(SteadyTime deadline, bool retry) {
  std::string where = "rendezvous store " + options_.host + ":" + std::to_string(options_.port);
  auto sock = retry ? net::ConnectWithRetry(options_.host, options_.port, deadline)
                    : net::Connect(options_.host, options_.port, deadline);
  if (!sock.ok()) return sock.status().WithContext(where);
  // On first connect the handshake gets its own op budget: a connect that took the whole
  // rendezvous timeout (rank 0 started late) must not leave nothing for the token exchange. A
  // reconnect inside a call stays within that call's deadline.
  SteadyTime hs_deadline = retry ? DeadlineAfter(Clamp(options_.op_timeout)) : deadline;
  auto hello = RecvFrame(*sock, hs_deadline);
  if (!hello.ok()) return hello.status().WithContext(where + ": handshake");
  if (hello->size() != sizeof(kMagic) + kNonceBytes ||
      std::memcmp(hello->data(), kMagic, sizeof(kMagic)) != 0) {
    return Unavailable(where + ": handshake: not a ringtrain rendezvous store");
  }
  std::string mac = Mac(options_.token, std::string_view(*hello).substr(sizeof(kMagic)));
  RETURN_IF_ERROR(SendFrame(*sock, mac, hs_deadline).WithContext(where + ": handshake"));
  auto reply = RecvFrame(*sock, hs_deadline);
  if (!reply.ok()) return reply.status().WithContext(where + ": handshake");
  if (reply->empty()) return Unavailable(where + ": handshake: empty reply");
  auto code = static_cast<StatusCode>((*reply)[0]);
  if (code != StatusCode::kOk) return Status(code, reply->substr(1)).WithContext(where);
  socket_ = std::move(sock).value();
  return Status::Ok();
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
  if (!r.U64(v)) return DataLoss("rendezvous store: malformed add reply");
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
