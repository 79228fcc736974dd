#pragma once
// The `triton` backend: batches sent to Triton (or any KServe v2 gRPC server) with ModelInfer,
// over a Pool of endpoints (backends/pool.h). Inputs travel as raw_input_contents referenced
// from the batch buffers (no copy into protobuf), or, with `shared_memory: system`, in a POSIX
// shared memory region registered with SystemSharedMemoryRegister so that no tensor byte
// crosses the gRPC connection (Triton needs `--allow-client-shm=true`). Start-up checks
// ServerReady, ModelReady and ModelMetadata and refuses a backend model whose inputs/outputs
// differ from the configuration, saying what differs. docs/BACKENDS.md.
//
// Threading: as Pool.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backends/batched_model.h"
#include "backends/device_region.h"
#include "backends/grpc_client.h"
#include "backends/grpc_client_wire.h"
#include "backends/pinned_memory.h"
#include "backends/pool.h"
#include "backends/shm_slots.h"

namespace infergate::common {
class MetricsRegistry;
class Counter;
}  // namespace infergate::common

namespace infergate::backends {

// OK when `md` (the backend's ModelMetadata) can serve `config`'s inputs and outputs; otherwise
// FAILED_PRECONDITION listing every difference (missing or extra input, datatype, shape).
absl::Status compareMetadata(const ModelConfig& config, const wire::ModelMetadata& md);

// The shared memory a Triton backend's endpoints share: one region, a slot per in-flight batch,
// each slot holding every input's batch buffer and every fixed-size output. System shared
// memory: a POSIX shm region the batch buffers are copied into. CUDA shared memory: a device
// region the batch buffers are copied into on the slot's stream, with a pinned host staging
// area (same slot layout) that outputs are copied back to.
struct TritonShm {
  SharedMemoryKind kind = SharedMemoryKind::kSystem;
  PinnedRegion region;                    // kSystem (shared_key set)
  std::unique_ptr<DeviceRegion> device;   // kCuda
  PinnedRegion staging;                   // kCuda
  std::unique_ptr<ShmSlots> slots;
  std::string name;                     // region name registered at the servers
  std::vector<size_t> input_offset;     // within a slot
  std::vector<size_t> input_capacity;
  std::vector<size_t> output_offset;    // SIZE_MAX: variable-size output, returned raw
  std::vector<size_t> output_capacity;
  // kSystem: the batcher's input buffer pools, when they live in shared memory (Pool::prepare),
  // registered as regions of their own so that a batch's inputs go with no copy at all; per
  // input, empty name: none (the input is copied into the slot).
  struct SharedInput {
    std::string name;
    std::string key;
    const uint8_t* base = nullptr;
    size_t bytes = 0;
  };
  std::vector<SharedInput> shared_inputs;
};

class TritonClient : public EndpointClient {
 public:
  // `shm` nullptr: raw_input_contents. `metrics` nullptr: none.
  TritonClient(const ModelConfig& config, const RemoteBackendConfig& remote, std::string address,
               std::shared_ptr<TritonShm> shm, common::MetricsRegistry* metrics);
  const std::string& address() const override { return grpc_.address(); }
  absl::Status probe(bool fresh) override;
  void send(const Batch& batch, const SendOptions& options, SendDone done) override;
  void shutdown() override;
  void attachBuffers(const std::vector<SharedBuffer>& buffers) override;

 private:
  absl::Status registerShm();
  // cuda: the device region (key and bytes unused); else a system region of `key`.
  absl::Status registerRegion(bool cuda, const std::string& name, const std::string& key,
                              size_t bytes);

  // {model, endpoint}: this client's series go from the registry with the last claim on them
  // (MetricsRegistry::claimSeries). First member: dropped after everything that counts.
  common::SeriesClaim claim_;
  ModelConfig config_;
  std::string model_name_;
  std::string model_version_;
  const RemoteBackendConfig& remote_;
  GrpcEndpoint grpc_;
  std::shared_ptr<TritonShm> shm_;
  common::Counter* grpc_bytes_ = nullptr;  // tensor bytes inside gRPC messages
  common::Counter* shm_bytes_ = nullptr;   // tensor bytes passed through shared memory
  common::Counter* shm_copied_ = nullptr;  // of those, bytes copied into a slot first
};

// The shared memory of a triton backend with `remote.shared_memory` system or cuda (cuda: the
// emulation when cudaShmEmulationRequested()): regions sized for `slots` in-flight batches.
absl::StatusOr<std::shared_ptr<TritonShm>> createTritonShm(const ModelConfig& config,
                                                           uint32_t slots);

// The triton backend of `config` (config.remote set, backend "triton"): clients, pool, start-up
// checks. `max_inflight_batches`: the batcher's limit (shared memory gets twice as many slots, see
// the .cc). FAILED_PRECONDITION for a metadata
// mismatch, UNAVAILABLE when no endpoint is ready within startup_timeout_ms.
absl::StatusOr<std::unique_ptr<BatchBackend>> createTritonBackend(const ModelConfig& config,
                                                                  uint32_t max_inflight_batches,
                                                                  common::MetricsRegistry* metrics);

}  // namespace infergate::backends
