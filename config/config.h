#pragma once
// infergate's configuration: the schema (plain structs), the YAML loader and the validator.
// A bad file is refused with a message naming the file, the key path and what is wrong, e.g.
//   "infergate.yaml: models[0].inputs[1].datatype: unknown datatype 'FP33' (expected one of BOOL, UINT8, ...)".
// Threading: load once at start-up; the resulting Config is read-only afterwards.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/model.h"

namespace infergate::config {

enum class Mode { kSocket, kXdpFilter, kAfXdp, kDpdk };
std::string_view modeName(Mode m);                    // "socket", "xdp-filter", "afxdp", "dpdk"
std::optional<Mode> parseMode(std::string_view name);

struct ListenerConfig {
  std::string name = "http";
  std::string address = "0.0.0.0";
  uint16_t port = 8000;             // 0: pick a free port (tests); the log says which
  std::string protocol = "http";    // http (HTTP/1.1) | grpc (HTTP/2, prior knowledge) | auto (either, by the connection preface)
};

struct LimitsConfig {
  uint64_t max_header_bytes = 16 * 1024;
  uint64_t max_body_bytes = 64ull * 1024 * 1024;
  uint64_t max_connections = 10000;          // per process; over it new connections are refused
  uint64_t idle_timeout_ms = 60000;          // keep-alive connection with no request in progress
  uint64_t header_timeout_ms = 10000;        // a started request whose headers are not complete -> 408
  uint64_t body_timeout_ms = 60000;          // a request whose body is not complete -> 408
  // Slow readers and output memory (docs/OPERATIONS.md; dataplane/output_limits.h): a
  // connection with output queued must drain min_drain_bytes every send_timeout_ms (0: no
  // send timeout) or it is reset; reading pauses at half of each output budget and a
  // connection that would exceed one is reset (0: unlimited).
  uint64_t send_timeout_ms = 30000;
  uint64_t min_drain_bytes = 16 * 1024;
  uint64_t max_output_bytes_per_connection = 64ull << 20;
  uint64_t max_output_bytes = 1ull << 30;    // per process
};

struct AdminConfig {
  bool enabled = true;
  std::string address = "127.0.0.1";
  uint16_t port = 8002;  // 0: pick a free port
};

struct LoggingConfig {
  std::string level = "info";  // trace|debug|info|warn|error|critical|off
  bool access_log = false;
};

// XDP program settings (xdp-filter and afxdp modes).
struct XdpRateLimit {
  uint64_t rate_per_sec = 0;  // new connections (SYNs) per second per source; 0 = off
  uint64_t burst = 0;
};
struct XdpPathClass {
  std::string prefix;  // request-target prefix, e.g. "/v2/models/bert"
  int cls = 1;         // priority class 0 (high) .. 3 (background)
};
struct XdpCidrRule {
  std::string cidr;    // "10.0.0.0/8", "2001:db8::/32" or a host address
  int cls = -1;        // -1: the rule gives no class
  bool exempt = false; // never rate-limited
};
struct XdpConfig {
  std::string interface;                   // required in xdp-filter/afxdp modes
  std::string attach = "native";           // native | generic
  std::vector<std::string> methods = {"GET", "POST"};
  std::vector<std::string> path_prefixes = {"/v2/", "/v1/models/", "/metrics"};
  uint32_t http2_max_frame_size = 16384;
  XdpRateLimit rate_limit;                 // new connections (SYNs) per source
  XdpRateLimit request_rate_limit;         // request starts per source (tagged, answered 429)
  std::vector<XdpPathClass> path_classes;  // priority class by path prefix
  std::vector<XdpCidrRule> cidr_rules;     // priority class / exemption by source
  int default_class = 1;
  bool priority_header = true;             // honour x-infergate-priority: 0..3
  bool send_rst = true;                    // answer rejected request starts with a TCP RST
  bool track_flows = true;                 // per-flow state (first segment, rejects, tags)
  // Also reset connections whose later (not first) segments look like a malformed request
  // start. Off by default: a segment in the middle of a binary body can start with
  // "ABC " and would be judged a bad request line; userspace validates those in full.
  bool reject_mid_stream = false;
  std::string pin_path;                    // bpffs directory to pin maps; empty = no pinning
  // Hostile-network knobs (docs/XDP.md): IPv4 fragments / IPv6 extension headers to a service
  // port (drop | drop_all | pass), the RST budget per CPU, the prefix a source's buckets are
  // keyed by, and afxdp SYN cookies (auto: when the backlog is under pressure | always | off).
  std::string fragments = "drop";
  XdpRateLimit rst_rate_limit{20000, 20000};
  int source_prefix_v4 = 32;
  int source_prefix_v6 = 64;
  std::string syn_cookies = "auto";
};

// Who may choose a request's priority (docs/BATCHING.md "Priority"): the x-infergate-priority
// header / gRPC metadata and the KServe `priority` parameter are honoured only from
// `trusted_sources` (from_client: trusted), from everyone (all) or from no one (off); otherwise
// the class comes from the XDP rules (or the model's default level). The XDP program applies
// the same rule to the header it reads.
struct PriorityConfig {
  std::string from_client = "trusted";  // trusted | all | off
  std::vector<std::string> trusted_sources = {"127.0.0.0/8", "::1/128"};  // CIDRs
};

// Least privilege (docs/OPERATIONS.md "Privileges"): what `infergate run` gives up once
// start-up is done and before the reactors serve.
struct SecurityConfig {
  bool drop_privileges = true;        // drop capabilities, lock securebits, set no_new_privs
  bool seccomp = true;                // install the system-call allowlist (needs drop_privileges)
  std::string seccomp_action = "errno";  // errno (EPERM, logged and counted) | kill | log
  std::string user;                   // switch to this user (name or numeric uid); empty: stay
  std::string group;                  // and this group; empty with `user`: the user's group
};

struct Config {
  std::string source = "<embedded>";  // file name the config came from (for messages)
  Mode mode = Mode::kSocket;
  int reactors = 1;          // reactor threads (one per core)
  std::vector<int> cpus;     // optional pinning; empty = no pinning, else size == reactors
  std::vector<ListenerConfig> listeners;
  LimitsConfig limits;
  AdminConfig admin;
  LoggingConfig logging;
  XdpConfig xdp;
  SecurityConfig security;
  PriorityConfig priority;
  std::vector<backends::ModelConfig> models;
};

// Loads and validates. The error status is INVALID_ARGUMENT (bad content) or NOT_FOUND
// (unreadable file) and its message starts with the file name.
absl::StatusOr<Config> loadConfigFile(const std::string& path);
absl::StatusOr<Config> loadConfigString(std::string_view yaml, std::string_view source_name);

// The embedded default configuration used by `infergate run` without -c and by the demo:
// socket mode, one HTTP listener on 0.0.0.0:8000, admin on 127.0.0.1:8002, the identity model
// "identity" (FP32 [-1,16], max_batch_size 8).
std::string_view defaultConfigYaml();

}  // namespace infergate::config
