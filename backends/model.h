#pragma once
// The backend interface: a served model and the registry that finds models by name/version.
// Every backend (in-process identity, Triton over gRPC, TF Serving) implements Model.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/batching_config.h"
#include "backends/tensor.h"

namespace infergate::backends {

struct RemoteBackendConfig;  // backends/pool.h

struct ModelConfig {
  std::string name;
  std::string version = "1";
  std::string backend = "identity";  // identity | triton | tfserving (later)
  std::string platform = "infergate_identity";
  // Triton semantics: with max_batch_size > 0 the model takes a leading batch dimension that
  // is NOT part of `shape` in inputs/outputs; metadata reports it as -1.
  int max_batch_size = 0;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  // identity backend cost model (per dispatched batch): fixed + per_item * batch size.
  uint64_t cost_fixed_us = 0;
  uint64_t cost_per_item_us = 0;
  // models[].dynamic_batching: present = requests go through the dynamic batcher
  // (backends/batcher.h, docs/BATCHING.md).
  std::optional<BatchingConfig> dynamic_batching;
  // backend triton | tfserving: endpoints, pool and protocol settings (models[].triton /
  // models[].tfserving); nullptr for in-process backends. A built model's config() has no
  // endpoint list (remote->endpoints and metrics_urls empty): the set changes at run time
  // (reload, DNS) and is the backend's; read it with Model::backendEndpoints().
  std::shared_ptr<const RemoteBackendConfig> remote;

  // The shape a request must present for `spec`: `spec.shape` with -1 prepended when
  // max_batch_size > 0.
  std::vector<int64_t> fullShape(const TensorSpec& spec) const;
};

// Completion of an inference. May be invoked on any thread, exactly once.
using InferCallback = std::function<void(absl::StatusOr<InferResponse>)>;

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual bool ready() const = 0;
  // Runs `request` (already validated against config()) and calls `done` exactly once.
  // If request.cancel is set and the client goes away before the answer, the token's
  // cancel() asks the model to drop the request (see CancelToken); a model that cannot cancel
  // ignores it and answers normally.
  virtual void infer(InferRequest request, InferCallback done) = 0;

  // One-copy placement (optional). `request` is a decoded header: every input has name, dtype,
  // shape and `slot_bytes` (the bytes the decoder will write), no data yet. A model with batch
  // buffers reserves a slot per input, sets each Tensor::slot and request.slots, and returns
  // true; the decoder then writes the elements straight into the slots. False (the default, or
  // no room): nothing is placed and the decoder fills Tensor::data. Any thread.
  virtual bool placeInputs(InferRequest& /*request*/) { return false; }

  // Refuse before copying (optional): would a request of `priority` (InferRequest::priority,
  // 0 = the default level) be refused by the queue policy right now (queue full, model
  // overloaded with nothing lower to shed, shutting down)? Decoders call it once the request's
  // model and priority are known and before any tensor byte is copied; a non-OK status is the
  // answer (UNAVAILABLE / RESOURCE_EXHAUSTED, as enqueue would give) and the body is discarded
  // unread. Counted as a refusal (infergate_batcher_rejections_total and
  // infergate_batcher_refused_before_copy_total). OK does not promise enqueue will accept (the
  // queues move meanwhile). Default: OK (a model without a queue refuses nothing). Any thread.
  virtual absl::Status admission(int64_t /*priority*/) { return absl::OkStatus(); }

  // Triton priority levels (1 = highest .. N) the model schedules by; 0 (the default): none, the
  // model ignores InferRequest::priority and the ingress tag's class maps to nothing.
  virtual uint32_t priorityLevels() const { return 0; }

  // Overload publishing (optional): a model with a queue calls `listener(level)` on every change
  // of its overload level (0 = none, k = shed the k lowest priority classes at the NIC), from the
  // thread that changed it, and at once when set while the level is nonzero; nullptr removes
  // the listener. The afxdp mode wires it to the XDP program's overload level. The default: a
  // model without a queue is never overloaded, and ignores the listener.
  using OverloadListener = std::function<void(int level)>;
  virtual void setOverloadListener(OverloadListener /*listener*/) {}

