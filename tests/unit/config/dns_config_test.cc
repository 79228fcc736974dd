// The configuration of backend discovery and sequence affinity (docs/CONFIGURATION.md,
// docs/BACKENDS.md): dns:///name:port endpoints beside host:port ones, the dns_* and sequence_*
// keys, a dns entry counting as dns_max_endpoints for the batcher's in-flight limit, and the
// errors (malformed entry, metrics_url on a dns entry, bad dns_server, bad header name).
#include <gtest/gtest.h>

#include "backends/pool.h"
#include "config/config.h"

namespace infergate::config {
namespace {

std::string model(std::string_view triton_keys) {
  return std::string(
             "listeners: [{port: 8000}]\nmodels:\n  - name: r\n    backend: triton\n"
             "    max_batch_size: 8\n"
             "    inputs:  [{name: IN, datatype: FP32, shape: [4]}]\n"
             "    outputs: [{name: OUT, datatype: FP32, shape: [4]}]\n"
             "    triton:\n") +
         std::string(triton_keys);
}

TEST(DnsConfig, KeysAndInflightSizing) {
  absl::StatusOr<Config> c =
      loadConfigString(model("      endpoints: [\"dns:///triton.ns.svc:8001\", 10.0.0.1:8001]\n"
                             "      max_concurrency: 2\n"
                             "      dns_refresh_ms: 3000\n"
                             "      dns_min_refresh_ms: 200\n"
                             "      dns_timeout_ms: 900\n"
                             "      dns_server: 127.0.0.1:5353\n"
                             "      dns_max_endpoints: 5\n"
                             "      sequence_idle_timeout_ms: 1234\n"
                             "      sequence_max: 77\n"
                             "      sequence_id_header: X-Session-Id\n"),
                       "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const backends::RemoteBackendConfig& r = *c->models[0].remote;
  EXPECT_EQ(r.endpoints, (std::vector<std::string>{"dns:///triton.ns.svc:8001", "10.0.0.1:8001"}));
  EXPECT_EQ(r.dns_refresh_ms, 3000u);
  EXPECT_EQ(r.dns_min_refresh_ms, 200u);
  EXPECT_EQ(r.dns_timeout_ms, 900u);
  EXPECT_EQ(r.dns_server, "127.0.0.1:5353");
  EXPECT_EQ(r.dns_max_endpoints, 5u);
  EXPECT_EQ(r.sequence_idle_timeout_ms, 1234u);
  EXPECT_EQ(r.sequence_max, 77u);
  EXPECT_EQ(r.sequence_id_header, "x-session-id");  // lower-cased
  ASSERT_TRUE(c->models[0].dynamic_batching.has_value());
  EXPECT_EQ(c->models[0].dynamic_batching->max_inflight_batches, (5u + 1u) * 2u);
}

TEST(DnsConfig, Defaults) {
  absl::StatusOr<Config> c =
      loadConfigString(model("      endpoints: [\"dns:///t:1\"]\n"), "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const backends::RemoteBackendConfig& r = *c->models[0].remote;
  EXPECT_EQ(r.dns_refresh_ms, 5000u);
  EXPECT_EQ(r.dns_min_refresh_ms, 500u);
  EXPECT_EQ(r.dns_server, "");
  EXPECT_EQ(r.dns_max_endpoints, 8u);
  EXPECT_EQ(r.sequence_max, 65536u);
  EXPECT_EQ(c->models[0].dynamic_batching->max_inflight_batches, 8u * 4u);
}

TEST(DnsConfig, Errors) {
  struct Case {
    std::string keys, message;
  };
  const std::vector<Case> cases = {
      {"      endpoints: [\"dns:///bad name:80\"]\n",
       "t.yaml: models[0].triton.endpoints[0]: invalid endpoint 'dns:///bad name:80': 'bad name' "
       "is not a DNS name"},
      {"      endpoints: [\"dns:///svc\"]\n",
       "t.yaml: models[0].triton.endpoints[0]: invalid endpoint 'dns:///svc': expected "
       "dns:///name:port"},
      {"      endpoints: [\"dns://8.8.8.8/svc:80\"]\n",
       "t.yaml: models[0].triton.endpoints[0]: invalid endpoint 'dns://8.8.8.8/svc:80': expected "
       "dns:///name:port (three slashes"},
      {"      endpoints: [{address: \"dns:///svc:1\", metrics_url: \"http://h:2/metrics\"}]\n",
       "t.yaml: models[0].triton.endpoints[0]: metrics_url is not supported for a dns:/// entry"},
      {"      endpoints: [\"dns:///svc:1\", \"dns:///svc:1\"]\n",
       "t.yaml: models[0].triton.endpoints[1]: duplicate endpoint 'dns:///svc:1'"},
      {"      endpoints: [\"dns:///svc:1\"]\n      dns_server: nowhere\n",
       "t.yaml: models[0].triton.dns_server: dns_server 'nowhere'"},
      {"      endpoints: [h:1]\n      sequence_id_header: \"x session\"\n",
       "t.yaml: models[0].triton.sequence_id_header: 'x session' is not a header name"},
      {"      endpoints: [h:1]\n      dns_max_endpoints: 0\n",
       "t.yaml: models[0].triton.dns_max_endpoints"},
  };
  for (const Case& k : cases) {
    absl::StatusOr<Config> c = loadConfigString(model(k.keys), "t.yaml");
    ASSERT_FALSE(c.ok()) << k.keys;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(c.status().message()).rfind(k.message, 0), 0u)
        << c.status().message() << "\n  expected to start with: " << k.message;
  }
}

}  // namespace
}  // namespace infergate::config
