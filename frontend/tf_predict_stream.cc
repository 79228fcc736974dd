#include "frontend/tf_predict_stream.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "common/protowire.h"

namespace infergate::frontend {

namespace protowire = common::protowire;

namespace {

constexpr uint8_t kEntryKey = 0x12;    // PredictRequest.inputs (2, LEN); also the entry's value
constexpr uint8_t kContentKey = 0x22;  // TensorProto.tensor_content (4, LEN)
static_assert(protowire::makeTag(2, protowire::kLen) == kEntryKey);
static_assert(protowire::makeTag(4, protowire::kLen) == kContentKey);

enum class Read : uint8_t { kOk, kMore, kBad };

// A length as tf_predict_codec.cc's reader takes it (libprotobuf 3.21): at most 5 bytes, below
// 2^31 - 16. The caller checks it against the bytes left.
Read readLen(const uint8_t* b, size_t m, size_t& pos, size_t& len) {
  uint32_t v = 0;
  for (int i = 0;; ++i) {
    if (i == 5) return Read::kBad;
    if (pos >= m) return Read::kMore;
    const uint8_t c = b[pos++];
    if (i == 4 && c >= 8) return Read::kBad;
    v |= uint32_t{c & 0x7fu} << (7 * i);
    if (c < 0x80) break;
  }
  if (v > INT32_MAX - 16) return Read::kBad;
  len = v;
  return Read::kOk;
}

// Skips one field at b[pos] within [pos, m): false when it does not end there (incomplete or
// malformed: the whole decoder judges it).
bool skipOne(const uint8_t* b, size_t m, size_t& pos) {
  protowire::Input in(b + pos, m - pos);
  const uint32_t tag = in.readTag();
  if (tag == 0 || !in.skipField(tag)) return false;
  pos = static_cast<size_t>(in.position() - b);
  return true;
}

}  // namespace

// What the bytes at a top-level field boundary hold. Offsets from that boundary.
struct PredictStreamDecoder::Probe {
  enum Kind : uint8_t { kMore, kField, kStream } kind = kMore;
  size_t end = 0;  // kField: the field's end
  size_t entry_body = 0, value_key = 0, value_body = 0, content_key = 0, data = 0, len = 0;
};

namespace {

using Probe = PredictStreamDecoder::Probe;

// `b`: `m` bytes from a top-level field boundary; `left`: the message bytes from there.
Probe probe(const uint8_t* b, size_t m, size_t left) {
  Probe r;
  size_t pos = 1, entry_len = 0;
  if (m > 0 && b[0] == kEntryKey) {
    const Read rd = readLen(b, m, pos, entry_len);
    if (rd == Read::kMore) return r;
    // Only the message's last field can end with the streamed bytes.
    if (rd == Read::kOk && pos + entry_len == left) {
      const size_t end = left;
      r.entry_body = pos;
      while (pos < end) {
        if (pos >= m) return r;
        if (b[pos] == kEntryKey) {
          size_t q = pos + 1, value_len = 0;
          const Read rv = readLen(b, m, q, value_len);
          if (rv == Read::kMore) return r;
          if (rv == Read::kOk && q + value_len == end) {
            // The entry's last field, the value: dtype, shape, ..., tensor_content.
            r.value_key = pos;
            r.value_body = q;
            while (q < end) {
              if (q >= m) return r;
              if (b[q] == kContentKey) {
                size_t d = q + 1, len = 0;
                const Read rc = readLen(b, m, d, len);
                if (rc == Read::kMore) return r;
                if (rc == Read::kOk && len > 0 && d + len == end) {
                  r.kind = Probe::kStream;
                  r.content_key = q;
                  r.data = d;
                  r.len = len;
                  return r;
                }
              }
              if (!skipOne(b, std::min(m, end), q)) {
                if (m < end) return r;  // incomplete (or malformed: judged whole)
                break;
              }
            }
            break;  // no streamable tensor_content: the entry is an ordinary field
          }
        }
        if (!skipOne(b, std::min(m, end), pos)) {
          if (m < end) return r;
          break;
        }
      }
    }
  }
  // An ordinary field: complete once all of it is here.
  size_t at = 0;
  if (!skipOne(b, m, at)) return r;
  r.kind = Probe::kField;
  r.end = at;
  return r;
}

}  // namespace

void PredictStreamDecoder::reset() {
  phase_ = Phase::kHead;
  size_ = off_ = 0;
  if (head_.capacity() > std::string().capacity()) std::string().swap(head_);
  head_.clear();
  if (gather_.capacity() > std::string().capacity()) std::string().swap(gather_);
  gather_.clear();
  scan_ = 0;
  any_copied_ = false;
  req_ = backends::InferRequest();
  len_ = done_ = 0;
  received_copy_ = 0;
  final_ = absl::OkStatus();
}

void PredictStreamDecoder::begin(size_t size, const PredictStreamHook* hook) {
  reset();
  size_ = size;
  hook_ = hook;
}

absl::Status PredictStreamDecoder::piece(const char* p, size_t n, bool copied) {
  if (phase_ == Phase::kDecided) return final_;
  if (n > size_ - off_) {
    phase_ = Phase::kDecided;
    req_ = backends::InferRequest();
    final_ = absl::InternalError("more bytes than the gRPC message announced");
    return final_;
  }
  if (copied && n > 0) any_copied_ = true;
  off_ += n;
  while (n > 0) {
    switch (phase_) {
      case Phase::kHead:
        if (absl::Status st = head(p, n); !st.ok()) return st;
        break;
      case Phase::kData: {
        // The one copy: from the bytes the transport delivered into the slot, at its offset.
        // The tensor_content ends the message, so every byte left belongs to it.
        const size_t take = std::min(n, len_ - done_);
        streamed::write(req_.inputs[0], done_, p, take);  // grows as it arrives if unplaced
        done_ += take;
        if (copied) received_copy_ += take;
        p += take;
        n -= take;
        break;
      }
      case Phase::kGather:
        gather_.append(p, n);  // grows with bytes that arrived; at most the message's size
        gathered_ += n;
        n = 0;
        break;
      case Phase::kDecided:
        return final_;
    }
  }
  return absl::OkStatus();
}

absl::Status PredictStreamDecoder::head(const char*& p, size_t& n) {
  const auto* base = reinterpret_cast<const uint8_t*>(p);
  const size_t msg_at = off_ - n;  // the message offset of p
  if (scan_ == head_.size()) {
    // At a top-level field boundary: probe whole fields in place.
    size_t at = 0;
    for (;;) {
      const Probe r = probe(base + at, n - at, size_ - msg_at - at);
      if (r.kind == Probe::kField) {
        at += r.end;
        continue;
      }
      if (r.kind == Probe::kStream) {
        head_.append(p, at + r.data);  // the message up to the tensor bytes
        scan_ += at;
        p += at + r.data;
        n -= at + r.data;
        return startStream(r);
      }
      break;
    }
    head_.append(p, n);
    scan_ += at;
    p += n;
    n = 0;
  } else {
    // A field split across pieces: add bytes (doubling what is pending, so probes stay linear)
    // and probe again from its start. The tensor bytes start after `old` (the probe would have
    // found them before).
    const size_t old = head_.size();
    const size_t take = std::min(n, std::max<size_t>(old - scan_, 256));
    head_.append(p, take);
    const auto* hb = reinterpret_cast<const uint8_t*>(head_.data());
    for (;;) {
      const Probe r = probe(hb + scan_, head_.size() - scan_, size_ - scan_);
      if (r.kind == Probe::kField) {
        scan_ += r.end;
        continue;
      }
      if (r.kind == Probe::kStream) {
        const size_t data = scan_ + r.data;
        const size_t used = data - old;
        head_.resize(data);
        p += used;
        n -= used;
        return startStream(r);
      }
      break;
    }
    p += take;
    n -= take;
  }
  if (head_.size() > max_head_) toGather();  // nothing streamable in a header this large
  return absl::OkStatus();
}

absl::Status PredictStreamDecoder::startStream(const Probe& r) {
  // The message without the streamed tensor_content: the fields before the entry, then the
  // entry with its value's tensor_content left out (lengths re-encoded). The real message is
  // that plus bytes that cannot be malformed, so its scan is this one's with the content.
  const std::string_view h(head_);
  const size_t e = scan_;
  const std::string_view entry_prefix = h.substr(e + r.entry_body, r.value_key - r.entry_body);
  const std::string_view value_prefix = h.substr(e + r.value_body, r.content_key - r.value_body);
  const size_t value_field = 1 + protowire::varintSize(value_prefix.size()) + value_prefix.size();
  std::string s;
  s.reserve(e + 12 + entry_prefix.size() + value_field);
  s.append(h.substr(0, e));
  protowire::putLenHeader(s, 2, entry_prefix.size() + value_field);
  s.append(entry_prefix);
  protowire::putLenHeader(s, 2, value_prefix.size());
  s.append(value_prefix);
  PredictRequestScan scan;
  if (!scanPredictRequest(s, scan).ok() || scan.inputs.size() != 1 || hook_ == nullptr || !*hook_) {
    toGather();
    return absl::OkStatus();
  }
  scan.inputs[0].content = {};
  scan.inputs[0].streamed_content = r.len;
  backends::InferRequest req;
  absl::StatusOr<bool> go = (*hook_)(scan, req);
  if (!go.ok()) {
    // Refused before copying (the message is well formed: the whole decoder's answer too).
    phase_ = Phase::kDecided;
    std::string().swap(head_);
    final_ = go.status();
    return final_;
  }
  // slot_bytes: the size placed, or (unplaced) announced; the bytes are not here yet.
  if (!*go || req.inputs.size() != 1 || req.inputs[0].slot_bytes != r.len) {
    toGather();  // the placement, if any, goes with `req`
    return absl::OkStatus();
  }
  req_ = std::move(req);
  len_ = r.len;
  done_ = 0;
  phase_ = Phase::kData;
  return absl::OkStatus();
}

void PredictStreamDecoder::toGather() {
  ++fallbacks_;
  gathered_ += head_.size();
  gather_ = std::move(head_);
  head_ = std::string();
  gather_.reserve(std::min(size_, gather_.size() + kMaxHeadBytes));
  scan_ = 0;
  phase_ = Phase::kGather;
}

PredictStreamDecoder::Result PredictStreamDecoder::finish() {
  Result out;
  if (phase_ == Phase::kDecided) {
    out.status = final_;
  } else if (off_ != size_) {
    out.status = absl::InternalError("gRPC message incomplete");
  } else if (phase_ == Phase::kData) {
    if (done_ != len_) {
      out.status = absl::InternalError("tensor_content incomplete");  // lengths are checked
    } else {
      streamed::end(req_);
      req_.received_copy_bytes = received_copy_;
      out.streamed = true;
      out.request = std::move(req_);
      out.copied_bytes = len_;
      ++streamed_;
    }
  } else {
    // Decoded whole: the message was gathered (in head_ when nothing looked streamable).
    if (phase_ == Phase::kHead) {
      gathered_ += head_.size();
      gather_ = std::move(head_);
      head_ = std::string();
    }
    out.whole = gather_;
    out.copies_before = 1 + (any_copied_ ? 1 : 0);
  }
  req_ = backends::InferRequest();
  phase_ = Phase::kDecided;
  if (final_.ok() && !out.status.ok()) final_ = out.status;
  return out;
}

}  // namespace infergate::frontend
