// The rendezvous store's token handshake, both sides: the server sends a hello frame (magic
// and a fresh random nonce), the client answers HMAC-SHA256(job token, nonce), the server
// compares in constant time and replies ok or PermissionDenied. The token itself never crosses
// the wire. Framing comes from store_codec.h.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/net.h"
#include "common/status.h"

namespace ringtrain::rendezvous::auth {

inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kMacBytes = 32;
inline constexpr const char* kRefusedToken = "rendezvous store refused the job token";

// Server side. A fresh nonce, or Internal if the random source fails.
StatusOr<std::string> MakeNonce();
// The hello frame's payload for `nonce`.
std::string Hello(std::string_view nonce);
// Whether `answer` is the MAC of `nonce` under `token` (constant-time).
bool Verify(const std::string& token, std::string_view nonce, std::string_view answer);

// Client side: reads the hello on `sock`, proves `token`, reads the verdict; errors name
// `where`.
Status ClientHandshake(const net::Socket& sock, const std::string& token, SteadyTime deadline,
                       const std::string& where);

}  // namespace ringtrain::rendezvous::auth
