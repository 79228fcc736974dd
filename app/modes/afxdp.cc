// afxdp mode as a ServingMode (built with the XDP program only): app/afxdp_mode.h does the work.
#include "app/afxdp_mode.h"
#include "app/modes/mode.h"

namespace infergate::app {

namespace {

class AfXdpServingMode final : public ServingMode {
 public:
  absl::Status start(const ModeContext& ctx) override {
    // &ctx.models: overload publishing, as in xdp-filter mode.
    absl::StatusOr<std::unique_ptr<AfXdpMode>> m =
        startAfXdpMode(ctx.config, ctx.sessions, ctx.registry, &ctx.models);
    if (!m.ok()) return m.status();
    mode_ = std::move(*m);
    return absl::OkStatus();
  }
  void serve() override { mode_->serve(); }
  void stop(uint64_t drain_ms) override {
    if (mode_) mode_->stop(drain_ms);
  }
  bool attachesXdp() const override { return true; }
  absl::Status reconfigureXdp(const xdp::XdpOptions& next) override {
    if (!mode_) return absl::FailedPreconditionError("the XDP program is not attached");
    return mode_->reconfigureXdp(next);
  }
  void modelsChanged(const backends::ModelRegistry& models) override {
    if (mode_) mode_->modelsChanged(models);
  }

 private:
  std::unique_ptr<AfXdpMode> mode_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ServingMode>> makeAfXdpMode() {
  return std::make_unique<AfXdpServingMode>();
}

}  // namespace infergate::app
