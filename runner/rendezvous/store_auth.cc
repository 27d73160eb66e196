#include "runner/rendezvous/store_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>

#include "runner/rendezvous/store_codec.h"

namespace ringtrain::rendezvous::auth {
namespace {

constexpr char kMagic[4] = {'R', 'T', 'S', '1'};

std::string Mac(const std::string& token, std::string_view nonce) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(nonce.data()), nonce.size(), mac, &len);
  return std::string(reinterpret_cast<const char*>(mac), len);
}

}  // namespace

StatusOr<std::string> MakeNonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), kNonceBytes) != 1) {
    return Internal("rendezvous store: RAND_bytes failed");
  }
  return nonce;
}

std::string Hello(std::string_view nonce) {
  std::string out(kMagic, sizeof(kMagic));
  out.append(nonce);
  return out;
}

bool Verify(const std::string& token, std::string_view nonce, std::string_view answer) {
  std::string expected = Mac(token, nonce);
  return answer.size() == expected.size() &&
         CRYPTO_memcmp(answer.data(), expected.data(), expected.size()) == 0;
}

Status ClientHandshake(const net::Socket& sock, const std::string& token, SteadyTime deadline,
                       const std::string& where) {
  auto hello = codec::RecvFrame(sock, deadline);
  if (!hello.ok()) return hello.status().WithContext(where + ": handshake");
  if (hello->size() != sizeof(kMagic) + kNonceBytes ||
      std::memcmp(hello->data(), kMagic, sizeof(kMagic)) != 0) {
    return Unavailable(where + ": handshake: not a ringtrain rendezvous store");
  }
  std::string mac = Mac(token, std::string_view(*hello).substr(sizeof(kMagic)));
  RETURN_IF_ERROR(codec::SendFrame(sock, mac, deadline).WithContext(where + ": handshake"));
  auto reply = codec::RecvFrame(sock, deadline);
  if (!reply.ok()) return reply.status().WithContext(where + ": handshake");
  if (reply->empty()) return Unavailable(where + ": handshake: empty reply");
  auto code = static_cast<StatusCode>((*reply)[0]);
  if (code != StatusCode::kOk) return Status(code, reply->substr(1)).WithContext(where);
  return Status::Ok();
}

}  // namespace ringtrain::rendezvous::auth
