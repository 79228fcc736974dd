#pragma once
// Calls a gRPC service method in process and waits for its reply, for the frontend tests that
// drive InferenceGrpcServices without a session.

#include <future>
#include <string_view>
#include <utility>

#include "frontend/grpc_services.h"

namespace infergate::mocks {

// One message to the method at `path` (e.g. "/inference.GRPCInferenceService/ModelInfer");
// returns the first reply, however late or on whichever thread it comes.
inline frontend::GrpcReply callAndWait(frontend::GrpcServices& services, std::string_view path,
                                       frontend::GrpcCall& call, std::string_view message) {
  const frontend::GrpcMethod method = services.resolve(path);
  std::promise<frontend::GrpcReply> reply;
  std::future<frontend::GrpcReply> f = reply.get_future();
  services.call(method, call, message,
                [&](frontend::GrpcReply r) { reply.set_value(std::move(r)); });
  return f.get();
}

}  // namespace infergate::mocks
