// xdp::verifierReason: the one line of a verifier log a refusal is reported with (issue 32).
#include "xdp/host_probe.h"
#include <gtest/gtest.h>

namespace infergate::xdp {
namespace {

TEST(VerifierReason, IsTheLastLineBeforeTheStatistics) {
  const char* log =
      "func#0 @0\n"
      "0: R1=ctx() R10=fp0\n"
      "0: (85) call bpf_xdp_adjust_meta#54\n"
      "program of this type cannot use helper bpf_xdp_adjust_meta#54\n"
      "processed 3 insns (limit 1000000) max_states_per_insn 0 total_states 0\n"
      "stack depth 0\n"
      "verification time 12 usec\n";
  EXPECT_EQ(verifierReason(log), "program of this type cannot use helper bpf_xdp_adjust_meta#54");
}

TEST(VerifierReason, TakesTheLastLineWithoutATrailingNewline) {
  EXPECT_EQ(verifierReason("a\nR2 invalid mem access 'scalar'"), "R2 invalid mem access 'scalar'");
}

TEST(VerifierReason, EmptyOrOnlyStatisticsIsEmpty) {
  EXPECT_EQ(verifierReason(""), "");
  EXPECT_EQ(verifierReason("\n\nprocessed 1 insns\nverification time 1 usec\n"), "");
}

}  // namespace
}  // namespace infergate::xdp
