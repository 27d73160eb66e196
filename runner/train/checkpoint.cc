#include "runner/train/checkpoint.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "common/random.h"
#include "common/runner_contract.h"
#include "common/stop.h"

namespace ringtrain::train {
namespace {

constexpr char kMagicV1[8] = {'R', 'T', 'C', 'K', 'P', 'T', '0', '1'};
constexpr char kMagicV2[8] = {'R', 'T', 'C', 'K', 'P', 'T', '0', '2'};
constexpr char kMagicV3[8] = {'R', 'T', 'C', 'K', 'P', 'T', '0', '3'};
// A model record longer than this is corruption (a canonical string is a line per layer at most).
constexpr std::uint32_t kMaxModelRecord = 1u << 20;
// How often a wait to read a checkpoint again looks at the drain flag (which has no descriptor).
constexpr Duration kDrainCheck{50};

// The first format (no data position in samples, no world size); still read.
struct HeaderV1 {
  char magic[8];
  std::int64_t global_step;
  std::int64_t step_in_epoch;
  std::int64_t optimizer_steps;
  std::int64_t num_params;
  std::int64_t state_size;  // bytes 40-47, as in V2
  std::int32_t epoch;
  std::uint32_t crc;  // over the header with crc = 0, then the payload
};

// The current format: V1's first 48 bytes, then the epoch, the world size and the position.
struct HeaderV2 {
  char magic[8];
  std::int64_t global_step;
  std::int64_t step_in_epoch;
  std::int64_t optimizer_steps;
  std::int64_t num_params;
  std::int64_t state_size;
  std::int32_t epoch;
  std::int32_t world_size;
  std::int64_t epoch_samples;
  std::uint32_t crc;  // over the header with crc = 0, then the model record, then the payload
  // Format 3 ("RTCKPT03", same header): bytes of the model record that follow the header
  // (the architecture, '\n', the features); 0 and reserved in format 2.
  std::uint32_t model_bytes;
};
static_assert(sizeof(HeaderV1) == 56 && sizeof(HeaderV2) == 72);

std::string ModelRecord(const CheckpointModel& m) { return m.architecture + "\n" + m.features; }

std::string Quoted(const std::string& s) { return s.empty() ? "(none)" : "\"" + s + "\""; }

// The number of values a recorded shape ("784", "1x28x28") or an architecture's input
// ("input=1x28x28;...") holds; 0 when the text is not such a shape.
std::uint64_t ShapeValues(std::string_view text) {
  std::uint64_t values = 1;
  while (true) {
    const std::size_t x = text.find('x');
    const std::string_view dim = text.substr(0, x);
    std::uint64_t n = 0;
    if (dim.empty() || dim.size() > 9) return 0;
    for (const char c : dim) {
      if (c < '0' || c > '9') return 0;
      n = n * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (n == 0) return 0;
    values *= n;
    if (x == std::string_view::npos) return values;
    text.remove_prefix(x + 1);
  }
}

// Whether a checkpoint written for `had` computes exactly what the job's model `want` does
// although their records differ: both architectures begin with a flatten and agree on every
// layer after their input, and both inputs hold as many values. A flatten reads the values of
// a sample in the order the dataset stores them whatever shape was declared, so the
// parameters mean the same. This is how builds before the declared CSV shape recorded a CSV
// job that declares a 3-D `inputShape` ("input=784x1x1", features "784"; now "1x28x28").
// Also one architecture, its input included, on data declared in another layout of as many
// values: the model reads the same values into the same input. This is how builds before IDX
// images could be flat recorded an IDX job that declares `inputShape: [784]` for a model of
// input [1, 28, 28] (features "1x28x28"; now "784").
bool SameComputation(const CheckpointModel& had, const CheckpointModel& want) {
  if (had.architecture == want.architecture) {
    const std::uint64_t values = ShapeValues(want.features);
    return values != 0 && ShapeValues(had.features) == values;
  }
  constexpr std::string_view kInput = "input=";
  constexpr std::string_view kFlattenFirst = ";flatten;";
  auto split = [&](std::string_view arch, std::string_view* input, std::string_view* rest) {
    if (!arch.starts_with(kInput)) return false;
    arch.remove_prefix(kInput.size());
    const std::size_t semi = arch.find(';');
    if (semi == std::string_view::npos) return false;
    *input = arch.substr(0, semi);
    *rest = arch.substr(semi);
    return rest->starts_with(kFlattenFirst);
  };
  std::string_view had_input, had_rest, want_input, want_rest;
  if (!split(had.architecture, &had_input, &had_rest) ||
      !split(want.architecture, &want_input, &want_rest) || had_rest != want_rest) {
    return false;
  }
  const std::uint64_t values = ShapeValues(want_input);
  return values != 0 && ShapeValues(had_input) == values && ShapeValues(had.features) == values &&
         ShapeValues(want.features) == values;
}

template <typename Header>
std::uint32_t Crc(const Header& h, const std::string& record, std::span<const float> a,
                  std::span<const float> b) {
  Header copy = h;
  copy.crc = 0;
  uLong c = crc32(0L, Z_NULL, 0);
  c = crc32(c, reinterpret_cast<const Bytef*>(&copy), sizeof(copy));
  c = crc32(c, reinterpret_cast<const Bytef*>(record.data()), static_cast<uInt>(record.size()));
  // zlib's crc32 takes an unsigned int length: feed large payloads in pieces.
  auto feed = [&](std::span<const float> v) {
    const auto* p = reinterpret_cast<const Bytef*>(v.data());
    std::size_t left = v.size_bytes();
    while (left > 0) {
      const auto n = static_cast<uInt>(std::min<std::size_t>(left, 1u << 30));
      c = crc32(c, p, n);
      p += n;
      left -= n;
    }
  };
  feed(a);
  feed(b);
  return static_cast<std::uint32_t>(c);
}

Status WriteAll(int fd, const void* data, std::size_t len, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("write " + path, errno);
    if (n == 0) return Unavailable("write " + path + ": no progress");
    p += n;
    len -= static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

Status MakeDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!ec) return Status::Ok();
  if (ec == std::errc::file_exists) {
    // A symbolic link whose target is gone (the dir, or a folder above it) reads "File exists":
    // name the link and where it points instead.
    std::filesystem::path prefix;
    for (const auto& part : std::filesystem::path(dir)) {
      prefix /= part;
      std::error_code link_ec;
      if (std::filesystem::is_symlink(std::filesystem::symlink_status(prefix, link_ec)) &&
          !std::filesystem::exists(prefix, link_ec)) {
        const std::filesystem::path target = std::filesystem::read_symlink(prefix, link_ec);
        return FailedPrecondition("checkpoint dir " + dir + ": " + prefix.string() +
                                  " is a symbolic link to " + target.string() +
                                  ", which does not exist (create it, or fix the link)");
      }
    }
  }
  return ErrnoStatus("checkpoint dir " + dir, ec.value());
}

std::vector<std::pair<std::int64_t, std::string>> ListCheckpoints(const std::string& dir,
                                                                  std::error_code& ec) {
  std::vector<std::pair<std::int64_t, std::string>> out;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) != 0 || name.size() < 10 || name.substr(name.size() - 4) != ".bin") {
      continue;
    }
    std::string num = name.substr(5, name.size() - 9);
    if (num.empty() || num.size() > 18 || !std::all_of(num.begin(), num.end(), ::isdigit)) {
      continue;
    }
    out.emplace_back(std::stoll(num), e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Removes <dir>/ckpt-<N>.bin.tmp[.*] with N < `below`.
void RemoveStaleTemporaries(const std::string& dir, std::int64_t below) {
  std::error_code ec;
  std::vector<std::filesystem::path> stale;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::size_t tmp = name.find(".bin.tmp");
    if (name.rfind("ckpt-", 0) != 0 || tmp == std::string::npos || tmp <= 5 ||
        (name.size() > tmp + 8 && name[tmp + 8] != '.')) {
      continue;
    }
    const std::string num = name.substr(5, tmp - 5);
    if (num.size() > 18 || !std::all_of(num.begin(), num.end(), ::isdigit)) continue;
    if (std::stoll(num) < below) stale.push_back(e.path());
  }
  for (const auto& p : stale) std::filesystem::remove(p, ec);
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads one checkpoint. Every size in the header is checked against the file's size before
// anything is allocated, and against the model's: an intact file of another model is
// FailedPrecondition, anything inconsistent is DataLoss (skipped by the caller).
StatusOr<CheckpointState> ReadCheckpoint(const std::string& path, std::size_t num_params,
                                         std::size_t state_size, const ExpectedModel* expected) {
  // What the system says of a file: an error the volume may heal (EIO, ESTALE, ETIMEDOUT on a
  // network file system, EMFILE, ENOMEM) is retryable and leaves the file alone (the caller
  // reads it again, then the gang restarts and does); no permission is permanent; anything else
  // about this file (gone, a directory) makes it unreadable, DataLoss, skipped for an older one.
  auto os_error = [&path](const char* what, int err) {
    const StatusCode code = StatusCodeForErrno(err);
    return ErrnoStatus(code == StatusCode::kUnavailable || code == StatusCode::kPermissionDenied
                           ? code
                           : StatusCode::kDataLoss,
                       what + (" " + path), err);
  };
  // Only a regular file is a checkpoint: a FIFO by that name blocked the open until the read's
  // timeout (1800 s), a socket failed it with ENXIO, read as a volume's error and retried. Such
  // a file is unreadable (DataLoss), skipped for an older one. Opened without blocking, and
  // checked again once open, for what took its place meanwhile.
  struct stat pre {};
  if (::stat(path.c_str(), &pre) == 0 && !S_ISREG(pre.st_mode)) {
    return DataLoss(path + ": not a regular file");
  }
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) return os_error("open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return os_error("stat", errno);
  if (!S_ISREG(st.st_mode)) return DataLoss(path + ": not a regular file");
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  auto read_all = [&](void* data, std::size_t len) -> Status {
    char* p = static_cast<char*>(data);
    while (len > 0) {
      ssize_t n = ::read(fd.get(), p, len);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return os_error("read", errno);
      if (n == 0) return DataLoss(path + ": truncated checkpoint");
      p += n;
      len -= static_cast<std::size_t>(n);
    }
    return Status::Ok();
  };
  HeaderV2 h{};
  HeaderV1 h1{};  // as read, for the CRC of a first-format file
  bool v2 = false;
  bool v3 = false;
  RETURN_IF_ERROR(read_all(h.magic, sizeof(h.magic)));
  if (std::memcmp(h.magic, kMagicV2, sizeof(kMagicV2)) == 0 ||
      std::memcmp(h.magic, kMagicV3, sizeof(kMagicV3)) == 0) {
    v2 = true;
    v3 = std::memcmp(h.magic, kMagicV3, sizeof(kMagicV3)) == 0;
    RETURN_IF_ERROR(read_all(reinterpret_cast<char*>(&h) + 8, sizeof(HeaderV2) - 8));
    if (!v3) h.model_bytes = 0;
  } else if (std::memcmp(h.magic, kMagicV1, sizeof(kMagicV1)) == 0) {
    std::memcpy(h1.magic, h.magic, sizeof(h1.magic));
    RETURN_IF_ERROR(read_all(reinterpret_cast<char*>(&h1) + 8, sizeof(HeaderV1) - 8));
    h.global_step = h1.global_step;
    h.step_in_epoch = h1.step_in_epoch;
    h.optimizer_steps = h1.optimizer_steps;
    h.num_params = h1.num_params;
    h.state_size = h1.state_size;
    h.epoch = h1.epoch;
    h.world_size = 0;
    h.epoch_samples = -1;
    h.crc = h1.crc;
  } else {
    return DataLoss(path + ": not a ringtrain checkpoint");
  }
  const std::uint64_t header_bytes = v2 ? sizeof(HeaderV2) : sizeof(HeaderV1);
  if (h.model_bytes > kMaxModelRecord || header_bytes + h.model_bytes > file_size) {
    return DataLoss(path + ": header announces a model record of " + std::to_string(h.model_bytes) +
                    " bytes in a file of " + std::to_string(file_size) +
                    " (truncated or corrupt checkpoint)");
  }
  std::string record(h.model_bytes, '\0');
  RETURN_IF_ERROR(read_all(record.data(), record.size()));
  const std::uint64_t payload_bytes = file_size - header_bytes - h.model_bytes;
  // Both counts are bounded by the file before they are multiplied or allocated.
  if (h.num_params < 0 || h.state_size < 0 ||
      static_cast<std::uint64_t>(h.num_params) > payload_bytes / sizeof(float) ||
      static_cast<std::uint64_t>(h.state_size) > payload_bytes / sizeof(float) ||
      (static_cast<std::uint64_t>(h.num_params) + static_cast<std::uint64_t>(h.state_size)) *
              sizeof(float) !=
          payload_bytes) {
    return DataLoss(path + ": header announces " + std::to_string(h.num_params) +
                    " parameters and " + std::to_string(h.state_size) +
                    " optimizer values, the file holds " + std::to_string(payload_bytes) +
                    " bytes after the header (truncated or corrupt checkpoint)");
  }
  if (h.global_step < 0 || h.epoch < 0 || h.step_in_epoch < 0 || h.optimizer_steps < 0 ||
      h.world_size < 0 || h.epoch_samples < -1) {
    return DataLoss(path + ": negative position in header (corrupt checkpoint)");
  }
  const bool same_model = static_cast<std::uint64_t>(h.num_params) == num_params &&
                          static_cast<std::uint64_t>(h.state_size) == state_size;
  CheckpointState out;
  std::uint32_t crc = 0;
  if (same_model) {
    out.params.resize(static_cast<std::size_t>(h.num_params));
    out.optimizer_state.resize(static_cast<std::size_t>(h.state_size));
    RETURN_IF_ERROR(read_all(out.params.data(), out.params.size() * sizeof(float)));
    RETURN_IF_ERROR(
        read_all(out.optimizer_state.data(), out.optimizer_state.size() * sizeof(float)));
    crc = v2 ? Crc(h, record, out.params, out.optimizer_state)
             : Crc(h1, record, out.params, out.optimizer_state);
  } else {
    // Another model's counts: checked whole (a corrupt file is skipped, an intact one of
    // another model refused), but streamed, nothing of it kept. Allocated, counts that a sparse
    // file of 40 GB holds failed the read with bad_alloc before an older checkpoint was tried.
    uLong c = v2 ? Crc(h, record, {}, {}) : Crc(h1, record, {}, {});
    std::vector<char> chunk(std::size_t{1} << 20);
    for (std::uint64_t left = payload_bytes; left > 0;) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk.size()));
      RETURN_IF_ERROR(read_all(chunk.data(), n));
      c = crc32(c, reinterpret_cast<const Bytef*>(chunk.data()), static_cast<uInt>(n));
      left -= n;
    }
    crc = static_cast<std::uint32_t>(c);
  }
  if (crc != h.crc) return DataLoss(path + ": checksum mismatch (torn or corrupt checkpoint)");
  if (v3) {
    const std::size_t nl = record.find('\n');
    if (nl == std::string::npos) return DataLoss(path + ": malformed model record");
    out.model.architecture = record.substr(0, nl);
    out.model.features = record.substr(nl + 1);
  }
  if (expected != nullptr) {
    const CheckpointModel& want = expected->model;
    if (out.model.architecture.empty()) {
      if (!expected->accept_unrecorded) {
        return FailedPrecondition(
            path +
            ": written before checkpoints recorded the architecture, and only the presets "
            "(--model mlp|cnn) resume from such a checkpoint; this job's model is " +
            Quoted(want.architecture) +
            " (start it with an empty checkpoint directory or another job name)");
      }
    } else if (out.model != want) {
      if (!SameComputation(out.model, want)) {
        return FailedPrecondition(
            path + std::string(contract::kCheckpointOfAnotherModel) +
            "the checkpoint's architecture is " + Quoted(out.model.architecture) +
            " on data of shape " + Quoted(out.model.features) + ", this job's is " +
            Quoted(want.architecture) + " on data of shape " + Quoted(want.features) +
            " (start it with an empty checkpoint directory or another job name)");
      }
      spdlog::info(
          "{}: written for input {} ({}), this job declares {} ({}); the model begins "
          "with a flatten, so the parameters mean the same and it resumes",
          path, Quoted(out.model.features), out.model.architecture, Quoted(want.features),
          want.architecture);
    }
  }
  if (!same_model) {
    return FailedPrecondition(
        path + ": written for a different model or optimizer (" + std::to_string(h.num_params) +
        " parameters and " + std::to_string(h.state_size) + " optimizer values, expected " +
        std::to_string(num_params) + " and " + std::to_string(state_size) + ")");
  }
  out.global_step = h.global_step;
  out.epoch = h.epoch;
  out.step_in_epoch = h.step_in_epoch;
  out.optimizer_steps = h.optimizer_steps;
  out.epoch_samples = h.epoch_samples;
  out.world_size = h.world_size;
  return out;
}

}  // namespace

