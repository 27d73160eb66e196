// Central finite differences for the model tests, done carefully enough for float32 kernels.
// Test-only: knows nothing of layers, only of a value buffer and a scalar objective over it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <ostream>
#include <span>
#include <vector>

namespace ringtrain::model {

struct GradCheck {
  double worst = 0;  // max over checked entries of |numeric − analytic| / (|analytic| + floor)
  std::size_t index = 0;
  double analytic = 0;
  double numeric = 0;
  std::size_t checked = 0;
  std::size_t skipped = 0;  // entries with a kink within ±eps, see skip_kinks
};

inline std::ostream& operator<<(std::ostream& os, const GradCheck& c) {
  return os << "worst relative error " << c.worst << " at [" << c.index << "]: analytic "
            << c.analytic << ", numeric " << c.numeric << " (" << c.checked << " checked, "
            << c.skipped << " skipped)";
}

struct GradCheckOptions {
  float eps = 1e-2f;
  // floor_fraction × max|analytic| keeps entries near zero from dividing float noise by ~0.
  double floor_fraction = 1e-2;
  // ReLU and max-pool make the loss piecewise smooth. In a whole network one parameter moves
  // many units, so some ±eps steps cross a kink and the difference quotient is meaningless
  // there. When set, an entry whose quotients at eps and eps/2 disagree by more than half the
  // tolerance is skipped instead of compared; a smooth neighbourhood makes them agree no
  // matter what the analytic gradient says, so a wrong gradient is still caught.
  bool skip_kinks = false;
  double tolerance = 1e-2;
  std::vector<std::size_t> indices = {};  // all entries when empty
};

// Compares analytic[i] with the central difference of `objective` over values[i] ± eps. The
// divisor is the step the float perturbation actually took, not 2·eps, which removes the
// representation error of the perturbed value.
inline GradCheck CompareWithFiniteDifferences(std::span<float> values,
                                              std::span<const float> analytic,
                                              const std::function<double()>& objective,
                                              GradCheckOptions options) {
  std::vector<std::size_t>& indices = options.indices;
  if (indices.empty()) {
    for (std::size_t i = 0; i < values.size(); ++i) indices.push_back(i);
  }
  double scale = 0;
  for (const std::size_t i : indices) scale = std::max(scale, std::abs(double{analytic[i]}));
  const double floor = options.floor_fraction * scale + 1e-12;
  auto quotient = [&](std::size_t i, float eps) {
    const float saved = values[i];
    const float up = saved + eps;
    const float down = saved - eps;
    values[i] = up;
    const double f_up = objective();
    values[i] = down;
    const double f_down = objective();
    values[i] = saved;
    return (f_up - f_down) / (double{up} - double{down});
  };
  GradCheck result;
  for (const std::size_t i : indices) {
    const double numeric = quotient(i, options.eps);
    if (options.skip_kinks) {
      const double half = quotient(i, options.eps / 2);
      if (std::abs(numeric - half) > options.tolerance / 2 * (std::abs(numeric) + floor)) {
        ++result.skipped;
        continue;
      }
    }
    ++result.checked;
    const double error = std::abs(numeric - analytic[i]) / (std::abs(double{analytic[i]}) + floor);
    if (error >= result.worst) {
      result.worst = error;
      result.index = i;
      result.analytic = analytic[i];
      result.numeric = numeric;
    }
  }
  return result;
}

}  // namespace ringtrain::model
