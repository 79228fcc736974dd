// Request variants: tensor specs, the REST JSON/binary and gRPC encodings (with the KServe
// priority parameter), the malformed kinds, and the request mix's fractions.
#include "bench/load/request.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "grpc_service.pb.h"

namespace infergate::bench {
namespace {

TEST(RequestTest, ParsesTensorSpecs) {
  auto t = parseTensorSpec("INPUT0:fp32:1x16");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "INPUT0");
  EXPECT_EQ(t->datatype, "FP32");
  EXPECT_EQ(t->shape, (std::vector<int64_t>{1, 16}));
  EXPECT_FALSE(parseTensorSpec("INPUT0:FP33:1").ok());
  EXPECT_FALSE(parseTensorSpec("INPUT0:FP32:1x0").ok());
  EXPECT_FALSE(parseTensorSpec("INPUT0:FP32").ok());
  EXPECT_FALSE(parseTensorSpec("INPUT0:FP32:1xz").ok());
}

PayloadOptions opts(Protocol p) {
  PayloadOptions o;
  o.protocol = p;
  o.authority = "127.0.0.1:8000";
  o.inputs.push_back(*parseTensorSpec("INPUT0:FP32:1x4"));
  return o;
}

TEST(RequestTest, RestJsonCarriesPriorityAndAnExactContentLength) {
  auto v = buildVariants(opts(Protocol::kRest), {-1, 2}, {});
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->size(), 2u);
  for (const Variant& var : *v) {
    const std::string& b = var.bytes;
    ASSERT_EQ(b.rfind("POST /v2/models/identity/infer HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n", 0), 0u) << b;
    const size_t body = b.find("\r\n\r\n") + 4;
    EXPECT_NE(b.find("Content-Length: " + std::to_string(b.size() - body) + "\r\n"), std::string::npos) << b;
    EXPECT_NE(b.find("\"shape\":[1,4],\"datatype\":\"FP32\",\"data\":["), std::string::npos) << b;
  }
  EXPECT_EQ((*v)[0].bytes.find("priority"), std::string::npos);
  EXPECT_NE((*v)[1].bytes.find("{\"parameters\":{\"priority\":2},\"inputs\""), std::string::npos);
  EXPECT_EQ((*v)[1].priority, 2);
}

TEST(RequestTest, RestBinaryUsesTheBinaryTensorExtension) {
  PayloadOptions o = opts(Protocol::kRest);
  o.rest_format = RestFormat::kBinary;
  auto v = buildVariants(o, {-1}, {});
  ASSERT_TRUE(v.ok());
  const std::string& b = (*v)[0].bytes;
  const size_t body = b.find("\r\n\r\n") + 4;
  const size_t h = b.find("Inference-Header-Content-Length: ");
  ASSERT_NE(h, std::string::npos) << b;
  const size_t json_len = std::stoul(b.substr(h + 33));
  EXPECT_EQ(b.size() - body, json_len + 16);  // JSON header, then 4 FP32 values
  EXPECT_EQ(b[body + json_len - 1], '}');
  EXPECT_NE(b.find("\"binary_data_size\":16"), std::string::npos);
  EXPECT_NE(b.find("Content-Type: application/octet-stream"), std::string::npos);
}

TEST(RequestTest, GrpcMessageIsAFramedModelInferRequest) {
  auto v = buildVariants(opts(Protocol::kGrpc), {3}, {"unknown-model", "bad-path", "bad-proto"});
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->size(), 4u);
  const std::string& m = (*v)[0].bytes;
  ASSERT_GE(m.size(), 5u);
  EXPECT_EQ(m[0], 0);
  const uint32_t len = (uint8_t(m[1]) << 24) | (uint8_t(m[2]) << 16) | (uint8_t(m[3]) << 8) | uint8_t(m[4]);
  EXPECT_EQ(len, m.size() - 5);
  inference::ModelInferRequest req;
  ASSERT_TRUE(req.ParseFromString(m.substr(5)));
  EXPECT_EQ(req.model_name(), "identity");
  EXPECT_EQ(req.parameters().at("priority").int64_param(), 3);
  ASSERT_EQ(req.inputs_size(), 1);
  EXPECT_EQ(req.inputs(0).datatype(), "FP32");
  ASSERT_EQ(req.raw_input_contents_size(), 1);
  EXPECT_EQ(req.raw_input_contents(0).size(), 16u);
  EXPECT_EQ((*v)[0].grpc_path, "/inference.GRPCInferenceService/ModelInfer");
  ASSERT_TRUE(req.ParseFromString((*v)[1].bytes.substr(5)));
  EXPECT_EQ(req.model_name(), "identity-no-such-model");
  EXPECT_EQ((*v)[1].malformed, "unknown-model");
  EXPECT_EQ((*v)[2].grpc_path, "/inference.GRPCInferenceService/NoSuchMethod");
  EXPECT_FALSE(req.ParseFromString((*v)[3].bytes.substr(5)));
}

TEST(RequestTest, MalformedRestKinds) {
  auto v = buildVariants(opts(Protocol::kRest), {-1}, malformedKinds(Protocol::kRest));
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->size(), 7u);
  auto get = [&](const std::string& kind) -> const std::string& {
    for (const auto& var : *v) if (var.malformed == kind) return var.bytes;
    static std::string none;
    return none;
  };
  EXPECT_EQ(get("bad-method").rfind("BREW /v2/models/identity/infer HTTP/1.1\r\n", 0), 0u);
  EXPECT_EQ(get("bad-path").rfind("POST /etc/passwd HTTP/1.1\r\n", 0), 0u);
  EXPECT_EQ(get("bad-version").rfind("POST /v2/models/identity/infer HTTP/9.1\r\n", 0), 0u);
  EXPECT_NE(get("bad-shape").find("\"shape\":[1,5]"), std::string::npos);
  const std::string& bad = get("bad-json");
  const std::string body = bad.substr(bad.find("\r\n\r\n") + 4);
  EXPECT_GT(std::count(body.begin(), body.end(), '{'), std::count(body.begin(), body.end(), '}'))
      << body;  // truncated: unbalanced
  EXPECT_NE(bad.find("Content-Length: " + std::to_string(body.size())), std::string::npos);
  EXPECT_FALSE(buildVariants(opts(Protocol::kRest), {-1}, {"bad-proto"}).ok());
}

TEST(RequestTest, MixFollowsTheFractions) {
  const RequestMix mix({0.75, 0.25}, 2, 0.1);
  std::mt19937_64 rng(1);
  int counts[4] = {};
  const int n = 200000;
  for (int i = 0; i < n; ++i) ++counts[mix.pick(rng)];
  EXPECT_NEAR(counts[0] / double(n), 0.9 * 0.75, 0.005);
  EXPECT_NEAR(counts[1] / double(n), 0.9 * 0.25, 0.005);
  EXPECT_NEAR(counts[2] / double(n), 0.05, 0.003);
  EXPECT_NEAR(counts[3] / double(n), 0.05, 0.003);
  const RequestMix single({1.0}, 0, 0.5);  // no malformed kinds: the fraction does not apply
  for (int i = 0; i < 100; ++i) EXPECT_EQ(single.pick(rng), 0u);
}

}  // namespace
}  // namespace infergate::bench
