// The userspace cost of one HTTP/1.1 KServe v2 REST request, common to the socket and afxdp
// modes: Http1Session -> Http1Parser -> KServeRestHandler -> decodeInferRequest (simdjson) ->
// the identity model, inline (max_batch_size 0) -> encodeInferResponse -> serializeResponse ->
// Transport::send. The transport and loop are the unit tests' fakes (tests/mocks), so nothing
// but the request path runs. The request is the one bench/wrk/infer.lua sends (1x16 FP32 JSON).
//
//   ./rest_path_bench                        google-benchmark figures (ns per request)
//   ./rest_path_bench --requests N [--batch K]  N requests in one loop, for callgrind:
//   valgrind --tool=callgrind --toggle-collect='*runRequests*' ./rest_path_bench --requests 10000
//     then Ir / N = instructions per request; callgrind_annotate --inclusive=yes for the shares.
// --batch K: the identity model behind the dynamic batcher (max_batch_size 8,
// max_queue_delay_us 0) instead of inline; K connections each send one request, then the burst
// ends (net::runBurstEnd, as a reactor's loop iteration does) and the batcher dispatches them as
// one batch of K on this thread: the batching path's cost per request next to the inline one.
//
// Both modes check every response (status line and body) so a broken path cannot look fast.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/batching_config.h"
#include "backends/identity_model.h"
#include "backends/model.h"
#include "common/metrics.h"
#include "frontend/http1_session.h"
#include "frontend/kserve_rest.h"
#include "frontend/server_metrics.h"
#include "net/burst.h"
#include "tests/mocks/fake_transport.h"

namespace {

using namespace infergate;

constexpr std::string_view kBody =
    R"({"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[1.0,2.0,3.0,4.0,5.0,6.0,7.0,8.0,9.0,10.0,11.0,12.0,13.0,14.0,15.0,16.0]}]})";
constexpr std::string_view kExpected =
    R"({"model_name":"identity","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":"FP32","shape":[1,16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}]})";

// wrk's request for bench/wrk/infer.lua: the headers it sets and Host.
std::string requestBytes() {
  return "POST /v2/models/identity/infer HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
         "Content-Type: application/json\r\nContent-Length: " +
         std::to_string(kBody.size()) + "\r\n\r\n" + std::string(kBody);
}

// Keep-alive connections to a gateway serving the identity model: one connection and the
// inline model (batch 0), or `batch` connections and the batched model, one burst per round.
struct RestPath {
  explicit RestPath(int batch = 0) : metrics(registry, {"identity"}), batch_(batch) {
    backends::ModelConfig cfg;
    cfg.name = "identity";
    cfg.max_batch_size = batch > 0 ? 8 : 0;
    const std::vector<int64_t> shape =
        batch > 0 ? std::vector<int64_t>{16} : std::vector<int64_t>{1, 16};
    cfg.inputs = {{"INPUT0", backends::DataType::kFp32, shape}};
    cfg.outputs = {{"OUTPUT0", backends::DataType::kFp32, shape}};
    if (batch > 0) {
      net::markBurstThread();
      backends::BatchingConfig bc;
      bc.max_queue_delay_us = 0;
      auto m = backends::createModel(cfg, &bc, &registry, nullptr);
      if (!m.ok()) {
        std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
        std::exit(1);
      }
      models.add(std::move(*m));
    } else {
      models.add(std::make_unique<backends::IdentityModel>(cfg));
    }
    handler = std::make_unique<frontend::KServeRestHandler>(models, frontend::ServerInfo{},
                                                            &metrics);
    const int conns = std::max(batch, 1);
    transports.resize(static_cast<size_t>(conns));
    for (mocks::FakeTransport& t : transports) {
      sessions.push_back(std::make_shared<frontend::Http1Session>(t, *handler, options, &metrics));
    }
    request = requestBytes();
  }
  // One request in and one response out per connection (the transports' buffers are reused).
  void once() {
    for (size_t i = 0; i < sessions.size(); ++i) {
      transports[i].out.clear();
      sessions[i]->onData(request.data(), request.size());
    }
    if (batch_ > 0) net::runBurstEnd();
  }
  size_t requestsPerRound() const { return sessions.size(); }
  // Responses of the last round that are the expected 200.
  size_t lastOk() const {
    size_t ok = 0;
    for (const mocks::FakeTransport& t : transports) {
      const std::string& o = t.out;
      ok += o.size() > kExpected.size() && o.compare(0, 15, "HTTP/1.1 200 OK") == 0 &&
            std::string_view(o).substr(o.size() - kExpected.size()) == kExpected;
    }
    return ok;
  }

  common::MetricsRegistry registry;
  frontend::ServerMetrics metrics;
  backends::ModelRegistry models;
  std::unique_ptr<frontend::KServeRestHandler> handler;
  frontend::Http1SessionOptions options;
  std::deque<mocks::FakeTransport> transports;
  std::vector<std::shared_ptr<frontend::Http1Session>> sessions;
  std::string request;
  const int batch_;
};

// The callgrind region (--toggle-collect='*runRequests*').
__attribute__((noinline)) size_t runRequests(RestPath& p, size_t n) {
  size_t ok = 0;
  for (size_t i = 0; i < n; i += p.requestsPerRound()) {
    p.once();
    ok += p.lastOk();
  }
  return ok;
}

void BM_RestInferIdentity(benchmark::State& state) {
  RestPath p(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    p.once();
    benchmark::DoNotOptimize(p.transports.front().out.data());
  }
  if (p.lastOk() != p.requestsPerRound()) state.SkipWithError("unexpected response");
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(p.requestsPerRound()));
}
// 0: inline; 1: batched, a batch of one per burst; 8: batched, a full batch per burst.
BENCHMARK(BM_RestInferIdentity)->Arg(0)->Arg(1)->Arg(8);

}  // namespace

int main(int argc, char** argv) {
  if ((argc == 3 || argc == 5) && std::strcmp(argv[1], "--requests") == 0) {
    const int batch =
        argc == 5 && std::strcmp(argv[3], "--batch") == 0 ? std::atoi(argv[4]) : 0;
    RestPath p(batch);
    // A whole number of rounds.
    const size_t n = std::strtoull(argv[2], nullptr, 10) / p.requestsPerRound() *
                     p.requestsPerRound();
    for (int i = 0; i < 100; ++i) p.once();  // warm-up (outside the callgrind region)
    const size_t ok = runRequests(p, n);
    if (ok != n) {
      std::fprintf(stderr, "%zu of %zu responses were not the expected 200; last:\n%s\n", n - ok,
                   n, p.transports.front().out.c_str());
      return 1;
    }
    std::printf("%zu requests ok\n", n);
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
