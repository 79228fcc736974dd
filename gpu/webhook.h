#pragma once
// The detectors' optional webhook: JSON bodies POSTed to a plain-HTTP URL
// (http://host[:port][/path], no TLS) from a thread of its own, so the monitor never waits on
// the network. The queue is bounded (kQueueMax); a body that finds it full is dropped and
// counted. Each POST is one HTTP/1.1 request on a new TCP connection ("Connection: close"),
// with connect, send and receive each bounded by the timeout; success is a 2xx status line.
//
// Ownership: the sender owns its thread; the destructor stops it (an exchange in flight ends
// within the timeout; bodies still queued are abandoned and counted as dropped).
// Threading: send() and the counters may be called from any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace infergate::gpu {

struct WebhookUrl {
  std::string host;  // a name or an address (IPv6 without the brackets)
  uint16_t port = 80;
  std::string path = "/";  // with the query, if any
  std::string hostHeader() const;  // "host:port" (brackets around IPv6)
};

// Parses http://host[:port][/path[?query]]. INVALID_ARGUMENT with a sentence naming what is
// wrong (https, user info, a bad port, spaces or control characters, ...).
absl::StatusOr<WebhookUrl> parseWebhookUrl(std::string_view url);

class WebhookSender {
 public:
  static constexpr size_t kQueueMax = 64;

  // Validates `url`, starts the thread. `timeout_ms` bounds each of connect, send and receive.
  static absl::StatusOr<std::unique_ptr<WebhookSender>> create(std::string_view url,
                                                               uint64_t timeout_ms);
  ~WebhookSender();
  WebhookSender(const WebhookSender&) = delete;
  WebhookSender& operator=(const WebhookSender&) = delete;

  // Queues one JSON body; false (and counted as dropped) when the queue is full or stopping.
  bool send(std::string json_body);

  // Waits until the queue is empty and no request is in flight; false on timeout (tests).
  bool waitIdle(std::chrono::milliseconds timeout);

  uint64_t sent() const { return sent_.load(std::memory_order_relaxed); }
  uint64_t failed() const { return failed_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  const WebhookUrl& url() const { return url_; }

  // One POST, synchronously (what the thread does per body). OK on a 2xx answer.
  static absl::Status post(const WebhookUrl& url, std::string_view body, uint64_t timeout_ms);

 private:
  WebhookSender(WebhookUrl url, uint64_t timeout_ms);
  void run();

  const WebhookUrl url_;
  const uint64_t timeout_ms_;
  std::mutex mu_;
  std::condition_variable cv_;       // queue_ or stop_ changed (the thread waits)
  std::condition_variable idle_cv_;  // the thread finished a body (waitIdle waits)
  std::deque<std::string> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::atomic<uint64_t> sent_{0}, failed_{0}, dropped_{0};  // relaxed: counters only
  std::thread thread_;
};

}  // namespace infergate::gpu
