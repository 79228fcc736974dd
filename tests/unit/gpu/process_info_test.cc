#include "gpu/process_info.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace infergate::gpu {
namespace {

namespace fs = std::filesystem;

const std::string kId = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kId2 = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
const std::string kUidSd = "1234abcd_56ef_7890_abcd_ef0123456789";  // systemd spelling
const std::string kUid = "1234abcd-56ef-7890-abcd-ef0123456789";    // as Kubernetes writes it
const std::string kStaticUid = "5d4f5fd5c8c0e4bd2e1c8b7f1c3a0d89";  // a static pod's hash

// "a\0b\0": an environ block.
std::string nul(std::initializer_list<std::string> entries) {
  std::string out;
  for (const auto& e : entries) out += e + '\0';
  return out;
}

// ---- parseCgroupPath -----------------------------------------------------------------------

struct ParseCase {
  std::string desc;
  std::string path;
  std::string runtime, id, pod_uid, qos;
  bool path_kept = true;
};

std::vector<ParseCase> parseCases() {
  const std::string sd_burst =
      "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSd + ".slice";
  const std::string sd_best =
      "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + kUidSd + ".slice";
  const std::string sd_guar = "/kubepods.slice/kubepods-pod" + kUidSd + ".slice";
  std::vector<ParseCase> c = {
      // Kubernetes, systemd driver.
      {"k8s systemd burstable containerd", sd_burst + "/cri-containerd-" + kId + ".scope",
       "containerd", kId, kUid, "burstable"},
      {"k8s systemd besteffort crio", sd_best + "/crio-" + kId + ".scope", "crio", kId, kUid,
       "besteffort"},
      {"k8s systemd guaranteed docker", sd_guar + "/docker-" + kId + ".scope", "docker", kId, kUid,
       "guaranteed"},
      {"k8s systemd static pod (hash uid)",
       "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kStaticUid +
           ".slice/cri-containerd-" + kId + ".scope",
       "containerd", kId, kStaticUid, "burstable"},
      {"k8s systemd, trailing sub-cgroup", sd_burst + "/cri-containerd-" + kId + ".scope/foo",
       "containerd", kId, kUid, "burstable"},
      {"k8s systemd, init.scope", sd_guar + "/cri-containerd-" + kId + ".scope/init.scope",
       "containerd", kId, kUid, "guaranteed"},
      {"k8s systemd, pod level only", sd_burst, "", "", kUid, "burstable"},
      {"k8s systemd, dashed uid is not systemd's spelling",
       "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUid +
           ".slice/cri-containerd-" + kId + ".scope",
       "containerd", kId, "", ""},
      // Kubernetes, cgroupfs driver.
      {"k8s cgroupfs burstable", "/kubepods/burstable/pod" + kUid + "/" + kId, "cri", kId, kUid,
       "burstable"},
      {"k8s cgroupfs besteffort", "/kubepods/besteffort/pod" + kUid + "/" + kId, "cri", kId, kUid,
       "besteffort"},
      {"k8s cgroupfs guaranteed", "/kubepods/pod" + kUid + "/" + kId, "cri", kId, kUid,
       "guaranteed"},
      {"k8s cgroupfs crio", "/kubepods/burstable/pod" + kUid + "/crio-" + kId, "crio", kId, kUid,
       "burstable"},
      {"k8s cgroupfs pod level only", "/kubepods/pod" + kUid, "", "", kUid, "guaranteed"},
      // Nested Kubernetes (kind, k3s, containerd without the systemd driver).
      {"kind: pod container inside the node's docker container",
       "/system.slice/docker-" + kId2 +
           ".scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
           "kubelet-kubepods-besteffort-pod" +
           kUidSd + ".slice/cri-containerd-" + kId + ".scope",
       "containerd", kId, kUid, "besteffort"},
      {"kubelet.slice prefix",
       "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" + kUidSd +
           ".slice/cri-containerd-" + kId + ".scope",
       "containerd", kId, kUid, "guaranteed"},
      {"k3s cgroupfs under a prefix", "/k3s/kubepods/burstable/pod" + kUid + "/" + kId, "cri", kId,
       kUid, "burstable"},
      {"containerd.service with pod-slice:runtime:id",
       "/system.slice/containerd.service/kubepods-burstable-pod" + kUidSd +
           ".slice:cri-containerd:" + kId,
       "containerd", kId, kUid, "burstable"},
      {"containerd.service colon form, crio, guaranteed",
       "/system.slice/containerd.service/kubepods-pod" + kUidSd + ".slice:crio:" + kId, "crio", kId,
       kUid, "guaranteed"},
      // Docker, podman, CRI-O outside Kubernetes.
      {"docker systemd", "/system.slice/docker-" + kId + ".scope", "docker", kId, "", ""},
      {"docker systemd init.scope", "/system.slice/docker-" + kId + ".scope/init.scope", "docker",
       kId, "", ""},
      {"docker cgroupfs", "/docker/" + kId, "docker", kId, "", ""},
      {"docker cgroupfs nested", "/docker/" + kId2 + "/docker/" + kId, "docker", kId, "", ""},
      {"podman machine.slice", "/machine.slice/libpod-" + kId + ".scope", "podman", kId, "", ""},
      {"podman rootless user slice",
       "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + kId + ".scope",
       "podman", kId, "", ""},
      {"podman container sub-cgroup", "/machine.slice/libpod-" + kId + ".scope/container", "podman",
       kId, "", ""},
      {"podman cgroupfs", "/libpod_parent/libpod-" + kId, "podman", kId, "", ""},
      {"crio standalone", "/system.slice/crio-" + kId + ".scope", "crio", kId, "", ""},
      // Not containers.
      {"host session", "/user.slice/user-1000.slice/session-3.scope", "", "", "", ""},
      {"root", "/", "", "", "", ""},
      {"empty", "", "", "", "", ""},
      {"only slashes", "////", "", "", "", ""},
      {"conmon is not the container", "/machine.slice/libpod-conmon-" + kId + ".scope", "", "", "",
       ""},
      {"crio conmon", sd_burst + "/crio-conmon-" + kId + ".scope", "", "", kUid, "burstable"},
      {"unknown runtime prefix", "/system.slice/rkt-" + kId + ".scope", "", "", "", ""},
      {"bare id at the top", "/" + kId, "", "", "", ""},
      {"bare id under an unknown parent", "/foo/" + kId, "", "", "", ""},
      {"bare id under a pod dir outside kubepods", "/pod" + kUid + "/" + kId, "", "", "", ""},
      {"bare id under a bad pod uid", "/kubepods/burstable/podXYZ/" + kId, "", "", "", ""},
      {"crio without .scope outside a pod", "/system.slice/crio-" + kId, "", "", "", ""},
      {"docker without .scope", "/system.slice/docker-" + kId, "", "", "", ""},
      // Hostile ids.
      {"63 hex digits", "/system.slice/docker-" + kId.substr(1) + ".scope", "", "", "", ""},
      {"65 hex digits", "/system.slice/docker-" + kId + "0.scope", "", "", "", ""},
      {"upper-case hex", "/system.slice/docker-0123456789ABCDEF" + kId.substr(16) + ".scope", "",
       "", "", ""},
      {"non-hex letter", "/docker/" + kId.substr(0, 63) + "g", "", "", "", ""},
      {"truncated id", "/kubepods/burstable/pod" + kUid + "/0123", "", "", kUid, "burstable"},
      {"empty id", "/system.slice/docker-.scope", "", "", "", ""},
      {"just a dash", "/-", "", "", "", ""},
      {"scope suffix mangled", "/system.slice/docker-" + kId + ".scopex", "", "", "", ""},
      {"colon form, short id",
       "/x/kubepods-pod" + kUidSd + ".slice:cri-containerd:" + kId.substr(2), "", "", "", ""},
      {"colon form, empty pieces", "/x/::", "", "", "", ""},
      {"colon form, one colon", "/x/a:b", "", "", "", ""},
      {"colon form, unknown runtime", "/x/kubepods-pod" + kUidSd + ".slice:rkt:" + kId, "", "", "",
       ""},
      {"pod slice with a short uid",
       "/kubepods.slice/kubepods-pod1234.slice/docker-" + kId + ".scope", "docker", kId, "", ""},
      {"pod slice not under kubepods", "/foo-pod" + kUidSd + ".slice/docker-" + kId + ".scope",
       "docker", kId, "", ""},
      {"pod as the first component of cgroupfs", "/pod" + kUid, "", "", "", ""},
  };
  // A long but legal path (4000 bytes) parses; a longer one or one with a NUL is no path.
  std::string long_ok;
  while (long_ok.size() < 3900) long_ok += "/a";
  c.push_back({"long legal path", long_ok + "/docker/" + kId, "docker", kId, "", ""});
  std::string huge(1 << 20, '/');
  c.push_back({"1 MiB of slashes", huge, "", "", "", "", false});
  std::string huge_id = "/system.slice/docker-" + kId + ".scope";
  while (huge_id.size() <= 4096) huge_id = "/x" + huge_id;
  c.push_back({"4097+ bytes with a container at the end", huge_id, "", "", "", "", false});
  c.push_back({"embedded NUL in the id",
               std::string("/system.slice/docker-0123\0", 26) + kId.substr(5) + ".scope", "", "",
               "", "", false});
  c.push_back({"NUL after a valid path",
               "/system.slice/docker-" + kId + ".scope" + std::string(1, '\0') + "/x", "", "", "",
               "", false});
  return c;
}

TEST(ParseCgroupPath, Table) {
  for (const ParseCase& tc : parseCases()) {
    SCOPED_TRACE(tc.desc);
    ContainerInfo info = parseCgroupPath(tc.path);
    EXPECT_EQ(info.cgroup_path, tc.path_kept ? tc.path : "");
    EXPECT_EQ(info.runtime, tc.runtime);
    EXPECT_EQ(info.container_id, tc.id);
    EXPECT_EQ(info.pod_uid, tc.pod_uid);
    EXPECT_EQ(info.qos, tc.qos);
    EXPECT_EQ(info.pod_name, "");
    EXPECT_EQ(info.pod_namespace, "");
  }
}

TEST(ParseCgroupPath, EveryPrefixAndSuffixOfAValidPathIsSafe) {
  // Cut a valid path at every byte: the id is the full one or none, and the pod only when the
  // pod component is whole.
  const std::string last = "cri-containerd-" + kId + ".scope";
  const std::string pod = "kubepods-burstable-pod" + kUidSd + ".slice";
  const std::string full = "/kubepods.slice/kubepods-burstable.slice/" + pod + "/" + last;
  for (size_t n = 0; n <= full.size(); ++n) {
    SCOPED_TRACE(n);
    ContainerInfo prefix = parseCgroupPath(std::string_view(full).substr(0, n));
    EXPECT_EQ(prefix.container_id, n == full.size() ? kId : "");
    ContainerInfo suffix = parseCgroupPath(std::string_view(full).substr(full.size() - n));
    EXPECT_EQ(suffix.container_id, n >= last.size() ? kId : "");
    EXPECT_EQ(suffix.pod_uid, n >= last.size() + 1 + pod.size() ? kUid : "");
  }
}

TEST(ParseCgroupPath, RandomMutationsGiveOnlyWellFormedIds) {
  // Deterministic mutations of valid paths (bytes replaced, inserted, deleted, including NULs
  // and '/'): whatever comes out is a 64-lower-hex id or nothing, and a uid is a UUID or hash.
  const std::vector<std::string> seeds = {
      "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSd +
          ".slice/cri-containerd-" + kId + ".scope",
      "/kubepods/besteffort/pod" + kUid + "/" + kId,
      "/system.slice/containerd.service/kubepods-pod" + kUidSd + ".slice:crio:" + kId,
      "/docker/" + kId, "/machine.slice/libpod-" + kId + ".scope/container"};
  const std::string alphabet = std::string("/-_:.0af9gAZ", 12) + '\0';
  uint64_t x = 88172645463325252ull;
  auto next = [&] {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
  };
  int with_id = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string p = seeds[next() % seeds.size()];
    for (int edits = 1 + next() % 3; edits > 0; --edits) {
      size_t at = next() % (p.size() + 1);
      char c = alphabet[next() % alphabet.size()];
      switch (next() % 3) {
        case 0:
          if (at < p.size()) p[at] = c;
          break;
        case 1:
          p.insert(p.begin() + at, c);
          break;
        default:
          if (at < p.size()) p.erase(at, 1);
      }
    }
    ContainerInfo info = parseCgroupPath(p);
    if (!info.container_id.empty()) {
      ++with_id;
      ASSERT_EQ(info.container_id.size(), 64u) << p;
      ASSERT_EQ(info.container_id.find_first_not_of("0123456789abcdef"), std::string::npos) << p;
      ASSERT_NE(info.runtime, "") << p;
    }
    if (!info.pod_uid.empty()) {
      ASSERT_TRUE(info.pod_uid.size() == 36 || info.pod_uid.size() == 32) << p;
      ASSERT_EQ(info.pod_uid.find_first_not_of("0123456789abcdef-"), std::string::npos) << p;
    }
  }
  EXPECT_GT(with_id, 1000);  // many mutations miss the id: the parser still recognises those
}

