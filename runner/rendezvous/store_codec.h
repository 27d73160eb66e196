// The rendezvous store's wire codec, shared by tcp_store_server.cc and tcp_store_client.cc:
// framing (a big-endian u32 length, then the payload), the size limit on a frame, the request
// ops and their field encoding, and replies. Knows nothing of sockets beyond the blocking
// SendFrame/RecvFrame the client uses; the server parses frames out of its own buffers.
//
// Requests are [op u8][fields]; strings are [u32 length][bytes], integers big-endian u64.
// Replies are [status code u8][body]: the op's result when ok, the error message otherwise.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/net.h"
#include "common/status.h"

namespace ringtrain::rendezvous::codec {

enum class Op : std::uint8_t { kSet = 1, kGet, kAdd, kCompareSet, kWait };

// A frame longer than this is a protocol error (or not our client): drop the connection.
inline constexpr std::uint32_t kMaxFrameBytes = 64u << 20;
inline constexpr std::size_t kFrameHeaderBytes = 4;
// Caps a caller's timeout so deadline arithmetic cannot overflow.
inline constexpr Duration kMaxTimeout{std::chrono::hours(24 * 365)};

inline Duration Clamp(Duration d) { return std::clamp(d, Duration(0), kMaxTimeout); }

void PutU32(std::string& out, std::uint32_t v);
void PutU64(std::string& out, std::uint64_t v);
void PutString(std::string& out, const std::string& s);

// Bounds-checked reader over one frame's payload: every call fails instead of reading past
// the end.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool U8(std::uint8_t& v);
  bool U32(std::uint32_t& v);
  bool U64(std::uint64_t& v);
  bool String(std::string& s);
  bool done() const { return data_.empty(); }

 private:
  std::string_view data_;
};

// The length prefix of a frame at the front of `buffered`, or nullopt while fewer than
// kFrameHeaderBytes have arrived.
std::optional<std::uint32_t> PeekFrameLength(std::string_view buffered);

std::string Frame(std::string_view payload);
std::string Reply(StatusCode code, std::string_view body);
std::string Reply(const Status& s);

// Blocking, for the client: a whole frame within `deadline`; a longer-than-kMaxFrameBytes
// length is DataLoss.
Status SendFrame(const net::Socket& s, std::string_view payload, SteadyTime deadline);
StatusOr<std::string> RecvFrame(const net::Socket& s, SteadyTime deadline);

}  // namespace ringtrain::rendezvous::codec
