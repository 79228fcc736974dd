#pragma once
// A batched model for the priority tests: every batch's request levels are recorded, and the
// batch is answered with an error (the tests look only at the levels).

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/batched_model.h"
#include "backends/batcher.h"

namespace infergate::frontend::testing {

class RecordingBackend : public backends::BatchBackend {
 public:
  explicit RecordingBackend(std::vector<uint32_t>* levels) : levels_(levels) {}
  void execute(const backends::Batch& batch, backends::BatchDone done) override {
    for (const auto& r : batch.requests) levels_->push_back(r->level);
    done(absl::InternalError("recorded"));
  }

 private:
  std::vector<uint32_t>* levels_;
};

// Model "m" version "1": INT32 IN [1] -> OUT [1], max_batch_size 8, `priority_levels` levels,
// over a RecordingBackend appending to `levels`.
inline absl::StatusOr<std::unique_ptr<backends::BatchedModel>> recordingModel(
    std::vector<uint32_t>* levels, uint32_t priority_levels) {
  backends::ModelConfig c;
  c.name = "m";
  c.version = "1";
  c.max_batch_size = 8;
  c.inputs = {{"IN", backends::DataType::kInt32, {1}}};
  c.outputs = {{"OUT", backends::DataType::kInt32, {1}}};
  backends::BatchingConfig b;
  b.priority_levels = priority_levels;
  return backends::BatchedModel::create(c, b, std::make_unique<RecordingBackend>(levels), nullptr,
                                        nullptr);
}

}  // namespace infergate::frontend::testing