TEST(ContainerInfo, Label) {
  ContainerInfo i;
  EXPECT_EQ(i.label(), "host");
  i.cgroup_path = "/";
  EXPECT_EQ(i.label(), "host");
  i.cgroup_path = "/user.slice/user-1000.slice/session-3.scope";
  EXPECT_EQ(i.label(), "session-3.scope");
  i.cgroup_path = "/system.slice/foo.service/";
  EXPECT_EQ(i.label(), "foo.service");
  i = parseCgroupPath("/system.slice/docker-" + kId + ".scope");
  EXPECT_EQ(i.label(), "0123456789ab");
  i.pod_name = "triton-0";
  EXPECT_EQ(i.label(), "triton-0");
}

// ---- A fake /proc and cgroupfs -------------------------------------------------------------

class FakeTree : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ig-process-info-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr) << strerror(errno);
    root_ = tmpl;
    proc_ = root_ + "/proc";
    cg_ = root_ + "/cg";
    fs::create_directories(proc_ + "/self/ns");
    fs::create_directories(cg_);
    write(proc_ + "/self/ns/uts", "");
    fs::create_symlink("/", proc_ + "/self/root");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  static void write(const std::string& path, const std::string& data) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    ASSERT_TRUE(f.good()) << path;
  }
  static uint64_t inodeOf(const std::string& path) {
    struct stat st;
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_ino;
  }
  // A cgroup directory; returns its id (the directory's inode).
  uint64_t mkCgroup(const std::string& path) {
    fs::create_directories(cg_ + path);
    return inodeOf(cg_ + path);
  }
  // A process in the fake /proc: its cgroup file, environ and own UTS namespace file.
  void mkProcess(uint32_t pid, const std::string& cgroup_path, const std::string& environ = "") {
    std::string base = proc_ + "/" + std::to_string(pid);
    write(base + "/cgroup",
          "12:memory:/whatever\n1:name=systemd:" + cgroup_path + "\n0::" + cgroup_path + "\n");
    write(base + "/environ", environ);
    write(base + "/ns/uts", "");
    write(base + "/stat", std::to_string(pid) + " (proc) S 1 1 1 0 -1\n");
  }

  std::string root_, proc_, cg_;
};

