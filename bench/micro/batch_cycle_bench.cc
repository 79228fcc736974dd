// The batcher's own efficiency with a GPU-like cost model, without the network: one "reactor"
// thread (a burst thread, net/burst.h) keeps C requests outstanding against a batched identity
// model (fixed_us + per_item_us x n per batch, max_queue_delay_us), resubmitting as answers
// arrive (answers come from the device's thread, through a counter and an eventfd, as they
// would through a reactor's post queue). Prints req/s, the mean batch n, the device's ideal
// n / (fixed + per_item x n) and the ratio: what is left of the gap once parsing and sockets
// are out of the picture (docs/BENCHMARKS.md, issue 15).
//
// Usage: batch_cycle_bench [max_batch 8] [seconds 3] [outstanding 128] [fixed_us 200]
//                          [per_item_us 2] [delay_us 100]
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "backends/batched_model.h"
#include "backends/identity_model.h"
#include "common/metrics.h"
#include "net/burst.h"

using namespace infergate;

namespace {

double sample(const std::string& text, const std::string& series) {
  const size_t p = text.find("\n" + series + " ");
  return p == std::string::npos ? -1 : std::stod(text.substr(p + series.size() + 2));
}

}  // namespace

int main(int argc, char** argv) {
  auto arg = [&](int i, long def) { return argc > i ? std::atol(argv[i]) : def; };
  const int max_batch = static_cast<int>(arg(1, 8));
  const double seconds = static_cast<double>(arg(2, 3));
  const long outstanding = arg(3, 128);
  backends::ModelConfig m;
  m.name = "cost";
  m.max_batch_size = max_batch;
  m.inputs = {{"IN", backends::DataType::kFp32, {16}}};
  m.outputs = {{"OUT", backends::DataType::kFp32, {16}}};
  m.cost_fixed_us = static_cast<uint64_t>(arg(4, 200));
  m.cost_per_item_us = static_cast<uint64_t>(arg(5, 2));
  backends::BatchingConfig cfg;
  cfg.enabled = true;
  cfg.max_queue_delay_us = static_cast<uint64_t>(arg(6, 100));
  common::MetricsRegistry registry;
  auto model = backends::createModel(m, &cfg, &registry, nullptr);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  const int efd = eventfd(0, EFD_CLOEXEC);
  std::atomic<long> answered{0}, total{0};
  auto submit = [&] {
    backends::InferRequest r;
    r.model_name = "cost";
    r.inputs.push_back(backends::Tensor{"IN", backends::DataType::kFp32, {1, 16},
                                        std::vector<uint8_t>(64, 1)});
    (*model)->infer(std::move(r), [&](absl::StatusOr<backends::InferResponse> res) {
      if (!res.ok()) return;  // UNAVAILABLE for what is still queued when the model goes
      total.fetch_add(1, std::memory_order_relaxed);
      if (answered.fetch_add(1) == 0) {
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = write(efd, &one, sizeof one);
      }
    });
  };
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  std::thread reactor([&] {
    net::markBurstThread();
    for (long i = 0; i < outstanding; ++i) submit();
    net::runBurstEnd();
    while (std::chrono::steady_clock::now() < end) {
      uint64_t v;
      [[maybe_unused]] ssize_t n = read(efd, &v, sizeof v);
      const long k = answered.exchange(0);
      for (long i = 0; i < k; ++i) submit();
      net::runBurstEnd();
    }
  });
  reactor.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const long done = total.load();  // read before the model goes
  const std::string text = "\n" + registry.renderPrometheus();
  const double batches = sample(text, "infergate_batcher_batches_total{model=\"cost\"}");
  const double rows = sample(text, "infergate_batcher_batch_size_sum{model=\"cost\"}");
  const double n = rows / batches;
  const double device_us = static_cast<double>(m.cost_fixed_us + m.cost_per_item_us * n);
  const double ideal = n / device_us * 1e6;
  const double rps = static_cast<double>(done) / elapsed;
  std::printf("max_batch %d outstanding %ld: %.0f req/s, mean batch %.2f, cycle %.1f us for %.1f us "
              "of device time, ideal %.0f req/s, ratio %.3f\n",
              max_batch, outstanding, rps, n, elapsed * 1e6 / batches, device_us, ideal,
              rps / ideal);
  close(efd);
  (*model).reset();
  return 0;
}
