#pragma once
// A gRPC client for one endpoint (host:port): a small fixed set of channels (each its own HTTP/2
// connection) used round-robin, and unary calls through gRPC's generic stub and callback API,
// with requests given as pieces of existing memory (wire::ModelInferEncoding) so that tensor
// bytes are referenced by gRPC slices, not copied.
//
// Threading: every method is safe from any thread. call() writes the request from the calling
// thread and never blocks on the network; completions run on the endpoint's one completion
// thread (the poller of its completion queue), so `done` must not block for long.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "backends/grpc_client_wire.h"

namespace infergate::backends {

// Method paths.
inline constexpr char kKServeService[] = "/inference.GRPCInferenceService/";
inline constexpr char kMethodServerReady[] = "/inference.GRPCInferenceService/ServerReady";
inline constexpr char kMethodModelReady[] = "/inference.GRPCInferenceService/ModelReady";
inline constexpr char kMethodModelMetadata[] = "/inference.GRPCInferenceService/ModelMetadata";
inline constexpr char kMethodModelInfer[] = "/inference.GRPCInferenceService/ModelInfer";
inline constexpr char kMethodShmRegister[] =
    "/inference.GRPCInferenceService/SystemSharedMemoryRegister";
inline constexpr char kMethodShmUnregister[] =
    "/inference.GRPCInferenceService/SystemSharedMemoryUnregister";
inline constexpr char kMethodShmStatus[] =
    "/inference.GRPCInferenceService/SystemSharedMemoryStatus";
inline constexpr char kMethodCudaShmRegister[] =
    "/inference.GRPCInferenceService/CudaSharedMemoryRegister";
inline constexpr char kMethodCudaShmUnregister[] =
    "/inference.GRPCInferenceService/CudaSharedMemoryUnregister";
inline constexpr char kMethodCudaShmStatus[] =
    "/inference.GRPCInferenceService/CudaSharedMemoryStatus";
inline constexpr char kMethodPredict[] = "/tensorflow.serving.PredictionService/Predict";
inline constexpr char kMethodTfModelMetadata[] =
    "/tensorflow.serving.PredictionService/GetModelMetadata";
inline constexpr char kMethodTfModelStatus[] = "/tensorflow.serving.ModelService/GetModelStatus";

// Result of a unary call: status, the response bytes (one contiguous buffer; views into it stay
// valid while the result lives), and whether the request may never have left this process
// (the call failed before a connection to the endpoint existed), which makes it safe to retry
// elsewhere.
struct GrpcResult {
  absl::Status status;
  std::string_view body;             // valid while `owner` lives
  std::shared_ptr<const void> owner;
  bool not_sent = false;
};

class GrpcEndpoint {
 public:
  // `address` host:port. `channels` >= 1. `max_message_bytes` bounds received messages.
  GrpcEndpoint(std::string address, int channels, int max_message_bytes);
  ~GrpcEndpoint();

  const std::string& address() const { return address_; }

  // Starts a call; `done` runs exactly once on the completion thread. `request` must stay valid until
  // `done` runs (its external pieces are referenced, not copied). `timeout_ms` 0 = none.
  void call(const char* method, const wire::ModelInferEncoding& request, uint64_t timeout_ms,
            std::function<void(GrpcResult)> done);
  // Convenience for small requests (copied).
  void call(const char* method, std::string request, uint64_t timeout_ms,
            std::function<void(GrpcResult)> done);
  // Blocking variant for start-up and health checks.
  GrpcResult callSync(const char* method, std::string request, uint64_t timeout_ms);

  // True when at least one channel is connected (READY) or idle/connecting; false when every
  // channel is in TRANSIENT_FAILURE (the endpoint refuses connections).
  bool reachable();

 private:
  struct Chan;
  struct Completions;
  // Sets the deadline and starts `call` (a Call, grpc_client.cc) on the next channel.
  void start(void* call, const char* method, uint64_t timeout_ms);
  std::string address_;
  std::unique_ptr<Completions> completions_;
  std::vector<std::unique_ptr<Chan>> channels_;
  std::atomic<uint32_t> next_{0};
};

// gRPC status -> absl status (same numeric codes).
absl::Status fromGrpcStatus(int code, const std::string& message);

}  // namespace infergate::backends