  // GPU health (docs/GPU.md "Closing the loop"; optional, any thread): an overload level from
  // outside the model's queues (Batcher::setExternalOverload), the remote endpoints (host:port)
  // behind the model now (after setEndpoints and DNS changes; removed ones that still drain are
  // not listed; empty: in-process or none), and a mark on the endpoints whose GPU process
  // is unhealthy (the pool picks them last). Defaults: nothing to raise, no endpoints.
  virtual void setExternalOverload(int /*level*/) {}
  virtual std::vector<std::string> backendEndpoints() const { return {}; }
  virtual void setEndpointDegraded(const std::string& /*address*/, bool /*degraded*/) {}

  // Live endpoint change (configuration reload, docs/OPERATIONS.md "Reload"; optional): a remote
  // model's endpoint list (host:port and dns:///name:port entries, as triton.endpoints) replaced
  // without rebuilding the model: removed endpoints drain, added ones are probed first
  // (Pool::setEndpoints). checkEndpoints() says, changing nothing, whether setEndpoints() would
  // accept the list (reload validates every model before applying any). Defaults: UNIMPLEMENTED
  // (the model is rebuilt instead). Any thread; never blocks on the network.
  virtual absl::Status checkEndpoints(const std::vector<std::string>& /*endpoints*/) const {
    return absl::UnimplementedError("this model cannot change its endpoints live");
  }
  virtual absl::Status setEndpoints(const std::vector<std::string>& /*endpoints*/) {
    return absl::UnimplementedError("this model cannot change its endpoints live");
  }

  // The model is no longer served (ModelRegistry::update removed it; find() no longer returns
  // it): let the work already handed to it finish, then stop its background threads (health
  // probes, metrics scrapes, DNS resolution) and close its backend connections. Called once,
  // by the registry, under its lock: must not block (the model's own threads do the waiting).
  // The model object stays alive (the registry keeps it) and still answers a late request.
  // Default: nothing to stop.
  virtual void retire() {}
};

// Triton level (1 = highest .. levels) of priority class `priority_class` (0 high .. 3
// background, clamped): 1 + floor(class x levels / 4); levels 0 counts as 1. How a request
// without an explicit priority is scheduled from its ingress tag (docs/BATCHING.md "Priority").
uint32_t levelOfPriorityClass(int priority_class, uint32_t levels);

// What decoders call to place a request's inputs (usually [&](r){ return model.placeInputs(r); }).
using InputPlacer = std::function<bool(InferRequest&)>;

// The served models, looked up by name/version from every reactor while a reload
// (app/reload.h) adds and removes models.
//
// Threading: find(), models() and allReady() are lock-free (wait-free) from any thread: they
// read the current snapshot (an immutable list published by the writers) inside a read-side
// section: the reader counts itself in one of kReaderSlots cache-line counters (picked per
// thread) under the current epoch's parity, loads the snapshot, and uncounts itself when done
// with it. add(), update() and remove() may be called from any thread; they are serialized by a
// mutex and publish a new snapshot, then reclaim the one it replaced once no reader can hold it
// (two epoch flips, each waiting for the readers counted under the old parity to leave: a
// reader is inside for one walk of the list, so the writer waits microseconds), so one snapshot
// is allocated whatever the number of reloads. A removed model is retired, not destroyed:
// whoever found it before the removal (a request in flight, a body being streamed into its
// slots) keeps a valid pointer, and its requests complete; find() no longer returns it (new
// requests get 404). Retired models live until the registry is destroyed, bounded by
// kMaxRetired: a reload that would retire more is refused, naming the restart that frees them.
class ModelRegistry {
 public:
  static constexpr size_t kMaxRetired = 256;
  static constexpr size_t kReaderSlots = 16;

