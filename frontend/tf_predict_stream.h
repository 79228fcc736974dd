#pragma once
// Streaming PredictRequest decoder (TF Serving gRPC Predict, issue 16): one message decoded as
// its bytes arrive, piece by piece (the DATA chunks nghttp2 hands over, pointing into the bytes
// the transport delivered), so that a large tensor_content is written once, straight from the
// delivered bytes into its slot, without gathering the message first (docs/BATCHING.md "One
// copy").
//
// - Streamed: the layout real serializers write for one input: fields in number order, the
//   inputs entry (PredictRequest field 2) with its key before its value, the TensorProto's dtype
//   and shape before tensor_content, and that tensor_content the last bytes of the value, of
//   the entry and of the message (keys 0x12 / 0x12 / 0x22 of one byte, lengths of at most 5
//   bytes). The bytes before it (model_spec, the entry's key, dtype, shape: small) are kept in a
//   bounded buffer (max_head_bytes). When the tensor_content length is read, the message
//   without that field (the entry and value lengths re-encoded) is scanned by
//   scanPredictRequest; with exactly one input, the hook is asked (find the model, refuse
//   before copying, decodePredictInputs with TfTensorView::streamed_content: the header pass and
//   the placement, no byte written). Every tensor_content piece is then one memcpy from the
//   delivered bytes into the slot (or Tensor::data) at its offset. Since nothing but those bytes
//   follows, the answer is the whole-message decoder's (the rest of the message cannot be
//   malformed).
// - Everything else (several inputs, output_filter or any field after the tensor, key after
//   value, tensor_content before other TensorProto fields, typed *_val values, a hook that
//   declines: unknown or unready model, a decode error) is decoded whole: the message is
//   gathered (counted in gatheredBytes) and finish() hands it to the caller's whole-message
//   path, which gives today's answer, errors included. A header over max_head_bytes is gathered
//   the same way (no streaming is possible in it).
// Every length from the wire is checked against the bytes the message has left; the buffers
// grow with bytes that arrived, never with what a length announces. Nothing throws except
// std::bad_alloc (and what the hook throws).
//
// Threading: one decoder per call, on the connection's loop thread.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/tensor.h"
#include "frontend/streamed_tensor.h"
#include "frontend/tf_predict_codec.h"

namespace infergate::frontend {

// Asked once the streamed input's header is known, before any tensor byte is written: `scan`
// is the message without the streamed tensor_content (its input has streamed_content set).
// Returns true when `req` is decoded (decodePredictInputs) and the tensor may be streamed into
// it, false to decode the message whole instead, an error to answer the call now (refused
// before copying: the message is known to be well formed).
using PredictStreamHook =
    std::function<absl::StatusOr<bool>(PredictRequestScan& scan, backends::InferRequest& req)>;

class PredictStreamDecoder {
 public:
  static constexpr size_t kMaxHeadBytes = 64 * 1024;
  struct Probe;  // what the bytes at a field boundary hold (tf_predict_stream.cc)

  explicit PredictStreamDecoder(size_t max_head_bytes = kMaxHeadBytes)
      : max_head_(max_head_bytes) {}

  // Starts a message of `size` bytes. `hook` (null: nothing is streamed) must stay valid until
  // the message is finished.
  void begin(size_t size, const PredictStreamHook* hook);
  // The message's next `len` bytes, in order. `copied`: delivered from a transport's copy
  // (net::Transport::deliveringCopy()); streamed tensor bytes among them count into
  // InferRequest::received_copy_bytes. A non-OK status is the call's answer (the hook's
  // refusal); the rest of the message need not be fed.
  absl::Status piece(const char* data, size_t len, bool copied);

  // After the last piece, one of:
  struct Result {
    absl::Status status;  // not OK: the answer (refusal, or an incomplete message)
    // OK and streamed: `request` is decoded and placed, received_copy_bytes set.
    bool streamed = false;
    backends::InferRequest request;
    uint64_t copied_bytes = 0;  // tensor bytes written
    // OK and not streamed: the whole message (valid until begin/reset) for the caller's
    // whole-message decode; every tensor byte in it was copied `copies_before` times in
    // userspace before that decode's write (the gather, plus the transport's copy).
    std::string_view whole;
    int copies_before = 0;
  };
  Result finish();
  // Drops the message in progress (its placement with it).
  void reset();

  // Memory held for the message in progress (and the tensor it writes outside a slot), which
  // the connection's budget counts.
  size_t bufferedBytes() const {
    return (head_.empty() ? 0 : head_.capacity()) + (gather_.empty() ? 0 : gather_.capacity()) +
           streamed::heldBytes(req_);
  }
  uint64_t gatheredBytes() const { return gathered_; }     // cumulative
  uint64_t fallbacks() const { return fallbacks_; }        // messages gathered whole
  uint64_t streamedMessages() const { return streamed_; }  // tensor_content streamed

 private:
  enum class Phase : uint8_t { kHead, kData, kGather, kDecided };

  absl::Status head(const char*& p, size_t& n);
  absl::Status startStream(const Probe& at);
  void toGather();

  size_t max_head_;
  const PredictStreamHook* hook_ = nullptr;
  Phase phase_ = Phase::kHead;
  size_t size_ = 0;   // the message's bytes
  size_t off_ = 0;    // of them, fed so far
  std::string head_;  // the message's bytes so far (kHead), complete top-level fields to scan_
  size_t scan_ = 0;
  std::string gather_;
  bool any_copied_ = false;  // some byte came from a transport's copy
  backends::InferRequest req_;
  size_t len_ = 0, done_ = 0;  // the streamed tensor_content: bytes, written
  uint64_t received_copy_ = 0;
  absl::Status final_;
  uint64_t gathered_ = 0, fallbacks_ = 0, streamed_ = 0;
};

}  // namespace infergate::frontend
