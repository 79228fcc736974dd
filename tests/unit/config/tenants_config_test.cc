// Issue 19: the `tenants:` section (docs/CONFIGURATION.md "tenants"): what it accepts, and
// every refusal with the key path it names (never an API key's value).
#include <gtest/gtest.h>

#include <string>

#include "config/config.h"

namespace infergate::config {
namespace {

constexpr const char* kBase = R"(
listeners: [{name: http, port: 0}]
models:
  - name: m
    inputs: [{name: IN, datatype: FP32, shape: [4]}]
    outputs: [{name: OUT, datatype: FP32, shape: [4]}]
)";

absl::StatusOr<Config> load(const std::string& tenants) {
  return loadConfigString(std::string(kBase) + "tenants:\n" + tenants, "t.yaml");
}

std::string refusal(const std::string& section) {
  absl::StatusOr<TenantsConfig> t = parseTenantsSection(section, "t.yaml");
  return t.ok() ? "accepted" : std::string(t.status().message());
}

TEST(TenantsConfig, AbsentIsOff) {
  absl::StatusOr<Config> c = loadConfigString(kBase, "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->tenants.enabled());
  EXPECT_EQ(c->tenants.api_key_header, "x-api-key");
}

TEST(TenantsConfig, ParsesEverything) {
  absl::StatusOr<Config> c = load(R"(
  api_key_header: X-Tenant-Key
  default: {rate: 100, burst: 200, max_concurrent: 64, priority: low}
  list:
    - name: team-a
      sources: [10.1.0.0/16, "2001:db8::/32"]
      api_keys: [key-a-1, key-a-2]
      rate: 0.5
      burst: 2
      max_concurrent: 4
      priority: high
    - name: batch_jobs
      sources: [192.0.2.0/24]
)");
  ASSERT_TRUE(c.ok()) << c.status();
  const TenantsConfig& t = c->tenants;
  EXPECT_TRUE(t.enabled());
  EXPECT_EQ(t.api_key_header, "x-tenant-key");
  EXPECT_EQ(t.default_limits.rate, 100);
  EXPECT_EQ(t.default_limits.burst, 200u);
  EXPECT_EQ(t.default_limits.max_concurrent, 64u);
  EXPECT_EQ(t.default_limits.priority_class, 2);
  ASSERT_EQ(t.tenants.size(), 2u);
  EXPECT_EQ(t.tenants[0].name, "team-a");
  EXPECT_EQ(t.tenants[0].sources, (std::vector<std::string>{"10.1.0.0/16", "2001:db8::/32"}));
  EXPECT_EQ(t.tenants[0].api_keys, (std::vector<std::string>{"key-a-1", "key-a-2"}));
  EXPECT_EQ(t.tenants[0].limits.rate, 0.5);
  EXPECT_EQ(t.tenants[0].limits.burst, 2u);
  EXPECT_EQ(t.tenants[0].limits.max_concurrent, 4u);
  EXPECT_EQ(t.tenants[0].limits.priority_class, 0);
  EXPECT_EQ(t.tenants[1].limits.rate, 0);  // unlimited
  EXPECT_EQ(t.tenants[1].limits.priority_class, std::nullopt);
}

TEST(TenantsConfig, DefaultOnlyIsEnabled) {
  EXPECT_EQ(refusal("default: {max_concurrent: 10}\n"), "accepted");
  EXPECT_TRUE(parseTenantsSection("default: {max_concurrent: 10}\n", "t")->enabled());
  EXPECT_FALSE(parseTenantsSection("api_key_header: x-key\n", "t")->enabled());
}

TEST(TenantsConfig, EveryRefusalNamesItsKey) {
  const std::pair<std::string, std::string> cases[] = {
      {"colour: red\n",
       "t.yaml: tenants.colour: unknown key 'colour' (expected one of "
       "api_key_header, default, list)"},
      {"[1, 2]\n", "t.yaml: tenants: expected a mapping, got a sequence"},
      {"api_key_header: 'x key'\n",
       "t.yaml: tenants.api_key_header: 'x key' is not a header name (letters, digits, '-', '_')"},
      {"api_key_header: X-Infergate-Priority\n",
       "t.yaml: tenants.api_key_header: 'x-infergate-priority' already means something else"},
      {"default: {sources: [10.0.0.0/8]}\n",
       "t.yaml: tenants.default.sources: unknown key 'sources' (expected one of rate, burst, "
       "max_concurrent, priority)"},
      {"default: {rate: -1}\n",
       "t.yaml: tenants.default.rate: must be between 0 and 1000000, got -1"},
      {"default: {rate: 2000000}\n",
       "t.yaml: tenants.default.rate: must be between 0 and 1000000, got 2000000"},
      {"default: {rate: 0.0001}\n",
       "t.yaml: tenants.default.rate: 0.0001 is below 0.001 per second (0: unlimited)"},
      {"default: {rate: fast}\n", "t.yaml: tenants.default.rate: expected a number, got 'fast'"},
      {"default: {burst: 5}\n",
       "t.yaml: tenants.default.burst: needs a rate (the bucket refills at `rate` per second)"},
      {"default: {rate: 1, burst: 0}\n",
       "t.yaml: tenants.default.burst: must be between 1 and 1000000, got 0"},
      {"default: {max_concurrent: -2}\n",
       "t.yaml: tenants.default.max_concurrent: must be between 0 and 1000000, got -2"},
      {"default: {priority: urgent}\n",
       "t.yaml: tenants.default.priority: unknown priority class 'urgent' (expected one of high, "
       "normal, low, background)"},
      {"list: {name: a}\n", "t.yaml: tenants.list: expected a sequence, got a mapping"},
      {"list: [{sources: [10.0.0.0/8]}]\n",
       "t.yaml: tenants.list[0]: needs a name (the tenant's metrics label)"},
      {"list: [{name: 'a b', sources: [10.0.0.0/8]}]\n",
       "t.yaml: tenants.list[0].name: invalid tenant name 'a b' (1..64 letters, digits, '-', '_')"},
      {"list: [{name: default, sources: [10.0.0.0/8]}]\n",
       "t.yaml: tenants.list[0].name: 'default' is the tenant of everything else: configure it "
       "under tenants.default"},
      {"list: [{name: a, sources: [10.0.0.0/8]}, {name: a, sources: [10.1.0.0/16]}]\n",
       "t.yaml: tenants.list[1].name: tenant 'a' is named twice"},
      {"list: [{name: a, color: red, sources: [10.0.0.0/8]}]\n",
       "t.yaml: tenants.list[0].color: unknown key 'color' (expected one of name, sources, "
       "api_keys, rate, burst, max_concurrent, priority)"},
      {"list: [{name: a}]\n",
       "t.yaml: tenants.list[0]: tenant 'a' has neither sources nor api_keys: no request could "
       "be its"},
      {"list: [{name: a, sources: [10.0.0.0/33]}]\n", ""},  // parseCidr's message, checked below
      {"list: [{name: a, sources: [10.0.0.0/8]}, {name: b, sources: [10.0.0.0/8]}]\n",
       "t.yaml: tenants.list[1].sources[0]: 10.0.0.0/8 is already tenant 'a''s"},
      {"list: [{name: a, sources: [10.0.0.0/8, 10.0.0.0/8]}]\n",
       "t.yaml: tenants.list[0].sources[1]: 10.0.0.0/8 is listed twice"},
      {"list: [{name: a, api_keys: [k1]}, {name: b, api_keys: [k1]}]\n",
       "t.yaml: tenants.list[1].api_keys[0]: this key is already tenant 'a''s"},
      {"list: [{name: a, api_keys: [k1, k1]}]\n",
       "t.yaml: tenants.list[0].api_keys[1]: this key is listed twice"},
      {"list: [{name: a, api_keys: ['']}]\n",
       "t.yaml: tenants.list[0].api_keys[0]: an API key must be 1..256 bytes"},
      {"list: [{name: a, api_keys: ['" + std::string(257, 'k') + "']}]\n",
       "t.yaml: tenants.list[0].api_keys[0]: an API key must be 1..256 bytes"},
      {"list: [{name: a, api_keys: ['two words']}]\n",
       "t.yaml: tenants.list[0].api_keys[0]: an API key must be printable ASCII without spaces "
       "(a header value)"},
      {"list: [{name: a, api_keys: [[k]]}]\n",
       "t.yaml: tenants.list[0].api_keys[0]: expected a string"},
      {"list: [{name: a, api_keys: [k], rate: 0, burst: 3}]\n",
       "t.yaml: tenants.list[0].burst: needs a rate (the bucket refills at `rate` per second)"},
      {"list: [{name: a, api_keys: [k], priority: 2}]\n",
       "t.yaml: tenants.list[0].priority: unknown priority class '2' (expected one of high, "
       "normal, low, background)"},
  };
  for (const auto& [section, message] : cases) {
    const std::string got = refusal(section);
    if (message.empty()) {
      EXPECT_NE(got.find("t.yaml: tenants.list[0].sources[0]: "), std::string::npos) << got;
      continue;
    }
    EXPECT_EQ(got, message) << section;
    // Through the whole file too, with the same message.
    std::string indented = "  ";
    for (char ch : section) {
      indented += ch;
      if (ch == '\n') indented += "  ";
    }
    absl::StatusOr<Config> c = load(indented);
    ASSERT_FALSE(c.ok()) << section;
    EXPECT_EQ(c.status().message(), message);
  }
}

TEST(TenantsConfig, TooManyTenantsAndKeysNeverInMessages) {
  std::string many = "list:\n";
  for (int i = 0; i < 257; ++i) {
    many += "  - {name: t" + std::to_string(i) + ", sources: [10.0." + std::to_string(i / 256) +
            "." + std::to_string(i % 256) + "/32]}\n";
  }
  EXPECT_EQ(refusal(many), "t.yaml: tenants.list: has 257 entries (at most 256)");
  const std::string dup = "list: [{name: a, api_keys: [s3cr3t]}, {name: b, api_keys: [s3cr3t]}]\n";
  EXPECT_EQ(refusal(dup).find("s3cr3t"), std::string::npos);
}

}  // namespace
}  // namespace infergate::config
