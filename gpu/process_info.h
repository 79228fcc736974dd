#pragma once
// Who a GPU process is: its container and pod (from /proc/PID/cgroup and the cgroupfs), whether
// it is still alive, which local TCP port it listens on (so a backend endpoint host:port maps to
// the process serving it), and where its CUDA driver library is (/proc/PID/maps).
//
// ProcessResolver is the seam the monitor uses (tests give it a fake); ProcessInfo reads the
// real /proc and cgroupfs, under roots that tests point at a directory tree they build.
// Threading: one thread at a time (the monitor's); ProcessInfo caches behind no lock.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace infergate::gpu {

// The container a cgroup belongs to, as far as its path says.
struct ContainerInfo {
  std::string cgroup_path;   // "/kubepods.slice/.../cri-containerd-<id>.scope" ("" unknown)
  std::string runtime;       // "containerd" | "crio" | "docker" | "podman" | "cri" (a Kubernetes
                             // container whose runtime the cgroupfs-driver path does not name:
                             // /kubepods/<qos>/pod<uid>/<id>) | "" (not a container)
  std::string container_id;  // full 64-hex id, "" when not a container
  std::string pod_uid;       // Kubernetes pod UID (dashes restored), "" outside Kubernetes
  std::string qos;           // "guaranteed" | "burstable" | "besteffort" | "" (Kubernetes)
  std::string pod_name;      // best effort (see ProcessInfo::containerOf), "" when unknown
  std::string pod_namespace; // best effort, "" when unknown

  // A short label for views and metrics: the pod name, else the first 12 hex digits of the
  // container id, else the last component of the cgroup path, else "host".
  std::string label() const;
};

// Parses a cgroup v2 path (the part after "0::" in /proc/PID/cgroup) into container identity:
// the Kubernetes systemd (kubepods.slice/...-pod<uid>.slice/<runtime>-<id>.scope) and cgroupfs
// (/kubepods/<qos>/pod<uid>/<id>) layouts, Docker (/system.slice/docker-<id>.scope,
// /docker/<id>), podman (libpod-<id>.scope) and CRI-O (crio-<id>.scope), also when nested under
// another prefix (kind, k3s: /kubelet.slice/..., /system.slice/containerd.service/<pod slice>:
// cri-containerd:<id>) or followed by sub-cgroups (.../<id>.scope/init.scope): the innermost
// container component wins. A container id is exactly 64 lower-case hex digits. Anything else:
// not a container (runtime and container_id empty), cgroup_path kept; a path over 4096 bytes or
// with a NUL byte is not a cgroup path (every field empty). Kubernetes puts no pod name or
// namespace in cgroup paths: those two fields stay empty here. Pure function.
ContainerInfo parseCgroupPath(std::string_view path);

class ProcessResolver {
 public:
  virtual ~ProcessResolver() = default;
  // The container of a cgroup id (the probes' bpf_get_current_cgroup_id()); `tgid_hint`, a
  // process seen in that cgroup, lets the resolver read /proc/PID/cgroup instead of walking
  // the cgroupfs. Unknown cgroups give an info with every field empty.
  virtual ContainerInfo containerOf(uint64_t cgroup_id, uint32_t tgid_hint) = 0;
  virtual bool alive(uint32_t tgid) = 0;
  // The process that owns the socket listening on local TCP `port` (IPv4 or IPv6, any address
  // or loopback); nullopt when none is visible to us.
  virtual std::optional<uint32_t> listenerOf(uint16_t port) = 0;
};

class ProcessInfo : public ProcessResolver {
 public:
  // On a hybrid (v1 + v2) host, where `cgroup_root` is not a cgroup2 mount but
  // `cgroup_root`/unified is, the v2 hierarchy there is used (the one cgroup ids come from).
  explicit ProcessInfo(std::string proc_root = "/proc", std::string cgroup_root = "/sys/fs/cgroup");

  const std::string& cgroupRoot() const { return cgroup_root_; }

