#include "backends/triton_backend.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "backends/dns_resolver.h"
#include "common/metrics.h"

namespace infergate::backends {

namespace {

std::string shapeText(const std::vector<int64_t>& s) { return shapeToString(s); }

std::string names(const std::vector<wire::TensorMetadata>& ts) {
  std::string out;
  for (const auto& t : ts) out += (out.empty() ? "" : ", ") + t.name;
  return out.empty() ? "none" : out;
}

// Can a backend dimension list `have` serve requests the config allows (`want`)?
bool shapeServes(const std::vector<int64_t>& want, const std::vector<int64_t>& have) {
  if (want.size() != have.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (have[i] == -1) continue;           // the backend takes anything
    if (want[i] != have[i]) return false;  // fixed differs, or config variable vs backend fixed
  }
  return true;
}

void compareTensors(const ModelConfig& config, const std::vector<TensorSpec>& specs,
                    const std::vector<wire::TensorMetadata>& have, const char* kind,
                    bool extra_is_error, std::vector<std::string>& diffs) {
  std::vector<bool> used(have.size(), false);
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    const wire::TensorMetadata* m = findTensorByName(
        have, s.name, [](const wire::TensorMetadata& t) -> const std::string& { return t.name; },
        used);
    if (m == nullptr) {
      diffs.push_back(fmt::format(
          "{}[{}] '{}' is configured but the backend model has no such "
          "{} (it has: {})",
          kind, i, s.name, std::string(kind).substr(0, std::strlen(kind) - 1), names(have)));
      continue;
    }
    if (m->datatype != dataTypeName(s.dtype)) {
      diffs.push_back(fmt::format("{}[{}] '{}': datatype {} configured, the backend has {}", kind,
                                  i, s.name, dataTypeName(s.dtype), m->datatype));
    }
    const std::vector<int64_t> want = config.fullShape(s);
    if (!shapeServes(want, m->shape)) {
      diffs.push_back(
          fmt::format("{}[{}] '{}': shape {} configured (with the batch dimension), "
                      "the backend has {}",
                      kind, i, s.name, shapeText(want), shapeText(m->shape)));
    }
  }
  if (extra_is_error) {
    for (size_t j = 0; j < have.size(); ++j) {
      if (!used[j]) {
        diffs.push_back(
            fmt::format("the backend model also needs {} '{}' ({} {}), which is not "
                        "configured",
                        std::string(kind).substr(0, std::strlen(kind) - 1), have[j].name,
                        have[j].datatype, shapeText(have[j].shape)));
      }
    }
  }
}

size_t alignUp(size_t v) { return (v + 63) & ~size_t{63}; }

// Bytes of a fixed-size tensor of `spec` for a whole batch; 0 when variable.
size_t fixedBatchBytes(const ModelConfig& c, const TensorSpec& spec) {
  if (spec.dtype == DataType::kBytes) return 0;
  std::optional<uint64_t> n = elementCount(spec.shape);
  if (!n) return 0;  // a -1 dimension
  return static_cast<size_t>(*n) * dataTypeSize(spec.dtype) *
         static_cast<size_t>(std::max(c.max_batch_size, 1));
}

std::atomic<uint32_t> g_region_counter{0};

}  // namespace

absl::Status compareMetadata(const ModelConfig& config, const wire::ModelMetadata& md) {
  std::vector<std::string> diffs;
  compareTensors(config, config.inputs, md.inputs, "inputs", true, diffs);
  compareTensors(config, config.outputs, md.outputs, "outputs", false, diffs);
  if (diffs.empty()) return absl::OkStatus();
  std::string all;
  for (const std::string& d : diffs) all += (all.empty() ? "" : "; ") + d;
  return absl::FailedPreconditionError(all);
}

