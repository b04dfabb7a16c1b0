// Learning-rate schedules and global-norm gradient clipping.
#include "train/schedule.h"

#include <cmath>

#include "tensor/math.h"

namespace hla {

void ScheduleConfig::validate() const {
  HLA_CHECK_INPUT(kind == "cosine" || kind == "wsd" || kind == "constant", "[optim] schedule: '", kind,
            "' is not a schedule (cosine | wsd | constant)");
  HLA_CHECK_INPUT(total_steps >= 1, "[train] steps must be >= 1, got ", total_steps);
  HLA_CHECK_INPUT(warmup_steps >= 0 && warmup_steps <= total_steps, "[optim] warmup_steps must be in [0, ",
            total_steps, "] (the step count), got ", warmup_steps);
  HLA_CHECK_INPUT(min_lr_ratio >= 0 && min_lr_ratio <= 1, "[optim] min_lr_ratio must be in [0, 1], got ",
            min_lr_ratio);
  HLA_CHECK_INPUT(decay_fraction >= 0 && decay_fraction <= 1,
            "[optim] decay_fraction must be in [0, 1], got ", decay_fraction);
  HLA_CHECK_INPUT(decay_shape == "linear" || decay_shape == "minus_sqrt", "[optim] decay_shape: '",
            decay_shape, "' is not a decay shape (linear | minus_sqrt)");
}

nlohmann::json ScheduleConfig::to_json() const {
  return {{"kind", kind},
          {"total_steps", total_steps},
          {"warmup_steps", warmup_steps},
          {"min_lr_ratio", min_lr_ratio},
          {"decay_fraction", decay_fraction},
          {"decay_shape", decay_shape}};
}

double lr_factor(const ScheduleConfig& sc, int64_t step) {
  const double s = double(step + 1), total = double(sc.total_steps), warmup = double(sc.warmup_steps);
  const double floor = sc.min_lr_ratio;
  if (s <= warmup) return s / warmup;
  if (sc.kind == "constant") return 1.0;
  if (sc.kind == "cosine") {
    double p = std::min(1.0, (s - warmup) / (total - warmup));
    return floor + (1.0 - floor) * 0.5 * (1.0 + std::cos(M_PI * p));
  }
  // wsd
  double decay_steps = std::round(sc.decay_fraction * total);
  double decay_start = total - decay_steps;
  if (decay_steps == 0 || s <= decay_start) return 1.0;
  double p = std::min(1.0, (s - decay_start) / decay_steps);
  double shape = sc.decay_shape == "minus_sqrt" ? 1.0 - std::sqrt(p) : 1.0 - p;
  return floor + (1.0 - floor) * shape;
}

double grad_norm(const ParameterList& params) {
  double sum = 0;
  for (const NamedParameter& p : params)
    if (p.var.grad().defined()) sum += sq_norm(p.var.grad());
  return std::sqrt(sum);
}

double clip_grad_norm(const ParameterList& params, double max_norm) {
  double norm = grad_norm(params);
  if (max_norm > 0 && norm > max_norm) {
    double factor = max_norm / (norm + 1e-6);
    for (const NamedParameter& p : params) {
      if (!p.var.grad().defined()) continue;
      Var v = p.var;
      scale_(v.mutable_grad(), factor);
    }
  }
  return norm;
}

}  // namespace hla
