#pragma once
// Where the streamed decoders (KServe binary bodies, gRPC ModelInfer raw_input_contents, TF
// Predict tensor_content) write a tensor's bytes as they arrive: into the slot the model placed
// the tensor in (Model::placeInputs, a bounded pool reserved at admission), or else into
// Tensor::data, grown by the bytes that arrived. Nothing is sized or zero-filled ahead from
// what a header announced: a header that announces 48 MB and sends nothing holds nothing
// (docs/SECURITY.md "Memory follows received bytes"). While the bytes come, Tensor::slot_bytes
// of an unplaced tensor keeps the announced size (byteSize() is what arrived); end() clears it.

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "backends/tensor.h"

namespace infergate::frontend::streamed {

// After placement: a tensor the model did not place holds nothing yet.
inline void begin(backends::Tensor& t) {
  if (t.slot != nullptr) return;
  t.data.clear();
}

// The `n` bytes at `p` that follow the `at` bytes already written.
inline void write(backends::Tensor& t, size_t at, const char* p, size_t n) {
  if (n == 0) return;
  if (t.slot != nullptr) {
    std::memcpy(t.slot + at, p, n);  // the one copy
    return;
  }
  const size_t need = t.data.size() + n;
  if (need > t.data.capacity()) {
    // Doubling what arrived, never past the announced size: memory follows received bytes.
    size_t want = std::max(need, 2 * t.data.capacity());
    if (t.slot_bytes >= need) want = std::min(want, t.slot_bytes);
    t.data.reserve(want);
  }
  t.data.insert(t.data.end(), reinterpret_cast<const uint8_t*>(p),
                reinterpret_cast<const uint8_t*>(p) + n);
}

// Bytes an unplaced tensor of `r` holds (the connection's budget counts them).
inline size_t heldBytes(const backends::InferRequest& r) {
  size_t n = 0;
  for (const backends::Tensor& t : r.inputs) {
    if (t.slot == nullptr) n += t.data.capacity();
  }
  return n;
}

// Once every byte came: an unplaced tensor is plain Tensor::data again.
inline void end(backends::InferRequest& r) {
  for (backends::Tensor& t : r.inputs) {
    if (t.slot == nullptr) t.slot_bytes = 0;
  }
}

}  // namespace infergate::frontend::streamed
