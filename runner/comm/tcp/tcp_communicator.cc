#include "runner/comm/tcp/tcp_communicator.h"

#include <arpa/inet.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/stop.h"
#include "runner/rendezvous/failure.h"

namespace ringtrain::comm {
namespace {

constexpr std::uint32_t kHelloMagic = 0x52545247;  // "RTRG"
// Bounds reading a hello from an accepted connection, so a stray client cannot stall setup.
constexpr Duration kHelloTimeout{std::chrono::seconds(10)};

// The gang's ring key: random, agreed through the token-authenticated store, so a peer
// connection proves the job token too without the token itself crossing the ring.
constexpr const char* kRingKey = "comm/key";
constexpr std::size_t kRingKeyBytes = 32;

std::string AddrKey(int rank) { return "comm/addr/" + std::to_string(rank); }

struct Hello {
  std::uint32_t magic;
  std::uint32_t rank;
  std::uint32_t size;
  unsigned char key[kRingKeyBytes];
};

Status SendHello(const net::Socket& s, int rank, int size, const std::string& key,
                 SteadyTime deadline) {
  Hello h{htonl(kHelloMagic),
          htonl(static_cast<std::uint32_t>(rank)),
          htonl(static_cast<std::uint32_t>(size)),
          {}};
  std::memcpy(h.key, key.data(), kRingKeyBytes);
  return net::SendAll(s, &h, sizeof(h), deadline);
}

// Reads a hello and checks it comes from `expect_rank` of a gang of `size` holding the key.
Status RecvHello(const net::Socket& s, int expect_rank, int size, const std::string& key,
                 SteadyTime deadline) {
  Hello h{};
  RETURN_IF_ERROR(net::RecvAll(s, &h, sizeof(h), deadline));
  if (ntohl(h.magic) != kHelloMagic) return Unavailable("not a ringtrain peer");
  if (CRYPTO_memcmp(h.key, key.data(), kRingKeyBytes) != 0) {
    return PermissionDenied("peer does not hold this gang's ring key");
  }
  int rank = static_cast<int>(ntohl(h.rank));
  int their_size = static_cast<int>(ntohl(h.size));
  if (rank != expect_rank || their_size != size) {
    return Unavailable("expected rank " + std::to_string(expect_rank) + " of " +
                       std::to_string(size) + ", got rank " + std::to_string(rank) + " of " +
                       std::to_string(their_size));
  }
  return Status::Ok();
}

std::string SocketError(int err) {
  if (err == EPIPE) return "connection closed";
  if (err == ECONNRESET) return "connection reset";
  return std::strerror(err);
}

Status LostPeer(const char* op, int peer, const std::string& why) {
  return Unavailable(std::string(op) + ": lost peer rank " + std::to_string(peer) + " (" + why +
                     ")");
}

}  // namespace

TcpCommunicator::TcpCommunicator(rendezvous::Store& store, const TcpCommOptions& options)
    : store_(store),
      gang_failure_(store, options.rank),
      rank_(options.rank),
      size_(options.size),
      left_((options.rank + options.size - 1) % options.size),
      right_((options.rank + 1) % options.size),
      options_(options) {}

TcpCommunicator::~TcpCommunicator() { Abort(); }

StatusOr<std::unique_ptr<TcpCommunicator>> TcpCommunicator::Create(rendezvous::Store& store,
                                                                   const TcpCommOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return InvalidArgument("tcp communicator: rank " + std::to_string(options.rank) +
                           " is out of range for world size " + std::to_string(options.size));
  }
  if (options.chunk_bytes < sizeof(float)) {
    return InvalidArgument("tcp communicator: chunk_bytes must be at least 4");
  }
  std::unique_ptr<TcpCommunicator> c(new TcpCommunicator(store, options));
  // The largest collective, all-reduce, streams 1 + 2(n-1) spans.
  c->spans_.resize(2 * static_cast<std::size_t>(options.size));
  c->scratch_bytes_ = options.chunk_bytes / sizeof(float) * sizeof(float);
  c->scratch_ = std::make_unique<float[]>(c->scratch_bytes_ / sizeof(float));
  c->kernels_ = BestReduceKernels();
  spdlog::debug("tcp communicator rank {}: reduce kernels {}", options.rank,
                ReduceIsaName(c->kernels_.isa));
  c->barrier_in_.assign(1, 1);
  c->barrier_out_.assign(static_cast<std::size_t>(options.size), 0);
  if (options.size > 1) RETURN_IF_ERROR(c->Connect().WithContext("tcp communicator"));
  return c;
}

