#include "backends/priority_queues.h"

#include <algorithm>
#include <utility>

#include "backends/retry_after.h"
#include "common/checked.h"
#include "fmt/format.h"

namespace infergate::backends {

namespace {

constexpr const char* kTimeoutMessage = "Request timeout expired";
constexpr const char* kQueueFullMessage = "Exceeds maximum queue size";

}  // namespace

int shedClassesForLevel(uint32_t level, uint32_t levels) {
  int n = 0;
  for (int c = 0; c < kPriorityClasses; ++c) {
    if (levelOfPriorityClass(c, levels) >= level) ++n;
  }
  return std::clamp(n, 1, kMaxShedClasses);
}

void flushAnswers(std::vector<Answer>& answers) {
  for (Answer& a : answers) {
    if (a.done) a.done(std::move(a.result));
  }
  answers.clear();
}

PriorityQueues::PriorityQueues(const BatchingConfig& config, BatchMetrics& metrics)
    : config_(config) {
  levels_.reserve(config_.priority_levels);
  for (uint32_t l = 1; l <= config_.priority_levels; ++l) {
    auto it = config_.priority_queue_policy.find(l);
    levels_.push_back(Level{
        it != config_.priority_queue_policy.end() ? it->second : config_.default_queue_policy,
        &metrics.level(l), {}, {}});
  }
}

uint32_t PriorityQueues::levelOf(int64_t priority) const {
  if (priority <= 0 || static_cast<uint64_t>(priority) > config_.priority_levels) {
    return config_.default_priority_level;
  }
  return static_cast<uint32_t>(priority);
}

uint64_t PriorityQueues::deadline(uint32_t level, uint64_t request_timeout_us,
                                  uint64_t now) const {
  const QueuePolicy& policy = levels_[level - 1].policy;
  uint64_t timeout_us = policy.default_timeout_us;
  if (policy.allow_timeout_override && request_timeout_us > 0 &&
      (timeout_us == 0 || request_timeout_us < timeout_us)) {
    timeout_us = request_timeout_us;
  }
  // Saturating: a client's huge timeout means "no sooner than anything", never a wrap into
  // the past.
  return timeout_us > 0 ? common::saturatingAdd(now, common::saturatingMul(timeout_us, 1000)) : 0;
}

absl::Status PriorityQueues::overloadStatus(std::string message, uint32_t level) const {
  absl::Status st = config_.overload_status == 429
                        ? absl::ResourceExhaustedError(std::move(message))
                        : absl::UnavailableError(std::move(message));
  return withRetryAfter(std::move(st), retryAfterSeconds(level));
}

uint64_t PriorityQueues::aheadOf(uint32_t level) const {
  uint64_t ahead = 0;
  for (uint32_t l = 1; l <= level && l <= levels_.size(); ++l) ahead += levels_[l - 1].size();
  return ahead;
}

uint32_t PriorityQueues::retryAfterSeconds(uint32_t level) const {
  return retryAfterFromNs(
      drainTimeNs(aheadOf(level), batch_requests_, config_.max_inflight_batches, batch_ns_));
}

absl::Status PriorityQueues::admission(uint32_t level_no) {
  Level& level = levels_[level_no - 1];
  if (level.policy.max_queue_size > 0 && level.size() >= level.policy.max_queue_size) {
    level.metrics->rejected_full.inc();
    return overloadStatus(kQueueFullMessage, level_no);
  }
  if (config_.max_total_queue_size > 0 && queued_ >= config_.max_total_queue_size) {
    for (uint32_t l = config_.priority_levels; l > level_no; --l) {
      if (levels_[l - 1].size() != 0) return absl::OkStatus();  // push() would shed it
    }
    level.metrics->rejected_overload.inc();
    return overloadStatus(kQueueFullMessage, level_no);
  }
  return absl::OkStatus();
}

uint64_t PriorityQueues::push(std::unique_ptr<QueuedRequest> r, std::vector<Answer>& answers,
                              uint32_t& refused_level) {
  const uint32_t level_no = r->level;
  Level& level = levels_[level_no - 1];
  if (level.policy.max_queue_size > 0 && level.size() >= level.policy.max_queue_size) {
    level.metrics->rejected_full.inc();
    answers.push_back({std::move(r->done), overloadStatus(kQueueFullMessage, level_no)});
    return 0;
  }
  if (config_.max_total_queue_size > 0 && queued_ >= config_.max_total_queue_size) {
    // Shed the newest request of the lowest non-empty level below this one.
    bool admit = false;
    for (uint32_t l = config_.priority_levels; l > level_no; --l) {
      Level& low = levels_[l - 1];
      if (low.size() == 0) continue;
      QueuedRequest* victim =
          !low.queue.empty() ? low.queue.back().get() : low.delayed.back().get();
      std::unique_ptr<QueuedRequest> up = remove(victim);
      tickets_.erase(up->ticket);
      low.metrics->shed.inc();
      refused_level = l;
      // Its hint counts the request that takes its place (queued below, ahead of level l).
      absl::Status shed = overloadStatus(
          fmt::format("Request shed: model overloaded, priority level {} dropped", l), l);
      shed = withRetryAfter(std::move(shed),
                            retryAfterFromNs(drainTimeNs(aheadOf(l) + 1, batch_requests_,
                                                         config_.max_inflight_batches, batch_ns_)));
      answers.push_back({std::move(up->done), std::move(shed)});
      admit = true;
      break;
    }
    if (!admit) {
      level.metrics->rejected_overload.inc();
      refused_level = level_no;
      answers.push_back({std::move(r->done), overloadStatus(kQueueFullMessage, level_no)});
      return 0;
    }
  }
  const uint64_t ticket = next_ticket_++;
  r->ticket = ticket;
  if (r->deadline_ns != 0) next_deadline_ns_ = std::min(next_deadline_ns_, r->deadline_ns);
  QueuedRequest* raw = r.get();
  level.queue.push_back(std::move(r));
  raw->pos = std::prev(level.queue.end());
  tickets_.emplace(ticket, raw);
  ++queued_;
  level.metrics->depth.add(1);
  return ticket;
}

std::unique_ptr<QueuedRequest> PriorityQueues::remove(QueuedRequest* r) {
  Level& level = levels_[r->level - 1];
  auto& list = r->state == QueuedRequest::State::kDelayed ? level.delayed : level.queue;
  std::unique_ptr<QueuedRequest> up = std::move(*r->pos);
  list.erase(r->pos);
  --queued_;
  level.metrics->depth.sub(1);
  return up;
}

void PriorityQueues::recomputeDeadline() {
  next_deadline_ns_ = UINT64_MAX;
  for (const Level& level : levels_) {
    for (const auto& r : level.queue) {
      if (r->deadline_ns != 0) next_deadline_ns_ = std::min(next_deadline_ns_, r->deadline_ns);
    }
  }
}

void PriorityQueues::expire(uint64_t now, std::vector<Answer>& answers) {
  if (now < next_deadline_ns_) return;
  for (Level& level : levels_) {
    for (auto it = level.queue.begin(); it != level.queue.end();) {
      QueuedRequest* r = it->get();
      ++it;  // before r's node moves or goes
      if (r->deadline_ns == 0 || now < r->deadline_ns) continue;
      if (level.policy.timeout_action == TimeoutAction::kDelay) {
        level.delayed.splice(level.delayed.end(), level.queue, r->pos);
        r->state = QueuedRequest::State::kDelayed;
        r->deadline_ns = 0;
        level.metrics->delayed.inc();
        continue;
      }
      std::unique_ptr<QueuedRequest> up = remove(r);
      tickets_.erase(up->ticket);
      level.metrics->timeouts.inc();
      answers.push_back({std::move(up->done), absl::UnavailableError(kTimeoutMessage)});
    }
  }
  recomputeDeadline();
}

PriorityQueues::Cancelled PriorityQueues::cancel(uint64_t ticket, std::vector<Answer>& answers) {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return Cancelled::kUnknown;
  QueuedRequest* r = it->second;
  if (r->state == QueuedRequest::State::kInFlight) {
    if (r->cancelled) return Cancelled::kUnknown;
    r->cancelled = true;
    return Cancelled::kInFlight;
  }
  std::unique_ptr<QueuedRequest> up = remove(r);
  tickets_.erase(it);
  levels_[up->level - 1].metrics->cancelled.inc();
  answers.push_back({std::move(up->done), absl::CancelledError("Request cancelled")});
  return Cancelled::kAnswered;
}

std::unique_ptr<QueuedRequest> PriorityQueues::take(QueuedRequest* r, uint64_t now) {
  std::unique_ptr<QueuedRequest> up = remove(r);
  up->state = QueuedRequest::State::kInFlight;
  levels_[up->level - 1].metrics->queue_time.record((now - up->enqueue_ns) / 1000);
  return up;
}

void PriorityQueues::finish(const QueuedRequest& r) {
  tickets_.erase(r.ticket);
  if (r.cancelled) levels_[r.level - 1].metrics->cancelled.inc();
}

void PriorityQueues::drain(const absl::Status& status, std::vector<Answer>& answers) {
  for (Level& level : levels_) {
    for (auto* list : {&level.queue, &level.delayed}) {
      for (auto& r : *list) {
        tickets_.erase(r->ticket);
        answers.push_back({std::move(r->done), status});
      }
      level.metrics->depth.sub(static_cast<int64_t>(list->size()));
      queued_ -= list->size();
      list->clear();
    }
  }
}

size_t PriorityQueues::size(uint32_t level) const {
  if (level == 0 || level > levels_.size()) return 0;
  return levels_[level - 1].size();
}

bool PriorityQueues::full() const {
  return config_.max_total_queue_size > 0 && queued_ >= config_.max_total_queue_size;
}

int PriorityQueues::overloadLevel(int current, uint32_t refused_level) const {
  const size_t limit = config_.max_total_queue_size;
  if (limit == 0) return current;
  const bool at_limit = queued_ >= limit;
  int level = current;
  if (at_limit) {
    level = std::max(level, shedClassesForLevel(config_.priority_levels, config_.priority_levels));
  }
  if (refused_level != 0) {
    level = std::max(level, shedClassesForLevel(refused_level, config_.priority_levels));
  }
  // Hysteresis: stay up until the queues have drained to half the limit.
  if (level != 0 && !at_limit && queued_ <= limit / 2) level = 0;
  return level;
}

}  // namespace infergate::backends
