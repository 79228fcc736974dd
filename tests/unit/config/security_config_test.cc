// config.security (docs/CONFIGURATION.md "security"): defaults, accepted values, and the
// messages for what is refused.
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

absl::StatusOr<Config> load(const std::string& security) {
  return loadConfigString(std::string(kBase) + security, "t.yaml");
}

TEST(SecurityConfig, DefaultsDropEverythingAndInstallTheFilter) {
  absl::StatusOr<Config> c = load("");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->security.drop_privileges);
  EXPECT_TRUE(c->security.seccomp);
  EXPECT_EQ(c->security.seccomp_action, "errno");
  EXPECT_EQ(c->security.user, "");
  EXPECT_EQ(c->security.group, "");
  // The admin listener stays on loopback unless configured otherwise.
  EXPECT_EQ(c->admin.address, "127.0.0.1");
}

TEST(SecurityConfig, AcceptsAUserGroupAndAction) {
  absl::StatusOr<Config> c =
      load("security: {user: infergate, group: \"65534\", seccomp_action: kill}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->security.user, "infergate");
  EXPECT_EQ(c->security.group, "65534");
  EXPECT_EQ(c->security.seccomp_action, "kill");
  c = load("security: {drop_privileges: false, seccomp: false}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->security.drop_privileges);
}

TEST(SecurityConfig, RefusalsNameTheKeyAndTheReason) {
  struct Case {
    const char* yaml;
    const char* message;
  } cases[] = {
      {"security: {drop: true}\n", "t.yaml: security.drop: unknown key 'drop'"},
      {"security: {seccomp_action: trap}\n", "security.seccomp_action: unknown action 'trap'"},
      {"security: {user: \"bad name\"}\n", "security.user: invalid user name 'bad name'"},
      {"security: {user: root}\n", "security.user: 'root' gives nothing up"},
      {"security: {group: \"-x\"}\n", "security.group: invalid group name '-x'"},
      {"security: {drop_privileges: false}\n",
       "security.drop_privileges: false, but security.seccomp"},
      {"security: {seccomp: yes}\n", "security.seccomp: expected true or false"},
  };
  for (const Case& k : cases) {
    absl::StatusOr<Config> c = load(k.yaml);
    ASSERT_FALSE(c.ok()) << k.yaml;
    EXPECT_NE(c.status().message().find(k.message), std::string::npos)
        << k.yaml << " -> " << c.status().message();
  }
}

}  // namespace
}  // namespace infergate::config