const std::string kPodCgroup = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
                               kUidSd + ".slice/cri-containerd-" + kId + ".scope";
const std::string kPodEnv = nul({"PATH=/usr/bin", "HOSTNAME=triton-0", "POD_NAMESPACE=ml"});

TEST_F(FakeTree, CgroupPathOf) {
  ProcessInfo pi(proc_, cg_);
  mkProcess(100, kPodCgroup);
  EXPECT_EQ(pi.cgroupPathOf(100), kPodCgroup);
  write(proc_ + "/101/cgroup", "12:memory:/a\n1:name=systemd:/b\n");  // v1 only
  EXPECT_EQ(pi.cgroupPathOf(101), std::nullopt);
  write(proc_ + "/102/cgroup", "0::\n");
  EXPECT_EQ(pi.cgroupPathOf(102), std::nullopt);
  write(proc_ + "/103/cgroup", "0::/no/newline");
  EXPECT_EQ(pi.cgroupPathOf(103), "/no/newline");
  write(proc_ + "/104/cgroup", std::string("0::/a\0b\n", 8));
  EXPECT_EQ(pi.cgroupPathOf(104), std::nullopt);
  write(proc_ + "/105/cgroup", "1:x:/a\n" + std::string(70000, 'x') + "\n0::/late\n");  // > 64 KiB
  EXPECT_EQ(pi.cgroupPathOf(105), std::nullopt);
  EXPECT_EQ(pi.cgroupPathOf(999), std::nullopt);
  EXPECT_EQ(pi.cgroupPathOf(0), std::nullopt);
}

