// One source of secrets for both binaries: the rendezvous token of a gang (the controller's
// Secret, `ringtrain run`'s local gang, a runner alone) and unique suffixes (leader identity).
#pragma once

#include <cstddef>
#include <string>

namespace ringtrain {

// 2·bytes lowercase hex characters from the kernel's CSPRNG (getrandom(2)); 16 bytes = 128 bits
// by default, the strength a shared secret of the rendezvous store needs.
std::string RandomToken(std::size_t bytes = 16);

}  // namespace ringtrain
