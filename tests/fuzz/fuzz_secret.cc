// Deterministic common/secret.h for the fuzz targets (see fuzz_secret.h). Never linked into
// the gateway: its keys are predictable by design.
#include "tests/fuzz/fuzz_secret.h"

#include <cstring>

#include "common/secret.h"

namespace {
uint64_t g_state = 0;

uint64_t splitmix64() {
  uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

namespace infergate::fuzz {
void resetSecrets(uint64_t seed) { g_state = seed; }
}  // namespace infergate::fuzz

namespace infergate::common {

void randomBytes(void* p, size_t n) {
  auto* b = static_cast<unsigned char*>(p);
  while (n > 0) {
    const uint64_t v = splitmix64();
    const size_t k = n < sizeof(v) ? n : sizeof(v);
    std::memcpy(b, &v, k);
    b += k;
    n -= k;
  }
}

ig_sipkey randomSipKey() {
  ig_sipkey k{};
  randomBytes(&k, sizeof(k));
  return k;
}

}  // namespace infergate::common