std::string CheckpointPath(const std::string& dir, std::int64_t global_step) {
  return dir + "/ckpt-" + std::to_string(global_step) + ".bin";
}

Status WriteCheckpoint(const std::string& dir, const CheckpointPosition& position,
                       std::span<const float> params, std::span<const float> optimizer_state,
                       int keep) {
  return WriteCheckpoint(dir, position, CheckpointModel{}, params, optimizer_state, keep);
}

Status WriteCheckpoint(const std::string& dir, const CheckpointPosition& position,
                       const CheckpointModel& model, std::span<const float> params,
                       std::span<const float> optimizer_state, int keep) {
  // A diverged state is no state to resume from, and would push out the good checkpoints that
  // a run with other settings (a lower learning rate) resumes from: permanent, as the
  // divergence itself (the training loop reads the loss first; this is what it cannot see:
  // the update of the step a checkpoint follows).
  for (const auto& [what, values] :
       {std::pair{"weight", params}, {"optimizer state", optimizer_state}}) {
    const auto bad =
        std::find_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); });
    if (bad != values.end()) {
      return FailedPrecondition(
          "the " + std::string(what) + " at index " + std::to_string(bad - values.begin()) +
          " is " + (std::isnan(*bad) ? "NaN" : "infinite") + " at step " +
          std::to_string(position.global_step) + ": " + std::string(kDivergedCauses) +
          "; this checkpoint is not written, the ones before it are kept");
    }
  }
  RETURN_IF_ERROR(MakeDir(dir));
  // No recorded model: the second format, as before records existed.
  const bool record_model = !model.architecture.empty();
  const std::string record = record_model ? ModelRecord(model) : std::string();
  if (record.size() > kMaxModelRecord || model.architecture.find('\n') != std::string::npos) {
    return InvalidArgument("checkpoint: a model record of " + std::to_string(record.size()) +
                           " bytes, or with a line break in the architecture");
  }
  HeaderV2 h{};
  std::memcpy(h.magic, record_model ? kMagicV3 : kMagicV2, sizeof(kMagicV2));
  h.model_bytes = static_cast<std::uint32_t>(record.size());
  h.global_step = position.global_step;
  h.step_in_epoch = position.step_in_epoch;
  h.optimizer_steps = position.optimizer_steps;
  h.num_params = static_cast<std::int64_t>(params.size());
  h.state_size = static_cast<std::int64_t>(optimizer_state.size());
  h.epoch = position.epoch;
  h.world_size = position.world_size;
  h.epoch_samples = position.epoch_samples;
  h.crc = Crc(h, record, params, optimizer_state);

  std::string final_path = CheckpointPath(dir, position.global_step);
  // A file of this write's own: two writers of one step (a periodic write a timeout left behind
  // on its helper thread, then the save of the kept state at the same step) sharing one
  // temporary name truncated and interleaved each other's bytes, and the first rename published
  // a file the other went on writing into. A random part too: in containers every runner may
  // be pid 1, and two pods may share a volume.
  static std::atomic<std::uint64_t> writes{0};
  static const std::string process = std::to_string(::getpid()) + "-" + RandomToken(4);
  std::string tmp = final_path + ".tmp." + process + "." +
                    std::to_string(writes.fetch_add(1, std::memory_order_relaxed));
  Status s;
  {
    // A new file, never one a link points to: O_EXCL does not follow a symbolic link.
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) return ErrnoStatus("checkpoint dir " + dir + ": open " + tmp, errno);
    s = WriteAll(fd.get(), &h, sizeof(h), tmp);
    if (s.ok()) s = WriteAll(fd.get(), record.data(), record.size(), tmp);
    if (s.ok()) s = WriteAll(fd.get(), params.data(), params.size_bytes(), tmp);
    if (s.ok()) s = WriteAll(fd.get(), optimizer_state.data(), optimizer_state.size_bytes(), tmp);
    if (s.ok() && ::fsync(fd.get()) != 0) s = ErrnoStatus("fsync " + tmp, errno);
  }
  if (s.ok() && ::rename(tmp.c_str(), final_path.c_str()) != 0) {
    s = ErrnoStatus("rename " + tmp, errno);
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  {
    Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dfd.get() >= 0) ::fsync(dfd.get());
  }
  std::error_code ec;
  auto all = ListCheckpoints(dir, ec);
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i) {
    std::filesystem::remove(all[i].second, ec);
  }
  // Temporary files of steps older than every kept checkpoint: what a killed writer left (a
  // writer still at one, left behind by a timeout, then fails its rename; nobody waits for it).
  const std::size_t kept = std::min(all.size(), static_cast<std::size_t>(std::max(keep, 1)));
  if (kept > 0) RemoveStaleTemporaries(dir, all[all.size() - kept].first);
  return Status::Ok();
}

