#pragma once
// The queues of one model's batcher: priority levels 1..N (1 the highest), each with its
// Triton queue policy (max_queue_size, default timeout and override, REJECT or DELAY on
// expiry), the model-wide limit max_total_queue_size with shedding of lower levels, the tickets
// of queued and in-flight requests, and the overload level derived from them. Rules in
// docs/BATCHING.md "Priority", "Deadlines" and "Queue limits and overload".
//
// Threading: none of its own; the batcher's mutex guards every call. Requests it drops are
// appended to an Answer list the batcher delivers once the lock is released.

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/batch.h"
#include "backends/batch_metrics.h"
#include "backends/batching_config.h"
#include "common/priority.h"

namespace infergate::backends {

// infergate's priority classes (the XDP program's tag): 0 (high), 1 (normal), 2 (low),
// 3 (background). See docs/BATCHING.md "Priority" for the mapping to Triton levels.
inline constexpr int kPriorityClasses = common::kPriorityClasses;
// The most classes the overload level sheds at the NIC: class 0 is never shed there.
inline constexpr int kMaxShedClasses = kPriorityClasses - 1;

// levelOfPriorityClass (a class's Triton level) is in backends/model.h.
// The overload level (how many of the lowest classes the NIC sheds) that stops every class
// whose Triton level is `level` or lower priority: the count of classes c with
// levelOfPriorityClass(c, levels) >= level, clamped to 1..kMaxShedClasses.
int shedClassesForLevel(uint32_t level, uint32_t levels);

// A request's answer, delivered (by flushAnswers) once the batcher's lock is released.
struct Answer {
  InferCallback done;
  absl::StatusOr<InferResponse> result;
};
void flushAnswers(std::vector<Answer>& answers);

class PriorityQueues {
 public:
  // `config` (validated: levels >= 1, default level and policy levels in range) and `metrics`
  // must outlive the queues.
  PriorityQueues(const BatchingConfig& config, BatchMetrics& metrics);

  // The level (1..levels) of a KServe priority: 0, negative or > levels -> default level
  // (Triton's rule).
  uint32_t levelOf(int64_t priority) const;
  // Absolute deadline (0: none) of a request of `level` enqueued at `now` asking for
  // `timeout_us` (0: none): the level's default timeout, shortened by the request's own when
  // the policy allows it; saturating.
  uint64_t deadline(uint32_t level, uint64_t timeout_us, uint64_t now) const;

  // Queues `r` (level, deadline set) at the back of its level and returns its ticket (> 0), or
  // refuses it (answered into `answers`) and returns 0: its level is at max_queue_size, or the
  // model at max_total_queue_size with no lower level to shed. Shedding answers the newest
  // request of the lowest non-empty lower level. `refused_level` receives the level of a
  // request refused or shed for overload (unchanged when none).
  uint64_t push(std::unique_ptr<QueuedRequest> r, std::vector<Answer>& answers,
                uint32_t& refused_level);
  // Expires the requests whose deadline is due at `now`: REJECT answers them, DELAY moves them
  // behind their level's unexpired requests.
  void expire(uint64_t now, std::vector<Answer>& answers);
  // The earliest deadline of a queued request (UINT64_MAX: none).
  uint64_t nextDeadline() const { return next_deadline_ns_; }

  enum class Cancelled : uint8_t { kUnknown, kInFlight, kAnswered };
  // Batcher::cancel: a queued request is removed and answered CANCELLED; one in flight is
  // marked (kUnknown when already marked or when the ticket is unknown).
  Cancelled cancel(uint64_t ticket, std::vector<Answer>& answers);

  // Calls f(QueuedRequest*) on every queued request in strict priority order (level 1 first;
  // within a level unexpired FIFO, then DELAYed FIFO) until f returns false.
  template <typename F>
  void visit(F&& f) const {
    for (const Level& level : levels_) {
      for (const auto& r : level.queue) {
        if (!f(r.get())) return;
      }
      for (const auto& r : level.delayed) {
        if (!f(r.get())) return;
      }
    }
  }
  // Takes queued `r` into a batch dispatched at `now` (its ticket stays until finish()).
  std::unique_ptr<QueuedRequest> take(QueuedRequest* r, uint64_t now);
  // In-flight `r` was answered: forgets its ticket and counts a cancellation.
  void finish(const QueuedRequest& r);
  // Answers every queued request with `status` and empties the queues.
  void drain(const absl::Status& status, std::vector<Answer>& answers);

  size_t size() const { return queued_; }
  size_t size(uint32_t level) const;

  // The overload level after a change of the queues, from `current`: raised to the classes of
  // the lowest level when at max_total_queue_size and to those of `refused_level` (0: none);
  // back to 0 once drained to half the limit (hysteresis). `current` without the limit.
  int overloadLevel(int current, uint32_t refused_level) const;
  bool full() const;
  // The refusal push() would give a request of `level` now (counted in the level's metrics as
  // push() counts it), without shedding anything; OK when push() would queue it.
  absl::Status admission(uint32_t level);

  // The status of a refusal for overload (overload_status: 503 or 429) of a request of `level`,
  // with its Retry-After hint (retryAfterSeconds(level), backends/retry_after.h).
  absl::Status overloadStatus(std::string message, uint32_t level) const;

  // Retry-After hints (docs/ERRORS.md "Retry-After"): the batcher's estimate of one batch's
  // service time, `batch_ns` for a batch of up to `batch_requests` requests (0: unknown, the
  // hint is the minimum), with max_inflight_batches batches at once.
  void setServiceEstimate(uint64_t batch_ns, uint64_t batch_requests) {
    batch_ns_ = batch_ns;
    batch_requests_ = batch_requests;
  }
  uint64_t batchNsEstimate() const { return batch_ns_; }
  // Seconds until a request of `level` that joined now would be served: drainTimeNs over the
  // requests queued at `level` and above (they go first) with the estimate above, as
  // retryAfterFromNs (1..60).
  uint32_t retryAfterSeconds(uint32_t level) const;

 private:
  struct Level {
    QueuePolicy policy;
    LevelMetrics* metrics;
    std::list<std::unique_ptr<QueuedRequest>> queue;    // unexpired, FIFO
    std::list<std::unique_ptr<QueuedRequest>> delayed;  // expired with DELAY, FIFO
    size_t size() const { return queue.size() + delayed.size(); }
  };
  std::unique_ptr<QueuedRequest> remove(QueuedRequest* r);
  void recomputeDeadline();
  uint64_t aheadOf(uint32_t level) const;  // requests queued at `level` and above

  const BatchingConfig& config_;
  std::vector<Level> levels_;  // index level-1
  std::unordered_map<uint64_t, QueuedRequest*> tickets_;  // queued and in flight
  size_t queued_ = 0;
  uint64_t next_ticket_ = 1;
  uint64_t next_deadline_ns_ = UINT64_MAX;
  uint64_t batch_ns_ = 0;  // setServiceEstimate
  uint64_t batch_requests_ = 1;
};

}  // namespace infergate::backends
