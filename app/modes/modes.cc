#include "app/modes/mode.h"

#include <string>

namespace infergate::app {

namespace {

struct ModeEntry {
  config::Mode mode;
  absl::StatusOr<std::unique_ptr<ServingMode>> (*make)();
};

// Every mode config::Mode names, and its factory (a build without XDP links unavailable.cc's
// factories for the XDP modes, which say what to build instead).
constexpr ModeEntry kModes[] = {
    {config::Mode::kSocket, &makeSocketMode},
    {config::Mode::kXdpFilter, &makeXdpFilterMode},
    {config::Mode::kAfXdp, &makeAfXdpMode},
    {config::Mode::kDpdk, &makeDpdkMode},
};

}  // namespace

absl::StatusOr<std::unique_ptr<ServingMode>> makeServingMode(config::Mode mode) {
  for (const ModeEntry& e : kModes) {
    if (e.mode == mode) return e.make();
  }
  return absl::UnimplementedError("mode '" + std::string(config::modeName(mode)) +
                                  "' is not available in this build; use mode: socket");
}

}  // namespace infergate::app
