#include "gpu/process_info.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <set>
#include <utility>

#include "common/unique_fd.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

namespace infergate::gpu {
namespace {

constexpr size_t kMaxCgroupPath = 4096;
constexpr size_t kMaxSmallFile = 64 * 1024;         // cgroup, environ, stat, cgroup.procs
constexpr size_t kMaxTableFile = 32 * 1024 * 1024;  // /proc/net/tcp*, /proc/PID/maps
constexpr int kMaxWalkDepth = 32;
constexpr size_t kMaxWalkDirs = 100'000;
constexpr size_t kMaxProcesses = 100'000;     // /proc entries looked at per scan
constexpr size_t kMaxFdsScanned = 2'000'000;  // fd links read per listener scan
constexpr size_t kMaxCachedContainers = 4096;
constexpr auto kWalkInterval = std::chrono::seconds(10);
constexpr auto kListenerTtl = std::chrono::seconds(5);

// ---- Files -------------------------------------------------------------------------------

using Fd = common::UniqueFd;

// Up to `max` bytes of a file (proc files report size 0: read until EOF). nullopt when it
// cannot be opened or read.
std::optional<std::string> readBounded(const std::string& path, size_t max) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0) return std::nullopt;
  std::string out;
  char buf[8192];
  while (out.size() < max) {
    size_t want = std::min(sizeof(buf), max - out.size());
    ssize_t n = ::read(fd.get(), buf, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Calls `fn(line)` for each line of a file (without the '\n'), reading at most `max` bytes;
// `fn` returns false to stop. A last line cut by the bound is dropped. False when the file
// cannot be opened.
template <typename Fn>
bool forEachLine(const std::string& path, size_t max, Fn&& fn) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0) return false;
  std::string pending;
  char buf[16384];
  size_t total = 0;
  while (total < max) {
    size_t want = std::min(sizeof(buf), max - total);
    ssize_t n = ::read(fd.get(), buf, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return true;
    }
    if (n == 0) {
      if (!pending.empty()) fn(std::string_view(pending));
      return true;
    }
    total += static_cast<size_t>(n);
    std::string_view chunk(buf, static_cast<size_t>(n));
    while (!chunk.empty()) {
      size_t nl = chunk.find('\n');
      if (nl == std::string_view::npos) {
        if (pending.size() + chunk.size() > kMaxSmallFile)
          pending.clear();  // absurd line
        else
          pending.append(chunk);
        break;
      }
      bool go;
      if (pending.empty()) {
        go = fn(chunk.substr(0, nl));
      } else {
        pending.append(chunk.substr(0, nl));
        go = fn(std::string_view(pending));
        pending.clear();
      }
      if (!go) return true;
      chunk.remove_prefix(nl + 1);
    }
  }
  return true;
}

struct DevIno {
  dev_t dev;
  ino_t ino;
  bool operator<(const DevIno& o) const { return dev != o.dev ? dev < o.dev : ino < o.ino; }
  bool operator==(const DevIno& o) const { return dev == o.dev && ino == o.ino; }
};

std::optional<DevIno> statOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return DevIno{st.st_dev, st.st_ino};
}

bool isRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool isCgroup2(const std::string& path) {
  struct statfs fs;
  return ::statfs(path.c_str(), &fs) == 0 &&
         static_cast<unsigned long>(fs.f_type) == CGROUP2_SUPER_MAGIC;
}

// A decimal number that fits in uint32 (a pid): digits only, no sign, no leading junk.
std::optional<uint32_t> parsePid(std::string_view s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v == 0) return std::nullopt;
  return v;
}

