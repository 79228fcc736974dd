// ealArgv() (pure) and initEal()'s refusals, without EAL running in this process: the two
// initEal() cases run in a child process each (EAL can be initialised once per process).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dataplane/dpdk/eal.h"
#include "gtest/gtest.h"

namespace infergate::dataplane::dpdk {
namespace {

using Argv = std::vector<std::string>;

TEST(EalArgvTest, DefaultsAreOneLcoreAndNoPci) {
  EXPECT_EQ(ealArgv(EalOptions{}), (Argv{"infergate", "-l", "0", "--no-pci"}));
}

TEST(EalArgvTest, EveryStructuredKeyThenTheRawArgs) {
  EalOptions o;
  o.main_lcore = 3;
  o.memory_mb = 256;
  o.in_memory = true;
  o.file_prefix = "ig1";
  o.vdevs = {"net_ring0", "net_af_packet0,iface=veth0"};
  o.allow_pci = {"0000:3b:00.1", "0000:3b:00.2"};
  o.args = {"--log-level=lib.eal:debug", "--no-telemetry"};
  EXPECT_EQ(ealArgv(o),
            (Argv{"infergate", "-l", "3", "-m", "256", "--in-memory", "--file-prefix=ig1",
                  "--vdev=net_ring0", "--vdev=net_af_packet0,iface=veth0", "-a", "0000:3b:00.1",
                  "-a", "0000:3b:00.2", "--log-level=lib.eal:debug", "--no-telemetry"}));
}

TEST(EalArgvTest, InMemoryWithoutHugepagesIsNoShconf) {
  EalOptions o;
  o.no_huge = true;
  o.in_memory = true;
  EXPECT_EQ(ealArgv(o), (Argv{"infergate", "-l", "0", "--no-huge", "--no-shconf", "--no-pci"}));
}

TEST(EalArgvTest, NoLcoreWhenNegativeAndNoMemoryWhenZero) {
  EalOptions o;
  o.main_lcore = -1;
  o.args = {"--lcores=(0-1)@0"};
  EXPECT_EQ(ealArgv(o), (Argv{"infergate", "--no-pci", "--lcores=(0-1)@0"}));
}

TEST(EalArgvTest, PciNamedInRawArgsIsNotDisabled) {
  for (const Argv& raw :
       {Argv{"-a", "0000:01:00.0"}, Argv{"-a0000:01:00.0"}, Argv{"--allow=0000:01:00.0"},
        Argv{"--allow", "0000:01:00.0"}, Argv{"-b", "0000:01:00.0"}, Argv{"--block=0000:01:00.0"},
        Argv{"-w", "0000:01:00.0"}, Argv{"--no-pci"}}) {
    EalOptions o;
    o.args = raw;
    Argv want{"infergate", "-l", "0"};
    want.insert(want.end(), raw.begin(), raw.end());
    EXPECT_EQ(ealArgv(o), want) << raw[0];
  }
  // Options that only look alike still get --no-pci.
  EalOptions o;
  o.args = {"--allowed", "--base-virtaddr=0x100000000"};
  EXPECT_EQ(ealArgv(o),
            (Argv{"infergate", "-l", "0", "--no-pci", "--allowed", "--base-virtaddr=0x100000000"}));
}

// Prints the status message to stderr and exits 0 when it is an error of `code`.
[[noreturn]] void exitWith(const absl::Status& s, absl::StatusCode code) {
  std::fprintf(stderr, "status: %s\n", std::string(s.message()).c_str());
  std::exit(!s.ok() && s.code() == code && !ealReady() ? 0 : 1);
}

TEST(EalInitDeathTest, NoHugepagesNamesTheFix) {
  if (reservedHugepages() > 0) GTEST_SKIP() << "this machine has hugepages reserved";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EalOptions o;
  o.in_memory = true;
  EXPECT_EXIT(exitWith(initEal(o), absl::StatusCode::kFailedPrecondition),
              ::testing::ExitedWithCode(0),
              "no hugepages are reserved.*nr_hugepages.*dpdk.no_huge: true");
}

TEST(EalInitDeathTest, EalFailureCarriesItsReasonAndArgv) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EalOptions o;
  o.no_huge = true;
  o.in_memory = true;
  o.memory_mb = 64;
  o.args = {"--no-telemetry", "--bogus-option"};
  EXPECT_EXIT(exitWith(initEal(o), absl::StatusCode::kFailedPrecondition),
              ::testing::ExitedWithCode(0),
              "EAL initialisation failed: Invalid argument \\(22\\) \\(an EAL argument is wrong.*"
              "argv: infergate -l 0 -m 64 --no-huge --no-shconf --no-pci --no-telemetry "
              "--bogus-option");
}

}  // namespace
}  // namespace infergate::dataplane::dpdk
