#include "backends/batch_assembler.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "fmt/format.h"

namespace infergate::backends {

bool BatchAssembler::compatible(const QueuedRequest& a, const QueuedRequest& b) const {
  const size_t skip = model_.max_batch_size > 0 ? 1 : 0;
  for (size_t i = 0; i < a.request.inputs.size(); ++i) {
    const std::vector<int64_t>& x = a.request.inputs[i].shape;
    const std::vector<int64_t>& y = b.request.inputs[i].shape;
    if (x.size() != y.size() || !std::equal(x.begin() + skip, x.end(), y.begin() + skip)) {
      return false;
    }
  }
  return true;
}

BatchAssembler::Selection BatchAssembler::select(const PriorityQueues& queues,
                                                 uint64_t now) const {
  const size_t n_inputs = model_.inputs.size();
  const int64_t max_batch = model_.max_batch_size;
  std::vector<QueuedRequest*> pending;
  std::vector<size_t> sums(n_inputs, 0);
  int64_t rows = 0;
  bool closed = false;
  queues.visit([&](QueuedRequest* r) {
    if (!pending.empty()) {
      // A sequence request (Triton's sequence batcher behind a pool) goes alone: it is bound to
      // one endpoint, and its sequence_* parameters are per request (docs/BACKENDS.md).
      if (max_batch == 0 || !compatible(*pending.front(), *r) || rows + r->rows > max_batch ||
          r->request.sequence.active()) {
        closed = true;
        return false;
      }
      for (size_t i = 0; i < n_inputs; ++i) {
        if (sums[i] + r->request.inputs[i].byteSize() > arena_.slabBytes(i)) {
          closed = true;
          return false;
        }
      }
    }
    pending.push_back(r);
    rows += r->rows;
    for (size_t i = 0; i < n_inputs; ++i) sums[i] += r->request.inputs[i].byteSize();
    if (r->request.sequence.active()) {
      closed = true;  // due at once, alone
      return false;
    }
    return true;
  });
  if (max_batch == 0) closed = true;

  Selection s;
  size_t take = pending.size();
  s.due = closed || rows >= max_batch;
  if (!s.due && !config_.preferred_batch_sizes.empty()) {
    int best = 0;
    for (int p : config_.preferred_batch_sizes) {
      if (p <= rows) best = p;
    }
    if (best > 0) {
      int64_t cum = 0;
      take = 0;
      while (take < pending.size() && cum + pending[take]->rows <= best) {
        cum += pending[take]->rows;
        ++take;
      }
      if (take == 0) take = 1;
      s.due = true;
    }
  }
  if (!s.due && config_.max_queue_delay_us == 0) s.due = true;
  if (!s.due) {
    uint64_t oldest = UINT64_MAX;
    for (const QueuedRequest* r : pending) oldest = std::min(oldest, r->enqueue_ns);
    const uint64_t at = oldest + config_.max_queue_delay_us * 1000;
    if (now >= at) {
      s.due = true;
    } else {
      s.wake_ns = at;
    }
  }
  if (s.due) {
    pending.resize(std::min(take, pending.size()));
    s.requests = std::move(pending);
  }
  return s;
}

BatchAssembler::Copies BatchAssembler::gather(Batch& batch) const {
  const size_t n_inputs = model_.inputs.size();
  batch.slabs.assign(n_inputs, nullptr);
  batch.heap.resize(n_inputs);
  batch.inputs.resize(n_inputs);
  Copies copies;
  for (size_t i = 0; i < n_inputs; ++i) {
    size_t total = 0;
    // One contiguous run of this batcher's slots in one buffer, in batch order: dispatched in
    // place (the common case: requests placed one after another and batched in that order).
    bool in_place = true;
    uint8_t* base = nullptr;
    const uint8_t* next = nullptr;
    for (const auto& r : batch.requests) {
      const Tensor& t = r->request.inputs[i];
      total += t.byteSize();
      if (!in_place) continue;
      if (!r->placed) {
        in_place = false;
        continue;
      }
      uint8_t* b = SlotArena::slotBase(*r->request.slots, i);
      if (base == nullptr) {
        base = b;
      } else if (b != base || t.slot != next) {
        in_place = false;
        continue;
      }
      next = t.slot + t.slot_bytes;
    }
    uint8_t* dst = nullptr;
    if (in_place) {
      arena_.hold(i, base);  // the batch's reference, dropped in Batcher::complete
      batch.slabs[i] = base;
      dst = batch.requests.front()->request.inputs[i].slot;
    } else if (total <= arena_.slabBytes(i)) {
      dst = batch.slabs[i] = arena_.acquire(i);
    }
    if (dst == nullptr) {
      // Larger than a buffer (or, should never happen, no buffer left): a heap buffer keeps
      // the request served.
      batch.heap[i].resize(total);
      dst = batch.heap[i].data();
      copies.unpinned = true;
    }
    if (!in_place) {
      size_t off = 0;
      for (const auto& r : batch.requests) {
        const Tensor& t = r->request.inputs[i];
        const size_t len = t.byteSize();
        if (len != 0) std::memmove(dst + off, t.bytes(), len);
        (r->placed ? copies.compacted : copies.staged) += len;
        off += len;
      }
    }
    const Tensor& first = batch.requests.front()->request.inputs[i];
    BatchTensor& bt = batch.inputs[i];
    bt.name = model_.inputs[i].name;
    bt.dtype = model_.inputs[i].dtype;
    if (model_.max_batch_size > 0) {
      bt.shape.push_back(batch.size);
      bt.shape.insert(bt.shape.end(), first.shape.begin() + 1, first.shape.end());
    } else {
      bt.shape = first.shape;
    }
    bt.data = dst;
    bt.bytes = total;
  }
  return copies;
}

absl::StatusOr<std::vector<std::vector<Tensor>>> BatchAssembler::slice(
    const Batch& batch, const std::vector<BatchTensor>& outputs) const {
  const size_t n = batch.requests.size();
  const bool batched = model_.max_batch_size > 0;
  std::vector<std::vector<Tensor>> sliced(n);
  for (const BatchTensor& o : outputs) {
    if (batched && (o.shape.empty() || o.shape[0] != batch.size)) {
      return absl::InternalError(
          fmt::format("backend output '{}' has shape {}, expected batch dimension {}", o.name,
                      shapeToString(o.shape), batch.size));
    }
    std::vector<int64_t> rest(o.shape.begin() + (batched ? 1 : 0), o.shape.end());
    const std::optional<uint64_t> per_row = elementCount(rest);
    if (!per_row) {
      return absl::InternalError(fmt::format("backend output '{}' has an invalid shape {}",
                                             o.name, shapeToString(o.shape)));
    }
    size_t off = 0;
    for (size_t k = 0; k < n; ++k) {
      const int64_t rows = batched ? batch.requests[k]->rows : 1;
      const uint64_t elems = *per_row * static_cast<uint64_t>(rows);
      size_t len = 0;
      if (o.dtype == DataType::kBytes) {
        for (uint64_t e = 0; e < elems; ++e) {
          uint32_t l = 0;
          if (off + len + 4 > o.bytes) break;
          std::memcpy(&l, o.data + off + len, 4);
          len += 4 + l;
        }
      } else {
        len = static_cast<size_t>(elems) * dataTypeSize(o.dtype);
      }
      if (off + len > o.bytes) {
        return absl::InternalError(
            fmt::format("backend output '{}' is shorter than its shape says", o.name));
      }
      Tensor t;
      t.name = o.name;
      t.dtype = o.dtype;
      if (batched) t.shape.push_back(rows);
      t.shape.insert(t.shape.end(), rest.begin(), rest.end());
      t.data.assign(o.data + off, o.data + off + len);
      off += len;
      sliced[k].push_back(std::move(t));
    }
  }
  return sliced;
}

}  // namespace infergate::backends