Status CheckCheckpointDirWritable(const std::string& dir) {
  RETURN_IF_ERROR(MakeDir(dir));
  // A name of this process's own, created new (O_EXCL does not follow a symbolic link): a fixed
  // name opened with O_TRUNC let a link planted there truncate any file the rank could write
  // (review: as root, any file).
  const std::string probe =
      dir + "/.ringtrain-write-probe." + std::to_string(::getpid()) + "-" + RandomToken(4);
  Status s;
  {
    Fd fd(::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) return ErrnoStatus("checkpoint dir " + dir + ": write probe " + probe, errno);
    // A block, so a full volume (ENOSPC) shows now rather than at the first checkpoint.
    std::vector<char> block(4096, 0);
    s = WriteAll(fd.get(), block.data(), block.size(), probe).WithContext("checkpoint dir " + dir);
    if (s.ok() && ::fsync(fd.get()) != 0) s = ErrnoStatus("checkpoint dir " + dir, errno);
  }
  ::unlink(probe.c_str());
  return s;
}

bool WaitToReadCheckpointAgain(Duration d) {
  const SteadyTime deadline = DeadlineAfter(d);
  // A draining rank's first SIGTERM sets only DrainFlag, which no descriptor signals: SleepOrStop
  // wakes on a stop at once and the drain is looked at between its short sleeps.
  while (!DrainFlag().load()) {
    const int left = MillisLeft(deadline);
    if (left == 0) return true;
    if (!SleepOrStop(std::min(Duration{left}, kDrainCheck))) return false;
  }
  return false;
}

