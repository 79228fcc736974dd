// planReload: the exact keys a reload applies and refuses; ModelRegistry's live add/remove.
#include "app/reload.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "backends/identity_model.h"
#include "config/config.h"

namespace infergate::app {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr const char* kBase = R"(
mode: socket
reactors: 2
listeners:
  - {name: http, address: 127.0.0.1, port: 8000, protocol: http}
admin: {port: 8002}
logging: {level: info}
limits: {max_body_bytes: 1048576}
models:
  - name: a
    max_batch_size: 8
    inputs: [{name: x, datatype: FP32, shape: [4]}]
    outputs: [{name: x, datatype: FP32, shape: [4]}]
  - name: b
    inputs: [{name: x, datatype: FP32, shape: [4]}]
    outputs: [{name: x, datatype: FP32, shape: [4]}]
)";

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

ReloadPlan plan(const std::string& before, const std::string& after) {
  absl::StatusOr<config::Config> a = config::loadConfigString(before, "before.yaml");
  EXPECT_TRUE(a.ok()) << a.status();
  absl::StatusOr<config::Config> b = config::loadConfigString(after, "after.yaml");
  EXPECT_TRUE(b.ok()) << b.status();
  absl::StatusOr<ReloadPlan> p = planReload(*a, before, *b, after);
  EXPECT_TRUE(p.ok()) << p.status();
  return *p;
}

std::vector<std::string> refusedKeys(const ReloadPlan& p) {
  std::vector<std::string> out;
  for (const ReloadRefusal& r : p.refused) out.push_back(r.key);
  return out;
}

TEST(PlanReload, SameFileChangesNothing) {
  const ReloadPlan p = plan(kBase, std::string(kBase) + "\n# a comment\n");
  EXPECT_TRUE(p.empty());
  EXPECT_TRUE(p.ok());
}

TEST(PlanReload, ModelAddedRemovedChangedAndLogLevel) {
  std::string after = replace(kBase, "level: info", "level: debug");
  // b removed, c added, a's max_batch_size changed.
  after = replace(after, "  - name: b\n", "  - name: c\n");
  after = replace(after, "max_batch_size: 8", "max_batch_size: 4");
  const ReloadPlan p = plan(kBase, after);
  EXPECT_THAT(p.applied, ElementsAre("logging.level", "models.a (changed)", "models.c (added)",
                                     "models.b (removed)"));
  EXPECT_THAT(p.refused, IsEmpty());
  EXPECT_THAT(p.models_added, ElementsAre("c"));
  EXPECT_THAT(p.models_removed, ElementsAre("b"));
  EXPECT_THAT(p.models_changed, ElementsAre("a"));
  EXPECT_TRUE(p.log_level);
  EXPECT_FALSE(p.xdp_program);
}

TEST(PlanReload, ModelVersionIsPartOfItsKey) {
  const std::string after = replace(kBase, "  - name: b\n", "  - name: b\n    version: \"2\"\n");
  const ReloadPlan p = plan(kBase, after);
  EXPECT_THAT(p.applied, ElementsAre("models.b@2 (added)", "models.b (removed)"));
}

TEST(PlanReload, ModelsAreNotBuiltUnderSeccompKill) {
  const std::string before =
      replace(kBase, "mode: socket", "mode: socket\nsecurity: {seccomp_action: kill}");
  const std::string after = replace(before, "  - name: b\n", "  - name: c\n");
  const ReloadPlan p = plan(before, after);
  EXPECT_THAT(refusedKeys(p), ElementsAre("models.c"));
  EXPECT_THAT(p.applied, ElementsAre("models.b (removed)"));  // listed, not applied: refused
  EXPECT_THAT(p.models_added, IsEmpty());
}

TEST(PlanReload, ListenerChangeIsRefusedAndNamed) {
  const std::string after =
      replace(replace(kBase, "port: 8000", "port: 8001"), "level: info", "level: debug");
  const ReloadPlan p = plan(kBase, after);
  EXPECT_FALSE(p.ok());
  EXPECT_THAT(refusedKeys(p), ElementsAre("listeners"));
  // What could apply is still listed; Server::reload applies none of it when anything is refused.
  EXPECT_THAT(p.applied, ElementsAre("logging.level"));
  EXPECT_EQ(p.refusalMessage(),
            "listeners: listening sockets are opened at start-up, before privileges are dropped");
}

