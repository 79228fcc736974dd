#pragma once
// DPDK's Environment Abstraction Layer (EAL): built from configuration and initialised once per
// process, before any port is configured (dpdk_device.h).
//
// The argv infergate hands to rte_eal_init() comes from ealArgv(): structured options first,
// then the operator's raw `args` (dpdk.eal_args), so a raw argument can add what the structured
// keys do not cover. Two choices are made for the operator:
//  - one EAL lcore (`-l <main_lcore>`): the reactors are infergate's own threads, registered
//    with DPDK when they first touch a device (DpdkDevice), so EAL starts no worker threads;
//  - PCI devices are probed only when named: with `allow_pci` empty and no PCI option in `args`
//    (-a/--allow, -b/--block, -w, --no-pci), `--no-pci` is added, so the gateway never takes
//    over a NIC it was not told about (vdevs still work).
//
// Threading: initEal() may be called from any thread, more than once; only the first call runs
// rte_eal_init() and every call returns its result. ealArgv() is pure.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace infergate::dataplane::dpdk {

struct EalOptions {
  std::vector<std::string> args;       // raw EAL arguments (dpdk.eal_args), appended last
  int main_lcore = 0;                  // `-l N`; < 0: none (then `args` must choose the lcores)
  uint32_t memory_mb = 0;              // `-m N` (MiB preallocated); 0: EAL's default
  bool no_huge = false;                // `--no-huge`: anonymous memory, no hugepages (tests)
  bool in_memory = false;              // `--in-memory`: no shared files under /var/run/dpdk
                                       // (with no_huge: `--no-shconf`, see ealArgv)
  std::vector<std::string> vdevs;      // `--vdev=X` each (net_ring0, net_af_packet0,iface=veth0)
  std::vector<std::string> allow_pci;  // `-a X` each (0000:3b:00.1)
  std::string file_prefix;             // `--file-prefix=X` (several processes on one host)
};

// The argv (without a terminating null) rte_eal_init() gets for `options`; argv[0] is
// "infergate". in_memory with no_huge gives `--no-shconf`: EAL refuses `--in-memory` with
// `--no-huge` (which implies legacy memory), and `--no-shconf` is what `--in-memory` adds to
// ordinary memory (no shared configuration files).
std::vector<std::string> ealArgv(const EalOptions& options);

// Runs rte_eal_init(ealArgv(options)) the first time; later calls return the first call's
// status whatever their options (EAL cannot be initialised twice in a process). Errors name
// what is missing: no hugepages reserved (without no_huge), or EAL's own reason
// (rte_strerror(rte_errno)) with the argv it was given.
absl::Status initEal(const EalOptions& options);

// True once initEal() succeeded.
bool ealReady();

// Hugepages the kernel has reserved (every page size, in pages), from
// /sys/kernel/mm/hugepages/*/nr_hugepages; 0 when none or unreadable.
uint64_t reservedHugepages();

}  // namespace infergate::dataplane::dpdk