TritonClient::TritonClient(const ModelConfig& config, const RemoteBackendConfig& remote,
                           std::string address, std::shared_ptr<TritonShm> shm,
                           common::MetricsRegistry* metrics)
    : config_(config),
      model_name_(remote.model_name.empty() ? config.name : remote.model_name),
      model_version_(remote.model_version),
      remote_(remote),
      grpc_(std::move(address), static_cast<int>(remote.channels),
            static_cast<int>(std::min<uint64_t>(remote.max_message_bytes, INT32_MAX))),
      shm_(std::move(shm)) {
  if (metrics != nullptr) {
    claim_ = common::SeriesClaim(metrics, {{"model", config_.name}, {"endpoint", grpc_.address()}});
    grpc_bytes_ = &metrics->counter(
        "infergate_backend_tensor_bytes_total", "Tensor bytes sent to a backend endpoint, by path",
        {{"model", config_.name}, {"endpoint", grpc_.address()}, {"path", "grpc"}});
    shm_bytes_ = &metrics->counter(
        "infergate_backend_tensor_bytes_total", "Tensor bytes sent to a backend endpoint, by path",
        {{"model", config_.name}, {"endpoint", grpc_.address()}, {"path", "shm"}});
    shm_copied_ = &metrics->counter(
        "infergate_backend_shm_copied_bytes_total",
        "Input bytes copied into a shared memory slot because the batch buffer was not shared",
        {{"model", config_.name}, {"endpoint", grpc_.address()}});
  }
}

absl::Status TritonClient::registerRegion(bool cuda, const std::string& name,
                                          const std::string& key, size_t bytes) {
  const uint64_t t = remote_.health_check_timeout_ms;
  // A stale registration of the same name (e.g. from before a restart of ours) is dropped first.
  grpc_.callSync(cuda ? kMethodCudaShmUnregister : kMethodShmUnregister,
                 wire::encodeNameVersion(name, ""), t);
  GrpcResult r = cuda ? grpc_.callSync(kMethodCudaShmRegister,
                                       wire::encodeCudaShmRegister(name, shm_->device->ipcHandle(),
                                                                   shm_->device->device(),
                                                                   shm_->device->size()),
                                       t)
                      : grpc_.callSync(kMethodShmRegister,
                                       wire::encodeSystemShmRegister(name, key, 0, bytes), t);
  if (!r.status.ok()) {
    if (cuda) {
      return absl::FailedPreconditionError(fmt::format(
          "CudaSharedMemoryRegister of '{}' ({} bytes on GPU {}, {}) failed: {} (Triton needs "
          "--allow-client-shm=true and must run on the same host with access to that GPU; or "
          "set shared_memory: system or none)",
          name, shm_->device->size(), shm_->device->device(), shm_->device->kind(),
          std::string(r.status.message())));
    }
    return absl::FailedPreconditionError(fmt::format(
        "SystemSharedMemoryRegister of '{}' (key {}) failed: {} (Triton needs "
        "--allow-client-shm=true and must share /dev/shm with infergate; or set shared_memory: "
        "none)",
        name, key, std::string(r.status.message())));
  }
  if (cuda) {
    spdlog::info(
        "model '{}': CUDA shared memory region '{}' ({} bytes on GPU {}, {}) registered "
        "at {}",
        config_.name, name, shm_->device->size(), shm_->device->device(), shm_->device->kind(),
        grpc_.address());
  } else {
    spdlog::info("model '{}': system shared memory region '{}' ({} bytes, key {}) registered at {}",
                 config_.name, name, bytes, key, grpc_.address());
  }
  return absl::OkStatus();
}

absl::Status TritonClient::registerShm() {
  if (shm_->kind == SharedMemoryKind::kCuda) {
    return registerRegion(true, shm_->name, std::string(), 0);
  }
  absl::Status s = registerRegion(false, shm_->name, shm_->region.key(), shm_->region.size());
  for (const TritonShm::SharedInput& si : shm_->shared_inputs) {
    if (s.ok() && !si.name.empty()) s = registerRegion(false, si.name, si.key, si.bytes);
  }
  return s;
}

void TritonClient::attachBuffers(const std::vector<SharedBuffer>& buffers) {
  // The clients of a backend share `shm_`: the first one fills it in (before the pool starts).
  if (shm_ == nullptr || shm_->kind != SharedMemoryKind::kSystem || buffers.empty() ||
      !shm_->shared_inputs.empty()) {
    return;
  }
  shm_->shared_inputs.resize(config_.inputs.size());
  for (const SharedBuffer& b : buffers) {
    if (b.input >= shm_->shared_inputs.size()) continue;
    TritonShm::SharedInput& si = shm_->shared_inputs[b.input];
    si.name = fmt::format("{}_in{}", shm_->name, b.input);
    si.key = b.key;
    si.base = b.base;
    si.bytes = b.bytes;
  }
}

