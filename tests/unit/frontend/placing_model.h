#pragma once
// A model for the streaming body tests: places every input in a heap slot of exactly
// Tensor::slot_bytes (as a batched model's placeInputs would), answers admission with a
// settable status, and answers each request with the identity model's response, keeping the
// requests it got (their received_copy_bytes, whether they were placed).

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "backends/identity_model.h"
#include "backends/model.h"

namespace infergate::frontend::testing {

class HeapSlots : public backends::InputSlots {
 public:
  explicit HeapSlots(int* live) : live_(live) { ++*live_; }
  ~HeapSlots() override { --*live_; }
  std::vector<std::unique_ptr<uint8_t[]>> blocks;

 private:
  int* live_;
};

class PlacingModel : public backends::Model {
 public:
  explicit PlacingModel(backends::ModelConfig cfg) : identity_(cfg), cfg_(std::move(cfg)) {}
  const backends::ModelConfig& config() const override { return cfg_; }
  bool ready() const override { return true; }
  bool placeInputs(backends::InferRequest& r) override {
    ++place_calls;
    if (!place) return false;
    auto slots = std::make_shared<HeapSlots>(&live_reservations);
    for (auto& t : r.inputs) {
      slots->blocks.emplace_back(new uint8_t[t.slot_bytes ? t.slot_bytes : 1]);
      t.slot = slots->blocks.back().get();
    }
    r.slots = std::move(slots);
    return true;
  }
  absl::Status admission(int64_t priority) override {
    ++admission_calls;
    admission_priorities.push_back(priority);
    return admit;
  }
  uint32_t priorityLevels() const override { return levels; }
  void infer(backends::InferRequest request, backends::InferCallback done) override {
    received_copy_bytes.push_back(request.received_copy_bytes);
    placed.push_back(request.slots != nullptr);
    // Outputs are answered from Tensor::data (as the batcher's outputs are): unplace the inputs.
    for (auto& t : request.inputs) {
      if (t.slot == nullptr) continue;
      t.data.assign(t.slot, t.slot + t.slot_bytes);
      t.slot = nullptr;
      t.slot_bytes = 0;
    }
    done(identity_.compute(std::move(request)));
  }

  bool place = true;
  absl::Status admit;
  uint32_t levels = 0;
  int place_calls = 0;
  int admission_calls = 0;
  int live_reservations = 0;
  std::vector<int64_t> admission_priorities;
  std::vector<uint64_t> received_copy_bytes;
  std::vector<bool> placed;

 private:
  backends::IdentityModel identity_;
  backends::ModelConfig cfg_;
};

}  // namespace infergate::frontend::testing
