#include "frontend/kserve_body_stream.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "frontend/streamed_tensor.h"

namespace infergate::frontend {
namespace {

// JSON header bytes reserved up front; beyond that it grows as data arrives (as the parser's
// body), so a hostile Inference-Header-Content-Length commits nothing.
constexpr uint64_t kMaxUpfrontReserve = 64 * 1024;

// Per-thread recycling: a few objects' memory, and header buffers up to 16 KiB of capacity.
constexpr size_t kMaxPooled = 8;
constexpr size_t kMaxPooledBuffer = 16 * 1024;

struct Pool {
  std::vector<void*> blocks;
  std::vector<std::string> buffers;
  ~Pool() {
    for (void* b : blocks) ::operator delete(b);
  }
};
Pool& pool() {
  thread_local Pool p;
  return p;
}

}  // namespace

void* KServeBodyStream::operator new(size_t size) {
  Pool& p = pool();
  if (size == sizeof(KServeBodyStream) && !p.blocks.empty()) {
    void* b = p.blocks.back();
    p.blocks.pop_back();
    return b;
  }
  return ::operator new(size);
}

void KServeBodyStream::operator delete(void* b, size_t size) {
  Pool& p = pool();
  if (size == sizeof(KServeBodyStream) && p.blocks.size() < kMaxPooled) {
    p.blocks.push_back(b);
    return;
  }
  ::operator delete(b);
}

KServeBodyStream::KServeBodyStream(backends::Model* model) : model_(model) {
  Pool& p = pool();
  if (!p.buffers.empty()) {
    buf_ = std::move(p.buffers.back());
    p.buffers.pop_back();
  }
}

KServeBodyStream::~KServeBodyStream() {
  Pool& p = pool();
  if (buf_.capacity() <= kMaxPooledBuffer && p.buffers.size() < kMaxPooled) {
    buf_.clear();
    p.buffers.push_back(std::move(buf_));
  }
}

std::unique_ptr<KServeBodyStream> KServeBodyStream::binary(backends::Model& model,
                                                           uint64_t header_length,
                                                           std::optional<uint64_t> content_length,
                                                           uint64_t max_body, Priority priority) {
  std::unique_ptr<KServeBodyStream> s(new KServeBodyStream(&model));
  s->priority_ = std::move(priority);
  s->header_length_ = header_length;
  s->length_known_ = content_length.has_value();
  const uint64_t body_max = content_length.value_or(max_body);
  if (header_length > body_max) {
    // The header can never be complete: decodeInferRequest's answer is known (with the body's
    // length, at the end); nothing is kept meanwhile.
    s->header_too_long_ = true;
    s->stage_ = Stage::kDiscard;
    return s;
  }
  s->binary_limit_ = body_max - header_length;
  s->buf_.reserve(static_cast<size_t>(std::min(header_length, kMaxUpfrontReserve)));
  return s;
}

std::unique_ptr<KServeBodyStream> KServeBodyStream::raw(backends::Model& model,
                                                        uint64_t content_length,
                                                        Priority priority) {
  std::unique_ptr<KServeBodyStream> s(new KServeBodyStream(&model));
  s->priority_ = std::move(priority);
  s->length_known_ = true;
  s->binary_limit_ = content_length;
  const backends::ModelConfig& cfg = model.config();
  const backends::InputPlacer place = [m = &model](backends::InferRequest& r) {
    return m->placeInputs(r);
  };
  const InferAdmission admission = [p = s.get()](backends::InferRequest& r) { return p->admit(r); };
  decodeRawBinaryHeader(content_length, cfg, cfg.name, cfg.version, &admission, &place, s->req_,
                        s->pass_);
  if (s->pass_.needs_bytes) return nullptr;
  s->startBinary();
  return s;
}

std::unique_ptr<KServeBodyStream> KServeBodyStream::refusal(absl::Status status) {
  std::unique_ptr<KServeBodyStream> s(new KServeBodyStream(nullptr));
  s->pass_.refused = std::move(status);
  s->stage_ = Stage::kDiscard;
  return s;
}

absl::Status KServeBodyStream::admit(backends::InferRequest& r) {
  // The model's limits the header already decides (counts, names, shapes, batch size), before
  // anything is placed or reserved for the bytes it announces.
  if (absl::Status st = backends::validateRequestHeader(model_->config(), r); !st.ok()) return st;
  int64_t prio = 0;
  if (priority_.trusted && r.priority > 0) {
    prio = r.priority;
  } else if (priority_.fallback.ok()) {
    prio = *priority_.fallback;
  } else {
    return absl::OkStatus();  // the handler answers the bad priority header
  }
  return model_->admission(prio);
}

void KServeBodyStream::startBinary() {
  // An error or a refusal: nothing was placed, the rest is only counted.
  stage_ = pass_.error.ok() && pass_.refused.ok() ? Stage::kBinary : Stage::kDiscard;
  part_ = 0;
  part_off_ = 0;
}

void KServeBodyStream::headerDone() {
  const backends::ModelConfig& cfg = model_->config();
  const backends::InputPlacer place = [m = model_](backends::InferRequest& r) {
    return m->placeInputs(r);
  };
  const InferAdmission admission = [this](backends::InferRequest& r) { return admit(r); };
  decodeInferHeader(buf_, binary_limit_, length_known_, cfg, cfg.name, cfg.version, &admission,
                    &place, req_, pass_);
  if (pass_.needs_bytes) {
    stage_ = Stage::kAssemble;  // the header stays in buf_; the rest is appended
    return;
  }
  startBinary();
}

void KServeBodyStream::onBody(const char* data, size_t len, bool copied) {
  total_ += len;
  while (len > 0) {
    switch (stage_) {
      case Stage::kHeader: {
        const size_t take =
            static_cast<size_t>(std::min<uint64_t>(len, header_length_ - buf_.size()));
        buf_.append(data, take);
        data += take;
        len -= take;
        if (buf_.size() == header_length_) headerDone();
        break;
      }
      case Stage::kBinary: {
        if (part_ == pass_.binary.size()) return;  // beyond the announced sizes: counted only
        const InferHeaderPass::Binary& b = pass_.binary[part_];
        backends::Tensor& t = req_.inputs[b.input];
        const size_t n = static_cast<size_t>(std::min<uint64_t>(len, b.size - part_off_));
        streamed::write(t, part_off_, data, n);  // the one copy, or grown as it arrives
        if (copied) copied_ += n;
        data += n;
        len -= n;
        part_off_ += n;
        if (part_off_ == b.size) {
          ++part_;
          part_off_ = 0;
        }
        break;
      }
      case Stage::kDiscard:
        return;
      case Stage::kAssemble:
        buf_.append(data, len);
        return;
    }
  }
}

absl::StatusOr<backends::InferRequest> KServeBodyStream::finish(bool* refused) {
  *refused = false;
  if (!pass_.refused.ok()) {
    *refused = true;
    return pass_.refused;
  }
  if (header_too_long_ || stage_ == Stage::kHeader) {
    return headerLengthExceedsBody(header_length_, total_);
  }
  if (stage_ == Stage::kAssemble) {
    const backends::ModelConfig& cfg = model_->config();
    const backends::InputPlacer place = [m = model_](backends::InferRequest& r) {
      return m->placeInputs(r);
    };
    absl::StatusOr<backends::InferRequest> r =
        decodeInferRequest(buf_, header_length_, cfg, cfg.name, cfg.version, &place);
    // Body assembly is a copy of every binary tensor byte.
    if (r.ok()) r->received_copy_bytes = buf_.size() - header_length_;
    return r;
  }
  absl::Status s = finishInferHeader(pass_, req_, total_ - header_length_);
  if (!s.ok()) {
    req_ = backends::InferRequest();  // releases the reservation now
    return s;
  }
  streamed::end(req_);
  req_.received_copy_bytes = copied_;
  return std::move(req_);
}

}  // namespace infergate::frontend
