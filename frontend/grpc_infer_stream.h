#pragma once
// Streaming ModelInferRequest decoder: one gRPC message decoded as its bytes arrive, piece by
// piece (the DATA chunks nghttp2 hands over, pointing into the bytes the transport delivered),
// so that every raw_input_contents byte is written once, straight from the delivered bytes
// into its slot, without gathering the message first (docs/BATCHING.md "One copy").
//
// - Header: the fields before the first raw_input_contents (model_name, version, id,
//   parameters, inputs, outputs: small) are collected in a bounded buffer (max_head_bytes).
//   At the first raw_input_contents key the header is decoded (decodeModelInferHeader), each
//   input's byte size taken from its shape and datatype, and the HeaderHook asked (find the
//   model, refuse before copying, place the inputs). Each raw_input_contents piece is then one
//   memcpy from the delivered bytes into its slot (or Tensor::data) at its offset.
// - Fallback (counted, same result as decodeModelInferRequest on the whole message): a header
//   over max_head_bytes, a field other than raw_input_contents after one (inputs after raw
//   contents: legal protobuf), a raw_input_contents entry whose size is not its shape's, more
//   entries than inputs, BYTES or typed contents, a header the whole decoder must judge. The
//   message is then gathered (what was already written to slots is re-encoded into the gather
//   buffer, the placement dropped) and decoded whole once complete.
// - A message that arrives in one piece is decoded by decodeModelInferRequest on that piece
//   (no buffer at all).
// Varints, keys and lengths may be split across pieces; every length is checked against the
// bytes the message has left before any memory is touched; the buffers grow with bytes that
// arrived, never with what a length announces. Nothing throws except std::bad_alloc.
//
// Threading: one decoder per call, on the connection's loop thread.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "backends/tensor.h"
#include "frontend/grpc_kserve_codec.h"
#include "frontend/streamed_tensor.h"

namespace infergate::frontend {

class ModelInferStreamDecoder {
 public:
  static constexpr size_t kMaxHeadBytes = 64 * 1024;

  explicit ModelInferStreamDecoder(size_t max_head_bytes = kMaxHeadBytes)
      : max_head_(max_head_bytes) {}

  // Starts a message of `size` bytes (the gRPC prefix's length, already checked against the
  // message limit). `hook` (may be null) must stay valid until the message is finished.
  void begin(size_t size, const HeaderHook* hook);
  // The message's next `len` bytes, in order (the pieces add up to `size`). `copied`: the
  // transport delivers them from a copy of its own (net::Transport::deliveringCopy()); tensor
  // bytes among them count into InferRequest::received_copy_bytes. A non-OK status is the
  // call's answer, decided now (the hook refused, or the message is malformed): the rest of
  // the message need not be fed (it would be ignored).
  absl::Status piece(const char* data, size_t len, bool copied);
  // After the last piece: the request, or the error decodeModelInferRequest would give.
  // `copied_bytes`: the tensor bytes the decoder wrote (as decodeModelInferRequest's).
  absl::Status finish(backends::InferRequest& out, uint64_t* copied_bytes = nullptr);
  // Drops the message in progress (its placement with it).
  void reset();

  // Memory held for the message in progress (header and gather buffers, and the tensors it
  // writes outside a slot), which the connection's budget counts.
  size_t bufferedBytes() const {
    return (head_.empty() ? 0 : head_.capacity()) + (gather_.empty() ? 0 : gather_.capacity()) +
           streamed::heldBytes(req_);
  }
  // Message bytes gathered by fallbacks, and fallbacks taken (cumulative).
  uint64_t gatheredBytes() const { return gathered_; }
  uint64_t fallbacks() const { return fallbacks_; }
  // Messages whose raw_input_contents were written straight from the pieces (cumulative).
  uint64_t streamedMessages() const { return streamed_; }

 private:
  enum class Phase : uint8_t { kHead, kRawLen, kRawData, kKey, kGather, kDecided };

  absl::Status head(const char*& p, size_t& n);
  absl::Status startRaws(size_t left);
  void fallback(std::string_view pending);
  void gather(const char* p, size_t n);
  absl::Status decide(absl::Status st);
  absl::Status decodeWhole(std::string_view wire, bool gathered, bool copied);
  // finish() before a decision: the message ended; decides from the phase it ended in.
  absl::Status decideAtEnd();

  size_t max_head_;
  const HeaderHook* hook_ = nullptr;
  Phase phase_ = Phase::kHead;
  size_t size_ = 0;  // the message's bytes
  size_t off_ = 0;   // of them, fed so far
  std::string head_;  // header fields (kHead), complete fields up to scan_
  size_t scan_ = 0;   // head_ offset of the first field not yet scanned
  std::string gather_;
  bool gather_copied_ = false;  // some gathered byte came from a transport's copy
  backends::InferRequest req_;
  std::vector<size_t> expect_;  // byte size of each input's raw_input_contents
  size_t raw_ = 0;              // raw_input_contents entries complete
  size_t raw_len_ = 0, raw_done_ = 0;
  uint8_t vbuf_[10] = {};  // a key or length varint split across pieces
  size_t vlen_ = 0;
  uint64_t copied_raw_ = 0;    // raw bytes written
  uint64_t received_copy_ = 0;  // of them, delivered from a transport's copy
  absl::Status final_;
  uint64_t final_copied_ = 0;
  uint64_t gathered_ = 0;
  uint64_t fallbacks_ = 0;
  uint64_t streamed_ = 0;
};

}  // namespace infergate::frontend
