#pragma once
// A gRPC client for one endpoint (host:port): a small fixed set of channels (each its own HTTP/2
// connection, nghttp2, TCP_NODELAY) used round-robin, and unary calls with requests given as
// pieces of existing memory (wire::ModelInferEncoding), written to the socket from the calling
// thread. It does only what the remote backends need (unary calls, deadlines sent as
// grpc-timeout and enforced here, max message sizes, reconnection with back-off 100 ms..1 s,
// GOAWAY), so that a call costs one system call to send and one thread wake-up to complete:
// the gRPC C++ library spent two more wake-ups (its executor and callback threads) and about
// 50 us of CPU per call on this path (issue 15, bench/gateway_hop.sh).
//
// Threading: every method is safe from any thread. call() never blocks on the network (a
// connection being set up queues the call); `done` runs on the endpoint's I/O thread, or on the
// calling thread when the call fails at once (no connection, shut down), and must not block
// for long.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "backends/grpc_client_wire.h"
#include "net/cancel_token.h"

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
  std::string_view body;  // valid while `owner` lives
  std::shared_ptr<const void> owner;
  bool not_sent = false;
};

class GrpcEndpoint {
 public:
  // `address` host:port. `channels` >= 1. `max_message_bytes` bounds received messages.
  GrpcEndpoint(std::string address, int channels, int max_message_bytes);
  ~GrpcEndpoint();

  const std::string& address() const;

  // Starts a call; `done` runs exactly once (see Threading). `request` must stay valid until
  // `done` runs (its external pieces are referenced, not copied). `timeout_ms` 0 = none.
  // `cancel` (optional): cancelling the token (any thread, any time) ends the call with
  // CANCELLED (not_sent false: never retried): a call on the wire gets RST_STREAM CANCEL, so
  // the server sees the cancellation (Triton cancels the request, gRPC servers see
  // context.is_active() turn false); one waiting for a connection is dropped. The cancel is
  // handed to the I/O thread, which answers `done` there; a token cancelled before call() fails
  // the call at once, never sent. A cancel after the call ended, or after the endpoint is
  // destroyed, is a no-op.
  void call(const char* method, const wire::ModelInferEncoding& request, uint64_t timeout_ms,
            std::function<void(GrpcResult)> done,
            std::shared_ptr<net::CancelToken> cancel = nullptr);
  // Convenience for small requests (copied).
  void call(const char* method, std::string request, uint64_t timeout_ms,
            std::function<void(GrpcResult)> done,
            std::shared_ptr<net::CancelToken> cancel = nullptr);
  // Runs `fn` on the endpoint's I/O thread soon (work that may wait, e.g. a device copy, off a
  // caller that must not block). `fn` must not block for long: responses wait behind it.
  void post(std::function<void()> fn);
  // Blocking variant for start-up and health checks.
  GrpcResult callSync(const char* method, std::string request, uint64_t timeout_ms);

  // True when at least one channel is connected (READY) or idle/connecting; false when every
  // channel is in TRANSIENT_FAILURE (the endpoint refuses connections).
  bool reachable();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// gRPC status -> absl status (same numeric codes).
absl::Status fromGrpcStatus(int code, const std::string& message);

}  // namespace infergate::backends