// The numeric entries of a /proc root, ascending, at most kMaxProcesses.
std::vector<uint32_t> listPids(const std::string& proc_root) {
  std::vector<uint32_t> pids;
  DIR* d = ::opendir(proc_root.c_str());
  if (d == nullptr) return pids;
  size_t seen = 0;
  while (struct dirent* e = ::readdir(d)) {
    if (++seen > kMaxProcesses * 2) break;
    if (auto pid = parsePid(e->d_name)) {
      pids.push_back(*pid);
      if (pids.size() >= kMaxProcesses) break;
    }
  }
  ::closedir(d);
  std::sort(pids.begin(), pids.end());
  return pids;
}

// ---- Cgroup path parsing -------------------------------------------------------------------

bool isLowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool isContainerId(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), isLowerHex);
}

// A pod UID: a UUID (8-4-4-4-12 lower-case hex, `sep` between groups) or, for static pods, 32
// lower-case hex digits (a hash). Returned with dashes.
std::optional<std::string> parsePodUid(std::string_view s, char sep) {
  if (s.size() == 32 && std::all_of(s.begin(), s.end(), isLowerHex)) return std::string(s);
  if (s.size() != 36) return std::nullopt;
  std::string out(s);
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (s[i] != sep) return std::nullopt;
      out[i] = '-';
    } else if (!isLowerHex(s[i])) {
      return std::nullopt;
    }
  }
  return out;
}

struct Pod {
  std::string uid;
  std::string qos;
};

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool startsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// A systemd-driver pod slice: [<prefix>-]kubepods[-burstable|-besteffort]-pod<uid>.slice, the
// uid with '_' for '-' (kind's kubelet uses the prefix "kubelet-").
std::optional<Pod> parsePodSlice(std::string_view c) {
  if (!endsWith(c, ".slice")) return std::nullopt;
  c.remove_suffix(6);
  size_t at = c.rfind("-pod");
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view head = c.substr(0, at);
  auto uid = parsePodUid(c.substr(at + 4), '_');
  if (!uid) return std::nullopt;
  std::string qos;
  if (endsWith(head, "kubepods-burstable")) {
    head.remove_suffix(10);
    qos = "burstable";
  } else if (endsWith(head, "kubepods-besteffort")) {
    head.remove_suffix(11);
    qos = "besteffort";
  } else {
    qos = "guaranteed";
  }
  if (!(head == "kubepods" || endsWith(head, "-kubepods"))) return std::nullopt;
  return Pod{std::move(*uid), std::move(qos)};
}

// A cgroupfs-driver pod directory: pod<uid> under kubepods/ (guaranteed) or
// kubepods/{burstable,besteffort}/. `comps[i]` is the candidate.
std::optional<Pod> parsePodDir(const std::vector<std::string_view>& comps, size_t i) {
  std::string_view c = comps[i];
  if (!startsWith(c, "pod") || i == 0) return std::nullopt;
  auto uid = parsePodUid(c.substr(3), '-');
  if (!uid) return std::nullopt;
  std::string_view parent = comps[i - 1];
  if (parent == "kubepods") return Pod{std::move(*uid), "guaranteed"};
  if ((parent == "burstable" || parent == "besteffort") && i >= 2 && comps[i - 2] == "kubepods") {
    return Pod{std::move(*uid), std::string(parent)};
  }
  return std::nullopt;
}

std::optional<Pod> parsePod(const std::vector<std::string_view>& comps, size_t i) {
  if (auto p = parsePodSlice(comps[i])) return p;
  return parsePodDir(comps, i);
}

const char* runtimeOfPrefix(std::string_view prefix) {
  if (prefix == "cri-containerd") return "containerd";
  if (prefix == "crio") return "crio";
  if (prefix == "docker") return "docker";
  if (prefix == "libpod") return "podman";
  return nullptr;
}

