// infergate-impair: attach, configure, read and detach infergate's fault injector
// (impair.bpf.c) on a clsact hook of an interface. See docs/IMPAIR.md.
#include <bpf/libbpf.h>
#include <netinet/in.h>

#include <cstdarg>
#include <cstring>

#include <cstdio>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "tools/impair/impairer.h"

namespace impair = infergate::impair;

namespace {

int fail(const absl::Status& s) {
  std::fprintf(stderr, "infergate-impair: %s\n", std::string(s.message()).c_str());
  return 1;
}

std::optional<uint32_t> parseProto(const std::string& s) {
  if (s == "any" || s == "ip") return 0;
  if (s == "tcp") return IPPROTO_TCP;
  if (s == "udp") return IPPROTO_UDP;
  if (s == "icmp") return IPPROTO_ICMP;
  if (s == "icmpv6") return IPPROTO_ICMPV6;
  try {
    unsigned long v = std::stoul(s);
    if (v <= 255) return static_cast<uint32_t>(v);
  } catch (...) {
  }
  return std::nullopt;
}

void printCounters(const impair::ImpairCounters& c, bool json) {
  if (json) {
    std::string out = "{";
    for (int i = 0; i < IG_IMP_NUM_COUNTERS; ++i)
      out += fmt::format("{}\"{}\": {}", i ? ", " : "", impair::counterName(i), c.values[i]);
    std::printf("%s}\n", out.c_str());
    return;
  }
  for (int i = 0; i < IG_IMP_NUM_COUNTERS; ++i) std::printf("%-14s %llu\n", impair::counterName(i),
                                                          static_cast<unsigned long long>(c.values[i]));
}

// libbpf's netlink messages for expected outcomes (clsact already there, no filter to
// detach) are noise here; everything else is printed unless quiet.
int libbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  if (level == LIBBPF_DEBUG) return 0;
  char line[1024];
  std::vsnprintf(line, sizeof(line), format, args);
  if (std::strstr(line, "Exclusivity flag on") || std::strstr(line, "Cannot find specified filter chain"))
    return 0;
  return std::fputs(line, stderr);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"infergate-impair: drop, duplicate and reorder packets on an interface (BPF on clsact)"};
  app.require_subcommand(1);
  std::string dev, hook_name = "egress", pin_dir = impair::kDefaultPinDir, proto;
  std::optional<double> drop, dup, reorder;
  std::optional<uint64_t> seed;
  bool json = false, reset = false, disable = false, enable = false;

  auto common = [&](CLI::App* sub) {
    sub->add_option("-d,--dev", dev, "Interface")->required();
    sub->add_option("--hook", hook_name, "clsact hook: egress or ingress")
        ->check(CLI::IsMember({"egress", "ingress"}));
    sub->add_option("--pin-dir", pin_dir, "bpffs directory for the pinned maps");
  };
  auto knobs = [&](CLI::App* sub) {
    sub->add_option("--drop", drop, "Probability of dropping a packet")->check(CLI::Range(0.0, 1.0));
    sub->add_option("--duplicate", dup, "Probability of duplicating a packet")->check(CLI::Range(0.0, 1.0));
    sub->add_option("--reorder", reorder, "Probability of holding a packet back until after the next")
        ->check(CLI::Range(0.0, 1.0));
    sub->add_option("--seed", seed, "Seed: the same seed and packet order give the same decisions");
    sub->add_option("--proto", proto, "Only impair this IP protocol: any, tcp, udp, icmp, icmpv6 or a number");
  };
  CLI::App* attach = app.add_subcommand("attach", "Load a fresh program (counters at 0) and attach it");
  common(attach);
  knobs(attach);
  CLI::App* configure = app.add_subcommand("configure", "Change a running attachment's settings");
  common(configure);
  knobs(configure);
  configure->add_flag("--reset", reset, "Zero the counters and restart the decision sequence");
  configure->add_flag("--disable", disable, "Pass everything untouched");
  configure->add_flag("--enable", enable, "Impair again after --disable");
  CLI::App* counters = app.add_subcommand("counters", "Print an attachment's counters");
  common(counters);
  counters->add_flag("--json", json, "One JSON object");
  CLI::App* show = app.add_subcommand("show", "Print an attachment's configuration");
  common(show);
  CLI::App* detach = app.add_subcommand("detach", "Remove the filter and its pinned maps");
  common(detach);
  CLI11_PARSE(app, argc, argv);
  libbpf_set_print(libbpfPrint);

  impair::Hook hook = hook_name == "ingress" ? impair::Hook::kIngress : impair::Hook::kEgress;
  std::optional<uint32_t> l4;
  if (!proto.empty()) {
    l4 = parseProto(proto);
    if (!l4) return fail(absl::InvalidArgumentError(fmt::format("--proto {}: not any/tcp/udp/icmp/icmpv6 or 0-255", proto)));
  }

  if (attach->parsed()) {
    impair::ImpairConfig cfg;
    cfg.seed = seed.value_or(1);
    cfg.drop = drop.value_or(0);
    cfg.duplicate = dup.value_or(0);
    cfg.reorder = reorder.value_or(0);
    cfg.l4_proto = l4.value_or(0);
    if (auto s = impair::attach(dev, hook, cfg, pin_dir); !s.ok()) return fail(s);
    std::printf("attached to %s %s (drop %g, duplicate %g, reorder %g, seed %llu)\n", dev.c_str(),
                impair::hookName(hook), cfg.drop, cfg.duplicate, cfg.reorder,
                static_cast<unsigned long long>(cfg.seed));
    return 0;
  }
  if (configure->parsed()) {
    impair::ImpairUpdate u;
    u.seed = seed;
    u.drop = drop;
    u.duplicate = dup;
    u.reorder = reorder;
    u.l4_proto = l4;
    u.reset = reset;
    if (disable) u.enabled = false;
    if (enable) u.enabled = true;
    if (auto s = impair::configure(dev, hook, u, pin_dir); !s.ok()) return fail(s);
    return 0;
  }
  if (counters->parsed()) {
    auto c = impair::readCounters(dev, hook, pin_dir);
    if (!c.ok()) return fail(c.status());
    printCounters(*c, json);
    return 0;
  }
  if (show->parsed()) {
    auto c = impair::readConfig(dev, hook, pin_dir);
    if (!c.ok()) return fail(c.status());
    auto p = [](uint32_t t) { return t == IG_IMPAIR_ALWAYS ? 1.0 : t / 4294967296.0; };
    std::printf("enabled %u\nseed %llu\ndrop %.6f\nduplicate %.6f\nreorder %.6f\nproto %u\n", c->enabled,
                static_cast<unsigned long long>(c->seed), p(c->drop), p(c->dup), p(c->reorder), c->l4_proto);
    return 0;
  }
  if (detach->parsed()) {
    if (auto s = impair::detach(dev, hook, pin_dir); !s.ok()) return fail(s);
    return 0;
  }
  return 0;
}
