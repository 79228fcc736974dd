#include "backends/device_region.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/pinned_memory.h"

#ifdef INFERGATE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace infergate::backends {

namespace {

bool inRange(size_t offset, size_t bytes, size_t size) {
  return offset <= size && bytes <= size - offset;
}

absl::Status outOfRange(size_t offset, size_t bytes, size_t size) {
  return absl::InvalidArgumentError(fmt::format(
      "device copy of {} bytes at offset {} is outside the {}-byte region", bytes, offset, size));
}

class EmulatedRegion : public DeviceRegion {
 public:
  explicit EmulatedRegion(PinnedRegion shm) : shm_(std::move(shm)) {
    handle_.assign(kCudaIpcHandleBytes, '\0');
    std::string text = std::string(kEmulatedHandlePrefix) + shm_.key();
    std::memcpy(handle_.data(), text.data(), std::min(text.size(), kCudaIpcHandleBytes));
  }
  std::string_view kind() const override { return "emulated"; }
  int device() const override { return 0; }
  size_t size() const override { return shm_.size(); }
  const std::string& ipcHandle() const override { return handle_; }
  absl::Status copyIn(size_t, const HostToDevice* copies, size_t n) override {
    for (size_t i = 0; i < n; ++i) {
      if (!inRange(copies[i].offset, copies[i].bytes, size())) {
        return outOfRange(copies[i].offset, copies[i].bytes, size());
      }
    }
    for (size_t i = 0; i < n; ++i) {
      if (copies[i].bytes > 0) {
        std::memcpy(shm_.data() + copies[i].offset, copies[i].src, copies[i].bytes);
      }
    }
    return absl::OkStatus();
  }
  absl::Status copyOut(size_t, size_t offset, void* dst, size_t bytes) override {
    if (!inRange(offset, bytes, size())) return outOfRange(offset, bytes, size());
    if (bytes > 0) std::memcpy(dst, shm_.data() + offset, bytes);
    return absl::OkStatus();
  }

 private:
  PinnedRegion shm_;  // kShared
  std::string handle_;
};

#ifdef INFERGATE_WITH_CUDA

std::string cudaText(cudaError_t e) {
  return fmt::format("{} ({})", cudaGetErrorName(e), cudaGetErrorString(e));
}

class CudaRegion : public DeviceRegion {
 public:
  ~CudaRegion() override {
    cudaSetDevice(device_);
    for (cudaStream_t s : streams_) cudaStreamDestroy(s);
    if (base_ != nullptr) cudaFree(base_);
  }

