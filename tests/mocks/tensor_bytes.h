#pragma once
// Tensor contents as the wire carries them, for the codec tests.

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace infergate::mocks {

// The values' bytes in host order (little-endian on every target infergate builds for), as
// raw_input_contents and the binary tensor extension carry them.
template <typename T>
std::vector<uint8_t> le(std::initializer_list<T> values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.begin(), out.size());
  return out;
}

}  // namespace infergate::mocks