absl::Status TritonClient::probe(bool fresh) {
  const uint64_t t = remote_.health_check_timeout_ms;
  GrpcResult r = grpc_.callSync(kMethodServerReady, std::string(), t);
  if (!r.status.ok()) {
    return absl::UnavailableError(fmt::format("ServerReady: {}: {}",
                                              absl::StatusCodeToString(r.status.code()),
                                              std::string(r.status.message())));
  }
  absl::StatusOr<bool> ready = wire::decodeReady(r.body);
  if (!ready.ok()) return ready.status();
  if (!*ready) return absl::UnavailableError("server not ready");
  r = grpc_.callSync(kMethodModelReady, wire::encodeNameVersion(model_name_, model_version_), t);
  if (!r.status.ok()) {
    return absl::UnavailableError(
        fmt::format("ModelReady '{}': {}", model_name_, std::string(r.status.message())));
  }
  ready = wire::decodeReady(r.body);
  if (!ready.ok()) return ready.status();
  if (!*ready) return absl::UnavailableError(fmt::format("model '{}' not ready", model_name_));
  if (fresh && remote_.validate_metadata) {
    r = grpc_.callSync(kMethodModelMetadata, wire::encodeNameVersion(model_name_, model_version_),
                       t);
    if (!r.status.ok()) {
      return absl::UnavailableError(
          fmt::format("ModelMetadata '{}': {}", model_name_, std::string(r.status.message())));
    }
    absl::StatusOr<wire::ModelMetadata> md = wire::decodeModelMetadata(r.body);
    if (!md.ok()) return md.status();
    absl::Status cmp = compareMetadata(config_, *md);
    if (!cmp.ok()) {
      return absl::FailedPreconditionError(fmt::format(
          "model '{}': the backend model '{}' at {} does not match the configuration: {}",
          config_.name, model_name_, grpc_.address(), std::string(cmp.message())));
    }
  }
  if (shm_ != nullptr) {
    bool need = fresh;
    if (!need) {
      // A restarted server has forgotten the region: register it again.
      GrpcResult s = grpc_.callSync(
          shm_->kind == SharedMemoryKind::kCuda ? kMethodCudaShmStatus : kMethodShmStatus,
          wire::encodeNameVersion(shm_->name, ""), t);
      if (!s.status.ok()) {
        if (s.status.code() == absl::StatusCode::kUnavailable ||
            s.status.code() == absl::StatusCode::kDeadlineExceeded) {
          return absl::UnavailableError(std::string(s.status.message()));
        }
        spdlog::info("model '{}': region '{}' unknown at {} ({}); registering it again",
                     config_.name, shm_->name, grpc_.address(), std::string(s.status.message()));
        need = true;
      }
    }
    if (need) return registerShm();
  }
  return absl::OkStatus();
}

namespace {
struct InferCall {
  wire::ModelInferEncoding enc;
  std::shared_ptr<TritonShm> shm;
  int slot = -1;
  ~InferCall() {
    if (slot >= 0) shm->slots->release(slot);
  }
};
}  // namespace

