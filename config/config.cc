// The configuration loader and validator: see config.h; every key is described in
// docs/CONFIGURATION.md.
//
// yaml-cpp builds the document tree (and throws on syntax errors, which are caught here and
// turned into "<source>:<line>:<column>: ..."); the walk below never calls a throwing
// accessor (as<T>()), it reads scalars as text and converts them itself, so that every
// refusal names the key path and the reason: "<source>: <key path>: <what is wrong>".
// The first error wins; the loader does not try to report several.

#include "config/config.h"

#include "backends/dns_resolver.h"
#include "backends/pool.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "common/cidr.h"
#include "common/priority.h"
#include "fmt/format.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace infergate::config {

std::string_view modeName(Mode m) {
  switch (m) {
    case Mode::kSocket:
      return "socket";
    case Mode::kXdpFilter:
      return "xdp-filter";
    case Mode::kAfXdp:
      return "afxdp";
    case Mode::kDpdk:
      return "dpdk";
  }
  return "unknown";
}

std::optional<Mode> parseMode(std::string_view name) {
  for (Mode m : kModes) {
    if (modeName(m) == name) return m;
  }
  return std::nullopt;
}

namespace {

constexpr std::string_view kDefaultConfigYaml =
    R"yaml(# infergate: the embedded default configuration (see docs/CONFIGURATION.md).
mode: socket
reactors: 1
listeners:
  - name: http
    address: 0.0.0.0
    port: 8000
    protocol: http
admin:
  enabled: true
  address: 127.0.0.1
  port: 8002
models:
  - name: identity
    version: "1"
    backend: identity
    max_batch_size: 8
    inputs:
      - {name: INPUT0, datatype: FP32, shape: [16]}
    outputs:
      - {name: OUTPUT0, datatype: FP32, shape: [16]}
)yaml";

// Ranges. Kept here, next to the checks, and mirrored in docs/CONFIGURATION.md.
constexpr int64_t kMaxReactors = 256;
constexpr int64_t kMaxCpu = 4095;
constexpr int64_t kMinHeaderBytes = 1;           // tiny values refuse every request, harmlessly
constexpr int64_t kMaxHeaderBytes = 16ll << 20;  // 16 MiB
constexpr int64_t kMaxBodyBytes = 1ll << 40;     // 1 TiB
constexpr int64_t kMaxConnections = 10'000'000;
constexpr int64_t kMaxTimeoutMs = 86'400'000;  // one day
constexpr uint64_t kMinOutputBytes = 64 * 1024;  // limits.max_output_bytes_per_connection floor
constexpr int64_t kMinH2FrameSize = 16384;     // RFC 9113 SETTINGS_MAX_FRAME_SIZE bounds
constexpr int64_t kMaxH2FrameSize = 16777215;
constexpr int64_t kMaxRate = 1'000'000'000;
constexpr size_t kMaxMethodLen = 16;
constexpr size_t kMaxPathPrefixLen = 128;
constexpr size_t kMaxInterfaceLen = 15;  // IFNAMSIZ - 1
constexpr int64_t kMaxBatchSize = 1 << 20;
constexpr int64_t kMaxCostUs = 60'000'000;  // one minute
constexpr size_t kMaxNameLen = 128;

constexpr std::string_view kKnownBackends = "identity, triton, tfserving";
constexpr int64_t kMaxMs = 24 * 3600 * 1000;  // one day

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}
std::string at(const std::string& path, size_t i) { return fmt::format("{}[{}]", path, i); }

// A quoted scalar ("8000", '8000') or one tagged !!str is a string even when it looks like a
// number; yaml-cpp marks plain scalars with the non-specific tag "?".
bool isStringScalar(const YAML::Node& n) {
  return n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str";
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Scalar:
      return isStringScalar(n) ? fmt::format("the string \"{}\"", n.Scalar())
                               : fmt::format("'{}'", n.Scalar());
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

std::string joinNames(std::initializer_list<std::string_view> names) {
  std::string s;
  for (std::string_view n : names) {
    if (!s.empty()) s += ", ";
    s += n;
  }
  return s;
}

bool oneOf(std::string_view v, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (v == n) return true;
  }
  return false;
}

// [A-Za-z0-9_.-]+, not "." or ".." (model names and versions appear in URL paths).
bool isUrlSafeName(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameLen || s == "." || s == "..") return false;
  for (char c : s) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Printable ASCII without spaces: tensor names, listener names, interface names.
bool isPrintableToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

