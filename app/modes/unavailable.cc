// The XDP modes in a build without the XDP program (compiled instead of xdp_filter_mode.cc and
// afxdp.cc): each says what to build.
#include "app/modes/mode.h"

namespace infergate::app {

namespace {
absl::Status needsXdp(const char* what) {
  return absl::UnimplementedError(
      std::string(what) +
      " needs a build with the XDP program and libxdp (cmake -DINFERGATE_WITH_XDP=ON, with "
      "libbpf-dev, libxdp-dev, bpftool and clang installed); use mode: socket");
}
}  // namespace

absl::StatusOr<std::unique_ptr<ServingMode>> makeXdpFilterMode() {
  return needsXdp("mode 'xdp-filter'");
}

absl::StatusOr<std::unique_ptr<ServingMode>> makeAfXdpMode() { return needsXdp("mode 'afxdp'"); }

absl::Status printXdpStats(const std::string&, std::FILE*) { return needsXdp("infergate stats"); }

}  // namespace infergate::app
