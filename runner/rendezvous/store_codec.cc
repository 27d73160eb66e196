#include "runner/rendezvous/store_codec.h"

#include <arpa/inet.h>

#include <cstring>

namespace ringtrain::rendezvous::codec {

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

bool Reader::U8(std::uint8_t& v) {
  if (data_.size() < 1) return false;
  v = static_cast<std::uint8_t>(data_[0]);
  data_.remove_prefix(1);
  return true;
}

bool Reader::U32(std::uint32_t& v) {
  if (data_.size() < 4) return false;
  std::uint32_t be;
  std::memcpy(&be, data_.data(), 4);
  v = ntohl(be);
  data_.remove_prefix(4);
  return true;
}

bool Reader::U64(std::uint64_t& v) {
  if (data_.size() < 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<std::uint8_t>(data_[i]);
  data_.remove_prefix(8);
  return true;
}

bool Reader::String(std::string& s) {
  std::uint32_t n;
  if (!U32(n) || data_.size() < n) return false;
  s.assign(data_.data(), n);
  data_.remove_prefix(n);
  return true;
}

std::optional<std::uint32_t> PeekFrameLength(std::string_view buffered) {
  if (buffered.size() < kFrameHeaderBytes) return std::nullopt;
  std::uint32_t be;
  std::memcpy(&be, buffered.data(), sizeof(be));
  return ntohl(be);
}

std::string Frame(std::string_view payload) {
  std::string out;
  out.reserve(kFrameHeaderBytes + payload.size());
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

Status SendFrame(const net::Socket& s, std::string_view payload, SteadyTime deadline) {
  std::string frame = Frame(payload);
  return net::SendAll(s, frame.data(), frame.size(), deadline);
}

StatusOr<std::string> RecvFrame(const net::Socket& s, SteadyTime deadline) {
  std::uint32_t be;
  RETURN_IF_ERROR(net::RecvAll(s, &be, sizeof(be), deadline));
  std::uint32_t len = ntohl(be);
  // A violation of the protocol by the peer is retryable, as a peer that is not the store at all
  // (another service at its address, a stale port) or a corrupt stream is no property of the
  // job: a restart meets a new store.
  if (len > kMaxFrameBytes) {
    return Unavailable("a frame of " + std::to_string(len) + " bytes, more than " +
                       std::to_string(kMaxFrameBytes) +
                       ": not a ringtrain rendezvous store, or a corrupt stream");
  }
  std::string payload(len, '\0');
  RETURN_IF_ERROR(net::RecvAll(s, payload.data(), len, deadline));
  return payload;
}

}  // namespace ringtrain::rendezvous::codec
