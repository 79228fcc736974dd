#pragma once
// The one-input model the batched-model unit tests run (batched_model_test,
// batched_model_retire_test): FP32 IN [1] -> OUT [1], and a request for it.

#include <vector>

#include "backends/model.h"

namespace infergate::backends::test_util {

inline ModelConfig tinyModelConfig(int max_batch) {
  ModelConfig c;
  c.name = "m";
  c.version = "1";
  c.max_batch_size = max_batch;
  c.inputs = {{"IN", DataType::kFp32, {1}}};
  c.outputs = {{"OUT", DataType::kFp32, {1}}};
  return c;
}

inline InferRequest tinyRequest() {
  InferRequest r;
  r.model_name = "m";
  r.inputs.push_back(Tensor{"IN", DataType::kFp32, {1, 1}, std::vector<uint8_t>(4, 7)});
  return r;
}

}  // namespace infergate::backends::test_util
