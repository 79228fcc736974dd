#include "common/secret.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "common/check.h"

namespace infergate::common {

void randomBytes(void* p, size_t n) {
  auto* b = static_cast<unsigned char*>(p);
  while (n > 0) {
    const ssize_t got = getrandom(b, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      fatal(fmt::format("getrandom() failed: {}; cannot create secrets", std::strerror(errno)));
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