void TritonClient::send(const Batch& batch, const SendOptions& options, SendDone done) {
  auto call = std::make_shared<InferCall>();
  // The slot's place in the region; slot_base: its host address (system: the region itself;
  // cuda: the pinned staging area that outputs are copied back to).
  uint8_t* slot_base = nullptr;
  uint64_t slot_offset = 0;
  const bool cuda = shm_ != nullptr && shm_->kind == SharedMemoryKind::kCuda;
  if (shm_ != nullptr) {
    call->shm = shm_;
    call->slot = shm_->slots->acquire();
    if (call->slot >= 0) {
      slot_offset = static_cast<uint64_t>(call->slot) * shm_->slots->slotBytes();
      slot_base = (cuda ? shm_->staging.data() : shm_->region.data()) + slot_offset;
    }
  }
  std::vector<wire::InferInput> inputs(batch.inputs.size());
  std::vector<HostToDevice> copies;
  size_t shm_bytes = 0;
  size_t copied = 0;
  for (size_t i = 0; i < batch.inputs.size(); ++i) {
    const BatchTensor& t = batch.inputs[i];
    wire::InferInput& in = inputs[i];
    in.name = t.name;
    in.dtype = t.dtype;
    in.shape = &t.shape;
    in.data = t.data;
    in.bytes = t.bytes;
    const TritonShm::SharedInput* si =
        shm_ != nullptr && i < shm_->shared_inputs.size() && !shm_->shared_inputs[i].name.empty()
            ? &shm_->shared_inputs[i]
            : nullptr;
    if (si != nullptr && t.data >= si->base && t.bytes <= si->bytes &&
        static_cast<size_t>(t.data - si->base) <= si->bytes - t.bytes) {
      // The batch buffer is itself a registered region: no copy at all.
      in.shm_region = si->name;
      in.shm_offset = static_cast<uint64_t>(t.data - si->base);
      shm_bytes += t.bytes;
      continue;
    }
    if (slot_base != nullptr && t.bytes <= shm_->input_capacity[i]) {
      // One local copy from the batch buffer into the registered region (cuda: host to device
      // on the slot's stream); nothing over gRPC.
      if (cuda) {
        copies.push_back({t.data, slot_offset + shm_->input_offset[i], t.bytes});
      } else {
        std::memcpy(slot_base + shm_->input_offset[i], t.data, t.bytes);
        copied += t.bytes;
      }
      in.shm_region = shm_->name;
      in.shm_offset = slot_offset + shm_->input_offset[i];
      shm_bytes += t.bytes;
    }
  }
  // The rest: (cuda) the copy into device memory, the request, the call. A CUDA copy waits for
  // the device, so it runs on the endpoint's I/O thread: send() is called on a reactor or the
  // batcher and never blocks (BatchBackend::execute's contract).
  const bool needs_copy = cuda && !copies.empty();
  auto rest = [this, call, &batch, options, inputs = std::move(inputs), copies = std::move(copies),
               shm_bytes, copied, slot_base, slot_offset, cuda, done = std::move(done)]() mutable {
    if (cuda && !copies.empty()) {
      absl::Status c =
          shm_->device->copyIn(static_cast<size_t>(call->slot), copies.data(), copies.size());
      if (!c.ok()) {
        // The bytes are still in the batch buffers: send this batch over gRPC instead.
        spdlog::warn(
            "model '{}': copy into CUDA shared memory failed ({}); batch {} goes as "
            "raw_input_contents",
            config_.name, std::string(c.message()), batch.id);
        for (wire::InferInput& in : inputs) in.shm_region = {};
        shm_bytes = 0;
      }
    }
    std::vector<wire::InferOutput> outputs(config_.outputs.size());
    for (size_t i = 0; i < config_.outputs.size(); ++i) {
      outputs[i].name = config_.outputs[i].name;
      if (slot_base != nullptr && shm_->output_offset[i] != SIZE_MAX) {
        outputs[i].shm_region = shm_->name;
        outputs[i].shm_offset = slot_offset + shm_->output_offset[i];
        outputs[i].shm_bytes = shm_->output_capacity[i];
      }
    }
    wire::InferParams params;
    params.model_name = model_name_;
    params.model_version = model_version_;
    const std::string id = fmt::format("infergate-{}", batch.id);
    params.id = id;
    params.priority = options.priority;
    params.timeout_us = options.timeout_us;
    if (batch.requests.size() == 1 && batch.requests[0]->request.sequence.active()) {
      const SequenceParams& sp = batch.requests[0]->request.sequence;
      params.sequence_id = sp.id;
      params.sequence_id_is_string = sp.id_is_string;
      params.sequence_start = sp.start;
      params.sequence_end = sp.end;
    }
    wire::encodeModelInfer(params, inputs, outputs, call->enc);
    if (grpc_bytes_ != nullptr) grpc_bytes_->inc(call->enc.raw_bytes);
    if (shm_bytes_ != nullptr && shm_bytes > 0) shm_bytes_->inc(shm_bytes);
    if (shm_copied_ != nullptr && copied > 0) shm_copied_->inc(copied);

    grpc_.call(
        kMethodModelInfer, call->enc, options.timeout_ms,
        [this, call, slot_base, slot_offset, cuda, done = std::move(done)](GrpcResult r) mutable {
          if (!r.status.ok()) {
            done(r.status, r.not_sent);
            return;
          }
          absl::StatusOr<std::vector<wire::InferResponseOutput>> outs =
              wire::decodeModelInferResponse(r.body);
          if (!outs.ok()) {
            done(outs.status(), false);
            return;
          }
          std::vector<BatchTensor> result;
          result.reserve(config_.outputs.size());
          for (size_t i = 0; i < config_.outputs.size(); ++i) {
            const TensorSpec& spec = config_.outputs[i];
            const wire::InferResponseOutput* o = nullptr;
            for (const auto& x : *outs) {
              if (x.name == spec.name) o = &x;
            }
            if (o == nullptr) {
              done(absl::InternalError(
                       fmt::format("{} returned no output '{}'", grpc_.address(), spec.name)),
                   false);
              return;
            }
            if (o->datatype != dataTypeName(spec.dtype)) {
              done(absl::InternalError(fmt::format("{} returned output '{}' as {}, configured {}",
                                                   grpc_.address(), spec.name, o->datatype,
                                                   dataTypeName(spec.dtype))),
                   false);
              return;
            }
            BatchTensor t;
            t.name = spec.name;
            t.dtype = spec.dtype;
            t.shape = o->shape;
            if (o->raw != nullptr) {
              t.data = const_cast<uint8_t*>(o->raw);
              t.bytes = o->raw_bytes;
            } else if (slot_base != nullptr && shm_->output_offset[i] != SIZE_MAX) {
              std::optional<uint64_t> n = elementCount(o->shape);
              const uint64_t bytes = n ? *n * dataTypeSize(spec.dtype) : UINT64_MAX;
              if (bytes > shm_->output_capacity[i]) {
                done(absl::InternalError(
                         fmt::format("{} output '{}' shape {} exceeds its shared memory slot",
                                     grpc_.address(), spec.name, shapeToString(o->shape))),
                     false);
                return;
              }
              t.data = slot_base + shm_->output_offset[i];
              t.bytes = static_cast<size_t>(bytes);
              if (cuda) {
                absl::Status c =
                    shm_->device->copyOut(static_cast<size_t>(call->slot),
                                          slot_offset + shm_->output_offset[i], t.data, t.bytes);
                if (!c.ok()) {
                  done(absl::InternalError(
                           fmt::format("copying output '{}' from CUDA shared memory: {}", spec.name,
                                       std::string(c.message()))),
                       false);
                  return;
                }
              }
            } else {
              done(absl::InternalError(fmt::format("{} returned output '{}' without raw contents",
                                                   grpc_.address(), spec.name)),
                   false);
              return;
            }
            result.push_back(std::move(t));
          }
          done(std::move(result), false);
          // `r` (the response buffer) and `call` (the slot) are released after done.
        },
        batch.cancel);  // every client gone: RST_STREAM CANCEL reaches Triton
  };
  if (needs_copy) {
    grpc_.post(std::move(rest));
  } else {
    rest();
  }
}

