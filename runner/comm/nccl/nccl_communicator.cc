#include "runner/comm/nccl/nccl_communicator.h"

#include <nccl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <system_error>
#include <thread>
#include <utility>

#include "runner/cuda/cuda_util.h"

namespace ringtrain::comm {
namespace {

// Rank 0's ncclUniqueId, hex-encoded (any Store value type carries it).
constexpr const char* kIdKey = "nccl/id";
// How long Fail and the destructor wait for ncclCommAbort. It runs on its own thread and can
// block (NCCL waits for its launched work and for CUDA graphs holding the communicator), and
// no rank may hang in the driver.
constexpr Duration kAbortJoinTimeout{std::chrono::seconds(10)};
// Staging buffers grow in whole granules (and at least double) to avoid reallocating.
constexpr std::size_t kStagingGranule = std::size_t{1} << 20;
constexpr std::size_t kStagingAlign = 256;

std::string ToHex(const void* data, std::size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string s;
  s.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    s += kHex[p[i] >> 4];
    s += kHex[p[i] & 15];
  }
  return s;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool FromHex(std::string_view s, void* out, std::size_t n) {
  if (s.size() != 2 * n) return false;
  auto* p = static_cast<unsigned char*>(out);
  for (std::size_t i = 0; i < n; ++i) {
    int hi = HexDigit(s[2 * i]);
    int lo = HexDigit(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    p[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

StatusCode CodeFor(ncclResult_t r) {
  switch (r) {
    case ncclInvalidArgument:
      return StatusCode::kInvalidArgument;
    case ncclInvalidUsage:  // e.g. two ranks on one GPU: a restart will not fix it
      return StatusCode::kFailedPrecondition;
    case ncclInternalError:
      return StatusCode::kInternal;
    case ncclUnhandledCudaError:  // often a device fault: the gang restarts
    case ncclSystemError:         // sockets, shared memory: a peer or the network went away
    case ncclRemoteError:         // a peer failed
    default:
      return StatusCode::kUnavailable;
  }
}

// Ok for ncclSuccess; otherwise `what`, NCCL's error string and its last warning.
Status NcclStatus(ncclResult_t r, std::string_view what) {
  if (r == ncclSuccess) return Status::Ok();
  std::string m = std::string(what) + ": NCCL error: " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') m += " (last NCCL warning: " + std::string(last) + ")";
  return Status(CodeFor(r), std::move(m));
}

ncclRedOp_t ToNccl(ReduceOp op) { return op == ReduceOp::kAverage ? ncclAvg : ncclSum; }

ncclComm_t AsComm(void* comm) { return static_cast<ncclComm_t>(comm); }

Status AbortedStatus(std::string_view what) {
  return Aborted(std::string(what) + ": the communicator was aborted");
}

Status TimedOut(std::string_view what, Duration timeout) {
  return DeadlineExceeded("collective '" + std::string(what) + "' did not complete within " +
                          FormatDuration(timeout) +
                          " (a rank may be stalled, dead, or slower than the collective timeout)");
}

SteadyTime FirstProbe(Duration interval) {
  if (interval <= Duration::zero()) return SteadyTime::max();
  return std::chrono::steady_clock::now() + interval;
}

// Polling loops: spin briefly (enqueues finish in microseconds), then back off.
void Backoff(int spins) {
  if (spins < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(spins < 2000 ? 50 : 1000));
  }
}

std::size_t AlignUp(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

// Makes `device` current for the scope and restores the previous one.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    int current = -1;
    status_ = gpu::CudaStatus(cudaGetDevice(&current), "cudaGetDevice");
    if (status_.ok() && current != device) {
      status_ =
          gpu::CudaStatus(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
      if (status_.ok()) previous_ = current;
    }
  }
  ~ScopedDevice() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  const Status& status() const { return status_; }

 private:
  Status status_;
  int previous_ = -1;
};

}  // namespace

struct NcclCommunicator::AbortState {
  std::mutex mu;
  std::condition_variable cv;
  bool started = false;
  bool done = false;
};

NcclCommunicator::NcclCommunicator(rendezvous::Store& store, const NcclCommOptions& options)
    : gang_failure_(store, options.rank),
      options_(options),
      abort_state_(std::make_shared<AbortState>()) {}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    rendezvous::Store& store, const NcclCommOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return InvalidArgument("nccl communicator: rank " + std::to_string(options.rank) +
                           " is out of range for world size " + std::to_string(options.size));
  }
  if (options.device < 0) {
    return InvalidArgument("nccl communicator: device " + std::to_string(options.device) +
                           " is not a CUDA device ordinal");
  }
  if (options.init_timeout <= Duration::zero() || options.collective_timeout <= Duration::zero()) {
    return InvalidArgument("nccl communicator: init_timeout and collective_timeout must be > 0");
  }
  const SteadyTime deadline = DeadlineAfter(options.init_timeout);
  const std::string who = "nccl communicator rank " + std::to_string(options.rank) + " of " +
                          std::to_string(options.size);

  // The unique id goes through the store before any CUDA call, so a missing rank 0 reads as
  // a clear timeout even where no GPU (or driver) is present.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (options.rank == 0) {
    RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId").WithContext(who));
    RETURN_IF_ERROR(store.Set(kIdKey, ToHex(&id, sizeof(id)))
                        .WithContext(who + ": publishing the NCCL unique id"));
  } else {
    auto got = store.Get(kIdKey, options.init_timeout);
    if (!got.ok()) {
      if (got.status().code() == StatusCode::kDeadlineExceeded) {
        return DeadlineExceeded(who + ": rank 0 did not publish the NCCL unique id (store key " +
                                kIdKey + ") within " + FormatDuration(options.init_timeout) +
                                "; is rank 0 running?");
      }
      return got.status().WithContext(who + ": waiting for rank 0's NCCL unique id (store key " +
                                      kIdKey + ")");
    }
    if (!FromHex(*got, &id, sizeof(id))) {
      return DataLoss(who + ": malformed NCCL unique id in the store (key " + kIdKey + ", " +
                      std::to_string(got->size()) + " characters)");
    }
  }

