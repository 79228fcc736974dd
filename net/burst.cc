#include "net/burst.h"

#include <utility>
#include <vector>

namespace infergate::net {
namespace {

struct BurstQueue {
  bool marked = false;
  std::vector<std::shared_ptr<BurstTask>> queued;
  std::vector<std::shared_ptr<BurstTask>> running;
};

thread_local BurstQueue t_burst;

}  // namespace

void markBurstThread() { t_burst.marked = true; }

bool onBurstThread() { return t_burst.marked; }

bool deferToBurstEnd(const std::shared_ptr<BurstTask>& task) {
  BurstQueue& q = t_burst;
  if (!q.marked) return false;
  // A handful of models at most per burst: a linear scan beats a set.
  for (const std::shared_ptr<BurstTask>& t : q.queued) {
    if (t == task) return true;
  }
  q.queued.push_back(task);
  return true;
}

void runBurstEnd() {
  BurstQueue& q = t_burst;
  while (!q.queued.empty()) {
    q.running.swap(q.queued);
    for (std::shared_ptr<BurstTask>& t : q.running) t->runAtBurstEnd();
    q.running.clear();
  }
}

}  // namespace infergate::net
