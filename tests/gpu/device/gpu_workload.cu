// SPDX-License-Identifier: Apache-2.0
// gpu_workload: the real-GPU check's workload (tests/gpu/device/run.sh). Allocates known sizes
// and launches a known number of kernels, through the runtime (cudart, linked statically as nvcc
// does by default: it reaches libcuda.so.1 through cuGetProcAddress) and through the driver API
// directly (-lcuda: calls to libcuda.so.1's exported symbols), in phases. After each phase it
// prints one JSON line with its own cumulative counts and waits for a line on stdin before the
// next, so the checker can read infergate's and nvidia-smi's figures in between:
//
//   ready   cudaFree(0) (primary context), cuInit; {"phase":"ready","pid":..,"libcuda":"<path>"}
//   rt      cudaMalloc 64 + 32 + 16 MiB; 1000 x touch<<<>>>; cudaDeviceSynchronize
//   drv     cuMemAlloc_v2 48 + 8 MiB; 500 x cuLaunchKernel (the same kernel, cudaGetFuncBySymbol);
//           cuStreamSynchronize(0); cuCtxSynchronize
//   async   cudaMallocAsync 16 MiB on a stream; cudaStreamSynchronize
//   graph   capture 10 x touch<<<>>> into a graph (captured launches still call the driver's
//           launch function); cudaGraphLaunch x 20; cudaStreamSynchronize
//   free    cudaFree the 32 MiB, cuMemFree_v2 the 8 MiB, cudaFreeAsync the 16 MiB; sync
//   (a line) free everything, print {"phase":"exit"} and exit 0
//
// All sizes are multiples of 2 MiB, so nvidia-smi's per-process figure moves by the same amount
// (given CUDA_MODULE_LOADING=EAGER, so no module is loaded lazily at the first launch).
// Fields: device_bytes (live, requested), launch_calls (kernel launch calls made, captured
// ones included), graph_launches, alloc_calls, free_calls. Errors: {"error":"..."} and exit 2.

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