void TritonClient::shutdown() {
  if (shm_ == nullptr) return;
  const bool cuda = shm_->kind == SharedMemoryKind::kCuda;
  GrpcResult r =
      grpc_.callSync(cuda ? kMethodCudaShmUnregister : kMethodShmUnregister,
                     wire::encodeNameVersion(shm_->name, ""), remote_.health_check_timeout_ms);
  if (!r.status.ok()) {
    spdlog::warn("model '{}': {}SharedMemoryUnregister '{}' at {} failed: {}", config_.name,
                 cuda ? "Cuda" : "System", shm_->name, grpc_.address(),
                 std::string(r.status.message()));
  }
  for (const TritonShm::SharedInput& si : shm_->shared_inputs) {
    if (si.name.empty()) continue;
    GrpcResult u = grpc_.callSync(kMethodShmUnregister, wire::encodeNameVersion(si.name, ""),
                                  remote_.health_check_timeout_ms);
    if (!u.status.ok()) {
      spdlog::warn("model '{}': SystemSharedMemoryUnregister '{}' at {} failed: {}", config_.name,
                   si.name, grpc_.address(), std::string(u.status.message()));
    }
  }
}

absl::StatusOr<std::shared_ptr<TritonShm>> createTritonShm(const ModelConfig& config,
                                                           uint32_t slot_count) {
  const RemoteBackendConfig& remote = *config.remote;
  auto shm = std::make_shared<TritonShm>();
  shm->kind = remote.shared_memory;
  const uint64_t variable_bytes =
      config.dynamic_batching ? config.dynamic_batching->variable_input_buffer_bytes : (1u << 20);
  size_t off = 0;
  for (const TensorSpec& s : config.inputs) {
    size_t cap = fixedBatchBytes(config, s);
    if (cap == 0) cap = variable_bytes;
    shm->input_offset.push_back(off);
    shm->input_capacity.push_back(cap);
    off += alignUp(cap);
  }
  for (const TensorSpec& s : config.outputs) {
    size_t cap = fixedBatchBytes(config, s);
    shm->output_offset.push_back(cap == 0 ? SIZE_MAX : off);
    shm->output_capacity.push_back(cap);
    off += alignUp(cap);
  }
  const size_t slot_bytes = alignUp(std::max<size_t>(off, 64));
  const size_t slots = std::max<uint32_t>(slot_count, 1);
  const uint32_t n = g_region_counter.fetch_add(1);
  auto fail = [&](const absl::Status& s) {
    return absl::Status(
        s.code(),
        fmt::format("model '{}': triton.shared_memory: {}: {}", config.name,
                    sharedMemoryKindName(remote.shared_memory), std::string(s.message())));
  };
  if (remote.shared_memory == SharedMemoryKind::kCuda) {
    absl::StatusOr<std::unique_ptr<DeviceRegion>> dev =
        cudaShmEmulationRequested()
            ? createEmulatedCudaRegion(fmt::format("/igcuda.{}.{}", ::getpid(), n),
                                       slot_bytes * slots)
            : createCudaRegion(static_cast<int>(remote.cuda_device), slot_bytes * slots, slots);
    if (!dev.ok()) return fail(dev.status());
    if ((*dev)->kind() == "emulated") {
      spdlog::warn(
          "model '{}': CUDA shared memory is EMULATED over POSIX shared memory "
          "(INFERGATE_CUDA_SHM_EMULATION=1; for tests only, real Triton refuses it)",
          config.name);
    }
    PinnedOptions po;
    po.label = fmt::format("model '{}' CUDA shared memory output staging", config.name);
    absl::StatusOr<PinnedRegion> staging = PinnedRegion::allocate(slot_bytes * slots, po);
    if (!staging.ok()) return fail(staging.status());
    shm->device = std::move(*dev);
    shm->staging = std::move(*staging);
    shm->name = fmt::format("infergate_cuda_{}_{}_{}", config.name, ::getpid(), n);
  } else {
    PinnedOptions po;
    po.label = fmt::format("model '{}' shared memory slots", config.name);
    po.shared_key = fmt::format("/infergate.{}.{}.{}", ::getpid(), config.name, n);
    absl::StatusOr<PinnedRegion> region = PinnedRegion::allocate(slot_bytes * slots, po);
    if (!region.ok()) return fail(region.status());
    shm->region = std::move(*region);
    shm->name = fmt::format("infergate_{}_{}_{}", config.name, ::getpid(), n);
  }
  shm->slots = std::make_unique<ShmSlots>(slot_bytes, slots);
  return shm;
}

