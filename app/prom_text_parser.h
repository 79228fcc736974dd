#pragma once
// A bounded parser of the Prometheus text exposition format (0.0.4), for `infergate top`,
// which reads a gateway's /metrics: the body is untrusted input (another process, possibly over
// the network), so every size is bounded and every malformed line is skipped and counted
// rather than trusted.
//
// Accepted per line: `# ...` comments (HELP / TYPE are skipped), blank lines, and samples
//   name[{label="value",...}] value [timestamp]
// with the metric and label names of the format ([a-zA-Z_:][a-zA-Z0-9_:]*), label values with
// the \\, \" and \n escapes, and values as decimal / exponent floats, +Inf, -Inf or NaN.
//
// Bounds (PromLimits): the body size and the number of samples are hard limits (an error: a
// partial view would be misleading); a line that is too long, has too many labels, too long a
// name or value, or does not parse is skipped and counted in PromScrape::skipped_lines.
//
// Threading: pure functions; no shared state.

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace infergate::app {

struct PromLimits {
  size_t max_body_bytes = 16u << 20;   // the whole exposition
  size_t max_samples = 200000;         // sample lines kept
  size_t max_line_bytes = 8192;        // one line, comments included
  size_t max_labels = 16;              // labels on one sample
  size_t max_name_bytes = 256;         // a metric or label name
  size_t max_label_value_bytes = 512;  // one label value, after unescaping
};

struct PromSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in the order written
  double value = 0;

  // The value of label `key`, or "" when absent.
  std::string_view label(std::string_view key) const;
};

struct PromScrape {
  std::vector<PromSample> samples;  // in the order of the body
  size_t skipped_lines = 0;         // malformed or over a per-line limit
};

// Parses a whole exposition. Errors: ResourceExhausted when the body or the sample count
// exceeds its limit.
absl::StatusOr<PromScrape> parsePromText(std::string_view body, const PromLimits& limits = {});

// One sample line (no trailing newline) into `out`; false when it is malformed or over a
// per-line limit (`out` is then unspecified). Exposed for the tests and the fuzz target.
bool parsePromSampleLine(std::string_view line, const PromLimits& limits, PromSample& out);

}  // namespace infergate::app