Status TcpCommunicator::Connect() {
  Status s = ConnectRing();
  if (s.ok() || s.message().find(": the gang failed first: ") != std::string::npos) return s;
  // A neighbour that learnt of another rank's failure leaves the forming ring, and this rank
  // sees only that (a reset hello, a closed connection): the failure it left for is the cause.
  const auto first = gang_failure_.Probe();
  if (first.ok() && first->has_value() && (**first).rank != rank_) {
    return Unavailable(s.message() +
                       "; the gang failed first: " + rendezvous::GangFailure::Describe(**first));
  }
  return s;
}

Status TcpCommunicator::ConnectRing() {
  SteadyTime deadline = DeadlineAfter(options_.connect_timeout);
  // Every rank proposes a key; the first proposal stored wins and all ranks read it back.
  unsigned char proposal[kRingKeyBytes / 2];
  if (RAND_bytes(proposal, sizeof(proposal)) != 1) return Internal("RAND_bytes failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string mine;
  for (unsigned char b : proposal) {
    mine += kHex[b >> 4];
    mine += kHex[b & 15];
  }
  ASSIGN_OR_RETURN(std::string key, store_.CompareSet(kRingKey, "", mine));
  if (key.size() != kRingKeyBytes) return Internal("malformed ring key in the store");
  ASSIGN_OR_RETURN(net::Socket listener, net::Listen(options_.bind_host, 0));
  ASSIGN_OR_RETURN(int port, net::LocalPort(listener));
  RETURN_IF_ERROR(store_.Set(AddrKey(rank_), options_.advertise_host + ":" + std::to_string(port)));

  // Each wait for another rank below goes in slices, checking between them that no rank has
  // failed: one that failed before it joined never will.
  const auto slice_end = [](SteadyTime end) {
    return std::min(end, DeadlineAfter(kGangProbeInterval));
  };
  const auto sliced_out = [](const Status& s, SteadyTime end) {
    return s.code() == StatusCode::kDeadlineExceeded && std::chrono::steady_clock::now() < end;
  };
  const std::string waiting_addr = "waiting for the address of rank " + std::to_string(right_);
  const SteadyTime addr_deadline = DeadlineAfter(options_.connect_timeout);
  StatusOr<std::string> addr = Unavailable("not asked");
  for (;;) {
    const SteadyTime end = slice_end(addr_deadline);
    addr =
        store_.Get(AddrKey(right_),
                   std::max(Duration::zero(),
                            std::chrono::ceil<Duration>(end - std::chrono::steady_clock::now())));
    if (!sliced_out(addr.status(), addr_deadline)) break;
    RETURN_IF_ERROR(GangStillForming(waiting_addr));
  }
  if (!addr.ok() && addr.status().code() == StatusCode::kDeadlineExceeded) {
    // The store's words name the last slice's timeout, not the whole wait.
    return DeadlineExceeded(waiting_addr + ": not published within " +
                            FormatDuration(options_.connect_timeout) + " (store key " +
                            AddrKey(right_) + ")");
  }
  if (!addr.ok()) return addr.status().WithContext(waiting_addr);
  auto colon = addr->rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument("rank " + std::to_string(right_) + " published a bad address: " + *addr);
  }
  std::string host = addr->substr(0, colon);
  int right_port = std::atoi(addr->c_str() + colon + 1);
  // The gang is checked between connect attempts (at most the backoff's 2 s apart), not by
  // slicing the deadline, which would cap every attempt and name lookup at a slice.
  const std::string connecting = "connecting to rank " + std::to_string(right_) + " at " + *addr;
  auto right = net::ConnectWithRetry(host, right_port, deadline, net::kConnectAttemptTimeout,
                                     [&] { return GangStillForming(connecting); });
  if (!right.ok()) return right.status().WithContext(connecting);
  // Send our hello before accepting: every rank connects first, so waiting for the right
  // neighbour's reply here would wait around the whole ring.
  RETURN_IF_ERROR(SendHello(*right, rank_, size_, key, deadline)
                      .WithContext("hello to rank " + std::to_string(right_)));

  const std::string waiting_left = "waiting for rank " + std::to_string(left_) + " to connect";
  for (;;) {
    auto in = net::Accept(listener, slice_end(deadline));
    if (sliced_out(in.status(), deadline)) {
      RETURN_IF_ERROR(GangStillForming(waiting_left));
      continue;
    }
    if (!in.ok()) return in.status().WithContext(waiting_left);
    Status hello =
        RecvHello(*in, left_, size_, key, std::min(deadline, DeadlineAfter(kHelloTimeout)));
    if (hello.ok()) {
      RETURN_IF_ERROR(SendHello(*in, rank_, size_, key, deadline)
                          .WithContext("hello to rank " + std::to_string(left_)));
      from_left_ = std::move(in).value();
      break;
    }
    // A stray or stale connection must not take the place of the real neighbour.
    spdlog::warn("tcp communicator rank {}: dropped a connection: {}", rank_, hello.message());
  }
  RETURN_IF_ERROR(RecvHello(*right, right_, size_, key, deadline)
                      .WithContext("hello from rank " + std::to_string(right_) + " at " + *addr));
  to_right_ = std::move(right).value();
  if (options_.socket_buffer_bytes > 0) {
    const int bytes =
        static_cast<int>(std::min<std::size_t>(options_.socket_buffer_bytes, 1 << 30));
    for (const net::Socket* s : {&to_right_, &from_left_}) {
      if (setsockopt(s->fd(), SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)) != 0 ||
          setsockopt(s->fd(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) != 0) {
        return Internal(std::string("setting socket buffers: ") + std::strerror(errno));
      }
    }
  }
  spdlog::debug("tcp communicator rank {}/{}: ring connected (left {}, right {})", rank_, size_,
                left_, right_);
  return Status::Ok();
}