TEST(PlanReload, StartupSectionsAreRefusedKeyByKey) {
  std::string after = replace(kBase, "reactors: 2", "reactors: 3");
  after = replace(after, "mode: socket", "mode: socket\nsecurity: {seccomp: false}");
  after = replace(after, "max_body_bytes: 1048576", "max_body_bytes: 2097152");
  after = replace(after, "admin: {port: 8002}", "admin: {port: 8003}");
  after = replace(after, "logging: {level: info}", "logging: {level: info, access_log: true}");
  after += "priority: {from_client: all}\n";
  const ReloadPlan p = plan(kBase, after);
  EXPECT_THAT(refusedKeys(p), ElementsAre("security.seccomp", "reactors", "admin.port",
                                          "logging.access_log", "limits.max_body_bytes"));
  // priority: is live (it would apply; the refusals above refuse the reload as a whole).
  EXPECT_THAT(p.applied, ElementsAre("priority"));
  EXPECT_FALSE(p.ok());
}

TEST(PlanReload, TenantsAndPriorityAreLive) {
  const std::string tenants =
      "tenants:\n  list:\n    - {name: a, sources: [10.0.0.0/8], rate: 5}\n";
  const std::string before = std::string(kBase) + tenants;
  // A rate change, a new tenant, and who may choose priorities: one key each, applied.
  std::string after =
      replace(before, "rate: 5}", "rate: 2}\n    - {name: b, api_keys: [k], max_concurrent: 3}");
  after += "priority: {from_client: trusted, trusted_sources: [10.1.0.0/16]}\n";
  ReloadPlan p = plan(before, after);
  EXPECT_THAT(p.applied, ElementsAre("tenants", "priority"));
  EXPECT_THAT(refusedKeys(p), IsEmpty());
  EXPECT_TRUE(p.tenants);
  EXPECT_TRUE(p.priority);
  EXPECT_FALSE(p.log_level);
  EXPECT_THAT(p.models_added, IsEmpty());
  // Tenants turned on from none, and off again.
  p = plan(kBase, before);
  EXPECT_THAT(p.applied, ElementsAre("tenants"));
  EXPECT_TRUE(p.tenants);
  EXPECT_FALSE(p.priority);
  p = plan(before, kBase);
  EXPECT_THAT(p.applied, ElementsAre("tenants"));
  // Unchanged sections are not applied.
  p = plan(before, replace(before, "level: info", "level: debug"));
  EXPECT_THAT(p.applied, ElementsAre("logging.level"));
  EXPECT_FALSE(p.tenants);
  EXPECT_FALSE(p.priority);
}

TEST(PlanReload, PriorityIsLiveWhereAnIngressFilterAppliesItToo) {
  for (const char* mode : {"xdp-filter", "afxdp", "dpdk\ndpdk: {ipv4: 10.0.0.1}"}) {
    const std::string before =
        replace(kBase, "mode: socket", std::string("mode: ") + mode + "\nxdp: {interface: lo}");
    const std::string after = before + "priority: {trusted_sources: [10.1.0.0/16]}\n";
    const ReloadPlan p = plan(before, after);
    EXPECT_TRUE(p.ok()) << mode << ": " << p.refusalMessage();
    EXPECT_THAT(p.applied, ElementsAre("priority"));
    EXPECT_TRUE(p.priority) << "the sessions' policy";
    EXPECT_TRUE(p.xdp_program) << "the program's header rule and trusted entries";
  }
}

TEST(PlanReload, InvalidTenantsRefuseTheWholeFile) {
  // The loader refuses it (the reload is "invalid", nothing applied): a plan is never made.
  const std::string after = std::string(kBase) + "tenants:\n  list:\n    - {name: a, rate: -1}\n";
  EXPECT_FALSE(config::loadConfigString(after, "after.yaml").ok());
}

