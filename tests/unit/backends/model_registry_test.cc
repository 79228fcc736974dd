// ModelRegistry reclaims the snapshots it replaces: any number of reloads leaves one snapshot
// list allocated; a snapshot a reader is still walking is freed only after the reader leaves;
// removed models stay valid (retired, once) for whoever found them; lock-free readers running
// through thousands of publications always see a whole list.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/model.h"

namespace infergate::backends {
namespace {

// A model that only has a name; ready() can be made to wait (a reader held inside allReady()).
class NamedModel : public Model {
 public:
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool closed = false;  // ready() waits while closed
    int inside = 0;       // ready() calls waiting now
  };
  explicit NamedModel(std::string name, Gate* gate = nullptr, std::atomic<int>* retired = nullptr)
      : gate_(gate), retired_(retired) {
    config_.name = std::move(name);
  }
  const ModelConfig& config() const override { return config_; }
  bool ready() const override {
    if (gate_ == nullptr) return true;
    std::unique_lock<std::mutex> lock(gate_->mu);
    ++gate_->inside;
    gate_->cv.notify_all();
    gate_->cv.wait(lock, [&] { return !gate_->closed; });
    --gate_->inside;
    return true;
  }
  void infer(InferRequest, InferCallback done) override { done(absl::UnimplementedError("")); }
  void retire() override {
    if (retired_ != nullptr) retired_->fetch_add(1);
  }

 private:
  ModelConfig config_;
  Gate* gate_;
  std::atomic<int>* retired_;
};

std::vector<std::unique_ptr<Model>> one(std::unique_ptr<Model> m) {
  std::vector<std::unique_ptr<Model>> v;
  v.push_back(std::move(m));
  return v;
}

// Add-only reloads used to keep every snapshot ever published (one list per reload).
TEST(ModelRegistry, AddOnlyReloadsKeepOneSnapshotAllocated) {
  ModelRegistry reg;
  EXPECT_EQ(reg.snapshotCount(), 1u);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_TRUE(reg.update({}, one(std::make_unique<NamedModel>("m" + std::to_string(i)))).ok());
    ASSERT_EQ(reg.snapshotCount(), 1u) << "after reload " << i;
  }
  EXPECT_EQ(reg.models().size(), 2000u);
  ASSERT_NE(reg.find("m1999"), nullptr);
  EXPECT_EQ(reg.find("m0")->config().name, "m0");
  EXPECT_EQ(reg.retiredCount(), 0u);
}

// A removed model stays valid for whoever found it, is retired once, and is no longer found.
TEST(ModelRegistry, ARemovedModelStaysValidAndIsRetiredOnce) {
  ModelRegistry reg;
  std::atomic<int> retired{0};
  reg.add(std::make_unique<NamedModel>("a", nullptr, &retired));
  reg.add(std::make_unique<NamedModel>("b"));
  Model* a = reg.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(reg.remove("a"));
  EXPECT_EQ(retired.load(), 1);
  EXPECT_EQ(reg.find("a"), nullptr);
  EXPECT_EQ(a->config().name, "a");  // alive (ASan: no use after free)
  for (int i = 0; i < 10; ++i) reg.add(std::make_unique<NamedModel>("x" + std::to_string(i)));
  EXPECT_EQ(a->config().name, "a");
  EXPECT_EQ(retired.load(), 1);
  EXPECT_EQ(reg.retiredCount(), 1u);
  EXPECT_EQ(reg.snapshotCount(), 1u);
}

// A reader inside its read-side section (allReady() waiting in a model's ready()) holds the
// snapshot it loaded: a reload publishes at once (new readers find the new model) but frees
// the old list only after that reader has left, and returns then.
TEST(ModelRegistry, ASnapshotIsFreedOnlyAfterItsReaderLeaves) {
  ModelRegistry reg;
  NamedModel::Gate gate;
  gate.closed = true;
  reg.add(std::make_unique<NamedModel>("slow", &gate));
  reg.add(std::make_unique<NamedModel>("after"));  // walked after "slow" returns

  std::atomic<bool> ready_result{false};
  std::thread reader([&] { ready_result = reg.allReady(); });
  {
    std::unique_lock<std::mutex> lock(gate.mu);
    ASSERT_TRUE(gate.cv.wait_for(lock, std::chrono::seconds(5), [&] { return gate.inside == 1; }));
  }
  std::atomic<bool> updated{false};
  std::thread writer([&] {
    EXPECT_TRUE(reg.update({{"after", ""}}, one(std::make_unique<NamedModel>("new"))).ok());
    updated = true;
  });
  // Published: a reader that starts now sees the new list (another thread: a fresh section).
  for (int i = 0; i < 5000 && reg.find("new") == nullptr; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_NE(reg.find("new"), nullptr);
  EXPECT_EQ(reg.find("after"), nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(updated.load());        // waiting for the reader
  EXPECT_EQ(reg.snapshotCount(), 2u);  // the old list is still there for it
  {
    std::lock_guard<std::mutex> lock(gate.mu);
    gate.closed = false;
  }
  gate.cv.notify_all();
  reader.join();  // walked the rest of the old list ("after", removed meanwhile but alive)
  writer.join();
  EXPECT_TRUE(ready_result.load());
  EXPECT_TRUE(updated.load());
  EXPECT_EQ(reg.snapshotCount(), 1u);
}

// Lock-free readers on several threads while reloads add, replace and remove models: every
// lookup sees a whole list (the stable model always there, every model found by its name).
TEST(ModelRegistry, ReadersSeeWholeSnapshotsThroughManyReloads) {
  ModelRegistry reg;
  reg.add(std::make_unique<NamedModel>("stable"));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> lookups{0}, bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        Model* s = reg.find("stable");
        if (s == nullptr || s->config().name != "stable") bad.fetch_add(1);
        Model* c = reg.find("churn");
        if (c != nullptr && c->config().name != "churn") bad.fetch_add(1);
        if (!reg.allReady()) bad.fetch_add(1);
        for (const std::shared_ptr<Model>& m : reg.models()) {
          if (m == nullptr || m->config().name.empty()) bad.fetch_add(1);
        }
        lookups.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  // 100 replacements of "churn" (99 retired, under kMaxRetired) and 500 additions (fewer
  // would do: this many keep it under 10 s under ASan on 2 cores, CI's budget).
  for (int i = 0; i < 600; ++i) {
    if (i % 6 == 0) {
      ASSERT_TRUE(reg.update({{"churn", ""}}, one(std::make_unique<NamedModel>("churn"))).ok());
    } else {
      ASSERT_TRUE(
          reg.update({}, one(std::make_unique<NamedModel>("add" + std::to_string(i)))).ok());
    }
  }
  // Let the readers run through the final state too.
  const uint64_t seen = lookups.load();
  for (int i = 0; i < 5000 && lookups.load() < seen + 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop = true;
  for (std::thread& r : readers) r.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(lookups.load(), 0u);
  EXPECT_EQ(reg.snapshotCount(), 1u);
  EXPECT_EQ(reg.retiredCount(), 99u);  // the first replacement had nothing to remove
  EXPECT_EQ(reg.models().size(), 1u + 1u + 500u);
}

}  // namespace
}  // namespace infergate::backends
