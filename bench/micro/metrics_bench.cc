// Cost of recording a metric on the hot path: Counter::inc and Histogram::record, from 1 and
// 2 threads (each thread on its own shard, so 2 threads measure false-sharing-free scaling).
//
//   ./metrics_bench --benchmark_repetitions=3
//
// With threads:2 and UseRealTime, "Time" is wall time over the iterations of both threads
// (aggregate throughput); "CPU" is the cost of one call on one thread.

#include <benchmark/benchmark.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>

#include "common/metrics.h"

namespace {

using infergate::common::Counter;
using infergate::common::Histogram;
using infergate::common::latencyBucketsSeconds;
using infergate::common::LogLinearHistogram;
using infergate::common::MetricsRegistry;

Counter& benchCounter() {
  static Counter& c = MetricsRegistry::global().counter("bench_ops_total", "Bench ops.");
  return c;
}

Histogram& benchHistogram() {
  static Histogram& h = MetricsRegistry::global().histogram(
      "bench_latency_seconds", "Bench latency.", {}, latencyBucketsSeconds(), 1e9);
  return h;
}

void BM_CounterInc(benchmark::State& state) {
  Counter& c = benchCounter();
  for (auto _ : state) c.inc();
  benchmark::DoNotOptimize(c.value());
}
BENCHMARK(BM_CounterInc)->Threads(1)->Threads(2)->UseRealTime();

// Latency-like values in ns, log-uniform from ~1 µs to ~1 ms, so records spread over ~80
// buckets; precomputed so the loop costs one L1 load on top of record().
const std::array<uint64_t, 4096>& benchValues() {
  static const std::array<uint64_t, 4096> values = [] {
    std::array<uint64_t, 4096> v{};
    std::mt19937_64 rng(1);
    std::uniform_real_distribution<double> exp10(3.0, 6.0);
    for (auto& x : v) x = static_cast<uint64_t>(std::pow(10.0, exp10(rng)));
    return v;
  }();
  return values;
}

void BM_HistogramRecord(benchmark::State& state) {
  Histogram& h = benchHistogram();
  const auto& values = benchValues();
  size_t i = static_cast<size_t>(state.thread_index()) * 1024;
  for (auto _ : state) h.record(values[i++ & (values.size() - 1)]);
}
BENCHMARK(BM_HistogramRecord)->Threads(1)->Threads(2)->UseRealTime();

// The same value stream into a plain single-threaded LogLinearHistogram: the cost of the
// bucket math alone, without atomics.
void BM_LogLinearRecordPlain(benchmark::State& state) {
  LogLinearHistogram h;
  const auto& values = benchValues();
  size_t i = 0;
  for (auto _ : state) {
    h.record(values[i++ & (values.size() - 1)]);
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(h.count());
}
BENCHMARK(BM_LogLinearRecordPlain);

void BM_HistogramSnapshot(benchmark::State& state) {
  Histogram& h = benchHistogram();
  for (auto _ : state) benchmark::DoNotOptimize(h.snapshot());
}
BENCHMARK(BM_HistogramSnapshot);

}  // namespace

BENCHMARK_MAIN();
