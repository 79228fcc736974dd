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
#include "xdp/xdp_options.h"

namespace infergate::config {

// The serving modes (docs/ARCHITECTURE.md "Serving modes"; app/modes/). dpdk is accepted by
// every build; a build without DPDK refuses it at start-up, naming the cmake flag.
enum class Mode { kSocket, kXdpFilter, kAfXdp, kDpdk };
inline constexpr Mode kModes[] = {Mode::kSocket, Mode::kXdpFilter, Mode::kAfXdp, Mode::kDpdk};
std::string_view modeName(Mode m);  // "socket", "xdp-filter", "afxdp", "dpdk"
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
  // A request (HTTP/1: first byte to last body byte; HTTP/2: a unary call's request message)
  // not complete this long after it began -> 408 / DEADLINE_EXCEEDED, however steadily it trickles.
  uint64_t request_deadline_ms = 300000;
  // HTTP/1.1: a FIN from the client (its side closed) while requests are unanswered cancels
  // them as a reset does, backend calls included (docs/BATCHING.md "Cancellation").
  bool cancel_on_half_close = false;
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
  // The bearer token that admits a non-loopback peer to the control routes (/admin/*, POST);
  // empty: only loopback peers may use them. From `token` or the file `token_file` names.
  std::string token;
};

struct LoggingConfig {
  std::string level = "info";  // trace|debug|info|warn|error|critical|off
  bool access_log = false;
};

// Who may choose a request's priority (docs/BATCHING.md "Priority"): the x-infergate-priority
// header / gRPC metadata and the KServe `priority` parameter are honoured only from
// `trusted_sources` (from_client: trusted), from everyone (all) or from no one (off); otherwise
// the class comes from the XDP rules (or the model's default level). The XDP program applies
// the same rule to the header it reads: the loader maps both keys onto xdp.priority_from and
// xdp.trusted_sources too (whose defaults are these).
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

// GPU observability (docs/GPU.md): uprobes on the CUDA driver library of the node's GPU
// processes, the detectors, and what their signals do to admission. Off by default.
struct GpuQuotaConfig {
  std::string match;              // container label, pod name or uid, container id prefix, or cgroup path prefix
  uint64_t max_device_bytes = 0;
};

struct GpuConfig {
  bool enabled = false;
  bool required = false;          // true: start-up fails when the probes cannot attach
  std::string library;            // libcuda.so.1 to probe; empty: found from the processes / standard places
  uint64_t interval_ms = 1000;    // monitor poll period
  uint64_t large_alloc_bytes = 1ull << 30;  // a rare event per allocation at least this big (0: none)
  uint64_t leak_window_ms = 300000;
  uint64_t leak_min_age_ms = 300000;
  uint64_t leak_check_interval_ms = 10000;  // how often a growing process's allocations are walked
  double anomaly_factor = 3.0;
  uint64_t anomaly_min_syncs = 20;
  uint32_t baseline_windows = 10;
  uint64_t default_quota_bytes = 0;  // per container; 0: none
  std::vector<GpuQuotaConfig> quotas;
  uint64_t log_interval_ms = 60000;
  std::string webhook_url;        // http://host:port/path; empty: none
  uint64_t webhook_timeout_ms = 1000;
  uint32_t max_series = 32;       // per-process / per-container metric series
  // Closing the loop: while every GPU process behind a model is over its quota or in an
  // anomaly, the model's overload level is raised to at least this (0: never); the endpoint
  // pool prefers endpoints whose GPU process is healthy.
  int overload_level = 1;
  bool prefer_healthy_endpoints = true;
};

