// config.gpu (docs/GPU.md "Configuration"): defaults, accepted values, and the messages for what
// is refused.
#include <gtest/gtest.h>

#include <string>

#include "config/config.h"

namespace infergate::config {
namespace {

constexpr const char* kBase = R"(
listeners: [{name: http, port: 8000}]
models:
  - name: m
    inputs: [{name: I, datatype: FP32, shape: [1]}]
    outputs: [{name: O, datatype: FP32, shape: [1]}]
)";

absl::StatusOr<Config> load(const std::string& gpu) {
  return loadConfigString(std::string(kBase) + gpu, "t.yaml");
}

TEST(GpuConfig, OffByDefault) {
  absl::StatusOr<Config> c = load("");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->gpu.enabled);
  EXPECT_FALSE(c->gpu.required);
  EXPECT_EQ(c->gpu.library, "");
  EXPECT_EQ(c->gpu.interval_ms, 1000u);
  EXPECT_DOUBLE_EQ(c->gpu.anomaly_factor, 3.0);
  EXPECT_EQ(c->gpu.overload_level, 1);
  EXPECT_TRUE(c->gpu.prefer_healthy_endpoints);
  EXPECT_TRUE(c->gpu.quotas.empty());
}

TEST(GpuConfig, ReadsEveryKey) {
  absl::StatusOr<Config> c = load(R"(gpu:
  enabled: true
  required: true
  library: /usr/lib/x86_64-linux-gnu/libcuda.so.1
  interval_ms: 250
  large_alloc_bytes: 4096
  leak_window_ms: 2000
  leak_min_age_ms: 1500
  leak_check_interval_ms: 700
  anomaly_factor: 2.5
  anomaly_min_syncs: 5
  baseline_windows: 3
  default_quota_bytes: 1048576
  quotas:
    - {match: triton, max_device_bytes: 2097152}
  log_interval_ms: 0
  webhook_url: http://127.0.0.1:9000/hook
  webhook_timeout_ms: 500
  max_series: 8
  overload_level: 2
  prefer_healthy_endpoints: false
)");
  ASSERT_TRUE(c.ok()) << c.status();
  const GpuConfig& g = c->gpu;
  EXPECT_TRUE(g.enabled);
  EXPECT_TRUE(g.required);
  EXPECT_EQ(g.library, "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
  EXPECT_EQ(g.interval_ms, 250u);
  EXPECT_EQ(g.large_alloc_bytes, 4096u);
  EXPECT_EQ(g.leak_window_ms, 2000u);
  EXPECT_EQ(g.leak_min_age_ms, 1500u);
  EXPECT_EQ(g.leak_check_interval_ms, 700u);
  EXPECT_DOUBLE_EQ(g.anomaly_factor, 2.5);
  EXPECT_EQ(g.anomaly_min_syncs, 5u);
  EXPECT_EQ(g.baseline_windows, 3u);
  EXPECT_EQ(g.default_quota_bytes, 1048576u);
  ASSERT_EQ(g.quotas.size(), 1u);
  EXPECT_EQ(g.quotas[0].match, "triton");
  EXPECT_EQ(g.quotas[0].max_device_bytes, 2097152u);
  EXPECT_EQ(g.log_interval_ms, 0u);
  EXPECT_EQ(g.webhook_url, "http://127.0.0.1:9000/hook");
  EXPECT_EQ(g.webhook_timeout_ms, 500u);
  EXPECT_EQ(g.max_series, 8u);
  EXPECT_EQ(g.overload_level, 2);
  EXPECT_FALSE(g.prefer_healthy_endpoints);
}

TEST(GpuConfig, RefusalsNameTheKeyAndTheReason) {
  struct Case {
    const char* yaml;
    const char* message;
  } cases[] = {
      {"gpu: {enable: true}\n", "t.yaml: gpu.enable: unknown key 'enable'"},
      {"gpu: {enabled: yes}\n", "gpu.enabled: expected true or false"},
      {"gpu: {library: libcuda.so.1}\n", "gpu.library: 'libcuda.so.1' is not an absolute path"},
      {"gpu: {interval_ms: 1}\n", "gpu.interval_ms: must be between 10 and 3600000, got 1"},
      {"gpu: {anomaly_factor: 1.0}\n", "gpu.anomaly_factor: must be between 1.1 and 1000"},
      {"gpu: {anomaly_factor: three}\n", "gpu.anomaly_factor: expected a number"},
      {"gpu: {anomaly_factor: nan}\n", "gpu.anomaly_factor: expected a number"},
      {"gpu: {overload_level: 4}\n", "gpu.overload_level: must be between 0 and 3, got 4"},
      {"gpu: {webhook_url: \"https://x/\"}\n", "gpu.webhook_url: 'https://x/' is not an http:// URL"},
      {"gpu: {quotas: {match: a}}\n", "gpu.quotas: expected a sequence"},
      {"gpu: {quotas: [{max_device_bytes: 1}]}\n", "gpu.quotas[0].match: required"},
      {"gpu: {quotas: [{match: a}]}\n", "gpu.quotas[0].max_device_bytes: required"},
      {"gpu: {quotas: [{match: a, max_device_bytes: 0}]}\n",
       "gpu.quotas[0].max_device_bytes: must be >= 1, got 0"},
      {"gpu: {quotas: [{match: \"\", max_device_bytes: 1}]}\n", "gpu.quotas[0].match: must not be empty"},
      {"gpu: {max_series: 0}\n", "gpu.max_series: must be between 1 and 1000, got 0"},
  };
  for (const Case& k : cases) {
    absl::StatusOr<Config> c = load(k.yaml);
    ASSERT_FALSE(c.ok()) << k.yaml;
    EXPECT_NE(std::string(c.status().message()).find(k.message), std::string::npos)
        << k.yaml << " -> " << c.status().message();
  }
}

}  // namespace
}  // namespace infergate::config
