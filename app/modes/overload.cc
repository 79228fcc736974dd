#include "app/modes/overload.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "spdlog/spdlog.h"

namespace infergate::app {

void publishOverloadLevels(const backends::ModelRegistry& models,
                           std::function<absl::Status(int level)> publish) {
  struct Published {
    std::mutex mu;
    std::vector<int> levels;
    std::function<absl::Status(int)> publish;
  };
  auto pub = std::make_shared<Published>();
  pub->levels.resize(models.models().size());
  pub->publish = std::move(publish);
  for (size_t i = 0; i < models.models().size(); ++i) {
    // Models without a queue ignore the listener (Model::setOverloadListener): their level stays 0.
    models.models()[i]->setOverloadListener([pub, i](int level) {
      std::lock_guard<std::mutex> lock(pub->mu);
      pub->levels[i] = level;
      const int top = *std::max_element(pub->levels.begin(), pub->levels.end());
      if (absl::Status st = pub->publish(top); !st.ok())
        spdlog::warn("overload level: {}", st.ToString());
    });
  }
}

void clearOverloadListeners(const backends::ModelRegistry& models) {
  for (const auto& m : models.models()) {
    m->setOverloadListener(nullptr);
  }
}

}  // namespace infergate::app