TEST(PlanReload, ModeChangeIsRefused) {
  const std::string after =
      replace(kBase, "mode: socket", "mode: xdp-filter\nxdp: {interface: lo}");
  const ReloadPlan p = plan(kBase, after);
  // xdp.* is not used by the running socket mode: accepted, nothing to do.
  EXPECT_THAT(refusedKeys(p), ElementsAre("mode"));
  EXPECT_THAT(p.applied, ElementsAre("xdp.interface"));
}

constexpr const char* kXdp = R"(
mode: xdp-filter
xdp:
  interface: veth0
  pin_path: /sys/fs/bpf/ig
  request_rate_limit: {rate_per_sec: 100}
  cidr_rules: [{cidr: 10.0.0.0/8, class: 2}]
listeners:
  - {name: http, port: 8000}
models:
  - name: a
    inputs: [{name: x, datatype: FP32, shape: [4]}]
    outputs: [{name: x, datatype: FP32, shape: [4]}]
)";

// The rules are map entries: live with privileges dropped (the default) in both XDP modes,
// including from some CIDR rules to none.
TEST(PlanReload, XdpRulesAreLiveInXdpFilterAndAfxdpModes) {
  for (const char* mode : {"xdp-filter", "afxdp"}) {
    const std::string before = replace(kXdp, "mode: xdp-filter", std::string("mode: ") + mode);
    std::string after = replace(before, "rate_per_sec: 100", "rate_per_sec: 5");
    after = replace(after, "class: 2", "class: 0");
    after = replace(after, "  pin_path:", "  path_prefixes: [/v2/]\n  pin_path:");
    ReloadPlan p = plan(before, after);
    EXPECT_TRUE(p.ok()) << mode << ": " << p.refusalMessage();
    EXPECT_THAT(p.applied,
                ElementsAre("xdp.path_prefixes", "xdp.request_rate_limit", "xdp.cidr_rules"));
    EXPECT_TRUE(p.xdp_program);
    p = plan(before, replace(before, "  cidr_rules: [{cidr: 10.0.0.0/8, class: 2}]\n", ""));
    EXPECT_TRUE(p.ok()) << mode << ": " << p.refusalMessage();
    EXPECT_THAT(p.applied, ElementsAre("xdp.cidr_rules"));
  }
}

TEST(PlanReload, XdpAttachmentKeysAreRefused) {
  std::string after = replace(kXdp, "interface: veth0", "interface: veth1");
  after = replace(after, "pin_path: /sys/fs/bpf/ig", "pin_path: /sys/fs/bpf/other");
  const ReloadPlan p = plan(kXdp, after);
  EXPECT_THAT(refusedKeys(p), ElementsAre("xdp.interface", "xdp.pin_path"));
  EXPECT_FALSE(p.xdp_program);
}

TEST(PlanReload, XdpRulesAreLiveInDpdkModeButNotTheStartUpKeys) {
  const std::string before =
      replace(kXdp, "mode: xdp-filter", "mode: dpdk\ndpdk: {ipv4: 10.0.0.1}");
  ReloadPlan p = plan(before, replace(before, "class: 2", "class: 0"));
  EXPECT_TRUE(p.ok()) << p.refusalMessage();
  EXPECT_THAT(p.applied, ElementsAre("xdp.cidr_rules"));
  EXPECT_TRUE(p.xdp_program) << "dpdk mode's ingress filter takes the rules";
  p = plan(before, replace(before, "pin_path: /sys/fs/bpf/ig", "pin_path: /sys/fs/bpf/other"));
  EXPECT_THAT(refusedKeys(p), ElementsAre("xdp.pin_path"));
  EXPECT_FALSE(p.xdp_program);
}

constexpr const char* kRemote = R"(
mode: socket
reactors: 2
listeners:
  - {name: http, address: 127.0.0.1, port: 8000, protocol: http}
admin: {port: 8002}
models:
  - name: t
    backend: triton
    max_batch_size: 8
    inputs: [{name: x, datatype: FP32, shape: [4]}]
    outputs: [{name: x, datatype: FP32, shape: [4]}]
    triton:
      endpoints: ["127.0.0.1:9001"]
      max_concurrency: 4
)";

