#include "dataplane/output_limits.h"

namespace infergate::dataplane {

common::Gauge& outputBytesGauge(common::MetricsRegistry& registry) {
  return registry.gauge("infergate_output_bytes",
                        "Response bytes queued in user space for peers, every connection of the "
                        "process (limits.max_output_bytes).");
}

}  // namespace infergate::dataplane