Status TcpCommunicator::GangStillForming(const std::string& waiting) const {
  const auto first = gang_failure_.Probe();
  if (!first.ok()) return Unavailable(waiting + ": " + first.status().message());
  if (!first->has_value()) return Status::Ok();
  return Unavailable(waiting +
                     ": the gang failed first: " + rendezvous::GangFailure::Describe(**first));
}

void TcpCommunicator::Abort() {
  aborted_.store(true);
  // shutdown, not close: the collective thread may still be polling these descriptors.
  to_right_.Shutdown();
  from_left_.Shutdown();
}

Status TcpCommunicator::CheckUsable(const char* op) const {
  if (!aborted_.load()) return Status::Ok();
  std::string m = std::string(op) + ": the communicator was aborted";
  if (!failure_.empty()) m += " by an earlier failure: " + failure_;
  return Aborted(std::move(m));
}

Status TcpCommunicator::Fail(const char* op, Status cause, bool stall_is_upstream) {
  if (aborted_.load()) {
    // Abort() was called from another thread: the socket error is its doing, not a peer's.
    return Aborted(std::string(op) + ": the communicator was aborted");
  }
  // The report is the cause peers will give for their own exit, so it goes out even when this
  // rank is being stopped; its store calls are bounded by their own short timeouts.
  StopExemptScope exempt;
  // A rank that timed out behind a live neighbour lets the rank that saw the stall first
  // record it, so this one does not claim the root cause with a second-hand "waiting for rank
  // r-1".
  if (stall_is_upstream) gang_failure_.AwaitRootCause();
  // Published before the sockets close: the neighbours only learn of the failure from the
  // shutdown, so by then the store already holds the root cause they will read.
  auto first = gang_failure_.Publish(cause);
  Abort();
  std::string message = cause.message();
  if (first.ok() && first->rank != rank_) {
    message += "; first failure: " + rendezvous::GangFailure::Describe(*first);
  } else if (!first.ok() && rank_ != 0 && first.status().code() != StatusCode::kCancelled) {
    // The store lives in rank 0: losing it too means rank 0 is the rank that died, whatever
    // neighbour's connection closed here (it may only have been passing the failure on), so
    // every survivor names the same dead rank.
    message = std::string(op) + ": lost peer rank 0 (the rendezvous store it hosts is " +
              "unreachable: " + first.status().message() + "); here: " + cause.message();
    cause = Unavailable(message);
  }
  failure_ = message;
  spdlog::error("tcp communicator rank {}: {}", rank_, message);
  return Status(cause.code(), std::move(message));
}

