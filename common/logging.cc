#include "common/logging.h"

#include <string>

#include "spdlog/spdlog.h"

namespace infergate::common {

absl::Status setupLogging(std::string_view level) {
  const spdlog::level::level_enum lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError("unknown log level '" + std::string(level) +
                                      "' (expected trace, debug, info, warn, error, critical or off)");
  }
  spdlog::set_level(lvl);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-5l%$ %v");
  return absl::OkStatus();
}

}  // namespace infergate::common
