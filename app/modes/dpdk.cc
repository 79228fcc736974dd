// dpdk mode as a ServingMode: app/dpdk_mode.h does the work. Always compiled; the mode exists
// only where CMake compiles app/dpdk_mode.cc too (INFERGATE_DPDK_MODE: libdpdk found with
// -DINFERGATE_WITH_DPDK=ON, and the XDP build for the classifier's options); elsewhere the
// factory answers UNIMPLEMENTED with what to build.
#include "app/modes/mode.h"

#ifdef INFERGATE_DPDK_MODE
#include "app/dpdk_mode.h"
#endif

namespace infergate::app {

#ifdef INFERGATE_DPDK_MODE
namespace {

class DpdkServingMode final : public ServingMode {
 public:
  absl::Status start(const ModeContext& ctx) override {
    absl::StatusOr<std::unique_ptr<DpdkMode>> m =
        DpdkMode::start(ctx.config, ctx.sessions, ctx.registry, &ctx.models);
    if (!m.ok()) return m.status();
    mode_ = std::move(*m);
    return absl::OkStatus();
  }
  void serve() override { mode_->serve(); }
  void stop(uint64_t drain_ms) override {
    if (mode_) mode_->stop(drain_ms);
  }
  absl::Status reconfigureXdp(const xdp::XdpOptions& next) override {
    if (!mode_) return absl::FailedPreconditionError("dpdk mode is not serving");
    return mode_->reconfigureXdp(next);
  }
  void modelsChanged(const backends::ModelRegistry& models) override {
    if (mode_) mode_->modelsChanged(models);
  }

 private:
  std::unique_ptr<DpdkMode> mode_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ServingMode>> makeDpdkMode() {
  return std::make_unique<DpdkServingMode>();
}

#else

absl::StatusOr<std::unique_ptr<ServingMode>> makeDpdkMode() {
  return absl::UnimplementedError(
      "mode 'dpdk' needs a build with DPDK (apt-get install dpdk-dev libdpdk-dev, then cmake "
      "-DINFERGATE_WITH_DPDK=ON; the XDP build is needed too); see docs/DPDK.md, or use mode: "
      "afxdp or socket");
}

#endif

}  // namespace infergate::app