  // The cgroup v2 path of a process ("0::<path>" line of /proc/PID/cgroup); nullopt when the
  // process is gone or has no v2 line.
  std::optional<std::string> cgroupPathOf(uint32_t tgid);
  // The cgroup id of a cgroupfs path: the inode number of its directory (what
  // bpf_get_current_cgroup_id() returns); nullopt when absent.
  std::optional<uint64_t> cgroupIdOf(std::string_view cgroup_path);

  // First through `tgid_hint`'s /proc/PID/cgroup when its cgroup id is `cgroup_id`, else
  // through a walk of the cgroupfs (depth <= 32, <= 100,000 directories; the id -> path table
  // is rebuilt at most every 10 s, on a miss). pod_name/pod_namespace, best effort, for a
  // process in a Kubernetes pod (the hint, else the first process in cgroup.procs): HOSTNAME
  // from its /proc/PID/environ (the first 64 KiB) is the pod name unless the process shares
  // our UTS namespace (hostNetwork pods carry the node's name), and POD_NAMESPACE or
  // KUBERNETES_NAMESPACE, when the pod spec sets one, the namespace. Results are cached per
  // cgroup id (bounded) while the id still names the same path.
  ContainerInfo containerOf(uint64_t cgroup_id, uint32_t tgid_hint) override;
  // /proc/PID exists and its state (/proc/PID/stat) is not zombie or dead.
  bool alive(uint32_t tgid) override;
  // From /proc/net/tcp and tcp6 (LISTEN state, any local address) to the socket inode to the
  // first process (ascending pid) with an fd "socket:[inode]". Scans are bounded; the answer
  // (found or not) is cached per port for 5 s.
  std::optional<uint32_t> listenerOf(uint16_t port) override;

  // Paths of the CUDA driver library (a mapping whose file name starts with "libcuda.so")
  // mapped by `tgids` (every process when empty), as seen from here: a path inside a
  // container is reached through /proc/PID/root. Deduplicated by (device, inode), first seen
  // first.
  std::vector<std::string> cudaLibrariesMappedBy(const std::vector<uint32_t>& tgids = {});

 private:
  using Clock = std::chrono::steady_clock;
  struct CachedListener {
    std::optional<uint32_t> tgid;
    Clock::time_point at;
  };

  void fillPodNames(ContainerInfo& info, uint32_t tgid);
  void walkCgroups();

  std::string proc_root_;
  std::string cgroup_root_;
  std::unordered_map<uint64_t, std::string> walked_;  // cgroup id -> path (last walk)
  std::optional<Clock::time_point> walked_at_;
  std::unordered_map<uint64_t, ContainerInfo> containers_;  // bounded (kMaxCachedContainers)
  std::unordered_map<uint16_t, CachedListener> listeners_;
};

// The driver library to probe: `configured` when not empty (it must exist); else the first
// libcuda.so* mapped by one of `backend_tgids`; else the first of the standard places
// (/usr/lib/x86_64-linux-gnu/libcuda.so.1, /usr/lib64/libcuda.so.1, /usr/lib/libcuda.so.1, ...)
// that exists. nullopt with `why` set (one sentence naming what was looked at) when none; on
// success `why` (when not null) says where the path came from.
std::optional<std::string> locateCudaLibrary(const std::string& configured,
                                             const std::vector<uint32_t>& backend_tgids,
                                             ProcessInfo& info, std::string* why);
// The same with the standard places given (tests point them into a directory they build).
std::optional<std::string> locateCudaLibrary(const std::string& configured,
                                             const std::vector<uint32_t>& backend_tgids,
                                             ProcessInfo& info, std::string* why,
                                             const std::vector<std::string>& standard_places);
// /usr/lib/x86_64-linux-gnu/libcuda.so.1, /usr/lib/aarch64-linux-gnu/libcuda.so.1,
// /usr/lib64/libcuda.so.1, /usr/lib/libcuda.so.1, /usr/local/nvidia/lib64/libcuda.so.1,
// /usr/local/cuda/compat/libcuda.so.1.
const std::vector<std::string>& standardCudaLibraryPlaces();

}  // namespace infergate::gpu
