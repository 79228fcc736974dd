#pragma once
// Device memory for Triton's CUDA shared memory extension: one device allocation that a
// co-located server opens with cudaIpcOpenMemHandle after CudaSharedMemoryRegister{name,
// raw_handle, device_id, byte_size}, filled from the (pinned) batch buffers by copies on a
// stream per in-flight batch, and read back the same way for outputs.
//
// Two implementations behind one interface:
//  - cuda: cudaMalloc on `device`, cudaIpcGetMemHandle, cudaMemcpyAsync on a non-blocking stream
//    per slot, cudaStreamSynchronize before the gRPC call is made (a batch's copies are
//    enqueued together and waited for once). Only in builds with INFERGATE_WITH_CUDA.
//  - emulated: for tests on machines without a GPU. The "device" memory is a POSIX shared memory
//    region and the 64-byte handle names its key ("infergate-emulated-cuda:" + key, zero-padded),
//    so a test server that understands that handle (tests/servers/cuda_shm.py) can run the whole
//    CUDA shared memory protocol - register, infer with region parameters, status, unregister -
//    without CUDA. Selected with INFERGATE_CUDA_SHM_EMULATION=1 in the environment; never used
//    otherwise, and real Triton refuses its handle.
//
// Threading: copyIn/copyOut on different streams may run concurrently from any threads; one
// stream is used by one batch at a time (the caller's slot).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace infergate::backends {

inline constexpr size_t kCudaIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)
inline constexpr std::string_view kEmulatedHandlePrefix = "infergate-emulated-cuda:";

struct HostToDevice {
  const void* src;
  size_t offset;  // within the region
  size_t bytes;
};

class DeviceRegion {
 public:
  virtual ~DeviceRegion() = default;
  virtual std::string_view kind() const = 0;  // "cuda" | "emulated"
  virtual int device() const = 0;
  virtual size_t size() const = 0;
  // The raw_handle of CudaSharedMemoryRegister (kCudaIpcHandleBytes bytes).
  virtual const std::string& ipcHandle() const = 0;
  // Copies `n` host ranges into the region on stream `stream` (< the streams created) and
  // returns once they are complete. INVALID_ARGUMENT for a range outside the region.
  virtual absl::Status copyIn(size_t stream, const HostToDevice* copies, size_t n) = 0;
  // Copies `bytes` at `offset` of the region to `dst` on stream `stream` and waits.
  virtual absl::Status copyOut(size_t stream, size_t offset, void* dst, size_t bytes) = 0;
};

// A `bytes` device allocation on GPU `device` with `streams` streams. UNIMPLEMENTED in builds
// without CUDA; FAILED_PRECONDITION naming the CUDA error otherwise (no device, out of memory).
absl::StatusOr<std::unique_ptr<DeviceRegion>> createCudaRegion(int device, size_t bytes,
                                                               size_t streams);

// The emulation (see above); `key` a POSIX shm name ("/name", at most 40 characters); the
// region's size is `bytes` rounded up to the page size.
absl::StatusOr<std::unique_ptr<DeviceRegion>> createEmulatedCudaRegion(std::string key,
                                                                       size_t bytes);

// INFERGATE_CUDA_SHM_EMULATION=1 is set.
bool cudaShmEmulationRequested();

}  // namespace infergate::backends