Status TcpCommunicator::RunRing(const char* op, std::size_t n_spans, std::size_t send_bytes) {
  const Span* spans = spans_.data();
  const int lfd = from_left_.fd();
  const int rfd = to_right_.fd();
  char* scratch = reinterpret_cast<char*>(scratch_.get());
  const float scale = 1.0f / static_cast<float>(size_);
  const std::size_t head = spans[0].bytes;
  std::size_t recv_total = 0;
  for (std::size_t i = 1; i < n_spans; ++i) recv_total += spans[i].bytes;

  std::size_t si = 0, so = 0, sent = 0;       // outgoing: span, offset, total
  std::size_t ri = 1, ro = 0, recv_done = 0;  // incoming, processed bytes only
  std::size_t pending = 0;                    // received bytes of a partial float
  // The timeout counts from the last byte moved, not from the start: a big buffer on a slow
  // link is not a failure, and the rank next to a stalled peer, having waited longest, fires
  // first and so is the one that names it.
  SteadyTime deadline = DeadlineAfter(options_.collective_timeout);
  bool moved = false;

  while (sent < send_bytes || recv_done < recv_total) {
    bool progress = false, want_out = false, want_in = false;
    std::size_t ready = std::min(send_bytes, head + recv_done) - sent;
    if (ready > 0) {
      while (so == spans[si].bytes) ++si, so = 0;
      std::size_t len = std::min(ready, spans[si].bytes - so);
      ssize_t n = ::send(rfd, spans[si].data + so, len, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        so += static_cast<std::size_t>(n);
        progress = true;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        want_out = true;
      } else {
        return Fail(op, LostPeer(op, right_, SocketError(errno)));
      }
    }
    if (recv_done < recv_total) {
      while (ro == spans[ri].bytes) ++ri, ro = 0;
      const Span& sp = spans[ri];
      ssize_t n;
      if (sp.mode == Mode::kCopy) {
        n = ::recv(lfd, sp.data + ro, sp.bytes - ro, MSG_DONTWAIT);
        if (n > 0) {
          ro += static_cast<std::size_t>(n);
          recv_done += static_cast<std::size_t>(n);
        }
      } else {
        std::size_t want = std::min(scratch_bytes_, sp.bytes - ro) - pending;
        n = ::recv(lfd, scratch + pending, want, MSG_DONTWAIT);
        if (n > 0) {
          std::size_t avail = pending + static_cast<std::size_t>(n);
          std::size_t whole = avail / sizeof(float) * sizeof(float);
          auto* dst = reinterpret_cast<float*>(sp.data + ro);
          const float* src = scratch_.get();
          if (sp.mode == Mode::kReduce) {
            kernels_.sum(dst, src, whole / sizeof(float));
          } else {
            kernels_.sum_scale(dst, src, whole / sizeof(float), scale);
          }
          ro += whole;
          recv_done += whole;
          pending = avail - whole;
          if (pending > 0) std::memmove(scratch, scratch + whole, pending);
        }
      }
      if (n > 0) {
        progress = true;
      } else if (n == 0) {
        return Fail(op, LostPeer(op, left_, "connection closed"));
      } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        want_in = true;
      } else {
        return Fail(op, LostPeer(op, left_, SocketError(errno)));
      }
    }
    if (progress) {
      moved = true;
      continue;
    }
    if (moved) {
      deadline = DeadlineAfter(options_.collective_timeout);
      moved = false;
    }

    // Nothing moved: sleep until either side can. The right socket never carries data towards
    // us, so readability there means the right neighbour closed or reset it. That only matters
    // while we still owe it bytes: once it has them all it may finish and exit before us.
    const bool owe_right = sent < send_bytes;
    // The stop descriptor too: a SIGTERM must not wait out the collective timeout. A socket we
    // want nothing from is left out (fd -1): poll reports POLLHUP/POLLERR whatever the events
    // asked, so a right neighbour that reset after taking all it was owed would wake every poll
    // at once, and the deadline would never fire.
    const bool watch_right = owe_right || want_out;
    pollfd fds[3] = {{want_in ? lfd : -1, static_cast<short>(want_in ? POLLIN : 0), 0},
                     {watch_right ? rfd : -1,
                      static_cast<short>((owe_right ? POLLIN : 0) | (want_out ? POLLOUT : 0)), 0},
                     {StopFd(), POLLIN, 0}};
    int r = ::poll(fds, 3, MillisLeft(deadline));
    if (StopRequested()) {
      // This rank's own failure, reported by the caller: the sockets stay up until then so
      // the neighbours read that cause, not a lost peer.
      aborted_.store(true);
      failure_ = StoppedStatus(op).message();
      return StoppedStatus(op);
    }
    if (r < 0 && errno != EINTR) {
      return Fail(op, ErrnoStatus(StatusCode::kInternal, std::string(op) + ": poll", errno));
    }
    if (r == 0) {
      // Receiving never waits on sending, so an unfinished receive means the left neighbour
      // (or someone upstream of it) is late; otherwise the right one stopped reading. Having
      // heard from the left in this collective means it is alive and itself waiting: the
      // stall is further upstream, and the rank that saw it should be the one to report.
      bool waiting_left = recv_done < recv_total;
      bool upstream = waiting_left && (recv_done > 0 || pending > 0);
      return Fail(
          op,
          DeadlineExceeded(std::string(op) + ": timed out after " +
                           FormatDuration(options_.collective_timeout) + " waiting for rank " +
                           std::to_string(waiting_left ? left_ : right_)),
          upstream);
    }
    if (owe_right && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      char byte;
      ssize_t n = ::recv(rfd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
      if (n == 0) return Fail(op, LostPeer(op, right_, "connection closed"));
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return Fail(op, LostPeer(op, right_, SocketError(errno)));
      }
      if (n > 0) return Fail(op, LostPeer(op, right_, "unexpected data from the send side"));
    }
  }
  return Status::Ok();
}

