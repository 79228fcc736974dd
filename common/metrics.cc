#include "common/metrics.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <system_error>

#include <fmt/format.h>

#include "common/check.h"

namespace infergate::common {

namespace {

// Release assert: a broken registration invariant is a programming error found at start-up.
[[noreturn]] void metricsFatal(const std::string& msg) { fatal("metrics: " + msg); }

// Exposition bounds in ascending order without duplicates; +Inf is implicit, NaN meaningless.
std::vector<double> normalizeBounds(std::vector<double> bounds) {
  std::erase_if(bounds, [](double b) { return std::isnan(b) || std::isinf(b); });
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  return bounds;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// threadShard

int threadShard() {
  // Round-robin: the n-th thread to record anything gets shard n % kMetricShards. Relaxed is
  // enough: the counter only has to hand out distinct-ish tickets, it publishes no data.
  static std::atomic<unsigned> next{0};
  thread_local int shard = -1;
  if (shard < 0) [[unlikely]] {
    shard = static_cast<int>(next.fetch_add(1, std::memory_order_relaxed) % kMetricShards);
  }
  return shard;
}

uint64_t Counter::value() const {
  uint64_t total = 0;
  // Relaxed loads pair with the relaxed fetch_add in inc(); a scrape is a best-effort snapshot.
  for (const auto& s : shards_) total += s.v.load(std::memory_order_relaxed);
  return total;
}

// ---------------------------------------------------------------------------------------------
// LogLinearHistogram
//
// Bucket layout (S = kSubBuckets, B = kSubBucketBits):
//   v < S                : bucket v (width 1, exact).
//   v >= S, msb = log2(v): shift = msb - B (0..63-B); the top B+1 bits of v are
//                          (v >> shift) in [S, 2S); bucket = (shift + 1) * S + ((v >> shift) - S).
// For shift = 0 this gives bucket = v for v in [S, 2S), so the two ranges join without a gap.
// Octave `shift` covers [S << shift, 2S << shift) in S buckets of width 2^shift, so a bucket's
// width is at most 1/S of its lower bound. The last bucket (shift = 63-B, sub = S-1) ends at
// 2^64-1, hence kBuckets = (64 - B + 1) * S.

int LogLinearHistogram::bucketOf(uint64_t v) {
  if (v < static_cast<uint64_t>(kSubBuckets)) return static_cast<int>(v);
  const int msb = 63 - std::countl_zero(v);
  const int shift = msb - kSubBucketBits;
  return (shift + 1) * kSubBuckets + static_cast<int>((v >> shift) - kSubBuckets);
}

uint64_t LogLinearHistogram::bucketLow(int b) {
  if (b < kSubBuckets) return static_cast<uint64_t>(b);
  const int shift = b / kSubBuckets - 1;
  const uint64_t sub = static_cast<uint64_t>(b % kSubBuckets);
  return (static_cast<uint64_t>(kSubBuckets) + sub) << shift;
}

uint64_t LogLinearHistogram::bucketHigh(int b) {
  if (b < kSubBuckets) return static_cast<uint64_t>(b);
  const int shift = b / kSubBuckets - 1;
  // For the last bucket this is (2^64 - 2^shift) + (2^shift - 1) = 2^64 - 1: no overflow.
  return bucketLow(b) + ((uint64_t{1} << shift) - 1);
}

void LogLinearHistogram::record(uint64_t v, uint64_t count) {
  if (count == 0) return;
  buckets_[bucketOf(v)] += count;
  count_ += count;
  sum_ += v * count;  // wraps modulo 2^64 like a Prometheus counter would overflow; not expected
  max_ = std::max(max_, v);
}

void LogLinearHistogram::merge(const LogLinearHistogram& other) {
  for (int b = 0; b < kBuckets; ++b) buckets_[b] += other.buckets_[b];
  count_ += other.count_;
  sum_ += other.sum_;
  max_ = std::max(max_, other.max_);
}

void LogLinearHistogram::clear() { *this = LogLinearHistogram{}; }

uint64_t LogLinearHistogram::count() const { return count_; }
uint64_t LogLinearHistogram::sum() const { return sum_; }
uint64_t LogLinearHistogram::max() const { return max_; }

uint64_t LogLinearHistogram::quantile(double q) const {
  if (count_ == 0) return 0;
  if (!(q >= 0.0)) q = 0.0;  // also maps NaN to 0
  if (q > 1.0) q = 1.0;
  // Rank of the wanted observation, 1-based: ceil(q * count), at least 1, at most count.
  const double r = std::ceil(q * static_cast<double>(count_));
  uint64_t rank = r < 1.0 ? 1 : static_cast<uint64_t>(r);
  rank = std::min(rank, count_);
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += buckets_[b];
    if (seen >= rank) return std::min(bucketHigh(b), max_);
  }
  return max_;  // unreachable while buckets_ and count_ agree
}

// ---------------------------------------------------------------------------------------------
// Histogram

Histogram::Histogram(std::vector<double> upper_bounds, double scale)
    : bounds_(normalizeBounds(std::move(upper_bounds))),
      scale_(scale),
      shards_(std::make_unique<Shard[]>(kMetricShards)) {
  if (!(scale_ > 0.0) || !std::isfinite(scale_)) {
    metricsFatal("histogram scale must be a positive finite number");
  }
}

void Histogram::record(uint64_t v) {
  Shard& s = shards_[threadShard()];
  // All relaxed: each field is an independent sum/max read by snapshot() with relaxed loads;
  // a scrape concurrent with recording may see a bucket increment before the matching sum.
  s.buckets[LogLinearHistogram::bucketOf(v)].fetch_add(1, std::memory_order_relaxed);
  s.sum.fetch_add(v, std::memory_order_relaxed);
  uint64_t cur = s.max.load(std::memory_order_relaxed);
  while (v > cur && !s.max.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

LogLinearHistogram Histogram::snapshot() const {
  LogLinearHistogram h;
  for (int i = 0; i < kMetricShards; ++i) {
    const Shard& s = shards_[i];
    for (int b = 0; b < LogLinearHistogram::kBuckets; ++b) {
      const uint64_t n = s.buckets[b].load(std::memory_order_relaxed);
      h.buckets_[b] += n;
      h.count_ += n;
    }
    h.sum_ += s.sum.load(std::memory_order_relaxed);
    h.max_ = std::max(h.max_, s.max.load(std::memory_order_relaxed));
  }
  return h;
}

std::vector<double> latencyBucketsSeconds() {
  // Literals rather than m * 10^e so that each bound is the double nearest its decimal.
  return {0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01,
          0.02,    0.05,    0.1,     0.2,    0.5,    1,      2,     5,     10};
}

// ---------------------------------------------------------------------------------------------
// Exposition helpers

namespace {

enum class MetricType { kCounter, kGauge, kHistogram };

const char* typeName(MetricType t) {
  switch (t) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

// Shortest decimal that reads back as the same double, never in exponent form
// ("0.00001", "10", "0.5"); non-finite values use Prometheus spelling.
void appendDouble(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  if (v == 0) {  // also folds -0 into 0
    out += '0';
    return;
  }
  char buf[400];  // fixed notation of DBL_MAX needs 309 digits
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  if (ec != std::errc{}) metricsFatal("to_chars failed");  // cannot happen with 400 bytes
  out.append(buf, end);
}

void appendUint(std::string& out, uint64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

void appendInt(std::string& out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

// Label values: backslash, double quote and newline escaped. HELP text: backslash and newline.
void appendEscaped(std::string& out, std::string_view s, bool quote) {
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '"':
        if (quote) {
          out += "\\\"";
        } else {
          out += c;
        }
        break;
      default: out += c;
    }
  }
}

bool validName(std::string_view s, bool allow_colon) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                       (allow_colon && c == ':');
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

// Canonical series key: labels sorted by name, rendered as the exposition body
// `k1="v1",k2="v2"` (escaping is injective, so distinct label sets give distinct keys).
std::string canonicalLabels(std::string_view metric, const Labels& labels, bool histogram) {
  Labels sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  std::string key;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto& [k, v] = sorted[i];
    if (!validName(k, false) || k.starts_with("__")) {
      metricsFatal(fmt::format("invalid label name '{}' on metric '{}'", k, metric));
    }
    if (i > 0 && sorted[i - 1].first == k) {
      metricsFatal(fmt::format("duplicate label '{}' on metric '{}'", k, metric));
    }
    if (histogram && k == "le") {
      metricsFatal(fmt::format("label 'le' is reserved on histogram '{}'", metric));
    }
    if (i > 0) key += ',';
    key += k;
    key += "=\"";
    appendEscaped(key, v, true);
    key += '"';
  }
  return key;
}

// `name{labels}` or `name` when there are none; `extra` (e.g. `le="0.1"`) goes last.
void appendSeriesName(std::string& out, std::string_view name, std::string_view suffix,
                      const std::string& labels, std::string_view extra = {}) {
  out += name;
  out += suffix;
  if (labels.empty() && extra.empty()) return;
  out += '{';
  out += labels;
  if (!labels.empty() && !extra.empty()) out += ',';
  out += extra;
  out += '}';
}

// Largest recorded value counted under an exposition bound: floor(bound * scale). A product
// within 1e-9 relative of an integer is taken as that integer, so that 0.00002 s * 1e6 is 20 µs
// even though the double product is 19.999999999999996. Returns false when no value fits
// (negative bound).
bool boundToLimit(double bound, double scale, uint64_t& limit) {
  double t = bound * scale;
  const double r = std::nearbyint(t);
  if (std::fabs(t - r) <= 1e-9 * std::max(1.0, std::fabs(t))) t = r;
  if (t < 0) return false;
  if (t >= 18446744073709551616.0) {  // 2^64
    limit = std::numeric_limits<uint64_t>::max();
  } else {
    limit = static_cast<uint64_t>(std::floor(t));
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// MetricsRegistry

struct MetricsRegistry::Family {
  MetricType type;
  std::string help;
  // Keyed by the canonical label string; unique_ptr keeps the references handed out stable.
  std::map<std::string, std::unique_ptr<Counter>> counters;
  std::map<std::string, std::unique_ptr<Gauge>> gauges;
  std::map<std::string, std::unique_ptr<Histogram>> histograms;
  std::set<std::string> hidden;  // canonical label strings not rendered (hideSeries)
};

namespace {

template <typename F>
F& familyFor(std::map<std::string, std::unique_ptr<F>, std::less<>>& families,
             std::string_view name, std::string_view help, MetricType type) {
  if (!validName(name, true)) metricsFatal(fmt::format("invalid metric name '{}'", name));
  auto it = families.find(name);
  if (it == families.end()) {
    auto f = std::make_unique<F>();
    f->type = type;
    f->help = std::string(help);
    it = families.emplace(std::string(name), std::move(f)).first;
  }
  F& f = *it->second;
  if (f.type != type) {
    metricsFatal(fmt::format("metric '{}' registered as {} and as {}", name, typeName(f.type),
                             typeName(type)));
  }
  if (f.help != help) {
    metricsFatal(fmt::format("metric '{}' registered with two help texts: '{}' and '{}'", name,
                             f.help, help));
  }
  return f;
}

}  // namespace

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

Counter& MetricsRegistry::counter(std::string_view name, std::string_view help,
                                  const Labels& labels) {
  std::lock_guard lock(mu_);
  Family& f = familyFor(families_, name, help, MetricType::kCounter);
  std::string key = canonicalLabels(name, labels, false);
  f.hidden.erase(key);
  auto& slot = f.counters[std::move(key)];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& MetricsRegistry::gauge(std::string_view name, std::string_view help,
                              const Labels& labels) {
  std::lock_guard lock(mu_);
  Family& f = familyFor(families_, name, help, MetricType::kGauge);
  std::string key = canonicalLabels(name, labels, false);
  f.hidden.erase(key);
  auto& slot = f.gauges[std::move(key)];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& MetricsRegistry::histogram(std::string_view name, std::string_view help,
                                      const Labels& labels, std::vector<double> upper_bounds,
                                      double scale) {
  std::lock_guard lock(mu_);
  Family& f = familyFor(families_, name, help, MetricType::kHistogram);
  std::string key = canonicalLabels(name, labels, true);
  f.hidden.erase(key);
  auto& slot = f.histograms[std::move(key)];
  if (!slot) {
    slot = std::make_unique<Histogram>(std::move(upper_bounds), scale);
  } else {
    // Same series again: it must describe the same buckets, or the caller's bounds would be
    // silently ignored.
    if (normalizeBounds(std::move(upper_bounds)) != slot->upperBounds() ||
        scale != slot->scale()) {
      metricsFatal(fmt::format("histogram '{}' registered twice with different buckets", name));
    }
  }
  return *slot;
}

namespace {

// Whether a canonical label key (`k1="v1",k2="v2"`) includes every pair of `match`. Each pair
// as it appears in a canonical key (`k="escaped v"`), delimited by ',' or an end: escaping
// leaves no bare '"' inside a value, so a fragment cannot match across pairs.
class LabelMatch {
 public:
  explicit LabelMatch(const Labels& match) {
    for (const auto& [k, v] : match) {
      std::string f = k + "=\"";
      appendEscaped(f, v, true);
      f += '"';
      frags_.push_back(std::move(f));
    }
  }
  bool operator()(const std::string& key) const {
    for (const std::string& f : frags_) {
      bool found = false;
      for (size_t pos = key.find(f); pos != std::string::npos && !found;
           pos = key.find(f, pos + 1)) {
        found = (pos == 0 || key[pos - 1] == ',') &&
                (pos + f.size() == key.size() || key[pos + f.size()] == ',');
      }
      if (!found) return false;
    }
    return true;
  }
  // The canonical form of the match itself (the claims' key; the pairs' order does not count).
  std::string key() const {
    std::vector<std::string> sorted = frags_;
    std::sort(sorted.begin(), sorted.end());
    std::string k;
    for (const std::string& f : sorted) {
      if (!k.empty()) k += ',';
      k += f;
    }
    return k;
  }

 private:
  std::vector<std::string> frags_;
};

}  // namespace

size_t MetricsRegistry::hideSeries(const Labels& match) {
  if (match.empty()) return 0;
  const LabelMatch matches(match);
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (auto& [name, fp] : families_) {
    Family& f = *fp;
    auto hide = [&](const std::string& key) {
      if (matches(key) && f.hidden.insert(key).second) ++n;
    };
    for (const auto& [key, c] : f.counters) hide(key);
    for (const auto& [key, g] : f.gauges) hide(key);
    for (const auto& [key, h] : f.histograms) hide(key);
  }
  return n;
}

void MetricsRegistry::claimSeries(const Labels& match) {
  if (match.empty()) return;
  const std::string key = LabelMatch(match).key();
  std::lock_guard lock(mu_);
  ++claims_[key];
}

size_t MetricsRegistry::unclaimSeries(const Labels& match) {
  if (match.empty()) return 0;
  const LabelMatch matches(match);
  std::lock_guard lock(mu_);
  auto it = claims_.find(matches.key());
  if (it == claims_.end()) return 0;  // never claimed: nothing to remove
  if (--it->second > 0) return 0;
  claims_.erase(it);
  size_t n = 0;
  auto drop = [&](auto& series, Family& f) {
    for (auto s = series.begin(); s != series.end();) {
      if (matches(s->first)) {
        f.hidden.erase(s->first);
        s = series.erase(s);
        ++n;
      } else {
        ++s;
      }
    }
  };
  for (auto& [name, fp] : families_) {
    drop(fp->counters, *fp);
    drop(fp->gauges, *fp);
    drop(fp->histograms, *fp);
  }
  return n;
}

size_t MetricsRegistry::seriesCount() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [name, fp] : families_)
    n += fp->counters.size() + fp->gauges.size() + fp->histograms.size();
  return n;
}

SeriesClaim::SeriesClaim(MetricsRegistry* registry, Labels match)
    : registry_(registry), match_(std::move(match)) {
  if (registry_ != nullptr) registry_->claimSeries(match_);
}

void SeriesClaim::reset() {
  if (registry_ != nullptr) registry_->unclaimSeries(match_);
  registry_ = nullptr;
}

void MetricsRegistry::addCollector(Collector c) {
  std::lock_guard lock(mu_);
  collectors_.push_back(std::move(c));
}

std::string MetricsRegistry::renderPrometheus() const {
  std::string out;
  std::vector<Collector> collectors;
  {
    std::lock_guard lock(mu_);
    for (const auto& [name, fp] : families_) {
      const Family& f = *fp;
      out += "# HELP ";
      out += name;
      out += ' ';
      appendEscaped(out, f.help, false);
      out += "\n# TYPE ";
      out += name;
      out += ' ';
      out += typeName(f.type);
      out += '\n';
      switch (f.type) {
        case MetricType::kCounter:
          for (const auto& [labels, c] : f.counters) {
            if (f.hidden.count(labels)) continue;
            appendSeriesName(out, name, "", labels);
            out += ' ';
            appendUint(out, c->value());
            out += '\n';
          }
          break;
        case MetricType::kGauge:
          for (const auto& [labels, g] : f.gauges) {
            if (f.hidden.count(labels)) continue;
            appendSeriesName(out, name, "", labels);
            out += ' ';
            appendInt(out, g->value());
            out += '\n';
          }
          break;
        case MetricType::kHistogram:
          for (const auto& [labels, h] : f.histograms) {
            if (f.hidden.count(labels)) continue;
            const LogLinearHistogram snap = h->snapshot();
            // Each log-linear bucket is attributed to the first exposition bound whose limit
            // (floor(bound * scale)) is >= the bucket's upper value. Counts are exact where
            // bounds fall on bucket edges and conservative (never over-counted) otherwise.
            int b = 0;
            uint64_t cumulative = 0;
            std::string le;
            for (double bound : h->upperBounds()) {
              uint64_t limit = 0;
              if (boundToLimit(bound, h->scale(), limit)) {
                while (b < LogLinearHistogram::kBuckets &&
                       LogLinearHistogram::bucketHigh(b) <= limit) {
                  cumulative += snap.bucketCount(b);
                  ++b;
                }
              }
              le = "le=\"";
              appendDouble(le, bound);
              le += '"';
              appendSeriesName(out, name, "_bucket", labels, le);
              out += ' ';
              appendUint(out, cumulative);
              out += '\n';
            }
            appendSeriesName(out, name, "_bucket", labels, "le=\"+Inf\"");
            out += ' ';
            appendUint(out, snap.count());
            out += '\n';
            appendSeriesName(out, name, "_sum", labels);
            out += ' ';
            appendDouble(out, static_cast<double>(snap.sum()) / h->scale());
            out += '\n';
            appendSeriesName(out, name, "_count", labels);
            out += ' ';
            appendUint(out, snap.count());
            out += '\n';
          }
          break;
      }
    }
    collectors = collectors_;
  }
  // Outside the lock, so a collector may itself look up metrics in this registry.
  for (const auto& c : collectors) c(out);
  return out;
}

MetricsRegistry& MetricsRegistry::global() {
  // Never destroyed: threads still recording during exit must not touch a dead registry.
  static MetricsRegistry* const registry = new MetricsRegistry();
  return *registry;
}

}  // namespace infergate::common
