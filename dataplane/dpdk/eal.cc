#include "dataplane/dpdk/eal.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "spdlog/spdlog.h"

namespace infergate::dataplane::dpdk {
namespace {

bool hasArg(const std::vector<std::string>& args, std::initializer_list<const char*> names) {
  for (const std::string& a : args) {
    for (const char* n : names) {
      const std::string name(n);
      // "-a X", "-aX", "--allow=X", "--allow X".
      if (a == name || (a.rfind(name, 0) == 0 && (name.size() == 2 || a[name.size()] == '=')))
        return true;
    }
  }
  return false;
}

std::mutex g_mu;
bool g_attempted = false;  // rte_eal_init() has run (its result is final)
absl::Status g_status = absl::FailedPreconditionError("EAL not initialised");

}  // namespace

std::vector<std::string> ealArgv(const EalOptions& o) {
  std::vector<std::string> v{"infergate"};
  if (o.main_lcore >= 0) {
    v.push_back("-l");
    v.push_back(std::to_string(o.main_lcore));
  }
  if (o.memory_mb > 0) {
    v.push_back("-m");
    v.push_back(std::to_string(o.memory_mb));
  }
  if (o.no_huge) v.push_back("--no-huge");
  // --no-huge implies legacy memory, which EAL refuses with --in-memory; --no-shconf is what
  // --in-memory adds to it (no shared configuration files), so that is asked instead.
  if (o.in_memory) v.push_back(o.no_huge ? "--no-shconf" : "--in-memory");
  if (!o.file_prefix.empty()) v.push_back("--file-prefix=" + o.file_prefix);
  for (const std::string& d : o.vdevs) v.push_back("--vdev=" + d);
  for (const std::string& a : o.allow_pci) {
    v.push_back("-a");
    v.push_back(a);
  }
  if (o.allow_pci.empty() &&
      !hasArg(o.args, {"-a", "--allow", "-b", "--block", "-w", "--pci-whitelist", "--no-pci"}))
    v.push_back("--no-pci");
  v.insert(v.end(), o.args.begin(), o.args.end());
  return v;
}

uint64_t reservedHugepages() {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/kernel/mm/hugepages", ec)) {
    std::ifstream in(e.path() / "nr_hugepages");
    uint64_t n = 0;
    if (in >> n) total += n;
  }
  return total;
}

bool ealReady() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_attempted && g_status.ok();
}

absl::Status initEal(const EalOptions& o) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_attempted) return g_status;
  std::vector<std::string> argv = ealArgv(o);
  const bool no_huge = o.no_huge || hasArg(o.args, {"--no-huge"});
  if (!no_huge && reservedHugepages() == 0) {
    // Not final: nothing of EAL ran, a later call (after reserving pages) may succeed.
    return absl::FailedPreconditionError(
        "dpdk: no hugepages are reserved (/sys/kernel/mm/hugepages/*/nr_hugepages is 0): reserve "
        "some (echo 1024 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages, or "
        "hugepages=N on the kernel command line; see dpdk-hugepages.py) or set dpdk.no_huge: true "
        "(ordinary memory: tests and trials only)");
  }
  // rte_eal_init() permutes argv (getopt): it gets its own array of pointers into `argv`.
  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  g_attempted = true;
  const int rc = rte_eal_init(static_cast<int>(argv.size()), cargv.data());
  if (rc < 0) {
    const int e = rte_errno;
    std::string hint;
    if (e == EACCES || e == EPERM)
      hint =
          " (run as root, or grant CAP_SYS_ADMIN/CAP_IPC_LOCK and access to /dev/hugepages "
          "and /dev/vfio)";
    else if (e == ENOMEM)
      hint = no_huge ? " (raise dpdk.memory_mb or the process's memory limit)"
                     : " (reserve more hugepages, or lower dpdk.memory_mb)";
    else if (e == EINVAL)
      hint = " (an EAL argument is wrong: check dpdk.eal_args and the vdev strings)";
    else if (e == EALREADY)
      hint = " (EAL was initialised elsewhere in this process)";
    g_status = absl::FailedPreconditionError(
        fmt::format("dpdk: EAL initialisation failed: {} ({}){}; argv: {}", rte_strerror(e), e,
                    hint, fmt::join(argv, " ")));
    return g_status;
  }
  g_status = absl::OkStatus();
  spdlog::info("dpdk: EAL up ({}), {} port(s)", fmt::join(argv, " "), rte_eth_dev_count_avail());
  return g_status;
}

}  // namespace infergate::dataplane::dpdk