TEST_F(FakeTree, CgroupIdOf) {
  ProcessInfo pi(proc_, cg_);
  EXPECT_EQ(pi.cgroupRoot(), cg_);
  uint64_t id = mkCgroup(kPodCgroup);
  write(cg_ + "/system.slice/cgroup.procs", "1\n");
  EXPECT_EQ(pi.cgroupIdOf(kPodCgroup), id);
  EXPECT_EQ(pi.cgroupIdOf("/"), inodeOf(cg_));
  EXPECT_EQ(pi.cgroupIdOf("/kubepods.slice"), inodeOf(cg_ + "/kubepods.slice"));
  EXPECT_EQ(pi.cgroupIdOf("/absent"), std::nullopt);
  EXPECT_EQ(pi.cgroupIdOf("/system.slice/cgroup.procs"), std::nullopt);  // not a directory
  EXPECT_EQ(pi.cgroupIdOf("kubepods.slice"), std::nullopt);              // relative
  EXPECT_EQ(pi.cgroupIdOf("/kubepods.slice/.."), std::nullopt);          // leaves nothing
  EXPECT_EQ(pi.cgroupIdOf("/../cg"), std::nullopt);
  EXPECT_EQ(pi.cgroupIdOf(""), std::nullopt);
  EXPECT_EQ(pi.cgroupIdOf(std::string("/kubepods.slice\0/x", 18)), std::nullopt);
}

TEST_F(FakeTree, ContainerOfThroughTheHint) {
  uint64_t id = mkCgroup(kPodCgroup);
  mkProcess(100, kPodCgroup, kPodEnv);
  ProcessInfo pi(proc_, cg_);
  ContainerInfo info = pi.containerOf(id, 100);
  EXPECT_EQ(info.cgroup_path, kPodCgroup);
  EXPECT_EQ(info.runtime, "containerd");
  EXPECT_EQ(info.container_id, kId);
  EXPECT_EQ(info.pod_uid, kUid);
  EXPECT_EQ(info.qos, "burstable");
  EXPECT_EQ(info.pod_name, "triton-0");
  EXPECT_EQ(info.pod_namespace, "ml");
  EXPECT_EQ(info.label(), "triton-0");
  EXPECT_EQ(pi.containerOf(0, 100).cgroup_path, "");
  EXPECT_EQ(pi.containerOf(id + 1000000, 0).cgroup_path, "");  // unknown id, no hint
}