namespace {

constexpr size_t kMiB = 1024 * 1024;
constexpr int kTouchFloats = 256;

__global__ void touch(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1.0f;
}

struct Counts {
  long long device_bytes = 0;
  long long launch_calls = 0;
  long long graph_launches = 0;
  long long alloc_calls = 0;
  long long free_calls = 0;
} counts;

void fail(const char* what, const char* detail) {
  printf("{\"error\":\"%s: %s\"}\n", what, detail);
  fflush(stdout);
  exit(2);
}

#define CK(call)                                                     \
  do {                                                               \
    cudaError_t e_ = (call);                                         \
    if (e_ != cudaSuccess) fail(#call, cudaGetErrorString(e_));      \
  } while (0)

#define CKD(call)                                                    \
  do {                                                               \
    CUresult r_ = (call);                                            \
    if (r_ != CUDA_SUCCESS) {                                        \
      const char* s_ = nullptr;                                      \
      cuGetErrorString(r_, &s_);                                     \
      fail(#call, s_ ? s_ : "unknown CUresult");                     \
    }                                                                \
  } while (0)

void report(const char* phase) {
  printf("{\"phase\":\"%s\",\"pid\":%d,\"device_bytes\":%lld,\"launch_calls\":%lld,"
         "\"graph_launches\":%lld,\"alloc_calls\":%lld,\"free_calls\":%lld}\n",
         phase, (int)getpid(), counts.device_bytes, counts.launch_calls, counts.graph_launches,
         counts.alloc_calls, counts.free_calls);
  fflush(stdout);
}

// Waits for a line on stdin (EOF: carry on to the end, so the program still frees and exits).
void waitLine() {
  char buf[256];
  if (!fgets(buf, sizeof(buf), stdin)) return;
}

// The libcuda.so.1 this process mapped (what the probes must attach to).
std::string mappedLibcuda() {
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) return "";
  char line[4096];
  std::string path;
  while (fgets(line, sizeof(line), f)) {
    const char* p = strchr(line, '/');
    if (p && strstr(p, "/libcuda.so")) {
      path = p;
      while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
      break;
    }
  }
  fclose(f);
  return path;
}

}  // namespace

int main() {
  // ready: the primary context, and the driver API on it.
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  CKD(cuInit(0));
  CUcontext ctx = nullptr;
  CKD(cuCtxGetCurrent(&ctx));
  if (!ctx) fail("cuCtxGetCurrent", "no current context after cudaFree(0)");
  cudaFunction_t rtFn = nullptr;
  CK(cudaGetFuncBySymbol(&rtFn, reinterpret_cast<const void*>(touch)));
  CUfunction fn = reinterpret_cast<CUfunction>(rtFn);
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  printf("{\"phase\":\"ready\",\"pid\":%d,\"libcuda\":\"%s\"}\n", (int)getpid(),
         mappedLibcuda().c_str());
  fflush(stdout);
  waitLine();

  // rt: the runtime's allocations and launches.
  float* rt[3] = {nullptr, nullptr, nullptr};
  const size_t rtSizes[3] = {64 * kMiB, 32 * kMiB, 16 * kMiB};
  for (int i = 0; i < 3; i++) {
    CK(cudaMalloc(&rt[i], rtSizes[i]));
    counts.device_bytes += (long long)rtSizes[i];
    counts.alloc_calls++;
  }
  for (int i = 0; i < 1000; i++) {
    touch<<<1, kTouchFloats>>>(rt[0], kTouchFloats);
    CK(cudaGetLastError());
    counts.launch_calls++;
  }
  CK(cudaDeviceSynchronize());
  report("rt");
  waitLine();

  // drv: the driver API, called directly.
  CUdeviceptr drv[2] = {0, 0};
  const size_t drvSizes[2] = {48 * kMiB, 8 * kMiB};
  for (int i = 0; i < 2; i++) {
    CKD(cuMemAlloc(&drv[i], drvSizes[i]));
    counts.device_bytes += (long long)drvSizes[i];
    counts.alloc_calls++;
  }
  float* arg0 = reinterpret_cast<float*>(drv[0]);
  int arg1 = kTouchFloats;
  void* params[] = {&arg0, &arg1};
  for (int i = 0; i < 500; i++) {
    CKD(cuLaunchKernel(fn, 1, 1, 1, kTouchFloats, 1, 1, 0, nullptr, params, nullptr));
    counts.launch_calls++;
  }
  CKD(cuStreamSynchronize(nullptr));
  CKD(cuCtxSynchronize());
  report("drv");
  waitLine();

  // async: the stream-ordered allocator (a pool: nvidia-smi may show the pool's growth).
  float* asyncBuf = nullptr;
  const size_t asyncSize = 16 * kMiB;
  CK(cudaMallocAsync(&asyncBuf, asyncSize, stream));
  CK(cudaStreamSynchronize(stream));
  counts.device_bytes += (long long)asyncSize;
  counts.alloc_calls++;
  report("async");
  waitLine();

  // graph: 10 captured launches, replayed 20 times.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 10; i++) {
    touch<<<1, kTouchFloats, 0, stream>>>(rt[1], kTouchFloats);
    counts.launch_calls++;
  }
  CK(cudaStreamEndCapture(stream, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 20; i++) {
    CK(cudaGraphLaunch(exec, stream));
    counts.graph_launches++;
  }
  CK(cudaStreamSynchronize(stream));
  report("graph");
  waitLine();

  // free: one allocation of each route.
  CK(cudaFree(rt[1]));
  rt[1] = nullptr;
  counts.device_bytes -= (long long)rtSizes[1];
  CKD(cuMemFree(drv[1]));
  drv[1] = 0;
  counts.device_bytes -= (long long)drvSizes[1];
  CK(cudaFreeAsync(asyncBuf, stream));
  CK(cudaStreamSynchronize(stream));
  counts.device_bytes -= (long long)asyncSize;
  counts.free_calls += 3;
  report("free");
  waitLine();

  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  for (float* p : rt)
    if (p) {
      CK(cudaFree(p));
      counts.free_calls++;
    }
  for (CUdeviceptr p : drv)
    if (p) {
      CKD(cuMemFree(p));
      counts.free_calls++;
    }
  counts.device_bytes = 0;
  CK(cudaStreamDestroy(stream));
  report("exit");
  return 0;
}
