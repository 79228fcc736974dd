#pragma once
// The one guard between a model's answer and its encoder. Completion callbacks are called by
// the backends (the batcher's thread, a backend's I/O thread) with nothing around them, so an
// exception thrown while encoding an answer (std::bad_alloc for one too large to hold, a
// length_error, a bug) would end the process. Every API's completion encodes through
// encodeGuarded: an answer that cannot be encoded becomes the API's INTERNAL answer (HTTP 500:
// the fault is the server's, not the client's, so not the RESOURCE_EXHAUSTED / 429 that clients
// retry), and the gateway goes on.

#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "common/metrics.h"

namespace infergate::frontend {

// Answers that could not be encoded, process-wide: infergate_encode_failures_total (registered
// at the first failure; the process-wide registry is the one /metrics serves).
inline common::Counter& encodeFailures() {
  static common::Counter& c = common::MetricsRegistry::global().counter(
      "infergate_encode_failures_total",
      "Model answers that could not be encoded (too large to hold, or an encoder fault), "
      "answered with an error instead.");
  return c;
}

// Returns encode(), or onError(status) when encode() throws.
template <typename Encode, typename OnError>
auto encodeGuarded(Encode&& encode, OnError&& onError) -> decltype(encode()) {
  absl::Status failed;
  try {
    return encode();
  } catch (const std::bad_alloc&) {
    failed = absl::InternalError("the model's answer is too large to encode (out of memory)");
  } catch (const std::length_error&) {
    failed = absl::InternalError("the model's answer is too large to encode");
  } catch (const std::exception& e) {
    failed = absl::InternalError(std::string("the model's answer could not be encoded: ") +
                                 e.what());
  }
  encodeFailures().inc();
  return onError(failed);
}

}  // namespace infergate::frontend