TEST_F(FakeTree, HostNetworkPodHasNoPodNameFromHostname) {
  uint64_t id = mkCgroup(kPodCgroup);
  mkProcess(100, kPodCgroup, nul({"HOSTNAME=node-7", "KUBERNETES_NAMESPACE=infra"}));
  fs::remove(proc_ + "/100/ns/uts");
  fs::create_hard_link(proc_ + "/self/ns/uts", proc_ + "/100/ns/uts");  // our UTS namespace
  ProcessInfo pi(proc_, cg_);
  ContainerInfo info = pi.containerOf(id, 100);
  EXPECT_EQ(info.container_id, kId);
  EXPECT_EQ(info.pod_name, "");
  EXPECT_EQ(info.pod_namespace, "infra");
  EXPECT_EQ(info.label(), "0123456789ab");
}

TEST_F(FakeTree, EnvironIsBoundedAndValidated) {
  const std::string cg2 = "/kubepods/pod" + kUid + "/" + kId2;
  uint64_t id = mkCgroup(kPodCgroup), id2 = mkCgroup(cg2);
  // HOSTNAME past the first 64 KiB is not read; an invalid namespace is ignored.
  mkProcess(100, kPodCgroup,
            nul({"POD_NAMESPACE=Bad_NS", "X=" + std::string(70000, 'x'), "HOSTNAME=late"}));
  mkProcess(101, cg2, nul({"HOSTNAME=UPPER.case", "POD_NAMESPACE=a.b"}));
  ProcessInfo pi(proc_, cg_);
  ContainerInfo a = pi.containerOf(id, 100);
  EXPECT_EQ(a.container_id, kId);
  EXPECT_EQ(a.pod_name, "");
  EXPECT_EQ(a.pod_namespace, "");
  ContainerInfo b = pi.containerOf(id2, 101);
  EXPECT_EQ(b.runtime, "cri");
  EXPECT_EQ(b.qos, "guaranteed");
  EXPECT_EQ(b.pod_name, "");       // not a DNS name
  EXPECT_EQ(b.pod_namespace, "");  // a namespace has no dots
}

TEST_F(FakeTree, NoPodNamesOutsideKubernetes) {
  const std::string docker = "/system.slice/docker-" + kId + ".scope";
  uint64_t id = mkCgroup(docker);
  mkProcess(100, docker, kPodEnv);
  ProcessInfo pi(proc_, cg_);
  ContainerInfo info = pi.containerOf(id, 100);
  EXPECT_EQ(info.runtime, "docker");
  EXPECT_EQ(info.pod_name, "");
  EXPECT_EQ(info.pod_namespace, "");
}

TEST_F(FakeTree, ContainerOfThroughTheWalk) {
  uint64_t id = mkCgroup(kPodCgroup);
  mkCgroup("/system.slice/docker-" + kId2 + ".scope");
  write(cg_ + kPodCgroup + "/cgroup.procs", "200\n201\n");
  mkProcess(200, kPodCgroup, nul({"HOSTNAME=walked-1"}));
  mkProcess(300, "/user.slice");  // a hint in another cgroup is not used
  ProcessInfo pi(proc_, cg_);
  ContainerInfo info = pi.containerOf(id, 300);
  EXPECT_EQ(info.cgroup_path, kPodCgroup);
  EXPECT_EQ(info.container_id, kId);
  EXPECT_EQ(info.pod_uid, kUid);
  EXPECT_EQ(info.pod_name, "walked-1");  // the first process of cgroup.procs
  EXPECT_EQ(pi.containerOf(inodeOf(cg_ + "/system.slice"), 0).cgroup_path, "/system.slice");
  EXPECT_EQ(pi.containerOf(inodeOf(cg_), 0).label(), "host");
  EXPECT_EQ(pi.containerOf(inodeOf(cg_), 0).cgroup_path, "/");

  // A cgroup made after the walk is not found by walking again within 10 s ...
  const std::string late = "/system.slice/docker-" + std::string(64, 'a') + ".scope";
  uint64_t late_id = mkCgroup(late);
  EXPECT_EQ(pi.containerOf(late_id, 0).cgroup_path, "");
  // ... but is through a hint in it, and a fresh resolver walks and finds it.
  mkProcess(400, late);
  EXPECT_EQ(pi.containerOf(late_id, 400).container_id, std::string(64, 'a'));
  ProcessInfo fresh(proc_, cg_);
  EXPECT_EQ(fresh.containerOf(late_id, 0).cgroup_path, late);
}

TEST_F(FakeTree, CachedAnswerDropsWhenTheCgroupGoes) {
  const std::string a = "/system.slice/docker-" + kId + ".scope";
  uint64_t id = mkCgroup(a);
  mkProcess(100, a);
  ProcessInfo pi(proc_, cg_);
  EXPECT_EQ(pi.containerOf(id, 100).container_id, kId);
  fs::remove(cg_ + a);
  EXPECT_EQ(pi.containerOf(id, 0).cgroup_path, "");
}

