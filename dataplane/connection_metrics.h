#pragma once
// The connection-level metrics of the kernel-socket reactors (socket and xdp-filter modes):
// registered once at start-up, recorded by SocketReactor with relaxed adds. afxdp mode counts
// the same events in its TCP counters (dataplane/tcp/counters.h, infergate_tcp_*).

#include "common/metrics.h"

namespace infergate::dataplane {

struct ConnectionMetrics {
  explicit ConnectionMetrics(common::MetricsRegistry& registry);

  common::Gauge& connections_active;
  common::Counter& connections_total;
  common::Counter& connections_refused;
  // Slow readers and output memory (dataplane/output_limits.h).
  common::Counter& send_timeouts;           // closed: drained too little in send_timeout
  common::Counter& output_limit_closes;     // closed: max_output_bytes_per_connection
  common::Counter& output_process_closes;   // closed: max_output_bytes (process budget)
  common::Counter& output_discarded_bytes;  // queued response bytes lost with a closed connection
  common::Counter& output_read_pauses;      // reading paused because output piled up
};

}  // namespace infergate::dataplane