StatusOr<CheckpointPosition> ReadCheckpointHeader(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) return ErrnoStatus("open " + path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return DataLoss(path + ": not a regular file");
  // Formats 1 to 3 share the first 52 bytes: the magic, global_step at 8, epoch at 48.
  HeaderV1 h{};
  static_assert(offsetof(HeaderV1, global_step) == offsetof(HeaderV2, global_step) &&
                offsetof(HeaderV1, epoch) == offsetof(HeaderV2, epoch));
  const ssize_t n = ::pread(fd.get(), &h, offsetof(HeaderV1, epoch) + sizeof(h.epoch), 0);
  if (n < 0) return ErrnoStatus("read " + path, errno);
  const bool ours = std::memcmp(h.magic, kMagicV1, sizeof(kMagicV1)) == 0 ||
                    std::memcmp(h.magic, kMagicV2, sizeof(kMagicV2)) == 0 ||
                    std::memcmp(h.magic, kMagicV3, sizeof(kMagicV3)) == 0;
  if (static_cast<std::size_t>(n) < offsetof(HeaderV1, epoch) + sizeof(h.epoch) || !ours ||
      h.global_step < 0 || h.epoch < 0) {
    return DataLoss(path + ": not a ringtrain checkpoint");
  }
  CheckpointPosition p;
  p.global_step = h.global_step;
  p.epoch = h.epoch;
  return p;
}

