#pragma once
// A Prometheus text-format (0.0.4) parser: sums the samples of one metric whose labels match.
// Used on the /metrics page the queue-depth source scrapes (backends/queue_metrics.h).
// Unparsable text is a status; nothing throws. Thread-safe (no shared state).

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace infergate::backends {

// Sum of the values of the samples named `metric` in Prometheus text `text` whose labels include
// every (name, value) in `match` (label values compared after unescaping). NaN samples are
// skipped. Empty optional: no matching (non-NaN) sample. INVALID_ARGUMENT naming the line when
// a line is not valid exposition syntax.
absl::StatusOr<std::optional<double>> sumMetricSamples(
    std::string_view text, std::string_view metric,
    const std::vector<std::pair<std::string, std::string>>& match);

}  // namespace infergate::backends
