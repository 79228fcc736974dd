#pragma once
// Secrets from the kernel's CSPRNG (getrandom(2)): keys for ISNs, SYN cookies and every hash
// an attacker could aim collisions at. Never derived from pid or time.

#include <cstddef>

#include "common/siphash.h"

namespace infergate::common {

// Fills [p, p + n) with random bytes; a release assert if the kernel cannot (it blocks only
// until the entropy pool is initialised, once per boot).
void randomBytes(void* p, size_t n);

// A fresh 128-bit SipHash key.
ig_sipkey randomSipKey();

}  // namespace infergate::common
