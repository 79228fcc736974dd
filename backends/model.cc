#include "backends/model.h"

#include <algorithm>
#include <cstring>

#include "backends/pool.h"
#include "common/priority.h"
#include "fmt/format.h"

namespace infergate::backends {

uint32_t levelOfPriorityClass(int priority_class, uint32_t levels) {
  if (levels == 0) levels = 1;
  const int c = std::clamp(priority_class, 0, common::kPriorityClasses - 1);
  return 1 + static_cast<uint32_t>(c) * levels / common::kPriorityClasses;
}

std::vector<int64_t> ModelConfig::fullShape(const TensorSpec& spec) const {
  std::vector<int64_t> s;
  s.reserve(spec.shape.size() + 1);
  if (max_batch_size > 0) s.push_back(-1);
  s.insert(s.end(), spec.shape.begin(), spec.shape.end());
  return s;
}

ModelRegistry::ModelRegistry() {
  snapshots_.push_back(std::make_unique<Snapshot>());
  current_.store(snapshots_.back().get(), std::memory_order_release);
}

ModelRegistry::~ModelRegistry() = default;

void ModelRegistry::add(std::unique_ptr<Model> model) {
  std::vector<std::unique_ptr<Model>> one;
  one.push_back(std::move(model));
  (void)update({}, std::move(one));  // removes nothing: cannot exceed kMaxRetired
}

absl::Status ModelRegistry::update(const std::vector<std::pair<std::string, std::string>>& remove,
                                   std::vector<std::unique_ptr<Model>> add) {
  std::lock_guard<std::mutex> lock(mu_);
  const Snapshot& cur = *current_.load(std::memory_order_relaxed);  // writers hold mu_
  auto next = std::make_unique<Snapshot>();
  size_t removed = 0;
  std::vector<Model*> leaving;
  for (const std::shared_ptr<Model>& m : cur) {
    const ModelConfig& c = m->config();
    bool gone = false;
    for (const auto& [name, version] : remove) {
      gone = gone || (c.name == name && (version.empty() || c.version == version));
    }
    if (gone) {
      ++removed;
      leaving.push_back(m.get());
    } else {
      next->push_back(m);
    }
  }
  if (retired_ + removed > kMaxRetired) {
    return absl::FailedPreconditionError(fmt::format(
        "{} models have been removed since start-up (at most {} are kept for their in-flight "
        "requests); restart infergate to free them",
        retired_, kMaxRetired));
  }
  for (std::unique_ptr<Model>& m : add) next->push_back(std::move(m));
  retired_ += removed;
  snapshots_.push_back(std::move(next));
  current_.store(snapshots_.back().get(), std::memory_order_release);  // pairs with readers' acquire
  // No longer found: the removed models stop their background work once idle (Model::retire,
  // non-blocking). They stay alive in the old snapshots.
  for (Model* m : leaving) m->retire();
  return absl::OkStatus();
}

bool ModelRegistry::remove(std::string_view name, std::string_view version) {
  if (find(name, version) == nullptr) return false;
  return update({{std::string(name), std::string(version)}}, {}).ok();
}

const std::vector<std::shared_ptr<Model>>& ModelRegistry::models() const {
  return *current_.load(std::memory_order_acquire);  // pairs with update()'s release
}

Model* ModelRegistry::find(std::string_view name, std::string_view version) const {
  for (const std::shared_ptr<Model>& m : models()) {
    const ModelConfig& c = m->config();
    if (c.name == name && (version.empty() || c.version == version)) return m.get();
  }
  return nullptr;
}

bool ModelRegistry::allReady() const {
  for (const std::shared_ptr<Model>& m : models()) {
    if (!m->ready()) return false;
  }
  return true;
}

size_t ModelRegistry::retiredCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return retired_;
}

namespace {
// Checks that BYTES data is a well-formed sequence of exactly `n` length-prefixed elements.
bool bytesElementsOk(const uint8_t* data, size_t size, uint64_t n) {
  size_t off = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (size - off < 4) return false;
    uint32_t len;
    std::memcpy(&len, data + off, 4);
    off += 4;
    if (size - off < len) return false;
    off += len;
  }
  return off == size;
}

// Whether `specs` declares a tensor called `name`.
bool declares(const std::vector<TensorSpec>& specs, std::string_view name) {
  for (const TensorSpec& spec : specs) {
    if (spec.name == name) return true;
  }
  return false;
}
}  // namespace