// Tries `comps[i]` as a container component; fills runtime, id and, when the pod is named by
// the component itself or its parent, the pod fields.
bool parseContainer(const std::vector<std::string_view>& comps, size_t i, ContainerInfo& out) {
  std::string_view c = comps[i];
  auto setPodFromParent = [&] {
    if (i == 0) return;
    if (auto pod = parsePod(comps, i - 1)) {
      out.pod_uid = std::move(pod->uid);
      out.qos = std::move(pod->qos);
    }
  };
  // <pod slice>:<runtime>:<id> (a kubelet with the systemd driver over a containerd with the
  // cgroupfs one: /system.slice/containerd.service/kubepods-...-pod<uid>.slice:cri-containerd:<id>)
  if (size_t colon = c.find(':'); colon != std::string_view::npos) {
    size_t colon2 = c.find(':', colon + 1);
    if (colon2 == std::string_view::npos) return false;
    std::string_view id = c.substr(colon2 + 1);
    const char* rt = runtimeOfPrefix(c.substr(colon + 1, colon2 - colon - 1));
    if (rt == nullptr || !isContainerId(id)) return false;
    auto pod = parsePodSlice(c.substr(0, colon));
    if (!pod) return false;
    out.runtime = rt;
    out.container_id = std::string(id);
    out.pod_uid = std::move(pod->uid);
    out.qos = std::move(pod->qos);
    return true;
  }
  // <runtime>-<id>.scope (systemd), or without .scope (crio-<id> and libpod-<id> under the
  // cgroupfs driver).
  if (size_t dash = c.rfind('-'); dash != std::string_view::npos) {
    std::string_view id = c.substr(dash + 1);
    bool scope = endsWith(id, ".scope");
    if (scope) id.remove_suffix(6);
    const char* rt = runtimeOfPrefix(c.substr(0, dash));
    if (rt == nullptr || !isContainerId(id)) return false;
    // Without .scope, only the cgroupfs spellings: crio-<id> in a pod, libpod-<id> anywhere.
    if (!scope && std::string_view(rt) != "podman") {
      if (std::string_view(rt) != "crio" || i == 0 || !parsePod(comps, i - 1)) return false;
    }
    out.runtime = rt;
    out.container_id = std::string(id);
    setPodFromParent();
    return true;
  }
  // A bare id: /docker/<id>, or /kubepods/<qos>/pod<uid>/<id> (runtime not named).
  if (isContainerId(c) && i > 0) {
    if (comps[i - 1] == "docker") {
      out.runtime = "docker";
      out.container_id = std::string(c);
      return true;
    }
    if (auto pod = parsePod(comps, i - 1)) {
      out.runtime = "cri";
      out.container_id = std::string(c);
      out.pod_uid = std::move(pod->uid);
      out.qos = std::move(pod->qos);
      return true;
    }
  }
  return false;
}

// ---- Environment ---------------------------------------------------------------------------

bool isDnsName(std::string_view s, size_t max, bool dots) {
  if (s.empty() || s.size() > max) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || (dots && c == '.');
    if (!ok) return false;
  }
  return true;
}

}  // namespace

// ---- ContainerInfo / parseCgroupPath -------------------------------------------------------

std::string ContainerInfo::label() const {
  if (!pod_name.empty()) return pod_name;
  if (!container_id.empty()) return container_id.substr(0, 12);
  std::string_view p = cgroup_path;
  while (!p.empty() && p.back() == '/') p.remove_suffix(1);
  size_t slash = p.rfind('/');
  std::string_view last = slash == std::string_view::npos ? p : p.substr(slash + 1);
  if (!last.empty()) return std::string(last);
  return "host";
}

