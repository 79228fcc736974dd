// xdp-filter mode: socket mode with the XDP program in front (built with the XDP program only).
#include <linux/capability.h>

#include "app/modes/overload.h"
#include "app/modes/socket_mode.h"
#include "app/privileges.h"
#include "fmt/ranges.h"
#include "spdlog/spdlog.h"
#include "xdp/xdp_filter.h"

namespace infergate::app {

namespace {

class XdpFilterMode final : public SocketMode {
 public:
  void stop(uint64_t drain_ms) override {
    SocketMode::stop(drain_ms);
    if (!filter_) return;
    if (models_ != nullptr) clearOverloadListeners(*models_);
    ScopedCapability net_admin(CAP_NET_ADMIN);  // netlink detach; kept for this (Server)
    filter_->detach();  // xdp.keep_attached: stays attached for the next process (logged)
    if (!filter_->options().keep_attached)
      spdlog::info("XDP program detached from {}", filter_->options().interface);
    filter_.reset();
  }
  bool attachesXdp() const override { return true; }

  absl::Status reconfigureXdp(const xdp::XdpOptions& next) override {
    if (!filter_) return absl::FailedPreconditionError("the XDP program is not attached");
    xdp::XdpOptions opts = next;
    opts.service_ports = filter_->options().service_ports;  // the listeners do not change
    opts.tags = xdp::XdpOptions::TagPlacement::kOff;        // as at start
    return filter_->reconfigure(opts);
  }

  void modelsChanged(const backends::ModelRegistry& models) override {
    if (!filter_) return;
    publishOverloadLevels(models, [f = filter_.get()](int level) { return f->setOverloadLevel(level); });
  }

 protected:
  // The tag of the connection's latest request start, from the program's flow map.
  dataplane::ReactorOptions::TagLookup tagLookup() override {
    return [this](const sockaddr_storage& peer,
                  const sockaddr_storage& local) -> std::optional<net::IngressTag> {
      if (!filter_) return std::nullopt;
      const std::optional<xdp::Tag> t = filter_->lookupFlowTag(xdp::FlowTuple::fromSockaddrs(
          reinterpret_cast<const sockaddr*>(&peer), reinterpret_cast<const sockaddr*>(&local)));
      if (!t) return std::nullopt;
      return net::IngressTag::fromProgram(t->cls, t->verdict, t->rx_ns);
    };
  }

  absl::Status afterListen(const ModeContext& ctx,
                           const std::vector<uint16_t>& service_ports) override {
    const config::Config& c = ctx.config;
    xdp::XdpOptions opts = c.xdp;
    opts.service_ports = service_ports;
    // Tags live in the flow map here (lookupFlowTag): xdp.tags is afxdp's, and nothing else
    // reads frame tags, so none are written.
    opts.tags = xdp::XdpOptions::TagPlacement::kOff;
    absl::StatusOr<std::unique_ptr<xdp::XdpFilter>> filter = xdp::XdpFilter::attach(opts);
    if (!filter.ok()) return filter.status();
    filter_ = std::move(*filter);
    filter_->registerMetrics(ctx.registry);
    if (auto warning = xdp::kernelSynCookiesWarning()) spdlog::warn("{}", *warning);
    // Overload publishing (docs/BATCHING.md "Overload level"): the NIC sheds the lowest classes
    // while a batched model's queues are full; the level is the highest over the models.
    models_ = &ctx.models;
    publishOverloadLevels(ctx.models,
                          [f = filter_.get()](int level) { return f->setOverloadLevel(level); });
    spdlog::info("XDP program {} {} ({} mode) for port(s) {}{}, program id {}{}",
                 filter_->adopted() ? "kept on" : "attached to", c.xdp.interface,
                 xdp::attachModeName(c.xdp.attach), fmt::join(service_ports, ","),
                 c.xdp.pin_path.empty() ? "" : ", maps pinned under " + c.xdp.pin_path,
                 filter_->attachedProgramId(), c.xdp.keep_attached ? " (xdp.keep_attached)" : "");
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<xdp::XdpFilter> filter_;
  const backends::ModelRegistry* models_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ServingMode>> makeXdpFilterMode() {
  return std::make_unique<XdpFilterMode>();
}

absl::Status printXdpStats(const std::string& pin_path, std::FILE* out) {
  return xdp::printPinnedStats(pin_path, out);
}

}  // namespace infergate::app
