#include "bench/load/report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "bench/load/request.h"

namespace infergate::bench {
namespace {

std::string num(double v) {
  if (!(v == v) || v > 1e300 || v < -1e300) return "0";
  return fmt::format("{:.3f}", v);
}

double us(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

std::string latencyJson(const LogLinearHistogram& h) {
  const double mean = h.count() ? static_cast<double>(h.sum()) / static_cast<double>(h.count()) : 0;
  return fmt::format(
      "{{\"count\":{},\"mean\":{},\"p50\":{},\"p90\":{},\"p99\":{},\"p99_9\":{},\"max\":{}}}",
      h.count(), num(mean / 1000.0), num(us(h.quantile(0.5))), num(us(h.quantile(0.9))),
      num(us(h.quantile(0.99))), num(us(h.quantile(0.999))), num(us(h.max())));
}

std::string mapJson(const std::map<std::string, uint64_t>& m) {
  std::string s = "{";
  for (const auto& [k, v] : m) s += fmt::format("{}{}:{}", s.size() > 1 ? "," : "", jsonString(k), v);
  return s + "}";
}

std::string latencyRow(const std::string& name, const LogLinearHistogram& h) {
  if (h.count() == 0) return fmt::format("  {:<16} {:>10}\n", name, "no successful responses");
  return fmt::format("  {:<16} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", name,
                     fmtMs(h.quantile(0.5)), fmtMs(h.quantile(0.9)), fmtMs(h.quantile(0.99)),
                     fmtMs(h.quantile(0.999)), fmtMs(h.max()), h.count());
}

std::string levelName(int p) { return p < 0 ? "no priority" : fmt::format("priority {}", p); }

std::string safeName(const std::string& s) {
  std::string out;
  for (char c : s) out += (isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return out.empty() ? "run" : out;
}

}  // namespace

std::string fmtMs(uint64_t ns) { return fmt::format("{:.3f}", static_cast<double>(ns) / 1e6); }

double RunReport::achievedRate() const {
  return duration_s > 0 ? static_cast<double>(result.stats.ok) / duration_s : 0;
}

double RunReport::errorRate() const {
  const uint64_t e = result.stats.errorCount();
  const uint64_t n = result.stats.ok + e;
  return n ? static_cast<double>(e) / static_cast<double>(n) : 0;
}

std::string RunReport::saturationReason() const {
  const RunStats& s = result.stats;
  std::string why;
  const uint64_t lag99 = s.send_lag.quantile(0.99);
  if (s.send_lag.count() && lag99 > lag_threshold_ns) {
    why += fmt::format("p99 send lag {} ms exceeds the {} ms threshold ({} of {} sends late)",
                       fmtMs(lag99), fmtMs(lag_threshold_ns), s.late_sends, s.send_lag.count());
  }
  auto it = s.errors.find("backlog_overflow");
  if (it != s.errors.end() && it->second) {
    why += fmt::format("{}{} due requests dropped: backlog full", why.empty() ? "" : "; ",
                       it->second);
  }
  it = s.errors.find("unsent");
  // Requests never sent for lack of a connection the target refused are the target's failure.
  if (it != s.errors.end() && it->second && s.connect_errors == 0) {
    why += fmt::format("{}{} requests never sent before the drain deadline",
                       why.empty() ? "" : "; ", it->second);
  }
  return why;
}

bool RunReport::saturated() const { return !saturationReason().empty(); }

std::string RunReport::describe() const {
  std::string m = mode == LoadMode::kOpen
                      ? fmt::format("open-loop {} {:.0f} req/s",
                                    arrival == Arrival::kPoisson ? "poisson" : "constant",
                                    target_rate)
                      : fmt::format("closed-loop concurrency {}", concurrency);
  return fmt::format("{}, {} to {}, {} connection{}, {} thread{}, {} s (+{} s warm-up)", m,
                     protocol, target, connections, connections == 1 ? "" : "s", threads,
                     threads == 1 ? "" : "s", duration_s, warmup_s);
}

std::string formatTable(const RunReport& r) {
  const RunStats& s = r.result.stats;
  std::string out = fmt::format("infergate-bench [{}]: {}\n", r.label, r.describe());
  if (r.mode == LoadMode::kOpen) out += fmt::format("  target rate      {:.1f} req/s\n", r.target_rate);
  out += fmt::format("  achieved rate    {:.1f} req/s  ({} ok, {} errors, {} sent in the window)\n",
                     r.achievedRate(), s.ok, s.errorCount(), s.sent);
  out += fmt::format("  latency (ms){}  {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
                     r.mode == LoadMode::kOpen ? "*" : " ", "p50", "p90", "p99", "p99.9", "max",
                     "count");
  out += latencyRow("all", s.latency);
  if (s.by_priority.size() > 1 || (s.by_priority.size() == 1 && s.by_priority.begin()->first >= 0)) {
    for (const auto& [p, l] : s.by_priority) {
      out += latencyRow(levelName(p), l.latency);
      if (l.errors) out += fmt::format("  {:<16} {} errors\n", "", l.errors);
    }
  }
  if (s.errors.empty()) {
    out += "  errors           none\n";
  } else {
    out += "  errors          ";
    for (const auto& [k, v] : s.errors) out += fmt::format(" {} {};", k, v);
    out.back() = '\n';
  }
  if (!s.malformed.empty()) {
    uint64_t n = 0;
    for (const auto& [k, v] : s.malformed) n += v;
    out += fmt::format("  malformed        {} sent; answered:", n);
    for (const auto& [k, v] : s.malformed) out += fmt::format(" {} {};", k, v);
    out.back() = '\n';
    if (s.malformed_latency.count()) out += latencyRow("  malformed", s.malformed_latency);
  }
  if (r.mode == LoadMode::kClosed) {
    out += fmt::format("  generator        closed loop: each request is sent when one completes{}\n",
                       s.connect_errors ? fmt::format("; {} failed connects", s.connect_errors) : "");
  } else out += fmt::format(
      "  generator        send lag p99 {} ms, max {} ms; {} late (> {} ms); {} waited for a "
      "connection; max backlog {}{}\n",
      fmtMs(s.send_lag.quantile(0.99)), fmtMs(s.send_lag.max()), s.late_sends,
      fmtMs(r.lag_threshold_ns), s.queued_sends, s.max_backlog,
      s.connect_errors ? fmt::format("; {} failed connects", s.connect_errors) : "");
  if (r.mode == LoadMode::kOpen) {
    out += "  * from each request's intended send time (coordinated-omission safe); values are "
           "bucket upper bounds, at most 12.5% above the true latency\n";
  }
  const std::string why = r.saturationReason();
  if (!why.empty()) {
    out += "  SATURATED: the load generator could not keep its schedule: " + why +
           ". The latencies above describe the generator, not the target: lower the rate, add "
           "--threads, or give the generator more CPU.\n";
  }
  return out;
}

std::string formatProgress(const Progress& p, double rate_last_s) {
  if (p.warming_up) {
    return fmt::format("[{:6.1f}s] warming up", p.elapsed_s);
  }
  return fmt::format("[{:6.1f}s] {:9.1f} req/s  ok {}  errors {}  p50 {} ms  p99 {} ms",
                     p.elapsed_s, rate_last_s, p.stats.ok, p.stats.errorCount(),
                     fmtMs(p.stats.latency.quantile(0.5)), fmtMs(p.stats.latency.quantile(0.99)));
}

std::vector<std::pair<double, uint64_t>> percentileSpectrum(const LogLinearHistogram& h) {
  std::vector<std::pair<double, uint64_t>> rows;
  if (h.count() == 0) return rows;
  uint64_t seen = 0;
  for (int b = 0; b < LogLinearHistogram::kBuckets; ++b) {
    const uint64_t n = h.bucketCount(b);
    if (!n) continue;
    seen += n;
    rows.emplace_back(static_cast<double>(seen) / static_cast<double>(h.count()),
                      std::min(LogLinearHistogram::bucketHigh(b), h.max()));
  }
  return rows;
}

std::string toJson(const RunReport& r) {
  const RunStats& s = r.result.stats;
  std::string j = "{";
  j += fmt::format("\"label\":{},\"target\":{},\"protocol\":{},", jsonString(r.label),
                   jsonString(r.target), jsonString(r.protocol));
  j += fmt::format("\"mode\":\"{}\",", r.mode == LoadMode::kOpen ? "open" : "closed");
  if (r.mode == LoadMode::kOpen) {
    j += fmt::format("\"arrival\":\"{}\",\"target_rate\":{},",
                     r.arrival == Arrival::kPoisson ? "poisson" : "constant", num(r.target_rate));
  } else {
    j += fmt::format("\"concurrency\":{},", r.concurrency);
  }
  j += fmt::format("\"connections\":{},\"threads\":{},\"warmup_s\":{},\"duration_s\":{},",
                   r.connections, r.threads, num(r.warmup_s), num(r.duration_s));
  j += fmt::format("\"achieved_rate\":{},\"sent\":{},\"ok\":{},\"error_count\":{},\"errors\":{},",
                   num(r.achievedRate()), s.sent, s.ok, s.errorCount(), mapJson(s.errors));
  j += "\"latency_us\":" + latencyJson(s.latency) + ",";
  j += "\"by_priority\":{";
  bool first = true;
  for (const auto& [p, l] : s.by_priority) {
    j += fmt::format("{}\"{}\":{{\"ok\":{},\"errors\":{},\"latency_us\":{}}}", first ? "" : ",",
                     p < 0 ? "none" : std::to_string(p), l.ok, l.errors, latencyJson(l.latency));
    first = false;
  }
  j += "},";
  j += "\"malformed\":" + mapJson(s.malformed) +
       ",\"malformed_latency_us\":" + latencyJson(s.malformed_latency) + ",";
  const std::string why = r.saturationReason();
  j += fmt::format(
      "\"generator\":{{\"saturated\":{},\"reason\":{},\"lag_threshold_us\":{},\"send_lag_us\":{},"
      "\"late_sends\":{},\"queued_sends\":{},\"max_backlog\":{},\"connect_errors\":{},"
      "\"unfinished\":{}}},",
      why.empty() ? "false" : "true", jsonString(why), num(us(r.lag_threshold_ns)),
      latencyJson(s.send_lag), s.late_sends, s.queued_sends, s.max_backlog, s.connect_errors,
      r.result.unfinished);
  j += fmt::format("\"interval_s\":{},\"timeline\":[", num(static_cast<double>(r.interval_ns) / 1e9));
  const size_t n = std::max(s.timeline.size(), s.timeline_completions.size());
  for (size_t i = 0; i < n; ++i) {
    static const LogLinearHistogram kEmpty;
    const LogLinearHistogram& h = i < s.timeline.size() ? s.timeline[i] : kEmpty;
    const uint64_t c = i < s.timeline_completions.size() ? s.timeline_completions[i] : 0;
    j += fmt::format("{}{{\"t_s\":{},\"ok\":{},\"completed\":{},\"p50_us\":{},\"p99_us\":{},"
                     "\"max_us\":{}}}",
                     i ? "," : "", num(static_cast<double>(i * r.interval_ns) / 1e9), h.count(), c,
                     num(us(h.quantile(0.5))), num(us(h.quantile(0.99))), num(us(h.max())));
  }
  j += "],\"spectrum\":[";
  first = true;
  for (const auto& [q, v] : percentileSpectrum(s.latency)) {
    j += fmt::format("{}[{:.6f},{}]", first ? "" : ",", q, num(us(v)));
    first = false;
  }
  j += "]}";
  return j;
}

std::string formatSweepTable(const SweepReport& s) {
  std::string out = fmt::format(
      "rate sweep: highest rate with p99 <= {} ms, error rate <= {:.2f}%, generator on "
      "schedule\n",
      num(s.p99_target_ms), s.max_error_rate * 100);
  out += fmt::format("  {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8}  {}\n", "target/s",
                     "achieved/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors", "verdict");
  for (const auto& st : s.steps) {
    const RunStats& r = st.run.result.stats;
    out += fmt::format("  {:>10.0f} {:>10.1f} {:>9} {:>9} {:>9} {:>9} {:>8}  {}\n",
                       st.run.target_rate, st.run.achievedRate(), fmtMs(r.latency.quantile(0.5)),
                       fmtMs(r.latency.quantile(0.9)), fmtMs(r.latency.quantile(0.99)),
                       fmtMs(r.latency.max()), r.errorCount(),
                       st.meets ? "meets" : "fails: " + st.why_not);
  }
  out += s.best_rate > 0
             ? fmt::format("  best rate meeting the target: {:.0f} req/s ({})\n", s.best_rate,
                           s.stop_reason)
             : fmt::format("  no rate met the target ({})\n", s.stop_reason);
  return out;
}

std::string sweepToJson(const SweepReport& s) {
  std::string j = fmt::format(
      "{{\"p99_target_ms\":{},\"max_error_rate\":{},\"best_rate\":{},\"stop_reason\":{},"
      "\"steps\":[",
      num(s.p99_target_ms), fmt::format("{:.6f}", s.max_error_rate), num(s.best_rate),
      jsonString(s.stop_reason));
  for (size_t i = 0; i < s.steps.size(); ++i) {
    j += fmt::format("{}{{\"meets\":{},\"why_not\":{},\"run\":{}}}", i ? "," : "",
                     s.steps[i].meets ? "true" : "false", jsonString(s.steps[i].why_not),
                     toJson(s.steps[i].run));
  }
  return j + "]}";
}

std::string writePlots(const std::string& dir, const std::string& format,
                       const std::vector<const RunReport*>& runs, const SweepReport* sweep) {
  if (format != "png" && format != "svg") return "plot format must be png or svg";
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return fmt::format("cannot create plot directory '{}': {}", dir, strerror(errno));
  }
  const std::string term = format == "png" ? "pngcairo size 1000,600" : "svg size 1000,600";
  std::string timeline_plot, spectrum_plot;
  for (const RunReport* r : runs) {
    const std::string name = safeName(r->label);
    const RunStats& s = r->result.stats;
    std::ofstream t(dir + "/" + name + ".timeline.dat");
    t << "# t_s ok_per_s p50_ms p99_ms max_ms\n";
    const double interval_s = static_cast<double>(r->interval_ns) / 1e9;
    for (size_t i = 0; i < s.timeline.size(); ++i) {
      const auto& h = s.timeline[i];
      if (!h.count()) continue;
      t << fmt::format("{:.3f} {:.1f} {} {} {}\n", static_cast<double>(i) * interval_s,
                       static_cast<double>(h.count()) / interval_s, fmtMs(h.quantile(0.5)),
                       fmtMs(h.quantile(0.99)), fmtMs(h.max()));
    }
    std::ofstream sp(dir + "/" + name + ".spectrum.dat");
    sp << "# percentile latency_ms 1/(1-p)\n";
    for (const auto& [q, v] : percentileSpectrum(s.latency)) {
      const double inv = q >= 1.0 ? 1e6 : 1.0 / (1.0 - q);
      sp << fmt::format("{:.6f} {} {:.3f}\n", q * 100, fmtMs(v), std::min(inv, 1e6));
    }
    const std::string title = r->label;
    timeline_plot += fmt::format(
        "{}'{}.timeline.dat' using 1:4 with lines title '{} p99', '{}.timeline.dat' using 1:5 "
        "with points pt 7 ps 0.4 title '{} max', '{}.timeline.dat' using 1:3 with lines dt 2 "
        "title '{} p50'",
        timeline_plot.empty() ? "" : ", ", name, title, name, title, name, title);
    spectrum_plot += fmt::format("{}'{}.spectrum.dat' using 3:2 with steps title '{}'",
                                 spectrum_plot.empty() ? "" : ", ", name, title);
  }
  std::ofstream gp(dir + "/plots.gp");
  gp << fmt::format("set terminal {}\nset grid\n", term);
  if (!runs.empty()) {
    gp << fmt::format(
        "set output 'latency_over_time.{}'\nset title 'latency over time (by intended send "
        "time)'\nset xlabel 'time (s)'\nset ylabel 'latency (ms)'\nset logscale y\nplot {}\n",
        format, timeline_plot);
    gp << fmt::format(
        "unset logscale\nset output 'percentile_spectrum.{}'\nset title 'latency by "
        "percentile'\nset xlabel 'percentile'\nset ylabel 'latency (ms)'\nset logscale x\n"
        "set xtics ('0%%' 1, '90%%' 10, '99%%' 100, '99.9%%' 1000, '99.99%%' 10000, '99.999%%' "
        "100000)\nset xrange [1:*]\nplot {}\nunset xtics\nset xtics\nunset logscale\n"
        "set xrange [*:*]\n",
        format, spectrum_plot);
  }
  if (sweep && !sweep->steps.empty()) {
    std::ofstream sd(dir + "/sweep.dat");
    sd << "# target_rate achieved_rate p50_ms p99_ms p99_9_ms\n";
    std::vector<const SweepStep*> sorted;
    for (const auto& st : sweep->steps) sorted.push_back(&st);
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) {
      return a->run.target_rate < b->run.target_rate;
    });
    for (const SweepStep* st : sorted) {
      const auto& h = st->run.result.stats.latency;
      sd << fmt::format("{:.1f} {:.1f} {} {} {}\n", st->run.target_rate, st->run.achievedRate(),
                        fmtMs(h.quantile(0.5)), fmtMs(h.quantile(0.99)), fmtMs(h.quantile(0.999)));
    }
    gp << fmt::format(
        "set output 'sweep.{}'\nset title 'latency by offered rate (p99 target {} ms)'\n"
        "set xlabel 'offered rate (req/s)'\nset ylabel 'latency (ms)'\nset logscale y\n"
        "plot 'sweep.dat' using 1:3 with linespoints title 'p50', 'sweep.dat' using 1:4 with "
        "linespoints title 'p99', 'sweep.dat' using 1:5 with linespoints title 'p99.9', {} "
        "with lines dt 2 title 'p99 target'\n",
        format, num(sweep->p99_target_ms), num(sweep->p99_target_ms));
  }
  gp.close();
  const std::string cmd = fmt::format("cd '{}' && gnuplot plots.gp 2> gnuplot.err", dir);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    return fmt::format("gnuplot failed (exit {}); see {}/gnuplot.err (is gnuplot installed?)", rc,
                       dir);
  }
  return "";
}

}  // namespace infergate::bench
