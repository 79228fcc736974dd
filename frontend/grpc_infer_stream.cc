#include "frontend/grpc_infer_stream.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/checked.h"
#include "common/protowire.h"

namespace infergate::frontend {
namespace {

namespace protowire = common::protowire;
constexpr uint32_t kRawTag = protowire::makeTag(7, protowire::kLen);
constexpr char kRawKey[] = {static_cast<char>(kRawTag)};
static_assert(kRawTag < 0x80, "the canonical raw_input_contents key is one byte");

// What decodeModelInferRequest says for the same bytes (grpc_kserve_codec.cc).
absl::Status truncatedRaw() {
  return absl::InvalidArgumentError("malformed ModelInferRequest: truncated raw_input_contents");
}

uint64_t varintValue(const uint8_t* b, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(b[i] & 0x7f) << (7 * i);
  return v;
}

}  // namespace

void ModelInferStreamDecoder::reset() {
  phase_ = Phase::kHead;
  size_ = off_ = 0;
  // The memory goes with the message, not with the call.
  if (head_.capacity() > std::string().capacity()) std::string().swap(head_);
  if (gather_.capacity() > std::string().capacity()) std::string().swap(gather_);
  scan_ = 0;
  gather_copied_ = false;
  req_ = backends::InferRequest();
  expect_.clear();
  raw_ = raw_len_ = raw_done_ = 0;
  vlen_ = 0;
  copied_raw_ = received_copy_ = 0;
  final_ = absl::OkStatus();
  final_copied_ = 0;
}

void ModelInferStreamDecoder::begin(size_t size, const HeaderHook* hook) {
  reset();
  size_ = size;
  hook_ = hook;
}

absl::Status ModelInferStreamDecoder::decide(absl::Status st) {
  phase_ = Phase::kDecided;
  if (!st.ok()) req_ = backends::InferRequest();  // a placement goes with it
  std::string().swap(head_);
  std::string().swap(gather_);
  final_ = std::move(st);
  return final_;
}

absl::Status ModelInferStreamDecoder::decodeWhole(std::string_view wire, bool gathered,
                                                  bool copied) {
  uint64_t c = 0;
  absl::Status st = decodeModelInferRequest(wire, req_, &c, hook_);  // req_ is fresh (begin)
  if (st.ok()) {
    // Every tensor byte was copied once before the decoder's write when the message was
    // gathered, and once more when the transport delivered it from its own copy.
    req_.received_copy_bytes = (gathered ? c : 0) + (copied ? c : 0);
    final_copied_ = c;
  }
  return decide(std::move(st));
}

absl::Status ModelInferStreamDecoder::piece(const char* p, size_t n, bool copied) {
  if (phase_ == Phase::kDecided) return final_;
  if (n > size_ - off_) {
    return decide(absl::InternalError("more bytes than the gRPC message announced"));
  }
  if (off_ == 0 && n == size_ && phase_ == Phase::kHead) {
    off_ = n;  // the whole message in one piece: decoded in place, nothing buffered
    return decodeWhole(std::string_view(p, n), false, copied);
  }
  off_ += n;
  while (n > 0) {
    switch (phase_) {
      case Phase::kHead:
        if (absl::Status st = head(p, n); !st.ok()) return st;
        break;
      case Phase::kRawLen: {
        const uint8_t b = static_cast<uint8_t>(*p++);
        --n;
        vbuf_[vlen_++] = b;
        if (b & 0x80) {
          if (vlen_ == sizeof(vbuf_)) return decide(truncatedRaw());  // an 11-byte varint
          break;
        }
        // A 32-bit length, as protobuf (and protowire::Input::readView) reads it.
        const uint32_t len = static_cast<uint32_t>(varintValue(vbuf_, vlen_));
        const size_t left = size_ - (off_ - n);  // message bytes after this length
        if (len > left) return decide(truncatedRaw());
        if (raw_ >= expect_.size() || len != expect_[raw_]) {
          std::string pending(kRawKey, 1);
          pending.append(reinterpret_cast<const char*>(vbuf_), vlen_);
          fallback(pending);
          break;
        }
        vlen_ = 0;
        raw_len_ = len;
        raw_done_ = 0;
        if (len == 0) {
          ++raw_;
          phase_ = Phase::kKey;
        } else {
          phase_ = Phase::kRawData;
        }
        break;
      }
      case Phase::kRawData: {
        // The one copy: from the bytes the transport delivered into the slot, at its offset.
        const size_t take = std::min(n, raw_len_ - raw_done_);
        streamed::write(req_.inputs[raw_], raw_done_, p, take);
        raw_done_ += take;
        p += take;
        n -= take;
        copied_raw_ += take;
        if (copied) received_copy_ += take;
        if (raw_done_ == raw_len_) {
          ++raw_;
          phase_ = Phase::kKey;
        }
        break;
      }
      case Phase::kKey: {
        const uint8_t b = static_cast<uint8_t>(*p++);
        --n;
        vbuf_[vlen_++] = b;
        if (b & 0x80) {
          if (vlen_ == sizeof(vbuf_)) {
            fallback(std::string_view(reinterpret_cast<const char*>(vbuf_), vlen_));
          }
          break;
        }
        if (static_cast<uint32_t>(varintValue(vbuf_, vlen_)) == kRawTag) {
          vlen_ = 0;
          phase_ = Phase::kRawLen;
        } else {
          // Another field after raw_input_contents (legal protobuf, not what clients send).
          fallback(std::string_view(reinterpret_cast<const char*>(vbuf_), vlen_));
        }
        break;
      }
      case Phase::kGather:
        gather(p, n);
        p += n;
        n = 0;
        break;
      case Phase::kDecided:
        return final_;
    }
  }
  return absl::OkStatus();
}

absl::Status ModelInferStreamDecoder::head(const char*& p, size_t& n) {
  const auto* base = reinterpret_cast<const uint8_t*>(p);
  if (scan_ == head_.size()) {
    // At a field boundary: scan whole fields in place; only header fields are kept.
    size_t at = 0;
    for (;;) {
      protowire::Input in(base + at, n - at);
      const uint32_t tag = in.readTag();
      if (tag == kRawTag) {
        head_.append(p, at);
        scan_ = head_.size();
        const size_t used = static_cast<size_t>(in.position() - base);
        p += used;
        n -= used;
        return startRaws(size_ - (off_ - n));
      }
      if (tag == 0 || !in.skipField(tag)) break;  // a field still arriving (or malformed)
      at = static_cast<size_t>(in.position() - base);
    }
    head_.append(p, n);
    scan_ += at;
    p += n;
    n = 0;
  } else {
    // A field split across pieces: add bytes (doubling what is pending, so rescans stay
    // linear) and scan again from its start.
    const size_t old = head_.size();
    const size_t take = std::min(n, std::max<size_t>(old - scan_, 256));
    head_.append(p, take);
    const auto* hb = reinterpret_cast<const uint8_t*>(head_.data());
    for (;;) {
      protowire::Input in(hb + scan_, head_.size() - scan_);
      const uint32_t tag = in.readTag();
      if (tag == kRawTag) {
        // The key ends in the bytes just added (it was incomplete before them).
        const size_t key_end = static_cast<size_t>(in.position() - hb);
        const size_t used = key_end - old;
        head_.resize(scan_);
        p += used;
        n -= used;
        return startRaws(size_ - (off_ - n));
      }
      if (tag == 0 || !in.skipField(tag)) break;
      scan_ = static_cast<size_t>(in.position() - hb);
    }
    p += take;
    n -= take;
  }
  if (head_.size() > max_head_) {
    // A header this large (typed contents, huge parameters) or a malformed field: gather the
    // message and decode it whole (counted).
    ++fallbacks_;
    gathered_ += head_.size();
    gather_ = std::move(head_);
    std::string().swap(head_);
    scan_ = 0;
    phase_ = Phase::kGather;
  }
  return absl::OkStatus();
}

absl::Status ModelInferStreamDecoder::startRaws(size_t left) {
  bool streamable = false;
  backends::InferRequest r;
  if (absl::Status st = decodeModelInferHeader(std::string_view(head_.data(), scan_), r, streamable);
      !st.ok()) {
    return decide(std::move(st));
  }
  // Every raw_input_contents entry must fit in what the message has left (each also needs a
  // key and a length), so sizes from the shapes are bounded by bytes that will arrive.
  size_t total = 0;
  for (const backends::Tensor& t : r.inputs) {
    if (!streamable || !common::checkedAdd(total, t.slot_bytes, total)) break;
  }
  if (!streamable || r.inputs.empty() || total > left) {
    fallback(std::string_view(kRawKey, 1));
    return absl::OkStatus();
  }
  req_ = std::move(r);
  expect_.clear();
  for (const backends::Tensor& t : req_.inputs) expect_.push_back(t.slot_bytes);
  // Refuse before copying, and placement: the header is known, no tensor byte is written yet.
  if (hook_ != nullptr && *hook_) {
    if (absl::Status st = (*hook_)(req_); !st.ok()) return decide(std::move(st));
  }
  // Unplaced tensors grow as their bytes arrive (frontend/streamed_tensor.h).
  for (backends::Tensor& t : req_.inputs) streamed::begin(t);
  // head_ keeps the header fields: a fallback rebuilds the message from them.
  phase_ = Phase::kRawLen;
  vlen_ = 0;
  return absl::OkStatus();
}

void ModelInferStreamDecoder::fallback(std::string_view pending) {
  ++fallbacks_;
  // Rebuild the message so far: the header fields, the raw_input_contents already written (from
  // where they were written, re-encoded canonically: the same message to a decoder), and the
  // bytes of the field being read.
  size_t bytes = scan_ + pending.size();
  for (size_t j = 0; j < raw_; ++j) bytes += 1 + protowire::varintSize(expect_[j]) + expect_[j];
  std::string g;
  g.reserve(std::min(size_ + 16, bytes + ModelInferStreamDecoder::kMaxHeadBytes));
  g.append(head_, 0, scan_);
  for (size_t j = 0; j < raw_; ++j) {
    protowire::putLenHeader(g, 7, expect_[j]);
    g.append(reinterpret_cast<const char*>(req_.inputs[j].bytes()), expect_[j]);
  }
  g.append(pending);
  gathered_ += g.size();
  gather_ = std::move(g);
  gather_copied_ = received_copy_ > 0;
  std::string().swap(head_);
  scan_ = 0;
  req_ = backends::InferRequest();  // the placement is dropped; the whole decode places again
  expect_.clear();
  raw_ = 0;
  vlen_ = 0;
  phase_ = Phase::kGather;
}

void ModelInferStreamDecoder::gather(const char* p, size_t n) {
  gather_.append(p, n);  // grows with bytes that arrived; at most the message's size
  gathered_ += n;
}

absl::Status ModelInferStreamDecoder::decideAtEnd() {
  if (off_ != size_) return decide(absl::InternalError("gRPC message incomplete"));
  switch (phase_) {
    case Phase::kHead:
      // No raw_input_contents: the whole message is in head_ (gathered when it came in more
      // than one piece).
      gathered_ += head_.size();
      return decodeWhole(head_, size_ > 0, false);
    case Phase::kKey:
      if (vlen_ > 0) {  // a key cut by the end of the message: the whole decoder's error
        fallback(std::string_view(reinterpret_cast<const char*>(vbuf_), vlen_));
        return decodeWhole(gather_, true, gather_copied_);
      }
      if (raw_ != expect_.size()) {
        return decide(absl::InvalidArgumentError("expected " + std::to_string(expect_.size()) +
                                                 " raw_input_contents (one per input), got " +
                                                 std::to_string(raw_)));
      }
      streamed::end(req_);
      req_.received_copy_bytes = received_copy_;
      final_copied_ = copied_raw_;
      ++streamed_;
      return decide(absl::OkStatus());
    case Phase::kRawLen:
      return decide(truncatedRaw());
    case Phase::kRawData:
      return decide(absl::InternalError("raw_input_contents incomplete"));  // lengths are checked
    case Phase::kGather:
      return decodeWhole(gather_, true, gather_copied_);
    case Phase::kDecided:
      break;
  }
  return final_;
}

absl::Status ModelInferStreamDecoder::finish(backends::InferRequest& out, uint64_t* copied_bytes) {
  const absl::Status st = phase_ == Phase::kDecided ? final_ : decideAtEnd();
  if (st.ok()) {
    out = std::move(req_);  // begin() gives the next message a fresh one
    if (copied_bytes != nullptr) *copied_bytes = final_copied_;
  }
  std::string().swap(head_);
  std::string().swap(gather_);
  return st;
}

}  // namespace infergate::frontend
