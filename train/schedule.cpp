// Learning-rate schedules and global-norm gradient clipping (on the gradients' device).
#include "train/schedule.h"

#include <cmath>

#include "nn/ops/grad_norm.h"

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

std::vector<Tensor> gradients(const ParameterList& params) {
  std::vector<Tensor> grads;
  for (const NamedParameter& p : params) grads.push_back(p.var.grad());
  return grads;
}

Device params_device(const ParameterList& params) {
  return params.empty() ? Device::CPU : params.front().var.value().device();
}

Tensor clip_factor_(const ParameterList& params, double max_norm, Tensor& records, int64_t slot, Tensor& status,
                    const Tensor& step) {
  const Tensor sums = multi_sq_norm(gradients(params), params_device(params));  // sums: (n + 1)
  finish_step(records, slot, status, sums, max_norm, step);
  return status.slice0(kStepStatusSize - 1, kStepStatusSize);
}

void clip_grad_norm_(const ParameterList& params, double max_norm, Tensor& records, int64_t slot, Tensor& status,
                     const Tensor& step) {
  multi_scale_(gradients(params), clip_factor_(params, max_norm, records, slot, status, step));
}

double clip_grad_norm(const ParameterList& params, double max_norm) {
  const Device device = params_device(params);
  Tensor records = Tensor::zeros({1, kStepRecordSize}, DType::F64, device);  // records: (1, 2)
  Tensor status = Tensor::zeros({kStepStatusSize}, DType::F64, device);     // status: (3)
  clip_grad_norm_(params, max_norm, records, 0, status, Tensor::full({1}, 1.0, DType::F64, device));
  return records.to_f64_vector()[1];
}

double grad_norm(const ParameterList& params) {
  const Tensor sums = multi_sq_norm(gradients(params), params_device(params));
  return std::sqrt(sums.to_f64_vector().back());
}

}  // namespace hla
