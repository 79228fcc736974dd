#pragma once
// Model configs for the backend and frontend unit tests, built in one line.

#include <string>
#include <utility>
#include <vector>

#include "backends/model.h"

namespace infergate::mocks {

// A model with these tensors; everything else (backend identity, no cost, no dynamic batching,
// no remote) at ModelConfig's defaults.
inline backends::ModelConfig modelConfig(std::string name, std::string version,
                                         int max_batch_size,
                                         std::vector<backends::TensorSpec> inputs,
                                         std::vector<backends::TensorSpec> outputs) {
  return {.name = std::move(name),
          .version = std::move(version),
          .max_batch_size = max_batch_size,
          .inputs = std::move(inputs),
          .outputs = std::move(outputs)};
}

}  // namespace infergate::mocks
