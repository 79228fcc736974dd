#include "config/config.h"

#include "backends/pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

namespace infergate::config {
namespace {

using backends::DataType;
using ::testing::HasSubstr;

// A valid configuration that the bad cases below break one key at a time.
constexpr std::string_view kGoodBase = R"yaml(
listeners:
  - {name: http, address: 0.0.0.0, port: 8000}
models:
  - name: m
    inputs:  [{name: IN, datatype: FP32, shape: [4]}]
    outputs: [{name: OUT, datatype: FP32, shape: [4]}]
)yaml";

std::string withBase(std::string_view extra) { return std::string(kGoodBase) + std::string(extra); }

// A one-model config with the given model body (indented under "- ").
std::string oneModel(std::string_view model) {
  return std::string("listeners: [{port: 8000}]\nmodels:\n  - ") + std::string(model) + "\n";
}

TEST(ConfigTest, ModeNamesRoundTrip) {
  for (Mode m : kModes) {
    ASSERT_TRUE(parseMode(modeName(m)).has_value()) << modeName(m);
    EXPECT_EQ(*parseMode(modeName(m)), m);
  }
  EXPECT_EQ(modeName(Mode::kXdpFilter), "xdp-filter");
  EXPECT_FALSE(parseMode("Socket").has_value());
}

TEST(ConfigTest, DefaultConfigLoads) {
  absl::StatusOr<Config> c = loadConfigString(defaultConfigYaml(), "<embedded>");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->source, "<embedded>");
  EXPECT_EQ(c->mode, Mode::kSocket);
  EXPECT_EQ(c->reactors, 1);
  EXPECT_TRUE(c->cpus.empty());
  ASSERT_EQ(c->listeners.size(), 1u);
  EXPECT_EQ(c->listeners[0].name, "http");
  EXPECT_EQ(c->listeners[0].address, "0.0.0.0");
  EXPECT_EQ(c->listeners[0].port, 8000);
  EXPECT_EQ(c->listeners[0].protocol, "http");
  EXPECT_TRUE(c->admin.enabled);
  EXPECT_EQ(c->admin.address, "127.0.0.1");
  EXPECT_EQ(c->admin.port, 8002);
  EXPECT_EQ(c->logging.level, "info");
  EXPECT_EQ(c->limits.max_body_bytes, 64ull << 20);
  ASSERT_EQ(c->models.size(), 1u);
  const backends::ModelConfig& m = c->models[0];
  EXPECT_EQ(m.name, "identity");
  EXPECT_EQ(m.version, "1");
  EXPECT_EQ(m.backend, "identity");
  EXPECT_EQ(m.platform, "infergate_identity");
  EXPECT_EQ(m.max_batch_size, 8);
  ASSERT_EQ(m.inputs.size(), 1u);
  EXPECT_EQ(m.inputs[0].name, "INPUT0");
  EXPECT_EQ(m.inputs[0].dtype, DataType::kFp32);
  EXPECT_EQ(m.inputs[0].shape, std::vector<int64_t>({16}));
  EXPECT_EQ(m.fullShape(m.inputs[0]), std::vector<int64_t>({-1, 16}));
  ASSERT_EQ(m.outputs.size(), 1u);
  EXPECT_EQ(m.outputs[0].name, "OUTPUT0");
  EXPECT_EQ(m.outputs[0].dtype, DataType::kFp32);
  EXPECT_EQ(m.outputs[0].shape, std::vector<int64_t>({16}));
  EXPECT_EQ(m.cost_fixed_us, 0u);
  EXPECT_EQ(m.cost_per_item_us, 0u);
}

class ExampleFileTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ExampleFileTest, Loads) {
  const std::string path = std::string(INFERGATE_SOURCE_DIR) + "/config/examples/" + GetParam();
  absl::StatusOr<Config> c = loadConfigFile(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->source, path);
  EXPECT_FALSE(c->listeners.empty());
  EXPECT_FALSE(c->models.empty());
}

INSTANTIATE_TEST_SUITE_P(Examples, ExampleFileTest,
                         ::testing::Values("socket.yaml", "xdp-filter.yaml", "minimal.yaml"));

// Every file in config/examples is covered by the list above, so a new example cannot go
// untested.
TEST(ConfigTest, EveryExampleIsListed) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(std::string(INFERGATE_SOURCE_DIR) +
                                                           "/config/examples")) {
    if (e.path().extension() == ".yaml") found.push_back(e.path().filename().string());
  }
  std::sort(found.begin(), found.end());
  EXPECT_EQ(found, std::vector<std::string>({"minimal.yaml", "socket.yaml", "xdp-filter.yaml"}));
}

