// The control plane of infergate's fault injector (impair.bpf.c): attach it to a clsact hook
// of an interface, change its probabilities at run time, read its counters, detach it.
//
// Each (interface, hook) attachment is one loaded program with its own maps (configuration,
// packet sequence, held frame, counters). The maps are pinned under
// <pin_dir>/<ifname>-<egress|ingress>/ so later processes (configure, counters, detach) find
// them; the cls_bpf filter keeps the program attached after the attaching process exits.
// All functions act on the calling thread's network namespace. Not thread-safe; one caller.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/impair/impair_shared.h"

namespace infergate::impair {

enum class Hook { kEgress, kIngress };

inline constexpr char kDefaultPinDir[] = "/sys/fs/bpf/infergate-impair";

// Probabilities in [0, 1]; the program decides packet i from (seed, i) alone.
struct ImpairConfig {
  uint64_t seed = 1;
  double drop = 0;
  double duplicate = 0;
  double reorder = 0;
  uint32_t l4_proto = 0;  // 0: every IPv4/IPv6 packet; else only this IP protocol (6 = TCP)
  bool enabled = true;
};

// Partial update for configure(): fields left empty keep their current value.
struct ImpairUpdate {
  std::optional<uint64_t> seed;
  std::optional<double> drop, duplicate, reorder;
  std::optional<uint32_t> l4_proto;
  std::optional<bool> enabled;
  bool reset = false;  // zero the counters and the packet sequence (decisions restart at 0)
};

struct ImpairCounters {
  std::array<uint64_t, IG_IMP_NUM_COUNTERS> values{};  // summed over CPUs
  uint64_t operator[](ig_impair_counter c) const { return values[c]; }
};

// Counter names as printed by the CLI ("packets", "dropped", ...), index = ig_impair_counter.
const char* counterName(int counter);
const char* hookName(Hook hook);

// p in [0, 1] -> the program's threshold (p * 2^32; 1 -> IG_IMPAIR_ALWAYS). Out of range or
// NaN -> InvalidArgument.
absl::StatusOr<uint32_t> probabilityToThreshold(double p);
ig_impair_config toShared(const ImpairConfig& cfg);  // probabilities must be valid

// <pin_dir>/<ifname>-<hook>
std::string attachmentDir(const std::string& pin_dir, const std::string& ifname, Hook hook);

// Loads a fresh program (new maps, sequence at 0, counters at 0) with `cfg`, pins its maps
// and attaches it to `ifname`'s clsact `hook` (creating the clsact qdisc if needed), replacing
// an earlier infergate-impair filter there.
absl::Status attach(const std::string& ifname, Hook hook, const ImpairConfig& cfg,
                    const std::string& pin_dir = kDefaultPinDir);

// Removes the filter and the pins. NotFound when neither existed.
absl::Status detach(const std::string& ifname, Hook hook,
                    const std::string& pin_dir = kDefaultPinDir);

// Changes the running configuration of an attachment (through its pinned maps).
absl::Status configure(const std::string& ifname, Hook hook, const ImpairUpdate& update,
                       const std::string& pin_dir = kDefaultPinDir);

absl::StatusOr<ig_impair_config> readConfig(const std::string& ifname, Hook hook,
                                            const std::string& pin_dir = kDefaultPinDir);
absl::StatusOr<ImpairCounters> readCounters(const std::string& ifname, Hook hook,
                                            const std::string& pin_dir = kDefaultPinDir);

}  // namespace infergate::impair