  ModelRegistry();
  ~ModelRegistry();
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  void add(std::unique_ptr<Model> model);
  // One publication: the models named in `remove` (name, version; empty version: every version
  // of the name) leave and `add` joins, so a model whose settings change is never missing in
  // between. FailedPrecondition (nothing changed) when kMaxRetired would be exceeded. Returns
  // once the snapshot it replaced is reclaimed (readers in a read-side section have left it).
  absl::Status update(const std::vector<std::pair<std::string, std::string>>& remove,
                      std::vector<std::unique_ptr<Model>> add);
  // update({{name, version}}, {}); false when no such model is served.
  bool remove(std::string_view name, std::string_view version = {});
  // version empty: the model's (only / default) version. nullptr when not found. The model
  // stays valid for the registry's lifetime (retired, not destroyed, when removed).
  Model* find(std::string_view name, std::string_view version = {}) const;
  // The models served now (a copy of the current snapshot).
  std::vector<std::shared_ptr<Model>> models() const;
  bool allReady() const;
  size_t retiredCount() const;
  // Snapshot lists allocated now (the current one, and one being reclaimed; tests).
  size_t snapshotCount() const { return live_snapshots_.load(std::memory_order_relaxed); }

 private:
  using Snapshot = std::vector<std::shared_ptr<Model>>;
  // A reader's counter pair; one per slot, on its own cache line, so reactors do not share.
  struct alignas(64) ReaderSlot {
    std::atomic<uint64_t> active[2] = {0, 0};  // fetch_add/sub in reads, loads in synchronize
  };
  // Runs f(snapshot) inside a read-side section.
  template <typename F>
  auto read(F&& f) const;
  // Waits until no reader can still hold a snapshot unpublished before the call. mu_ held.
  void synchronizeLocked();
  void freeSnapshot(const Snapshot* s);

  // The published snapshot (owned: deleted by the writer after synchronizeLocked()).
  // seq_cst: ordered with the readers' slot increments and the writers' epoch flips.
  std::atomic<const Snapshot*> current_{nullptr};
  std::atomic<uint32_t> epoch_{0};  // parity: the counter new readers use; flipped by writers
  mutable ReaderSlot slots_[kReaderSlots];
  std::atomic<size_t> live_snapshots_{0};
  mutable std::mutex mu_;  // writers; retired_models_, retired_
  // The owners of removed models (their snapshots are reclaimed), at most kMaxRetired.
  std::vector<std::shared_ptr<Model>> retired_models_;
  size_t retired_ = 0;
};

// The HTTP header (lower case) that carries a sequence id for this model (a remote model's
// sequence_id_header, backends/pool.h); empty when none. For frontends, which see the model
// interface only.
std::string_view sequenceIdHeader(const ModelConfig& config);

// Validates a decoded request against the model's configuration: every configured input is
// present exactly once with the right datatype, a shape compatible with the config (variable
// dimensions match anything >= 0, the batch dimension is within max_batch_size), and a data
// size that matches the shape; requested outputs exist. INVALID_ARGUMENT names the input/output
// and says why.
absl::Status validateRequest(const ModelConfig& config, const InferRequest& request);
// What of validateRequest a request's header already decides: input and output names (given
// once, declared), datatypes, shapes and batch sizes of the inputs it lists; not the tensor
// bytes, nor whether an input is missing (a ModelInferRequest may describe it later). The streamed
// decoders run it when the header is known, before anything is reserved for the bytes it
// announces; validateRequest runs again once they came.
absl::Status validateRequestHeader(const ModelConfig& config, const InferRequest& request);

// The shape and datatype part of validateRequest for one input, for decoders that must know a
// client's shape is the model's (so its size is bounded) before they touch memory for it:
// the datatype, the rank, every fixed dimension, variable dimensions >= 0, the batch dimension
// within max_batch_size, and (for fixed-size types) a byte size that does not overflow.
absl::Status checkInputShape(const ModelConfig& config, const TensorSpec& spec, DataType dtype,
                             const std::vector<int64_t>& shape);

}  // namespace infergate::backends