TEST_F(FakeTree, WalkDepthIsBounded) {
  std::string path;
  std::vector<uint64_t> ids;  // ids[d - 1]: the directory at depth d
  for (int d = 1; d <= 34; ++d) {
    path += "/d" + std::to_string(d);
    ids.push_back(mkCgroup(path));
  }
  ProcessInfo pi(proc_, cg_);
  EXPECT_EQ(pi.containerOf(ids[31], 0).label(), "d32");  // depth 32: found
  ProcessInfo pi2(proc_, cg_);
  EXPECT_EQ(pi2.containerOf(ids[32], 0).cgroup_path, "");  // depth 33: beyond the bound
}

TEST_F(FakeTree, Alive) {
  ProcessInfo pi(proc_, cg_);
  write(proc_ + "/300/stat", "300 (my proc) R 1 300 300 0 -1\n");
  write(proc_ + "/301/stat", "301 (zom) bie) Z 1 301 301 0 -1\n");
  write(proc_ + "/302/stat", "302 (x) Z) S 1 302 302 0 -1\n");  // the last ')' ends comm
  write(proc_ + "/303/stat", "303 (dead) X 1\n");
  fs::create_directories(proc_ + "/304");  // no stat file: exists, state unknown
  EXPECT_TRUE(pi.alive(300));
  EXPECT_FALSE(pi.alive(301));
  EXPECT_TRUE(pi.alive(302));
  EXPECT_FALSE(pi.alive(303));
  EXPECT_TRUE(pi.alive(304));
  EXPECT_FALSE(pi.alive(305));
  EXPECT_FALSE(pi.alive(0));
}

const char kTcpHeader[] =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout "
    "inode\n";
const char kTcp6Header[] =
    "  sl  local_address                         remote_address                        st "
    "tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";

TEST_F(FakeTree, ListenerOf) {
  write(proc_ + "/net/tcp",
        std::string(kTcpHeader) +
            // 127.0.0.1:8080 established (inode 111), then listening (inode 12345).
            "   0: 0100007F:1F90 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000 "
            "       0 111 1 0000000000000000 20 4 30 10 -1\n"
            "   1: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 "
            "       0 12345 1 0000000000000000 100 0 0 10 0\n"
            // 0.0.0.0:8082 only established.
            "   2: 00000000:1F92 0100007F:D2F1 01 00000000:00000000 00:00000000 00000000  1000 "
            "       0 333 1 0000000000000000 20 4 30 10 -1\n"
            // Malformed lines.
            "   3: 00000000:1F9 00000000:0000 0A\n"
            "   4: garbage\n"
            "\n");
  write(proc_ + "/net/tcp6",
        std::string(kTcp6Header) +
            // [::]:8081 listening (inode 222).
            "   0: 00000000000000000000000000000000:1F91 00000000000000000000000000000000:0000 0A "
            "00000000:00000000 00:00000000 00000000  1000        0 222 1 0000000000000000 100 0 "
            "0 10 0\n");
  fs::create_directories(proc_ + "/400/fd");
  fs::create_symlink("socket:[999]", proc_ + "/400/fd/3");
  fs::create_symlink("/dev/null", proc_ + "/400/fd/0");
  fs::create_directories(proc_ + "/401/fd");
  fs::create_symlink("/dev/null", proc_ + "/401/fd/0");
  fs::create_symlink("socket:[12345]", proc_ + "/401/fd/5");
  fs::create_directories(proc_ + "/402/fd");
  fs::create_symlink("socket:[222]", proc_ + "/402/fd/7");
  fs::create_symlink("socket:[12345]", proc_ + "/402/fd/8");  // shared: the lower pid wins
  fs::create_directories(proc_ + "/403/fd");
  fs::create_symlink("socket:[333]", proc_ + "/403/fd/1");
  fs::create_symlink("socket:[111]", proc_ + "/403/fd/2");
  fs::create_directories(proc_ + "/notapid/fd");
  fs::create_symlink("socket:[12345]", proc_ + "/notapid/fd/1");

  ProcessInfo pi(proc_, cg_);
  EXPECT_EQ(pi.listenerOf(8080), 401u);
  EXPECT_EQ(pi.listenerOf(8081), 402u);
  EXPECT_EQ(pi.listenerOf(8082), std::nullopt);  // established only
  EXPECT_EQ(pi.listenerOf(9999), std::nullopt);
  // Cached for 5 s: the answer holds after the socket moves ...
  fs::remove(proc_ + "/401/fd/5");
  EXPECT_EQ(pi.listenerOf(8080), 401u);
  // ... and a fresh resolver sees the move.
  ProcessInfo fresh(proc_, cg_);
  EXPECT_EQ(fresh.listenerOf(8080), 402u);

  ProcessInfo no_tables(root_ + "/nowhere", cg_);
  EXPECT_EQ(no_tables.listenerOf(8080), std::nullopt);
}

