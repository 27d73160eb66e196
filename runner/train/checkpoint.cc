#include "runner/train/checkpoint.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace ringtrain::train {
namespace {

constexpr char kMagic[8] = {'R', 'T', 'C', 'K', 'P', 'T', '0', '1'};

struct Header {
  char magic[8];
  std::int64_t global_step;
  std::int64_t step_in_epoch;
  std::int64_t optimizer_steps;
  std::int64_t num_params;
  std::int64_t state_size;
  std::int32_t epoch;
  std::uint32_t crc;  // over the header with crc = 0, then the payload
};

std::uint32_t Crc(const Header& h, std::span<const float> a, std::span<const float> b) {
  Header copy = h;
  copy.crc = 0;
  uLong c = crc32(0L, Z_NULL, 0);
  c = crc32(c, reinterpret_cast<const Bytef*>(&copy), sizeof(copy));
  c = crc32(c, reinterpret_cast<const Bytef*>(a.data()), static_cast<uInt>(a.size_bytes()));
  c = crc32(c, reinterpret_cast<const Bytef*>(b.data()), static_cast<uInt>(b.size_bytes()));
  return static_cast<std::uint32_t>(c);
}

Status WriteAll(int fd, const void* data, std::size_t len, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus(StatusCode::kUnavailable, "write " + path, errno);
    p += n;
    len -= static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

std::vector<std::pair<std::int64_t, std::string>> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<std::int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) != 0 || name.size() < 10 || name.substr(name.size() - 4) != ".bin") {
      continue;
    }
    std::string num = name.substr(5, name.size() - 9);
    if (num.empty() || !std::all_of(num.begin(), num.end(), ::isdigit)) continue;
    out.emplace_back(std::stoll(num), e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

StatusOr<CheckpointState> ReadCheckpoint(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(StatusCode::kNotFound, "open " + path, errno);
  auto read_all = [&](void* data, std::size_t len) -> Status {
    char* p = static_cast<char*>(data);
    while (len > 0) {
      ssize_t n = ::read(fd, p, len);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return DataLoss(path + ": truncated checkpoint");
      p += n;
      len -= static_cast<std::size_t>(n);
    }
    return Status::Ok();
  };
  Header h{};
  Status s = read_all(&h, sizeof(h));
  CheckpointState st;
  if (s.ok() && std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) {
    s = DataLoss(path + ": not a ringtrain checkpoint");
  }
  if (s.ok() && (h.num_params < 0 || h.state_size < 0 || h.num_params > (1LL << 32) ||
                 h.state_size > (1LL << 34))) {
    s = DataLoss(path + ": implausible sizes in header");
  }
  if (s.ok()) {
    st.params.resize(static_cast<std::size_t>(h.num_params));
    st.optimizer_state.resize(static_cast<std::size_t>(h.state_size));
    s = read_all(st.params.data(), st.params.size() * sizeof(float));
  }
  if (s.ok()) s = read_all(st.optimizer_state.data(), st.optimizer_state.size() * sizeof(float));
  ::close(fd);
  RETURN_IF_ERROR(s);
  if (Crc(h, st.params, st.optimizer_state) != h.crc) {
    return DataLoss(path + ": checksum mismatch (torn or corrupt checkpoint)");
  }
  st.global_step = h.global_step;
  st.epoch = h.epoch;
  st.step_in_epoch = h.step_in_epoch;
  st.optimizer_steps = h.optimizer_steps;
  return st;
}

}  // namespace

Status WriteCheckpoint(const std::string& dir, std::int64_t global_step, std::int32_t epoch,
                       std::int64_t step_in_epoch, std::int64_t optimizer_steps,
                       std::span<const float> params, std::span<const float> optimizer_state,
                       int keep) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable("checkpoint dir " + dir + ": " + ec.message());
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.global_step = global_step;
  h.step_in_epoch = step_in_epoch;
  h.optimizer_steps = optimizer_steps;
  h.num_params = static_cast<std::int64_t>(params.size());
  h.state_size = static_cast<std::int64_t>(optimizer_state.size());
  h.epoch = epoch;
  h.crc = Crc(h, params, optimizer_state);

  std::string final_path = dir + "/ckpt-" + std::to_string(global_step) + ".bin";
  std::string tmp = final_path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(StatusCode::kUnavailable, "open " + tmp, errno);
  Status s = WriteAll(fd, &h, sizeof(h), tmp);
  if (s.ok()) s = WriteAll(fd, params.data(), params.size_bytes(), tmp);
  if (s.ok()) s = WriteAll(fd, optimizer_state.data(), optimizer_state.size_bytes(), tmp);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoStatus(StatusCode::kUnavailable, "fsync " + tmp, errno);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), final_path.c_str()) != 0) {
    s = ErrnoStatus(StatusCode::kUnavailable, "rename " + tmp, errno);
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  auto all = ListCheckpoints(dir);
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i) {
    std::filesystem::remove(all[i].second, ec);
  }
  return Status::Ok();
}

StatusOr<CheckpointState> LoadNewestCheckpoint(const std::string& dir, std::size_t num_params,
                                               std::size_t state_size) {
  auto all = ListCheckpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    auto st = ReadCheckpoint(it->second);
    if (!st.ok()) {
      spdlog::warn("skipping checkpoint: {}", st.status().message());
      continue;
    }
    if (st->params.size() != num_params || st->optimizer_state.size() != state_size) {
      return FailedPrecondition(it->second + ": written for a different model or optimizer (" +
                                std::to_string(st->params.size()) + " parameters, expected " +
                                std::to_string(num_params) + ")");
    }
    return st;
  }
  return NotFound("no checkpoint in " + dir);
}

}  // namespace ringtrain::train
