// Test-only server: the HTTP/2 + gRPC session factory on a socket-mode reactor with the same
// identity models the integration harness configures (identity, multi, slow). Lets the gRPC
// integration tests run before app/server.cc wires the "grpc" listener:
//   grpc_e2e_server [port]   -> prints "grpc listening on 127.0.0.1:<port>" and serves until
//                               SIGTERM/SIGINT (then drains for up to 2 s).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "backends/identity_model.h"
#include "common/metrics.h"
#include "dataplane/socket_reactor.h"
#include "frontend/grpc_inference_service.h"
#include "frontend/http2_session.h"

using namespace infergate;

namespace {
volatile std::sig_atomic_t g_stop = 0;
void onSignal(int) { g_stop = 1; }

backends::ModelConfig model(const char* name, const char* version, int mbs,
                            std::vector<std::pair<std::string, backends::TensorSpec>> io,
                            uint64_t fixed_us = 0) {
  backends::ModelConfig c;
  c.name = name;
  c.version = version;
  c.max_batch_size = mbs;
  for (auto& [out, in] : io) {
    c.inputs.push_back(in);
    backends::TensorSpec o = in;
    o.name = out;
    c.outputs.push_back(o);
  }
  c.cost_fixed_us = fixed_us;
  return c;
}
}  // namespace

int main(int argc, char** argv) {
  const uint16_t want_port = argc > 1 ? static_cast<uint16_t>(std::atoi(argv[1])) : 0;
  const uint64_t slow_us = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 50000;
  using DT = backends::DataType;
  backends::ModelRegistry registry;
  std::vector<std::string> names;
  for (const backends::ModelConfig& c :
       {model("identity", "1", 8, {{"OUTPUT0", {"INPUT0", DT::kFp32, {16}}}}),
        model("multi", "2", 0,
              {{"A_OUT", {"A", DT::kInt32, {-1}}},
               {"B_OUT", {"B", DT::kBytes, {2}}},
               {"C_OUT", {"C", DT::kBool, {2, 2}}}}),
        model("slow", "1", 4, {{"OUTPUT0", {"INPUT0", DT::kFp32, {4}}}}, slow_us)}) {
    auto m = backends::createModel(c);
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", std::string(m.status().message()).c_str());
      return 1;
    }
    registry.add(std::move(*m));
    names.push_back(c.name);
  }
  frontend::ServerMetrics metrics(common::MetricsRegistry::global(), names);
  frontend::InferenceGrpcServices services(registry, {"infergate", "test"}, &metrics);
  frontend::Http2SessionOptions options;
  options.max_message_bytes = 1 << 20;

  dataplane::ReactorOptions ro;
  dataplane::ConnectionMetrics connection_metrics(common::MetricsRegistry::global());
  ro.metrics = &connection_metrics;
  dataplane::SocketReactor reactor(ro);
  uint16_t port = want_port;
  auto fd = dataplane::openListener("127.0.0.1", want_port, &port);
  if (!fd.ok()) {
    std::fprintf(stderr, "%s\n", std::string(fd.status().message()).c_str());
    return 1;
  }
  reactor.addListener(*fd, frontend::makeHttp2SessionFactory(services, options, &metrics));
  std::signal(SIGTERM, onSignal);
  std::signal(SIGINT, onSignal);
  reactor.start();
  std::printf("grpc listening on 127.0.0.1:%u\n", port);
  std::fflush(stdout);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  reactor.stop(2'000'000'000ull);
  reactor.join();
  return 0;
}