absl::Status checkInputShape(const ModelConfig& config, const TensorSpec& spec, DataType dtype,
                             const std::vector<int64_t>& shape) {
  if (dtype != spec.dtype) {
    return absl::InvalidArgumentError(fmt::format("{}{}{}{}{}{}{}{}",
        "input '", spec.name, "' has datatype ", dataTypeName(dtype), ", model '",
        config.name, "' expects ", dataTypeName(spec.dtype)));
  }
  // Compared with fullShape(spec) in place (no vector built per request).
  const size_t lead = config.max_batch_size > 0 ? 1 : 0;
  bool ok = shape.size() == spec.shape.size() + lead;
  for (size_t d = 0; ok && d < shape.size(); ++d) {
    const int64_t want = d < lead ? -1 : spec.shape[d - lead];
    if (shape[d] < 0 || (want >= 0 && shape[d] != want)) ok = false;
  }
  if (!ok) {
    return absl::InvalidArgumentError(fmt::format("{}{}{}{}{}{}{}{}",
        "input '", spec.name, "' has shape ", shapeToString(shape), ", model '", config.name,
        "' expects ", shapeToString(config.fullShape(spec))));
  }
  if (config.max_batch_size > 0 && shape[0] > config.max_batch_size) {
    return absl::InvalidArgumentError(fmt::format("{}{}{}{}{}{}{}{}",
        "input '", spec.name, "' has batch size ", shape[0], ", model '", config.name,
        "' allows at most ", config.max_batch_size));
  }
  if (dtype != DataType::kBytes && !tensorByteSize(shape, dtype)) {
    return absl::InvalidArgumentError(fmt::format("{}{}{}{}",
        "input '", spec.name, "' has an invalid shape ", shapeToString(shape)));
  }
  return absl::OkStatus();
}

absl::Status validateRequest(const ModelConfig& config, const InferRequest& request) {
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (request.inputs[i].name == request.inputs[j].name) {
        return absl::InvalidArgumentError(
            fmt::format("{}{}{}","input '", request.inputs[i].name, "' is given more than once"));
      }
    }
  }
  int64_t batch = -1;
  for (const TensorSpec& spec : config.inputs) {
    const Tensor* t = nullptr;
    for (const Tensor& in : request.inputs) {
      if (in.name == spec.name) t = &in;
    }
    if (t == nullptr) {
      return absl::InvalidArgumentError(fmt::format("{}{}{}{}{}","expected input '", spec.name, "' for model '",
                                                     config.name, "' is missing"));
    }
    if (absl::Status st = checkInputShape(config, spec, t->dtype, t->shape); !st.ok()) return st;
    if (config.max_batch_size > 0) {
      if (batch >= 0 && t->shape[0] != batch) {
        return absl::InvalidArgumentError(fmt::format("{}{}{}{}{}{}",
            "input '", spec.name, "' has batch size ", t->shape[0],
            ", other inputs have batch size ", batch));
      }
      batch = t->shape[0];
    }
    const std::optional<uint64_t> n = elementCount(t->shape);
    if (!n) {
      return absl::InvalidArgumentError(
          fmt::format("{}{}{}{}","input '", spec.name, "' has an invalid shape ", shapeToString(t->shape)));
    }
    if (spec.dtype == DataType::kBytes) {
      if (!bytesElementsOk(t->bytes(), t->byteSize(), *n)) {
        return absl::InvalidArgumentError(fmt::format("{}{}{}{}{}",
            "input '", spec.name, "' BYTES data does not hold exactly ", *n,
            " length-prefixed elements"));
      }
    } else if (const std::optional<uint64_t> need = tensorByteSize(t->shape, spec.dtype);
               !need || t->byteSize() != *need) {
      return absl::InvalidArgumentError(fmt::format("{}{}{}{}{}{}{}{}{}{}",
          "input '", spec.name, "' has ", t->byteSize(), " bytes of data, shape ",
          shapeToString(t->shape), " of ", dataTypeName(spec.dtype), " needs ",
          need ? fmt::format("{}", *need) : std::string("more than 2^64")));
    }
  }
  for (const Tensor& in : request.inputs) {
    if (!declares(config.inputs, in.name)) {
      return absl::InvalidArgumentError(
          fmt::format("{}{}{}{}{}","unexpected input '", in.name, "' for model '", config.name, "'"));
    }
  }
  for (const RequestedOutput& out : request.outputs) {
    if (!declares(config.outputs, out.name)) {
      return absl::InvalidArgumentError(
          fmt::format("{}{}{}{}{}","unexpected inference output '", out.name, "' for model '", config.name, "'"));
    }
  }
  return absl::OkStatus();
}

std::string_view sequenceIdHeader(const ModelConfig& config) {
  return config.remote != nullptr ? std::string_view(config.remote->sequence_id_header)
                                  : std::string_view();
}

}  // namespace infergate::backends
