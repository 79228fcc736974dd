#include "dataplane/connection_metrics.h"

namespace infergate::dataplane {

ConnectionMetrics::ConnectionMetrics(common::MetricsRegistry& registry)
    : connections_active(
          registry.gauge("infergate_connections_active", "Client connections currently open.")),
      connections_total(
          registry.counter("infergate_connections_total", "Client connections accepted.")),
      connections_refused(registry.counter(
          "infergate_connections_refused_total",
          "Client connections refused because limits.max_connections was reached.")),
      send_timeouts(
          registry.counter("infergate_send_timeouts_total",
                           "Connections closed because their queued output drained less than "
                           "limits.min_drain_bytes in limits.send_timeout_ms (socket mode).")),
      output_limit_closes(registry.counter(
          "infergate_output_limit_closes_total",
          "Connections closed because their queued output would exceed the limit (socket mode).",
          {{"scope", "connection"}})),
      output_process_closes(registry.counter(
          "infergate_output_limit_closes_total",
          "Connections closed because their queued output would exceed the limit (socket mode).",
          {{"scope", "process"}})),
      output_discarded_bytes(registry.counter(
          "infergate_output_discarded_bytes_total",
          "Queued response bytes discarded because their connection closed first (socket "
          "mode).")),
      output_read_pauses(registry.counter(
          "infergate_output_read_pauses_total",
          "Times a connection stopped being read because its queued output reached half "
          "limits.max_output_bytes_per_connection or the process reached half "
          "limits.max_output_bytes (socket mode).")) {}

}  // namespace infergate::dataplane
