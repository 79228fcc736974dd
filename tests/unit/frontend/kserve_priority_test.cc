// Priority sources of an infer request (docs/BATCHING.md "Priority"): the KServe `priority`
// parameter, else the x-infergate-priority header, else the XDP tag's class, else the default.

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/batched_model.h"
#include "backends/batcher.h"
#include "backends/model.h"
#include "frontend/client_priority.h"
#include "frontend/http.h"
#include "frontend/http1_session.h"
#include "frontend/kserve_rest.h"
#include "tests/mocks/fake_transport.h"
#include "tests/unit/frontend/recording_model.h"

namespace infergate::frontend {
namespace {

TEST(ResolvePriority, OrderOfSources) {
  const std::string h1 = "1", h2 = "2", h0 = "0";
  // 1. the KServe parameter wins over everything.
  EXPECT_EQ(*resolvePriority(2, &h1, 0, 2, true), 2);
  // 2. the header, when the parameter is absent (0).
  EXPECT_EQ(*resolvePriority(0, &h1, 3, 2, true), 1);
  EXPECT_EQ(*resolvePriority(0, &h2, 0, 2, true), 2);
  // A header of 0 means "default": the tag decides.
  EXPECT_EQ(*resolvePriority(0, &h0, 3, 2, true), 2);
  // 3. the tag's class, mapped to the model's levels.
  EXPECT_EQ(*resolvePriority(0, nullptr, 0, 2, true), 1);
  EXPECT_EQ(*resolvePriority(0, nullptr, 1, 2, true), 1);
  EXPECT_EQ(*resolvePriority(0, nullptr, 2, 2, true), 2);
  EXPECT_EQ(*resolvePriority(0, nullptr, 3, 4, true), 4);
  // ... ignored for a model without levels.
  EXPECT_EQ(*resolvePriority(0, nullptr, 3, 0, true), 0);
  // 4. the default.
  EXPECT_EQ(*resolvePriority(0, nullptr, std::nullopt, 2, true), 0);
}

// Issue 13, item 5: from a source that may not choose its priority, the parameter and the
// header are ignored (not refused: the request is served at the class the XDP rules gave it).
TEST(ResolvePriority, UntrustedClientGetsTheTagClassOrDefault) {
  const std::string h1 = "1", bad = "high";
  EXPECT_EQ(*resolvePriority(2, &h1, 3, 4, false), 4);           // the tag's class 3 -> level 4
  EXPECT_EQ(*resolvePriority(2, &h1, std::nullopt, 4, false), 0);  // the model's default
  EXPECT_EQ(*resolvePriority(0, &bad, std::nullopt, 4, false), 0);  // not even parsed
}

TEST(ClientPriorityPolicy, TrustedSourcesAllAndOff) {
  ClientPriorityPolicy p;
  p.trusted = *common::CidrSet::parse({"10.0.0.0/8", "::1"});
  const common::IpBytes inside = common::parseCidr("10.1.2.3")->addr;
  const common::IpBytes outside = common::parseCidr("192.0.2.1")->addr;
  EXPECT_TRUE(p.trusts(inside));
  EXPECT_FALSE(p.trusts(outside));
  EXPECT_FALSE(p.trusts(std::nullopt));  // a transport without addresses
  p.mode = ClientPriorityPolicy::Mode::kAll;
  EXPECT_TRUE(p.trusts(outside));
  EXPECT_TRUE(p.trusts(std::nullopt));
  p.mode = ClientPriorityPolicy::Mode::kOff;
  EXPECT_FALSE(p.trusts(inside));
  EXPECT_EQ(parseClientPriorityMode("trusted"), ClientPriorityPolicy::Mode::kTrusted);
  EXPECT_FALSE(parseClientPriorityMode("yes"));
}

TEST(ResolvePriority, BadHeaderIsInvalidArgument) {
  for (const std::string bad : {"", "high", "-1", "1.5", " 1", "99999999999999999999999"}) {
    absl::StatusOr<int64_t> p = resolvePriority(0, &bad, std::nullopt, 2, true);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(p.status().message().find("x-infergate-priority"), absl::string_view::npos);
  }
  // Not looked at when the parameter is set.
  const std::string bad = "high";
  EXPECT_EQ(*resolvePriority(1, &bad, std::nullopt, 2, true), 1);
}

class KServePriorityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = testing::recordingModel(&levels_, 4);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = m->get();
    EXPECT_EQ(model_->priorityLevels(), 4u);
    registry_.add(std::move(*m));
    handler_ = std::make_unique<KServeRestHandler>(registry_, ServerInfo{}, nullptr);
  }