TEST(ConfigTest, ExampleValuesAreRead) {
  absl::StatusOr<Config> x =
      loadConfigFile(std::string(INFERGATE_SOURCE_DIR) + "/config/examples/xdp-filter.yaml");
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ(x->mode, Mode::kXdpFilter);
  EXPECT_EQ(x->xdp.interface, "veth0");
  EXPECT_EQ(x->xdp.attach, xdp::AttachMode::kNative);
  EXPECT_EQ(x->xdp.methods, std::vector<std::string>({"GET", "POST"}));
  EXPECT_EQ(x->xdp.path_prefixes, std::vector<std::string>({"/v2/", "/v1/models/", "/metrics"}));
  EXPECT_EQ(x->xdp.syn_rate_per_sec, 1000u);
  EXPECT_EQ(x->xdp.syn_burst, 2000u);
  EXPECT_EQ(x->xdp.pin_path, "/sys/fs/bpf/infergate");

  absl::StatusOr<Config> s =
      loadConfigFile(std::string(INFERGATE_SOURCE_DIR) + "/config/examples/socket.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->reactors, 2);
  EXPECT_EQ(s->cpus, std::vector<int>({0, 1}));
  ASSERT_EQ(s->models.size(), 2u);
  EXPECT_EQ(s->models[1].version, "2");
  EXPECT_EQ(s->models[1].cost_fixed_us, 500u);
  EXPECT_EQ(s->models[1].cost_per_item_us, 20u);
  EXPECT_EQ(s->models[1].inputs[0].dtype, DataType::kInt64);
}

// Every ```yaml block in docs/CONFIGURATION.md is a complete configuration that loads.
TEST(ConfigTest, DocumentationExamplesLoad) {
  std::ifstream f(std::string(INFERGATE_SOURCE_DIR) + "/docs/CONFIGURATION.md");
  ASSERT_TRUE(f) << "docs/CONFIGURATION.md is missing";
  std::vector<std::string> blocks;
  std::string line;
  bool in = false;
  while (std::getline(f, line)) {
    if (!in && line == "```yaml") {
      in = true;
      blocks.emplace_back();
    } else if (in && line == "```") {
      in = false;
    } else if (in) {
      blocks.back() += line + "\n";
    }
  }
  ASSERT_GE(blocks.size(), 2u);
  for (const std::string& b : blocks) {
    absl::StatusOr<Config> c = loadConfigString(b, "CONFIGURATION.md");
    EXPECT_TRUE(c.ok()) << c.status() << "\n" << b;
  }
  // The documented default is the embedded one.
  EXPECT_NE(std::string(defaultConfigYaml()).find(blocks.back()), std::string::npos);
}

TEST(ConfigTest, EveryKeySet) {
  absl::StatusOr<Config> c = loadConfigString(R"yaml(
mode: afxdp
reactors: 3
cpus: [4, 5, 6]
listeners:
  - {name: a, address: 10.0.0.1, port: 9000, protocol: grpc}
  - {name: b, address: 10.0.0.2, port: 9000}
admin: {enabled: false, address: "::1", port: 0, token: "sixteen-chars-tok"}
limits: {max_header_bytes: 4096, max_body_bytes: 1000, max_connections: 5, idle_timeout_ms: 1,
         header_timeout_ms: 2, body_timeout_ms: 3, cancel_on_half_close: true}
logging: {level: debug, access_log: true}
xdp: {interface: eth1, attach: generic, methods: [PUT], path_prefixes: ["/x"],
      http2_max_frame_size: 16777215, rate_limit: {rate_per_sec: 10},
      fragments: drop_all, rst_rate_limit: {rate_per_sec: 5, burst: 7}, source_prefix_v4: 24,
      source_prefix_v6: 48, syn_cookies: always, tags: prefix, busy_poll: true, prefer_busy_poll: false,
      busy_poll_usecs: 50, busy_poll_budget: 16, held_frames: 64, held_frames_per_connection: 0,
      tcp_rcv_buf: 4194304}
models:
  - name: m.v-1_x
    version: 7
    backend: identity
    max_batch_size: 0
    inputs: [{name: IN, datatype: BYTES, shape: []}]
    outputs: [{name: OUT, datatype: BYTES, shape: []}]
    identity: {fixed_us: 10, per_item_us: 2}
)yaml",
                                              "all.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->source, "all.yaml");
  EXPECT_EQ(c->mode, Mode::kAfXdp);
  EXPECT_EQ(c->reactors, 3);
  EXPECT_EQ(c->cpus, std::vector<int>({4, 5, 6}));
  EXPECT_EQ(c->listeners[0].protocol, "grpc");
  EXPECT_EQ(c->listeners[1].address, "10.0.0.2");
  EXPECT_EQ(c->listeners[1].protocol, "http");
  EXPECT_FALSE(c->admin.enabled);
  EXPECT_EQ(c->admin.address, "::1");
  EXPECT_EQ(c->admin.token, "sixteen-chars-tok");
  EXPECT_EQ(c->admin.port, 0);
  EXPECT_EQ(c->limits.max_header_bytes, 4096u);
  EXPECT_EQ(c->limits.max_body_bytes, 1000u);
  EXPECT_EQ(c->limits.max_connections, 5u);
  EXPECT_EQ(c->limits.idle_timeout_ms, 1u);
  EXPECT_EQ(c->limits.header_timeout_ms, 2u);
  EXPECT_EQ(c->limits.body_timeout_ms, 3u);
  EXPECT_TRUE(c->limits.cancel_on_half_close);
  EXPECT_EQ(c->logging.level, "debug");
  EXPECT_TRUE(c->logging.access_log);
  EXPECT_EQ(c->xdp.interface, "eth1");
  EXPECT_EQ(c->xdp.attach, xdp::AttachMode::kGeneric);
  EXPECT_EQ(c->xdp.methods, std::vector<std::string>({"PUT"}));
  EXPECT_EQ(c->xdp.path_prefixes, std::vector<std::string>({"/x"}));
  EXPECT_EQ(c->xdp.http2_max_frame_size, 16777215u);
  EXPECT_EQ(c->xdp.syn_rate_per_sec, 10u);
  EXPECT_EQ(c->xdp.syn_burst, 10u);  // defaults to the rate
  EXPECT_EQ(c->xdp.fragments, xdp::FragPolicy::kDropAll);
  EXPECT_EQ(c->xdp.rst_rate_per_sec, 5u);
  EXPECT_EQ(c->xdp.rst_burst, 7u);
  EXPECT_EQ(c->xdp.source_prefix_v4, 24);
  EXPECT_EQ(c->xdp.source_prefix_v6, 48);
  EXPECT_EQ(c->xdp.syn_cookies, xdp::SynCookies::kAlways);
  EXPECT_EQ(c->xdp.tags, xdp::XdpOptions::TagPlacement::kPrefix);
  EXPECT_TRUE(c->xdp.busy_poll);
  EXPECT_FALSE(c->xdp.prefer_busy_poll);
  EXPECT_EQ(c->xdp.busy_poll_usecs, 50u);
  EXPECT_EQ(c->xdp.busy_poll_budget, 16u);
  EXPECT_EQ(c->afxdp_held_frames, 64u);
  EXPECT_EQ(c->afxdp_held_frames_per_connection, 0u);
  EXPECT_EQ(c->afxdp_tcp_rcv_buf, 4u << 20);
  EXPECT_EQ(c->models[0].name, "m.v-1_x");
  EXPECT_EQ(c->models[0].version, "7");
  EXPECT_EQ(c->models[0].max_batch_size, 0);
  EXPECT_EQ(c->models[0].inputs[0].dtype, DataType::kBytes);
  EXPECT_TRUE(c->models[0].inputs[0].shape.empty());
  EXPECT_EQ(c->models[0].cost_fixed_us, 10u);
  EXPECT_EQ(c->models[0].cost_per_item_us, 2u);
}

TEST(ConfigTest, GoodEdgeCases) {
  // IPv6 listeners (wildcard and literal), an IPv4 wildcard on the same port (other family),
  // port 0 twice (each picks a free port), variable dimensions, max_batch_size 0, two versions.
  absl::StatusOr<Config> c = loadConfigString(R"yaml(
listeners:
  - {name: v6, address: "::", port: 8000}
  - {name: v4, address: 0.0.0.0, port: 8000}
  - {name: ll, address: "fe80::1", port: 0}
  - {name: ll2, address: "fe80::1", port: 0}
admin: {address: "::1", port: 8002}
models:
  - name: var
    max_batch_size: 0
    inputs:  [{name: A, datatype: INT32, shape: [-1, 3, -1]}, {name: B, datatype: BOOL, shape: [0]}]
    outputs: [{name: A_OUT, datatype: INT32, shape: [-1, 3, -1]}, {name: B_OUT, datatype: BOOL, shape: [0]}]
  - name: var
    version: "two"
    inputs:  [{name: A, datatype: FP16, shape: [1]}]
    outputs: [{name: A, datatype: FP16, shape: [1]}]
)yaml",
                                              "edge.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->listeners.size(), 4u);
  EXPECT_EQ(c->listeners[0].address, "::");
  EXPECT_EQ(c->listeners[2].port, 0);
  EXPECT_EQ(c->admin.address, "::1");
  EXPECT_EQ(c->models[0].max_batch_size, 0);
  EXPECT_EQ(c->models[0].inputs[0].shape, std::vector<int64_t>({-1, 3, -1}));
  EXPECT_EQ(c->models[0].fullShape(c->models[0].inputs[0]), std::vector<int64_t>({-1, 3, -1}));
  EXPECT_EQ(c->models[0].inputs[1].shape, std::vector<int64_t>({0}));
  EXPECT_EQ(c->models[1].version, "two");
  EXPECT_EQ(c->models[1].max_batch_size, 0);  // default
}

// The `xdp:` section is read into xdp::XdpOptions: a file without it has the struct's own
// defaults, which are the config file's (issue 14: the two used to disagree on
// reject_mid_stream), and priority.* defaults map onto the same trusted-source rule.
TEST(ConfigTest, XdpDefaultsAreTheOptionsDefaults) {
  absl::StatusOr<Config> c = loadConfigString(defaultConfigYaml(), "<embedded>");
  ASSERT_TRUE(c.ok()) << c.status();
  const xdp::XdpOptions d;
  EXPECT_FALSE(c->xdp.reject_mid_stream);
  EXPECT_FALSE(d.reject_mid_stream);
  EXPECT_EQ(c->xdp.attach, d.attach);
  EXPECT_EQ(c->xdp.methods, d.methods);
  EXPECT_EQ(c->xdp.path_prefixes, d.path_prefixes);
  EXPECT_EQ(c->xdp.http2_max_frame_size, d.http2_max_frame_size);
  EXPECT_EQ(c->xdp.syn_rate_per_sec, 0u);
  EXPECT_EQ(c->xdp.request_rate_per_sec, 0u);
  EXPECT_EQ(c->xdp.default_class, 1);
  EXPECT_TRUE(c->xdp.priority_header);
  EXPECT_TRUE(c->xdp.send_rst);
  EXPECT_TRUE(c->xdp.track_flows);
  EXPECT_EQ(c->xdp.fragments, xdp::FragPolicy::kDrop);
  EXPECT_EQ(c->xdp.rst_rate_per_sec, 20000u);
  EXPECT_EQ(c->xdp.rst_burst, 0u);  // 0: the rate (20000)
  EXPECT_EQ(c->xdp.source_prefix_v4, 32);
  EXPECT_EQ(c->xdp.source_prefix_v6, 64);
  EXPECT_EQ(c->xdp.syn_cookies, xdp::SynCookies::kAuto);
  // Not set: afxdp mode takes auto (the best placement this kernel accepts).
  EXPECT_EQ(c->xdp.tags, xdp::XdpOptions::TagPlacement::kOff);
  EXPECT_FALSE(c->xdp.busy_poll);  // afxdp reactors sleep in poll(2) unless asked to spin
  EXPECT_TRUE(c->xdp.prefer_busy_poll);
  EXPECT_EQ(c->xdp.busy_poll_usecs, 20u);
  EXPECT_EQ(c->xdp.busy_poll_budget, 64u);
  EXPECT_EQ(c->afxdp_held_frames, 1024u);  // out-of-order segments held in their frames
  EXPECT_EQ(c->afxdp_held_frames_per_connection, 256u);
  EXPECT_EQ(c->afxdp_tcp_rcv_buf, 256u * 1024);  // the TCP stack's receive memory
  EXPECT_EQ(c->xdp.priority_from, d.priority_from);
  EXPECT_EQ(c->xdp.trusted_sources, d.trusted_sources);
  EXPECT_EQ(PriorityConfig{}.trusted_sources, d.trusted_sources);
  EXPECT_TRUE(c->xdp.service_ports.empty());  // the app adds its listeners' ports
}

TEST(ConfigTest, ListenerDefaults) {
  absl::StatusOr<Config> c = loadConfigString(
      "listeners: [{port: 1}, {port: 2}]\nmodels: [{name: m, inputs: [{name: I, datatype: FP32, "
      "shape: [1]}], outputs: [{name: O, datatype: FP32, shape: [1]}]}]\n",
      "d.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listeners[0].name, "http");
  EXPECT_EQ(c->listeners[1].name, "http1");
  EXPECT_EQ(c->listeners[1].address, "0.0.0.0");
  EXPECT_EQ(c->listeners[1].protocol, "http");
  EXPECT_EQ(c->models[0].version, "1");
  EXPECT_EQ(c->xdp.methods, std::vector<std::string>({"GET", "POST"}));
}

struct BadCase {
  const char* description;
  std::string yaml;
  std::string path;    // "<source>: <path>: " must appear; for YAML syntax errors, the "line:col"
  std::string reason;  // must appear in the message
};

void PrintTo(const BadCase& b, std::ostream* os) { *os << b.description; }

class BadConfigTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadConfigTest, IsRefusedWithPathAndReason) {
  const BadCase& b = GetParam();
  absl::StatusOr<Config> c = loadConfigString(b.yaml, "bad.yaml");
  ASSERT_FALSE(c.ok()) << b.description << ": loaded";
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  const std::string msg(c.status().message());
  EXPECT_EQ(msg.rfind("bad.yaml", 0), 0u) << msg;
  if (!b.path.empty()) {
    EXPECT_THAT(msg,
                HasSubstr(b.path[0] == ':' ? "bad.yaml" + b.path : "bad.yaml: " + b.path + ": "))
        << b.description;
  }
  EXPECT_THAT(msg, HasSubstr(b.reason)) << b.description;
}

std::vector<BadCase> badCases() {
  const std::string dtypes =
      "(expected one of BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, "
      "BF16, FP32, FP64, BYTES)";
  return {
      // Document shape.
      {"empty file", "", "", "the configuration is empty"},
      {"only comments", "# nothing\n", "", "the configuration is empty"},
      {"sequence root", "- a\n- b\n", "", "the top level must be a mapping"},
      {"scalar root", "hello\n", "",
       "the top level must be a mapping (mode:, listeners:, models:, ...), got 'hello'"},
      {"two documents", withBase("---\nmode: socket\n"), "", "2 YAML documents"},
      {"syntax error", "listeners: [\n  {port: 1\nmodels: x\n", ":", "invalid YAML"},
      {"bad indentation", "mode: socket\n  reactors: 2\n", ":2:", "invalid YAML"},
      // yaml-cpp's LoadAll looped forever, allocating, on these (fuzz_config).
      {"stray comma", ",", ":1:1:", "invalid YAML"},
      {"stray comma after a sequence", "- a\n,\n", ":2:1:", "invalid YAML"},
      // Unknown and duplicate keys.
      {"unknown top key", withBase("reactor: 2\n"), "reactor", "unknown key 'reactor'"},
      {"unknown listener key", "listeners: [{prot: 80}]\n", "listeners[0].prot",
       "unknown key 'prot' (expected one of name, address, port, protocol)"},
      {"unknown model key", oneModel("{name: m, batch: 1}"), "models[0].batch",
       "unknown key 'batch'"},
      {"unknown tensor key",
       oneModel("{name: m, inputs: [{name: I, datatype: FP32, shape: [1], dims: [1]}]}"),
       "models[0].inputs[0].dims", "unknown key 'dims'"},
      {"unknown rate_limit key", withBase("xdp: {rate_limit: {rate: 5}}\n"), "xdp.rate_limit.rate",
       "unknown key 'rate'"},
      {"unknown identity key",
       oneModel("{name: m, inputs: [{name: A, datatype: FP32, shape: [1]}], outputs: [{name: O, "
                "datatype: FP32, shape: [1]}], identity: {fixed: 1}}"),
       "models[0].identity.fixed", "unknown key 'fixed'"},
      {"duplicate key", withBase("reactors: 1\nreactors: 2\n"), "reactors",
       "duplicate key 'reactors'"},
      // mode, reactors, cpus.
      {"unknown mode", withBase("mode: xdp\n"), "mode",
       "unknown mode 'xdp' (expected one of socket, xdp-filter, afxdp, dpdk)"},
      {"mode not a string", withBase("mode: [socket]\n"), "mode",
       "expected a string, got a sequence"},
      {"reactors zero", withBase("reactors: 0\n"), "reactors", "must be between 1 and 256, got 0"},
      {"reactors too many", withBase("reactors: 257\n"), "reactors",
       "must be between 1 and 256, got 257"},
      {"reactors quoted", withBase("reactors: \"2\"\n"), "reactors",
       "expected an integer, got the string \"2\""},
      {"reactors fraction", withBase("reactors: 1.5\n"), "reactors",
       "expected an integer, got '1.5'"},
      {"reactors null", withBase("reactors:\n"), "reactors", "expected an integer, got null"},
      {"cpus length", withBase("reactors: 2\ncpus: [0]\n"), "cpus",
       "has 1 entries but reactors is 2"},
      {"cpus negative", withBase("cpus: [-1]\n"), "cpus[0]", "must be between 0 and 4095, got -1"},
      {"cpus not a list", withBase("cpus: 0\n"), "cpus", "expected a sequence, got '0'"},
      // Listeners.
      {"no listeners", "models: []\n", "listeners", "at least one listener is required"},
      {"empty listeners", "listeners: []\n", "listeners", "at least one listener is required"},
      {"listeners a map", "listeners: {port: 1}\n", "listeners",
       "expected a sequence, got a mapping"},
      {"bad address", "listeners: [{address: 1.2.3}]\n", "listeners[0].address",
       "invalid address '1.2.3'"},
      {"hostname address", "listeners: [{address: localhost}]\n", "listeners[0].address",
       "invalid address 'localhost'"},
      {"port too large", "listeners: [{port: 65536}]\n", "listeners[0].port",
       "must be between 0 and 65535, got 65536"},
      {"port negative", "listeners: [{port: -1}]\n", "listeners[0].port",
       "must be between 0 and 65535, got -1"},
      {"port string", "listeners: [{port: http}]\n", "listeners[0].port",
       "expected an integer, got 'http'"},
      {"port hex", "listeners: [{port: 0x50}]\n", "listeners[0].port",
       "expected an integer, got '0x50'"},
      {"port huge", "listeners: [{port: 99999999999999999999999}]\n", "listeners[0].port",
       "must be between 0 and 65535"},
      {"bad protocol", "listeners: [{protocol: https}]\n", "listeners[0].protocol",
       "unknown protocol 'https' (expected one of http, grpc, auto)"},
      {"duplicate port",
       "listeners: [{name: a, port: 80}, {name: b, address: 0.0.0.0, port: 80}]\n",
       "listeners[1].port", "duplicate address and port"},
      {"duplicate IPv6 port spelled differently",
       "listeners: [{name: a, address: '::1', port: 80}, {name: b, address: '0:0::1', port: 80}]\n",
       "listeners[1].port", "[0:0::1]:80 overlaps listeners[0] ([::1]:80)"},
      {"wildcard overlap",
       "listeners: [{name: a, address: 127.0.0.1, port: 80}, {name: b, port: 80}]\n",
       "listeners[1].port", "a wildcard address takes every address"},
      {"duplicate listener name", "listeners: [{name: a, port: 80}, {name: a, port: 81}]\n",
       "listeners[1].name", "duplicate listener name 'a'"},
      // Admin, limits, logging.
      {"admin clashes with a listener", withBase("admin: {address: 0.0.0.0, port: 8000}\n"),
       "admin.port", "overlaps listeners[0]"},
      {"admin enabled not bool", withBase("admin: {enabled: yes please}\n"), "admin.enabled",
       "expected true or false, got 'yes please'"},
      {"admin enabled quoted", withBase("admin: {enabled: \"true\"}\n"), "admin.enabled",
       "expected true or false"},
      {"admin a list", withBase("admin: [1]\n"), "admin", "expected a mapping, got a sequence"},
      {"admin token too short", withBase("admin: {token: short}\n"), "admin.token",
       "16 to 256 printable characters"},
      {"admin token with a space", withBase("admin: {token: \"sixteen chars token\"}\n"),
       "admin.token", "without spaces"},
      {"admin token and file", withBase("admin: {token: sixteen-chars-tok, token_file: /x}\n"),
       "admin.token", "not both"},
      {"admin token file missing",
       withBase("admin: {token_file: /nonexistent/infergate-admin-token}\n"), "admin.token_file",
       "cannot open '/nonexistent/infergate-admin-token'"},
      {"half close not a bool", withBase("limits: {cancel_on_half_close: 1}\n"),
       "limits.cancel_on_half_close", "expected true or false"},
      {"header limit zero", withBase("limits: {max_header_bytes: 0}\n"), "limits.max_header_bytes",
       "must be between 1 and 16777216, got 0"},
      {"negative body limit", withBase("limits: {max_body_bytes: -5}\n"), "limits.max_body_bytes",
       "got -5"},
      {"zero timeout", withBase("limits: {idle_timeout_ms: 0}\n"), "limits.idle_timeout_ms",
       "must be between 1 and 86400000, got 0"},
      {"send timeout too short", withBase("limits: {send_timeout_ms: 50}\n"),
       "limits.send_timeout_ms", "50 ms is too short"},
      {"min drain zero", withBase("limits: {min_drain_bytes: 0}\n"), "limits.min_drain_bytes",
       "must be between 1 and"},
      {"output limit too small", withBase("limits: {max_output_bytes_per_connection: 1000}\n"),
       "limits.max_output_bytes_per_connection", "cannot hold one response"},
      {"min drain above the output limit",
       withBase("limits: {max_output_bytes_per_connection: 65536, min_drain_bytes: 65537}\n"),
       "limits.min_drain_bytes", "no connection could ever make that much progress"},
      {"process output budget below one connection's",
       withBase("limits: {max_output_bytes: 1048576}\n"), "limits.max_output_bytes",
       "below limits.max_output_bytes_per_connection (67108864)"},
      {"negative output budget", withBase("limits: {max_output_bytes: -1}\n"),
       "limits.max_output_bytes", "got -1"},
      {"unknown log level", withBase("logging: {level: verbose}\n"), "logging.level",
       "unknown level 'verbose'"},
      // XDP.
      {"xdp mode without interface", withBase("mode: xdp-filter\n"), "xdp.interface",
       "required in mode 'xdp-filter'"},
      {"afxdp mode without interface", withBase("mode: afxdp\nxdp: {attach: native}\n"),
       "xdp.interface", "required in mode 'afxdp'"},
      {"interface too long", withBase("xdp: {interface: abcdefghijklmnop}\n"), "xdp.interface",
       "invalid interface name"},
      {"bad attach", withBase("xdp: {interface: eth0, attach: offload}\n"), "xdp.attach",
       "unknown attach mode 'offload' (expected one of native, generic)"},
      {"bad tag placement", withBase("xdp: {interface: eth0, tags: headroom}\n"), "xdp.tags",
       "unknown tag placement 'headroom' (expected one of auto, metadata, prefix)"},
      {"lowercase method", withBase("xdp: {methods: [GET, post]}\n"), "xdp.methods[1]",
       "invalid method 'post'"},
      {"method with digit", withBase("xdp: {methods: [GET2]}\n"), "xdp.methods[0]",
       "uppercase letters"},
      {"no methods", withBase("xdp: {methods: []}\n"), "xdp.methods", "at least one method"},
      {"relative path prefix", withBase("xdp: {path_prefixes: [/v2/, v1/models]}\n"),
       "xdp.path_prefixes[1]", "must start with '/'"},
      {"frame size too small", withBase("xdp: {http2_max_frame_size: 1000}\n"),
       "xdp.http2_max_frame_size", "must be between 16384 and 16777215, got 1000"},
      {"zero burst with a rate", withBase("xdp: {rate_limit: {rate_per_sec: 5, burst: 0}}\n"),
       "xdp.rate_limit.burst", "must be >= 1 when rate_per_sec > 0"},
      {"relative pin path", withBase("xdp: {pin_path: bpf/ig}\n"), "xdp.pin_path",
       "must be an absolute path"},
      {"busy_poll not a boolean", withBase("xdp: {busy_poll: 1}\n"), "xdp.busy_poll",
       "expected true or false"},
      {"too many held frames", withBase("xdp: {held_frames: 70000}\n"), "xdp.held_frames",
       "must be between 0 and 65536, got 70000"},
      {"TCP receive buffer too small", withBase("xdp: {tcp_rcv_buf: 65535}\n"),
       "xdp.tcp_rcv_buf", "must be between 65536 and 16777216, got 65535"},
      {"TCP receive buffer too large", withBase("xdp: {tcp_rcv_buf: 16777217}\n"),
       "xdp.tcp_rcv_buf", "must be between 65536 and 16777216, got 16777217"},
      {"zero busy-poll budget", withBase("xdp: {busy_poll_budget: 0}\n"), "xdp.busy_poll_budget",
       "must be between 1 and 65535, got 0"},
      {"busy-poll usecs too large", withBase("xdp: {busy_poll_usecs: 2000000}\n"),
       "xdp.busy_poll_usecs", "must be between 0 and 1000000, got 2000000"},
      // Models.
      {"no models", "listeners: [{port: 1}]\n", "models", "at least one model is required"},
      {"model without name", oneModel("{version: 1}"), "models[0].name", "required"},
      {"model name with slash", oneModel("{name: a/b}"), "models[0].name",
       "invalid model name 'a/b'"},
      {"model name dotdot", oneModel("{name: ..}"), "models[0].name", "invalid model name '..'"},
      {"model version with space", oneModel("{name: m, version: 'v 1'}"), "models[0].version",
       "invalid version 'v 1'"},
      {"unknown backend", oneModel("{name: m, backend: onnx}"), "models[0].backend",
       "unknown backend 'onnx' (known backends: identity, triton, tfserving)"},
      {"negative batch", oneModel("{name: m, max_batch_size: -1}"), "models[0].max_batch_size",
       "must be between 0 and 1048576, got -1"},
      {"no inputs", oneModel("{name: m}"), "models[0].inputs", "at least one tensor is required"},
      {"input not a map", oneModel("{name: m, inputs: [FP32]}"), "models[0].inputs[0]",
       "expected a mapping, got 'FP32'"},
      {"input without datatype", oneModel("{name: m, inputs: [{name: I, shape: [1]}]}"),
       "models[0].inputs[0].datatype", "required"},
      {"input without shape", oneModel("{name: m, inputs: [{name: I, datatype: FP32}]}"),
       "models[0].inputs[0].shape", "required"},
      {"unknown datatype",
       oneModel("{name: m, inputs: [{name: A, datatype: FP32, shape: [1]}, {name: B, datatype: "
                "FP33, shape: [1]}]}"),
       "models[0].inputs[1].datatype", "unknown datatype 'FP33' " + dtypes},
      {"lowercase datatype", oneModel("{name: m, inputs: [{name: A, datatype: fp32, shape: [1]}]}"),
       "models[0].inputs[0].datatype", "unknown datatype 'fp32'"},
      {"dimension -2", oneModel("{name: m, inputs: [{name: A, datatype: FP32, shape: [3, -2]}]}"),
       "models[0].inputs[0].shape[1]", "invalid dimension -2 (use -1 for a variable dimension)"},
      {"dimension string", oneModel("{name: m, inputs: [{name: A, datatype: FP32, shape: [x]}]}"),
       "models[0].inputs[0].shape[0]", "expected an integer, got 'x'"},
      {"shape scalar", oneModel("{name: m, inputs: [{name: A, datatype: FP32, shape: 4}]}"),
       "models[0].inputs[0].shape", "expected a sequence, got '4'"},
      {"duplicate input names",
       oneModel("{name: m, inputs: [{name: A, datatype: FP32, shape: [1]}, {name: A, datatype: "
                "FP32, shape: [1]}]}"),
       "models[0].inputs[1].name", "duplicate name 'A' (also models[0].inputs[0])"},
      {"duplicate output names",
       oneModel("{name: m, inputs: [{name: A, datatype: FP32, shape: [1]}, {name: B, datatype: "
                "FP32, shape: [1]}], outputs: [{name: O, datatype: FP32, shape: [1]}, {name: O, "
                "datatype: FP32, shape: [1]}]}"),
       "models[0].outputs[1].name", "duplicate name 'O'"},
      {"identity output count",
       oneModel("{name: m, inputs: [{name: A, datatype: FP32, shape: [1]}, {name: B, datatype: "
                "FP32, shape: [1]}], outputs: [{name: O, datatype: FP32, shape: [1]}]}"),
       "models[0].outputs", "one output per input (2 inputs, 1 outputs)"},
      {"identity output datatype",
       oneModel("{name: m, inputs: [{name: A, datatype: FP32, shape: [1]}], outputs: [{name: O, "
                "datatype: INT32, shape: [1]}]}"),
       "models[0].outputs[0].datatype", "needs the datatype of inputs[0] ('A' is FP32), got INT32"},
      {"identity output shape",
       oneModel("{name: m, inputs: [{name: A, datatype: FP32, shape: [2, -1]}], outputs: [{name: "
                "O, datatype: FP32, shape: [2, 3]}]}"),
       "models[0].outputs[0].shape", "needs the shape of inputs[0] ('A' is [2, -1]), got [2, 3]"},
      {"negative cost",
       oneModel("{name: m, inputs: [{name: A, datatype: FP32, shape: [1]}], outputs: [{name: O, "
                "datatype: FP32, shape: [1]}], identity: {per_item_us: -3}}"),
       "models[0].identity.per_item_us", "got -3"},
      {"duplicate model",
       "listeners: [{port: 1}]\nmodels:\n"
       "  - {name: m, version: 1, inputs: [{name: A, datatype: FP32, shape: [1]}], outputs: "
       "[{name: "
       "O, datatype: FP32, shape: [1]}]}\n"
       "  - {name: m, version: \"1\", inputs: [{name: A, datatype: FP32, shape: [1]}], outputs: "
       "[{name: O, datatype: FP32, shape: [1]}]}\n",
       "models[1]", "duplicate model 'm' version '1' (also models[0])"},
      {"duplicate model default version",
       "listeners: [{port: 1}]\nmodels:\n"
       "  - {name: m, inputs: [{name: A, datatype: FP32, shape: [1]}], outputs: [{name: O, "
       "datatype: FP32, shape: [1]}]}\n"
       "  - {name: m, version: 1, inputs: [{name: A, datatype: FP32, shape: [1]}], outputs: "
       "[{name: O, datatype: FP32, shape: [1]}]}\n",
       "models[1]", "duplicate model 'm' version '1'"},
  };
}

INSTANTIATE_TEST_SUITE_P(Table, BadConfigTest, ::testing::ValuesIn(badCases()),
                         [](const ::testing::TestParamInfo<BadCase>& info) {
                           std::string name;
                           for (const char* p = info.param.description; *p; ++p) {
                             name += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
                           }
                           return name;
                         });

TEST(ConfigTest, SyntaxErrorNamesLineAndColumn) {
  absl::StatusOr<Config> c = loadConfigString("mode: socket\nlisteners: [\n", "bad.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              ::testing::MatchesRegex("bad\\.yaml:[0-9]+:[0-9]+: invalid YAML: .+"));
}

TEST(ConfigTest, MissingFileIsNotFound) {
  const std::string path = "/nonexistent/infergate-config-test.yaml";
  absl::StatusOr<Config> c = loadConfigFile(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c.status().message(), path + ": cannot read file: No such file or directory");
}

TEST(ConfigTest, DirectoryIsNotFound) {
  absl::StatusOr<Config> c = loadConfigFile(std::string(INFERGATE_SOURCE_DIR) + "/config");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("cannot read file: Is a directory"));
}

TEST(ConfigTest, FileErrorsNameThePath) {
  const std::string path = ::testing::TempDir() + "infergate-config-test-bad.yaml";
  {
    std::ofstream f(path);
    f << withBase("mode: dpdk\n");  // without dpdk.ipv4
  }
  absl::StatusOr<Config> c = loadConfigFile(path);
  std::remove(path.c_str());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            path + ": dpdk.ipv4: required in mode 'dpdk' (the gateway's IPv4 address: there is "
                   "no kernel behind a DPDK port, so infergate answers ARP and ICMP for it)");
}