  // From here on a failure is recorded in the store, so that ranks already waiting in NCCL's
  // bootstrap for this one give up at once instead of at their init timeout.
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator(store, options));
  Status setup = gpu::CudaStatus(cudaSetDevice(options.device),
                                 "cudaSetDevice(" + std::to_string(options.device) + ")");
  if (setup.ok()) {
    setup = gpu::CudaStatus(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking),
                            "cudaStreamCreateWithFlags");
  }
  if (setup.ok()) {
    setup = gpu::CudaStatus(cudaEventCreateWithFlags(&c->done_, cudaEventDisableTiming),
                            "cudaEventCreateWithFlags");
  }
  if (!setup.ok()) return c->Fail(setup.WithContext(who));
  int pools = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, options.device) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    pools = 0;
  }
  c->staging_pooled_ = pools != 0;

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once; completion is polled under our timeouts
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, options.size, id, options.rank, &config);
  {
    std::lock_guard lock(c->abort_mu_);
    c->comm_ = comm;
  }
  if (r != ncclSuccess && r != ncclInProgress) {
    return c->Fail(NcclStatus(r, "ncclCommInitRankConfig").WithContext(who));
  }
  SteadyTime next_probe = FirstProbe(options.abort_poll_interval);
  for (int spins = 0;; ++spins) {
    bool in_progress = false;
    Status s = c->PollAsync("NCCL init", &in_progress);
    if (!s.ok()) return c->Fail(s.WithContext(who));
    if (!in_progress) break;
    Status w = c->Watch("NCCL init", next_probe);
    if (!w.ok()) return c->Fail(w.WithContext(who), /*record=*/false);
    if (std::chrono::steady_clock::now() >= deadline) {
      return c->Fail(DeadlineExceeded(who + ": NCCL init did not complete within " +
                                      FormatDuration(options.init_timeout) + " (waiting for all " +
                                      std::to_string(options.size) +
                                      " ranks to join; one may be missing, stuck or unreachable)"));
    }
    Backoff(spins);
  }
  int version = 0;
  (void)ncclGetVersion(&version);
  // The library found at run time may differ from the headers built against.
  spdlog::info("{}: ready on device {} (NCCL {}, built with {})", who, options.device, version,
               NCCL_VERSION_CODE);
  return c;
}