  static absl::StatusOr<std::unique_ptr<DeviceRegion>> create(int device, size_t bytes,
                                                              size_t streams) {
    auto r = std::unique_ptr<CudaRegion>(new CudaRegion());
    r->device_ = device;
    r->size_ = bytes;
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
      return absl::FailedPreconditionError(fmt::format("cudaSetDevice({}): {}", device,
                                                       cudaText(e)));
    }
    void* p = nullptr;
    e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      return absl::FailedPreconditionError(
          fmt::format("cudaMalloc of {} bytes on GPU {}: {}", bytes, device, cudaText(e)));
    }
    r->base_ = static_cast<uint8_t*>(p);
    cudaIpcMemHandle_t h;
    e = cudaIpcGetMemHandle(&h, p);
    if (e != cudaSuccess) {
      return absl::FailedPreconditionError(
          fmt::format("cudaIpcGetMemHandle on GPU {}: {}", device, cudaText(e)));
    }
    static_assert(sizeof(h) == kCudaIpcHandleBytes);
    r->handle_.assign(reinterpret_cast<const char*>(&h), sizeof(h));
    for (size_t i = 0; i < streams; ++i) {
      cudaStream_t s = nullptr;
      e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      if (e != cudaSuccess) {
        return absl::FailedPreconditionError(
            fmt::format("cudaStreamCreate on GPU {}: {}", device, cudaText(e)));
      }
      r->streams_.push_back(s);
    }
    return std::unique_ptr<DeviceRegion>(std::move(r));
  }

  std::string_view kind() const override { return "cuda"; }
  int device() const override { return device_; }
  size_t size() const override { return size_; }
  const std::string& ipcHandle() const override { return handle_; }

  absl::Status copyIn(size_t stream, const HostToDevice* copies, size_t n) override {
    if (stream >= streams_.size()) return absl::InvalidArgumentError("no such stream");
    for (size_t i = 0; i < n; ++i) {
      if (!inRange(copies[i].offset, copies[i].bytes, size_)) {
        return outOfRange(copies[i].offset, copies[i].bytes, size_);
      }
    }
    cudaSetDevice(device_);  // per thread; callers are the dispatcher and gRPC threads
    for (size_t i = 0; i < n; ++i) {
      if (copies[i].bytes == 0) continue;
      cudaError_t e = cudaMemcpyAsync(base_ + copies[i].offset, copies[i].src, copies[i].bytes,
                                      cudaMemcpyHostToDevice, streams_[stream]);
      if (e != cudaSuccess) {
        cudaStreamSynchronize(streams_[stream]);
        return absl::InternalError(fmt::format("cudaMemcpyAsync host to device: {}", cudaText(e)));
      }
    }
    cudaError_t e = cudaStreamSynchronize(streams_[stream]);
    if (e != cudaSuccess) {
      return absl::InternalError(fmt::format("cudaStreamSynchronize: {}", cudaText(e)));
    }
    return absl::OkStatus();
  }

  absl::Status copyOut(size_t stream, size_t offset, void* dst, size_t bytes) override {
    if (stream >= streams_.size()) return absl::InvalidArgumentError("no such stream");
    if (!inRange(offset, bytes, size_)) return outOfRange(offset, bytes, size_);
    if (bytes == 0) return absl::OkStatus();
    cudaSetDevice(device_);
    cudaError_t e =
        cudaMemcpyAsync(dst, base_ + offset, bytes, cudaMemcpyDeviceToHost, streams_[stream]);
    if (e == cudaSuccess) e = cudaStreamSynchronize(streams_[stream]);
    if (e != cudaSuccess) {
      return absl::InternalError(fmt::format("cudaMemcpyAsync device to host: {}", cudaText(e)));
    }
    return absl::OkStatus();
  }

 private:
  CudaRegion() = default;
  int device_ = 0;
  size_t size_ = 0;
  uint8_t* base_ = nullptr;
  std::string handle_;
  std::vector<cudaStream_t> streams_;
};

#endif  // INFERGATE_WITH_CUDA

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceRegion>> createCudaRegion(int device, size_t bytes,
                                                               size_t streams) {
#ifdef INFERGATE_WITH_CUDA
  return CudaRegion::create(device, bytes, std::max<size_t>(streams, 1));
#else
  (void)device;
  (void)bytes;
  (void)streams;
  return absl::UnimplementedError(
      "CUDA shared memory needs a build with -DINFERGATE_WITH_CUDA=ON (and a GPU at run time)");
#endif
}

absl::StatusOr<std::unique_ptr<DeviceRegion>> createEmulatedCudaRegion(std::string key,
                                                                       size_t bytes) {
  if (key.size() + kShmSuffixBytes + kEmulatedHandlePrefix.size() > kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(
        fmt::format("emulated CUDA region key '{}' is too long for a 64-byte handle", key));
  }
  PinnedOptions po;
  po.label = "emulated CUDA region";
  po.shared_key = std::move(key);
  absl::StatusOr<PinnedRegion> shm = PinnedRegion::allocate(bytes, po);
  if (!shm.ok()) return shm.status();
  return std::unique_ptr<DeviceRegion>(new EmulatedRegion(std::move(*shm)));
}

bool cudaShmEmulationRequested() {
  const char* v = std::getenv("INFERGATE_CUDA_SHM_EMULATION");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace infergate::backends
