#pragma once
// `infergate top` (docs/OPERATIONS.md): a live terminal view of a running gateway, read from
// its admin listener's /metrics. Each refresh scrapes, parses (app/prom_text_parser.h, bounded:
// the body is untrusted), reduces the samples to a Snapshot, and computes a Frame from the
// deltas against the previous snapshot over the elapsed time:
//   - per model and protocol: request rate, p50 / p99 latency (histogram_quantile over the
//     interval's bucket deltas), error rate and errors by status code;
//   - per model: queue depth per priority level, batches/s and mean batch size, rejections by
//     reason and sheds;
//   - XDP verdicts and drops by reason, TCP and AF_XDP counters (afxdp / dpdk modes), a GPU line
//     (when infergate_gpu_* exist).
// The Frame renders to plain lines (no curses): cut to the terminal width, with every byte that
// came from the gateway made printable (a label value cannot move the operator's cursor).
//
// Threading: everything here is pure except runTop(), which owns the terminal (main thread).

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "app/prom_text_parser.h"

namespace infergate::app::top {

// A Prometheus histogram's cumulative buckets: (upper bound `le`, observations <= le), sorted
// by le; the last is +Inf in a complete histogram.
struct Histogram {
  std::vector<std::pair<double, double>> buckets;
  double sum = 0;
  double count = 0;
};
inline constexpr size_t kMaxHistogramBuckets = 64;  // more `le` values are ignored

// Adds `v` to the bucket `le` (creating it in order; ignored past kMaxHistogramBuckets).
void addBucket(Histogram& h, double le, double v);

// cur - prev, the observations made between two scrapes. A counter reset (the gateway
// restarted: any bucket, the count or the sum went down) gives `cur` itself, as Prometheus'
// rate() does. Buckets absent from prev count from zero.
Histogram histogramDelta(const Histogram& prev, const Histogram& cur);
double counterDelta(double prev, double cur);  // cur - prev, or cur after a reset

// Prometheus' histogram_quantile(q, h): the bucket holding rank q * total, linearly
// interpolated between its bounds (the first bucket's lower bound is 0); a rank in the +Inf
// bucket gives the highest finite bound. NaN when h has no observations or no +Inf bucket,
// or q is outside [0, 1]. Cumulative counts are made monotonic first.
double histogramQuantile(double q, const Histogram& h);

// What one scrape says, reduced to what the view shows. Keys are label values.
struct RequestSeries {
  std::map<std::string, double> by_code;  // infergate_requests_total by code
  Histogram duration;                     // infergate_request_duration_seconds
};
struct BatcherSeries {
  std::map<std::string, double> queue_depth;  // by priority level (gauge)
  Histogram batch_size;                       // infergate_batcher_batch_size
  std::map<std::string, double> rejections;   // by reason, summed over levels
  double shed = 0;                            // summed over levels
  double overload_level = 0;                  // gauge
};
struct Snapshot {
  std::map<std::pair<std::string, std::string>, RequestSeries> requests;  // (model, protocol)
  std::map<std::string, BatcherSeries> batchers;                          // by model
  double connections_active = 0;
  bool has_xdp = false;
  std::map<std::pair<std::string, std::string>, double> xdp_packets;   // (verdict, reason)
  std::map<std::pair<std::string, std::string>, double> xdp_requests;  // (class, verdict)
  bool has_tcp = false;
  std::map<std::string, double> tcp_totals;  // infergate_tcp_<x>_total summed over queues
  std::map<std::string, double> tcp_drops;   // by reason
  std::map<std::string, double> tcp_conns;   // by state (gauge)
  bool has_afxdp = false;
  std::map<std::string, double> afxdp_totals;  // infergate_afxdp_<x>_total summed over queues
  double afxdp_queues = 0, afxdp_zero_copy_queues = 0;
  bool has_gpu = false;
  double gpu_probes_active = 0, gpu_processes = 0, gpu_anomalous = 0, gpu_leak_suspects = 0,
         gpu_over_quota = 0, gpu_live_bytes = 0;
  size_t skipped_lines = 0;  // the parser's count
};

Snapshot buildSnapshot(const PromScrape& scrape);

// The view between two snapshots. Rates are per second; NaN where there is no previous
// snapshot (the first frame) or no observation in the interval (quantiles, mean batch size).
struct ModelRow {
  std::string model, protocol;
  double total = 0;  // requests ever answered (the row exists once this is > 0)
  double rate = 0, error_rate = 0;
  double p50 = 0, p99 = 0;                             // seconds
  std::vector<std::pair<std::string, double>> errors;  // (code, rate), non-2xx with a change
};
struct BatcherRow {
  std::string model;
  std::vector<std::pair<std::string, double>> queue_depth;  // by level, numeric order
  double batch_rate = 0, mean_batch = 0, p99_batch = 0;
  double shed_rate = 0;
  std::vector<std::pair<std::string, double>> rejections;  // (reason, rate) with a change
  double overload_level = 0;
};
struct CountRate {
  std::string name;
  double total = 0, rate = 0;
};
struct Frame {
  bool has_rates = false;  // false on the first frame
  double seconds = 0;
  std::vector<ModelRow> models;
  std::vector<BatcherRow> batchers;
  double connections_active = 0;
  bool has_xdp = false;
  std::vector<CountRate> xdp_verdicts;  // packets by verdict
  std::vector<CountRate> xdp_drops;     // drop / aborted packets by reason, total > 0
  std::vector<CountRate> xdp_requests;  // request starts by tag verdict
  bool has_tcp = false;
  double tcp_established = 0, tcp_connections = 0;
  std::vector<CountRate> tcp;        // selected counters (segments, bytes, retransmits...)
  std::vector<CountRate> tcp_drops;  // by reason, total > 0
  bool has_afxdp = false;
  double afxdp_queues = 0, afxdp_zero_copy_queues = 0;
  std::vector<CountRate> afxdp;  // rx/tx frames, kernel drops...
  bool has_gpu = false;
  double gpu_probes_active = 0, gpu_processes = 0, gpu_anomalous = 0, gpu_leak_suspects = 0,
         gpu_over_quota = 0, gpu_live_bytes = 0;
  size_t skipped_lines = 0;
};

enum class SortKey { kRate, kP99, kP50, kErrors, kName };
// "rate", "p99", "p50", "errors", "name"; false for anything else.
bool parseSortKey(std::string_view s, SortKey& out);
std::string_view sortKeyName(SortKey k);

// `prev` may be null (the first frame). `seconds` is the time between the two scrapes.
Frame computeFrame(const Snapshot* prev, const Snapshot& cur, double seconds);
// Descending for rate / p99 / p50 / errors (NaN last), ascending for name; ties by name.
void sortRows(std::vector<ModelRow>& rows, SortKey key);

struct RenderOptions {
  std::string admin;  // shown in the header
  std::string clock;  // "HH:MM:SS", shown in the header
  SortKey sort = SortKey::kRate;
  size_t width = 0;    // columns; 0: lines are not cut
  size_t height = 0;   // rows; 0: no limit (model rows beyond the screen are summarised)
  std::string status;  // a last line (a scrape error, the keys); "" for none
};
// The frame as lines (no newlines, no escape sequences), each at most `width` bytes.
std::vector<std::string> renderFrame(const Frame& frame, const RenderOptions& options);

// Bytes from the gateway made safe to print: control bytes, DEL and non-ASCII become '?';
// cut to `max` bytes with a trailing '~' when longer.
std::string printable(std::string_view s, size_t max);
// 2.5 -> "2.5", 512 -> "512", 12345 -> "12.3k", 3.4e6 -> "3.4M"; NaN -> "-".
std::string formatRate(double v);
// Seconds as "45us", "1.2ms", "3.40s"; NaN -> "-".
std::string formatSeconds(double s);

struct TopOptions {
  std::string admin = "127.0.0.1:8002";
  bool once = false;  // two scrapes interval_ms apart, one frame, exit
  uint64_t interval_ms = 1000;
  SortKey sort = SortKey::kRate;
};
// Runs the view until q / Ctrl-C / SIGTERM / SIGHUP (restoring the terminal), or prints one
// frame with --once. Returns the process exit status (1 when the gateway cannot be read with
// --once; the live view shows the error and keeps retrying).
int runTop(const TopOptions& options);

}  // namespace infergate::app::top
