// gRPC priority sources (docs/BATCHING.md "Priority"): the Http2Session hands the
// x-infergate-priority metadata and the transport's ingress tag to the service in GrpcCall, and
// InferenceGrpcServices::modelInfer resolves them like the REST path: the KServe `priority`
// parameter, else the metadata, else the tag's class, else the model's default level; a bad
// metadata value is INVALID_ARGUMENT and nothing is queued.

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/batched_model.h"
#include "backends/batcher.h"
#include "backends/model.h"
#include "tests/mocks/fake_transport.h"
#include "tests/mocks/grpc_call.h"
#include "tests/unit/frontend/h2_frames.h"
#include "tests/unit/frontend/recording_model.h"
#include "frontend/grpc_framing.h"
#include "frontend/grpc_inference_service.h"
#include "frontend/http2_session.h"
#include "grpc_service.pb.h"

namespace infergate::frontend {
namespace {

// --- Http2Session fills GrpcCall from the metadata and the ingress tag --------------------

using TaggingTransport = mocks::FakeTransport;  // its `tag` is what ingressTag() returns

class CapturingServices : public GrpcServices {
 public:
  GrpcMethod resolve(std::string_view) const override {
    GrpcMethod m;
    m.id = 0;
    return m;
  }
  void call(const GrpcMethod&, GrpcCall& call, std::string_view, GrpcRespond respond) override {
    calls.push_back(call);
    GrpcReply r;
    appendGrpcMessage(r.framed, "ok");
    respond(std::move(r));
  }
  std::vector<GrpcCall> calls;
};

using testing::frame;
using testing::literal;

std::string requestHeaders(std::string_view extra = {}) {
  return literal(":method", "POST") + literal(":scheme", "http") +
         literal(":path", "/inference.GRPCInferenceService/ModelInfer") +
         literal(":authority", "x") + literal("content-type", "application/grpc") +
         literal("te", "trailers") + std::string(extra);
}

struct SessionFixture : ::testing::Test {
  void SetUp() override {
    session = std::make_shared<Http2Session>(transport, services, options, nullptr);
    const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, "");
    session->onData(preface.data(), preface.size());
  }
  void call(uint32_t id, std::string_view extra_headers) {
    std::string msg;
    appendGrpcMessage(msg, "m");
    const std::string bytes = frame(1, 4, id, requestHeaders(extra_headers)) + frame(0, 1, id, msg);
    session->onData(bytes.data(), bytes.size());
  }
  Http2SessionOptions options;  // the session keeps a reference
  TaggingTransport transport;
  CapturingServices services;
  std::shared_ptr<Http2Session> session;
};

TEST_F(SessionFixture, MetadataAndTagReachTheCall) {
  call(1, {});
  net::IngressTag t;
  t.priority_class = 3;
  transport.tag = t;
  call(3, literal("x-infergate-priority", "2"));
  call(5, literal("x-infergate-priority", "urgent"));
  ASSERT_EQ(services.calls.size(), 3u);
  // No metadata, no tag (socket mode).
  EXPECT_FALSE(services.calls[0].priority_metadata.has_value());
  EXPECT_FALSE(services.calls[0].priority_class.has_value());
  // Metadata as sent (validated by the service, not the session), the tag's class.
  EXPECT_EQ(services.calls[1].priority_metadata, std::optional<std::string>("2"));
  EXPECT_EQ(services.calls[1].priority_class, std::optional<int>(3));
  EXPECT_EQ(services.calls[2].priority_metadata, std::optional<std::string>("urgent"));
}

// Issue 13, item 5: the session decides once per connection whether its peer may choose the
// priority (ClientPriorityPolicy) and says so in every call.
TEST(SessionTrust, PeerOutsideTheTrustedSourcesIsMarked) {
  ClientPriorityPolicy policy;
  policy.trusted = *common::CidrSet::parse({"10.0.0.0/8"});
  Http2SessionOptions options;
  options.client_priority = &policy;
  for (const char* peer : {"10.1.1.1", "192.0.2.9"}) {
    mocks::FakeTransport transport;
    transport.peer = common::parseCidr(peer)->addr;
    CapturingServices services;
    auto session = std::make_shared<Http2Session>(transport, services, options, nullptr);
    std::string msg;
    appendGrpcMessage(msg, "m");
    const std::string bytes = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, "") +
                              frame(1, 4, 1, requestHeaders(literal("x-infergate-priority", "1"))) +
                              frame(0, 1, 1, msg);
    session->onData(bytes.data(), bytes.size());
    ASSERT_EQ(services.calls.size(), 1u) << peer;
    EXPECT_EQ(services.calls[0].priority_trusted, std::string_view(peer) == "10.1.1.1") << peer;
  }
}