TEST_F(FakeTree, CudaLibrariesMappedBy) {
  // A library on our root, reached by two names (one a symlink), and one in a container.
  write(root_ + "/lib/libcuda.so.1", "elf");
  fs::create_symlink(root_ + "/lib/libcuda.so.1", root_ + "/lib/libcuda.so");
  write(root_ + "/ctr/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05", "elf2");
  write(root_ + "/lib dir/libcuda.so.1", "elf3");
  auto maps = [&](uint32_t pid, const std::string& root, const std::string& lines) {
    std::string base = proc_ + "/" + std::to_string(pid);
    write(base + "/maps", lines);
    fs::create_symlink(root, base + "/root");
  };
  auto line = [](const std::string& path) {
    return "7f1c2a000000-7f1c2a100000 r-xp 00000000 fd:01 1234567                    " + path +
           "\n";
  };
  const std::string lib = root_ + "/lib/libcuda.so.1";
  const std::string ctr_lib = "/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05";
  maps(500, "/",
       "55d0c0000000-55d0c0001000 r--p 00000000 fd:01 42 /usr/bin/tritonserver\n" + line(lib) +
           line(lib) + "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0       [stack]\n" +
           "7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n");
  maps(501, root_ + "/ctr", line(ctr_lib));
  maps(502, root_ + "/ctr", line(ctr_lib));                           // same file: deduplicated
  maps(503, "/", line("/usr/lib/x86_64-linux-gnu/libcudart.so.12"));  // not the driver
  maps(504, "/", line("/gone/libcuda.so.1 (deleted)"));
  maps(505, "/", line(root_ + "/lib/libcuda.so"));  // the same inode as 500's
  maps(506, "/",
       line(root_ + "/lib dir/libcuda.so.1") + "garbage\n" + "a b c d e\n" + "a b c d e f\n");
  ProcessInfo pi(proc_, cg_);
  const std::vector<std::string> want = {lib, proc_ + "/501/root" + ctr_lib,
                                         root_ + "/lib dir/libcuda.so.1"};
  EXPECT_EQ(pi.cudaLibrariesMappedBy({500, 501, 502, 503, 504, 505, 506, 999}), want);
  EXPECT_EQ(pi.cudaLibrariesMappedBy({}), want);  // every process, ascending pid
  EXPECT_EQ(pi.cudaLibrariesMappedBy({502}),
            std::vector<std::string>{proc_ + "/502/root" + ctr_lib});
  EXPECT_EQ(pi.cudaLibrariesMappedBy({503, 504}), std::vector<std::string>{});
}

TEST_F(FakeTree, LocateCudaLibrary) {
  ProcessInfo pi(proc_, cg_);
  write(root_ + "/configured/libcuda.so.1", "elf");
  write(root_ + "/mapped/libcuda.so.1", "elf");
  write(root_ + "/std2/libcuda.so.1", "elf");
  fs::create_directories(root_ + "/std3/libcuda.so.1");  // a directory is not a library
  write(proc_ + "/600/maps", "7f00-7f01 r-xp 00000000 fd:01 1 " + root_ + "/mapped/libcuda.so.1\n");
  fs::create_symlink("/", proc_ + "/600/root");
  const std::vector<std::string> places = {root_ + "/std1/libcuda.so.1",
                                           root_ + "/std2/libcuda.so.1"};
  const std::vector<std::string> none = {root_ + "/std1/libcuda.so.1",
                                         root_ + "/std3/libcuda.so.1"};
  std::string why;

  EXPECT_EQ(locateCudaLibrary(root_ + "/configured/libcuda.so.1", {600}, pi, &why, places),
            root_ + "/configured/libcuda.so.1");
  EXPECT_EQ(why, root_ + "/configured/libcuda.so.1, set by gpu.library");
  EXPECT_EQ(locateCudaLibrary(root_ + "/absent.so", {600}, pi, &why, places), std::nullopt);
  EXPECT_EQ(why, "gpu.library is " + root_ + "/absent.so, which does not exist or is not a file");

  EXPECT_EQ(locateCudaLibrary("", {600}, pi, &why, places), root_ + "/mapped/libcuda.so.1");
  EXPECT_EQ(why, root_ + "/mapped/libcuda.so.1, mapped by a backend process");
  EXPECT_EQ(locateCudaLibrary("", {601}, pi, &why, places), root_ + "/std2/libcuda.so.1");
  EXPECT_EQ(why, root_ + "/std2/libcuda.so.1, a standard place");
  EXPECT_EQ(locateCudaLibrary("", {}, pi, &why, places), root_ + "/std2/libcuda.so.1");

  EXPECT_EQ(locateCudaLibrary("", {601, 602}, pi, &why, none), std::nullopt);
  EXPECT_EQ(why,
            "no CUDA driver library (libcuda.so.1) found: no backend process (pid 601, 602) "
            "maps libcuda.so*, and none exists of " +
                root_ + "/std1/libcuda.so.1 or " + root_ + "/std3/libcuda.so.1");
  EXPECT_EQ(locateCudaLibrary("", {}, pi, nullptr, none), std::nullopt);  // why may be null
  EXPECT_EQ(locateCudaLibrary("", {}, pi, &why, {}), std::nullopt);
  EXPECT_EQ(why,
            "no CUDA driver library (libcuda.so.1) found: no backend process to look in, and no "
            "standard place was given");
}

