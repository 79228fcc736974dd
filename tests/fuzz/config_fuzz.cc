// libFuzzer target: the YAML configuration loader and validator (config/config.h). Any bytes
// must give a Config or an INVALID_ARGUMENT whose message starts with the source name; nothing
// may throw (yaml-cpp's exceptions are caught in the loader), crash or recurse without bound.
// A config that loads must load again, identically, from its own source (no hidden state).
//
// Input: the YAML text itself.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/config.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<infergate::config::Config> c =
      infergate::config::loadConfigString(yaml, "fuzz.yaml");
  if (!c.ok()) {
    FUZZ_CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
    FUZZ_CHECK(c.status().message().substr(0, 9) == "fuzz.yaml");
    return 0;
  }
  FUZZ_CHECK(c->reactors >= 1);
  FUZZ_CHECK(c->cpus.empty() || c->cpus.size() == static_cast<size_t>(c->reactors));
  absl::StatusOr<infergate::config::Config> again =
      infergate::config::loadConfigString(yaml, "fuzz.yaml");
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->models.size() == c->models.size());
  FUZZ_CHECK(again->listeners.size() == c->listeners.size());
  return 0;
}