absl::StatusOr<std::unique_ptr<BatchBackend>> createTritonBackend(
    const ModelConfig& config, uint32_t max_inflight_batches, common::MetricsRegistry* metrics) {
  if (config.remote == nullptr || config.remote->endpoints.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("model '{}': backend triton needs triton.endpoints", config.name));
  }
  const RemoteBackendConfig& remote = *config.remote;
  std::shared_ptr<TritonShm> shm;
  if (remote.shared_memory != SharedMemoryKind::kNone) {
    // Twice the batches in flight: a slot is released when its call's completion has returned,
    // and the pool and the batcher may send the next batch before that (from inside the
    // completion, or from the dispatcher once the batch's outputs are consumed). Each in-flight
    // batch can leave at most one such finishing slot behind, so 2x never runs out; with 1x, a
    // loaded pool sent ~6% of its batches as raw_input_contents (bench_overhead.py, 8 clients).
    absl::StatusOr<std::shared_ptr<TritonShm>> made =
        createTritonShm(config, 2 * std::max<uint32_t>(max_inflight_batches, 1));
    if (!made.ok()) return made.status();
    shm = std::move(*made);
  }
  std::vector<std::unique_ptr<EndpointClient>> clients;
  for (const std::string& ep : remote.endpoints) {
    if (isDnsEntry(ep)) continue;  // resolved by the pool
    clients.push_back(std::make_unique<TritonClient>(config, remote, ep, shm, metrics));
  }
  // Started by Pool::prepare (BatchedModel::create), once the batcher's buffers exist: with
  // shared_memory: system they are registered with the endpoints too.
  auto pool = std::make_unique<Pool>(config.name, "triton", remote, std::move(clients), metrics);
  // Endpoints added at run time (dns:///, setEndpoints). The pool and its clients share the
  // model's configuration (the copy here keeps config.remote alive, which clients refer to).
  pool->setClientFactory([config, shm, metrics](const std::string& address) {
    return std::unique_ptr<EndpointClient>(
        std::make_unique<TritonClient>(config, *config.remote, address, shm, metrics));
  });
  return std::unique_ptr<BatchBackend>(std::move(pool));
}

}  // namespace infergate::backends
