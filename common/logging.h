#pragma once
// Logging set-up (spdlog). Human-readable lines by default: "2026-11-29 23:10:57.123 info  msg".

#include <string_view>

#include "absl/status/status.h"

namespace infergate::common {

// Sets the global level ("trace".."critical", "off"); INVALID_ARGUMENT for an unknown name.
absl::Status setupLogging(std::string_view level);

}  // namespace infergate::common
