// The TCP ring backend of Communicator: owns the ring sockets, the wire format between ranks
// and the ring collectives; must not know about training, and reaches peers only via the Store.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/net.h"
#include "common/runner_env.h"
#include "common/status.h"
#include "runner/comm/communicator.h"
#include "runner/comm/tcp/reduce_kernels.h"
#include "runner/rendezvous/failure.h"
#include "runner/rendezvous/store.h"

namespace ringtrain::comm {

// Sized so that one chunk is far above per-syscall overhead but well under the kernel socket
// buffer, which keeps send and receive overlapped (see bench/allreduce_bench.cc).
inline constexpr std::size_t kDefaultChunkBytes = 256 * 1024;
// Connecting the ring is part of the rendezvous: the contract's one default.
inline constexpr Duration kDefaultCommConnectTimeout = contract::kRendezvousTimeout;
// How often forming the ring checks whether another rank has failed (TcpCommunicator::Connect).
inline constexpr Duration kGangProbeInterval{std::chrono::seconds(1)};

struct TcpCommOptions {
  int rank = 0;
  int size = 1;
  std::string bind_host = "0.0.0.0";
  // What the other ranks dial: the pod IP or hostname in a cluster.
  std::string advertise_host = "127.0.0.1";
  // Covers waiting for the neighbours' addresses and connecting to them.
  Duration connect_timeout = kDefaultCommConnectTimeout;
  // How long a collective may go without moving a byte before the communicator aborts.
  Duration collective_timeout = kDefaultCollectiveTimeout;
  std::size_t chunk_bytes = kDefaultChunkBytes;
  // SO_SNDBUF and SO_RCVBUF of the two ring connections; 0 leaves them to the kernel's
  // autotuning (tcp_wmem/tcp_rmem), which measured best (bench/README.md). A set size is capped
  // by net.core.wmem_max/rmem_max and turns autotuning off.
  std::size_t socket_buffer_bytes = 0;
};

// Ring over TCP: rank r sends to (r+1)%n and receives from (r-1)%n, on two connections even
// when n == 2. All-reduce is reduce-scatter then all-gather over n segments streamed in chunks,
// so each rank sends 2(n-1)/n of the buffer while sending and receiving at the same time.
//
// Failure: the first socket error, EOF or timeout aborts the communicator: it publishes the
// reason through the gang-failure protocol (rendezvous/failure.h: first reporter wins), then shuts
// both sockets so the neighbours fail at once and the failure runs around the ring; every rank's
// error names the first reporter's reason. The timeout counts from the last byte moved, so the rank
// next to a stalled peer fires first and is the one that names it. Later calls fail fast with
// Aborted.
class TcpCommunicator final : public Communicator {
 public:
  // Publishes "comm/addr/<rank>", connects the ring and verifies both neighbours. `store` must
  // outlive the communicator (it is used to report failures) and should be prefixed per gang
  // attempt (PrefixStore).
  static StatusOr<std::unique_ptr<TcpCommunicator>> Create(rendezvous::Store& store,
                                                           const TcpCommOptions& options);
  ~TcpCommunicator() override;
  TcpCommunicator(const TcpCommunicator&) = delete;
  TcpCommunicator& operator=(const TcpCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status AllReduce(float* data, std::size_t count, ReduceOp op) override;
  Status Broadcast(void* data, std::size_t bytes, int root) override;
  Status Barrier() override;
  Status AllGather(const void* in, std::size_t bytes, void* out) override;
  void Abort() override;

 private:
  // What happens to incoming bytes: stored as they are, or added into the buffer (and scaled
  // by 1/n on the last reduce step of an average).
  enum class Mode : std::uint8_t { kCopy, kReduce, kReduceScale };
  struct Span {
    char* data = nullptr;
    std::size_t bytes = 0;
    Mode mode = Mode::kCopy;
  };

  TcpCommunicator(rendezvous::Store& store, const TcpCommOptions& options);
  // ConnectRing, its failure told with the gang's first failure when another rank recorded one.
  Status Connect();
  Status ConnectRing();
  // Between the slices (kGangProbeInterval) of Connect's waits for another rank: a failure a
  // rank of the gang has recorded (it will never join the ring), or a store that no longer
  // answers (rank 0, which hosts it, is gone), ends the wait with Unavailable naming `waiting`
  // and that cause, instead of waiting out connect_timeout (300 s by default).
  Status GangStillForming(const std::string& waiting) const;

  // The one hot loop behind every collective. The incoming stream is spans_[1..n_spans)
  // concatenated; the outgoing stream is spans_[0] followed by the incoming stream as it is
  // processed, cut at `send_bytes` — in a ring, what a rank forwards is what it just received
  // (reduced), so the outgoing stream may never overtake the processed incoming one.
  Status RunRing(const char* op, std::size_t n_spans, std::size_t send_bytes);
  Status Fail(const char* op, Status cause, bool stall_is_upstream = false);
  Status CheckUsable(const char* op) const;

  rendezvous::Store& store_;
  rendezvous::GangFailure gang_failure_;
  const int rank_;
  const int size_;
  const int left_;
  const int right_;
  const TcpCommOptions options_;

  net::Socket to_right_;
  net::Socket from_left_;
  std::atomic<bool> aborted_{false};
  std::string failure_;  // why the communicator broke; read by later calls

  // Sized in Create so that collectives never allocate.
  std::vector<Span> spans_;
  std::unique_ptr<float[]> scratch_;
  std::size_t scratch_bytes_ = 0;
  // Chosen from CPUID once: the reduce runs on each chunk right after its recv, while the
  // chunk is still in cache.
  ReduceKernels kernels_;
  std::vector<char> barrier_in_;
  std::vector<char> barrier_out_;
};

}  // namespace ringtrain::comm
