#include "app/top.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <optional>

#include "app/admin_client.h"
#include "fmt/format.h"

namespace infergate::app::top {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool parseLe(std::string_view s, double& out) {
  if (s == "+Inf" || s == "Inf" || s == "inf") {
    out = std::numeric_limits<double>::infinity();
    return true;
  }
  PromSample tmp;
  // Reuse the parser's value grammar through a one-sample line.
  std::string line = "x ";
  line.append(s);
  if (!parsePromSampleLine(line, PromLimits{}, tmp) || std::isnan(tmp.value)) return false;
  out = tmp.value;
  return true;
}

bool startsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

bool endsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// A sample's value as a counter/gauge contribution: NaN and infinities (never sent by the
// gateway) count as 0 so sums stay finite.
double finite(double v) { return std::isfinite(v) ? v : 0; }

// Level labels sort numerically ("2" before "10"); others after, by text.
bool levelLess(const std::string& a, const std::string& b) {
  const bool an = !a.empty() && a.size() < 10 && a.find_first_not_of("0123456789") == a.npos;
  const bool bn = !b.empty() && b.size() < 10 && b.find_first_not_of("0123456789") == b.npos;
  if (an && bn) return std::stoul(a) < std::stoul(b);
  if (an != bn) return an;
  return a < b;
}

double rateOf(double prev, double cur, double seconds, bool has_prev) {
  if (!has_prev || !(seconds > 0)) return kNaN;
  return counterDelta(prev, cur) / seconds;
}

template <typename M, typename K>
double lookup(const M* m, const K& k) {
  if (m == nullptr) return 0;
  auto it = m->find(k);
  return it == m->end() ? 0 : it->second;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Histograms and counters

void addBucket(Histogram& h, double le, double v) {
  auto it = std::lower_bound(h.buckets.begin(), h.buckets.end(), le,
                             [](const auto& b, double x) { return b.first < x; });
  if (it != h.buckets.end() && it->first == le) {
    it->second += v;
    return;
  }
  if (h.buckets.size() >= kMaxHistogramBuckets) return;
  h.buckets.insert(it, {le, v});
}

double counterDelta(double prev, double cur) {
  if (!std::isfinite(prev) || !std::isfinite(cur)) return 0;
  if (cur >= prev) return cur - prev;
  return cur > 0 ? cur : 0;  // a reset; a negative counter (never sent by the gateway) is 0
}

Histogram histogramDelta(const Histogram& prev, const Histogram& cur) {
  bool reset = cur.count < prev.count || cur.sum < prev.sum;
  for (const auto& [le, v] : prev.buckets) {
    auto it = std::lower_bound(cur.buckets.begin(), cur.buckets.end(), le,
                               [](const auto& b, double x) { return b.first < x; });
    if (it != cur.buckets.end() && it->first == le && it->second < v) reset = true;
  }
  if (reset) return cur;
  Histogram d;
  d.count = cur.count - prev.count;
  d.sum = cur.sum - prev.sum;
  for (const auto& [le, v] : cur.buckets) {
    auto it = std::lower_bound(prev.buckets.begin(), prev.buckets.end(), le,
                               [](const auto& b, double x) { return b.first < x; });
    const double p = it != prev.buckets.end() && it->first == le ? it->second : 0;
    d.buckets.emplace_back(le, v - p);
  }
  return d;
}

double histogramQuantile(double q, const Histogram& h) {
  if (!(q >= 0 && q <= 1) || h.buckets.empty() || !std::isinf(h.buckets.back().first)) {
    return kNaN;
  }
  // Monotonic cumulative counts (a scrape racing recording can see a later bucket lower).
  std::vector<double> cum(h.buckets.size());
  double run = 0;
  for (size_t i = 0; i < h.buckets.size(); ++i) {
    run = std::max(run, finite(h.buckets[i].second));
    cum[i] = run;
  }
  const double total = cum.back();
  if (!(total > 0)) return kNaN;
  const double rank = q * total;
  size_t i = 0;
  while (i < cum.size() && cum[i] < rank) ++i;
  if (i >= cum.size()) i = cum.size() - 1;
  if (i == cum.size() - 1) {
    // The +Inf bucket: the highest finite bound (Prometheus' answer).
    return cum.size() >= 2 ? h.buckets[cum.size() - 2].first : kNaN;
  }
  const double upper = h.buckets[i].first;
  double lower = 0, below = 0;
  if (i > 0) {
    lower = h.buckets[i - 1].first;
    below = cum[i - 1];
  } else if (upper <= 0) {
    return upper;
  }
  const double in_bucket = cum[i] - below;
  if (!(in_bucket > 0)) return upper;
  return lower + (upper - lower) * ((rank - below) / in_bucket);
}

// ---------------------------------------------------------------------------------------------
// Snapshot

Snapshot buildSnapshot(const PromScrape& scrape) {
  Snapshot s;
  s.skipped_lines = scrape.skipped_lines;
  for (const PromSample& x : scrape.samples) {
    const std::string_view n = x.name;
    if (!startsWith(n, "infergate_")) continue;
    const double v = finite(x.value);
    if (n == "infergate_requests_total") {
      s.requests[{std::string(x.label("model")), std::string(x.label("protocol"))}]
          .by_code[std::string(x.label("code"))] += v;
    } else if (startsWith(n, "infergate_request_duration_seconds_")) {
      Histogram& h =
          s.requests[{std::string(x.label("model")), std::string(x.label("protocol"))}].duration;
      const std::string_view suffix = n.substr(sizeof("infergate_request_duration_seconds_") - 1);
      double le = 0;
      if (suffix == "bucket" && parseLe(x.label("le"), le)) {
        addBucket(h, le, v);
      } else if (suffix == "sum") {
        h.sum += v;
      } else if (suffix == "count") {
        h.count += v;
      }
    } else if (n == "infergate_batcher_queue_depth") {
      s.batchers[std::string(x.label("model"))].queue_depth[std::string(x.label("level"))] += v;
    } else if (startsWith(n, "infergate_batcher_batch_size_")) {
      Histogram& h = s.batchers[std::string(x.label("model"))].batch_size;
      const std::string_view suffix = n.substr(sizeof("infergate_batcher_batch_size_") - 1);
      double le = 0;
      if (suffix == "bucket" && parseLe(x.label("le"), le)) {
        addBucket(h, le, v);
      } else if (suffix == "sum") {
        h.sum += v;
      } else if (suffix == "count") {
        h.count += v;
      }
    } else if (n == "infergate_batcher_rejections_total") {
      s.batchers[std::string(x.label("model"))].rejections[std::string(x.label("reason"))] += v;
    } else if (n == "infergate_batcher_shed_total") {
      s.batchers[std::string(x.label("model"))].shed += v;
    } else if (n == "infergate_batcher_overload_level") {
      s.batchers[std::string(x.label("model"))].overload_level = v;
    } else if (n == "infergate_connections_active") {
      s.connections_active += v;
    } else if (n == "infergate_xdp_packets_total") {
      s.has_xdp = true;
      s.xdp_packets[{std::string(x.label("verdict")), std::string(x.label("reason"))}] += v;
    } else if (n == "infergate_xdp_requests_total") {
      s.has_xdp = true;
      s.xdp_requests[{std::string(x.label("class")), std::string(x.label("verdict"))}] += v;
    } else if (n == "infergate_tcp_drops_total") {
      s.has_tcp = true;
      s.tcp_drops[std::string(x.label("reason"))] += v;
    } else if (n == "infergate_tcp_connections") {
      s.has_tcp = true;
      s.tcp_conns[std::string(x.label("state"))] += v;
    } else if (startsWith(n, "infergate_tcp_") && endsWith(n, "_total")) {
      s.has_tcp = true;
      const std::string_view mid = n.substr(14, n.size() - 14 - 6);
      s.tcp_totals[std::string(mid)] += v;
    } else if (n == "infergate_afxdp_zero_copy") {
      s.has_afxdp = true;
      s.afxdp_queues += 1;
      if (v > 0) s.afxdp_zero_copy_queues += 1;
    } else if (startsWith(n, "infergate_afxdp_") && endsWith(n, "_total")) {
      s.has_afxdp = true;
      const std::string_view mid = n.substr(16, n.size() - 16 - 6);
      s.afxdp_totals[std::string(mid)] += v;
    } else if (startsWith(n, "infergate_gpu_")) {
      s.has_gpu = true;
      if (n == "infergate_gpu_probes_active") s.gpu_probes_active = v;
      if (n == "infergate_gpu_processes") s.gpu_processes = v;
      if (n == "infergate_gpu_anomalous_processes") s.gpu_anomalous = v;
      if (n == "infergate_gpu_leak_suspects") s.gpu_leak_suspects = v;
      if (n == "infergate_gpu_over_quota_containers") s.gpu_over_quota = v;
      if (n == "infergate_gpu_live_bytes") s.gpu_live_bytes += v;
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Frame

namespace {

std::vector<CountRate> countRates(const std::map<std::string, double>& cur,
                                  const std::map<std::string, double>* prev, double seconds,
                                  bool nonzero_only) {
  std::vector<CountRate> out;
  for (const auto& [k, v] : cur) {
    if (nonzero_only && !(v > 0)) continue;
    out.push_back({k, v, rateOf(lookup(prev, k), v, seconds, prev != nullptr)});
  }
  return out;
}

}  // namespace

Frame computeFrame(const Snapshot* prev, const Snapshot& cur, double seconds) {
  Frame f;
  const bool hp = prev != nullptr && seconds > 0;
  if (!hp) prev = nullptr;
  f.has_rates = hp;
  f.seconds = seconds;
  f.skipped_lines = cur.skipped_lines;
  f.connections_active = cur.connections_active;

  for (const auto& [key, series] : cur.requests) {
    ModelRow row;
    row.model = key.first;
    row.protocol = key.second;
    const RequestSeries* ps = nullptr;
    if (prev != nullptr) {
      auto it = prev->requests.find(key);
      if (it != prev->requests.end()) ps = &it->second;
    }
    double delta = 0, err_delta = 0;
    for (const auto& [code, v] : series.by_code) {
      row.total += v;
      const double d = counterDelta(ps != nullptr ? lookup(&ps->by_code, code) : 0, v);
      delta += d;
      if (code.empty() || code[0] != '2') {
        err_delta += d;
        if (hp && d > 0) row.errors.emplace_back(code, d / seconds);
      }
    }
    if (!(row.total > 0)) continue;
    if (hp) {
      row.rate = delta / seconds;
      row.error_rate = err_delta / seconds;
      const Histogram d =
          histogramDelta(ps != nullptr ? ps->duration : Histogram{}, series.duration);
      row.p50 = histogramQuantile(0.5, d);
      row.p99 = histogramQuantile(0.99, d);
    } else {
      row.rate = row.error_rate = row.p50 = row.p99 = kNaN;
    }
    f.models.push_back(std::move(row));
  }

  for (const auto& [model, b] : cur.batchers) {
    BatcherRow row;
    row.model = model;
    const BatcherSeries* pb = nullptr;
    if (prev != nullptr) {
      auto it = prev->batchers.find(model);
      if (it != prev->batchers.end()) pb = &it->second;
    }
    for (const auto& [level, depth] : b.queue_depth) row.queue_depth.emplace_back(level, depth);
    std::sort(row.queue_depth.begin(), row.queue_depth.end(),
              [](const auto& x, const auto& y) { return levelLess(x.first, y.first); });
    row.overload_level = b.overload_level;
    if (hp) {
      const Histogram d =
          histogramDelta(pb != nullptr ? pb->batch_size : Histogram{}, b.batch_size);
      row.batch_rate = d.count / seconds;
      row.mean_batch = d.count > 0 ? d.sum / d.count : kNaN;
      row.p99_batch = histogramQuantile(0.99, d);
      row.shed_rate = counterDelta(pb != nullptr ? pb->shed : 0, b.shed) / seconds;
      for (const auto& [reason, v] : b.rejections) {
        const double d2 = counterDelta(pb != nullptr ? lookup(&pb->rejections, reason) : 0, v);
        if (d2 > 0) row.rejections.emplace_back(reason, d2 / seconds);
      }
    } else {
      row.batch_rate = row.mean_batch = row.p99_batch = row.shed_rate = kNaN;
    }
    f.batchers.push_back(std::move(row));
  }

  if (cur.has_xdp) {
    f.has_xdp = true;
    std::map<std::string, double> verdicts, pverdicts, drops, pdrops, reqs, preqs;
    auto fold = [](const std::map<std::pair<std::string, std::string>, double>& m,
                   std::map<std::string, double>& by_first, std::map<std::string, double>* drop,
                   bool by_second) {
      for (const auto& [k, v] : m) {
        by_first[by_second ? k.second : k.first] += v;
        if (drop != nullptr && (k.first == "drop" || k.first == "aborted")) {
          (*drop)[k.second] += v;
        }
      }
    };
    fold(cur.xdp_packets, verdicts, &drops, false);
    fold(cur.xdp_requests, reqs, nullptr, true);
    if (prev != nullptr) {
      fold(prev->xdp_packets, pverdicts, &pdrops, false);
      fold(prev->xdp_requests, preqs, nullptr, true);
    }
    f.xdp_verdicts = countRates(verdicts, prev ? &pverdicts : nullptr, seconds, false);
    f.xdp_drops = countRates(drops, prev ? &pdrops : nullptr, seconds, true);
    f.xdp_requests = countRates(reqs, prev ? &preqs : nullptr, seconds, false);
  }

  if (cur.has_tcp) {
    f.has_tcp = true;
    for (const auto& [state, v] : cur.tcp_conns) {
      f.tcp_connections += v;
      if (state == "established") f.tcp_established += v;
    }
    static constexpr std::string_view kShown[] = {"segments_in", "segments_out", "bytes_in",
                                                  "bytes_out",   "retransmits",  "accepted",
                                                  "refused",     "rst_in",       "rst_out"};
    std::map<std::string, double> shown, pshown;
    for (std::string_view k : kShown) {
      auto it = cur.tcp_totals.find(std::string(k));
      if (it == cur.tcp_totals.end()) continue;
      shown[it->first] = it->second;
      if (prev != nullptr) pshown[it->first] = lookup(&prev->tcp_totals, it->first);
    }
    for (std::string_view k : kShown) {
      auto it = shown.find(std::string(k));
      if (it == shown.end()) continue;
      f.tcp.push_back({it->first, it->second,
                       rateOf(lookup(prev ? &pshown : nullptr, it->first), it->second, seconds,
                              prev != nullptr)});
    }
    f.tcp_drops = countRates(cur.tcp_drops, prev ? &prev->tcp_drops : nullptr, seconds, true);
  }

  if (cur.has_afxdp) {
    f.has_afxdp = true;
    f.afxdp_queues = cur.afxdp_queues;
    f.afxdp_zero_copy_queues = cur.afxdp_zero_copy_queues;
    std::map<std::string, double> shown, pshown;
    for (const auto& [k, v] : cur.afxdp_totals) {
      const bool drop = startsWith(k, "kernel_") || k == "tx_alloc_failed";
      if (k == "rx_frames" || k == "tx_frames" || (drop && v > 0)) {
        shown[k] = v;
        if (prev != nullptr) pshown[k] = lookup(&prev->afxdp_totals, k);
      }
    }
    f.afxdp = countRates(shown, prev ? &pshown : nullptr, seconds, false);
    // rx, tx first; the drop counters after.
    std::stable_sort(f.afxdp.begin(), f.afxdp.end(), [](const CountRate& a, const CountRate& b) {
      auto rank = [](const std::string& n) {
        return n == "rx_frames" ? 0 : n == "tx_frames" ? 1 : 2;
      };
      return rank(a.name) < rank(b.name);
    });
  }

  if (cur.has_gpu) {
    f.has_gpu = true;
    f.gpu_probes_active = cur.gpu_probes_active;
    f.gpu_processes = cur.gpu_processes;
    f.gpu_anomalous = cur.gpu_anomalous;
    f.gpu_leak_suspects = cur.gpu_leak_suspects;
    f.gpu_over_quota = cur.gpu_over_quota;
    f.gpu_live_bytes = cur.gpu_live_bytes;
  }
  return f;
}

bool parseSortKey(std::string_view s, SortKey& out) {
  if (s == "rate")
    out = SortKey::kRate;
  else if (s == "p99")
    out = SortKey::kP99;
  else if (s == "p50")
    out = SortKey::kP50;
  else if (s == "errors")
    out = SortKey::kErrors;
  else if (s == "name")
    out = SortKey::kName;
  else
    return false;
  return true;
}

std::string_view sortKeyName(SortKey k) {
  switch (k) {
    case SortKey::kRate:
      return "rate";
    case SortKey::kP99:
      return "p99";
    case SortKey::kP50:
      return "p50";
    case SortKey::kErrors:
      return "errors";
    case SortKey::kName:
      return "name";
  }
  return "rate";
}

void sortRows(std::vector<ModelRow>& rows, SortKey key) {
  auto value = [key](const ModelRow& r) {
    switch (key) {
      case SortKey::kRate:
        return r.rate;
      case SortKey::kP99:
        return r.p99;
      case SortKey::kP50:
        return r.p50;
      case SortKey::kErrors:
        return r.error_rate;
      case SortKey::kName:
        return 0.0;
    }
    return 0.0;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const ModelRow& a, const ModelRow& b) {
    if (key != SortKey::kName) {
      const double va = value(a), vb = value(b);
      const bool na = std::isnan(va), nb = std::isnan(vb);
      if (na != nb) return nb;  // NaN last
      if (!na && va != vb) return va > vb;
    }
    if (a.model != b.model) return a.model < b.model;
    return a.protocol < b.protocol;
  });
}

// ---------------------------------------------------------------------------------------------
// Rendering

std::string printable(std::string_view s, size_t max) {
  std::string out;
  const size_t n = std::min(s.size(), max);
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out.push_back(c < 0x20 || c >= 0x7f ? '?' : static_cast<char>(c));
  }
  if (s.size() > max && max > 0) out.back() = '~';
  return out;
}

std::string formatRate(double v) {
  if (std::isnan(v)) return "-";
  const double a = std::fabs(v);
  if (a < 9.95) return v == std::floor(v) ? fmt::format("{:.0f}", v) : fmt::format("{:.1f}", v);
  if (a < 9999.5) return fmt::format("{:.0f}", v);
  if (a < 999.95e3) return fmt::format("{:.1f}k", v / 1e3);
  if (a < 999.95e6) return fmt::format("{:.1f}M", v / 1e6);
  return fmt::format("{:.1f}G", v / 1e9);
}

std::string formatSeconds(double s) {
  if (std::isnan(s)) return "-";
  if (std::isinf(s)) return s > 0 ? "inf" : "-inf";
  if (s < 1e-3) return fmt::format("{:.0f}us", s * 1e6);
  if (s < 1) return fmt::format("{:.1f}ms", s * 1e3);
  return fmt::format("{:.2f}s", s);
}

namespace {

std::string formatBytes(double b) {
  if (b < 1024) return fmt::format("{:.0f} B", b);
  if (b < 1024.0 * 1024) return fmt::format("{:.1f} KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.1f} GiB", b / (1024.0 * 1024 * 1024));
}

// "name rate/s" items joined, or the totals on the first frame.
std::string joinCountRates(const std::vector<CountRate>& v, bool has_rates) {
  std::string out;
  for (const CountRate& c : v) {
    if (!out.empty()) out += "  ";
    out += printable(c.name, 40);
    out += ' ';
    out += has_rates ? formatRate(c.rate) + "/s" : formatRate(c.total);
  }
  return out;
}

}  // namespace

std::vector<std::string> renderFrame(const Frame& f, const RenderOptions& o) {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("infergate top  {}  {}  every {:.1f}s  sort: {}  connections {}",
                              printable(o.admin, 64), o.clock, f.seconds > 0 ? f.seconds : 0.0,
                              sortKeyName(o.sort), formatRate(f.connections_active)));
  if (!f.has_rates) lines.back() += "  (rates after the next refresh)";
  lines.emplace_back();

  // Model rows: as many as fit, leaving room for the sections below.
  lines.push_back(fmt::format("{:<24} {:<12} {:>8} {:>8} {:>8} {:>7}  {}", "MODEL", "PROTOCOL",
                              "REQ/S", "P50", "P99", "ERR/S", "ERRORS/S BY CODE"));
  std::vector<ModelRow> rows = f.models;
  sortRows(rows, o.sort);
  // The lines around the model rows: the 3 above, the "more" line, the sections below.
  const bool ext = f.has_xdp || f.has_tcp || f.has_afxdp || f.has_gpu;
  const size_t fixed = 4 + (f.batchers.empty() ? 0 : 2 + f.batchers.size()) + (ext ? 1 : 0) +
                       (f.has_xdp ? 3 : 0) + (f.has_tcp ? 2 : 0) + (f.has_afxdp ? 1 : 0) +
                       (f.has_gpu ? 1 : 0) + (f.skipped_lines > 0 ? 1 : 0) +
                       (o.status.empty() ? 0 : 2);
  size_t room = rows.size();
  if (o.height > 0 && rows.size() + fixed - 1 > o.height) {
    // Not all fit: as many as leave room for the "more" line (at least one row).
    room = o.height > fixed ? o.height - fixed : 1;
  }
  for (size_t i = 0; i < rows.size() && i < room; ++i) {
    const ModelRow& r = rows[i];
    std::string errors;
    for (const auto& [code, rate] : r.errors) {
      if (!errors.empty()) errors += ' ';
      errors += printable(code, 8) + ":" + formatRate(rate);
    }
    lines.push_back(fmt::format("{:<24} {:<12} {:>8} {:>8} {:>8} {:>7}  {}",
                                r.model.empty() ? "(none)" : printable(r.model, 24),
                                printable(r.protocol, 12), formatRate(r.rate), formatSeconds(r.p50),
                                formatSeconds(r.p99), formatRate(r.error_rate), errors));
  }
  if (rows.size() > room) {
    lines.push_back(fmt::format("  ... {} more row(s)", rows.size() - room));
  }
  if (rows.empty()) lines.push_back("  (no requests answered yet)");

  if (!f.batchers.empty()) {
    lines.emplace_back();
    lines.push_back(fmt::format("{:<24} {:>8} {:>7} {:>6} {:>7}  {}", "BATCHER", "BATCH/S", "MEAN",
                                "P99", "SHED/S", "QUEUE DEPTH BY LEVEL / REJECTED/S"));
    for (const BatcherRow& b : f.batchers) {
      std::string detail;
      for (const auto& [level, depth] : b.queue_depth) {
        if (!detail.empty()) detail += ' ';
        detail += "L" + printable(level, 8) + ":" + formatRate(depth);
      }
      for (const auto& [reason, rate] : b.rejections) {
        detail += "  " + printable(reason, 24) + ":" + formatRate(rate) + "/s";
      }
      if (b.overload_level > 0) detail += "  overload " + formatRate(b.overload_level);
      lines.push_back(fmt::format("{:<24} {:>8} {:>7} {:>6} {:>7}  {}",
                                  b.model.empty() ? "(none)" : printable(b.model, 24),
                                  formatRate(b.batch_rate), formatRate(b.mean_batch),
                                  formatRate(b.p99_batch), formatRate(b.shed_rate), detail));
    }
  }
  if (ext) lines.emplace_back();
  if (f.has_xdp) {
    lines.push_back("XDP     packets  " + joinCountRates(f.xdp_verdicts, f.has_rates));
    lines.push_back("XDP     drops    " + (f.xdp_drops.empty()
                                               ? std::string("none")
                                               : joinCountRates(f.xdp_drops, f.has_rates)));
    lines.push_back("XDP     requests " + joinCountRates(f.xdp_requests, f.has_rates));
  }
  if (f.has_tcp) {
    lines.push_back(fmt::format("TCP     established {} of {}  ", formatRate(f.tcp_established),
                                formatRate(f.tcp_connections)) +
                    joinCountRates(f.tcp, f.has_rates));
    lines.push_back("TCP     drops    " + (f.tcp_drops.empty()
                                               ? std::string("none")
                                               : joinCountRates(f.tcp_drops, f.has_rates)));
  }
  if (f.has_afxdp) {
    lines.push_back(fmt::format("AF_XDP  zero-copy {} of {} queues  ",
                                formatRate(f.afxdp_zero_copy_queues), formatRate(f.afxdp_queues)) +
                    joinCountRates(f.afxdp, f.has_rates));
  }
  if (f.has_gpu) {
    lines.push_back(fmt::format(
        "GPU     probes {}  processes {}  anomalous {}  leak suspects {}  over quota {}  live {}",
        f.gpu_probes_active > 0 ? "on" : "off", formatRate(f.gpu_processes),
        formatRate(f.gpu_anomalous), formatRate(f.gpu_leak_suspects), formatRate(f.gpu_over_quota),
        formatBytes(f.gpu_live_bytes)));
  }
  if (f.skipped_lines > 0) {
    lines.push_back(fmt::format("({} malformed /metrics line(s) skipped)", f.skipped_lines));
  }
  if (!o.status.empty()) {
    lines.emplace_back();
    lines.push_back(printable(o.status, 400));
  }
  if (o.height > 0 && lines.size() > o.height) lines.resize(o.height);
  if (o.width > 0) {
    for (std::string& l : lines) {
      if (l.size() > o.width) l.resize(o.width);
    }
  }
  return lines;
}

// ---------------------------------------------------------------------------------------------
// The terminal loop

namespace {

volatile std::sig_atomic_t g_stop = 0;
volatile std::sig_atomic_t g_resized = 0;

void onStop(int) { g_stop = 1; }
void onWinch(int) { g_resized = 1; }

// Raw-ish keyboard (no echo, no line buffering; Ctrl-C still raises SIGINT), the alternate
// screen and a hidden cursor while the view runs; all restored by the destructor, which runs on
// every exit path of runTop (q, a signal, an error).
class Terminal {
 public:
  Terminal(bool out_tty, bool in_tty) : out_tty_(out_tty) {
    if (in_tty && tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      restore_in_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    if (out_tty_) write("\033[?1049h\033[?25l\033[H\033[2J");
  }
  ~Terminal() {
    if (out_tty_) write("\033[?25h\033[?1049l");
    if (restore_in_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  Terminal(const Terminal&) = delete;
  Terminal& operator=(const Terminal&) = delete;

  static void write(std::string_view s) {
    while (!s.empty()) {
      const ssize_t n = ::write(STDOUT_FILENO, s.data(), s.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      s.remove_prefix(static_cast<size_t>(n));
    }
  }

 private:
  bool out_tty_;
  bool restore_in_ = false;
  termios saved_{};
};

void screenSize(bool tty, size_t& width, size_t& height) {
  width = height = 0;
  winsize ws{};
  if (tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    width = ws.ws_col;
    height = ws.ws_row;
    return;
  }
  if (const char* c = std::getenv("COLUMNS")) {
    const long v = std::strtol(c, nullptr, 10);
    if (v > 0 && v < 10000) width = static_cast<size_t>(v);
  }
  if (tty && width == 0) width = 80;
}

std::string clockNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

absl::StatusOr<Snapshot> scrape(const std::string& admin) {
  const PromLimits limits;
  AdminGetOptions get;
  get.max_body_bytes = limits.max_body_bytes;
  absl::StatusOr<AdminResponse> r = adminGet(admin, "/metrics", get);
  if (!r.ok()) return r.status();
  if (r->status != 200) {
    return absl::UnavailableError(fmt::format("{}/metrics: HTTP {}", admin, r->status));
  }
  absl::StatusOr<PromScrape> p = parsePromText(r->body, limits);
  if (!p.ok()) return p.status();
  return buildSnapshot(*p);
}

using Clock = std::chrono::steady_clock;

}  // namespace

int runTop(const TopOptions& options) {
  const bool out_tty = isatty(STDOUT_FILENO) == 1;
  const bool in_tty = isatty(STDIN_FILENO) == 1;
  SortKey sort = options.sort;

  if (options.once) {
    absl::StatusOr<Snapshot> first = scrape(options.admin);
    if (!first.ok()) {
      std::fprintf(stderr, "infergate top: %s\n", std::string(first.status().message()).c_str());
      return 1;
    }
    const Clock::time_point t0 = Clock::now();
    {
      timespec ts{static_cast<time_t>(options.interval_ms / 1000),
                  static_cast<long>(options.interval_ms % 1000) * 1000000L};
      while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
      }
    }
    absl::StatusOr<Snapshot> second = scrape(options.admin);
    if (!second.ok()) {
      std::fprintf(stderr, "infergate top: %s\n", std::string(second.status().message()).c_str());
      return 1;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const Frame f = computeFrame(&*first, *second, secs);
    RenderOptions ro;
    ro.admin = options.admin;
    ro.clock = clockNow();
    ro.sort = sort;
    size_t h = 0;
    screenSize(out_tty, ro.width, h);  // --once: every row, cut to the width only
    std::string out;
    for (const std::string& l : renderFrame(f, ro)) out += l + "\n";
    Terminal::write(out);
    return 0;
  }

  struct sigaction sa {};
  sa.sa_handler = onStop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: poll() returns at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  struct sigaction sw {};
  sw.sa_handler = onWinch;
  sigemptyset(&sw.sa_mask);
  sigaction(SIGWINCH, &sw, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Terminal term(out_tty, in_tty);
  std::optional<Snapshot> prev;
  Clock::time_point prev_at{};
  Frame frame;
  std::string status;
  bool have_frame = false;
  Clock::time_point next = Clock::now();
  const char* keys = in_tty ? "q quit  r/p/e/n sort by rate/p99/errors/name" : "Ctrl-C quits";
  bool redraw = false;
  while (!g_stop) {
    if (Clock::now() >= next) {
      absl::StatusOr<Snapshot> s = scrape(options.admin);
      const Clock::time_point at = Clock::now();
      if (s.ok()) {
        const double secs =
            prev.has_value() ? std::chrono::duration<double>(at - prev_at).count() : 0;
        frame = computeFrame(prev.has_value() ? &*prev : nullptr, *s, secs);
        have_frame = true;
        prev = std::move(*s);
        prev_at = at;
        status = keys;
      } else {
        status = fmt::format("cannot read {}: {} (retrying)   {}", options.admin,
                             std::string(s.status().message()), keys);
      }
      next = at + std::chrono::milliseconds(options.interval_ms);
      redraw = true;
    }
    if (g_resized) {
      g_resized = 0;
      redraw = true;
    }
    if (redraw) {
      redraw = false;
      RenderOptions ro;
      ro.admin = options.admin;
      ro.clock = clockNow();
      ro.sort = sort;
      ro.status = status;
      screenSize(out_tty, ro.width, ro.height);
      std::vector<std::string> lines =
          have_frame ? renderFrame(frame, ro)
                     : std::vector<std::string>{printable(status, ro.width ? ro.width : 400)};
      std::string out;
      if (out_tty) {
        // Home, each line with clear-to-end, then clear below: no flicker, no scrolling (the
        // last line has no newline).
        out += "\033[H";
        for (size_t i = 0; i < lines.size(); ++i) {
          out += lines[i];
          out += "\033[K";
          if (i + 1 < lines.size()) out += "\r\n";
        }
        out += "\033[J";
      } else {
        for (const std::string& l : lines) out += l + "\n";
        out += "\n";
      }
      Terminal::write(out);
    }
    // Wait for a key, a signal or the next refresh.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
    const int timeout = static_cast<int>(std::max<int64_t>(0, left.count()));
    if (in_tty) {
      pollfd p{STDIN_FILENO, POLLIN, 0};
      const int n = poll(&p, 1, timeout);
      if (n > 0 && (p.revents & POLLIN)) {
        char buf[64];
        const ssize_t r = read(STDIN_FILENO, buf, sizeof buf);
        for (ssize_t i = 0; i < r; ++i) {
          SortKey k = sort;
          switch (buf[i]) {
            case 'q':
            case 'Q':
            case 3:  // Ctrl-C when ISIG is off
              g_stop = 1;
              break;
            case 'r':
              k = SortKey::kRate;
              break;
            case 'p':
              k = SortKey::kP99;
              break;
            case 'e':
              k = SortKey::kErrors;
              break;
            case 'n':
              k = SortKey::kName;
              break;
            default:
              break;
          }
          if (k != sort) {
            sort = k;
            redraw = true;
          }
        }
      } else if (n > 0 && (p.revents & (POLLHUP | POLLERR))) {
        g_stop = 1;  // the terminal went away
      }
    } else {
      poll(nullptr, 0, timeout);
    }
  }
  return 0;
}

}  // namespace infergate::app::top
