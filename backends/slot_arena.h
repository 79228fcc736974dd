#pragma once
// The batch buffers of one batcher's inputs (one SlabPool per configured input) and the
// one-copy slots carved from them (docs/BATCHING.md "One copy"). A decoder's request gets a
// reservation (InferRequest::slots) holding, per input, a slot in the buffer that is filling;
// slots are carved in order, so requests placed one after another are contiguous and a batch of
// them is dispatched from where they were decoded. A buffer goes back to its pool when no slot
// and no batch references it and it is no longer filling.
//
// Threading: every method is safe from any thread (one mutex, taken per placement, per batch
// input and per release; never while calling out). Lock order: Batcher's mutex -> the arena's
// (reservations may be dropped under the batcher's lock); the arena never takes the batcher's.
// Reservations hold the arena (shared_ptr), so they never outlive its memory.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/model.h"
#include "backends/pinned_memory.h"
#include "backends/tensor.h"

namespace infergate::backends {

// An input's batch buffer pool in POSIX shared memory: a co-located server that maps `key`
// reads a batch's input i at offset (inputs[i].data - base) when the data lies within it.
struct SharedBuffer {
  size_t input;
  std::string key;
  const uint8_t* base;
  size_t bytes;
};

class SlotArena : public std::enable_shared_from_this<SlotArena> {
 public:
  // Per input of `model`, `buffers` slabs of max_batch_size x row bytes when the row size is
  // fixed, else `variable_bytes`. `pinned` nullptr: plain heap memory; its shared_key gets
  // ".in<i>" per input.
  static absl::StatusOr<std::shared_ptr<SlotArena>> create(const ModelConfig& model,
                                                           uint64_t variable_bytes,
                                                           size_t buffers,
                                                           const PinnedOptions* pinned);

  // Batcher::placeInputs: reserves a slot per input of `request` (named as `inputs`, the
  // model's configured inputs, Tensor::slot_bytes set), sets Tensor::slot and request.slots.
  // False, nothing placed, when the inputs do not match, a slot would not fit or no buffer is
  // free.
  bool place(const std::vector<TensorSpec>& inputs, InferRequest& request);
  // Whether `slots` is a reservation of this arena.
  bool owns(const InputSlots* slots) const;
  // The buffer holding input `input`'s slot of `slots`, a reservation of this arena.
  static uint8_t* slotBase(const InputSlots& slots, size_t input);

  // A batch's reference on the buffer of input `input` its slots lie in (dropped by release).
  void hold(size_t input, uint8_t* base);
  // A fresh buffer of input `input` held by one reference (a batch gathered into it); nullptr
  // when none is free.
  uint8_t* acquire(size_t input);
  // Drops a batch's references: `bases[i]` (nullptr: none) of input i.
  void release(const std::vector<uint8_t*>& bases);

  size_t slabBytes(size_t input) const { return inputs_[input].slab_bytes; }
  const SlabPool* pool(size_t input) const {
    return input < inputs_.size() ? inputs_[input].pool.get() : nullptr;
  }
  std::vector<SharedBuffer> sharedBuffers() const;
  // Reservations alive.
  size_t live() const;

 private:
  class Reservation;
  struct Buffer {
    uint8_t* base = nullptr;
    size_t fill = 0;      // bytes handed out (slots are carved in order)
    uint32_t refs = 0;    // live slots + batches reading it
    bool filling = false; // the buffer new slots go to
  };
  struct Input {
    std::unique_ptr<SlabPool> pool;
    size_t slab_bytes = 0;
    std::vector<Buffer> buffers;  // acquired from the pool (a handful: linear search)
    uint8_t* filling = nullptr;
  };

  SlotArena() = default;
  static Buffer* find(Input& in, uint8_t* base);
  // Drops a reference; the buffer goes back to its pool when unreferenced and not filling.
  void unrefLocked(size_t input, uint8_t* base);

  std::vector<Input> inputs_;  // fixed after create(); buffers guarded by mu_
  mutable std::mutex mu_;
  size_t live_ = 0;
};

}  // namespace infergate::backends
