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
#include <vector>

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

// Global-norm clipping as the training step runs it, with no host read (nn/ops/grad_norm.h):
// the squares of every gradient summed in one reduction (parameters without one count 0), the
// norm written to records[slot][1], the first non-finite step kept in status (with the index in
// `params` of the first gradient holding a NaN or Inf), then every gradient scaled by
// max_norm / (norm + 1e-6) when norm > max_norm > 0, or zeroed from the first non-finite step on.
// step: the update's number, one F64 value on the parameters' device (a captured CUDA graph of the
// training step reads each update's number there).
void clip_grad_norm_(const ParameterList& params, double max_norm, Tensor& records, int64_t slot, Tensor& status,
                     const Tensor& step);
// The same but the scaling: returns the factor, (1) F64 in status, for the optimizer to multiply
// each gradient by as it reads it (Optimizer::apply(grad_scale)): the training step's form, which
// writes no clipped gradient.
Tensor clip_factor_(const ParameterList& params, double max_norm, Tensor& records, int64_t slot, Tensor& status,
                    const Tensor& step);
// The same for one update, read back: returns the norm before clipping (one host read).
double clip_grad_norm(const ParameterList& params, double max_norm);
// sqrt of the sum of squares of every parameter gradient (one host read).
double grad_norm(const ParameterList& params);
// The parameters' gradients in order, undefined where a parameter has none this step.
std::vector<Tensor> gradients(const ParameterList& params);
// The device the parameters live on.
Device params_device(const ParameterList& params);

}  // namespace hla
