#pragma once
// The fuzz targets link tests/fuzz/fuzz_secret.cc instead of common/secret.cc: every "random"
// key (the TCP stack's connection-table and timestamp keys, a SynCookieJar's rotations) comes
// from a counter seeded per input, so a crash file reproduces exactly.

#include <cstdint>

namespace infergate::fuzz {

// Restarts the stream of common::randomBytes() / common::randomSipKey().
void resetSecrets(uint64_t seed);

}  // namespace infergate::fuzz
