// The userspace cost of one HTTP/1.1 KServe v2 REST request, common to the socket and afxdp
// modes: Http1Session -> Http1Parser -> KServeRestHandler -> decodeInferRequest (simdjson) ->
// the identity model, inline (max_batch_size 0) -> encodeInferResponse -> serializeResponse ->
// Transport::send. The transport and loop are the unit tests' fakes (tests/mocks), so nothing
// but the request path runs. The request is the one bench/wrk/infer.lua sends (1x16 FP32 JSON).
//
//   ./rest_path_bench                        google-benchmark figures (ns per request)
//   ./rest_path_bench --requests N           N requests in one loop, for callgrind:
//   valgrind --tool=callgrind --toggle-collect='*runRequests*' ./rest_path_bench --requests 10000
//     then Ir / N = instructions per request; callgrind_annotate --inclusive=yes for the shares.
//
// Both modes check every response (status line and body) so a broken path cannot look fast.

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "backends/identity_model.h"
#include "backends/model.h"
#include "common/metrics.h"
#include "frontend/http1_session.h"
#include "frontend/kserve_rest.h"
#include "frontend/server_metrics.h"
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

// One keep-alive connection to a gateway serving the inline identity model.
struct RestPath {
  RestPath() : metrics(registry, {"identity"}) {
    backends::ModelConfig cfg;
    cfg.name = "identity";
    cfg.max_batch_size = 0;
    cfg.inputs = {{"INPUT0", backends::DataType::kFp32, {1, 16}}};
    cfg.outputs = {{"OUTPUT0", backends::DataType::kFp32, {1, 16}}};
    models.add(std::make_unique<backends::IdentityModel>(cfg));
    handler = std::make_unique<frontend::KServeRestHandler>(models, frontend::ServerInfo{},
                                                            &metrics);
    session = std::make_shared<frontend::Http1Session>(transport, *handler, options, &metrics);
    request = requestBytes();
  }
  // One request in, one response out (the transport's buffer is reused).
  void once() {
    transport.out.clear();
    session->onData(request.data(), request.size());
  }
  bool lastOk() const {
    const std::string& o = transport.out;
    return o.size() > kExpected.size() && o.compare(0, 15, "HTTP/1.1 200 OK") == 0 &&
           std::string_view(o).substr(o.size() - kExpected.size()) == kExpected;
  }

  common::MetricsRegistry registry;
  frontend::ServerMetrics metrics;
  backends::ModelRegistry models;
  std::unique_ptr<frontend::KServeRestHandler> handler;
  frontend::Http1SessionOptions options;
  mocks::FakeTransport transport;
  std::shared_ptr<frontend::Http1Session> session;
  std::string request;
};

// The callgrind region (--toggle-collect='*runRequests*').
__attribute__((noinline)) size_t runRequests(RestPath& p, size_t n) {
  size_t ok = 0;
  for (size_t i = 0; i < n; ++i) {
    p.once();
    ok += p.lastOk();
  }
  return ok;
}

void BM_RestInferIdentity(benchmark::State& state) {
  RestPath p;
  for (auto _ : state) {
    p.once();
    benchmark::DoNotOptimize(p.transport.out.data());
  }
  if (!p.lastOk()) state.SkipWithError("unexpected response");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RestInferIdentity);

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--requests") == 0) {
    const size_t n = std::strtoull(argv[2], nullptr, 10);
    RestPath p;
    for (int i = 0; i < 100; ++i) p.once();  // warm-up (outside the callgrind region)
    const size_t ok = runRequests(p, n);
    if (ok != n) {
      std::fprintf(stderr, "%zu of %zu responses were not the expected 200; last:\n%s\n", n - ok,
                   n, p.transport.out.c_str());
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
