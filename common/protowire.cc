#include "common/protowire.h"

#include <cstring>

namespace infergate::common::protowire {
namespace {

// A varint of at most 10 bytes at [p, end); bits past 64 are dropped (as protobuf does).
bool readVarintAt(const uint8_t*& p, const uint8_t* end, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p >= end) return false;
    const uint8_t b = *p++;
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

constexpr int kMaxGroupDepth = 100;  // protobuf's default recursion limit

}  // namespace

size_t varintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}
void putVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void putTag(std::string& out, uint32_t field, uint32_t wire_type) {
  putVarint(out, (static_cast<uint64_t>(field) << 3) | wire_type);
}
void putLenHeader(std::string& out, uint32_t field, size_t len) {
  putTag(out, field, kLen);
  putVarint(out, len);
}
void putString(std::string& out, uint32_t field, std::string_view s) {
  putLenHeader(out, field, s.size());
  out.append(s.data(), s.size());
}
void putVarintField(std::string& out, uint32_t field, uint64_t v) {
  putTag(out, field, kVarint);
  putVarint(out, v);
}
void putPackedInt64(std::string& out, uint32_t field, const std::vector<int64_t>& values) {
  if (values.empty()) return;
  size_t n = 0;
  for (int64_t v : values) n += varintSize(static_cast<uint64_t>(v));
  putLenHeader(out, field, n);
  for (int64_t v : values) putVarint(out, static_cast<uint64_t>(v));
}
size_t lenFieldSize(uint32_t field, size_t len) {
  return varintSize(static_cast<uint64_t>(field) << 3) + varintSize(len) + len;
}

// --- Input ----------------------------------------------------------------------------------

uint32_t Input::readTag() {
  if (failed_) return 0;
  if (p_ >= end_) {
    clean_end_ = true;
    return 0;
  }
  uint64_t key = 0;
  if (!readVarintAt(p_, end_, key)) {
    failed_ = true;
    return 0;
  }
  return static_cast<uint32_t>(key);
}

bool Input::readVarint(uint64_t& v) { return readVarintAt(p_, end_, v); }

bool Input::readFixed32(uint32_t& v) {
  if (end_ - p_ < 4) return false;
  uint8_t b[4];
  std::memcpy(b, p_, 4);
  v = uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
  p_ += 4;
  return true;
}

bool Input::readFixed64(uint64_t& v) {
  uint32_t lo = 0, hi = 0;
  if (end_ - p_ < 8) return false;
  readFixed32(lo);
  readFixed32(hi);
  v = uint64_t{lo} | uint64_t{hi} << 32;
  return true;
}

bool Input::readView(std::string_view& out) {
  uint64_t len64 = 0;
  if (!readVarintAt(p_, end_, len64)) return false;
  const uint32_t len = static_cast<uint32_t>(len64);  // a 32-bit length, as protobuf reads it
  if (len > static_cast<uint64_t>(end_ - p_)) return false;
  out = len == 0 ? std::string_view() : std::string_view(reinterpret_cast<const char*>(p_), len);
  p_ += len;
  return true;
}

bool Input::skipField(uint32_t tag) { return skipField(tag, 0); }

bool Input::skipField(uint32_t tag, int depth) {
  if (tagField(tag) == 0) return false;
  switch (tagWireType(tag)) {
    case kVarint: {
      uint64_t v;
      return readVarint(v);
    }
    case kFixed64: {
      uint64_t v;
      return readFixed64(v);
    }
    case kLen: {
      std::string_view v;
      return readView(v);
    }
    case kStartGroup:
      return depth < kMaxGroupDepth && skipGroup(tagField(tag), depth + 1);
    case kFixed32: {
      uint32_t v;
      return readFixed32(v);
    }
    default:  // kEndGroup outside a group, 6, 7
      return false;
  }
}

// Skips fields up to the end-group key of `field`; the input's end or any other end-group key
// is an error.
bool Input::skipGroup(uint32_t field, int depth) {
  for (;;) {
    const uint32_t tag = readTag();
    if (tag == 0) return false;
    if (tagWireType(tag) == kEndGroup) return tag == makeTag(field, kEndGroup);
    if (!skipField(tag, depth)) return false;
  }
}

// --- Reader ---------------------------------------------------------------------------------

bool Reader::next() {
  if (error_ || p_ >= end_) return false;
  uint64_t key;
  if (!readVarintAt(p_, end_, key) || (key >> 3) == 0 || (key >> 3) > 0x1fffffff) {
    error_ = true;
    return false;
  }
  field_ = static_cast<uint32_t>(key >> 3);
  wire_type_ = static_cast<uint32_t>(key & 7);
  switch (wire_type_) {
    case kVarint:
      if (!readVarintAt(p_, end_, varint_)) break;
      return true;
    case kFixed64:
    case kFixed32: {
      const size_t n = wire_type_ == kFixed64 ? 8 : 4;
      if (static_cast<size_t>(end_ - p_) < n) break;
      data_ = p_;
      size_ = n;
      p_ += n;
      return true;
    }
    case kLen: {
      uint64_t n;
      if (!readVarintAt(p_, end_, n) || n > static_cast<uint64_t>(end_ - p_)) break;
      data_ = p_;
      size_ = static_cast<size_t>(n);
      p_ += n;
      return true;
    }
    default:
      break;
  }
  error_ = true;
  return false;
}

bool readInt64s(const Reader& r, std::vector<int64_t>& out) {
  if (r.wireType() == kVarint) {
    out.push_back(static_cast<int64_t>(r.varint()));
    return true;
  }
  if (r.wireType() != kLen) return false;
  const uint8_t* p = r.data();
  const uint8_t* end = p + r.size();
  while (p < end) {
    uint64_t v = 0;
    if (!readVarintAt(p, end, v)) return false;
    out.push_back(static_cast<int64_t>(v));
  }
  return true;
}

}  // namespace infergate::common::protowire