  // Sends one infer request and returns its HTTP status (the model answers synchronously
  // enough: wait for the callback).
  int send(const std::string& params, std::optional<std::string> header,
           std::optional<int> tag_class) {
    HttpRequest r;
    r.method = "POST";
    r.target = "/v2/models/m/infer";
    r.body = R"({"inputs":[{"name":"IN","datatype":"INT32","shape":[1,1],"data":[7]}])" +
             params + "}";
    if (header) r.headers.push_back({"x-infergate-priority", *header});
    if (tag_class) {
      r.tag = net::IngressTag{};
      r.tag->priority_class = *tag_class;
    }
    std::promise<int> status;
    std::future<int> f = status.get_future();
    handler_->handle(std::move(r), [&](HttpResponse resp) { status.set_value(resp.status); });
    return f.get();
  }

  std::vector<uint32_t> levels_;
  backends::ModelRegistry registry_;
  backends::Model* model_ = nullptr;
  std::unique_ptr<KServeRestHandler> handler_;
};

TEST_F(KServePriorityTest, LevelFollowsTheDocumentedOrder) {
  EXPECT_EQ(send(R"(,"parameters":{"priority":2})", "1", 0), 500);  // parameter
  EXPECT_EQ(send("", "3", 0), 500);                                  // header over tag
  EXPECT_EQ(send("", std::nullopt, 1), 500);                         // tag class 1 -> level 2
  EXPECT_EQ(send("", std::nullopt, 3), 500);                         // tag class 3 -> level 4
  EXPECT_EQ(send("", std::nullopt, std::nullopt), 500);              // default: level 4
  EXPECT_EQ(send("", "0", 0), 500);                                  // header 0: tag decides
  EXPECT_EQ(levels_, (std::vector<uint32_t>{2, 3, 2, 4, 4, 1}));
}

// Issue 13, item 5, through a real HTTP/1 session: the header from a peer outside the trusted
// sources is ignored (the model's default level 4); from inside it counts (level 1).
TEST_F(KServePriorityTest, HeaderCountsOnlyFromTrustedSources) {
  ClientPriorityPolicy policy;
  policy.trusted = *common::CidrSet::parse({"10.0.0.0/8"});
  Http1SessionOptions options;
  options.client_priority = &policy;
  const std::string body = R"({"inputs":[{"name":"IN","datatype":"INT32","shape":[1,1],"data":[7]}]})";
  const std::string req = "POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nx-infergate-priority: 1\r\n"
                          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  for (const char* peer : {"192.0.2.1", "10.9.8.7"}) {
    mocks::FakeTransport transport;
    transport.peer = common::parseCidr(peer)->addr;
    auto session = std::make_shared<Http1Session>(transport, *handler_, options, nullptr);
    session->onData(req.data(), req.size());
    for (int i = 0; i < 200 && transport.out.empty(); ++i) {
      transport.loop_.runPosted();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      transport.loop_.runPosted();
    }
    ASSERT_FALSE(transport.out.empty()) << peer;
    session->onClosed();
  }
  EXPECT_EQ(levels_, (std::vector<uint32_t>{4, 1}));
}

TEST_F(KServePriorityTest, BadHeaderIs400AndNotQueued) {
  EXPECT_EQ(send("", "urgent", std::nullopt), 400);
  EXPECT_TRUE(levels_.empty());
}

}  // namespace
}  // namespace infergate::frontend
