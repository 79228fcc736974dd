#pragma once
// Calls one message of a gRPC method of InferenceGrpcServices (KServe v2 and TF Serving Predict)
// over the fuzz models, as Http2Session would after reassembling it, and checks the reply: the
// identity models answer inline, so exactly one reply has come back when call() returns, and
// what it carries is whole gRPC messages.

#include <memory>
#include <string>
#include <string_view>

#include <google/protobuf/stubs/logging.h>

#include "frontend/grpc_framing.h"
#include "frontend/grpc_inference_service.h"
#include "tests/fuzz/fuzz_common.h"

namespace infergate::fuzz {

class GrpcServiceDriver {
 public:
  GrpcServiceDriver() {
    google::protobuf::SetLogHandler(nullptr);  // "invalid UTF-8" lines on every odd string
    addFuzzModels(registry_);
    services_ = std::make_unique<frontend::InferenceGrpcServices>(registry_, frontend::ServerInfo{},
                                                                  nullptr);
  }

  // Returns the reply's code. `timeout_ns` is the call's grpc-timeout (0: none).
  absl::StatusCode call(std::string_view path, std::string_view message, uint64_t timeout_ns,
                        std::optional<std::string> priority_metadata) {
    const frontend::GrpcMethod method = services_->resolve(path);
    FUZZ_CHECK(method.id >= 0);
    frontend::GrpcCall call;
    call.stream_id = 1;
    call.timeout_ns = timeout_ns;
    call.deadline_ns = timeout_ns;
    call.priority_metadata = std::move(priority_metadata);
    int replies = 0;
    frontend::GrpcReply reply;
    services_->call(method, call, message, [&](frontend::GrpcReply r) {
      ++replies;
      reply = std::move(r);
    });
    FUZZ_CHECK(replies == 1);
    // Whole messages, each within what a one-message request can grow to.
    std::string_view framed = reply.framed;
    while (!framed.empty()) {
      FUZZ_CHECK(framed.size() >= frontend::kGrpcPrefixBytes);
      FUZZ_CHECK(framed[0] == 0);
      const uint32_t n = (uint32_t(uint8_t(framed[1])) << 24) | (uint32_t(uint8_t(framed[2])) << 16) |
                         (uint32_t(uint8_t(framed[3])) << 8) | uint32_t(uint8_t(framed[4]));
      FUZZ_CHECK(framed.size() - frontend::kGrpcPrefixBytes >= n);
      framed.remove_prefix(frontend::kGrpcPrefixBytes + n);
    }
    FUZZ_CHECK(reply.framed.size() <= 16 * message.size() + 4096);
    if (reply.code != absl::StatusCode::kOk) FUZZ_CHECK(!reply.message.empty());
    return reply.code;
  }

 private:
  backends::ModelRegistry registry_;
  std::unique_ptr<frontend::InferenceGrpcServices> services_;
};

}  // namespace infergate::fuzz
