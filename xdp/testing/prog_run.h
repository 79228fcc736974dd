#pragma once
// BPF_PROG_TEST_RUN for XDP programs, with the metadata area reported separately.

#include <cstdint>
#include <vector>

namespace infergate::xdp::testing {

struct RunResult {
  int err = 0;               // 0, or -errno from bpf_prog_test_run_opts
  uint32_t retval = 0;       // the XDP action
  uint32_t duration_ns = 0;  // mean per run when repeat > 1
  std::vector<uint8_t> meta; // XDP metadata in front of the frame
  std::vector<uint8_t> out;  // the frame after the program
};

// `meta_in` bytes of zero metadata go in front of the frame (a multiple of 4, at most 32, the
// kernel's limit: with 32 the program finds no metadata room, as on a driver without it).
RunResult runXdp(int prog_fd, const std::vector<uint8_t>& packet, uint32_t repeat = 1,
                 uint32_t meta_in = 0);

}  // namespace infergate::xdp::testing
