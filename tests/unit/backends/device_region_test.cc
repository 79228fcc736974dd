// DeviceRegion: the emulated CUDA region (always) and the real one (CUDA builds; the copy tests
// skip without a GPU).
#include "backends/device_region.h"
#include "backends/pinned_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <spawn.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "tests/unit/backends/test_util.h"

#ifdef INFERGATE_WITH_CUDA
#include <cuda_runtime_api.h>
extern char** environ;
#endif

namespace infergate::backends {
namespace {

std::string uniqueKey(const char* tag) {
  static int n = 0;
  return "/igtest." + std::to_string(::getpid()) + "." + tag + "." + std::to_string(n++);
}

TEST(EmulatedCudaRegion, HandleNamesTheKeyAndPeersSeeTheBytes) {
  const std::string key = uniqueKey("h");
  auto r = createEmulatedCudaRegion(key, 4096);
  ASSERT_TRUE(r.ok()) << r.status();
  DeviceRegion& d = **r;
  EXPECT_EQ(d.kind(), "emulated");
  EXPECT_EQ(d.size(), 4096u);
  ASSERT_EQ(d.ipcHandle().size(), kCudaIpcHandleBytes);
  // The handle names the object: the key, "." and its random suffix (kShmSuffixBytes).
  const std::string text = std::string(kEmulatedHandlePrefix) + key + ".";
  EXPECT_EQ(d.ipcHandle().substr(0, text.size()), text);
  EXPECT_EQ(d.ipcHandle()[text.size() - 1 + kShmSuffixBytes], '\0');

  std::vector<uint8_t> a(100), b(50);
  std::iota(a.begin(), a.end(), 1);
  std::iota(b.begin(), b.end(), 200);
  HostToDevice copies[] = {{a.data(), 0, a.size()}, {b.data(), 1000, b.size()}};
  ASSERT_TRUE(d.copyIn(0, copies, 2).ok());

  // A peer (the test server does this) maps the name from the handle and sees the bytes.
  const std::string name(d.ipcHandle().substr(kEmulatedHandlePrefix.size(),
                                              key.size() + kShmSuffixBytes));
  int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  auto* peer = static_cast<uint8_t*>(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ::close(fd);
  ASSERT_NE(peer, MAP_FAILED);
  EXPECT_EQ(std::memcmp(peer, a.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(peer + 1000, b.data(), b.size()), 0);
  // ...and what the peer writes comes back with copyOut.
  for (int i = 0; i < 64; ++i) peer[2048 + i] = static_cast<uint8_t>(i * 3);
  std::vector<uint8_t> out(64);
  ASSERT_TRUE(d.copyOut(0, 2048, out.data(), out.size()).ok());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out[i], static_cast<uint8_t>(i * 3));
  ::munmap(peer, 4096);
}

TEST(EmulatedCudaRegion, RefusesRangesOutsideAndDoesNotCopyPartially) {
  auto r = createEmulatedCudaRegion(uniqueKey("r"), 4096);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<uint8_t> a(64, 7), out(64, 0);
  HostToDevice ok_then_bad[] = {{a.data(), 0, 64}, {a.data(), 4090, 64}};
  absl::Status s = (*r)->copyIn(0, ok_then_bad, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*r)->copyOut(0, 0, out.data(), 64).ok());
  EXPECT_EQ(out[0], 0) << "the first copy ran although the batch was refused";
  EXPECT_EQ((*r)->copyOut(0, SIZE_MAX - 8, out.data(), 64).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*r)->copyOut(0, 4096 - 63, out.data(), 64).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EmulatedCudaRegion, KeyTooLongForTheHandle) {
  auto r = createEmulatedCudaRegion("/" + std::string(60, 'k'), 4096);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EmulatedCudaRegion, OnlyWithTheEnvironmentSwitch) {
  ::unsetenv("INFERGATE_CUDA_SHM_EMULATION");
  EXPECT_FALSE(cudaShmEmulationRequested());
  ::setenv("INFERGATE_CUDA_SHM_EMULATION", "yes", 1);
  EXPECT_FALSE(cudaShmEmulationRequested());
  ::setenv("INFERGATE_CUDA_SHM_EMULATION", "1", 1);
  EXPECT_TRUE(cudaShmEmulationRequested());
  ::unsetenv("INFERGATE_CUDA_SHM_EMULATION");
}

#ifndef INFERGATE_WITH_CUDA
TEST(CudaRegion, UnimplementedWithoutCuda) {
  auto r = createCudaRegion(0, 4096, 2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(r.status().message()).find("INFERGATE_WITH_CUDA"), std::string::npos);
}
#else
TEST(CudaRegion, RoundTripOnTheGpu) {
  auto r = createCudaRegion(0, 1 << 20, 4);
  if (!r.ok()) {
    // No GPU here: the error must say what CUDA said, and the test cannot check copies.
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    GTEST_SKIP() << "no usable GPU: " << r.status();
  }
  DeviceRegion& d = **r;
  EXPECT_EQ(d.kind(), "cuda");
  ASSERT_EQ(d.ipcHandle().size(), kCudaIpcHandleBytes);
  EXPECT_NE(d.ipcHandle(), std::string(kCudaIpcHandleBytes, '\0'));
  std::vector<uint8_t> a(300000), b(4096), out(300000);
  std::iota(a.begin(), a.end(), 0);
  std::iota(b.begin(), b.end(), 77);
  HostToDevice copies[] = {{a.data(), 0, a.size()}, {b.data(), 512 * 1024, b.size()}};
  ASSERT_TRUE(d.copyIn(3, copies, 2).ok());
  ASSERT_TRUE(d.copyOut(1, 0, out.data(), a.size()).ok());
  EXPECT_EQ(out, a);
  std::vector<uint8_t> out2(4096);
  ASSERT_TRUE(d.copyOut(2, 512 * 1024, out2.data(), out2.size()).ok());
  EXPECT_EQ(out2, b);
  EXPECT_EQ(d.copyIn(4, copies, 1).code(), absl::StatusCode::kInvalidArgument);
}

// What Triton does with the handle, in another process (CUDA IPC handles cannot be opened by
// the process that made them): this test binary re-executed with IG_IPC_CHILD=<hex handle>
// runs CudaIpcChild.OpenCheckAndWrite, which opens the handle, checks the bytes the parent
// copied in at offset 0, and writes the "outputs" at offset 65536.

TEST(CudaIpcChild, OpenCheckAndWrite) {
  const char* h = std::getenv("IG_IPC_CHILD");
  if (h == nullptr) GTEST_SKIP() << "runs only as the child of CudaRegion.HandleOpensInAnotherProcess";
  cudaIpcMemHandle_t handle;
  ASSERT_EQ(std::strlen(h), 2 * sizeof(handle));
  const std::string raw = test_util::unhex(h);
  std::memcpy(&handle, raw.data(), sizeof(handle));
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  std::vector<uint8_t> in(4096);
  ASSERT_EQ(cudaMemcpy(in.data(), p, in.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(in[i], static_cast<uint8_t>(i * 7)) << i;
  std::vector<uint8_t> out(4096);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(255 - in[i]);
  ASSERT_EQ(cudaMemcpy(static_cast<uint8_t*>(p) + 65536, out.data(), out.size(),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaIpcCloseMemHandle(p), cudaSuccess);
}

TEST(CudaRegion, HandleOpensInAnotherProcess) {
  auto r = createCudaRegion(0, 1 << 20, 2);
  if (!r.ok()) GTEST_SKIP() << "no usable GPU: " << r.status();
  DeviceRegion& d = **r;
  std::vector<uint8_t> in(4096);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7);
  HostToDevice c{in.data(), 0, in.size()};
  ASSERT_TRUE(d.copyIn(0, &c, 1).ok());

  std::string env = "IG_IPC_CHILD=" + test_util::hex(d.ipcHandle());
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(env.data());
  envp.push_back(nullptr);
  // Re-run the command line that started us (it may start with the dynamic loader, as the
  // device bundle does: scripts/gpu-bundle.sh), up to the first gtest flag.
  std::vector<std::string> args;
  {
    FILE* f = std::fopen("/proc/self/cmdline", "rb");
    ASSERT_NE(f, nullptr);
    std::string cur;
    for (int ch = std::fgetc(f); ch != EOF; ch = std::fgetc(f)) {
      if (ch == 0) {
        args.push_back(cur);
        cur.clear();
      } else {
        cur += static_cast<char>(ch);
      }
    }
    std::fclose(f);
  }
  size_t keep = 0;
  while (keep < args.size() && args[keep].rfind("--gtest", 0) != 0) ++keep;
  args.resize(keep);
  ASSERT_FALSE(args.empty());
  args.push_back("--gtest_filter=CudaIpcChild.OpenCheckAndWrite");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(::posix_spawn(&pid, args[0].c_str(), nullptr, nullptr, argv.data(), envp.data()), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child failed: " << status;

  std::vector<uint8_t> out(4096);
  ASSERT_TRUE(d.copyOut(1, 65536, out.data(), out.size()).ok());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], static_cast<uint8_t>(255 - in[i])) << i;
}
#endif

}  // namespace
}  // namespace infergate::backends