NcclCommunicator::~NcclCommunicator() {
  if (!aborted_.load()) Finalize();
  {
    std::lock_guard lock(abort_mu_);
    StartAbortLocked();  // nothing left to do when Finalize destroyed the communicator
  }
  if (!WaitForAbort(kAbortJoinTimeout)) {
    spdlog::warn(
        "nccl communicator rank {}: ncclCommAbort did not finish within {} (a CUDA graph still "
        "holding the communicator?); leaving it to finish in the background",
        options_.rank, FormatDuration(kAbortJoinTimeout));
  }
  if (staging_ != nullptr || done_ != nullptr || stream_ != nullptr) {
    ScopedDevice device(options_.device);
    // Stream-ordered, so a free never waits for the device (which may still run aborted work).
    if (staging_ != nullptr) {
      if (staging_pooled_) {
        (void)cudaFreeAsync(staging_, stream_);
      } else {
        (void)cudaFree(staging_);
      }
    }
    if (done_ != nullptr) (void)cudaEventDestroy(done_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
}

void NcclCommunicator::Finalize() {
  const SteadyTime deadline = DeadlineAfter(options_.collective_timeout);
  ncclResult_t r;
  {
    std::lock_guard lock(abort_mu_);
    if (comm_ == nullptr) return;
    r = ncclCommFinalize(AsComm(comm_));
  }
  // Finalizing flushes outstanding work and meets the other local ranks: a dead peer would
  // stall it, so it is bounded and the destructor falls back to ncclCommAbort.
  for (int spins = 0; r == ncclInProgress; ++spins) {
    if (std::chrono::steady_clock::now() >= deadline) {
      spdlog::warn("nccl communicator rank {}: ncclCommFinalize did not finish within {}; aborting",
                   options_.rank, FormatDuration(options_.collective_timeout));
      return;
    }
    Backoff(spins);
    bool in_progress = false;
    Status s = PollAsync("ncclCommFinalize", &in_progress);
    if (!s.ok()) {
      spdlog::warn("nccl communicator rank {}: {}; aborting", options_.rank, s.message());
      return;
    }
    r = in_progress ? ncclInProgress : ncclSuccess;
  }
  if (r != ncclSuccess) {
    spdlog::warn("nccl communicator rank {}: {}; aborting", options_.rank,
                 NcclStatus(r, "ncclCommFinalize").message());
    return;
  }
  std::lock_guard lock(abort_mu_);
  if (comm_ == nullptr) return;
  // After a successful finalize, destroy only frees local resources: it cannot block on peers.
  Status s = NcclStatus(ncclCommDestroy(AsComm(comm_)), "ncclCommDestroy");
  if (!s.ok()) spdlog::warn("nccl communicator rank {}: {}", options_.rank, s.message());
  comm_ = nullptr;
}

void NcclCommunicator::StartAbortLocked() {
  if (comm_ == nullptr) return;
  ncclComm_t comm = AsComm(std::exchange(comm_, nullptr));
  std::shared_ptr<AbortState> state = abort_state_;
  {
    std::lock_guard lock(state->mu);
    state->started = true;
  }
  const int device = options_.device;
  const int rank = options_.rank;
  // The thread owns `comm` and the shared state only, never `this`: it may outlive us.
  auto run = [comm, state, device, rank] {
    (void)cudaSetDevice(device);
    Status s = NcclStatus(ncclCommAbort(comm), "ncclCommAbort");
    if (!s.ok()) spdlog::warn("nccl communicator rank {}: {}", rank, s.message());
    {
      std::lock_guard lock(state->mu);
      state->done = true;
    }
    state->cv.notify_all();
  };
  try {
    std::thread(run).detach();
  } catch (const std::system_error& e) {
    spdlog::warn("nccl communicator rank {}: no thread for ncclCommAbort ({}); aborting inline",
                 rank, e.what());
    run();
  }
}

bool NcclCommunicator::WaitForAbort(Duration limit) {
  std::unique_lock lock(abort_state_->mu);
  if (!abort_state_->started) return true;
  return abort_state_->cv.wait_for(lock, limit, [&] { return abort_state_->done; });
}

void NcclCommunicator::AbortComm() {
  {
    std::lock_guard lock(abort_mu_);
    StartAbortLocked();
  }
  if (!WaitForAbort(kAbortJoinTimeout)) {
    spdlog::warn(
        "nccl communicator rank {}: ncclCommAbort did not finish within {} (a CUDA graph still "
        "holding the communicator, or a kernel that never ends?); not waiting for it",
        options_.rank, FormatDuration(kAbortJoinTimeout));
  }
}

void NcclCommunicator::Abort() {
  aborted_.store(true);
  std::lock_guard lock(abort_mu_);
  StartAbortLocked();
}

Status NcclCommunicator::CheckUsable(std::string_view op) const {
  if (!aborted_.load()) return Status::Ok();
  std::string m = std::string(op) + ": the communicator was aborted";
  if (!failure_.empty()) m += " by an earlier failure: " + failure_;
  return Aborted(std::move(m));
}

Status NcclCommunicator::Fail(Status cause, bool record) {
  if (aborted_.exchange(true)) {
    // Abort() (another thread) got here first: this is its doing, not a root cause.
    AbortComm();
    if (cause.code() == StatusCode::kAborted) return cause;
    return Aborted(cause.message() + " (the communicator was being aborted)");
  }
  // Record before aborting: the peers' NCCL calls only start failing once this rank tears its
  // connections down, and by then the store already holds the root cause they will read.
  std::string message = cause.message();
  if (record) {
    auto first = gang_failure_.Publish(cause);
    if (!first.ok()) {
      spdlog::warn("nccl communicator rank {}: could not record the failure in the store: {}",
                   options_.rank, first.status().message());
    } else if (first->rank != options_.rank) {
      message += "; first failure: " + rendezvous::GangFailure::Describe(*first);
    }
  }
  failure_ = message;
  spdlog::error("nccl communicator rank {}: {}", options_.rank, message);
  AbortComm();
  return Status(cause.code(), std::move(message));
}

Status NcclCommunicator::FailAsync(Status cause) {
  if (cause.code() == StatusCode::kAborted) return Fail(std::move(cause), /*record=*/false);
  // NCCL reports a lost peer as a remote or system error on every survivor: the rank that saw
  // the root cause gets a moment to record it, so this one does not claim a second-hand reason.
  gang_failure_.AwaitRootCause();
  return Fail(Status(StatusCode::kUnavailable, cause.message()));
}

Status NcclCommunicator::PollAsync(std::string_view what, bool* in_progress) {
  *in_progress = false;
  ncclResult_t state = ncclSuccess;
  {
    std::lock_guard lock(abort_mu_);
    if (comm_ == nullptr) return AbortedStatus(what);
    ncclResult_t r = ncclCommGetAsyncError(AsComm(comm_), &state);
    if (r != ncclSuccess) state = r;
  }
  if (state == ncclInProgress) {
    *in_progress = true;
    return Status::Ok();
  }
  return NcclStatus(state, what);
}

Status NcclCommunicator::Watch(std::string_view what, SteadyTime& next_probe) {
  if (aborted_.load()) return AbortedStatus(what);
  const SteadyTime now = std::chrono::steady_clock::now();
  if (now < next_probe) return Status::Ok();
  next_probe = now + options_.abort_poll_interval;
  return ProbeAbortKey(what);
}

Status NcclCommunicator::ProbeAbortKey(std::string_view what) {
  auto recorded = gang_failure_.Probe();
  if (!recorded.ok()) return recorded.status().WithContext(what);
  if (!recorded->has_value()) return Status::Ok();
  const rendezvous::FailureRecord& r = **recorded;
  return Aborted(std::string(what) + ": aborted because another rank failed: " +
                 (r.rank < 0 ? r.cause : rendezvous::EncodeFailure(r)));
}

Status NcclCommunicator::Launch(std::string_view op, const std::function<int(void*)>& enqueue) {
  ncclResult_t r = ncclSuccess;
  bool have_comm = false;
  {
    std::lock_guard lock(abort_mu_);
    if (comm_ != nullptr) {
      have_comm = true;
      r = static_cast<ncclResult_t>(enqueue(comm_));
    }
  }
  // Fail takes abort_mu_ itself: never call it with the lock held.
  if (!have_comm) return Fail(AbortedStatus(op), /*record=*/false);
  if (r == ncclSuccess) return Status::Ok();
  if (r != ncclInProgress) return Fail(NcclStatus(r, op));
  // Non-blocking mode: the enqueue finishes in the background (connecting to the peers on
  // first use, for one). Until then NCCL must not be called again on this communicator.
  const SteadyTime deadline = DeadlineAfter(options_.collective_timeout);
  SteadyTime next_probe = FirstProbe(options_.abort_poll_interval);
  for (int spins = 0;; ++spins) {
    bool in_progress = false;
    Status s = PollAsync(op, &in_progress);
    if (!s.ok()) return FailAsync(std::move(s));
    if (!in_progress) return Status::Ok();
    s = Watch(op, next_probe);
    if (!s.ok()) return Fail(std::move(s), /*record=*/false);
    if (std::chrono::steady_clock::now() >= deadline) {
      return Fail(TimedOut(op, options_.collective_timeout));
    }
    Backoff(spins);
  }
}

Status NcclCommunicator::Wait(void* event_handle, std::string_view what) {
  auto event = static_cast<cudaEvent_t>(event_handle);
  RETURN_IF_ERROR(CheckUsable(what));
  if (event == nullptr) return InvalidArgument(std::string(what) + ": no event to wait for");
  const Duration timeout = options_.collective_timeout;
  const SteadyTime deadline = DeadlineAfter(timeout);
  SteadyTime next_probe = FirstProbe(options_.abort_poll_interval);
  bool failed = false;  // the hook already called Fail
  Status s = gpu::WaitEvent(event, timeout, what, [&]() -> Status {
    pending_wait_checks_.Bump();
    bool in_progress = false;
    Status st = PollAsync(what, &in_progress);
    if (!st.ok()) {
      failed = true;
      return FailAsync(std::move(st));
    }
    st = Watch(what, next_probe);
    if (!st.ok()) {
      failed = true;
      return Fail(std::move(st), /*record=*/false);
    }
    // Checked here, before WaitEvent's own (later) deadline, to report it as a collective's.
    if (std::chrono::steady_clock::now() >= deadline) {
      failed = true;
      return Fail(TimedOut(what, timeout));
    }
    return Status::Ok();
  });
  if (s.ok()) {
    // Abort() while this wait was pending: the work may have been cut short.
    if (aborted_.load()) return Fail(AbortedStatus(what), /*record=*/false);
    return s;
  }
  if (failed) return s;
  // WaitEvent's own errors: a CUDA error on the event (a device fault), or its timeout.
  if (s.code() == StatusCode::kDeadlineExceeded) return Fail(TimedOut(what, timeout));
  return Fail(std::move(s));
}

Status NcclCommunicator::RecordAndWait(std::string_view op) {
  RETURN_IF_ERROR(gpu::CudaStatus(cudaEventRecord(done_, stream_), "cudaEventRecord"));
  return Wait(done_, op);
}

Status NcclCommunicator::RunSync(std::string_view op, const std::function<Status()>& body) {
  ScopedDevice device(options_.device);
  Status s = device.status();
  if (s.ok()) s = body();
  // Errors from Launch and Wait have already failed the communicator (and Abort() from another
  // thread explains the rest).
  if (s.ok() || aborted_.load()) return s;
  return Fail(s.WithContext(op));
}

StatusOr<bool> NcclCommunicator::OnDevice(const void* p, std::string_view op) const {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // not a pointer CUDA knows: host memory
    return false;
  }
  if (a.type == cudaMemoryTypeManaged) return true;
  if (a.type == cudaMemoryTypeDevice) {
    if (a.device != options_.device) {
      return InvalidArgument(std::string(op) + ": the buffer is on CUDA device " +
                             std::to_string(a.device) + ", but this rank uses device " +
                             std::to_string(options_.device));
    }
    return true;
  }
  return false;  // pinned or pageable host memory: staged
}

Status NcclCommunicator::EnsureStaging(std::size_t bytes) {
  if (bytes <= staging_bytes_) return Status::Ok();
  std::size_t want = std::max(bytes, staging_bytes_ * 2);
  if (want <= std::numeric_limits<std::size_t>::max() - kStagingGranule) {
    want = AlignUp(want, kStagingGranule);
  }
  if (staging_ != nullptr) {
    // The stream is idle here (every synchronous call waits), so freeing in stream order is
    // immediate in effect and never synchronizes the device.
    (void)(staging_pooled_ ? cudaFreeAsync(staging_, stream_) : cudaFree(staging_));
    staging_ = nullptr;
    staging_bytes_ = 0;
  }
  void* p = nullptr;
  cudaError_t err = staging_pooled_ ? cudaMallocAsync(&p, want, stream_) : cudaMalloc(&p, want);
  RETURN_IF_ERROR(gpu::CudaStatus(
      err, "allocating a " + std::to_string(want) + "-byte device buffer to stage host memory"));
  staging_ = p;
  staging_bytes_ = want;
  return Status::Ok();
}

Status NcclCommunicator::AllReduce(float* data, std::size_t count, ReduceOp op) {
  constexpr std::string_view kOp = "all-reduce";
  RETURN_IF_ERROR(CheckUsable(kOp));
  if (count == 0) return Status::Ok();
  if (data == nullptr) return InvalidArgument("all-reduce: null buffer");
  if (count > std::numeric_limits<std::size_t>::max() / sizeof(float)) {
    return InvalidArgument("all-reduce: count " + std::to_string(count) + " is too large");
  }
  const std::size_t bytes = count * sizeof(float);
  ASSIGN_OR_RETURN(const bool on_device, OnDevice(data, kOp));
  return RunSync(kOp, [&]() -> Status {
    float* buf = data;
    if (!on_device) {
      RETURN_IF_ERROR(EnsureStaging(bytes));
      buf = static_cast<float*>(staging_);
      RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buf, data, bytes, cudaMemcpyHostToDevice, stream_));
    }
    RETURN_IF_ERROR(Launch(kOp, [&](void* comm) {
      return static_cast<int>(
          ncclAllReduce(buf, buf, count, ncclFloat32, ToNccl(op), AsComm(comm), stream_));
    }));
    RETURN_IF_ERROR(RecordAndWait(kOp));
    if (!on_device) {
      // Only after the collective completed under the watchdog: a copy into pageable memory
      // may block the host until the stream drains.
      RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(data, buf, bytes, cudaMemcpyDeviceToHost, stream_));
      RETURN_IF_ERROR(RecordAndWait(kOp));
    }
    return Status::Ok();
  });
}

