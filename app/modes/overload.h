#pragma once
// Overload publishing, shared by the XDP modes (xdp_filter_mode.cc, app/afxdp_mode.cc).
// Threading: publish/clear from the main thread; the listeners run on the batchers' threads.

#include <functional>

#include "absl/status/status.h"
#include "backends/model.h"

namespace infergate::app {

// Overload publishing (docs/BATCHING.md "Overload level"), shared by xdp-filter, afxdp and dpdk:
// every model in `models` gets an overload listener; on any change the highest level
// over the models is passed to `publish` (XdpFilter::setOverloadLevel: the NIC sheds the
// lowest classes while a model's queues are full). A failed publish is logged. Called from
// the batchers' threads, serialised here. clearOverloadListeners() removes the listeners
// (call it before whatever `publish` uses goes away).
void publishOverloadLevels(const backends::ModelRegistry& models,
                           std::function<absl::Status(int level)> publish);
void clearOverloadListeners(const backends::ModelRegistry& models);

}  // namespace infergate::app
