#include "backends/model.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
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

namespace {
// This thread's reader slot (ModelRegistry::kReaderSlots), handed out round robin.
size_t readerSlot() {
  static std::atomic<size_t> next{0};
  thread_local const size_t slot =
      next.fetch_add(1, std::memory_order_relaxed) % ModelRegistry::kReaderSlots;
  return slot;
}
}  // namespace

ModelRegistry::ModelRegistry() {
  live_snapshots_.fetch_add(1, std::memory_order_relaxed);
  current_.store(new Snapshot(), std::memory_order_seq_cst);
}

ModelRegistry::~ModelRegistry() {
  // No reader may run now (the registry is being destroyed); the current models go first, then
  // the retired ones, as the oldest snapshot went last before.
  freeSnapshot(current_.exchange(nullptr));
  retired_models_.clear();
}

void ModelRegistry::freeSnapshot(const Snapshot* s) {
  if (s == nullptr) return;
  delete s;
  live_snapshots_.fetch_sub(1, std::memory_order_relaxed);
}

template <typename F>
auto ModelRegistry::read(F&& f) const {
  // Counted before the snapshot is loaded (both seq_cst, with synchronizeLocked()'s epoch store
  // and counter loads): a writer that does not see this count has published its snapshot before
  // our load, so we cannot be holding the one it reclaims. The release on leaving pairs with the
  // writer's counter loads: our reads of the snapshot happen before its deletion.
  ReaderSlot& slot = slots_[readerSlot()];
  const uint32_t parity = epoch_.load(std::memory_order_seq_cst) & 1;
  slot.active[parity].fetch_add(1, std::memory_order_seq_cst);
  struct Leave {
    std::atomic<uint64_t>& counter;
    ~Leave() { counter.fetch_sub(1, std::memory_order_release); }
  } leave{slot.active[parity]};
  return f(*current_.load(std::memory_order_seq_cst));
}