Status NcclCommunicator::Broadcast(void* data, std::size_t bytes, int root) {
  constexpr std::string_view kOp = "broadcast";
  RETURN_IF_ERROR(CheckUsable(kOp));
  if (root < 0 || root >= options_.size) {
    return InvalidArgument("broadcast: root " + std::to_string(root) +
                           " is out of range for world size " + std::to_string(options_.size));
  }
  if (bytes == 0) return Status::Ok();
  if (data == nullptr) return InvalidArgument("broadcast: null buffer");
  ASSIGN_OR_RETURN(const bool on_device, OnDevice(data, kOp));
  const bool is_root = options_.rank == root;
  return RunSync(kOp, [&]() -> Status {
    void* buf = data;
    if (!on_device) {
      RETURN_IF_ERROR(EnsureStaging(bytes));
      buf = staging_;
      if (is_root) {
        RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buf, data, bytes, cudaMemcpyHostToDevice, stream_));
      }
    }
    RETURN_IF_ERROR(Launch(kOp, [&](void* comm) {
      return static_cast<int>(
          ncclBroadcast(buf, buf, bytes, ncclUint8, root, AsComm(comm), stream_));
    }));
    RETURN_IF_ERROR(RecordAndWait(kOp));
    if (!on_device && !is_root) {
      RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(data, buf, bytes, cudaMemcpyDeviceToHost, stream_));
      RETURN_IF_ERROR(RecordAndWait(kOp));
    }
    return Status::Ok();
  });
}

