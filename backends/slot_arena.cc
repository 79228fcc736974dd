#include "backends/slot_arena.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "fmt/format.h"

namespace infergate::backends {

namespace {

// Bytes per row of `spec` when fixed (no variable dimension, not BYTES); 0 otherwise.
size_t fixedRowBytes(const TensorSpec& spec) {
  if (spec.dtype == DataType::kBytes) return 0;
  for (int64_t d : spec.shape) {
    if (d < 0) return 0;
  }
  std::optional<uint64_t> n = elementCount(spec.shape);
  if (!n) return 0;
  return static_cast<size_t>(*n) * dataTypeSize(spec.dtype);
}

}  // namespace

class SlotArena::Reservation : public InputSlots {
 public:
  Reservation(std::shared_ptr<SlotArena> arena, size_t n) : arena_(std::move(arena)), bases_(n) {}
  ~Reservation() override {
    std::lock_guard<std::mutex> lock(arena_->mu_);
    for (size_t i = 0; i < bases_.size(); ++i) {
      if (bases_[i] != nullptr) arena_->unrefLocked(i, bases_[i]);
    }
    --arena_->live_;
  }
  const SlotArena* arena() const { return arena_.get(); }
  uint8_t* base(size_t i) const { return bases_[i]; }

 private:
  friend class SlotArena;
  std::shared_ptr<SlotArena> arena_;
  // Per configured input: the buffer holding the slot (inline for up to 4 inputs: no
  // allocation per request beyond the reservation itself).
  absl::InlinedVector<uint8_t*, 4> bases_;
};

absl::StatusOr<std::shared_ptr<SlotArena>> SlotArena::create(const ModelConfig& model,
                                                             uint64_t variable_bytes,
                                                             size_t buffers,
                                                             const PinnedOptions* pinned) {
  PinnedOptions unpinned;
  unpinned.try_cuda = unpinned.try_huge_pages = unpinned.try_mlock = false;
  const int rows = std::max(1, model.max_batch_size);
  std::shared_ptr<SlotArena> arena(new SlotArena());
  for (size_t input = 0; input < model.inputs.size(); ++input) {
    const TensorSpec& spec = model.inputs[input];
    const size_t row = fixedRowBytes(spec);
    const size_t slab = row > 0 ? row * rows : variable_bytes;
    PinnedOptions opts = pinned != nullptr ? *pinned : unpinned;
    if (!opts.shared_key.empty()) opts.shared_key = fmt::format("{}.in{}", opts.shared_key, input);
    opts.label = fmt::format("model '{}' input '{}' ({} x {} bytes)", model.name, spec.name,
                             buffers, slab);
    absl::StatusOr<std::unique_ptr<SlabPool>> pool = SlabPool::create(slab, buffers, opts);
    if (!pool.ok()) return pool.status();
    Input in;
    in.slab_bytes = (*pool)->slabBytes();
    in.pool = std::move(*pool);
    arena->inputs_.push_back(std::move(in));
  }
  return arena;
}

SlotArena::Buffer* SlotArena::find(Input& in, uint8_t* base) {
  for (Buffer& b : in.buffers) {
    if (b.base == base) return &b;
  }
  return nullptr;
}

void SlotArena::unrefLocked(size_t i, uint8_t* base) {
  Input& in = inputs_[i];
  for (size_t k = 0; k < in.buffers.size(); ++k) {
    Buffer& b = in.buffers[k];
    if (b.base != base) continue;
    if (b.refs > 0) --b.refs;
    if (b.refs == 0 && b.filling) b.fill = 0;  // nothing lives in it: refill from the start
    if (b.refs == 0 && !b.filling) {
      in.pool->release(b.base);
      in.buffers[k] = in.buffers.back();
      in.buffers.pop_back();
    }
    return;
  }
}

bool SlotArena::place(const std::vector<TensorSpec>& inputs, InferRequest& request) {
  const size_t n = inputs.size();
  if (request.slots || request.inputs.size() != n) return false;
  // Configured input i -> request input order[i].
  absl::InlinedVector<size_t, 4> order(n, SIZE_MAX);
  for (size_t k = 0; k < n; ++k) {
    const Tensor& t = request.inputs[k];
    if (t.slot != nullptr) return false;
    size_t i = 0;
    while (i < n && inputs[i].name != t.name) ++i;
    if (i == n || order[i] != SIZE_MAX) return false;
    order[i] = k;
  }
  auto slots = std::make_shared<Reservation>(shared_from_this(), n);
  absl::InlinedVector<size_t, 4> offsets(n, 0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t done = 0;
    bool ok = true;
    for (; done < n; ++done) {
      Input& in = inputs_[done];
      const size_t bytes = request.inputs[order[done]].slot_bytes;
      if (bytes > in.slab_bytes) {
        ok = false;
        break;
      }
      Buffer* b = in.filling != nullptr ? find(in, in.filling) : nullptr;
      if (b == nullptr || b->fill + bytes > in.slab_bytes) {
        uint8_t* fresh = in.pool->acquire();
        if (fresh == nullptr) {
          ok = false;
          break;
        }
        if (b != nullptr) {  // seal the full one; it goes back when its last slot does
          b->filling = false;
          if (b->refs == 0) unrefLocked(done, b->base);
        }
        in.buffers.push_back({fresh, 0, 0, true});
        in.filling = fresh;
        b = &in.buffers.back();
      }
      offsets[done] = b->fill;
      b->fill += bytes;
      ++b->refs;
      slots->bases_[done] = b->base;
    }
    if (!ok) {
      // Undo this request's slots (they are the last ones carved from their buffers).
      for (size_t i = 0; i < done; ++i) {
        Buffer* b = find(inputs_[i], slots->bases_[i]);
        b->fill -= request.inputs[order[i]].slot_bytes;
        --b->refs;
        slots->bases_[i] = nullptr;
      }
      ++live_;  // the destructor of `slots` (nothing to release) decrements it
      return false;
    }
    ++live_;
  }
  for (size_t i = 0; i < n; ++i) {
    Tensor& t = request.inputs[order[i]];
    t.slot = slots->bases_[i] + offsets[i];
    t.data.clear();
  }
  request.slots = std::move(slots);
  return true;
}

bool SlotArena::owns(const InputSlots* slots) const {
  const auto* own = dynamic_cast<const Reservation*>(slots);
  return own != nullptr && own->arena() == this;
}

uint8_t* SlotArena::slotBase(const InputSlots& slots, size_t input) {
  return static_cast<const Reservation&>(slots).base(input);
}

void SlotArena::hold(size_t input, uint8_t* base) {
  std::lock_guard<std::mutex> lock(mu_);
  ++find(inputs_[input], base)->refs;
}

uint8_t* SlotArena::acquire(size_t input) {
  std::lock_guard<std::mutex> lock(mu_);
  Input& in = inputs_[input];
  uint8_t* p = in.pool->acquire();
  if (p != nullptr) in.buffers.push_back({p, 0, 1, false});
  return p;
}

void SlotArena::release(const std::vector<uint8_t*>& bases) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < bases.size(); ++i) {
    if (bases[i] != nullptr) unrefLocked(i, bases[i]);
  }
}

std::vector<SharedBuffer> SlotArena::sharedBuffers() const {
  std::vector<SharedBuffer> out;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const SlabPool& p = *inputs_[i].pool;
    if (!p.regionKey().empty()) out.push_back({i, p.regionKey(), p.regionData(), p.regionBytes()});
  }
  return out;
}

size_t SlotArena::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

}  // namespace infergate::backends
