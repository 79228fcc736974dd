#pragma once
// infergate-bench output: the final table, the live progress line, the JSON report and the
// gnuplot plots (latency over time, percentile spectrum, sweep). Pure formatting: no I/O except
// writePlots().

#include <cstdint>
#include <string>
#include <vector>

#include "bench/load/engine.h"
#include "bench/load/stats.h"

namespace infergate::bench {

// One run (a phase) and how it was set up, as the reports describe it.
struct RunReport {
  std::string label = "run";        // names the run in plots and JSON (e.g. the contender)
  std::string target;               // host:port
  std::string protocol;             // "rest/json", "rest/binary", "grpc", "get"
  LoadMode mode = LoadMode::kOpen;
  Arrival arrival = Arrival::kConstant;
  double target_rate = 0;           // open loop
  int concurrency = 0;              // closed loop
  int connections = 0;
  int threads = 1;
  double warmup_s = 0;
  double duration_s = 0;
  uint64_t lag_threshold_ns = 1000000;
  uint64_t interval_ns = 1000000000;
  PhaseResult result;

  double achievedRate() const;      // successful responses per second of the measured window
  double errorRate() const;         // errors / well-formed requests sent
  // The generator could not keep its schedule (p99 send lag above the threshold, backlog
  // overflow or requests never sent): latencies then describe the generator, not the target.
  bool saturated() const;
  std::string saturationReason() const;  // empty when not saturated
  std::string describe() const;          // "open-loop constant 2000 req/s, rest/json, ..."
};

// The final table (multi-line, ends with a newline).
std::string formatTable(const RunReport& r);
// One line for the terminal: elapsed, rate over the last second, errors, p50/p99 so far.
std::string formatProgress(const Progress& p, double rate_last_s);
// The JSON object for one run (no trailing newline).
std::string toJson(const RunReport& r);

struct SweepStep {
  RunReport run;
  bool meets = false;       // p99 within target, error rate within limit, not saturated
  std::string why_not;      // when !meets
};
struct SweepReport {
  double p99_target_ms = 0;
  double max_error_rate = 0;
  std::vector<SweepStep> steps;
  double best_rate = 0;     // highest target rate that met the criteria (0: none)
  std::string stop_reason;
};
std::string formatSweepTable(const SweepReport& s);
std::string sweepToJson(const SweepReport& s);

// Latency in ms with µs resolution, from ns.
std::string fmtMs(uint64_t ns);
// Rows (cumulative fraction, latency ns) of the percentile spectrum, one per non-empty bucket.
std::vector<std::pair<double, uint64_t>> percentileSpectrum(const LogLinearHistogram& h);

// Writes data files and gnuplot scripts for `runs` (and the sweep, if given) under `dir` and runs
// gnuplot to render `format` ("png" or "svg"). Returns an error message, or "" on success.
std::string writePlots(const std::string& dir, const std::string& format,
                       const std::vector<const RunReport*>& runs, const SweepReport* sweep);

}  // namespace infergate::bench