// --- InferenceGrpcServices resolves the priority ----------------------------------------

class GrpcPriorityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = testing::recordingModel(&levels_, 4);
    ASSERT_TRUE(m.ok()) << m.status();
    registry_.add(std::move(*m));
    services_ = std::make_unique<InferenceGrpcServices>(registry_, ServerInfo{}, nullptr);
  }

  // One ModelInfer (or one ModelStreamInfer message); returns the reply.
  GrpcReply send(int64_t param, std::optional<std::string> metadata, std::optional<int> tag_class,
                 bool stream = false, bool trusted = true) {
    inference::ModelInferRequest m;
    m.set_model_name("m");
    auto* in = m.add_inputs();
    in->set_name("IN");
    in->set_datatype("INT32");
    in->add_shape(1);
    in->add_shape(1);
    const int32_t v = 7;
    m.add_raw_input_contents(std::string(reinterpret_cast<const char*>(&v), 4));
    if (param != 0) (*m.mutable_parameters())["priority"].set_int64_param(param);
    GrpcCall call;
    call.priority_metadata = std::move(metadata);
    call.priority_class = tag_class;
    call.priority_trusted = trusted;
    return mocks::callAndWait(*services_,
                              stream ? "/inference.GRPCInferenceService/ModelStreamInfer"
                                     : "/inference.GRPCInferenceService/ModelInfer",
                              call, m.SerializeAsString());
  }

  std::vector<uint32_t> levels_;
  backends::ModelRegistry registry_;
  std::unique_ptr<InferenceGrpcServices> services_;
};

TEST_F(GrpcPriorityTest, LevelFollowsTheDocumentedOrder) {
  // The recording backend answers INTERNAL: each call reached the batcher.
  EXPECT_EQ(send(2, "1", 0).code, absl::StatusCode::kInternal);               // parameter
  EXPECT_EQ(send(0, "3", 0).code, absl::StatusCode::kInternal);               // metadata over tag
  EXPECT_EQ(send(0, std::nullopt, 1).code, absl::StatusCode::kInternal);      // class 1 -> 2
  EXPECT_EQ(send(0, std::nullopt, 3).code, absl::StatusCode::kInternal);      // class 3 -> 4
  EXPECT_EQ(send(0, std::nullopt, std::nullopt).code, absl::StatusCode::kInternal);  // default 4
  EXPECT_EQ(send(0, "0", 0).code, absl::StatusCode::kInternal);               // 0: tag decides
  EXPECT_EQ(send(0, "1", std::nullopt, /*stream=*/true).code, absl::StatusCode::kOk);  // stream
  EXPECT_EQ(levels_, (std::vector<uint32_t>{2, 3, 2, 4, 4, 1, 1}));
}

// From an untrusted peer the parameter and the metadata are ignored: the tag's class, else the
// model's default level.
TEST_F(GrpcPriorityTest, UntrustedPeerGetsTheTagClass) {
  EXPECT_EQ(send(1, "1", 3, false, false).code, absl::StatusCode::kInternal);             // class 3 -> 4
  EXPECT_EQ(send(1, "urgent", std::nullopt, false, false).code, absl::StatusCode::kInternal);  // default
  EXPECT_EQ(levels_, (std::vector<uint32_t>{4, 4}));
}

TEST_F(GrpcPriorityTest, BadMetadataIsInvalidArgumentAndNotQueued) {
  GrpcReply r = send(0, "urgent", std::nullopt);
  EXPECT_EQ(r.code, absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.message.find("x-infergate-priority"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("urgent"), std::string::npos) << r.message;
  // In a stream the error is the response message's error_message and the stream goes on.
  r = send(0, "-1", std::nullopt, /*stream=*/true);
  EXPECT_EQ(r.code, absl::StatusCode::kOk);
  inference::ModelStreamInferResponse sm;
  ASSERT_GE(r.framed.size(), kGrpcPrefixBytes);
  ASSERT_TRUE(sm.ParseFromString(r.framed.substr(kGrpcPrefixBytes)));
  EXPECT_NE(sm.error_message().find("x-infergate-priority"), std::string::npos);
  // The parameter wins: the bad metadata is not looked at.
  EXPECT_EQ(send(1, "urgent", std::nullopt).code, absl::StatusCode::kInternal);
  EXPECT_EQ(levels_, (std::vector<uint32_t>{1}));
}

}  // namespace
}  // namespace infergate::frontend
