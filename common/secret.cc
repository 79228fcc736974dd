#include "common/secret.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace infergate::common {

void randomBytes(void* p, size_t n) {
  auto* b = static_cast<unsigned char*>(p);
  while (n > 0) {
    const ssize_t got = getrandom(b, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "infergate: getrandom() failed: %s; cannot create secrets\n",
                   std::strerror(errno));
      std::abort();
    }
    b += got;
    n -= static_cast<size_t>(got);
  }
}

ig_sipkey randomSipKey() {
  ig_sipkey k{};
  randomBytes(&k, sizeof(k));
  return k;
}

}  // namespace infergate::common
