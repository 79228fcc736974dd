// A remote model's endpoint set after a live change (Model::setEndpoints, as a reload applies
// it; DNS re-resolution goes through the same Pool set): the model reports the current set
// (backendEndpoints) and keeps no copy of the configured list in its config() that could go
// stale; the rest of its remote settings are still there.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/batched_model.h"
#include "backends/pool.h"

namespace infergate::backends {
namespace {

// Always ready; answers every batch at once with no outputs.
class ReadyClient : public EndpointClient {
 public:
  explicit ReadyClient(std::string address) : address_(std::move(address)) {}
  const std::string& address() const override { return address_; }
  absl::Status probe(bool) override { return absl::OkStatus(); }
  void send(const Batch&, const SendOptions&, SendDone done) override {
    done(std::vector<BatchTensor>{}, false);
  }

 private:
  std::string address_;
};

ModelConfig remoteConfig(std::vector<std::string> endpoints) {
  ModelConfig c;
  c.name = "r";
  c.version = "1";
  c.backend = "triton";
  c.inputs = {{"IN", DataType::kFp32, {1}}};
  c.outputs = {{"OUT", DataType::kFp32, {1}}};
  auto remote = std::make_shared<RemoteBackendConfig>();
  remote->endpoints = std::move(endpoints);
  remote->sequence_id_header = "x-seq";
  remote->health_check_interval_ms = 3600 * 1000;  // probes on request (new endpoints) only
  remote->startup_timeout_ms = 1000;
  c.remote = std::move(remote);
  return c;
}

std::unique_ptr<BatchedModel> remoteModel(const ModelConfig& config) {
  std::vector<std::unique_ptr<EndpointClient>> clients;
  for (const std::string& ep : config.remote->endpoints) {
    clients.push_back(std::make_unique<ReadyClient>(ep));
  }
  auto pool =
      std::make_unique<Pool>(config.name, "triton", *config.remote, std::move(clients), nullptr);
  pool->setClientFactory([](const std::string& address) {
    return std::unique_ptr<EndpointClient>(std::make_unique<ReadyClient>(address));
  });
  absl::StatusOr<std::unique_ptr<BatchedModel>> m =
      BatchedModel::create(config, BatchingConfig{}, std::move(pool), nullptr, nullptr);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

TEST(ModelEndpoints, AfterALiveChangeTheModelShowsTheCurrentSetAndNoStaleList) {
  const ModelConfig config = remoteConfig({"10.0.0.1:8001", "10.0.0.2:8001"});
  std::unique_ptr<BatchedModel> m = remoteModel(config);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->backendEndpoints(), (std::vector<std::string>{"10.0.0.1:8001", "10.0.0.2:8001"}));

  ASSERT_TRUE(m->setEndpoints({"10.0.0.2:8001", "10.0.0.3:8001"}).ok());
  EXPECT_EQ(m->backendEndpoints(), (std::vector<std::string>{"10.0.0.2:8001", "10.0.0.3:8001"}));

  // Nothing in the model's configuration still names the removed endpoint (or any list that
  // the change did not update): readers ask the model for its endpoints.
  ASSERT_NE(m->config().remote, nullptr);
  EXPECT_TRUE(m->config().remote->endpoints.empty())
      << "stale: " << m->config().remote->endpoints.front();
  EXPECT_TRUE(m->config().remote->metrics_urls.empty());
  // The rest of the remote settings are the model's, unchanged.
  EXPECT_EQ(sequenceIdHeader(m->config()), "x-seq");
  EXPECT_EQ(m->config().remote->health_check_interval_ms, 3600u * 1000u);
  // The configuration the model was built from (the server's running copy) is not touched.
  EXPECT_EQ(config.remote->endpoints, (std::vector<std::string>{"10.0.0.1:8001", "10.0.0.2:8001"}));
}

}  // namespace
}  // namespace infergate::backends
