#pragma once
// Configuration reload (docs/OPERATIONS.md "Reload"): what changed between the running
// configuration and a new file, key by key, and whether each change can be applied live.
//
// The difference is taken on the YAML documents (each section, each xdp:/logging: key, each
// model by name and version), so a key added to the schema later is compared without being
// listed here; a key not known to be live is refused. Both texts must have passed
// config::loadConfigString (the typed configs are used for the mode and the models).
//
// A reload is all or nothing: one refused key refuses the whole reload and nothing is applied
// (Server::reload). Pure functions, no state: unit-tested in tests/unit/app/reload_test.cc.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"

namespace infergate::app {

struct ReloadRefusal {
  std::string key;     // "listeners", "reactors", "xdp.interface", "models.bert.name"...
  std::string reason;  // one sentence: why it cannot change live
};

struct ReloadPlan {
  // Changed keys that apply live, in the order of the new file's sections: "logging.level",
  // "xdp.cidr_rules", "models.bert (added)", "models.old (removed)", "models.m (changed)",
  // "models.t.endpoints".
  std::vector<std::string> applied;
  std::vector<ReloadRefusal> refused;

  // What applying does.
  std::vector<std::string> models_added;  // model keys: name, or name@version when not "1"
  std::vector<std::string> models_removed;
  std::vector<std::string> models_changed;  // replaced: removed and added in one publication
  // Remote models whose only change is their endpoint list (triton.endpoints /
  // tfserving.endpoints): applied to the running model (Model::setEndpoints: removed endpoints
  // drain, added ones are probed first), not rebuilt. Applied key "models.NAME.endpoints".
  // Rebuilt ("changed") instead when the change moves the batcher's in-flight limit (derived
  // from the endpoint count when not set) or the model has per-endpoint metrics URLs.
  std::vector<std::string> models_endpoints;
  bool log_level = false;
  bool xdp_program = false;  // xdp.* rules or priority: XdpFilter::reconfigure (xdp-filter, afxdp)
  // tenants: a new TenantLimiter published (applied key "tenants"); priority: a new
  // ClientPriorityPolicy published (applied key "priority"). frontend/tenants.h,
  // frontend/client_priority.h.
  bool tenants = false;
  bool priority = false;

  bool ok() const { return refused.empty(); }
  bool empty() const { return applied.empty() && refused.empty(); }
  // "listeners: ...; reactors: ..." (every refusal, for the log and the admin answer).
  std::string refusalMessage() const;
};

// The model key of a model: its name, plus "@version" when the version is not "1".
std::string modelKey(const backends::ModelConfig& m);

// The plan from `running` (loaded from running_yaml) to `next` (from next_yaml).
// INVALID_ARGUMENT when a text is not YAML (the loader accepted it, so only on misuse).
absl::StatusOr<ReloadPlan> planReload(const config::Config& running, std::string_view running_yaml,
                                      const config::Config& next, std::string_view next_yaml);

// The text of a configuration file (NOT_FOUND naming the file when it cannot be read).
absl::StatusOr<std::string> readConfigText(const std::string& path);

// FNV-1a 64 of a configuration text, as 16 hex digits (infergate_config_info{hash}).
std::string configHash(std::string_view text);

}  // namespace infergate::app
