// KServe sequence parameters (backends::SequenceParams; docs/BACKENDS.md "Sequences") decoded
// from REST JSON (frontend/kserve_json.h) and gRPC ModelInferRequest parameters
// (frontend/grpc_kserve_codec.h): integer and string ids, 0 / "" meaning none, the start and
// end flags, and the errors for other types.
#include <gtest/gtest.h>

#include "backends/model.h"
#include "frontend/grpc_kserve_codec.h"
#include "frontend/kserve_json.h"
#include "grpc_service.pb.h"

namespace infergate::frontend {
namespace {

absl::StatusOr<backends::InferRequest> json(const std::string& params) {
  static const backends::ModelConfig m;
  const std::string body =
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}],"
      "\"parameters\":" +
      params + "}";
  return decodeInferRequest(body, std::nullopt, m, "m", "1");
}

TEST(SequenceParams, Json) {
  auto r = json("{\"sequence_id\":42,\"sequence_start\":true}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->sequence.id, "42");
  EXPECT_FALSE(r->sequence.id_is_string);
  EXPECT_TRUE(r->sequence.start);
  EXPECT_FALSE(r->sequence.end);
  r = json("{\"sequence_id\":\"abc\",\"sequence_end\":true}");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->sequence.id, "abc");
  EXPECT_TRUE(r->sequence.id_is_string);
  EXPECT_TRUE(r->sequence.end);
  r = json("{\"sequence_id\":0}");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->sequence.active());
  r = json("{}");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->sequence.active());
  for (const char* bad : {"{\"sequence_id\":-1}", "{\"sequence_id\":1.5}", "{\"sequence_id\":[1]}",
                          "{\"sequence_start\":1}", "{\"sequence_end\":\"yes\"}"}) {
    EXPECT_EQ(json(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(json("{\"sequence_id\":\"" + std::string(257, 'a') + "\"}").status().code(),
            absl::StatusCode::kInvalidArgument);
  // The same range as gRPC: up to 2^63-1, never forwarded wrapped.
  r = json("{\"sequence_id\":9223372036854775807}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->sequence.id, "9223372036854775807");
  for (const char* over : {"{\"sequence_id\":9223372036854775808}",
                           "{\"sequence_id\":18446744073709551615}"}) {
    r = json(over);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << over;
    EXPECT_NE(r.status().message().find("2^63-1"), std::string::npos) << r.status();
  }
}

TEST(SequenceParams, Grpc) {
  inference::ModelInferRequest m;
  (*m.mutable_parameters())["sequence_id"].set_int64_param(7);
  (*m.mutable_parameters())["sequence_start"].set_bool_param(true);
  backends::InferRequest r;
  ASSERT_TRUE(decodeModelInferRequest(m.SerializeAsString(), r).ok());
  EXPECT_EQ(r.sequence.id, "7");
  EXPECT_FALSE(r.sequence.id_is_string);
  EXPECT_TRUE(r.sequence.start);
  EXPECT_FALSE(r.sequence.end);

  inference::ModelInferRequest s;
  (*s.mutable_parameters())["sequence_id"].set_string_param("user-9");
  (*s.mutable_parameters())["sequence_end"].set_bool_param(true);
  backends::InferRequest rs;
  ASSERT_TRUE(decodeModelInferRequest(s.SerializeAsString(), rs).ok());
  EXPECT_EQ(rs.sequence.id, "user-9");
  EXPECT_TRUE(rs.sequence.id_is_string);
  EXPECT_TRUE(rs.sequence.end);

  inference::ModelInferRequest u;
  (*u.mutable_parameters())["sequence_id"].set_uint64_param(0);
  backends::InferRequest ru;
  ASSERT_TRUE(decodeModelInferRequest(u.SerializeAsString(), ru).ok());
  EXPECT_FALSE(ru.sequence.active());

  inference::ModelInferRequest bad;
  (*bad.mutable_parameters())["sequence_id"].set_int64_param(-3);
  backends::InferRequest rb;
  EXPECT_EQ(decodeModelInferRequest(bad.SerializeAsString(), rb).code(),
            absl::StatusCode::kInvalidArgument);
  inference::ModelInferRequest dbl;
  (*dbl.mutable_parameters())["sequence_id"].set_double_param(1.0);
  EXPECT_EQ(decodeModelInferRequest(dbl.SerializeAsString(), rb).code(),
            absl::StatusCode::kInvalidArgument);
  inference::ModelInferRequest top;
  (*top.mutable_parameters())["sequence_id"].set_uint64_param(9223372036854775807ULL);
  backends::InferRequest rt;
  ASSERT_TRUE(decodeModelInferRequest(top.SerializeAsString(), rt).ok());
  EXPECT_EQ(rt.sequence.id, "9223372036854775807");
  inference::ModelInferRequest over;
  (*over.mutable_parameters())["sequence_id"].set_uint64_param(9223372036854775808ULL);
  EXPECT_EQ(decodeModelInferRequest(over.SerializeAsString(), rb).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace infergate::frontend
