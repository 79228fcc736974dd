#include "net/burst.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>

namespace infergate::net {
namespace {

class CountingTask : public BurstTask {
 public:
  void runAtBurstEnd() override {
    ++runs;
    if (then) then();
  }
  int runs = 0;
  std::function<void()> then;
};

TEST(Burst, RefusedOffABurstThread) {
  std::thread t([] {
    auto task = std::make_shared<CountingTask>();
    EXPECT_FALSE(onBurstThread());
    EXPECT_FALSE(deferToBurstEnd(task));
    runBurstEnd();
    EXPECT_EQ(task->runs, 0);
  });
  t.join();
}

TEST(Burst, RunsOnceAtBurstEndAndNotTwiceWhenDeferredTwice) {
  std::thread t([] {
    markBurstThread();
    EXPECT_TRUE(onBurstThread());
    auto a = std::make_shared<CountingTask>();
    auto b = std::make_shared<CountingTask>();
    EXPECT_TRUE(deferToBurstEnd(a));
    EXPECT_TRUE(deferToBurstEnd(b));
    EXPECT_TRUE(deferToBurstEnd(a));
    EXPECT_EQ(a->runs, 0);  // nothing runs before the burst ends
    runBurstEnd();
    EXPECT_EQ(a->runs, 1);
    EXPECT_EQ(b->runs, 1);
    runBurstEnd();  // the queue is empty again
    EXPECT_EQ(a->runs, 1);
  });
  t.join();
}

TEST(Burst, TasksQueuedByTasksRunInTheSameBurstEnd) {
  std::thread t([] {
    markBurstThread();
    auto a = std::make_shared<CountingTask>();
    // Re-queues itself twice (as a model whose answers make sessions enqueue pipelined work).
    a->then = [&] {
      if (a->runs < 3) deferToBurstEnd(a);
    };
    deferToBurstEnd(a);
    runBurstEnd();
    EXPECT_EQ(a->runs, 3);
    a->then = nullptr;  // breaks the self-reference cycle
  });
  t.join();
}

TEST(Burst, TheQueueKeepsTheTaskAlive) {
  std::thread t([] {
    markBurstThread();
    std::weak_ptr<CountingTask> weak;
    {
      auto a = std::make_shared<CountingTask>();
      weak = a;
      deferToBurstEnd(a);
    }
    ASSERT_FALSE(weak.expired());
    runBurstEnd();
    EXPECT_TRUE(weak.expired());
  });
  t.join();
}

}  // namespace
}  // namespace infergate::net
