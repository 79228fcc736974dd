// infergate-bench: an open-loop latency benchmarking rig for inference front doors (KServe v2
// REST and gRPC, plain HTTP GET). See docs/BENCHMARKING.md.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/load/engine.h"
#include "bench/load/report.h"
#include "bench/load/request.h"

namespace ib = infergate::bench;

namespace {

struct Options {
  std::string target = "127.0.0.1:8000";
  std::string protocol = "rest";
  std::string format = "json";
  std::string path;
  std::string model = "identity";
  std::string model_version;
  std::vector<std::string> inputs;
  std::vector<std::string> input_files;
  std::vector<std::string> outputs;
  std::string mode = "open";
  double rate = 1000;
  std::string arrival = "constant";
  int concurrency = 0;
  int connections = 32;
  int threads = 1;
  double duration = 10;
  double warmup = 1;
  double timeout = 10;
  std::string priority_mix;
  double malformed_fraction = 0;
  std::string malformed_kinds;
  double lag_threshold_ms = 1.0;
  uint64_t max_backlog = 1000000;
  int h2_streams = 100;
  uint64_t seed = 1;
  double interval_ms = 1000;
  double sweep_start = 1000;
  double sweep_max = 1000000;
  double sweep_factor = 2;
  int sweep_refine = 3;
  double p99_target_ms = 10;
  double max_error_rate = 0.001;
  std::string json;
  std::string plot;
  std::string plot_format = "png";
  std::string label = "run";
  std::string progress = "auto";
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, sep)) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

// "host:port", "[v6]:port" or "http://host:port[/...]".
bool parseTarget(std::string t, std::string& host, uint16_t& port) {
  if (t.rfind("http://", 0) == 0) t = t.substr(7);
  if (auto slash = t.find('/'); slash != std::string::npos) t = t.substr(0, slash);
  size_t colon = t.rfind(':');
  if (colon == std::string::npos) return false;
  host = t.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  const long p = std::strtol(t.c_str() + colon + 1, &end, 10);
  if (host.empty() || *end != '\0' || p <= 0 || p > 65535) return false;
  port = static_cast<uint16_t>(p);
  return true;
}

