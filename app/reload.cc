#include "app/reload.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "backends/pool.h"
#include "fmt/format.h"
#include "yaml-cpp/yaml.h"

namespace infergate::app {

namespace {

// A node's canonical text ("" when absent or null): two nodes are the same key value when
// their texts are equal (comments and formatting do not count, key order does).
std::string canonical(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return {};
  YAML::Emitter e;
  e << n;
  return e.c_str();
}

// n[key] when n is a map holding key, else a null node (never throws, never inserts).
YAML::Node child(const YAML::Node& n, const std::string& key) {
  if (!n.IsDefined() || !n.IsMap()) return YAML::Node();
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (it->first.as<std::string>() == key) return it->second;
  }
  return YAML::Node();
}

// The keys of a map node in order (none when not a map).
std::vector<std::string> keysOf(const YAML::Node& n) {
  std::vector<std::string> out;
  if (!n.IsMap()) return out;
  for (auto it = n.begin(); it != n.end(); ++it) out.push_back(it->first.as<std::string>());
  return out;
}

// new's keys in order, then old's keys that new lacks.
std::vector<std::string> unionKeys(const YAML::Node& old_n, const YAML::Node& new_n) {
  std::vector<std::string> out = keysOf(new_n);
  for (const std::string& k : keysOf(old_n)) {
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  }
  return out;
}

// Why each section that is set up once at start-up cannot change live.
const std::map<std::string, std::string, std::less<>>& startupReasons() {
  static const auto* m = new std::map<std::string, std::string, std::less<>>{
      {"mode", "the serving mode is chosen at start-up"},
      {"reactors", "the reactor threads are started at start-up"},
      {"cpus", "the reactor threads are pinned at start-up"},
      {"listeners", "listening sockets are opened at start-up, before privileges are dropped"},
      {"admin", "the admin listener is opened at start-up, before privileges are dropped"},
      {"limits", "the reactors and sessions take their limits at start-up"},
      {"dpdk", "the EAL and the DPDK port are set up at start-up"},
      {"security", "privileges are dropped at start-up and cannot be regained"},
      {"gpu", "the GPU watch attaches its probes at start-up"},
  };
  return *m;
}

// xdp: keys XdpFilter::reconfigure applies live (the program's rules, written into its rule
// maps in place: no new program, no privilege). The others (the interface, the attach mode,
// the pins, the map sizes, the RST transmit, afxdp's socket, cookie and TCP knobs) are start-up
// only.
bool xdpLive(std::string_view key) {
  static const std::set<std::string, std::less<>> kLive = {
      "methods",         "path_prefixes",      "http2_max_frame_size",
      "rate_limit",      "request_rate_limit", "path_classes",
      "cidr_rules",      "default_class",      "priority_header",
      "send_rst",        "track_flows",        "reject_mid_stream",
      "fragments",       "rst_rate_limit",     "source_prefix_v4",
      "source_prefix_v6"};
  return kLive.count(key) != 0;
}

void refuseSection(ReloadPlan& plan, const std::string& section, const YAML::Node& o,
                   const YAML::Node& n) {
  const auto& reasons = startupReasons();
  const auto it = reasons.find(section);
  const std::string reason =
      it != reasons.end() ? it->second : "not a key that can change without a restart";
  // Maps are compared key by key so the refusal names the key; anything else as a whole.
  if ((o.IsMap() || !o.IsDefined() || o.IsNull()) && (n.IsMap() || !n.IsDefined() || n.IsNull()) &&
      (o.IsMap() || n.IsMap())) {
    for (const std::string& k : unionKeys(o, n)) {
      if (canonical(child(o, k)) != canonical(child(n, k)))
        plan.refused.push_back({section + "." + k, reason});
    }
    return;
  }
  plan.refused.push_back({section, reason});
}

// A model's YAML text with its triton:/tfserving: endpoints left out.
std::string withoutEndpoints(const YAML::Node& model) {
  if (!model.IsDefined() || !model.IsMap()) return canonical(model);
  YAML::Node copy = YAML::Clone(model);
  for (const char* section : {"triton", "tfserving"}) {
    YAML::Node remote = child(copy, section);
    if (remote.IsMap()) remote.remove("endpoints");
  }
  return canonical(copy);
}

// The batcher's in-flight batch limit of a remote model (as backends::createRemoteModel sets it).
uint64_t inflightLimit(const backends::ModelConfig& m) {
  if (m.dynamic_batching && m.dynamic_batching->enabled)
    return m.dynamic_batching->max_inflight_batches;
  return std::max<uint64_t>(
      1, m.remote->endpoints.size() * std::max<uint64_t>(m.remote->max_concurrency, 1));
}

bool hasMetricsUrls(const backends::RemoteBackendConfig& r) {
  for (const std::string& u : r.metrics_urls) {
    if (!u.empty()) return true;
  }
  return false;
}

// Whether the only difference between two versions of a model (the same key) is the remote
// endpoint list, and the running model can take the new list live (Model::setEndpoints).
bool endpointsOnly(const backends::ModelConfig& a, const YAML::Node& an,
                   const backends::ModelConfig& b, const YAML::Node& bn) {
  const bool remote = (a.backend == "triton" || a.backend == "tfserving") &&
                      a.backend == b.backend && a.remote != nullptr && b.remote != nullptr;
  if (!remote || a.remote->endpoints == b.remote->endpoints) return false;
  // Per-endpoint metrics URLs are parallel to the endpoints; the in-flight limit is the
  // batcher's, set when the model is built: either needs a rebuild.
  if (hasMetricsUrls(*a.remote) || hasMetricsUrls(*b.remote)) return false;
  if (inflightLimit(a) != inflightLimit(b)) return false;
  return withoutEndpoints(an) == withoutEndpoints(bn);
}

void planModels(ReloadPlan& plan, const config::Config& running, const YAML::Node& o,
                const config::Config& next, const YAML::Node& n) {
  // models[i] of the typed config is models[i] of the YAML sequence (the loader keeps order).
  auto index = [](const config::Config& c, const YAML::Node& seq) {
    std::vector<std::pair<std::string, std::string>> out;  // key, canonical text
    for (size_t i = 0; i < c.models.size(); ++i) {
      out.emplace_back(modelKey(c.models[i]),
                       seq.IsSequence() && i < seq.size() ? canonical(seq[i]) : std::string());
    }
    return out;
  };
  const auto old_models = index(running, o);
  const auto new_models = index(next, n);
  auto find = [](const auto& list, const std::string& key) -> const std::string* {
    for (const auto& [k, text] : list) {
      if (k == key) return &text;
    }
    return nullptr;
  };
  // A model built after the privilege drop makes system calls the seccomp filter refuses
  // (mlock for pinned batch buffers, prctl(PR_SET_TIMERSLACK) on its dispatcher thread): with
  // errno they fail harmlessly (counted in infergate_seccomp_denied_total); kill would end
  // the process, so such a reload is refused.
  const config::SecurityConfig& sec = running.security;
  const bool kill = sec.drop_privileges && sec.seccomp && sec.seccomp_action == "kill";
  auto build = [&](const std::string& key, const char* what) {
    if (kill) {
      plan.refused.push_back(
          {"models." + key,
           "building a model after the privilege drop makes system calls (mlock, prctl) that "
           "security.seccomp_action: kill would answer by killing infergate; restart"});
      return false;
    }
    plan.applied.push_back("models." + key + what);
    return true;
  };
  auto indexOf = [](const auto& list, const std::string& key) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].first == key) return i;
    }
    return list.size();
  };
  auto nodeAt = [](const YAML::Node& seq, size_t i) {
    return seq.IsSequence() && i < seq.size() ? seq[i] : YAML::Node();
  };
  for (size_t ni = 0; ni < new_models.size(); ++ni) {
    const auto& [key, text] = new_models[ni];
    const std::string* before = find(old_models, key);
    if (before == nullptr) {
      if (build(key, " (added)")) plan.models_added.push_back(key);
    } else if (*before != text) {
      const size_t oi = indexOf(old_models, key);
      if (endpointsOnly(running.models[oi], nodeAt(o, oi), next.models[ni], nodeAt(n, ni))) {
        // Nothing is built: the running model's pool changes its set.
        plan.models_endpoints.push_back(key);
        plan.applied.push_back("models." + key + ".endpoints");
      } else if (build(key, " (changed)")) {
        plan.models_changed.push_back(key);
      }
    }
  }
  for (const auto& [key, text] : old_models) {
    if (find(new_models, key) == nullptr) {
      plan.models_removed.push_back(key);
      plan.applied.push_back("models." + key + " (removed)");
    }
  }
}

}  // namespace