TEST(LocateCudaLibrary, StandardPlacesNamedInWhy) {
  const auto& places = standardCudaLibraryPlaces();
  ASSERT_EQ(places.size(), 6u);
  EXPECT_EQ(places[0], "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
  EXPECT_EQ(places[5], "/usr/local/cuda/compat/libcuda.so.1");
  for (const auto& p : places) {
    if (access(p.c_str(), F_OK) == 0) GTEST_SKIP() << "this machine has " << p;
  }
  ProcessInfo pi("/nonexistent-proc", "/nonexistent-cg");
  std::string why;
  EXPECT_EQ(locateCudaLibrary("", {}, pi, &why), std::nullopt);
  EXPECT_EQ(why,
            "no CUDA driver library (libcuda.so.1) found: no backend process to look in, and none "
            "exists of /usr/lib/x86_64-linux-gnu/libcuda.so.1, "
            "/usr/lib/aarch64-linux-gnu/libcuda.so.1, /usr/lib64/libcuda.so.1, "
            "/usr/lib/libcuda.so.1, /usr/local/nvidia/lib64/libcuda.so.1 or "
            "/usr/local/cuda/compat/libcuda.so.1");
}

// ---- The real system -----------------------------------------------------------------------

TEST(RealSystem, ListenerOfOurOwnSocket) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  uint16_t port = ntohs(addr.sin_port);
  ProcessInfo pi;
  EXPECT_EQ(pi.listenerOf(port), static_cast<uint32_t>(::getpid()));
  ::close(fd);
  ProcessInfo fresh;
  EXPECT_EQ(fresh.listenerOf(port), std::nullopt);
}

TEST(RealSystem, CgroupIdOfOurOwnCgroup) {
  ProcessInfo pi;
  struct statfs sfs;
  if (::statfs(pi.cgroupRoot().c_str(), &sfs) != 0 || sfs.f_type != 0x63677270) {
    GTEST_SKIP() << "no cgroup v2 at /sys/fs/cgroup or /sys/fs/cgroup/unified";
  }
  EXPECT_TRUE(pi.cgroupRoot() == "/sys/fs/cgroup" || pi.cgroupRoot() == "/sys/fs/cgroup/unified")
      << pi.cgroupRoot();
  auto path = pi.cgroupPathOf(::getpid());
  ASSERT_TRUE(path.has_value());
  std::string full = pi.cgroupRoot() + (*path == "/" ? "" : *path);
  struct stat st;
  ASSERT_EQ(::stat(full.c_str(), &st), 0) << full;
  auto id = pi.cgroupIdOf(*path);
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(*id, st.st_ino);
  EXPECT_EQ(pi.containerOf(*id, ::getpid()).cgroup_path, *path);
  ProcessInfo walker;  // through the cgroupfs walk
  EXPECT_EQ(walker.containerOf(*id, 0).cgroup_path, *path);
}

TEST(RealSystem, AliveAndZombie) {
  ProcessInfo pi;
  EXPECT_TRUE(pi.alive(static_cast<uint32_t>(::getpid())));
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  // Until we reap it, the child is a zombie.
  bool zombie = false;
  for (int i = 0; i < 200 && !zombie; ++i) {
    siginfo_t si{};
    if (::waitid(P_PID, child, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == child) {
      zombie = true;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ASSERT_TRUE(zombie);
  EXPECT_FALSE(pi.alive(static_cast<uint32_t>(child)));
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_FALSE(pi.alive(static_cast<uint32_t>(child)));
}

TEST(RealSystem, CudaLibraryMappedByUs) {
  // Any file named libcuda.so* that we map shows in our /proc/self/maps.
  char tmpl[] = "/tmp/ig-libcuda-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string path = std::string(tmpl) + "/libcuda.so.1";
  {
    std::ofstream f(path);
    f << std::string(4096, 'x');
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  void* m = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
  ASSERT_NE(m, MAP_FAILED);
  ProcessInfo pi;
  EXPECT_EQ(pi.cudaLibrariesMappedBy({static_cast<uint32_t>(::getpid())}),
            std::vector<std::string>{path});
  std::string why;
  EXPECT_EQ(locateCudaLibrary("", {static_cast<uint32_t>(::getpid())}, pi, &why), path);
  ::munmap(m, 4096);
  ::close(fd);
  EXPECT_EQ(pi.cudaLibrariesMappedBy({static_cast<uint32_t>(::getpid())}),
            std::vector<std::string>{});
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
}

}  // namespace
}  // namespace infergate::gpu