void die(const std::string& msg) {
  std::fprintf(stderr, "infergate-bench: %s\n", msg.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "infergate-bench: open-loop (coordinated-omission safe) and closed-loop latency benchmark "
      "for KServe v2 REST/gRPC inference servers and plain HTTP peers.\n"
      "Open-loop latencies are timed from each request's intended send time; the generator "
      "reports when it cannot keep its own schedule."};
  app.get_formatter()->column_width(34);
  app.add_option("-u,--target", o.target, "Server to load: HOST:PORT or http://HOST:PORT")
      ->capture_default_str();
  app.add_option("-p,--protocol", o.protocol,
                 "rest (KServe v2 REST over HTTP/1.1), grpc (KServe v2 ModelInfer over HTTP/2), "
                 "get (plain HTTP/1.1 GET of --path)")
      ->check(CLI::IsMember({"rest", "grpc", "get"}))
      ->capture_default_str();
  app.add_option("--format", o.format,
                 "REST body: json, or binary (KServe binary tensor extension)")
      ->check(CLI::IsMember({"json", "binary"}))
      ->capture_default_str();
  app.add_option("--path", o.path,
                 "HTTP path (default: /v2/models/MODEL[/versions/V]/infer for rest, / for get)");
  app.add_option("-m,--model", o.model, "Model name")->capture_default_str();
  app.add_option("--model-version", o.model_version, "Model version (default: server's choice)");
  app.add_option("-i,--input", o.inputs,
                 "Input tensor NAME:DATATYPE:DIMS, repeatable (default INPUT0:FP32:1x16); data "
                 "are random unless --input-file gives them");
  app.add_option("--input-file", o.input_files,
                 "NAME=FILE: raw little-endian element bytes for input NAME (exact tensor size; "
                 "BYTES: 4-byte length-prefixed elements), repeatable");
  app.add_option("--output", o.outputs, "Requested output name, repeatable (default: all)");
  app.add_option("--mode", o.mode,
                 "open (fixed arrival rate), closed (fixed concurrency), sweep (open-loop rate "
                 "sweep finding the highest rate meeting --p99-target-ms)")
      ->check(CLI::IsMember({"open", "closed", "sweep"}))
      ->capture_default_str();
  app.add_option("-R,--rate", o.rate, "Open loop: target rate, requests/s (all threads)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--arrival", o.arrival, "Open loop arrivals: constant or poisson")
      ->check(CLI::IsMember({"constant", "poisson"}))
      ->capture_default_str();
  app.add_option("--concurrency", o.concurrency,
                 "Closed loop: requests in flight (default: --connections; HTTP/1.1 uses one "
                 "connection per request in flight)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("-c,--connections", o.connections, "Connections (all threads)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("-t,--threads", o.threads, "Client threads, each with its own epoll loop")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("-d,--duration", o.duration, "Measured seconds (per sweep step)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "Warm-up seconds before the measured window (sent, not recorded)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--timeout", o.timeout,
                 "Per-request timeout in seconds (then an error 'timeout' and a new connection); "
                 "also how long the end of a run waits for answers")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--priority-mix", o.priority_mix,
                 "Fractions per KServe 'priority' parameter level, LEVEL:FRACTION,... e.g. "
                 "1:0.8,2:0.2 (default: no priority parameter)");
  app.add_option("--malformed-fraction", o.malformed_fraction,
                 "Fraction of requests sent malformed (not counted as latency or errors; their "
                 "answers are tallied per kind)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--malformed-kinds", o.malformed_kinds,
                 "Comma-separated malformed kinds (default: all for the protocol). rest: "
                 "bad-json,bad-shape,unknown-model,bad-method,bad-path,bad-version; grpc: "
                 "bad-proto,bad-shape,unknown-model,bad-path; get: bad-method,bad-path,"
                 "bad-version");
  app.add_option("--lag-threshold-ms", o.lag_threshold_ms,
                 "The generator reports itself saturated when its p99 send lag exceeds this")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-backlog", o.max_backlog,
                 "Open loop: most due-but-unsent requests per thread; beyond, they are dropped "
                 "and counted ('backlog_overflow')")
      ->capture_default_str();
  app.add_option("--h2-streams", o.h2_streams,
                 "gRPC: concurrent streams per connection (also capped by the server's setting)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Random seed (arrivals, mixes, tensor data)")->capture_default_str();
  app.add_option("--interval-ms", o.interval_ms, "Timeline interval for the JSON report and plots")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--sweep-start", o.sweep_start, "Sweep: first rate (requests/s)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--sweep-max", o.sweep_max, "Sweep: highest rate tried")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--sweep-factor", o.sweep_factor, "Sweep: rate multiplier between steps (> 1)")
      ->check(CLI::Range(1.01, 100.0))
      ->capture_default_str();
  app.add_option("--sweep-refine", o.sweep_refine,
                 "Sweep: bisection steps between the last passing and first failing rate")
      ->check(CLI::Range(0, 20))
      ->capture_default_str();
  app.add_option("--p99-target-ms", o.p99_target_ms, "Sweep: p99 latency a rate must meet")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-error-rate", o.max_error_rate,
                 "Sweep: error fraction a rate may have and still pass")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--json", o.json, "Write the JSON report to FILE ('-': stdout)");
  app.add_option("--plot", o.plot,
                 "Write gnuplot data, scripts and plots (latency over time, percentile "
                 "spectrum, sweep) into DIR");
  app.add_option("--plot-format", o.plot_format, "png or svg")
      ->check(CLI::IsMember({"png", "svg"}))
      ->capture_default_str();
  app.add_option("--label", o.label, "Name of this run in reports and plots")->capture_default_str();
  app.add_option("--progress", o.progress,
                 "Live progress line: auto (only when stdout is a terminal), always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  ib::EngineConfig cfg;
  if (!parseTarget(o.target, cfg.host, cfg.port)) {
    die(fmt::format("--target '{}': expected HOST:PORT or http://HOST:PORT", o.target));
  }
  cfg.protocol = o.protocol == "rest" ? ib::Protocol::kRest
                                      : (o.protocol == "grpc" ? ib::Protocol::kGrpc : ib::Protocol::kGet);
  cfg.connections = o.connections;
  cfg.threads = o.threads;
  cfg.timeout_s = o.timeout;
  cfg.lag_threshold_ns = static_cast<uint64_t>(o.lag_threshold_ms * 1e6);
  cfg.max_backlog = o.max_backlog;
  cfg.h2_max_streams = o.h2_streams;
  cfg.seed = o.seed;
  cfg.interval_ns = static_cast<uint64_t>(o.interval_ms * 1e6);

  ib::PayloadOptions po;
  po.protocol = cfg.protocol;
  po.rest_format = o.format == "binary" ? ib::RestFormat::kBinary : ib::RestFormat::kJson;
  po.authority = cfg.host.find(':') != std::string::npos
                     ? fmt::format("[{}]:{}", cfg.host, cfg.port)
                     : fmt::format("{}:{}", cfg.host, cfg.port);
  po.model = o.model;
  po.model_version = o.model_version;
  po.path = o.path;
  po.outputs = o.outputs;
  po.seed = o.seed;
  if (o.inputs.empty()) o.inputs.push_back("INPUT0:FP32:1x16");
  for (const auto& text : o.inputs) {
    auto t = ib::parseTensorSpec(text);
    if (!t.ok()) die(std::string(t.status().message()));
    po.inputs.push_back(*t);
  }
  for (const auto& f : o.input_files) {
    const size_t eq = f.find('=');
    if (eq == std::string::npos) die(fmt::format("--input-file '{}': expected NAME=FILE", f));
    bool found = false;
    for (auto& t : po.inputs) {
      if (t.name == f.substr(0, eq)) {
        t.file = f.substr(eq + 1);
        found = true;
      }
    }
    if (!found) die(fmt::format("--input-file '{}': no --input named '{}'", f, f.substr(0, eq)));
  }

  std::vector<int> priorities;
  std::vector<double> weights;
  for (const auto& part : split(o.priority_mix, ',')) {
    const size_t colon = part.find(':');
    char* e1 = nullptr;
    char* e2 = nullptr;
    const long level = colon == std::string::npos ? -1 : std::strtol(part.c_str(), &e1, 10);
    const double frac = colon == std::string::npos ? -1 : std::strtod(part.c_str() + colon + 1, &e2);
    if (colon == std::string::npos || e1 != part.c_str() + colon || *e2 != '\0' || level < 0 ||
        level > 1000000 || !(frac > 0)) {
      die(fmt::format("--priority-mix '{}': expected LEVEL:FRACTION with LEVEL >= 0 and "
                      "FRACTION > 0, e.g. 1:0.8,2:0.2",
                      part));
    }
    priorities.push_back(static_cast<int>(level));
    weights.push_back(frac);
  }
  if (priorities.empty()) {
    priorities.push_back(-1);
    weights.push_back(1);
  }
  std::vector<std::string> kinds;
  if (o.malformed_fraction > 0) {
    kinds = o.malformed_kinds.empty() ? ib::malformedKinds(cfg.protocol) : split(o.malformed_kinds, ',');
  }
  auto variants = ib::buildVariants(po, priorities, kinds);
  if (!variants.ok()) die(std::string(variants.status().message()));
  const ib::RequestMix mix(weights, kinds.size(), o.malformed_fraction);
  cfg.variants = &*variants;
  cfg.mix = &mix;

  ib::LoadPhase phase;
  phase.mode = o.mode == "closed" ? ib::LoadMode::kClosed : ib::LoadMode::kOpen;
  phase.arrival = o.arrival == "poisson" ? ib::Arrival::kPoisson : ib::Arrival::kConstant;
  phase.rate = o.rate;
  phase.warmup_s = o.warmup;
  phase.duration_s = o.duration;
  if (phase.mode == ib::LoadMode::kClosed) {
    phase.concurrency = o.concurrency > 0 ? o.concurrency : o.connections;
    if (cfg.protocol != ib::Protocol::kGrpc) cfg.connections = phase.concurrency;
  }

  const bool show_progress =
      o.progress == "always" || (o.progress == "auto" && isatty(STDOUT_FILENO));
  uint64_t last_completed = 0;
  double last_elapsed = 0;
  auto progress = [&](const ib::Progress& p) {
    const double dt = p.elapsed_s - last_elapsed;
    const double rate = dt > 0 && !p.warming_up ? static_cast<double>(p.completed - last_completed) / dt : 0;
    last_completed = p.completed;
    last_elapsed = p.elapsed_s;
    std::printf("\r\033[K%s", ib::formatProgress(p, rate).c_str());
    std::fflush(stdout);
  };
  std::function<void(const ib::Progress&)> progress_fn;
  if (show_progress) progress_fn = progress;

  auto makeReport = [&](const ib::LoadPhase& ph, ib::PhaseResult res, const std::string& label) {
    ib::RunReport r;
    r.label = label;
    r.target = fmt::format("{}:{}", cfg.host, cfg.port);
    r.protocol = cfg.protocol == ib::Protocol::kRest ? "rest/" + o.format
                 : cfg.protocol == ib::Protocol::kGrpc ? "grpc" : "get";
    r.mode = ph.mode;
    r.arrival = ph.arrival;
    r.target_rate = ph.rate;
    r.concurrency = ph.concurrency;
    r.connections = cfg.connections;
    r.threads = std::min(cfg.threads, cfg.connections);
    r.warmup_s = ph.warmup_s;
    r.duration_s = ph.duration_s;
    r.lag_threshold_ns = cfg.lag_threshold_ns;
    r.interval_ns = cfg.interval_ns;
    r.result = std::move(res);
    return r;
  };
  auto runOne = [&](const ib::LoadPhase& ph) -> ib::PhaseResult {
    last_completed = 0;
    last_elapsed = 0;
    auto res = ib::runPhase(cfg, ph, progress_fn);
    if (show_progress) {
      std::printf("\r\033[K");
      std::fflush(stdout);
    }
    if (!res.ok()) die(std::string(res.status().message()));
    return *std::move(res);
  };

  std::string json_text;
  if (o.mode != "sweep") {
    ib::RunReport report = makeReport(phase, runOne(phase), o.label);
    std::fputs(ib::formatTable(report).c_str(), stdout);
    json_text = ib::toJson(report);
    if (!o.plot.empty()) {
      const std::string err = ib::writePlots(o.plot, o.plot_format, {&report}, nullptr);
      if (!err.empty()) std::fprintf(stderr, "infergate-bench: %s\n", err.c_str());
      else std::printf("plots: %s/latency_over_time.%s, %s/percentile_spectrum.%s\n", o.plot.c_str(),
                       o.plot_format.c_str(), o.plot.c_str(), o.plot_format.c_str());
    }
  } else {
    ib::SweepReport sweep;
    sweep.p99_target_ms = o.p99_target_ms;
    sweep.max_error_rate = o.max_error_rate;
    auto step = [&](double rate) -> const ib::SweepStep& {
      ib::LoadPhase ph = phase;
      ph.mode = ib::LoadMode::kOpen;
      ph.rate = rate;
      ib::SweepStep st;
      st.run = makeReport(ph, runOne(ph), fmt::format("{}@{:.0f}", o.label, rate));
      const auto& s = st.run.result.stats;
      const double p99_ms = static_cast<double>(s.latency.quantile(0.99)) / 1e6;
      if (st.run.saturated()) st.why_not = "generator saturated";
      else if (st.run.errorRate() > o.max_error_rate)
        st.why_not = fmt::format("error rate {:.2f}%", st.run.errorRate() * 100);
      else if (s.latency.count() == 0) st.why_not = "no successful responses";
      else if (p99_ms > o.p99_target_ms) st.why_not = fmt::format("p99 {:.3f} ms", p99_ms);
      else if (st.run.achievedRate() < 0.9 * rate)
        st.why_not = fmt::format("achieved {:.0f} req/s", st.run.achievedRate());
      st.meets = st.why_not.empty();
      std::printf("  sweep %10.0f req/s: achieved %10.1f, p99 %s ms, errors %llu -> %s\n", rate,
                  st.run.achievedRate(), ib::fmtMs(s.latency.quantile(0.99)).c_str(),
                  static_cast<unsigned long long>(s.errorCount()),
                  st.meets ? "meets" : ("fails: " + st.why_not).c_str());
      std::fflush(stdout);
      sweep.steps.push_back(std::move(st));
      return sweep.steps.back();
    };
    double lo = 0, hi = 0;
    for (double rate = o.sweep_start; rate <= o.sweep_max * 1.0000001; rate *= o.sweep_factor) {
      const ib::SweepStep& st = step(rate);
      if (!st.meets) {
        hi = rate;
        if (st.why_not == "generator saturated") sweep.stop_reason = "the generator saturated";
        break;
      }
      lo = rate;
    }
    // The first rate already failed: step down until one passes (at most 4 steps).
    for (int i = 0; lo == 0 && hi > 0 && i < 4; ++i) {
      const double rate = std::round(hi / o.sweep_factor);
      if (rate < 1) break;
      if (step(rate).meets) lo = rate;
      else hi = rate;
    }
    if (hi == 0) sweep.stop_reason = "reached --sweep-max";
    for (int i = 0; hi > 0 && lo > 0 && i < o.sweep_refine && (hi - lo) / lo > 0.02; ++i) {
      const double mid = std::round((lo + hi) / 2);
      if (step(mid).meets) lo = mid;
      else hi = mid;
    }
    sweep.best_rate = lo;
    if (sweep.stop_reason.empty()) {
      sweep.stop_reason = hi > 0 ? fmt::format("{:.0f} req/s failed", hi) : "no step ran";
    }
    std::puts("");
    for (const auto& st : sweep.steps) {
      if (st.run.target_rate == lo) std::fputs(ib::formatTable(st.run).c_str(), stdout);
    }
    std::fputs(ib::formatSweepTable(sweep).c_str(), stdout);
    json_text = ib::sweepToJson(sweep);
    if (!o.plot.empty()) {
      std::vector<const ib::RunReport*> runs;
      for (const auto& st : sweep.steps) runs.push_back(&st.run);
      const std::string err = ib::writePlots(o.plot, o.plot_format, runs, &sweep);
      if (!err.empty()) std::fprintf(stderr, "infergate-bench: %s\n", err.c_str());
      else std::printf("plots: %s/sweep.%s and per-step plots in %s\n", o.plot.c_str(),
                       o.plot_format.c_str(), o.plot.c_str());
    }
  }
  if (!o.json.empty()) {
    if (o.json == "-") {
      std::printf("%s\n", json_text.c_str());
    } else {
      std::ofstream f(o.json);
      f << json_text << "\n";
      if (!f) die(fmt::format("cannot write --json file '{}'", o.json));
    }
  }
  return 0;
}