void ModelRegistry::synchronizeLocked() {
  // Two flips (as userspace RCU): a reader counts itself under the parity it read, which may be
  // one flip old; after both flips every reader that loaded a snapshot before our publication
  // has been waited for under its parity. Readers that start meanwhile load the new snapshot.
  for (int flip = 0; flip < 2; ++flip) {
    const uint32_t old = epoch_.load(std::memory_order_relaxed);  // writers hold mu_
    epoch_.store(old + 1, std::memory_order_seq_cst);
    for (unsigned spins = 0;; ++spins) {
      uint64_t inside = 0;
      for (const ReaderSlot& s : slots_) inside += s.active[old & 1].load(std::memory_order_seq_cst);
      if (inside == 0) break;
      // A reader walks one short list; only a preempted one takes longer.
      if (spins < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }
}

void ModelRegistry::add(std::unique_ptr<Model> model) {
  std::vector<std::unique_ptr<Model>> one;
  one.push_back(std::move(model));
  (void)update({}, std::move(one));  // removes nothing: cannot exceed kMaxRetired
}

absl::Status ModelRegistry::update(const std::vector<std::pair<std::string, std::string>>& remove,
                                   std::vector<std::unique_ptr<Model>> add) {
  std::lock_guard<std::mutex> lock(mu_);
  const Snapshot* cur = current_.load(std::memory_order_relaxed);  // writers hold mu_
  auto next = std::make_unique<Snapshot>();
  std::vector<std::shared_ptr<Model>> leaving;
  for (const std::shared_ptr<Model>& m : *cur) {
    const ModelConfig& c = m->config();
    bool gone = false;
    for (const auto& [name, version] : remove) {
      gone = gone || (c.name == name && (version.empty() || c.version == version));
    }
    if (gone) {
      leaving.push_back(m);
    } else {
      next->push_back(m);
    }
  }
  if (retired_ + leaving.size() > kMaxRetired) {
    return absl::FailedPreconditionError(fmt::format(
        "{} models have been removed since start-up (at most {} are kept for their in-flight "
        "requests); restart infergate to free them",
        retired_, kMaxRetired));
  }
  for (std::unique_ptr<Model>& m : add) next->push_back(std::move(m));
  retired_ += leaving.size();
  retired_models_.insert(retired_models_.end(), leaving.begin(), leaving.end());
  live_snapshots_.fetch_add(1, std::memory_order_relaxed);
  current_.store(next.release(), std::memory_order_seq_cst);  // readers load seq_cst (read())
  // No longer found: the removed models stop their background work once idle (Model::retire,
  // non-blocking). They stay alive in retired_models_.
  for (const std::shared_ptr<Model>& m : leaving) m->retire();
  // The replaced list: freed once no reader can still be walking it.
  synchronizeLocked();
  freeSnapshot(cur);
  return absl::OkStatus();
}

bool ModelRegistry::remove(std::string_view name, std::string_view version) {
  if (find(name, version) == nullptr) return false;
  return update({{std::string(name), std::string(version)}}, {}).ok();
}

std::vector<std::shared_ptr<Model>> ModelRegistry::models() const {
  return read([](const Snapshot& s) { return s; });
}

Model* ModelRegistry::find(std::string_view name, std::string_view version) const {
  return read([&](const Snapshot& s) -> Model* {
    for (const std::shared_ptr<Model>& m : s) {
      const ModelConfig& c = m->config();
      if (c.name == name && (version.empty() || c.version == version)) return m.get();
    }
    return nullptr;
  });
}

bool ModelRegistry::allReady() const {
  return read([](const Snapshot& s) {
    for (const std::shared_ptr<Model>& m : s) {
      if (!m->ready()) return false;
    }
    return true;
  });
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

namespace {

// validateRequest; `with_data` false: what the inputs and outputs a header lists decide (names
// given once and declared, datatypes, shapes, batch sizes), not the bytes, which have not
// arrived, nor a missing input (a protobuf message may describe it after the tensor bytes).
absl::Status validate(const ModelConfig& config, const InferRequest& request, bool with_data) {
  // Linear in the request whatever its size: a client chooses how many inputs and outputs it
  // lists (a pairwise comparison of 40,000 names held a reactor for 1.4 s).
  absl::flat_hash_map<std::string_view, const Tensor*> by_name;
  by_name.reserve(request.inputs.size());
  for (const Tensor& in : request.inputs) {
    if (!by_name.emplace(in.name, &in).second) {
      return absl::InvalidArgumentError(
          fmt::format("{}{}{}", "input '", in.name, "' is given more than once"));
    }
  }
  absl::flat_hash_set<std::string_view> outputs;
  outputs.reserve(request.outputs.size());
  for (const RequestedOutput& out : request.outputs) {
    // A repeated output would be encoded once per repetition: refused, not multiplied.
    if (!outputs.insert(out.name).second) {
      return absl::InvalidArgumentError(
          fmt::format("{}{}{}", "output '", out.name, "' is requested more than once"));
    }
  }
  int64_t batch = -1;
  size_t declared_given = 0;  // request inputs that are declared (each given once)
  for (const TensorSpec& spec : config.inputs) {
    const auto found = by_name.find(spec.name);
    const Tensor* t = found == by_name.end() ? nullptr : found->second;
    if (t != nullptr) ++declared_given;
    if (t == nullptr) {
      if (!with_data) continue;
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
    if (!with_data) continue;
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
  // Inputs given beyond the declared ones found are undeclared (names are unique by now); the
  // search runs only then and stops at the first (at most as many declared names before it as
  // the model has inputs), whether or not some declared input is missing (the header stage).
  if (declared_given < request.inputs.size()) {
    for (const Tensor& in : request.inputs) {
      if (!declares(config.inputs, in.name)) {
        return absl::InvalidArgumentError(fmt::format("{}{}{}{}{}", "unexpected input '", in.name,
                                                      "' for model '", config.name, "'"));
      }
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

}  // namespace

absl::Status validateRequest(const ModelConfig& config, const InferRequest& request) {
  return validate(config, request, true);
}

absl::Status validateRequestHeader(const ModelConfig& config, const InferRequest& request) {
  return validate(config, request, false);
}

std::string_view sequenceIdHeader(const ModelConfig& config) {
  return config.remote != nullptr ? std::string_view(config.remote->sequence_id_header)
                                  : std::string_view();
}

}  // namespace infergate::backends