// --- Remote backends (triton / tfserving) ---------------------------------------------------

constexpr std::string_view kTritonModel = R"yaml(name: r
    backend: triton
    max_batch_size: 8
    inputs:  [{name: IN, datatype: FP32, shape: [4]}]
    outputs: [{name: OUT, datatype: FP16, shape: [2]}]
    triton:
      endpoints: [127.0.0.1:8001, "[::1]:8011"]
      model_name: resnet
      max_concurrency: 3
      channels: 4
      health_check_interval_ms: 250
      request_timeout_ms: 1500
      eject_after_failures: 5
      ejection_ms: 7000
      shared_memory: system)yaml";

TEST(ConfigTest, TritonBackendKeys) {
  absl::StatusOr<Config> c = loadConfigString(oneModel(kTritonModel), "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const backends::ModelConfig& m = c->models[0];
  EXPECT_EQ(m.backend, "triton");
  EXPECT_EQ(m.platform, "infergate_triton");
  ASSERT_NE(m.remote, nullptr);
  EXPECT_EQ(m.remote->endpoints, (std::vector<std::string>{"127.0.0.1:8001", "[::1]:8011"}));
  EXPECT_EQ(m.remote->model_name, "resnet");
  EXPECT_EQ(m.remote->max_concurrency, 3u);
  EXPECT_EQ(m.remote->channels, 4u);
  EXPECT_EQ(m.remote->health_check_interval_ms, 250u);
  EXPECT_EQ(m.remote->request_timeout_ms, 1500u);
  EXPECT_EQ(m.remote->eject_after_failures, 5u);
  EXPECT_EQ(m.remote->ejection_ms, 7000u);
  EXPECT_EQ(m.remote->shared_memory, backends::SharedMemoryKind::kSystem);
  // Identity's input/output pairing is not required of a remote model, and batching defaults to
  // as many batches in flight as the pool takes.
  ASSERT_TRUE(m.dynamic_batching.has_value());
  EXPECT_EQ(m.dynamic_batching->max_inflight_batches, 6u);
}

TEST(ConfigTest, TritonCudaSharedMemoryKeys) {
  std::string text = oneModel(kTritonModel);
  const std::string from = "shared_memory: system";
  text.replace(text.find(from), from.size(), "shared_memory: cuda\n      cuda_device: 3");
  absl::StatusOr<Config> c = loadConfigString(text, "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->models[0].remote->shared_memory, backends::SharedMemoryKind::kCuda);
  EXPECT_EQ(c->models[0].remote->cuda_device, 3u);
}

TEST(ConfigTest, TritonQueueDepthKeys) {
  // Strings and maps mixed; metrics_port fills in the URL of entries without one.
  absl::StatusOr<Config> c = loadConfigString(oneModel(R"yaml(name: r
    backend: triton
    inputs:  [{name: IN, datatype: FP32, shape: [4]}]
    outputs: [{name: OUT, datatype: FP32, shape: [4]}]
    triton:
      endpoints:
        - 10.0.0.5:8001
        - {address: "10.0.0.6:8001", metrics_url: "http://10.0.0.6:9102/custom/metrics"}
        - {address: "[::1]:8011"}
      metrics_port: 8002
      metrics_interval_ms: 250)yaml"),
                                              "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const backends::RemoteBackendConfig& r = *c->models[0].remote;
  EXPECT_EQ(r.endpoints,
            (std::vector<std::string>{"10.0.0.5:8001", "10.0.0.6:8001", "[::1]:8011"}));
  EXPECT_EQ(r.metrics_urls,
            (std::vector<std::string>{"http://10.0.0.5:8002/metrics",
                                      "http://10.0.0.6:9102/custom/metrics",
                                      "http://[::1]:8002/metrics"}));
  EXPECT_EQ(r.metrics_interval_ms, 250u);

  // Without metrics_port only the entries that name a URL have one; the default interval.
  c = loadConfigString(oneModel(R"yaml(name: r
    backend: triton
    inputs:  [{name: IN, datatype: FP32, shape: [4]}]
    outputs: [{name: OUT, datatype: FP32, shape: [4]}]
    triton:
      endpoints: ["h:1", {address: "h:2", metrics_url: "http://h:8002/metrics"}, "h:3"])yaml"),
                       "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->models[0].remote->metrics_urls,
            (std::vector<std::string>{"", "http://h:8002/metrics"}));
  EXPECT_EQ(c->models[0].remote->metrics_interval_ms, 500u);

  // The plain form keeps working and has no metrics.
  c = loadConfigString(oneModel(kTritonModel), "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->models[0].remote->metrics_urls.empty());
}

TEST(ConfigTest, TfServingBackendKeys) {
  absl::StatusOr<Config> c = loadConfigString(oneModel(R"yaml(name: t
    backend: tfserving
    inputs:  [{name: x, datatype: FP32, shape: [4]}]
    outputs: [{name: y, datatype: FP32, shape: [4]}]
    tfserving: {endpoints: [localhost:8500], model_version: "3", signature_name: predict})yaml"),
                                              "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_NE(c->models[0].remote, nullptr);
  EXPECT_EQ(c->models[0].remote->model_version, "3");
  EXPECT_EQ(c->models[0].remote->signature_name, "predict");
  EXPECT_EQ(c->models[0].remote->shared_memory, backends::SharedMemoryKind::kNone);
}

TEST(ConfigTest, RemoteBackendErrors) {
  struct Case {
    std::string model;
    std::string message;
  };
  const std::string io = "\n    inputs:  [{name: IN, datatype: FP32, shape: [4]}]\n    outputs: [{name: OUT, datatype: FP32, shape: [4]}]";
  const std::vector<Case> cases = {
      {"name: r\n    backend: triton" + io,
       "t.yaml: models[0].triton: backend triton needs this section"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: []}",
       "t.yaml: models[0].triton.endpoints: at least one endpoint"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [localhost]}",
       "t.yaml: models[0].triton.endpoints[0]: invalid endpoint 'localhost' (expected host:port"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [\"h:1\", \"h:1\"]}",
       "t.yaml: models[0].triton.endpoints[1]: duplicate endpoint 'h:1'"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [\"h:1\"], shared_memory: gpu}",
       "t.yaml: models[0].triton.shared_memory: unknown shared memory kind 'gpu' (expected one of none, system, cuda)"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [\"h:1\"], cuda_device: 1}",
       "t.yaml: models[0].triton.cuda_device: only used with shared_memory: cuda"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [\"h:1\"], shared_memory: cuda, cuda_device: -1}",
       "t.yaml: models[0].triton.cuda_device: must be between 0 and 1023, got -1"},
      {"name: r\n    backend: tfserving" + io + "\n    tfserving: {endpoints: [\"h:1\"], shared_memory: system}",
       "t.yaml: models[0].tfserving.shared_memory: unknown key 'shared_memory'"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [\"h:1\"], signature_name: x}",
       "t.yaml: models[0].triton.signature_name: unknown key 'signature_name'"},
      {"name: r\n    backend: tfserving" + io + "\n    tfserving: {endpoints: [\"h:1\"], model_version: latest}",
       "t.yaml: models[0].tfserving.model_version: TF Serving versions are numbers, got 'latest'"},
      {"name: r\n    backend: identity" + io + "\n    triton: {endpoints: [\"h:1\"]}",
       "t.yaml: models[0].triton: settings for backend 'triton' but the model's backend is 'identity'"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [\"h:1\"], max_concurrency: 0}",
       "t.yaml: models[0].triton.max_concurrency: must be between 1 and 4096, got 0"},
      // Queue-depth aware picking: metrics URLs, metrics_port, metrics_interval_ms.
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [{address: \"h:1\", metrics_url: \"https://h:8002/metrics\"}]}",
       "t.yaml: models[0].triton.endpoints[0].metrics_url: unsupported scheme 'https' in 'https://h:8002/metrics' (only http:// is supported)"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [{address: \"h:1\", metrics_url: \"http://h/metrics\"}]}",
       "t.yaml: models[0].triton.endpoints[0].metrics_url: URL 'http://h/metrics' has no port"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [\"h:1\", {address: \"h:2\", metrics_url: \"http://h:99999/metrics\"}]}",
       "t.yaml: models[0].triton.endpoints[1].metrics_url: invalid port '99999'"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [{address: \"h:1\", metrics_url: \"http://h:8002/a b\"}]}",
       "t.yaml: models[0].triton.endpoints[0].metrics_url: URL 'http://h:8002/a b' contains a space"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [{address: \"h:1\", metrics_url: [x]}]}",
       "t.yaml: models[0].triton.endpoints[0].metrics_url: expected a string"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [{metrics_url: \"http://h:8002/metrics\"}]}",
       "t.yaml: models[0].triton.endpoints[0]: address (host:port) is required"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [{address: \"h:1\", metrics: \"http://h:8002/\"}]}",
       "t.yaml: models[0].triton.endpoints[0].metrics: unknown key 'metrics' (expected one of address, metrics_url)"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [{address: localhost}]}",
       "t.yaml: models[0].triton.endpoints[0]: invalid endpoint 'localhost' (expected host:port"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [\"h:1\", {address: \"h:1\"}]}",
       "t.yaml: models[0].triton.endpoints[1]: duplicate endpoint 'h:1'"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [\"h:1\"], metrics_port: 0}",
       "t.yaml: models[0].triton.metrics_port: must be between 1 and 65535, got 0"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [\"h!x:1\"], metrics_port: 8002}",
       "t.yaml: models[0].triton.metrics_port: endpoint 'h!x:1': invalid host 'h!x'"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [\"h:1\"], metrics_interval_ms: 5}",
       "t.yaml: models[0].triton.metrics_interval_ms: must be between 10 and 60000, got 5"},
      {"name: r\n    backend: triton" + io + "\n    triton: {endpoints: [\"h:1\"], metrics_interval_ms: 60001}",
       "t.yaml: models[0].triton.metrics_interval_ms: must be between 10 and 60000, got 60001"},
      {"name: r\n    backend: tfserving" + io + "\n    tfserving: {endpoints: [\"h:1\"], metrics_port: 8002}",
       "t.yaml: models[0].tfserving.metrics_port: unknown key 'metrics_port'"},
      {"name: r\n    backend: tfserving" + io + "\n    tfserving: {endpoints: [{address: \"h:1\"}]}",
       "t.yaml: models[0].tfserving.endpoints[0]: expected a string"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Config> r = loadConfigString(oneModel(c.model), "t.yaml");
    ASSERT_FALSE(r.ok()) << c.model;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message)) << c.model;
  }
}

}  // namespace
}  // namespace infergate::config

namespace infergate::config {
// Slow readers and output memory (issue 13): finite defaults, 0 turns each off.
TEST(ConfigTest, OutputLimitKeys) {
  const std::string models =
      "models: [{name: m, inputs: [{name: I, datatype: FP32, shape: [4]}], "
      "outputs: [{name: O, datatype: FP32, shape: [4]}], dynamic_batching: {}}]\n";
  absl::StatusOr<Config> d = loadConfigString("listeners: [{port: 8000}]\n" + models, "d.yaml");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->limits.send_timeout_ms, 30000u);
  EXPECT_EQ(d->limits.min_drain_bytes, 16384u);
  EXPECT_EQ(d->limits.max_output_bytes_per_connection, 64ull << 20);
  EXPECT_EQ(d->limits.max_output_bytes, 1ull << 30);
  ASSERT_TRUE(d->models[0].dynamic_batching.has_value());
  EXPECT_EQ(d->models[0].dynamic_batching->default_queue_policy.max_queue_size, 1024u);
  absl::StatusOr<Config> c = loadConfigString(
      "listeners: [{port: 8000}]\n"
      "limits: {send_timeout_ms: 0, min_drain_bytes: 1, max_output_bytes_per_connection: 0, "
      "max_output_bytes: 0}\n" + models, "off.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->limits.send_timeout_ms, 0u);
  EXPECT_EQ(c->limits.min_drain_bytes, 1u);
  EXPECT_EQ(c->limits.max_output_bytes_per_connection, 0u);
  EXPECT_EQ(c->limits.max_output_bytes, 0u);
  c = loadConfigString(
      "listeners: [{port: 8000}]\n"
      "limits: {send_timeout_ms: 5000, min_drain_bytes: 4096, "
      "max_output_bytes_per_connection: 1048576, max_output_bytes: 8388608}\n" + models, "s.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->limits.send_timeout_ms, 5000u);
  EXPECT_EQ(c->limits.max_output_bytes_per_connection, 1u << 20);
}

// Issue 13, item 5: who may choose a request's priority.
TEST(ConfigTest, PriorityFromClientKeys) {
  const std::string m =
      "models: [{name: m, inputs: [{name: I, datatype: FP32, shape: [4]}], "
      "outputs: [{name: O, datatype: FP32, shape: [4]}]}]\n";
  absl::StatusOr<Config> d = loadConfigString("listeners: [{port: 8000}]\n" + m, "d.yaml");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->priority.from_client, "trusted");
  EXPECT_EQ(d->priority.trusted_sources, (std::vector<std::string>{"127.0.0.0/8", "::1/128"}));
  absl::StatusOr<Config> c = loadConfigString(
      "listeners: [{port: 8000}]\npriority: {from_client: all, trusted_sources: [10.0.0.0/8]}\n" + m,
      "p.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->priority.from_client, "all");
  EXPECT_EQ(c->priority.trusted_sources, (std::vector<std::string>{"10.0.0.0/8"}));
  // The XDP program applies the same rule to the header it reads.
  EXPECT_EQ(d->xdp.priority_from, xdp::XdpOptions::PriorityFrom::kTrusted);
  EXPECT_EQ(d->xdp.trusted_sources, d->priority.trusted_sources);
  EXPECT_EQ(c->xdp.priority_from, xdp::XdpOptions::PriorityFrom::kAll);
  EXPECT_EQ(c->xdp.trusted_sources, (std::vector<std::string>{"10.0.0.0/8"}));
  c = loadConfigString("listeners: [{port: 8000}]\npriority: {trusted_sources: []}\n" + m, "e.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->priority.trusted_sources.empty());
  for (const char* bad : {"priority: {from_client: yes}\n",
                          "priority: {trusted_sources: [10.0.0.0/33]}\n",
                          "priority: {trusted_sources: [somehost]}\n",
                          "priority: {trusted: [10.0.0.0/8]}\n"}) {
    absl::StatusOr<Config> b = loadConfigString(std::string("listeners: [{port: 8000}]\n") + bad + m, "b.yaml");
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("priority"), std::string::npos) << b.status();
  }
}

TEST(ConfigTest, ListenerProtocolAuto) {  // HTTP/1.1 + HTTP/2 on one port (preface sniffing)
  absl::StatusOr<Config> c = loadConfigString(
      "listeners: [{port: 8000, protocol: auto}]\n"
      "models: [{name: m, inputs: [{name: I, datatype: FP32, shape: [4]}], "
      "outputs: [{name: O, datatype: FP32, shape: [4]}]}]\n",
      "auto.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listeners[0].protocol, "auto");
}
}  // namespace infergate::config
