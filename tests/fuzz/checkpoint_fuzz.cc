// Fuzz target: the checkpoint reader on resume. The input is written as the newest checkpoint
// (ckpt-9.bin) beside an older valid one (ckpt-3.bin) for a model of kParams parameters and
// kState optimizer values. If the first input byte is odd, the harness recomputes the file's CRC
// over the rest (header layouts of runner/train/checkpoint.cc: RTCKPT01 has its CRC in bytes
// 52-55 of a 56-byte header, RTCKPT02 and RTCKPT03 in bytes 64-67 of a 72-byte one; the CRC
// covers the header with it zeroed, then RTCKPT03's model record, then the payload), so the fuzzer
// gets past the checksum to the fields behind it. The resume expects the model recorded in the
// valid checkpoint, so the record's comparison is fuzzed too.
#include <spdlog/spdlog.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runner/train/checkpoint.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

constexpr std::size_t kParams = 6;
constexpr std::size_t kState = 12;
constexpr std::size_t kHeaderBytesV1 = 56;
constexpr std::size_t kCrcOffsetV1 = 52;
constexpr std::size_t kHeaderBytesV2 = 72;
constexpr std::size_t kCrcOffsetV2 = 64;

const ringtrain::train::ExpectedModel& Expected() {
  static const ringtrain::train::ExpectedModel e{
      {"input=2;dense(units=2);relu;loss=softmax_cross_entropy", "2"}, true};
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  std::vector<float> params(kParams, 0.5f), state(kState, 0.25f);
  ringtrain::train::CheckpointPosition at;
  at.global_step = 3;
  at.epoch = 1;
  at.step_in_epoch = 2;
  at.epoch_samples = 32;
  at.optimizer_steps = 3;
  at.world_size = 2;
  auto s = ringtrain::train::WriteCheckpoint(ringtrain::fuzz::TempDir(), at, Expected().model,
                                             params, state, /*keep=*/10);
  FUZZ_CHECK(s.ok());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ringtrain;
  using namespace ringtrain::fuzz;
  if (size < 1) return 0;
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  const bool v2 = file.compare(0, 8, "RTCKPT02") == 0 || file.compare(0, 8, "RTCKPT03") == 0;
  const std::size_t header_bytes = v2 ? kHeaderBytesV2 : kHeaderBytesV1;
  const std::size_t crc_offset = v2 ? kCrcOffsetV2 : kCrcOffsetV1;
  if ((data[0] & 1) && file.size() >= header_bytes) {
    std::memset(file.data() + crc_offset, 0, 4);
    uLong c = crc32(0L, Z_NULL, 0);
    c = crc32(c, reinterpret_cast<const Bytef*>(file.data()), static_cast<uInt>(file.size()));
    const auto crc = static_cast<std::uint32_t>(c);
    std::memcpy(file.data() + crc_offset, &crc, 4);
  }
  WriteFile(TempDir() + "/ckpt-9.bin", file);
  auto st = train::LoadNewestCheckpoint(TempDir(), kParams, kState, &Expected());
  if (st.ok()) {
    FUZZ_CHECK(st->params.size() == kParams);
    FUZZ_CHECK(st->optimizer_state.size() == kState);
  }
  return 0;
}