StatusOr<CheckpointState> LoadNewestCheckpoint(const std::string& dir, std::size_t num_params,
                                               std::size_t state_size,
                                               const ExpectedModel* expected,
                                               const CheckpointReadRetry& retry) {
  std::error_code ec;
  auto all = ListCheckpoints(dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return ErrnoStatus("checkpoint dir " + dir, ec.value());
  }
  std::string reasons;
  int retried = 0;  // one budget for the whole load
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    auto st = ReadCheckpoint(it->second, num_params, state_size, expected);
    // Only what the volume may heal is read again; the same file, before any older one.
    while (!st.ok() && st.status().code() == StatusCode::kUnavailable && retried < retry.retries) {
      const Duration wait = BackoffDelay(retry.backoff, retried);
      ++retried;
      // The message names the file and the errno ("read /ckpt/ckpt-500.bin: Input/output error").
      spdlog::warn("checkpoint: {}; reading it again in {} (retry {} of {})", st.status().message(),
                   FormatDuration(wait), retried, retry.retries);
      if (!(retry.wait ? retry.wait(wait) : WaitToReadCheckpointAgain(wait))) {
        return Unavailable(st.status().message() + " (the wait to read it again, retry " +
                           std::to_string(retried) + " of " + std::to_string(retry.retries) +
                           ", was interrupted by a stop request)");
      }
      st = ReadCheckpoint(it->second, num_params, state_size, expected);
    }
    // The name says which is the newest: a file that holds another step (a copy, a rename) would
    // be resumed from in another's place, and kept forever by the retention of the newest.
    if (st.ok() && st->global_step != it->first) {
      st = DataLoss(it->second + ": named for step " + std::to_string(it->first) +
                    " but holds step " + std::to_string(st->global_step));
    }
    if (st.ok()) return st;
    if (st.status().code() != StatusCode::kDataLoss) return st.status();
    // Moved aside, not deleted: left in place, a corrupt file numbered above the checkpoints
    // written from now on would keep counting as one of the newest `keep` and evict them.
    std::filesystem::rename(it->second, it->second + ".corrupt", ec);
    spdlog::warn("skipping checkpoint{}: {}", ec ? "" : " (kept as " + it->second + ".corrupt)",
                 st.status().message());
    if (!reasons.empty()) reasons += "; ";
    reasons += st.status().message();
  }
  if (all.empty()) return NotFound("no checkpoint in " + dir);
  return DataLoss("none of the " + std::to_string(all.size()) + " checkpoints in " + dir +
                  " is readable: " + reasons);
}

}  // namespace ringtrain::train