// The `dpdk:` section (mode dpdk, docs/DPDK.md): EAL set-up, the port and its queues (one rx/tx
// queue pair per reactor), and the addresses ARP / ICMP are answered for (there is no kernel
// behind a DPDK port). The xdp: section's classifier keys apply in dpdk mode too (the same
// rules, run in userspace on each received burst).
struct DpdkConfig {
  std::vector<std::string> eal_args;   // raw EAL arguments, appended after the structured ones
  uint32_t memory_mb = 0;              // EAL -m; 0: EAL's default (with no_huge: sized, docs)
  bool no_huge = false;                // --no-huge (tests, veths; no hugepages needed)
  bool in_memory = false;              // --in-memory (no files under /var/run/dpdk)
  std::vector<std::string> vdevs;      // --vdev each ("net_af_packet0,iface=veth0")
  std::vector<std::string> allow_pci;  // -a each ("0000:3b:00.1"); none: --no-pci
  std::string file_prefix;             // --file-prefix (several DPDK processes on one host)
  uint16_t port = 0;                   // ethdev port id
  uint32_t mbufs_per_queue = 8192;     // mbuf pool of each queue
  uint16_t rx_desc = 1024;             // rx ring descriptors per queue
  uint16_t tx_desc = 1024;             // tx ring descriptors per queue
  std::string ipv4;                    // the gateway's IPv4 address (required in mode dpdk)
  std::string ipv6;                    // optional: ICMPv6 echo and neighbour solicitations
  // dpdk.checksum_offload: auto (true: the IPv4 + TCP checksum offloads the port reports are
  // used) | off (false: software checksums both ways).
  bool checksum_offload = true;
};

// Per-tenant limits (docs/CONFIGURATION.md "tenants"; frontend/tenants.h): who a request
// counts against (an API key in `api_key_header`, else the most specific source CIDR, else
// the tenant "default") and that tenant's request rate (token bucket), requests in flight and
// default priority class. Absent or with no tenants and an unlimited default: off.
struct TenantLimitsConfig {
  double rate = 0;              // requests per second; 0: unlimited
  uint64_t burst = 0;           // bucket size; 0: max(1, ceil(rate))
  uint32_t max_concurrent = 0;  // requests in flight; 0: unlimited
  std::optional<int> priority_class;  // 0 high .. 3 background; nullopt: none
};
struct TenantConfig {
  std::string name;                   // the metrics label
  std::vector<std::string> sources;   // CIDRs
  std::vector<std::string> api_keys;  // secrets: never logged
  TenantLimitsConfig limits;
};
struct TenantsConfig {
  std::string api_key_header = "x-api-key";
  TenantLimitsConfig default_limits;  // tenants.default
  std::vector<TenantConfig> tenants;  // tenants.list
  // Anything to enforce: a tenant, or limits or a class on the default tenant.
  bool enabled() const {
    return !tenants.empty() || default_limits.rate != 0 || default_limits.max_concurrent != 0 ||
           default_limits.priority_class.has_value();
  }
};

// Parses a `tenants:` section (`source`: the file name for messages); what loadConfigString
// does with the key. INVALID_ARGUMENT names the key path (never an API key's value).
absl::StatusOr<TenantsConfig> parseTenantsSection(std::string_view yaml, std::string_view source);

struct Config {
  std::string source = "<embedded>";  // file name the config came from (for messages)
  Mode mode = Mode::kSocket;
  int reactors = 1;          // reactor threads (one per core)
  std::vector<int> cpus;     // optional pinning; empty = no pinning, else size == reactors
  std::vector<ListenerConfig> listeners;
  LimitsConfig limits;
  AdminConfig admin;
  LoggingConfig logging;
  // The `xdp:` section (xdp-filter and afxdp modes), read straight into the XDP program's
  // options; service_ports and the afxdp-only knobs are left for the app to fill.
  xdp::XdpOptions xdp;
  // afxdp mode (keys in the `xdp:` section): out-of-order TCP segments held in their received
  // frames instead of copied (docs/TCP.md "Out-of-order data in its frames"): spare UMEM rx
  // frames per queue, which bound the frames each reactor's stack holds (xdp.held_frames), and
  // the bound per connection (xdp.held_frames_per_connection); 0 copies them instead.
  uint32_t afxdp_held_frames = 1024;
  uint32_t afxdp_held_frames_per_connection = 256;
  // afxdp mode (xdp.tcp_rcv_buf): each connection's TCP receive memory = its largest
  // advertised window (TcpOptions::rcv_buf); the window-scale shift our SYN-ACKs (and the XDP
  // program's cookie SYN-ACKs) announce follows it. Allocated in chunks as data arrives.
  uint32_t afxdp_tcp_rcv_buf = 256 * 1024;
  DpdkConfig dpdk;  // mode dpdk only
  SecurityConfig security;
  PriorityConfig priority;
  GpuConfig gpu;
  TenantsConfig tenants;
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