std::string shapeText(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// An address family plus its 16 address bytes (IPv4 in the first 4), for comparing listeners.
struct IpAddress {
  int family = AF_INET;
  std::array<uint8_t, 16> bytes{};
  bool wildcard() const {
    for (uint8_t b : bytes) {
      if (b != 0) return false;
    }
    return true;
  }
  bool operator==(const IpAddress&) const = default;
};

// "0.0.0.0:80", "[::1]:80".
std::string endpointText(const std::string& address, uint16_t port) {
  return address.find(':') == std::string::npos ? fmt::format("{}:{}", address, port)
                                                : fmt::format("[{}]:{}", address, port);
}

std::optional<IpAddress> parseIp(const std::string& s) {
  IpAddress a;
  if (inet_pton(AF_INET, s.c_str(), a.bytes.data()) == 1) return a;
  a.family = AF_INET6;
  if (inet_pton(AF_INET6, s.c_str(), a.bytes.data()) == 1) return a;
  return std::nullopt;
}

// Early return on a non-OK status; local to this file.
#define IG_CONFIG_TRY(expr)                  \
  do {                                       \
    absl::Status ig_status_ = (expr);        \
    if (!ig_status_.ok()) return ig_status_; \
  } while (0)

// YAML::LoadAll without its endless loop: yaml-cpp 0.7 never consumes a stray flow indicator at
// the top level (",", or "- a\n,") and yields empty documents from that place forever, allocating
// as it goes (found by fuzz_config, tests/fuzz/regressions/fuzz_config/). The documents are
// counted first; one that starts where the previous one did is a syntax error there.
std::vector<YAML::Node> loadAllDocuments(const std::string& text) {
  struct Starts : YAML::EventHandler {
    std::vector<YAML::Mark> marks;
    void OnDocumentStart(const YAML::Mark& m) override { marks.push_back(m); }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
  } starts;
  std::istringstream in(text);
  YAML::Parser parser(in);
  while (parser.HandleNextDocument(starts)) {
    const std::vector<YAML::Mark>& m = starts.marks;
    if (m.size() >= 2 && m[m.size() - 1].pos == m[m.size() - 2].pos) {
      throw YAML::ParserException(m.back(), "unexpected character here");
    }
  }
  return YAML::LoadAll(text);  // it ends: the same parse did
}

class Loader {
 public:
  explicit Loader(std::string source) : source_(std::move(source)) {}

  // parseTenantsSection: `text` is the section's value (a mapping).
  absl::StatusOr<TenantsConfig> tenants(std::string_view text) {
    TenantsConfig t;
    try {
      std::vector<YAML::Node> docs = loadAllDocuments(std::string(text));
      if (docs.size() != 1) return err("tenants", "expected one YAML document");
      IG_CONFIG_TRY(readTenants(docs[0], t));
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(fmt::format("{}: invalid YAML: {}", source_, e.msg));
    }
    return t;
  }

  absl::StatusOr<Config> load(std::string_view text) {
    std::vector<YAML::Node> docs;
    try {
      docs = loadAllDocuments(std::string(text));
    } catch (const YAML::Exception& e) {
      // ParserException and friends: e.msg is the reason, e.mark the 0-based position.
      if (e.mark.is_null()) {
        return absl::InvalidArgumentError(fmt::format("{}: invalid YAML: {}", source_, e.msg));
      }
      return absl::InvalidArgumentError(fmt::format("{}:{}:{}: invalid YAML: {}", source_,
                                                    e.mark.line + 1, e.mark.column + 1, e.msg));
    }
    if (docs.empty() || (docs.size() == 1 && docs[0].IsNull())) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: the configuration is empty (expected a mapping with at least 'listeners' and "
          "'models')",
          source_));
    }
    if (docs.size() > 1) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: the file holds {} YAML documents; expected exactly one", source_, docs.size()));
    }
    if (!docs[0].IsMap()) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: the top level must be a mapping (mode:, listeners:, models:, ...), got {}", source_,
          describe(docs[0])));
    }
    Config c;
    c.source = source_;
    try {
      IG_CONFIG_TRY(readRoot(docs[0], c));
    } catch (const YAML::Exception& e) {
      // The walk avoids throwing accessors; this is the backstop for the boundary promise.
      return absl::InvalidArgumentError(
          fmt::format("{}:{}:{}: {}", source_, e.mark.line + 1, e.mark.column + 1, e.msg));
    }
    return c;
  }

 private:
  absl::Status err(const std::string& path, std::string_view what) const {
    return absl::InvalidArgumentError(fmt::format("{}: {}: {}", source_, path, what));
  }

  // `n` must be a mapping whose keys are all in `allowed`, each at most once.
  absl::Status checkMap(const YAML::Node& n, const std::string& path,
                        std::initializer_list<std::string_view> allowed) const {
    if (!n.IsMap()) return err(path, fmt::format("expected a mapping, got {}", describe(n)));
    std::vector<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const YAML::Node k = it->first;  // a copy: it-> returns a proxy that dies here
      if (!k.IsScalar()) {
        return err(path, fmt::format("keys must be plain names, got {}", describe(k)));
      }
      const std::string& key = k.Scalar();
      if (!oneOf(key, allowed)) {
        return err(join(path, key),
                   fmt::format("unknown key '{}' (expected one of {})", key, joinNames(allowed)));
      }
      for (const std::string& s : seen) {
        if (s == key) return err(join(path, key), fmt::format("duplicate key '{}'", key));
      }
      seen.push_back(key);
    }
    return absl::OkStatus();
  }

  absl::Status checkSeq(const YAML::Node& n, const std::string& path) const {
    if (!n.IsSequence()) return err(path, fmt::format("expected a sequence, got {}", describe(n)));
    return absl::OkStatus();
  }

  // A decimal integer in [lo, hi]. Refuses quoted strings, fractions, hex and null.
  absl::Status readInt(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi,
                       int64_t& out) const {
    if (!n.IsScalar() || isStringScalar(n)) {
      return err(path, fmt::format("expected an integer, got {}", describe(n)));
    }
    const std::string& s = n.Scalar();
    std::string_view digits = s;
    if (!digits.empty() && digits[0] == '+') digits.remove_prefix(1);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (digits.empty() || p != digits.data() + digits.size() ||
        (ec != std::errc() && ec != std::errc::result_out_of_range)) {
      return err(path, fmt::format("expected an integer, got '{}'", s));
    }
    std::string range = hi == std::numeric_limits<int64_t>::max()
                            ? fmt::format("must be >= {}", lo)
                            : fmt::format("must be between {} and {}", lo, hi);
    if (ec == std::errc::result_out_of_range || v < lo || v > hi) {
      return err(path, fmt::format("{}, got {}", range, s));
    }
    out = v;
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status readNumber(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi,
                          T& out) const {
    int64_t v = 0;
    IG_CONFIG_TRY(readInt(n, path, lo, hi, v));
    out = static_cast<T>(v);
    return absl::OkStatus();
  }

  absl::Status readString(const YAML::Node& n, const std::string& path, std::string& out) const {
    if (!n.IsScalar()) return err(path, fmt::format("expected a string, got {}", describe(n)));
    out = n.Scalar();
    return absl::OkStatus();
  }

  absl::Status readChoice(const YAML::Node& n, const std::string& path, std::string_view what,
                          std::initializer_list<std::string_view> choices, std::string& out) const {
    std::string v;
    IG_CONFIG_TRY(readString(n, path, v));
    if (!oneOf(v, choices)) {
      return err(path,
                 fmt::format("unknown {} '{}' (expected one of {})", what, v, joinNames(choices)));
    }
    out = std::move(v);
    return absl::OkStatus();
  }

  // readChoice onto an enum, the names from the owner's table (e.g. xdp::kAttachModeNames).
  template <typename E, size_t N>
  absl::Status readNamed(const YAML::Node& n, const std::string& path, std::string_view what,
                         const xdp::NamedValue<E> (&table)[N], E& out) const {
    std::string v;
    IG_CONFIG_TRY(readString(n, path, v));
    if (std::optional<E> e = xdp::parseNamed(table, v)) {
      out = *e;
      return absl::OkStatus();
    }
    std::string names;
    for (const xdp::NamedValue<E>& t : table) {
      names += (names.empty() ? "" : ", ") + std::string(t.name);
    }
    return err(path, fmt::format("unknown {} '{}' (expected one of {})", what, v, names));
  }

  absl::Status readBool(const YAML::Node& n, const std::string& path, bool& out) const {
    if (n.IsScalar() && !isStringScalar(n)) {
      const std::string& s = n.Scalar();
      if (oneOf(s, {"true", "True", "TRUE"})) {
        out = true;
        return absl::OkStatus();
      }
      if (oneOf(s, {"false", "False", "FALSE"})) {
        out = false;
        return absl::OkStatus();
      }
    }
    return err(path, fmt::format("expected true or false, got {}", describe(n)));
  }

  absl::Status readAddress(const YAML::Node& n, const std::string& path, std::string& out) const {
    IG_CONFIG_TRY(readString(n, path, out));
    if (!parseIp(out)) {
      return err(path, fmt::format("invalid address '{}' (expected an IPv4 or IPv6 literal such "
                                   "as 0.0.0.0, 127.0.0.1 or ::)",
                                   out));
    }
    return absl::OkStatus();
  }

  absl::Status readRoot(const YAML::Node& root, Config& c) const {
    IG_CONFIG_TRY(checkMap(
        root, "",
        {"mode", "reactors", "cpus", "listeners", "admin", "limits", "logging", "xdp", "dpdk",
         "security", "priority", "gpu", "tenants", "models"}));
    if (YAML::Node n = root["mode"]; n.IsDefined()) {
      std::string name;
      IG_CONFIG_TRY(readString(n, "mode", name));
      std::optional<Mode> m = parseMode(name);
      if (!m) {
        return err("mode", fmt::format(
                               "unknown mode '{}' (expected one of socket, xdp-filter, afxdp, dpdk)",
                               name));
      }
      c.mode = *m;
    }
    if (YAML::Node n = root["reactors"]; n.IsDefined()) {
      IG_CONFIG_TRY(readNumber(n, "reactors", 1, kMaxReactors, c.reactors));
    }
    if (YAML::Node n = root["cpus"]; n.IsDefined()) {
      IG_CONFIG_TRY(checkSeq(n, "cpus"));
      for (size_t i = 0; i < n.size(); ++i) {
        int cpu = 0;
        IG_CONFIG_TRY(readNumber(n[i], at("cpus", i), 0, kMaxCpu, cpu));
        c.cpus.push_back(cpu);
      }
      if (c.cpus.size() != static_cast<size_t>(c.reactors)) {
        return err("cpus",
                   fmt::format("has {} entries but reactors is {} (list one CPU per reactor, "
                               "or leave cpus out)",
                               c.cpus.size(), c.reactors));
      }
    }
    IG_CONFIG_TRY(readListeners(root["listeners"], c));
    if (YAML::Node n = root["admin"]; n.IsDefined()) IG_CONFIG_TRY(readAdmin(n, c));
    if (YAML::Node n = root["limits"]; n.IsDefined()) IG_CONFIG_TRY(readLimits(n, c.limits));
    if (YAML::Node n = root["logging"]; n.IsDefined()) IG_CONFIG_TRY(readLogging(n, c.logging));
    if (YAML::Node n = root["xdp"]; n.IsDefined()) IG_CONFIG_TRY(readXdp(n, c));
    if (YAML::Node n = root["dpdk"]; n.IsDefined()) IG_CONFIG_TRY(readDpdk(n, c.dpdk));
    if (YAML::Node n = root["security"]; n.IsDefined()) IG_CONFIG_TRY(readSecurity(n, c.security));
    if (YAML::Node n = root["priority"]; n.IsDefined()) IG_CONFIG_TRY(readPriority(n, c.priority));
    if (YAML::Node n = root["gpu"]; n.IsDefined()) IG_CONFIG_TRY(readGpu(n, c.gpu));
    if (YAML::Node n = root["tenants"]; n.IsDefined()) IG_CONFIG_TRY(readTenants(n, c.tenants));
    // The XDP program applies the same rule to the priority header it reads.
    c.xdp.priority_from = *xdp::parseNamed(xdp::kPriorityFromNames, c.priority.from_client);
    c.xdp.trusted_sources = c.priority.trusted_sources;
    if ((c.mode == Mode::kXdpFilter || c.mode == Mode::kAfXdp) && c.xdp.interface.empty()) {
      return err("xdp.interface", fmt::format("required in mode '{}' (the network interface to "
                                              "attach the XDP program to)",
                                              modeName(c.mode)));
    }
    if (c.mode == Mode::kDpdk && c.dpdk.ipv4.empty()) {
      return err("dpdk.ipv4", "required in mode 'dpdk' (the gateway's IPv4 address: there is no "
                              "kernel behind a DPDK port, so infergate answers ARP and ICMP for "
                              "it)");
    }
    IG_CONFIG_TRY(readModels(root["models"], c));
    return absl::OkStatus();
  }

  // A list of non-empty printable strings (EAL arguments, vdevs, PCI addresses).
  absl::Status readStringList(const YAML::Node& v, const std::string& path,
                              std::vector<std::string>& out) const {
    IG_CONFIG_TRY(checkSeq(v, path));
    if (v.size() > 256) return err(path, fmt::format("has {} entries (at most 256)", v.size()));
    out.clear();
    for (size_t i = 0; i < v.size(); ++i) {
      std::string s;
      IG_CONFIG_TRY(readString(v[i], at(path, i), s));
      if (!isPrintableToken(s) || s.size() > 1024) {
        return err(at(path, i), fmt::format("invalid entry '{}' (1 to 1024 printable characters, "
                                            "no spaces)",
                                            s));
      }
      out.push_back(std::move(s));
    }
    return absl::OkStatus();
  }

  absl::Status readDpdk(const YAML::Node& n, DpdkConfig& d) const {
    IG_CONFIG_TRY(checkMap(n, "dpdk",
                           {"eal_args", "memory_mb", "no_huge", "in_memory", "vdevs", "allow_pci",
                            "file_prefix", "port", "mbufs_per_queue", "rx_desc", "tx_desc", "ipv4",
                            "ipv6", "checksum_offload"}));
    if (YAML::Node v = n["checksum_offload"]; v.IsDefined()) {
      std::string mode;
      IG_CONFIG_TRY(readString(v, "dpdk.checksum_offload", mode));
      if (mode != "auto" && mode != "off") {
        return err("dpdk.checksum_offload",
                   fmt::format("unknown value '{}' (expected auto or off)", mode));
      }
      d.checksum_offload = mode == "auto";
    }
    if (YAML::Node v = n["eal_args"]; v.IsDefined()) {
      IG_CONFIG_TRY(readStringList(v, "dpdk.eal_args", d.eal_args));
    }
    if (YAML::Node v = n["vdevs"]; v.IsDefined()) {
      IG_CONFIG_TRY(readStringList(v, "dpdk.vdevs", d.vdevs));
    }
    if (YAML::Node v = n["allow_pci"]; v.IsDefined()) {
      IG_CONFIG_TRY(readStringList(v, "dpdk.allow_pci", d.allow_pci));
    }
    if (YAML::Node v = n["memory_mb"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "dpdk.memory_mb", 0, 1 << 20, d.memory_mb));
    }
    if (YAML::Node v = n["no_huge"]; v.IsDefined()) IG_CONFIG_TRY(readBool(v, "dpdk.no_huge", d.no_huge));
    if (YAML::Node v = n["in_memory"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, "dpdk.in_memory", d.in_memory));
    }
    if (YAML::Node v = n["file_prefix"]; v.IsDefined()) {
      IG_CONFIG_TRY(readString(v, "dpdk.file_prefix", d.file_prefix));
      const bool ok = !d.file_prefix.empty() && d.file_prefix.size() <= 64 &&
                      std::all_of(d.file_prefix.begin(), d.file_prefix.end(), [](char ch) {
                        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' ||
                               ch == '-' || ch == '.';
                      });
      if (!ok) {
        return err("dpdk.file_prefix", fmt::format("invalid prefix '{}' (1 to 64 letters, digits, "
                                                   "'_', '-' or '.')",
                                                   d.file_prefix));
      }
    }
    if (YAML::Node v = n["port"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "dpdk.port", 0, 1023, d.port));  // RTE_MAX_ETHPORTS bound
    }
    if (YAML::Node v = n["mbufs_per_queue"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "dpdk.mbufs_per_queue", 1024, 1 << 22, d.mbufs_per_queue));
    }
    for (auto [key, out] : {std::pair{"rx_desc", &d.rx_desc}, std::pair{"tx_desc", &d.tx_desc}}) {
      if (YAML::Node v = n[key]; v.IsDefined()) {
        const std::string path = join("dpdk", key);
        IG_CONFIG_TRY(readNumber(v, path, 64, 32768, *out));
        if ((*out & (*out - 1)) != 0) {
          return err(path, fmt::format("{} is not a power of two (drivers round or refuse it)", *out));
        }
      }
    }
    if (YAML::Node v = n["ipv4"]; v.IsDefined()) {
      IG_CONFIG_TRY(readString(v, "dpdk.ipv4", d.ipv4));
      in_addr a{};
      if (inet_pton(AF_INET, d.ipv4.c_str(), &a) != 1 || a.s_addr == 0) {
        return err("dpdk.ipv4", fmt::format("invalid IPv4 address '{}' (a unicast literal such as "
                                            "10.0.0.1)",
                                            d.ipv4));
      }
    }
    if (YAML::Node v = n["ipv6"]; v.IsDefined()) {
      IG_CONFIG_TRY(readString(v, "dpdk.ipv6", d.ipv6));
      in6_addr a{};
      if (inet_pton(AF_INET6, d.ipv6.c_str(), &a) != 1 || IN6_IS_ADDR_UNSPECIFIED(&a)) {
        return err("dpdk.ipv6", fmt::format("invalid IPv6 address '{}' (a unicast literal such as "
                                            "fd00::1)",
                                            d.ipv6));
      }
    }
    return absl::OkStatus();
  }

  absl::Status readListeners(const YAML::Node& n, Config& c) const {
    if (!n.IsDefined() || n.IsNull() || (n.IsSequence() && n.size() == 0)) {
      return err("listeners", "at least one listener is required");
    }
    IG_CONFIG_TRY(checkSeq(n, "listeners"));
    std::vector<IpAddress> ips;
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string path = at("listeners", i);
      const YAML::Node& l = n[i];
      IG_CONFIG_TRY(checkMap(l, path, {"name", "address", "port", "protocol"}));
      ListenerConfig lc;
      lc.name = fmt::format("http{}", i == 0 ? std::string() : std::to_string(i));
      if (YAML::Node v = l["name"]; v.IsDefined()) {
        IG_CONFIG_TRY(readString(v, join(path, "name"), lc.name));
        if (!isPrintableToken(lc.name)) {
          return err(join(path, "name"), fmt::format("invalid name '{}' (printable characters, no "
                                                     "spaces)",
                                                     lc.name));
        }
      }
      if (YAML::Node v = l["address"]; v.IsDefined()) {
        IG_CONFIG_TRY(readAddress(v, join(path, "address"), lc.address));
      }
      if (YAML::Node v = l["port"]; v.IsDefined()) {
        IG_CONFIG_TRY(readNumber(v, join(path, "port"), 0, 65535, lc.port));
      }
      if (YAML::Node v = l["protocol"]; v.IsDefined()) {
        IG_CONFIG_TRY(
            readChoice(v, join(path, "protocol"), "protocol", {"http", "grpc", "auto"}, lc.protocol));
      }
      IpAddress ip = *parseIp(lc.address);
      for (size_t j = 0; j < c.listeners.size(); ++j) {
        if (c.listeners[j].name == lc.name) {
          return err(join(path, "name"), fmt::format("duplicate listener name '{}' (also "
                                                     "listeners[{}])",
                                                     lc.name, j));
        }
        if (auto clash = endpointClash(ip, lc.port, ips[j], c.listeners[j].port)) {
          return err(
              join(path, "port"),
              fmt::format("{} overlaps listeners[{}] ({}){}", endpointText(lc.address, lc.port), j,
                          endpointText(c.listeners[j].address, c.listeners[j].port), *clash));
        }
      }
      ips.push_back(ip);
      c.listeners.push_back(std::move(lc));
    }
    return absl::OkStatus();
  }

  // Two endpoints clash when they share a non-zero port and an address family and either the
  // addresses are equal or one is the wildcard (which binds every address of the family).
  // Returns a note to append to the message, or nullopt when they do not clash.
  static std::optional<std::string> endpointClash(const IpAddress& a, uint16_t pa,
                                                  const IpAddress& b, uint16_t pb) {
    if (pa == 0 || pa != pb || a.family != b.family) return std::nullopt;
    if (a == b) return std::string(": duplicate address and port");
    if (a.wildcard() || b.wildcard())
      return std::string(": a wildcard address takes every address");
    return std::nullopt;
  }

  absl::Status readAdmin(const YAML::Node& n, Config& c) const {
    IG_CONFIG_TRY(checkMap(n, "admin", {"enabled", "address", "port", "token", "token_file"}));
    AdminConfig& a = c.admin;
    if (YAML::Node v = n["enabled"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, "admin.enabled", a.enabled));
    }
    if (YAML::Node v = n["address"]; v.IsDefined()) {
      IG_CONFIG_TRY(readAddress(v, "admin.address", a.address));
    }
    if (YAML::Node v = n["port"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "admin.port", 0, 65535, a.port));
    }
    YAML::Node token = n["token"];
    YAML::Node token_file = n["token_file"];
    if (token.IsDefined() && token_file.IsDefined()) {
      return err("admin.token", "give token or token_file, not both");
    }
    if (token.IsDefined()) IG_CONFIG_TRY(readString(token, "admin.token", a.token));
    if (token_file.IsDefined()) {
      std::string path;
      IG_CONFIG_TRY(readString(token_file, "admin.token_file", path));
      std::ifstream f(path, std::ios::binary);
      if (!f.is_open()) return err("admin.token_file", fmt::format("cannot open '{}'", path));
      std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      if (f.bad()) return err("admin.token_file", fmt::format("cannot read '{}'", path));
      while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
      a.token = std::move(text);
    }
    if ((token.IsDefined() || token_file.IsDefined())) {
      const bool printable = std::all_of(a.token.begin(), a.token.end(), [](char ch) {
        return ch > ' ' && ch < 0x7f;
      });
      if (a.token.size() < 16 || a.token.size() > 256 || !printable) {
        return err(token.IsDefined() ? "admin.token" : "admin.token_file",
                   "the token must be 16 to 256 printable characters without spaces");
      }
    }
    if (a.enabled) {
      IpAddress ip = *parseIp(a.address);
      for (size_t j = 0; j < c.listeners.size(); ++j) {
        if (auto clash =
                endpointClash(ip, a.port, *parseIp(c.listeners[j].address), c.listeners[j].port)) {
          return err(
              "admin.port",
              fmt::format("{} overlaps listeners[{}] ({}){}", endpointText(a.address, a.port), j,
                          endpointText(c.listeners[j].address, c.listeners[j].port), *clash));
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status readLimits(const YAML::Node& n, LimitsConfig& l) const {
    IG_CONFIG_TRY(checkMap(n, "limits",
                           {"max_header_bytes", "max_body_bytes", "max_connections",
                            "idle_timeout_ms", "header_timeout_ms", "body_timeout_ms",
                            "request_deadline_ms", "send_timeout_ms", "min_drain_bytes",
                            "max_output_bytes_per_connection", "max_output_bytes",
                            "cancel_on_half_close"}));
    struct Field {
      std::string_view key;
      int64_t lo, hi;
      uint64_t* out;
    };
    const Field fields[] = {
        {"max_header_bytes", kMinHeaderBytes, kMaxHeaderBytes, &l.max_header_bytes},
        {"max_body_bytes", 1, kMaxBodyBytes, &l.max_body_bytes},
        {"max_connections", 1, kMaxConnections, &l.max_connections},
        {"idle_timeout_ms", 1, kMaxTimeoutMs, &l.idle_timeout_ms},
        {"header_timeout_ms", 1, kMaxTimeoutMs, &l.header_timeout_ms},
        {"body_timeout_ms", 1, kMaxTimeoutMs, &l.body_timeout_ms},
        {"request_deadline_ms", 1, kMaxTimeoutMs, &l.request_deadline_ms},
        {"send_timeout_ms", 0, kMaxTimeoutMs, &l.send_timeout_ms},
        {"min_drain_bytes", 1, kMaxBodyBytes, &l.min_drain_bytes},
        {"max_output_bytes_per_connection", 0, kMaxBodyBytes, &l.max_output_bytes_per_connection},
        {"max_output_bytes", 0, kMaxBodyBytes, &l.max_output_bytes},
    };
    for (const Field& f : fields) {
      if (YAML::Node v = n[std::string(f.key)]; v.IsDefined()) {
        IG_CONFIG_TRY(readNumber(v, join("limits", f.key), f.lo, f.hi, *f.out));
      }
    }
    if (YAML::Node v = n["cancel_on_half_close"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, "limits.cancel_on_half_close", l.cancel_on_half_close));
    }
    return checkOutputLimits(l);
  }

  // The slow-reader limits must make sense together (docs/OPERATIONS.md).
  absl::Status checkOutputLimits(const LimitsConfig& l) const {
    if (l.send_timeout_ms != 0 && l.send_timeout_ms < 100) {
      return err("limits.send_timeout_ms",
                 fmt::format("{} ms is too short for a peer to drain anything over a real network "
                             "(use 0 to turn the send timeout off, or at least 100)",
                             l.send_timeout_ms));
    }
    const uint64_t per_conn = l.max_output_bytes_per_connection;
    if (per_conn != 0 && per_conn < kMinOutputBytes) {
      return err("limits.max_output_bytes_per_connection",
                 fmt::format("{} bytes cannot hold one response (use 0 for unlimited, or at least "
                             "{})",
                             per_conn, kMinOutputBytes));
    }
    if (per_conn != 0 && l.min_drain_bytes > per_conn) {
      return err("limits.min_drain_bytes",
                 fmt::format("{} is more than limits.max_output_bytes_per_connection ({}): no "
                             "connection could ever make that much progress",
                             l.min_drain_bytes, per_conn));
    }
    if (l.max_output_bytes != 0 && per_conn != 0 && l.max_output_bytes < per_conn) {
      return err("limits.max_output_bytes",
                 fmt::format("{} is below limits.max_output_bytes_per_connection ({}): the process "
                             "budget must hold at least one connection's (0: unlimited)",
                             l.max_output_bytes, per_conn));
    }
    return absl::OkStatus();
  }

  absl::Status readPriority(const YAML::Node& n, PriorityConfig& p) const {
    IG_CONFIG_TRY(checkMap(n, "priority", {"from_client", "trusted_sources"}));
    if (YAML::Node v = n["from_client"]; v.IsDefined()) {
      IG_CONFIG_TRY(readChoice(v, "priority.from_client", "value", {"trusted", "all", "off"},
                               p.from_client));
    }
    if (YAML::Node v = n["trusted_sources"]; v.IsDefined()) {
      p.trusted_sources.clear();
      if (!v.IsNull()) {
        IG_CONFIG_TRY(checkSeq(v, "priority.trusted_sources"));
        if (v.size() > 1024) {
          return err("priority.trusted_sources", fmt::format("has {} entries (at most 1024)", v.size()));
        }
        for (size_t i = 0; i < v.size(); ++i) {
          std::string text;
          IG_CONFIG_TRY(readString(v[i], at("priority.trusted_sources", i), text));
          if (absl::StatusOr<common::Cidr> c = common::parseCidr(text); !c.ok()) {
            return err(at("priority.trusted_sources", i), std::string(c.status().message()));
          }
          p.trusted_sources.push_back(std::move(text));
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status readSecurity(const YAML::Node& n, SecurityConfig& s) const {
    IG_CONFIG_TRY(checkMap(n, "security",
                           {"drop_privileges", "seccomp", "seccomp_action", "user", "group"}));
    if (YAML::Node v = n["drop_privileges"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, "security.drop_privileges", s.drop_privileges));
    }
    if (YAML::Node v = n["seccomp"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, "security.seccomp", s.seccomp));
    }
    if (YAML::Node v = n["seccomp_action"]; v.IsDefined()) {
      IG_CONFIG_TRY(readChoice(v, "security.seccomp_action", "action", {"errno", "kill", "log"},
                               s.seccomp_action));
    }
    for (auto [key, out] : {std::pair{"user", &s.user}, std::pair{"group", &s.group}}) {
      YAML::Node v = n[key];
      if (!v.IsDefined()) continue;
      const std::string path = join("security", key);
      IG_CONFIG_TRY(readString(v, path, *out));
      // A name as useradd(8) accepts it, or a numeric id; resolved at start-up.
      const bool ok = !out->empty() && out->size() <= 32 &&
                      std::all_of(out->begin(), out->end(), [](char ch) {
                        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' ||
                               ch == '-' || ch == '.';
                      }) &&
                      (*out)[0] != '-';
      if (!ok) {
        return err(path, fmt::format("invalid {} name '{}' (a user or group name, or a numeric "
                                     "id)",
                                     key, *out));
      }
    }
    if (!s.user.empty() && (s.user == "0" || s.user == "root")) {
      return err("security.user", "'root' gives nothing up; leave security.user out to stay");
    }
    if (!s.drop_privileges && (s.seccomp || !s.user.empty() || !s.group.empty())) {
      return err("security.drop_privileges",
                 "false, but security.seccomp, user or group ask for a drop (set seccomp: false "
                 "and leave user/group out, or keep drop_privileges: true)");
    }
    return absl::OkStatus();
  }

  // A decimal number in [lo, hi] (finite). Refuses quoted strings and null.
  absl::Status readDouble(const YAML::Node& n, const std::string& path, double lo, double hi,
                          double& out) const {
    if (!n.IsScalar() || isStringScalar(n)) {
      return err(path, fmt::format("expected a number, got {}", describe(n)));
    }
    const std::string& s = n.Scalar();
    double v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || p != s.data() + s.size() || ec != std::errc() || !std::isfinite(v)) {
      return err(path, fmt::format("expected a number, got '{}'", s));
    }
    if (v < lo || v > hi) {
      return err(path, fmt::format("must be between {} and {}, got {}", lo, hi, s));
    }
    out = v;
    return absl::OkStatus();
  }

  // tenants.default and each tenants.list entry's limits.
  absl::Status readTenantLimits(const YAML::Node& n, const std::string& path,
                                TenantLimitsConfig& l) const {
    if (YAML::Node v = n["rate"]; v.IsDefined()) {
      IG_CONFIG_TRY(readDouble(v, join(path, "rate"), 0, 1e6, l.rate));
      if (l.rate != 0 && l.rate < 0.001) {
        return err(join(path, "rate"),
                   fmt::format("{} is below 0.001 per second (0: unlimited)", l.rate));
      }
    }
    if (YAML::Node v = n["burst"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "burst"), 1, 1000000, l.burst));
      if (l.rate == 0) {
        return err(join(path, "burst"), "needs a rate (the bucket refills at `rate` per second)");
      }
    }
    if (YAML::Node v = n["max_concurrent"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "max_concurrent"), 0, 1000000, l.max_concurrent));
    }
    if (YAML::Node v = n["priority"]; v.IsDefined()) {
      std::string name;
      IG_CONFIG_TRY(readChoice(v, join(path, "priority"), "priority class",
                               {"high", "normal", "low", "background"}, name));
      l.priority_class = name == "high" ? 0 : name == "normal" ? 1 : name == "low" ? 2 : 3;
    }
    return absl::OkStatus();
  }

  absl::Status readTenants(const YAML::Node& n, TenantsConfig& t) const {
    IG_CONFIG_TRY(checkMap(n, "tenants", {"api_key_header", "default", "list"}));
    if (YAML::Node v = n["api_key_header"]; v.IsDefined()) {
      IG_CONFIG_TRY(readString(v, "tenants.api_key_header", t.api_key_header));
      const bool token = !t.api_key_header.empty() && t.api_key_header.size() <= 64 &&
                         std::all_of(t.api_key_header.begin(), t.api_key_header.end(), [](char ch) {
                           return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' ||
                                  ch == '_';
                         });
      if (!token) {
        return err("tenants.api_key_header",
                   fmt::format("'{}' is not a header name (letters, digits, '-', '_')",
                               t.api_key_header));
      }
      std::transform(t.api_key_header.begin(), t.api_key_header.end(), t.api_key_header.begin(),
                     [](char ch) {
                       return static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
                     });
      for (std::string_view reserved : {"x-infergate-priority", "content-type", "content-length",
                                        "host", "te", "grpc-timeout"}) {
        if (t.api_key_header == reserved) {
          return err("tenants.api_key_header",
                     fmt::format("'{}' already means something else", t.api_key_header));
        }
      }
    }
    if (YAML::Node v = n["default"]; v.IsDefined()) {
      IG_CONFIG_TRY(
          checkMap(v, "tenants.default", {"rate", "burst", "max_concurrent", "priority"}));
      IG_CONFIG_TRY(readTenantLimits(v, "tenants.default", t.default_limits));
    }
    YAML::Node list = n["list"];
    if (!list.IsDefined() || list.IsNull()) return absl::OkStatus();
    IG_CONFIG_TRY(checkSeq(list, "tenants.list"));
    if (list.size() > 256) {
      return err("tenants.list", fmt::format("has {} entries (at most 256)", list.size()));
    }
    size_t keys = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string path = at("tenants.list", i);
      const YAML::Node e = list[i];
      IG_CONFIG_TRY(checkMap(e, path, {"name", "sources", "api_keys", "rate", "burst",
                                       "max_concurrent", "priority"}));
      TenantConfig tc;
      if (!e["name"].IsDefined()) return err(path, "needs a name (the tenant's metrics label)");
      IG_CONFIG_TRY(readString(e["name"], join(path, "name"), tc.name));
      const bool name_ok = !tc.name.empty() && tc.name.size() <= 64 &&
                           std::all_of(tc.name.begin(), tc.name.end(), [](char ch) {
                             return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' ||
                                    ch == '_';
                           });
      if (!name_ok) {
        return err(join(path, "name"),
                   fmt::format("invalid tenant name '{}' (1..64 letters, digits, '-', '_')",
                               tc.name));
      }
      if (tc.name == "default") {
        return err(join(path, "name"), "'default' is the tenant of everything else: configure "
                                       "it under tenants.default");
      }
      for (const TenantConfig& o : t.tenants) {
        if (o.name == tc.name) {
          return err(join(path, "name"), fmt::format("tenant '{}' is named twice", tc.name));
        }
      }
      if (YAML::Node v = e["sources"]; v.IsDefined()) {
        IG_CONFIG_TRY(checkSeq(v, join(path, "sources")));
        if (v.size() > 1024) {
          return err(join(path, "sources"), fmt::format("has {} entries (at most 1024)", v.size()));
        }
        for (size_t j = 0; j < v.size(); ++j) {
          const std::string sp = at(join(path, "sources"), j);
          std::string text;
          IG_CONFIG_TRY(readString(v[j], sp, text));
          absl::StatusOr<common::Cidr> c = common::parseCidr(text);
          if (!c.ok()) return err(sp, std::string(c.status().message()));
          for (const TenantConfig& o : t.tenants) {
            for (const std::string& os : o.sources) {
              if (*common::parseCidr(os) == *c) {
                return err(sp, fmt::format("{} is already tenant '{}''s", text, o.name));
              }
            }
          }
          for (const std::string& os : tc.sources) {
            if (*common::parseCidr(os) == *c) {
              return err(sp, fmt::format("{} is listed twice", text));
            }
          }
          tc.sources.push_back(std::move(text));
        }
      }
      if (YAML::Node v = e["api_keys"]; v.IsDefined()) {
        IG_CONFIG_TRY(checkSeq(v, join(path, "api_keys")));
        for (size_t j = 0; j < v.size(); ++j) {
          // Messages name the entry, never the key.
          const std::string kp = at(join(path, "api_keys"), j);
          if (!v[j].IsScalar()) return err(kp, "expected a string");
          std::string key = v[j].Scalar();
          if (key.empty() || key.size() > 256) return err(kp, "an API key must be 1..256 bytes");
          const bool printable =
              std::all_of(key.begin(), key.end(), [](char ch) { return ch > 0x20 && ch < 0x7f; });
          if (!printable) {
            return err(kp, "an API key must be printable ASCII without spaces (a header value)");
          }
          if (++keys > 4096) return err(kp, "more than 4096 API keys in all");
          for (const TenantConfig& o : t.tenants) {
            if (std::find(o.api_keys.begin(), o.api_keys.end(), key) != o.api_keys.end()) {
              return err(kp, fmt::format("this key is already tenant '{}''s", o.name));
            }
          }
          if (std::find(tc.api_keys.begin(), tc.api_keys.end(), key) != tc.api_keys.end()) {
            return err(kp, "this key is listed twice");
          }
          tc.api_keys.push_back(std::move(key));
        }
      }
      if (tc.sources.empty() && tc.api_keys.empty()) {
        return err(path, fmt::format("tenant '{}' has neither sources nor api_keys: no request "
                                     "could be its",
                                     tc.name));
      }
      IG_CONFIG_TRY(readTenantLimits(e, path, tc.limits));
      t.tenants.push_back(std::move(tc));
    }
    return absl::OkStatus();
  }

  absl::Status readGpu(const YAML::Node& n, GpuConfig& g) const {
    IG_CONFIG_TRY(checkMap(
        n, "gpu",
        {"enabled", "required", "library", "interval_ms", "large_alloc_bytes", "leak_window_ms",
         "leak_min_age_ms", "leak_check_interval_ms", "anomaly_factor", "anomaly_min_syncs", "baseline_windows",
         "default_quota_bytes", "quotas", "log_interval_ms", "webhook_url", "webhook_timeout_ms",
         "max_series", "overload_level", "prefer_healthy_endpoints"}));
    constexpr int64_t kDay = 86'400'000;
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    if (YAML::Node v = n["enabled"]; v.IsDefined()) IG_CONFIG_TRY(readBool(v, "gpu.enabled", g.enabled));
    if (YAML::Node v = n["required"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, "gpu.required", g.required));
    }
    if (YAML::Node v = n["library"]; v.IsDefined()) {
      IG_CONFIG_TRY(readString(v, "gpu.library", g.library));
      if (!g.library.empty() && g.library[0] != '/') {
        return err("gpu.library", fmt::format("'{}' is not an absolute path (give the path of "
                                              "libcuda.so.1, or leave the key out to find it)",
                                              g.library));
      }
    }
    struct U64Key {
      const char* key;
      int64_t lo, hi;
      uint64_t* out;
    };
    for (const U64Key& k : {U64Key{"interval_ms", 10, 3'600'000, &g.interval_ms},
                            U64Key{"large_alloc_bytes", 0, kMax, &g.large_alloc_bytes},
                            U64Key{"leak_window_ms", 1, kDay, &g.leak_window_ms},
                            U64Key{"leak_min_age_ms", 0, kDay, &g.leak_min_age_ms},
                            U64Key{"leak_check_interval_ms", 0, kDay, &g.leak_check_interval_ms},
                            U64Key{"anomaly_min_syncs", 1, 1'000'000'000, &g.anomaly_min_syncs},
                            U64Key{"default_quota_bytes", 0, kMax, &g.default_quota_bytes},
                            U64Key{"log_interval_ms", 0, kDay, &g.log_interval_ms},
                            U64Key{"webhook_timeout_ms", 1, 60'000, &g.webhook_timeout_ms}}) {
      if (YAML::Node v = n[k.key]; v.IsDefined()) {
        IG_CONFIG_TRY(readNumber(v, join("gpu", k.key), k.lo, k.hi, *k.out));
      }
    }
    if (YAML::Node v = n["anomaly_factor"]; v.IsDefined()) {
      IG_CONFIG_TRY(readDouble(v, "gpu.anomaly_factor", 1.1, 1000.0, g.anomaly_factor));
    }
    if (YAML::Node v = n["baseline_windows"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "gpu.baseline_windows", 1, 100000, g.baseline_windows));
    }
    if (YAML::Node v = n["max_series"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "gpu.max_series", 1, 1000, g.max_series));
    }
    if (YAML::Node v = n["overload_level"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "gpu.overload_level", 0, common::kPriorityClasses - 1,
                               g.overload_level));
    }
    if (YAML::Node v = n["prefer_healthy_endpoints"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, "gpu.prefer_healthy_endpoints", g.prefer_healthy_endpoints));
    }
    if (YAML::Node v = n["webhook_url"]; v.IsDefined()) {
      IG_CONFIG_TRY(readString(v, "gpu.webhook_url", g.webhook_url));
      if (!g.webhook_url.empty() && g.webhook_url.rfind("http://", 0) != 0) {
        return err("gpu.webhook_url", fmt::format("'{}' is not an http:// URL (https is not "
                                                  "supported: post to a local relay)",
                                                  g.webhook_url));
      }
    }
    if (YAML::Node q = n["quotas"]; q.IsDefined()) {
      IG_CONFIG_TRY(checkSeq(q, "gpu.quotas"));
      if (q.size() > 1024) return err("gpu.quotas", "more than 1024 entries");
      for (size_t i = 0; i < q.size(); ++i) {
        const std::string path = at("gpu.quotas", i);
        IG_CONFIG_TRY(checkMap(q[i], path, {"match", "max_device_bytes"}));
        GpuQuotaConfig rule;
        if (!q[i]["match"].IsDefined()) return err(join(path, "match"), "required");
        IG_CONFIG_TRY(readString(q[i]["match"], join(path, "match"), rule.match));
        if (rule.match.empty()) return err(join(path, "match"), "must not be empty");
        if (!q[i]["max_device_bytes"].IsDefined()) {
          return err(join(path, "max_device_bytes"), "required");
        }
        IG_CONFIG_TRY(readNumber(q[i]["max_device_bytes"], join(path, "max_device_bytes"), 1, kMax,
                                 rule.max_device_bytes));
        g.quotas.push_back(std::move(rule));
      }
    }
    return absl::OkStatus();
  }

  absl::Status readLogging(const YAML::Node& n, LoggingConfig& l) const {
    IG_CONFIG_TRY(checkMap(n, "logging", {"level", "access_log"}));
    if (YAML::Node v = n["level"]; v.IsDefined()) {
      IG_CONFIG_TRY(readChoice(v, "logging.level", "level",
                               {"trace", "debug", "info", "warn", "error", "critical", "off"},
                               l.level));
    }
    if (YAML::Node v = n["access_log"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, "logging.access_log", l.access_log));
    }
    return absl::OkStatus();
  }

  // {rate_per_sec, burst} onto the XDP options' pair of fields.
  absl::Status readRateLimit(const YAML::Node& r, const std::string& path, std::string_view what,
                             uint64_t& rate_per_sec, uint64_t& burst) const {
    if (!r.IsDefined()) return absl::OkStatus();
    IG_CONFIG_TRY(checkMap(r, path, {"rate_per_sec", "burst"}));
    if (YAML::Node v = r["rate_per_sec"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "rate_per_sec"), 0, kMaxRate, rate_per_sec));
    }
    // An omitted burst defaults to one second's worth of the rate.
    burst = rate_per_sec;
    if (YAML::Node v = r["burst"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "burst"), 0, kMaxRate, burst));
      if (rate_per_sec > 0 && burst == 0) {
        return err(join(path, "burst"),
                   fmt::format("must be >= 1 when rate_per_sec > 0 (a burst of 0 would refuse "
                               "every {})",
                               what));
      }
    }
    return absl::OkStatus();
  }

  absl::Status readXdp(const YAML::Node& n, Config& c) const {
    xdp::XdpOptions& x = c.xdp;
    IG_CONFIG_TRY(checkMap(n, "xdp",
                           {"interface", "attach", "methods", "path_prefixes",
                            "http2_max_frame_size", "rate_limit", "request_rate_limit",
                            "path_classes", "cidr_rules", "default_class", "priority_header",
                            "send_rst", "track_flows", "reject_mid_stream", "pin_path",
                            "fragments", "rst_rate_limit", "source_prefix_v4",
                            "source_prefix_v6", "syn_cookies", "tags", "busy_poll", "prefer_busy_poll",
                            "busy_poll_usecs", "busy_poll_budget", "held_frames",
                            "held_frames_per_connection", "tcp_rcv_buf", "keep_attached"}));
    if (YAML::Node v = n["interface"]; v.IsDefined()) {
      IG_CONFIG_TRY(readString(v, "xdp.interface", x.interface));
      if (!isPrintableToken(x.interface) || x.interface.size() > kMaxInterfaceLen ||
          x.interface.find('/') != std::string::npos) {
        return err("xdp.interface", fmt::format("invalid interface name '{}' (1 to {} characters, "
                                                "no spaces or '/')",
                                                x.interface, kMaxInterfaceLen));
      }
    }
    if (YAML::Node v = n["attach"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNamed(v, "xdp.attach", "attach mode", xdp::kAttachModeNames, x.attach));
    }
    if (YAML::Node v = n["methods"]; v.IsDefined()) {
      IG_CONFIG_TRY(checkSeq(v, "xdp.methods"));
      if (v.size() == 0) return err("xdp.methods", "at least one method is required");
      x.methods.clear();
      for (size_t i = 0; i < v.size(); ++i) {
        std::string m;
        IG_CONFIG_TRY(readString(v[i], at("xdp.methods", i), m));
        bool ok = !m.empty() && m.size() <= kMaxMethodLen;
        for (char ch : m) ok = ok && ch >= 'A' && ch <= 'Z';
        if (!ok) {
          return err(at("xdp.methods", i),
                     fmt::format("invalid method '{}' (1 to {} uppercase letters, e.g. GET)", m,
                                 kMaxMethodLen));
        }
        x.methods.push_back(std::move(m));
      }
    }
    if (YAML::Node v = n["path_prefixes"]; v.IsDefined()) {
      IG_CONFIG_TRY(checkSeq(v, "xdp.path_prefixes"));
      x.path_prefixes.clear();
      for (size_t i = 0; i < v.size(); ++i) {
        std::string p;
        IG_CONFIG_TRY(readString(v[i], at("xdp.path_prefixes", i), p));
        if (p.empty() || p[0] != '/') {
          return err(at("xdp.path_prefixes", i),
                     fmt::format("path prefix '{}' must start with '/'", p));
        }
        if (!isPrintableToken(p) || p.size() > kMaxPathPrefixLen) {
          return err(at("xdp.path_prefixes", i),
                     fmt::format("invalid path prefix '{}' (at most {} printable characters, no "
                                 "spaces)",
                                 p, kMaxPathPrefixLen));
        }
        x.path_prefixes.push_back(std::move(p));
      }
    }
    if (YAML::Node v = n["http2_max_frame_size"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "xdp.http2_max_frame_size", kMinH2FrameSize, kMaxH2FrameSize,
                               x.http2_max_frame_size));
    }
    IG_CONFIG_TRY(readRateLimit(n["rate_limit"], "xdp.rate_limit", "new connection",
                                x.syn_rate_per_sec, x.syn_burst));
    IG_CONFIG_TRY(readRateLimit(n["request_rate_limit"], "xdp.request_rate_limit", "request",
                                x.request_rate_per_sec, x.request_burst));
    if (YAML::Node v = n["path_classes"]; v.IsDefined()) {
      IG_CONFIG_TRY(checkSeq(v, "xdp.path_classes"));
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string path = at("xdp.path_classes", i);
        IG_CONFIG_TRY(checkMap(v[i], path, {"prefix", "class"}));
        xdp::PathClassRule pc;
        IG_CONFIG_TRY(readString(v[i]["prefix"], join(path, "prefix"), pc.prefix));
        if (pc.prefix.empty() || pc.prefix[0] != '/' || !isPrintableToken(pc.prefix) ||
            pc.prefix.size() > 32) {
          return err(join(path, "prefix"),
                     fmt::format("path prefix '{}' must start with '/' and have at most 32 "
                                 "printable characters",
                                 pc.prefix));
        }
        IG_CONFIG_TRY(readNumber(v[i]["class"], join(path, "class"), 0, 3, pc.cls));
        x.path_classes.push_back(std::move(pc));
      }
    }
    if (YAML::Node v = n["cidr_rules"]; v.IsDefined()) {
      IG_CONFIG_TRY(checkSeq(v, "xdp.cidr_rules"));
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string path = at("xdp.cidr_rules", i);
        IG_CONFIG_TRY(checkMap(v[i], path, {"cidr", "class", "exempt"}));
        xdp::CidrRule r;
        IG_CONFIG_TRY(readString(v[i]["cidr"], join(path, "cidr"), r.cidr));
        if (YAML::Node c = v[i]["class"]; c.IsDefined()) {
          IG_CONFIG_TRY(readNumber(c, join(path, "class"), 0, 3, r.cls));
        }
        if (YAML::Node e = v[i]["exempt"]; e.IsDefined()) {
          IG_CONFIG_TRY(readBool(e, join(path, "exempt"), r.exempt));
        }
        x.cidr_rules.push_back(std::move(r));
      }
    }
    if (YAML::Node v = n["default_class"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "xdp.default_class", 0, 3, x.default_class));
    }
    if (YAML::Node v = n["priority_header"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, "xdp.priority_header", x.priority_header));
    }
    if (YAML::Node v = n["send_rst"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, "xdp.send_rst", x.send_rst));
    }
    if (YAML::Node v = n["track_flows"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, "xdp.track_flows", x.track_flows));
    }
    if (YAML::Node v = n["reject_mid_stream"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, "xdp.reject_mid_stream", x.reject_mid_stream));
    }
    if (YAML::Node v = n["fragments"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNamed(v, "xdp.fragments", "fragment policy", xdp::kFragPolicyNames,
                              x.fragments));
    }
    IG_CONFIG_TRY(readRateLimit(n["rst_rate_limit"], "xdp.rst_rate_limit", "RST",
                                x.rst_rate_per_sec, x.rst_burst));
    if (YAML::Node v = n["source_prefix_v4"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "xdp.source_prefix_v4", 1, 32, x.source_prefix_v4));
    }
    if (YAML::Node v = n["source_prefix_v6"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "xdp.source_prefix_v6", 1, 128, x.source_prefix_v6));
    }
    if (YAML::Node v = n["syn_cookies"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNamed(v, "xdp.syn_cookies", "SYN cookie mode", xdp::kSynCookiesNames,
                              x.syn_cookies));
    }
    if (YAML::Node v = n["tags"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNamed(v, "xdp.tags", "tag placement", xdp::kTagPlacementNames, x.tags));
    }
    if (YAML::Node v = n["busy_poll"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, "xdp.busy_poll", x.busy_poll));
    }
    if (YAML::Node v = n["prefer_busy_poll"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, "xdp.prefer_busy_poll", x.prefer_busy_poll));
    }
    if (YAML::Node v = n["busy_poll_usecs"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "xdp.busy_poll_usecs", 0, 1'000'000, x.busy_poll_usecs));
    }
    if (YAML::Node v = n["busy_poll_budget"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "xdp.busy_poll_budget", 1, 65535, x.busy_poll_budget));
    }
    if (YAML::Node v = n["held_frames"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "xdp.held_frames", 0, 65536, c.afxdp_held_frames));
    }
    if (YAML::Node v = n["held_frames_per_connection"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "xdp.held_frames_per_connection", 0, 65536,
                               c.afxdp_held_frames_per_connection));
    }
    if (YAML::Node v = n["tcp_rcv_buf"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, "xdp.tcp_rcv_buf", 64 * 1024, 16 * 1024 * 1024,
                               c.afxdp_tcp_rcv_buf));
    }
    if (YAML::Node v = n["pin_path"]; v.IsDefined()) {
      IG_CONFIG_TRY(readString(v, "xdp.pin_path", x.pin_path));
      if (!x.pin_path.empty() && x.pin_path[0] != '/') {
        return err("xdp.pin_path", fmt::format("must be an absolute path on a bpffs mount (e.g. "
                                               "/sys/fs/bpf/infergate), got '{}'",
                                               x.pin_path));
      }
    }
    // Restart without a drop (docs/OPERATIONS.md): the program and its pinned maps outlive us.
    if (YAML::Node v = n["keep_attached"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, "xdp.keep_attached", x.keep_attached));
      if (x.keep_attached && x.pin_path.empty()) {
        return err("xdp.keep_attached", "needs xdp.pin_path (the next process finds the maps there)");
      }
    }
    return absl::OkStatus();
  }

  absl::Status readTensors(const YAML::Node& n, const std::string& path,
                           std::vector<backends::TensorSpec>& out) const {
    if (!n.IsDefined() || n.IsNull() || (n.IsSequence() && n.size() == 0)) {
      return err(path, "at least one tensor is required");
    }
    IG_CONFIG_TRY(checkSeq(n, path));
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string tpath = at(path, i);
      const YAML::Node& t = n[i];
      IG_CONFIG_TRY(checkMap(t, tpath, {"name", "datatype", "shape"}));
      backends::TensorSpec spec;
      YAML::Node name = t["name"];
      if (!name.IsDefined()) return err(join(tpath, "name"), "required");
      IG_CONFIG_TRY(readString(name, join(tpath, "name"), spec.name));
      if (!isPrintableToken(spec.name) || spec.name.size() > kMaxNameLen) {
        return err(join(tpath, "name"),
                   fmt::format("invalid tensor name '{}' (1 to {} printable characters, no "
                               "spaces)",
                               spec.name, kMaxNameLen));
      }
      for (size_t j = 0; j < out.size(); ++j) {
        if (out[j].name == spec.name) {
          return err(join(tpath, "name"),
                     fmt::format("duplicate name '{}' (also {})", spec.name, at(path, j)));
        }
      }
      YAML::Node dt = t["datatype"];
      if (!dt.IsDefined()) return err(join(tpath, "datatype"), "required");
      std::string dts;
      IG_CONFIG_TRY(readString(dt, join(tpath, "datatype"), dts));
      std::optional<backends::DataType> dtype = backends::parseDataType(dts);
      if (!dtype) {
        std::string known;
        for (int k = 0; k < backends::kNumDataTypes; ++k) {
          if (k) known += ", ";
          known += backends::dataTypeName(static_cast<backends::DataType>(k));
        }
        return err(join(tpath, "datatype"),
                   fmt::format("unknown datatype '{}' (expected one of {})", dts, known));
      }
      spec.dtype = *dtype;
      YAML::Node shape = t["shape"];
      if (!shape.IsDefined()) {
        return err(join(tpath, "shape"), "required (a list of dimensions, -1 for a variable one)");
      }
      IG_CONFIG_TRY(checkSeq(shape, join(tpath, "shape")));
      for (size_t d = 0; d < shape.size(); ++d) {
        const std::string dpath = at(join(tpath, "shape"), d);
        int64_t dim = 0;
        IG_CONFIG_TRY(readInt(shape[d], dpath, std::numeric_limits<int64_t>::min(),
                              std::numeric_limits<int64_t>::max(), dim));
        if (dim < -1) {
          return err(dpath,
                     fmt::format("invalid dimension {} (use -1 for a variable dimension)", dim));
        }
        spec.shape.push_back(dim);
      }
      out.push_back(std::move(spec));
    }
    return absl::OkStatus();
  }

  absl::Status readModels(const YAML::Node& n, Config& c) const {
    if (!n.IsDefined() || n.IsNull() || (n.IsSequence() && n.size() == 0)) {
      return err("models", "at least one model is required");
    }
    IG_CONFIG_TRY(checkSeq(n, "models"));
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string path = at("models", i);
      const YAML::Node& m = n[i];
      IG_CONFIG_TRY(checkMap(
          m, path,
          {"name", "version", "backend", "max_batch_size", "inputs", "outputs", "identity",
           "dynamic_batching", "triton", "tfserving"}));
      backends::ModelConfig mc;
      YAML::Node name = m["name"];
      if (!name.IsDefined()) return err(join(path, "name"), "required");
      IG_CONFIG_TRY(readString(name, join(path, "name"), mc.name));
      if (!isUrlSafeName(mc.name)) {
        return err(join(path, "name"),
                   fmt::format("invalid model name '{}' (1 to {} of A-Z a-z 0-9 _ . -, not '.' "
                               "or '..')",
                               mc.name, kMaxNameLen));
      }
      if (YAML::Node v = m["version"]; v.IsDefined()) {
        IG_CONFIG_TRY(readString(v, join(path, "version"), mc.version));
        if (!isUrlSafeName(mc.version)) {
          return err(join(path, "version"),
                     fmt::format("invalid version '{}' (1 to {} of A-Z a-z 0-9 _ . -, e.g. 1)",
                                 mc.version, kMaxNameLen));
        }
      }
      if (YAML::Node v = m["backend"]; v.IsDefined()) {
        IG_CONFIG_TRY(readString(v, join(path, "backend"), mc.backend));
        if (mc.backend != "identity" && mc.backend != "triton" && mc.backend != "tfserving") {
          return err(join(path, "backend"), fmt::format("unknown backend '{}' (known backends: {})",
                                                        mc.backend, kKnownBackends));
        }
      }
      mc.platform = "infergate_" + mc.backend;
      for (std::string_view section : {"identity", "triton", "tfserving"}) {
        if (m[std::string(section)].IsDefined() && section != mc.backend) {
          return err(join(path, section),
                     fmt::format("settings for backend '{}' but the model's backend is '{}'",
                                 section, mc.backend));
        }
      }
      if (mc.backend == "triton" || mc.backend == "tfserving") {
        YAML::Node r = m[mc.backend];
        if (!r.IsDefined()) {
          return err(join(path, mc.backend),
                     fmt::format("backend {} needs this section with at least `endpoints: "
                                 "[host:port, ...]`",
                                 mc.backend));
        }
        auto remote = std::make_shared<backends::RemoteBackendConfig>();
        IG_CONFIG_TRY(readRemote(r, join(path, mc.backend), mc.backend, *remote));
        mc.remote = std::move(remote);
      }
      if (YAML::Node v = m["max_batch_size"]; v.IsDefined()) {
        IG_CONFIG_TRY(
            readNumber(v, join(path, "max_batch_size"), 0, kMaxBatchSize, mc.max_batch_size));
      }
      IG_CONFIG_TRY(readTensors(m["inputs"], join(path, "inputs"), mc.inputs));
      IG_CONFIG_TRY(readTensors(m["outputs"], join(path, "outputs"), mc.outputs));
      if (YAML::Node id = m["identity"]; id.IsDefined()) {
        const std::string ipath = join(path, "identity");
        IG_CONFIG_TRY(checkMap(id, ipath, {"fixed_us", "per_item_us"}));
        if (YAML::Node v = id["fixed_us"]; v.IsDefined()) {
          IG_CONFIG_TRY(readNumber(v, join(ipath, "fixed_us"), 0, kMaxCostUs, mc.cost_fixed_us));
        }
        if (YAML::Node v = id["per_item_us"]; v.IsDefined()) {
          IG_CONFIG_TRY(
              readNumber(v, join(ipath, "per_item_us"), 0, kMaxCostUs, mc.cost_per_item_us));
        }
      }
      if (YAML::Node v = m["dynamic_batching"]; v.IsDefined()) {
        backends::BatchingConfig bc;
        IG_CONFIG_TRY(readBatching(v, join(path, "dynamic_batching"), mc.max_batch_size, bc));
        if (mc.remote && !(v.IsMap() && v["max_inflight_batches"].IsDefined())) {
          // Remote pools run batches in parallel: as many as the endpoints take.
          bc.max_inflight_batches =
              static_cast<uint32_t>(endpointSlots(*mc.remote) * mc.remote->max_concurrency);
        }
        mc.dynamic_batching = std::move(bc);
      } else if (mc.max_batch_size > 0) {
        // Batching is on by default for models that take a batch dimension (Triton's defaults:
        // largest batch available at once, no delay); `dynamic_batching: {enabled: false}` turns
        // it off.
        mc.dynamic_batching = backends::BatchingConfig{};
        if (mc.remote) {
          mc.dynamic_batching->max_inflight_batches =
              static_cast<uint32_t>(endpointSlots(*mc.remote) * mc.remote->max_concurrency);
        }
      }
      if (mc.backend == "identity") IG_CONFIG_TRY(checkIdentity(mc, path));
      for (size_t j = 0; j < c.models.size(); ++j) {
        if (c.models[j].name == mc.name && c.models[j].version == mc.version) {
          return err(path, fmt::format("duplicate model '{}' version '{}' (also models[{}])",
                                       mc.name, mc.version, j));
        }
      }
      c.models.push_back(std::move(mc));
    }
    return absl::OkStatus();
  }

  absl::Status readQueuePolicy(const YAML::Node& n, const std::string& path,
                               backends::QueuePolicy& out) const {
    IG_CONFIG_TRY(checkMap(n, path, {"max_queue_size", "default_timeout_us",
                                     "allow_timeout_override", "timeout_action"}));
    if (YAML::Node v = n["max_queue_size"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "max_queue_size"), 0, 1 << 24, out.max_queue_size));
    }
    if (YAML::Node v = n["default_timeout_us"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "default_timeout_us"), 0, 3'600'000'000LL,
                               out.default_timeout_us));
    }
    if (YAML::Node v = n["allow_timeout_override"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, join(path, "allow_timeout_override"), out.allow_timeout_override));
    }
    if (YAML::Node v = n["timeout_action"]; v.IsDefined()) {
      std::string a;
      IG_CONFIG_TRY(readChoice(v, join(path, "timeout_action"), "timeout action",
                               {"REJECT", "DELAY"}, a));
      out.timeout_action =
          a == "DELAY" ? backends::TimeoutAction::kDelay : backends::TimeoutAction::kReject;
    }
    return absl::OkStatus();
  }

  absl::Status readBatching(const YAML::Node& n, const std::string& path, int max_batch_size,
                            backends::BatchingConfig& out) const {
    if (n.IsNull()) return absl::OkStatus();  // `dynamic_batching:` alone = defaults
    IG_CONFIG_TRY(checkMap(n, path, {"enabled", "preferred_batch_sizes", "max_queue_delay_us",
                                     "priority_levels", "default_priority_level",
                                     "default_queue_policy", "priority_queue_policy",
                                     "max_total_queue_size", "overload_status",
                                     "max_inflight_batches", "variable_input_buffer_bytes"}));
    if (YAML::Node v = n["enabled"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, join(path, "enabled"), out.enabled));
    }
    if (YAML::Node v = n["preferred_batch_sizes"]; v.IsDefined()) {
      const std::string p = join(path, "preferred_batch_sizes");
      IG_CONFIG_TRY(checkSeq(v, p));
      if (v.size() > 0 && max_batch_size == 0) {
        return err(p, "needs max_batch_size > 0");
      }
      for (size_t i = 0; i < v.size(); ++i) {
        int size = 0;
        IG_CONFIG_TRY(readNumber(v[i], at(p, i), 1, std::max(1, max_batch_size), size));
        out.preferred_batch_sizes.push_back(size);
      }
    }
    if (YAML::Node v = n["max_queue_delay_us"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "max_queue_delay_us"), 0, 60'000'000,
                               out.max_queue_delay_us));
    }
    if (YAML::Node v = n["priority_levels"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "priority_levels"), 1, 64, out.priority_levels));
    }
    if (YAML::Node v = n["default_priority_level"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "default_priority_level"), 1, out.priority_levels,
                               out.default_priority_level));
    }
    if (YAML::Node v = n["default_queue_policy"]; v.IsDefined()) {
      IG_CONFIG_TRY(readQueuePolicy(v, join(path, "default_queue_policy"),
                                    out.default_queue_policy));
    }
    if (YAML::Node v = n["priority_queue_policy"]; v.IsDefined()) {
      const std::string p = join(path, "priority_queue_policy");
      if (!v.IsMap()) return err(p, fmt::format("expected a mapping, got {}", describe(v)));
      for (auto it = v.begin(); it != v.end(); ++it) {
        uint32_t level = 0;
        IG_CONFIG_TRY(readNumber(it->first, p, 1, out.priority_levels, level));
        const std::string lp = join(p, it->first.Scalar());
        if (out.priority_queue_policy.count(level)) return err(lp, "duplicate level");
        backends::QueuePolicy q = out.default_queue_policy;
        IG_CONFIG_TRY(readQueuePolicy(it->second, lp, q));
        out.priority_queue_policy[level] = q;
      }
    }
    if (YAML::Node v = n["max_total_queue_size"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "max_total_queue_size"), 0, 1 << 24,
                               out.max_total_queue_size));
    }
    if (YAML::Node v = n["overload_status"]; v.IsDefined()) {
      const std::string p = join(path, "overload_status");
      IG_CONFIG_TRY(readNumber(v, p, 429, 503, out.overload_status));
      if (out.overload_status != 429 && out.overload_status != 503) {
        return err(p, fmt::format("must be 503 or 429, got {}", out.overload_status));
      }
    }
    if (YAML::Node v = n["max_inflight_batches"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "max_inflight_batches"), 1, 64,
                               out.max_inflight_batches));
    }
    if (YAML::Node v = n["variable_input_buffer_bytes"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "variable_input_buffer_bytes"), 64, 1LL << 32,
                               out.variable_input_buffer_bytes));
    }
    return absl::OkStatus();
  }

  // Endpoints a remote pool may have: a dns:/// entry counts as dns_max_endpoints.
  static size_t endpointSlots(const backends::RemoteBackendConfig& r) {
    size_t n = 0;
    for (const std::string& ep : r.endpoints) {
      n += backends::isDnsEntry(ep) ? r.dns_max_endpoints : 1;
    }
    return n;
  }

  // models[].triton / models[].tfserving.
  absl::Status readRemote(const YAML::Node& n, const std::string& path, const std::string& backend,
                          backends::RemoteBackendConfig& out) const {
    if (backend == "triton") {
      IG_CONFIG_TRY(checkMap(
          n, path,
          {"endpoints", "model_name", "model_version", "max_concurrency", "channels",
           "health_check_interval_ms", "health_check_timeout_ms", "request_timeout_ms",
           "startup_timeout_ms", "eject_after_failures", "ejection_ms", "shared_memory",
           "cuda_device", "validate_metadata", "max_message_bytes", "metrics_port",
           "metrics_interval_ms", "dns_refresh_ms", "dns_min_refresh_ms", "dns_timeout_ms",
           "dns_server", "dns_max_endpoints", "sequence_idle_timeout_ms", "sequence_max", "sequence_max_per_client",
           "sequence_id_header"}));
    } else {
      IG_CONFIG_TRY(checkMap(
          n, path,
          {"endpoints", "model_name", "model_version", "signature_name", "max_concurrency",
           "channels", "health_check_interval_ms", "health_check_timeout_ms", "request_timeout_ms",
           "startup_timeout_ms", "eject_after_failures", "ejection_ms", "validate_metadata",
           "max_message_bytes", "dns_refresh_ms", "dns_min_refresh_ms", "dns_timeout_ms",
           "dns_server", "dns_max_endpoints", "sequence_idle_timeout_ms", "sequence_max", "sequence_max_per_client",
           "sequence_id_header"}));
    }
    const std::string epath = join(path, "endpoints");
    YAML::Node eps = n["endpoints"];
    if (!eps.IsDefined() || (eps.IsSequence() && eps.size() == 0)) {
      return err(epath, "at least one endpoint (host:port) is required");
    }
    IG_CONFIG_TRY(checkSeq(eps, epath));
    // Triton: an endpoint is "host:port" or {address: "host:port", metrics_url: "http://..."};
    // metrics_port gives the others http://<host>:<metrics_port>/metrics.
    int64_t metrics_port = 0;
    if (YAML::Node v = n["metrics_port"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "metrics_port"), 1, 65535, metrics_port));
    }
    for (size_t i = 0; i < eps.size(); ++i) {
      std::string ep;
      std::string metrics_url;
      if (backend == "triton" && eps[i].IsMap()) {
        const std::string ipath = at(epath, i);
        IG_CONFIG_TRY(checkMap(eps[i], ipath, {"address", "metrics_url"}));
        if (!eps[i]["address"].IsDefined()) {
          return err(ipath, "address (host:port) is required");
        }
        IG_CONFIG_TRY(readString(eps[i]["address"], join(ipath, "address"), ep));
        if (YAML::Node u = eps[i]["metrics_url"]; u.IsDefined()) {
          const std::string upath = join(ipath, "metrics_url");
          IG_CONFIG_TRY(readString(u, upath, metrics_url));
          if (absl::StatusOr<backends::HttpUrl> url = backends::parseHttpUrl(metrics_url);
              !url.ok()) {
            return err(upath, std::string(url.status().message()));
          }
        }
      } else {
        IG_CONFIG_TRY(readString(eps[i], at(epath, i), ep));
      }
      if (backends::isDnsEntry(ep)) {  // dns:///name:port (backends/dns_resolver.h)
        if (absl::StatusOr<backends::DnsTargetSpec> d = backends::parseDnsEntry(ep); !d.ok()) {
          return err(at(epath, i), std::string(d.status().message()));
        }
        if (!metrics_url.empty()) {
          return err(at(epath, i), "metrics_url is not supported for a dns:/// entry");
        }
        for (const std::string& prev : out.endpoints) {
          if (prev == ep) return err(at(epath, i), fmt::format("duplicate endpoint '{}'", ep));
        }
        out.endpoints.push_back(std::move(ep));
        continue;
      }
      const size_t colon = ep.rfind(':');
      int64_t port = 0;
      auto [p, ec] = colon == std::string::npos
                         ? std::from_chars(ep.data(), ep.data(), port)
                         : std::from_chars(ep.data() + colon + 1, ep.data() + ep.size(), port);
      if (colon == std::string::npos || colon == 0 || ec != std::errc() ||
          p != ep.data() + ep.size() || port < 1 || port > 65535) {
        return err(at(epath, i), fmt::format("invalid endpoint '{}' (expected host:port, e.g. "
                                             "127.0.0.1:8001 or [::1]:8001)",
                                             ep));
      }
      for (const std::string& prev : out.endpoints) {
        if (prev == ep) return err(at(epath, i), fmt::format("duplicate endpoint '{}'", ep));
      }
      if (metrics_url.empty() && metrics_port != 0) {
        metrics_url = fmt::format("http://{}:{}/metrics", ep.substr(0, colon), metrics_port);
        if (absl::StatusOr<backends::HttpUrl> url = backends::parseHttpUrl(metrics_url);
            !url.ok()) {  // e.g. a host name that is not a URL host
          return err(join(path, "metrics_port"),
                     fmt::format("endpoint '{}': {}", ep, std::string(url.status().message())));
        }
      }
      if (!metrics_url.empty()) {
        out.metrics_urls.resize(out.endpoints.size());
        out.metrics_urls.push_back(std::move(metrics_url));
      }
      out.endpoints.push_back(std::move(ep));
    }
    if (YAML::Node v = n["model_name"]; v.IsDefined()) {
      IG_CONFIG_TRY(readString(v, join(path, "model_name"), out.model_name));
    }
    if (YAML::Node v = n["model_version"]; v.IsDefined()) {
      IG_CONFIG_TRY(readString(v, join(path, "model_version"), out.model_version));
      if (backend == "tfserving" && !out.model_version.empty() &&
          (out.model_version.size() > 18 ||
           out.model_version.find_first_not_of("0123456789") != std::string::npos)) {
        return err(join(path, "model_version"),
                   fmt::format("TF Serving versions are numbers, got '{}'", out.model_version));
      }
    }
    if (YAML::Node v = n["signature_name"]; v.IsDefined()) {
      IG_CONFIG_TRY(readString(v, join(path, "signature_name"), out.signature_name));
    }
    if (YAML::Node v = n["max_concurrency"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "max_concurrency"), 1, 4096, out.max_concurrency));
    }
    if (YAML::Node v = n["channels"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "channels"), 1, 64, out.channels));
    }
    if (YAML::Node v = n["health_check_interval_ms"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "health_check_interval_ms"), 10, kMaxMs,
                               out.health_check_interval_ms));
    }
    if (YAML::Node v = n["health_check_timeout_ms"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "health_check_timeout_ms"), 1, kMaxMs,
                               out.health_check_timeout_ms));
    }
    if (YAML::Node v = n["request_timeout_ms"]; v.IsDefined()) {
      IG_CONFIG_TRY(
          readNumber(v, join(path, "request_timeout_ms"), 0, kMaxMs, out.request_timeout_ms));
    }
    if (YAML::Node v = n["startup_timeout_ms"]; v.IsDefined()) {
      IG_CONFIG_TRY(
          readNumber(v, join(path, "startup_timeout_ms"), 0, kMaxMs, out.startup_timeout_ms));
    }
    if (YAML::Node v = n["eject_after_failures"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "eject_after_failures"), 0, 1000000,
                               out.eject_after_failures));
    }
    if (YAML::Node v = n["ejection_ms"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "ejection_ms"), 1, kMaxMs, out.ejection_ms));
    }
    if (YAML::Node v = n["max_message_bytes"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "max_message_bytes"), 4096,
                               std::numeric_limits<int32_t>::max(), out.max_message_bytes));
    }
    if (YAML::Node v = n["validate_metadata"]; v.IsDefined()) {
      IG_CONFIG_TRY(readBool(v, join(path, "validate_metadata"), out.validate_metadata));
    }
    if (YAML::Node v = n["shared_memory"]; v.IsDefined()) {
      std::string kind;
      IG_CONFIG_TRY(readChoice(v, join(path, "shared_memory"), "shared memory kind",
                               {"none", "system", "cuda"}, kind));
      out.shared_memory = kind == "system" ? backends::SharedMemoryKind::kSystem
                          : kind == "cuda" ? backends::SharedMemoryKind::kCuda
                                           : backends::SharedMemoryKind::kNone;
    }
    if (YAML::Node v = n["metrics_interval_ms"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "metrics_interval_ms"), 10, 60000,
                               out.metrics_interval_ms));
    }
    // dns:/// entries and sequence affinity (docs/BACKENDS.md).
    if (YAML::Node v = n["dns_refresh_ms"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "dns_refresh_ms"), 10, kMaxMs, out.dns_refresh_ms));
    }
    if (YAML::Node v = n["dns_min_refresh_ms"]; v.IsDefined()) {
      IG_CONFIG_TRY(
          readNumber(v, join(path, "dns_min_refresh_ms"), 10, kMaxMs, out.dns_min_refresh_ms));
    }
    out.dns_min_refresh_ms = std::min(out.dns_min_refresh_ms, out.dns_refresh_ms);
    if (YAML::Node v = n["dns_timeout_ms"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "dns_timeout_ms"), 10, 60000, out.dns_timeout_ms));
    }
    if (YAML::Node v = n["dns_server"]; v.IsDefined()) {
      IG_CONFIG_TRY(readString(v, join(path, "dns_server"), out.dns_server));
      if (absl::StatusOr<std::unique_ptr<backends::DnsResolver>> r =
              backends::DnsResolver::create({out.dns_server, out.dns_timeout_ms});
          !r.ok()) {
        return err(join(path, "dns_server"), std::string(r.status().message()));
      }
    }
    if (YAML::Node v = n["dns_max_endpoints"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "dns_max_endpoints"), 1, 1024, out.dns_max_endpoints));
    }
    if (YAML::Node v = n["sequence_idle_timeout_ms"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "sequence_idle_timeout_ms"), 1, kMaxMs,
                               out.sequence_idle_timeout_ms));
    }
    if (YAML::Node v = n["sequence_id_header"]; v.IsDefined()) {
      IG_CONFIG_TRY(readString(v, join(path, "sequence_id_header"), out.sequence_id_header));
      for (char& ch : out.sequence_id_header) {
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_')) {
          return err(join(path, "sequence_id_header"),
                     fmt::format("'{}' is not a header name (letters, digits, '-', '_')",
                                 out.sequence_id_header));
        }
      }
    }
    if (YAML::Node v = n["sequence_max"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "sequence_max"), 1, 10000000, out.sequence_max));
    }
    if (YAML::Node v = n["sequence_max_per_client"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "sequence_max_per_client"), 0, 10000000,
                               out.sequence_max_per_client));
    }
    if (YAML::Node v = n["cuda_device"]; v.IsDefined()) {
      IG_CONFIG_TRY(readNumber(v, join(path, "cuda_device"), 0, 1023, out.cuda_device));
      if (out.shared_memory != backends::SharedMemoryKind::kCuda) {
        return err(join(path, "cuda_device"), "only used with shared_memory: cuda");
      }
    }
    return absl::OkStatus();
  }

  // The identity backend returns its inputs as outputs, position by position.
  absl::Status checkIdentity(const backends::ModelConfig& mc, const std::string& path) const {
    if (mc.inputs.size() != mc.outputs.size()) {
      return err(join(path, "outputs"),
                 fmt::format("the identity backend needs one output per input ({} inputs, {} "
                             "outputs)",
                             mc.inputs.size(), mc.outputs.size()));
    }
    for (size_t i = 0; i < mc.inputs.size(); ++i) {
      const backends::TensorSpec& in = mc.inputs[i];
      const backends::TensorSpec& out = mc.outputs[i];
      const std::string opath = at(join(path, "outputs"), i);
      if (in.dtype != out.dtype) {
        return err(join(opath, "datatype"),
                   fmt::format("the identity backend needs the datatype of inputs[{}] ('{}' is "
                               "{}), got {}",
                               i, in.name, backends::dataTypeName(in.dtype),
                               backends::dataTypeName(out.dtype)));
      }
      if (in.shape != out.shape) {
        return err(join(opath, "shape"),
                   fmt::format("the identity backend needs the shape of inputs[{}] ('{}' is {}), "
                               "got {}",
                               i, in.name, shapeText(in.shape), shapeText(out.shape)));
      }
    }
    return absl::OkStatus();
  }

  std::string source_;
};

#undef IG_CONFIG_TRY

}  // namespace

absl::StatusOr<Config> loadConfigString(std::string_view yaml, std::string_view source_name) {
  return Loader(std::string(source_name)).load(yaml);
}

absl::StatusOr<Config> loadConfigFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(fmt::format("{}: cannot read file: {}", path, std::strerror(errno)));
  }
  std::string text;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      text.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      int e = errno;  // close() may overwrite errno
      ::close(fd);
      return absl::NotFoundError(fmt::format("{}: cannot read file: {}", path, std::strerror(e)));
    }
  }
  ::close(fd);
  return loadConfigString(text, path);
}

absl::StatusOr<TenantsConfig> parseTenantsSection(std::string_view yaml,
                                                  std::string_view source) {
  return Loader(std::string(source)).tenants(yaml);
}

std::string_view defaultConfigYaml() { return kDefaultConfigYaml; }

}  // namespace infergate::config
