// Checks of PEM material (CA bundles, client certificates and keys) before any connection uses
// it, so a garbage or missing file fails at start with its name instead of failing every TLS
// handshake later. OpenSSL does the parsing; nothing here opens a connection.
#pragma once

#include <string>

#include "common/status.h"

namespace ringtrain::kube {

// `what` names the source in errors ("cluster \"k\" certificate-authority /etc/ca.crt").
// At least one certificate, and nothing but certificates (comments between blocks allowed).
Status CheckPemCertificates(const std::string& pem, const std::string& what);
// A private key (RSA, EC, PKCS#8), unencrypted.
Status CheckPemPrivateKey(const std::string& pem, const std::string& what);
// The key is the private half of the first certificate.
Status CheckKeyMatchesCertificate(const std::string& cert_pem, const std::string& key_pem,
                                  const std::string& what);

// The whole regular file, at most `max_bytes`; errors name the file and errno's text.
StatusOr<std::string> ReadSmallFile(const std::string& path, std::size_t max_bytes = 16 << 20);

}  // namespace ringtrain::kube
