#include "controller/kube/tls_material.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

namespace ringtrain::kube {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;

BioPtr MemBio(const std::string& data) {
  return BioPtr(BIO_new_mem_buf(data.data(), static_cast<int>(data.size())));
}

// No password prompt for an encrypted key: a controller has no terminal to ask on.
int NoPassword(char*, int, int, void*) { return -1; }

}  // namespace

Status CheckPemCertificates(const std::string& pem, const std::string& what) {
  if (pem.size() > (16u << 20)) return InvalidArgument(what + ": larger than 16 MiB");
  BioPtr bio = MemBio(pem);
  int count = 0;
  for (;;) {
    X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, NoPassword, nullptr));
    if (!cert) break;
    ++count;
  }
  // Running out of input ends the loop with PEM_R_NO_START_LINE; anything else is a broken block.
  unsigned long err = ERR_peek_last_error();
  bool clean_end = ERR_GET_LIB(err) == ERR_LIB_PEM && ERR_GET_REASON(err) == PEM_R_NO_START_LINE;
  ERR_clear_error();
  if (count == 0) return InvalidArgument(what + ": no PEM certificate in it");
  if (!clean_end)
    return InvalidArgument(what + ": certificate " + std::to_string(count + 1) +
                           " is not a valid PEM certificate");
  return Status::Ok();
}

Status CheckPemPrivateKey(const std::string& pem, const std::string& what) {
  if (pem.size() > (1u << 20)) return InvalidArgument(what + ": larger than 1 MiB");
  BioPtr bio = MemBio(pem);
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassword, nullptr));
  ERR_clear_error();
  if (!key) {
    return InvalidArgument(what + ": not an unencrypted PEM private key");
  }
  return Status::Ok();
}

Status CheckKeyMatchesCertificate(const std::string& cert_pem, const std::string& key_pem,
                                  const std::string& what) {
  BioPtr cert_bio = MemBio(cert_pem);
  X509Ptr cert(PEM_read_bio_X509(cert_bio.get(), nullptr, NoPassword, nullptr));
  BioPtr key_bio = MemBio(key_pem);
  KeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassword, nullptr));
  bool match = cert && key && X509_check_private_key(cert.get(), key.get()) == 1;
  ERR_clear_error();
  if (!match) return InvalidArgument(what + ": the client key does not match the certificate");
  return Status::Ok();
}

StatusOr<std::string> ReadSmallFile(const std::string& path, std::size_t max_bytes) {
  // A FIFO or a device (/dev/stdin, /dev/zero) would block or never end: regular files only.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return NotFound("cannot read " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + " is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path + ": " + std::strerror(errno));
  std::string out;
  char buf[65536];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    out.append(buf, static_cast<std::size_t>(in.gcount()));
    if (out.size() > max_bytes) {
      return InvalidArgument(path + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
  }
  if (in.bad()) return Unavailable("cannot read " + path + ": " + std::strerror(errno));
  return out;
}

}  // namespace ringtrain::kube