Status TcpCommunicator::AllReduce(float* data, std::size_t count, ReduceOp op) {
  constexpr const char* kOp = "all-reduce";
  RETURN_IF_ERROR(CheckUsable(kOp));
  const int n = size_;
  if (count == 0 || n == 1) return Status::Ok();
  // Segment i: elements [i*base + min(i, rem), +base + (i < rem)); empty when count < n.
  const std::size_t base = count / static_cast<std::size_t>(n);
  const std::size_t rem = count % static_cast<std::size_t>(n);
  auto segment = [&](int i, Mode mode) {
    auto u = static_cast<std::size_t>((i % n + n) % n);
    std::size_t first = u * base + std::min(u, rem);
    std::size_t elems = base + (u < rem ? 1 : 0);
    return Span{reinterpret_cast<char*>(data + first), elems * sizeof(float), mode};
  };
  // Reduce-scatter step s receives segment r-s-1 and adds it in; after n-1 steps segment r+1
  // is complete here. All-gather step t then receives the complete segment r-t. What goes out
  // at each step is what came in at the step before, which is what RunRing streams.
  spans_[0] = segment(rank_, Mode::kCopy);
  for (int s = 0; s < n - 1; ++s) {
    bool last = s == n - 2;
    spans_[1 + s] = segment(rank_ - s - 1,
                            last && op == ReduceOp::kAverage ? Mode::kReduceScale : Mode::kReduce);
  }
  for (int t = 0; t < n - 1; ++t) spans_[n + t] = segment(rank_ - t, Mode::kCopy);
  const std::size_t n_spans = 2 * static_cast<std::size_t>(n) - 1;
  std::size_t send_bytes = 0;
  for (std::size_t i = 0; i + 1 < n_spans; ++i) send_bytes += spans_[i].bytes;
  return RunRing(kOp, n_spans, send_bytes);
}

