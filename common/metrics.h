#pragma once
// Metrics with cheap hot-path recording and Prometheus text exposition.
//
// Counters, gauges and histograms are registered at start-up (registration takes a mutex and
// returns a reference that stays valid for the registry's lifetime); recording is lock-free:
// each metric is sharded by thread (cache-line padded relaxed atomics) and shards are summed
// when /metrics is scraped. Histograms use log-linear buckets (HDR-style: each power of two
// split into a fixed number of linear sub-buckets), so recording is a few instructions and
// relative error is bounded; exposition reports a fixed set of cumulative `le` buckets.

#include <array>
#include <functional>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace infergate::common {

inline constexpr int kMetricShards = 16;

// Index of the calling thread's shard (assigned round-robin on first use).
int threadShard();

struct alignas(64) PaddedCounter {
  std::atomic<uint64_t> v{0};
};

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void inc(uint64_t n = 1) { shards_[threadShard()].v.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const;

 private:
  std::array<PaddedCounter, kMetricShards> shards_{};
};

class Gauge {
 public:
  void add(int64_t n) { v_.fetch_add(n, std::memory_order_relaxed); }
  void sub(int64_t n) { v_.fetch_sub(n, std::memory_order_relaxed); }
  void set(int64_t n) { v_.store(n, std::memory_order_relaxed); }
  int64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

// Log-linear histogram of non-negative integer values (e.g. microseconds or nanoseconds).
// Values below kSubBuckets are exact; above, relative bucket width is at most 1/kSubBuckets.
class LogLinearHistogram {
 public:
  static constexpr int kSubBucketBits = 3;                 // 8 linear sub-buckets per octave
  static constexpr int kSubBuckets = 1 << kSubBucketBits;
  static constexpr int kBuckets = (64 - kSubBucketBits + 1) * kSubBuckets;

  static int bucketOf(uint64_t v);
  static uint64_t bucketLow(int b);   // smallest value in bucket b
  static uint64_t bucketHigh(int b);  // largest value in bucket b

  void record(uint64_t v, uint64_t count = 1);
  void merge(const LogLinearHistogram& other);
  void clear();
  uint64_t count() const;
  uint64_t sum() const;
  uint64_t max() const;
  // Value at quantile q in [0,1]: the upper bound of the bucket holding it (clamped to max()).
  uint64_t quantile(double q) const;
  uint64_t bucketCount(int b) const { return buckets_[b]; }

 private:
  friend class Histogram;  // snapshot() fills buckets, sum and max from its shards directly
  std::array<uint64_t, kBuckets> buckets_{};
  uint64_t count_ = 0, sum_ = 0, max_ = 0;
};

// A Prometheus histogram recorded lock-free from many threads: per-shard log-linear buckets,
// merged on scrape into the exposition bounds given at registration.
class Histogram {
 public:
  // `upper_bounds` are in exposition units; they are sorted and deduplicated, and infinite or
  // NaN entries dropped (`+Inf` is always exposed). `scale` must be positive and finite
  // (release assert). An observation is counted under the first bound whose floor(bound *
  // scale) is >= the upper value of its log-linear bucket: exact when bounds fall on bucket
  // edges, conservative (counted under a later bound) otherwise.
  explicit Histogram(std::vector<double> upper_bounds, double scale);
  // Records one observation, in the unit of recording (e.g. microseconds); exposition divides
  // by `scale` (e.g. 1e6 to expose seconds).
  void record(uint64_t v);
  LogLinearHistogram snapshot() const;
  const std::vector<double>& upperBounds() const { return bounds_; }
  double scale() const { return scale_; }

 private:
  struct alignas(64) Shard {
    std::array<std::atomic<uint64_t>, LogLinearHistogram::kBuckets> buckets{};
    std::atomic<uint64_t> sum{0};
    std::atomic<uint64_t> max{0};
  };
  std::vector<double> bounds_;
  double scale_;
  std::unique_ptr<Shard[]> shards_;
};

// Default exposition bounds for latencies in seconds: 1-2-5 steps from 10 µs to 10 s.
std::vector<double> latencyBucketsSeconds();

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();  // out of line: Family is incomplete here
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // The same (name, labels) registered twice returns the same object. `help` and the type
  // must agree for one name (release assert otherwise).
  Counter& counter(std::string_view name, std::string_view help, const Labels& labels = {});
  Gauge& gauge(std::string_view name, std::string_view help, const Labels& labels = {});
  Histogram& histogram(std::string_view name, std::string_view help, const Labels& labels,
                       std::vector<double> upper_bounds, double scale);

  // Hides every series (of any family) whose labels include all of `match` from the
  // exposition: what a tenant removed by a reload leaves behind. The objects stay (references
  // handed out stay valid, and may still be written); registering the same (name, labels)
  // again shows the series again, with its value. Returns the number of series hidden now.
  size_t hideSeries(const Labels& match);

  // Series owned by objects that come and go (a backend endpoint's {model, endpoint}): every
  // object that registers series whose labels include `match` and keeps references to them
  // claims `match` first and drops its claim (SeriesClaim) only after its references are gone.
  // When the last claim on `match` is dropped, every series whose labels include it is removed
  // from the registry, objects destroyed: endpoints that come and go (DNS discovery, new pod
  // addresses at each rollout) leave nothing behind. Registering the same series later starts
  // it afresh (a counter reset, which Prometheus handles). Returns the series removed.
  void claimSeries(const Labels& match);
  size_t unclaimSeries(const Labels& match);

  // Series held (shown or hidden), over every family (tests: bounded growth).
  size_t seriesCount() const;

  // A value computed at scrape time (e.g. XDP per-CPU counters read from a BPF map).
  using Collector = std::function<void(std::string& out)>;  // appends exposition lines
  void addCollector(Collector c);

  // Prometheus text exposition format 0.0.4.
  std::string renderPrometheus() const;

  // Process-wide registry.
  static MetricsRegistry& global();

 private:
  struct Family;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Family>, std::less<>> families_;
  std::vector<Collector> collectors_;
  std::map<std::string, size_t> claims_;  // canonical `match` -> claims held (claimSeries)
};

// RAII claim on a label set (MetricsRegistry::claimSeries): declare it before the members
// holding the series' references, so it is dropped after them; the registry must outlive it
// (the global one is never destroyed). Movable.
class SeriesClaim {
 public:
  SeriesClaim() = default;
  SeriesClaim(MetricsRegistry* registry, Labels match);  // registry nullptr: no claim
  ~SeriesClaim() { reset(); }
  SeriesClaim(SeriesClaim&& o) noexcept
      : registry_(std::exchange(o.registry_, nullptr)), match_(std::move(o.match_)) {}
  SeriesClaim& operator=(SeriesClaim&& o) noexcept {
    if (this != &o) {
      reset();
      registry_ = std::exchange(o.registry_, nullptr);
      match_ = std::move(o.match_);
    }
    return *this;
  }
  SeriesClaim(const SeriesClaim&) = delete;
  SeriesClaim& operator=(const SeriesClaim&) = delete;
  void reset();

 private:
  MetricsRegistry* registry_ = nullptr;
  Labels match_;
};

}  // namespace infergate::common
