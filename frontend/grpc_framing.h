#pragma once
// gRPC over HTTP/2 framing (the length-prefixed message format of grpc/doc/PROTOCOL-HTTP2.md):
// every message is a 1-byte compressed flag, a 4-byte big-endian length and the message bytes,
// carried in DATA frames in any split (a message across several frames, several messages in
// one frame). Plus the header values gRPC defines: grpc-timeout, grpc-status, grpc-message.
//
// Threading: plain values; a reader belongs to one stream on one loop thread.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace infergate::frontend {

inline constexpr size_t kGrpcPrefixBytes = 5;

// Reassembles length-prefixed messages from a stream's DATA payloads. A message that arrives
// whole inside one feed() is handed out as a view into the caller's bytes (no copy); only a
// message split across feeds is gathered into an internal buffer first.
class GrpcMessageReader {
 public:
  // Called once per complete message with its bytes (valid only during the call). Returning a
  // non-OK status stops the reader (it reports that status from then on).
  using OnMessage = std::function<absl::Status(std::string_view message)>;

  explicit GrpcMessageReader(size_t max_message_bytes) : max_(max_message_bytes) {}

  // Streaming mode: the message bytes are handed over as they arrive instead of gathered.
  // A non-OK status from a handler stops the reader, as from OnMessage.
  class PieceHandler {
   public:
    virtual absl::Status onBegin(uint32_t size) = 0;  // a message of `size` bytes begins
    virtual absl::Status onPiece(const char* data, size_t len) = 0;  // its next bytes
    virtual absl::Status onEnd() = 0;                 // it is complete
    // A whole message inside the fed bytes (a view; no onBegin/onPiece/onEnd for it).
    virtual absl::Status onWhole(std::string_view message) = 0;

   protected:
    ~PieceHandler() = default;
  };
  // As feed(), but each message's bytes go to `handler` piece by piece, views into `data`
  // (nothing is gathered: gatheredBytes() and bufferedBytes() stay 0). Do not mix with feed()
  // on one reader.
  absl::Status feedPieces(const char* data, size_t len, PieceHandler& handler);

  // Feeds DATA payload bytes. Errors (sticky): RESOURCE_EXHAUSTED for a message over the
  // limit, UNIMPLEMENTED for a compressed message (only identity is supported), or whatever
  // `on_message` returned.
  absl::Status feed(const char* data, size_t len, const OnMessage& on_message);
  // True between messages (nothing partial buffered): the stream may end here.
  bool atBoundary() const { return have_ == 0 && status_.ok(); }
  uint64_t messages() const { return messages_; }
  // Bytes gathered because a message spanned feeds (for the copy accounting).
  uint64_t gatheredBytes() const { return gathered_; }
  // Memory held for the message being gathered (its buffer's capacity): grows with the bytes
  // that arrived, never with what a length prefix merely announces.
  size_t bufferedBytes() const { return have_ == 0 ? 0 : body_.capacity(); }

  // What a 5-byte prefix may make the reader reserve before any of the body has arrived; the
  // buffer then grows with the bytes received (geometrically, so gathering stays linear).
  static constexpr size_t kMaxReserveBytes = 64 * 1024;

 private:
  // Takes prefix bytes from data/len; true once the prefix is whole and valid (body_len_ set).
  bool takePrefix(const char*& data, size_t& len);
  size_t max_;
  char prefix_[kGrpcPrefixBytes] = {};
  size_t have_ = 0;           // bytes of the current message seen (prefix + body)
  uint32_t body_len_ = 0;
  std::string body_;          // only for split messages
  absl::Status status_;
  uint64_t messages_ = 0;
  uint64_t gathered_ = 0;
};

// Writes the 5-byte prefix (uncompressed) for a message of `len` bytes at `out`.
void writeGrpcPrefix(char* out, uint32_t len);
// Appends prefix + message to `out`.
void appendGrpcMessage(std::string& out, std::string_view message);

// Parses a grpc-timeout header value ("1..8 ASCII digits" + one of H M S m u n) into
// nanoseconds; nullopt when malformed. Saturates instead of overflowing.
std::optional<uint64_t> parseGrpcTimeout(std::string_view value);

// Percent-encodes a grpc-message value as the spec asks (bytes outside 0x20..0x7E and '%').
std::string percentEncodeGrpcMessage(std::string_view message);
std::string percentDecodeGrpcMessage(std::string_view value);


}  // namespace infergate::frontend