Status TcpCommunicator::Broadcast(void* data, std::size_t bytes, int root) {
  constexpr const char* kOp = "broadcast";
  RETURN_IF_ERROR(CheckUsable(kOp));
  if (root < 0 || root >= size_) {
    return InvalidArgument("broadcast: root " + std::to_string(root) +
                           " is out of range for world size " + std::to_string(size_));
  }
  if (bytes == 0 || size_ == 1) return Status::Ok();
  char* p = static_cast<char*>(data);
  if (rank_ == root) {
    spans_[0] = Span{p, bytes, Mode::kCopy};
    return RunRing(kOp, 1, bytes);
  }
  // Every rank but the root's left neighbour forwards what it receives, chunk by chunk.
  spans_[0] = Span{};
  spans_[1] = Span{p, bytes, Mode::kCopy};
  return RunRing(kOp, 2, right_ == root ? 0 : bytes);
}

Status TcpCommunicator::AllGather(const void* in, std::size_t bytes, void* out) {
  constexpr const char* kOp = "all-gather";
  RETURN_IF_ERROR(CheckUsable(kOp));
  if (bytes == 0) return Status::Ok();
  char* o = static_cast<char*>(out);
  char* mine = o + static_cast<std::size_t>(rank_) * bytes;
  if (in != mine) std::memmove(mine, in, bytes);
  if (size_ == 1) return Status::Ok();
  const int n = size_;
  spans_[0] = Span{mine, bytes, Mode::kCopy};
  for (int s = 0; s < n - 1; ++s) {
    auto block = static_cast<std::size_t>(((rank_ - s - 1) % n + n) % n);
    spans_[1 + s] = Span{o + block * bytes, bytes, Mode::kCopy};
  }
  return RunRing(kOp, static_cast<std::size_t>(n), static_cast<std::size_t>(n - 1) * bytes);
}

// A one-byte all-gather: a rank finishes it only after every rank's byte has reached it, that
// is, after every rank has entered.
Status TcpCommunicator::Barrier() {
  constexpr const char* kOp = "barrier";
  RETURN_IF_ERROR(CheckUsable(kOp));
  if (size_ == 1) return Status::Ok();
  const int n = size_;
  char* o = barrier_out_.data();
  o[rank_] = barrier_in_[0];
  spans_[0] = Span{o + rank_, 1, Mode::kCopy};
  for (int s = 0; s < n - 1; ++s) {
    spans_[1 + s] = Span{o + ((rank_ - s - 1) % n + n) % n, 1, Mode::kCopy};
  }
  return RunRing(kOp, static_cast<std::size_t>(n), static_cast<std::size_t>(n - 1));
}

}  // namespace ringtrain::comm