std::string ReloadPlan::refusalMessage() const {
  std::string out;
  for (const ReloadRefusal& r : refused) {
    if (!out.empty()) out += "; ";
    out += r.key + ": " + r.reason;
  }
  return out;
}

std::string modelKey(const backends::ModelConfig& m) {
  return m.version == "1" ? m.name : m.name + "@" + m.version;
}

absl::StatusOr<ReloadPlan> planReload(const config::Config& running, std::string_view running_yaml,
                                      const config::Config& next, std::string_view next_yaml) {
  YAML::Node old_root, new_root;
  try {
    old_root = YAML::Load(std::string(running_yaml));
    new_root = YAML::Load(std::string(next_yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(std::string("reload: not YAML: ") + e.what());
  }
  const YAML::Node& o = old_root;
  const YAML::Node& n = new_root;
  ReloadPlan plan;
  for (const std::string& section : unionKeys(o, n)) {
    const YAML::Node os = child(o, section);
    const YAML::Node ns = child(n, section);
    if (canonical(os) == canonical(ns)) continue;
    if (section == "models") {
      planModels(plan, running, os, next, ns);
    } else if (section == "tenants") {
      // The whole section as one new limiter (frontend/tenants.h TenantLimiters).
      plan.tenants = true;
      plan.applied.push_back("tenants");
    } else if (section == "priority") {
      // from_client and trusted_sources as one new policy (ClientPriorityPolicies). In the
      // other modes an ingress filter (the XDP program; dpdk mode's userspace filter) applies
      // the same rule to the header it reads (its rules' priority_header and the trusted
      // entries of its CIDR rules): rewritten in place with the other XDP rules.
      plan.priority = true;
      plan.xdp_program = running.mode != config::Mode::kSocket;
      plan.applied.push_back("priority");
    } else if (section == "logging") {
      for (const std::string& k : unionKeys(os, ns)) {
        if (canonical(child(os, k)) == canonical(child(ns, k))) continue;
        if (k == "level") {
          plan.log_level = true;
          plan.applied.push_back("logging.level");
        } else {
          plan.refused.push_back({"logging." + k, "the sessions take it at start-up"});
        }
      }
    } else if (section == "xdp") {
      const bool xdp_mode = running.mode == config::Mode::kXdpFilter ||
                            running.mode == config::Mode::kAfXdp ||
                            running.mode == config::Mode::kDpdk;
      for (const std::string& k : unionKeys(os, ns)) {
        if (canonical(child(os, k)) == canonical(child(ns, k))) continue;
        const std::string key = "xdp." + k;
        if (!xdp_mode) {
          plan.applied.push_back(key);  // not used in socket mode: nothing to do
        } else if (!xdpLive(k)) {
          plan.refused.push_back(
              {key, "the XDP program's attachment and its maps' sizes are set at start-up"});
        } else {
          plan.xdp_program = true;
          plan.applied.push_back(key);
        }
      }
    } else {
      refuseSection(plan, section, os, ns);
    }
  }
  return plan;
}

absl::StatusOr<std::string> readConfigText(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) {
    return absl::NotFoundError(fmt::format("{}: cannot read file: {}", path, std::strerror(errno)));
  }
  std::string text;
  char buf[16384];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::NotFoundError(fmt::format("{}: cannot read file", path));
  return text;
}

std::string configHash(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return fmt::format("{:016x}", h);
}

}  // namespace infergate::app