TEST(PlanReload, EndpointsOnlyChangeIsAppliedLiveWithoutRebuild) {
  const std::string after = replace(kRemote, "127.0.0.1:9001", "127.0.0.1:9002");
  const ReloadPlan p = plan(kRemote, after);
  EXPECT_THAT(p.applied, ElementsAre("models.t.endpoints"));
  EXPECT_THAT(p.models_endpoints, ElementsAre("t"));
  EXPECT_THAT(p.models_changed, IsEmpty());
  EXPECT_THAT(p.models_added, IsEmpty());
  EXPECT_THAT(p.models_removed, IsEmpty());
  // dns:/// entries too (one counts as dns_max_endpoints for the in-flight limit: host:port ->
  // dns:/// moves it, so that one rebuilds).
  const std::string dns = replace(kRemote, "127.0.0.1:9001", "dns:///triton-a.local:8001");
  EXPECT_THAT(plan(dns, replace(dns, "triton-a", "triton-b")).models_endpoints, ElementsAre("t"));
  EXPECT_THAT(plan(kRemote, dns).models_changed, ElementsAre("t"));
  // Nothing is built, so seccomp_action: kill does not refuse it.
  const std::string killing =
      replace(kRemote, "mode: socket", "mode: socket\nsecurity: {seccomp_action: kill}");
  const ReloadPlan k = plan(killing, replace(killing, "127.0.0.1:9001", "127.0.0.1:9002"));
  EXPECT_THAT(k.refused, IsEmpty());
  EXPECT_THAT(k.applied, ElementsAre("models.t.endpoints"));
}

TEST(PlanReload, EndpointsWithAnotherChangeRebuildTheModel) {
  std::string after = replace(kRemote, "127.0.0.1:9001", "127.0.0.1:9002");
  after = replace(after, "max_concurrency: 4", "max_concurrency: 2");
  const ReloadPlan p = plan(kRemote, after);
  EXPECT_THAT(p.applied, ElementsAre("models.t (changed)"));
  EXPECT_THAT(p.models_changed, ElementsAre("t"));
  EXPECT_THAT(p.models_endpoints, IsEmpty());
}

TEST(PlanReload, EndpointCountThatMovesTheInflightLimitRebuilds) {
  // The batcher's in-flight limit is endpoints x max_concurrency unless set: 4 -> 8.
  const std::string two =
      replace(kRemote, "\"127.0.0.1:9001\"", "\"127.0.0.1:9001\", \"127.0.0.1:9002\"");
  EXPECT_THAT(plan(kRemote, two).models_changed, ElementsAre("t"));
  // With max_inflight_batches set, the limit does not move: live.
  const std::string fixed = replace(
      kRemote, "    triton:\n", "    dynamic_batching: {max_inflight_batches: 8}\n    triton:\n");
  const std::string fixed_two =
      replace(fixed, "\"127.0.0.1:9001\"", "\"127.0.0.1:9001\", \"127.0.0.1:9002\"");
  const ReloadPlan p = plan(fixed, fixed_two);
  EXPECT_THAT(p.applied, ElementsAre("models.t.endpoints"));
  EXPECT_THAT(p.models_endpoints, ElementsAre("t"));
}

TEST(PlanReload, EndpointsWithMetricsUrlsRebuild) {
  const std::string before =
      replace(kRemote, "[\"127.0.0.1:9001\"]",
              "[{address: \"127.0.0.1:9001\", metrics_url: \"http://127.0.0.1:9101/metrics\"}]");
  const std::string after = replace(before, "127.0.0.1:9001", "127.0.0.1:9002");
  EXPECT_THAT(plan(before, after).models_changed, ElementsAre("t"));
}

TEST(ConfigHash, StableAndDistinct) {
  EXPECT_EQ(configHash(""), "cbf29ce484222325");
  EXPECT_EQ(configHash("a"), "af63dc4c8601ec8c");
  EXPECT_NE(configHash(kBase), configHash(kXdp));
}

