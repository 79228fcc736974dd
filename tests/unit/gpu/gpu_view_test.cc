#include "gpu/gpu_view.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "gpu/gpu_monitor.h"
#include "gpu/testing/fake_source.h"
#include "tests/unit/gpu/json_lite.h"

namespace infergate::gpu {
namespace {

using testing::Json;
using testing::JsonParser;

constexpr int64_t kMiB = 1 << 20;

std::vector<std::string> linesOf(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

GpuView sampleView() {
  GpuView v;
  v.taken_ns = 123456789;
  v.probes.active = true;
  v.probes.library = "/usr/lib/x86_64-linux-gnu/libcuda.so.1";
  v.probes.attached = {"cuMemAlloc_v2", "cuLaunchKernel"};
  v.probes.missing = {"cuMemAllocAsync"};
  ProcessView a;
  a.tgid = 4242;
  a.comm = "tritonserver";
  a.container.pod_name = "triton-0";
  a.container.pod_namespace = "ml";
  a.container.container_id = "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789";
  a.cgroup_id = 7;
  a.device_bytes = 3 * 1024 * kMiB + 512 * kMiB;  // 3.50 GiB
  a.device_bytes_per_s = 2.0 * kMiB;
  a.launches_per_s = 1234.5;
  a.graph_launches_per_s = 12;
  a.launches_total = 99999;
  a.sync_p50_ns = 1023;
  a.sync_p99_ns = (uint64_t{1} << 22) - 1;
  a.sync_mean_ns = 2500.5;
  a.baseline_ns = 800;
  a.leak_suspect = true;
  a.anomaly = true;
  a.over_quota = true;
  a.leak_allocs = {{0x7f0000001000, 256 * kMiB, 723'000, IG_GPU_MEM_DEVICE},
                   {0x7f0000002000, 1536, 61'000, IG_GPU_MEM_MANAGED}};
  ProcessView b;
  b.tgid = 77;
  b.comm = "evil\x1b[2Jname";
  b.device_bytes = 1536;
  b.device_bytes_per_s = -512;
  v.processes = {a, b};
  ContainerView c;
  c.label = "triton-0";
  c.container = a.container;
  c.cgroup_id = 7;
  c.device_bytes = a.device_bytes;
  c.quota_bytes = 2048 * kMiB;
  c.over_quota = true;
  c.launches_per_s = 1234.5;
  c.processes = 1;
  v.containers = {c};
  v.leak_detections_total = 1;
  v.anomaly_detections_total = 2;
  v.over_quota_detections_total = 3;
  v.events_total = 1;
  GpuEvent e;
  e.type = IG_GPU_EV_ALLOC_FAILED;
  e.fn = IG_GPU_FN_MEM_ALLOC;
  e.tgid = 4242;
  e.comm = "tritonserver";
  e.bytes = 8ull << 30;
  e.result = 2;
  v.recent_events = {e};
  v.stats.calls[IG_GPU_FN_LAUNCH_KERNEL] = 5;
  v.stats.ringbuf_full = 4;
  return v;
}

TEST(GpuViewFormat, Units) {
  EXPECT_EQ(formatBytes(0), "0 B");
  EXPECT_EQ(formatBytes(1023), "1023 B");
  EXPECT_EQ(formatBytes(1536), "1.5 KiB");
  EXPECT_EQ(formatBytes(2 * kMiB), "2.0 MiB");
  EXPECT_EQ(formatBytes(3 * 1024 * kMiB + 512 * kMiB), "3.50 GiB");
  EXPECT_EQ(formatBytes(-1536), "-1.5 KiB");
  EXPECT_EQ(formatBytes(int64_t{5} << 40), "5.00 TiB");
  EXPECT_EQ(formatNs(0), "-");
  EXPECT_EQ(formatNs(850), "850ns");
  EXPECT_EQ(formatNs(12'345), "12.3µs");
  EXPECT_EQ(formatNs(1'500'000), "1.50ms");
  EXPECT_EQ(formatNs(2'000'000'000), "2.00s");
}

TEST(GpuViewText, HeaderRowsFlagsContainersLeaksEvents) {
  const std::string text = renderGpuText(sampleView(), 0);
  const auto lines = linesOf(text);
  ASSERT_GE(lines.size(), 10u) << text;
  EXPECT_EQ(lines[0],
            "GPU probes: active, library /usr/lib/x86_64-linux-gnu/libcuda.so.1, 2 symbols "
            "attached, 1 missing; 2 processes, 1 containers; detections: leak 1, anomaly 2, "
            "over quota 3; events 1");
  EXPECT_EQ(lines[1].substr(0, 45), "PID      COMM             CONTAINER          ");
  for (const char* col : {"DEVICE-MEM", "ΔMEM/s", "LAUNCH/s", "GRAPH/s", "SYNC-P50", "SYNC-P99", "FLAGS"})
    EXPECT_NE(lines[1].find(col), std::string::npos) << col;
  // The first row: the largest process.
  EXPECT_EQ(lines[2],
            "4242     tritonserver     triton-0                 3.50 GiB    +2.0 MiB     1234.5"
            "       12.0     1.0µs    4.19ms  LEAK,3X,QUOTA");
  // The second: control characters shown as '?', a negative delta, no flags.
  EXPECT_EQ(lines[3].substr(0, 26), "77       evil?[2Jname     ");
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_NE(lines[3].find("1.5 KiB"), std::string::npos);
  EXPECT_NE(lines[3].find("-512 B"), std::string::npos);
  EXPECT_EQ(lines[3].substr(lines[3].size() - 3), "  -");
  EXPECT_NE(text.find("\nCONTAINER            POD "), std::string::npos);
  EXPECT_NE(text.find("triton-0             triton-0                     ml                   3.50 GiB"
                      "    2.00 GiB     1234.5      1  QUOTA\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\nLeak candidates:\n  pid 4242 (tritonserver) in triton-0: 3.50 GiB live, 2 "
                      "old allocations listed\n"
                      "       256.0 MiB  device   age 12m03s   ptr 0x7f0000001000\n"
                      "         1.5 KiB  managed  age 1m01s    ptr 0x7f0000002000\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\nRecent events:\n  alloc_failed cuMemAlloc_v2 pid 4242 (tritonserver) 8.00 "
                      "GiB CUresult 2\n"),
            std::string::npos)
      << text;
}

TEST(GpuViewText, MaxRows) {
  const std::string text = renderGpuText(sampleView(), 1);
  EXPECT_NE(text.find("\n4242 "), std::string::npos);
  EXPECT_EQ(text.find("\n77 "), std::string::npos);
  EXPECT_NE(text.find("(1 more processes)\n"), std::string::npos);
}

TEST(GpuViewText, ProbesOffIsOneLineSayingWhy) {
  GpuView v;
  v.probes.active = false;
  v.probes.reason = "no libcuda.so.1: looked at /proc/*/maps of 2 backends and /usr/lib/x86_64-linux-gnu";
  EXPECT_EQ(renderGpuText(v, 0),
            "GPU probes are off: no libcuda.so.1: looked at /proc/*/maps of 2 backends and "
            "/usr/lib/x86_64-linux-gnu\n");
  v.probes.reason.clear();
  EXPECT_EQ(renderGpuText(v, 0), "GPU probes are off: no reason given\n");
}

TEST(GpuViewJson, ParsesWithTheSameData) {
  const std::string json = renderGpuJson(sampleView());
  std::string err;
  auto doc = JsonParser::parse(json, &err);
  ASSERT_TRUE(doc) << err << "\n" << json;
  const Json& d = *doc;
  EXPECT_EQ(d["taken_ns"].num, 123456789);
  EXPECT_TRUE(d["probes"]["active"].b);
  EXPECT_EQ(d["probes"]["library"].str, "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
  ASSERT_EQ(d["probes"]["missing"].arr.size(), 1u);
  EXPECT_EQ(d["probes"]["missing"][0].str, "cuMemAllocAsync");
  ASSERT_EQ(d["processes"].arr.size(), 2u);
  const Json& p = d["processes"][0];
  EXPECT_EQ(p["pid"].num, 4242);
  EXPECT_EQ(p["comm"].str, "tritonserver");
  EXPECT_EQ(p["container"]["label"].str, "triton-0");
  EXPECT_EQ(p["container"]["namespace"].str, "ml");
  EXPECT_EQ(p["device_bytes"].raw_number, std::to_string(3 * 1024 * kMiB + 512 * kMiB));
  EXPECT_EQ(p["device_bytes_per_s"].num, 2.0 * kMiB);
  EXPECT_EQ(p["launches_per_s"].num, 1234.5);
  EXPECT_EQ(p["sync_p99_ns"].num, (1 << 22) - 1);
  EXPECT_EQ(p["sync_mean_ns"].num, 2500.5);
  EXPECT_EQ(p["baseline_ns"].num, 800);
  EXPECT_TRUE(p["leak_suspect"].b);
  EXPECT_TRUE(p["anomaly"].b);
  EXPECT_TRUE(p["over_quota"].b);
  ASSERT_EQ(p["leak_allocs"].arr.size(), 2u);
  EXPECT_EQ(p["leak_allocs"][0]["ptr"].str, "0x7f0000001000");
  EXPECT_EQ(p["leak_allocs"][0]["bytes"].num, 256.0 * kMiB);
  EXPECT_EQ(p["leak_allocs"][0]["age_ms"].num, 723000);
  EXPECT_EQ(p["leak_allocs"][1]["kind"].str, "managed");
  EXPECT_EQ(d["processes"][1]["comm"].str, "evil\x1b[2Jname");  // escaped, and back
  EXPECT_EQ(d["processes"][1]["device_bytes_per_s"].num, -512);
  ASSERT_EQ(d["containers"].arr.size(), 1u);
  EXPECT_EQ(d["containers"][0]["quota_bytes"].num, 2048.0 * kMiB);
  EXPECT_TRUE(d["containers"][0]["over_quota"].b);
  EXPECT_EQ(d["stats"]["calls"]["cuLaunchKernel"].num, 5);
  EXPECT_EQ(d["stats"]["ringbuf_full"].num, 4);
  EXPECT_EQ(d["detections"]["anomaly"].num, 2);
  ASSERT_EQ(d["recent_events"].arr.size(), 1u);
  EXPECT_EQ(d["recent_events"][0]["type"].str, "alloc_failed");
  EXPECT_EQ(d["recent_events"][0]["fn"].str, "cuMemAlloc_v2");
  EXPECT_EQ(d["recent_events"][0]["bytes"].num, 8.0 * (1ull << 30));
}

TEST(GpuViewJson, StringsAreEscapedAndValidUtf8) {
  EXPECT_EQ(jsonString("a\"b\\c\n\t\x01\x7f"), "\"a\\\"b\\\\c\\n\\t\\u0001\\u007f\"");
  EXPECT_EQ(jsonString("µs Δ"), "\"µs Δ\"");  // valid UTF-8 kept
  EXPECT_EQ(jsonString("a\xff" "b"), "\"a\\ufffdb\"");  // an invalid byte
  EXPECT_EQ(jsonString("\xc3"), "\"\\ufffd\"");  // a truncated sequence
  EXPECT_EQ(jsonString("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");  // a surrogate
  GpuView v = sampleView();
  v.processes[0].comm = std::string("bad\xfe\x00zero", 9);
  v.processes[0].sync_mean_ns = std::numeric_limits<double>::infinity();
  v.probes.reason = "quote \" and \\";
  std::string err;
  auto doc = JsonParser::parse(renderGpuJson(v), &err);
  ASSERT_TRUE(doc) << err;
  EXPECT_EQ((*doc)["processes"][0]["comm"].str, std::string("bad\xef\xbf\xbd\x00zero", 11));
  EXPECT_EQ((*doc)["processes"][0]["sync_mean_ns"].type, Json::Type::kNull);
  EXPECT_EQ((*doc)["probes"]["reason"].str, "quote \" and \\");
}

TEST(GpuViewFormat, ValidUtf8) {
  EXPECT_EQ(validUtf8("plain µs"), "plain µs");
  EXPECT_EQ(validUtf8("a\xff" "b\xc3"), "a\xef\xbf\xbd" "b\xef\xbf\xbd");
}

TEST(GpuViewJson, AnEmptyViewIsValid) {
  std::string err;
  auto doc = JsonParser::parse(renderGpuJson(GpuView{}), &err);
  ASSERT_TRUE(doc) << err;
  EXPECT_FALSE((*doc)["probes"]["active"].b);
  EXPECT_TRUE((*doc)["processes"].arr.empty());
}

// The monitor's own view through both renderings.
TEST(GpuViewFromMonitor, RendersWhatTheMonitorSaw) {
  testing::FakeGpuSource src;
  testing::FakeResolver res;
  ContainerInfo c;
  c.pod_name = "tf-serving-1";
  res.containers[3] = c;
  GpuMonitorOptions o;
  o.default_quota_bytes = 10 * kMiB;
  GpuMonitor m(src, res, o, nullptr);
  src.proc(500, 3, "tf").live_bytes[IG_GPU_MEM_DEVICE] = 12 * kMiB;
  src.cgroup(3).live_bytes[IG_GPU_MEM_DEVICE] = 12 * kMiB;
  m.tick(1'000'000'000);
  src.proc(500).launches = 300;
  m.tick(3'000'000'000);
  const GpuView v = m.view();
  const std::string text = renderGpuText(v, 10);
  EXPECT_NE(text.find("\n500      tf               tf-serving-1             12.0 MiB         0 B      150.0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("QUOTA\n"), std::string::npos);
  auto doc = JsonParser::parse(renderGpuJson(v));
  ASSERT_TRUE(doc);
  EXPECT_EQ((*doc)["processes"][0]["launches_per_s"].num, 150);
  EXPECT_EQ((*doc)["containers"][0]["label"].str, "tf-serving-1");
  EXPECT_TRUE((*doc)["containers"][0]["over_quota"].b);
}

}  // namespace
}  // namespace infergate::gpu
