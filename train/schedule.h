// Learning-rate schedules and gradient clipping.
//
// lr_factor(schedule, step) multiplies every group's peak lr for the update numbered step + 1
// (step is 0-based; s = step + 1 counts updates, total = total_steps):
//   warmup      s <= warmup:  s / warmup                    (the first update is not at lr 0)
//   cosine      min + (1 - min) * (1 + cos(pi * p)) / 2,  p = (s - warmup) / (total - warmup)
//   wsd         1 until the decay window, the last round(decay_fraction * total) updates; there
//               p = (s - decay_start) / decay_steps and the factor is min + (1 - min) * shape(p),
//               shape = 1 - p ("linear") or 1 - sqrt(p) ("minus_sqrt", papers.md 3.4)
//   constant    1 after warmup
// min = min_lr_ratio. Every schedule ends exactly at min (constant: at 1) on the last update.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "nn/module.h"

namespace hla {

struct ScheduleConfig {
  std::string kind = "cosine";  // cosine | wsd | constant
  int64_t total_steps = 1000;
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.1;
  double decay_fraction = 0.2;         // wsd
  std::string decay_shape = "linear";  // wsd: linear | minus_sqrt

  void validate() const;  // errors name the setting and the bad value
  nlohmann::json to_json() const;
};

double lr_factor(const ScheduleConfig& schedule, int64_t step);

// sqrt of the sum of squares of every parameter gradient (parameters without one count 0).
double grad_norm(const ParameterList& params);
// Scales all gradients by max_norm / norm when norm > max_norm (max_norm <= 0: never).
// Returns the norm before clipping.
double clip_grad_norm(const ParameterList& params, double max_norm);

}  // namespace hla