std::unique_ptr<backends::Model> identity(const std::string& name) {
  backends::ModelConfig c;
  c.name = name;
  c.inputs.push_back({"x", backends::DataType::kFp32, {4}});
  c.outputs.push_back({"x", backends::DataType::kFp32, {4}});
  return std::make_unique<backends::IdentityModel>(c);
}

TEST(ModelRegistry, RemovedModelStaysValidForHoldersAndIsNotFound) {
  backends::ModelRegistry r;
  r.add(identity("a"));
  r.add(identity("b"));
  backends::Model* held = r.find("b");  // a request in flight holds it
  ASSERT_NE(held, nullptr);
  std::vector<std::unique_ptr<backends::Model>> add;
  add.push_back(identity("c"));
  ASSERT_TRUE(r.update({{"b", ""}}, std::move(add)).ok());
  EXPECT_EQ(r.find("b"), nullptr);
  ASSERT_NE(r.find("c"), nullptr);
  EXPECT_EQ(held->config().name, "b");  // not destroyed
  EXPECT_EQ(r.models().size(), 2u);
  EXPECT_EQ(r.retiredCount(), 1u);
  EXPECT_FALSE(r.remove("nope"));
  EXPECT_TRUE(r.remove("a"));
  EXPECT_EQ(r.retiredCount(), 2u);
}

// Counts retire() calls (the registry calls it once a model is no longer served).
class RetireCounter : public backends::Model {
 public:
  RetireCounter(const std::string& name, std::atomic<int>* retired) : retired_(retired) {
    config_.name = name;
  }
  const backends::ModelConfig& config() const override { return config_; }
  bool ready() const override { return true; }
  void infer(backends::InferRequest, backends::InferCallback done) override {
    done(absl::UnavailableError("test"));
  }
  void retire() override { retired_->fetch_add(1); }

 private:
  backends::ModelConfig config_;
  std::atomic<int>* retired_;
};

TEST(ModelRegistry, RemovedModelsAreRetiredOnceKeptOnesNot) {
  std::atomic<int> a{0}, b{0}, c{0};
  backends::ModelRegistry r;
  r.add(std::make_unique<RetireCounter>("a", &a));
  r.add(std::make_unique<RetireCounter>("b", &b));
  std::vector<std::unique_ptr<backends::Model>> add;
  add.push_back(std::make_unique<RetireCounter>("c", &c));
  ASSERT_TRUE(r.update({{"b", ""}}, std::move(add)).ok());
  EXPECT_EQ(a.load(), 0);
  EXPECT_EQ(b.load(), 1);
  EXPECT_EQ(c.load(), 0);
  EXPECT_TRUE(r.remove("a"));
  EXPECT_EQ(a.load(), 1);
  EXPECT_FALSE(r.remove("b"));  // gone already: not retired twice
  EXPECT_EQ(b.load(), 1);
}

TEST(ModelRegistry, ReplacementIsNeverMissing) {
  backends::ModelRegistry r;
  r.add(identity("m"));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> missing{0}, lookups{0};
  std::thread reader([&] {
    while (!stop.load()) {
      if (r.find("m") == nullptr) missing.fetch_add(1);
      lookups.fetch_add(1);
    }
  });
  while (lookups.load() == 0) std::this_thread::yield();
  for (int i = 0; i < 200; ++i) {
    if (i % 20 == 0) std::this_thread::yield();  // let the reader run between publications
    std::vector<std::unique_ptr<backends::Model>> add;
    add.push_back(identity("m"));
    ASSERT_TRUE(r.update({{"m", ""}}, std::move(add)).ok());
  }
  stop = true;
  reader.join();
  EXPECT_EQ(missing.load(), 0u);
  EXPECT_EQ(r.models().size(), 1u);
}

TEST(ModelRegistry, RetiredModelsAreBounded) {
  backends::ModelRegistry r;
  for (size_t i = 0; i < backends::ModelRegistry::kMaxRetired; ++i) {
    r.add(identity("m"));
    ASSERT_TRUE(r.remove("m"));
  }
  r.add(identity("last"));
  const absl::Status st = r.update({{"last", ""}}, {});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.find("last"), nullptr);  // nothing changed
}

}  // namespace
}  // namespace infergate::app
