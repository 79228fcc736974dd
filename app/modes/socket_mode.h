#pragma once
// socket mode: kernel TCP. One SocketReactor per configured reactor (pinned when `cpus` says
// so), each with an SO_REUSEPORT socket per listener. xdp-filter mode is this plus the XDP
// program (xdp_filter_mode.cc), through the two hooks below.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "app/modes/mode.h"
#include "dataplane/socket_reactor.h"

namespace infergate::app {

class SocketMode : public ServingMode {
 public:
  absl::Status start(const ModeContext& ctx) override;
  void serve() override;
  void stop(uint64_t drain_ms) override;

 protected:
  // Reads the ingress tag of a connection's request start; empty: no ingress filter.
  virtual dataplane::ReactorOptions::TagLookup tagLookup() { return {}; }
  // After every listener is open (`service_ports`: their bound ports), before serving.
  virtual absl::Status afterListen(const ModeContext& ctx,
                                   const std::vector<uint16_t>& service_ports) {
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<dataplane::SocketReactor>> reactors_;
};

}  // namespace infergate::app