// A one-element all-reduce: no rank finishes it before every rank has entered it.
Status NcclCommunicator::Barrier() {
  constexpr std::string_view kOp = "barrier";
  RETURN_IF_ERROR(CheckUsable(kOp));
  return RunSync(kOp, [&]() -> Status {
    RETURN_IF_ERROR(EnsureStaging(1));
    void* buf = staging_;
    RETURN_IF_ERROR(Launch(kOp, [&](void* comm) {
      return static_cast<int>(
          ncclAllReduce(buf, buf, 1, ncclUint8, ncclSum, AsComm(comm), stream_));
    }));
    return RecordAndWait(kOp);
  });
}

Status NcclCommunicator::AllGather(const void* in, std::size_t bytes, void* out) {
  constexpr std::string_view kOp = "all-gather";
  RETURN_IF_ERROR(CheckUsable(kOp));
  if (bytes == 0) return Status::Ok();
  if (in == nullptr || out == nullptr) return InvalidArgument("all-gather: null buffer");
  const auto n = static_cast<std::size_t>(options_.size);
  if (bytes > (std::numeric_limits<std::size_t>::max() - 2 * kStagingAlign) / (n + 1)) {
    return InvalidArgument("all-gather: " + std::to_string(bytes) + " bytes per rank is too large");
  }
  const std::size_t total = bytes * n;
  ASSIGN_OR_RETURN(const bool in_on_device, OnDevice(in, kOp));
  ASSIGN_OR_RETURN(const bool out_on_device, OnDevice(out, kOp));
  // Staging layout: the gathered output first, then this rank's input.
  const std::size_t out_bytes = out_on_device ? 0 : AlignUp(total, kStagingAlign);
  const std::size_t need = out_bytes + (in_on_device ? 0 : bytes);
  return RunSync(kOp, [&]() -> Status {
    if (need > 0) RETURN_IF_ERROR(EnsureStaging(need));
    char* base = static_cast<char*>(staging_);
    void* dout = out_on_device ? out : base;
    const void* din = in;
    if (!in_on_device) {
      din = base + out_bytes;
      RT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(base + out_bytes, in, bytes, cudaMemcpyHostToDevice, stream_));
    }
    RETURN_IF_ERROR(Launch(kOp, [&](void* comm) {
      return static_cast<int>(ncclAllGather(din, dout, bytes, ncclUint8, AsComm(comm), stream_));
    }));
    RETURN_IF_ERROR(RecordAndWait(kOp));
    if (!out_on_device) {
      RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out, dout, total, cudaMemcpyDeviceToHost, stream_));
      RETURN_IF_ERROR(RecordAndWait(kOp));
    }
    return Status::Ok();
  });
}

Status NcclCommunicator::AllReduceAsync(float* device_data, std::size_t count, ReduceOp op,
                                        void* stream_handle) {
  auto stream = static_cast<cudaStream_t>(stream_handle);
  constexpr std::string_view kOp = "all-reduce";
  RETURN_IF_ERROR(CheckUsable(kOp));
  if (count == 0) return Status::Ok();
  if (device_data == nullptr) return InvalidArgument("all-reduce: null buffer");
  // No CUDA calls of our own here: this runs inside stream capture, and NCCL makes the
  // communicator's device current itself.
  return Launch(kOp, [&](void* comm) {
    return static_cast<int>(ncclAllReduce(device_data, device_data, count, ncclFloat32, ToNccl(op),
                                          AsComm(comm), stream));
  });
}

}  // namespace ringtrain::comm