ContainerInfo parseCgroupPath(std::string_view path) {
  ContainerInfo out;
  if (path.size() > kMaxCgroupPath || path.find('\0') != std::string_view::npos) return out;
  out.cgroup_path = std::string(path);
  std::vector<std::string_view> comps;
  std::string_view rest = path;
  while (!rest.empty()) {
    size_t slash = rest.find('/');
    std::string_view c = rest.substr(0, slash);
    if (!c.empty()) comps.push_back(c);
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  // The innermost container component wins (kind: a pod's container inside the node's).
  for (size_t i = comps.size(); i-- > 0;) {
    ContainerInfo c;
    if (parseContainer(comps, i, c)) {
      out.runtime = std::move(c.runtime);
      out.container_id = std::move(c.container_id);
      out.pod_uid = std::move(c.pod_uid);
      out.qos = std::move(c.qos);
      return out;
    }
  }
  // No container: a process directly in a pod's cgroup still has a pod.
  for (size_t i = comps.size(); i-- > 0;) {
    if (auto pod = parsePod(comps, i)) {
      out.pod_uid = std::move(pod->uid);
      out.qos = std::move(pod->qos);
      break;
    }
  }
  return out;
}

// ---- ProcessInfo ---------------------------------------------------------------------------

ProcessInfo::ProcessInfo(std::string proc_root, std::string cgroup_root)
    : proc_root_(std::move(proc_root)), cgroup_root_(std::move(cgroup_root)) {
  while (cgroup_root_.size() > 1 && cgroup_root_.back() == '/') cgroup_root_.pop_back();
  if (!isCgroup2(cgroup_root_) && isCgroup2(cgroup_root_ + "/unified")) {
    cgroup_root_ += "/unified";
  }
}

std::optional<std::string> ProcessInfo::cgroupPathOf(uint32_t tgid) {
  if (tgid == 0) return std::nullopt;
  auto text = readBounded(proc_root_ + "/" + std::to_string(tgid) + "/cgroup", kMaxSmallFile);
  if (!text) return std::nullopt;
  std::string_view rest = *text;
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    if (startsWith(line, "0::")) {
      line.remove_prefix(3);
      if (line.empty() || line.size() > kMaxCgroupPath || line.find('\0') != line.npos) {
        return std::nullopt;
      }
      return std::string(line);
    }
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  return std::nullopt;
}

std::optional<uint64_t> ProcessInfo::cgroupIdOf(std::string_view cgroup_path) {
  if (cgroup_path.empty() || cgroup_path.front() != '/' || cgroup_path.size() > kMaxCgroupPath ||
      cgroup_path.find('\0') != std::string_view::npos) {
    return std::nullopt;
  }
  // Never leave the cgroup root ("/../.." is how a cgroup namespace shows outside cgroups).
  std::string_view rest = cgroup_path;
  while (!rest.empty()) {
    size_t slash = rest.find('/');
    if (rest.substr(0, slash) == "..") return std::nullopt;
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  std::string full = cgroup_root_;
  if (cgroup_path != "/") full.append(cgroup_path);
  struct stat st;
  if (::stat(full.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return std::nullopt;
  return static_cast<uint64_t>(st.st_ino);
}

void ProcessInfo::fillPodNames(ContainerInfo& info, uint32_t tgid) {
  if (info.pod_uid.empty() || tgid == 0) return;
  std::string base = proc_root_ + "/" + std::to_string(tgid);
  auto env = readBounded(base + "/environ", kMaxSmallFile);
  if (!env) return;
  // A hostNetwork pod shares the node's UTS namespace, so its HOSTNAME is the node's.
  auto uts = statOf(base + "/ns/uts");
  auto self_uts = statOf(proc_root_ + "/self/ns/uts");
  bool host_uts = uts && self_uts && *uts == *self_uts;
  std::string_view rest = *env;
  std::string_view hostname, ns_pod, ns_kube;
  while (!rest.empty()) {
    size_t end = rest.find('\0');
    std::string_view kv = rest.substr(0, end);
    if (startsWith(kv, "HOSTNAME="))
      hostname = kv.substr(9);
    else if (startsWith(kv, "POD_NAMESPACE="))
      ns_pod = kv.substr(14);
    else if (startsWith(kv, "KUBERNETES_NAMESPACE="))
      ns_kube = kv.substr(21);
    if (end == std::string_view::npos) break;  // the bound may cut the last entry: keep it
    rest.remove_prefix(end + 1);
  }
  if (!host_uts && isDnsName(hostname, 253, true)) info.pod_name = std::string(hostname);
  std::string_view ns = !ns_pod.empty() ? ns_pod : ns_kube;
  if (isDnsName(ns, 63, false)) info.pod_namespace = std::string(ns);
}

void ProcessInfo::walkCgroups() {
  walked_.clear();
  walked_at_ = Clock::now();
  struct stat st;
  if (::stat(cgroup_root_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;
  walked_.emplace(st.st_ino, "/");
  struct Item {
    std::string rel;  // "" for the root, else "/a/b"
    int depth;
  };
  std::vector<Item> stack{{"", 0}};
  size_t dirs = 1;
  while (!stack.empty()) {
    Item item = std::move(stack.back());
    stack.pop_back();
    std::string dir_path = cgroup_root_ + item.rel;
    int dfd = ::open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dfd < 0) continue;
    DIR* d = ::fdopendir(dfd);
    if (d == nullptr) {
      ::close(dfd);
      continue;
    }
    while (struct dirent* e = ::readdir(d)) {
      std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN) continue;
      struct stat cst;
      if (::fstatat(dfd, e->d_name, &cst, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(cst.st_mode)) {
        continue;
      }
      if (dirs >= kMaxWalkDirs) break;
      ++dirs;
      std::string rel = item.rel + "/" + std::string(name);
      walked_.emplace(cst.st_ino, rel);
      if (item.depth + 1 < kMaxWalkDepth) stack.push_back({std::move(rel), item.depth + 1});
    }
    ::closedir(d);
    if (dirs >= kMaxWalkDirs) break;
  }
}

ContainerInfo ProcessInfo::containerOf(uint64_t cgroup_id, uint32_t tgid_hint) {
  if (cgroup_id == 0) return {};
  auto remember = [&](const ContainerInfo& info) {
    if (containers_.size() >= kMaxCachedContainers) containers_.clear();
    containers_[cgroup_id] = info;
  };
  if (auto it = containers_.find(cgroup_id); it != containers_.end()) {
    if (cgroupIdOf(it->second.cgroup_path) == cgroup_id) {
      // A cached answer without a pod name may gain one through a hint in the cgroup.
      if (it->second.pod_name.empty() && !it->second.pod_uid.empty() && tgid_hint != 0 &&
          cgroupPathOf(tgid_hint) == it->second.cgroup_path) {
        fillPodNames(it->second, tgid_hint);
      }
      return it->second;
    }
    containers_.erase(it);  // the cgroup went away (its id may name another one later)
  }
  if (tgid_hint != 0) {
    if (auto path = cgroupPathOf(tgid_hint); path && cgroupIdOf(*path) == cgroup_id) {
      ContainerInfo info = parseCgroupPath(*path);
      fillPodNames(info, tgid_hint);
      remember(info);
      return info;
    }
  }
  auto it = walked_.find(cgroup_id);
  if (it != walked_.end() && cgroupIdOf(it->second) != cgroup_id) it = walked_.end();
  if (it == walked_.end() && (!walked_at_ || Clock::now() - *walked_at_ >= kWalkInterval)) {
    walkCgroups();
    it = walked_.find(cgroup_id);
  }
  if (it == walked_.end()) return {};
  ContainerInfo info = parseCgroupPath(it->second);
  if (!info.pod_uid.empty()) {
    std::string procs_path = cgroup_root_;
    if (it->second != "/") procs_path += it->second;
    if (auto procs = readBounded(procs_path + "/cgroup.procs", 64)) {
      std::string_view first = std::string_view(*procs).substr(0, procs->find('\n'));
      if (auto pid = parsePid(first)) fillPodNames(info, *pid);
    }
  }
  remember(info);
  return info;
}

bool ProcessInfo::alive(uint32_t tgid) {
  if (tgid == 0) return false;
  std::string base = proc_root_ + "/" + std::to_string(tgid);
  struct stat st;
  if (::stat(base.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  auto text = readBounded(base + "/stat", 4096);
  if (!text) return true;  // exists; its state unreadable
  // "pid (comm) S ...": comm may hold spaces and parentheses, so the last ')' ends it.
  size_t close = text->rfind(')');
  if (close == std::string::npos || close + 2 >= text->size()) return true;
  char state = (*text)[close + 2];
  return state != 'Z' && state != 'X' && state != 'x';
}

std::optional<uint32_t> ProcessInfo::listenerOf(uint16_t port) {
  auto now = Clock::now();
  if (auto it = listeners_.find(port);
      it != listeners_.end() && now - it->second.at < kListenerTtl) {
    return it->second.tgid;
  }
  // Socket inodes listening on the port, in table order (tcp, then tcp6).
  std::vector<std::string> targets;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    forEachLine(proc_root_ + table, kMaxTableFile, [&](std::string_view line) {
      std::string_view f[10];
      size_t n = 0;
      std::string_view rest = line;
      while (n < 10) {
        size_t b = rest.find_first_not_of(' ');
        if (b == std::string_view::npos) break;
        rest.remove_prefix(b);
        size_t e = rest.find(' ');
        f[n++] = rest.substr(0, e);
        if (e == std::string_view::npos) break;
        rest.remove_prefix(e);
      }
      if (n < 10 || f[3] != "0A") return true;
      std::string_view local = f[1];
      size_t colon = local.rfind(':');
      if (colon == std::string_view::npos || local.size() - colon - 1 != 4) return true;
      uint32_t p = 0;
      auto port_hex = local.substr(colon + 1);
      auto [pe, pec] = std::from_chars(port_hex.data(), port_hex.data() + 4, p, 16);
      if (pec != std::errc() || pe != port_hex.data() + 4 || p != port) return true;
      uint64_t inode = 0;
      auto [ie, iec] = std::from_chars(f[9].data(), f[9].data() + f[9].size(), inode);
      if (iec != std::errc() || ie != f[9].data() + f[9].size() || inode == 0) return true;
      targets.push_back("socket:[" + std::to_string(inode) + "]");
      return targets.size() < 64;
    });
  }
  std::optional<uint32_t> found;
  if (!targets.empty()) {
    size_t fds = 0;
    char link[64];
    for (uint32_t pid : listPids(proc_root_)) {
      if (found || fds >= kMaxFdsScanned) break;
      std::string fd_dir = proc_root_ + "/" + std::to_string(pid) + "/fd";
      int dfd = ::open(fd_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd < 0) continue;
      DIR* d = ::fdopendir(dfd);
      if (d == nullptr) {
        ::close(dfd);
        continue;
      }
      while (struct dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.') continue;
        if (++fds > kMaxFdsScanned) break;
        ssize_t len = ::readlinkat(dfd, e->d_name, link, sizeof(link));
        if (len <= 0 || static_cast<size_t>(len) >= sizeof(link)) continue;
        std::string_view target(link, static_cast<size_t>(len));
        if (std::find(targets.begin(), targets.end(), target) != targets.end()) {
          found = pid;
          break;
        }
      }
      ::closedir(d);
    }
  }
  if (listeners_.size() >= 1024) listeners_.clear();
  listeners_[port] = CachedListener{found, now};
  return found;
}

std::vector<std::string> ProcessInfo::cudaLibrariesMappedBy(const std::vector<uint32_t>& tgids) {
  std::vector<std::string> out;
  std::set<DevIno> seen;
  const std::vector<uint32_t> pids = tgids.empty() ? listPids(proc_root_) : tgids;
  auto self_root = statOf(proc_root_ + "/self/root");
  for (uint32_t pid : pids) {
    if (pid == 0) continue;
    std::string base = proc_root_ + "/" + std::to_string(pid);
    std::vector<std::string> paths;
    forEachLine(base + "/maps", kMaxTableFile, [&](std::string_view line) {
      // "start-end perms offset dev inode   path": the path starts at the first '/' after
      // the five fields (it may hold spaces, and end in " (deleted)").
      size_t pos = 0;
      for (int field = 0; field < 5; ++field) {
        pos = line.find_first_not_of(' ', pos);
        if (pos == std::string_view::npos) return true;
        pos = line.find(' ', pos);
        if (pos == std::string_view::npos) return true;
      }
      pos = line.find_first_not_of(' ', pos);
      if (pos == std::string_view::npos || line[pos] != '/') return true;
      std::string_view path = line.substr(pos);
      std::string_view name = path.substr(path.rfind('/') + 1);
      if (!startsWith(name, "libcuda.so")) return true;
      if (std::find(paths.begin(), paths.end(), path) == paths.end() && paths.size() < 16) {
        paths.emplace_back(path);
      }
      return true;
    });
    if (paths.empty()) continue;
    auto root = statOf(base + "/root");
    bool other_root = root && self_root && !(*root == *self_root);
    for (const std::string& p : paths) {
      std::string resolved = other_root ? base + "/root" + p : p;
      auto id = statOf(resolved);
      if (!id || !seen.insert(*id).second) continue;
      out.push_back(std::move(resolved));
    }
  }
  return out;
}

// ---- locateCudaLibrary ---------------------------------------------------------------------

const std::vector<std::string>& standardCudaLibraryPlaces() {
  static const std::vector<std::string> kPlaces = {
      "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
      "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
      "/usr/lib64/libcuda.so.1",
      "/usr/lib/libcuda.so.1",
      "/usr/local/nvidia/lib64/libcuda.so.1",
      "/usr/local/cuda/compat/libcuda.so.1",
  };
  return kPlaces;
}

std::optional<std::string> locateCudaLibrary(const std::string& configured,
                                             const std::vector<uint32_t>& backend_tgids,
                                             ProcessInfo& info, std::string* why) {
  return locateCudaLibrary(configured, backend_tgids, info, why, standardCudaLibraryPlaces());
}

std::optional<std::string> locateCudaLibrary(const std::string& configured,
                                             const std::vector<uint32_t>& backend_tgids,
                                             ProcessInfo& info, std::string* why,
                                             const std::vector<std::string>& standard_places) {
  auto say = [&](std::string s) {
    if (why != nullptr) *why = std::move(s);
  };
  if (!configured.empty()) {
    if (isRegularFile(configured)) {
      say(configured + ", set by gpu.library");
      return configured;
    }
    say("gpu.library is " + configured + ", which does not exist or is not a file");
    return std::nullopt;
  }
  std::string pids;
  if (!backend_tgids.empty()) {
    auto mapped = info.cudaLibrariesMappedBy(backend_tgids);
    if (!mapped.empty()) {
      say(mapped.front() + ", mapped by a backend process");
      return mapped.front();
    }
    for (uint32_t t : backend_tgids) {
      if (!pids.empty()) pids += ", ";
      pids += std::to_string(t);
    }
  }
  for (const std::string& p : standard_places) {
    if (isRegularFile(p)) {
      say(p + ", a standard place");
      return p;
    }
  }
  std::string places;
  for (size_t i = 0; i < standard_places.size(); ++i) {
    if (i > 0) places += i + 1 == standard_places.size() ? " or " : ", ";
    places += standard_places[i];
  }
  std::string s = "no CUDA driver library (libcuda.so.1) found: ";
  if (!pids.empty())
    s += "no backend process (pid " + pids + ") maps libcuda.so*, and ";
  else
    s += "no backend process to look in, and ";
  s += places.empty() ? "no standard place was given" : "none exists of " + places;
  say(std::move(s));
  return std::nullopt;
}

}  // namespace infergate::gpu
