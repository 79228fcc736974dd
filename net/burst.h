#pragma once
// Work deferred to the end of a reactor's loop iteration (a "burst"): the reactor reads what
// arrived on every connection, then runs the deferred tasks once. A batching model uses it to
// dispatch what its sessions enqueued during the burst as one batch, on the reactor's own
// thread, with no hand-off to a dispatcher thread and no wake-up (docs/BATCHING.md "Who
// dispatches").
//
// A thread becomes a burst thread with markBurstThread() (reactors do, in enterLoopThread);
// on it, deferToBurstEnd() queues a task and runBurstEnd() runs the queue. On any other
// thread deferToBurstEnd() refuses, and the caller does the work another way.

#include <memory>

namespace infergate::net {

class BurstTask {
 public:
  virtual ~BurstTask() = default;
  // Runs on the burst thread at the end of the burst in which it was deferred.
  virtual void runAtBurstEnd() = 0;
};

// Marks the calling thread as a reactor that calls runBurstEnd() after every loop iteration
// (and once more before it exits).
void markBurstThread();
bool onBurstThread();

// On a burst thread: queues `task` for the end of the current burst and returns true; a task
// already queued is not queued twice. Elsewhere: false (nothing queued). The queue holds a
// reference, so the task object outlives the burst; a task whose owner is gone must do nothing.
bool deferToBurstEnd(const std::shared_ptr<BurstTask>& task);

// Runs the queued tasks, and those they queue in turn, until none is left (tasks that
// answer requests may make sessions read pipelined requests and queue again). Burst thread.
void runBurstEnd();

}  // namespace infergate::net
