#pragma once
// Streaming decode of a KServe v2 REST infer body (docs/PROTOCOLS.md "HTTP/1.1 body streaming"):
// the HTTP/1.1 parser hands the body to it as it arrives (HttpBodyReader), and every tensor byte
// is written once, from the delivered bytes straight into its batch slot, instead of the body
// being assembled first and copied from there.
//
//   binary extension (Inference-Header-Content-Length: N > 0, Content-Length or chunked):
//     the N-byte JSON header is collected; then the header pass (kserve_json.h
//     decodeInferHeader: names, datatypes, shapes, binary_data_size, JSON "data" inputs),
//     the priority, the model's admission (refused: nothing is placed and the rest of the body
//     is discarded unread), placement (Model::placeInputs), and each following byte is written
//     with one memcpy at its offset into its input's slot (Tensor::data when not placed).
//   raw binary (N = 0) with Content-Length: placed when the headers are complete.
// A binary BYTES input (its layout is checked on its bytes) falls back to assembling the body
// and decoding it whole. The result, request or error, is exactly decodeInferRequest's for the
// same bytes (tests/unit/frontend/kserve_body_stream_test.cc, tests/fuzz/kserve_stream_fuzz.cc).
//
// Threading: the connection's loop thread (the parser's callbacks, then the handler).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "backends/model.h"
#include "backends/tensor.h"
#include "frontend/http.h"
#include "frontend/kserve_json.h"

namespace infergate::frontend {

class KServeBodyStream final : public HttpBodyReader {
 public:
  // How the request's priority is decided for the admission check (kserve_rest.h
  // resolvePriority): the KServe "priority" parameter when `trusted` and > 0, else `fallback`
  // (the header / ingress tag part, resolved when the headers were complete; an error there
  // skips the check: the handler answers it).
  struct Priority {
    bool trusted = true;
    absl::StatusOr<int64_t> fallback = int64_t{0};
  };

  // Binary extension: header length `header_length` > 0; `content_length` the body's length
  // when known (nullopt: chunked); `max_body` the parser's body limit.
  static std::unique_ptr<KServeBodyStream> binary(backends::Model& model, uint64_t header_length,
                                                  std::optional<uint64_t> content_length,
                                                  uint64_t max_body, Priority priority);
  // Raw binary body of `content_length` bytes: placed now. Null when it must be assembled (a
  // BYTES input).
  static std::unique_ptr<KServeBodyStream> raw(backends::Model& model, uint64_t content_length,
                                               Priority priority);
  // Refused before the body (the model's admission answer): the body is discarded unread.
  static std::unique_ptr<KServeBodyStream> refusal(absl::Status status);

  void onBody(const char* data, size_t len, bool copied) override;
  uint64_t assembledBytes() const override { return buf_.size(); }

  // After the last body byte: the decoded request (inputs written; received_copy_bytes set),
  // or decodeInferRequest's error for these bytes, or the admission refusal (`*refused` true).
  absl::StatusOr<backends::InferRequest> finish(bool* refused);

  // Tests: the header pass has run and the bytes go straight to the inputs.
  bool streamingBinary() const { return stage_ == Stage::kBinary; }

  ~KServeBodyStream() override;
  // Per-thread recycling (no allocation per request on a keep-alive connection): the object's
  // memory and its header buffer's capacity are reused by the next stream on the thread.
  static void* operator new(size_t size);
  static void operator delete(void* p, size_t size);

 private:
  enum class Stage : uint8_t {
    kHeader,    // collecting the JSON header into buf_
    kBinary,    // writing binary parts into the placed inputs
    kDiscard,   // the answer is decided (error or refusal): counting bytes only
    kAssemble,  // fallback: the whole body into buf_, decoded at finish()
  };
  explicit KServeBodyStream(backends::Model* model);
  void headerDone();
  absl::Status admit(backends::InferRequest& r);
  void startBinary();

  backends::Model* model_;
  Priority priority_;
  Stage stage_ = Stage::kHeader;
  bool length_known_ = false;
  bool header_too_long_ = false;  // N over the body: decodeInferRequest's first error
  uint64_t header_length_ = 0;
  uint64_t binary_limit_ = 0;     // binary bytes that may follow (exact when length_known_)
  uint64_t total_ = 0;            // body bytes received
  uint64_t copied_ = 0;           // tensor bytes written that the transport had copied first
  std::string buf_;               // the JSON header (kHeader), the whole body (kAssemble)
  backends::InferRequest req_;
  InferHeaderPass pass_;
  absl::Status decided_;          // kDiscard before any header pass: the answer
  size_t part_ = 0;               // kBinary: the part being written, and the offset in it
  uint64_t part_off_ = 0;
};

}  // namespace infergate::frontend
