#pragma once
// Protocol Buffers wire format primitives (https://protobuf.dev/programming-guides/encoding/):
// varints, field keys, length-delimited fields, and two readers over a message's bytes that
// return views into it (no copy). One module for everything infergate encodes or decodes by hand
// over field numbers: the gRPC frontend's ModelInfer codec (frontend/grpc_kserve_codec.cc) and
// the remote backends' messages (backends/grpc_client_wire.h). Nothing here depends on
// libprotobuf (its internal WireFormatLite in particular).
//
// Threading: plain functions and values.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace infergate::common::protowire {

// Wire types (the low three bits of a field key).
inline constexpr uint32_t kVarint = 0;
inline constexpr uint32_t kFixed64 = 1;
inline constexpr uint32_t kLen = 2;  // length-delimited: bytes, strings, messages, packed
inline constexpr uint32_t kStartGroup = 3;
inline constexpr uint32_t kEndGroup = 4;
inline constexpr uint32_t kFixed32 = 5;

inline constexpr uint32_t makeTag(uint32_t field, uint32_t wire_type) {
  return (field << 3) | wire_type;
}
inline constexpr uint32_t tagField(uint32_t tag) { return tag >> 3; }
inline constexpr uint32_t tagWireType(uint32_t tag) { return tag & 7; }

// --- Encoding ---------------------------------------------------------------------------------

size_t varintSize(uint64_t v);  // bytes of v as a varint
void putVarint(std::string& out, uint64_t v);
void putTag(std::string& out, uint32_t field, uint32_t wire_type);
// The key and length of a length-delimited field whose `len` payload bytes follow.
void putLenHeader(std::string& out, uint32_t field, size_t len);
void putString(std::string& out, uint32_t field, std::string_view s);  // also bytes/submessages
void putVarintField(std::string& out, uint32_t field, uint64_t v);
void putPackedInt64(std::string& out, uint32_t field, const std::vector<int64_t>& values);
// Bytes of a length-delimited field (key, length, payload) with a `len`-byte payload.
size_t lenFieldSize(uint32_t field, size_t len);

// --- Decoding: a cursor -------------------------------------------------------------------------

// Reads one message field by field, the caller choosing how to read each payload (the shape of
// protobuf's CodedInputStream). Views point into the input.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  explicit Input(std::string_view s)
      : Input(reinterpret_cast<const uint8_t*>(s.data()), s.size()) {}

  bool atEnd() const { return p_ >= end_; }
  // Where the next read starts (for callers that resume a scan over bytes still arriving).
  const uint8_t* position() const { return p_; }
  // The next field key (a varint of up to 10 bytes, kept to its low 32 bits, as protobuf reads
  // keys); 0 at the end of the input, on a malformed key or on a zero key: only the first sets
  // consumedEntireMessage(). A key with field number 0 but a nonzero wire type is returned
  // (skipField() refuses it).
  uint32_t readTag();
  // True after readTag() returned 0 because the input ended cleanly.
  bool consumedEntireMessage() const { return clean_end_; }

  bool readVarint(uint64_t& v);
  bool readFixed32(uint32_t& v);  // little-endian
  bool readFixed64(uint64_t& v);  // little-endian
  // A length-delimited payload (the length varint, then the bytes) as a view into the input.
  bool readView(std::string_view& out);
  // Skips the payload of a field whose key `tag` was just read, groups included (nested up to
  // 100 deep); false when it is malformed or an end-group key.
  bool skipField(uint32_t tag);

 private:
  bool skipGroup(uint32_t field, int depth);
  bool skipField(uint32_t tag, int depth);
  const uint8_t* p_;
  const uint8_t* end_;
  bool clean_end_ = false;
  bool failed_ = false;  // a malformed key was read
};

// --- Decoding: a field iterator -----------------------------------------------------------------

// Iterates the fields of one message, reading each payload as its wire type says. next() is
// false at the end or on malformed input (then error() is set). Groups are refused.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  explicit Reader(std::string_view s)
      : Reader(reinterpret_cast<const uint8_t*>(s.data()), s.size()) {}
  bool next();
  uint32_t field() const { return field_; }
  uint32_t wireType() const { return wire_type_; }
  uint64_t varint() const { return varint_; }  // wire type 0
  // Wire types 1, 2 and 5: the payload.
  std::string_view bytes() const { return {reinterpret_cast<const char*>(data_), size_}; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool error() const { return error_; }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  uint32_t field_ = 0;
  uint32_t wire_type_ = 0;
  uint64_t varint_ = 0;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool error_ = false;
};

// Repeated int64, packed or not, appended to `out` from the current field of `r`.
bool readInt64s(const Reader& r, std::vector<int64_t>& out);

}  // namespace infergate::common::protowire
