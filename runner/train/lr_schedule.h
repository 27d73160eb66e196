// Learning-rate schedule: linear scaling with the world size, gradual warmup from the base
// rate (Goyal et al., "Accurate, Large Minibatch SGD"), then constant or cosine decay to 0.
#pragma once

#include <cmath>
#include <cstdint>

namespace ringtrain::train {

struct LrSchedule {
  double base = 0.001;
  double peak = 0.001;  // base × world size under linear scaling
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  bool cosine = false;

  double At(std::int64_t step) const {
    if (step < warmup_steps) {
      return base +
             (peak - base) * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
    }
    if (!cosine || total_steps <= warmup_steps) return peak;
    double t =
        static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
    return peak * 0.5 * (1.0 + std::cos(M_PI * (t > 1 ? 1 : t)));
  }
};

}  // namespace ringtrain::train
