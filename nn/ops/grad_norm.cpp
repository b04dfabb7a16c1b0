// The training step's multi-tensor ops (nn/ops/grad_norm.h): CPU references and the dispatch.
// Sums of squares add in double in element order, tensor by tensor, then over the tensors in
// order: the same bits as summing tensor/math.h's sq_norm of each gradient.
#include "nn/ops/grad_norm.h"

#include <cmath>

#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/grad_norm.h"
#endif

namespace hla {
namespace cpu {

void multi_sq_norm(double* sums, const TensorTable& xs) {
  const int64_t n = static_cast<int64_t>(xs.size());
  double total = 0;
  for (int64_t i = 0; i < n; i++) {
    sums[i] = dispatch_float(xs[i].dtype, "multi_sq_norm", [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(xs[i].data);  // x: (numel)
      double s = 0;
      for (int64_t k = 0; k < xs[i].numel; k++) s += static_cast<double>(x[k]) * x[k];
      return s;
    });
    total += sums[i];
  }
  sums[n] = total;
}

void multi_scale(const TensorTable& xs, const double* factor) {
  const double f = *factor;
  if (f == 1.0) return;
  for (const TensorSpan& span : xs) {
    dispatch_float(span.dtype, "multi_scale", [&](auto tag) {
      using T = decltype(tag);
      T* x = static_cast<T*>(span.data);  // x: (numel)
      for (int64_t k = 0; k < span.numel; k++) x[k] = f == 0.0 ? T(0) : x[k] * static_cast<T>(f);
    });
  }
}

void accumulate_loss(double* record, const void* loss, DType dtype, const double* weight) {
  double l = dispatch_float(dtype, "accumulate_loss", [&](auto tag) {
    using T = decltype(tag);
    return static_cast<double>(*static_cast<const T*>(loss));
  });
  record[0] += *weight * l;
}

void finish_step(double* record, double* status, const double* sums, int64_t n, double max_norm, const double* step) {
  const double norm = std::sqrt(sums[n]);
  record[1] = norm;
  if (status[0] == 0 && !(std::isfinite(record[0]) && std::isfinite(norm))) {
    status[0] = *step;
    status[1] = -1;
    for (int64_t i = 0; i < n; i++)
      if (!std::isfinite(sums[i])) {
        status[1] = static_cast<double>(i);
        break;
      }
  }
  status[2] = status[0] != 0 ? 0.0 : (max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0);
}

}  // namespace cpu

namespace {

// The flat spans of xs (undefined tensors: empty spans); all on `device`.
TensorTable table_of(const std::vector<Tensor>& xs, Device device, const char* op) {
  TensorTable table;
  for (const Tensor& x : xs) {
    if (!x.defined()) {
      table.push_back({});
      continue;
    }
    HLA_CHECK(x.device() == device, op, ": tensor ", x.str(), " is not on ", device == Device::CUDA ? "cuda" : "cpu");
    table.push_back({const_cast<void*>(x.raw()), x.numel(), x.dtype()});
  }
  return table;
}

void check_f64(const Tensor& t, int64_t min_numel, Device device, const char* op, const char* name) {
  HLA_CHECK(t.dtype() == DType::F64 && t.numel() >= min_numel && t.device() == device, op, ": ", name,
            " must be F64 with at least ", min_numel, " values on the step's device, got ", t.str());
}

}  // namespace

Tensor multi_sq_norm(const std::vector<Tensor>& xs, Device device) {
  const TensorTable table = table_of(xs, device, "multi_sq_norm");
  Tensor sums = Tensor::empty({static_cast<int64_t>(xs.size()) + 1}, DType::F64, device);  // sums: (n + 1)
  if (device == Device::CUDA) HLA_CUDA_ONLY(cuda::multi_sq_norm(sums.data<double>(), table));
  else cpu::multi_sq_norm(sums.data<double>(), table);
  return sums;
}

void multi_scale_(const std::vector<Tensor>& xs, const Tensor& factor) {
  check_f64(factor, 1, factor.device(), "multi_scale_", "factor");
  const TensorTable table = table_of(xs, factor.device(), "multi_scale_");
  if (factor.is_cuda()) HLA_CUDA_ONLY(cuda::multi_scale(table, factor.data<double>()));
  else cpu::multi_scale(table, factor.data<double>());
}

void accumulate_loss(Tensor& records, int64_t slot, const Tensor& loss, const Tensor& weight) {
  HLA_CHECK(slot >= 0 && records.dim() == 2 && slot < records.size(0) && records.size(1) == kStepRecordSize,
            "accumulate_loss: slot ", slot, " is not a row of records ", records.str());
  check_f64(records, kStepRecordSize, loss.device(), "accumulate_loss", "records");
  HLA_CHECK(loss.numel() == 1, "accumulate_loss: the loss must be one value, got ", loss.str());
  check_f64(weight, 1, loss.device(), "accumulate_loss", "weight");
  double* record = records.data<double>() + slot * kStepRecordSize;
  if (loss.is_cuda()) HLA_CUDA_ONLY(cuda::accumulate_loss(record, loss.raw(), loss.dtype(), weight.data<double>()));
  else cpu::accumulate_loss(record, loss.raw(), loss.dtype(), weight.data<double>());
}

void finish_step(Tensor& records, int64_t slot, Tensor& status, const Tensor& sums, double max_norm, const Tensor& step) {
  HLA_CHECK(slot >= 0 && records.dim() == 2 && slot < records.size(0) && records.size(1) == kStepRecordSize,
            "finish_step: slot ", slot, " is not a row of records ", records.str());
  const Device device = records.device();
  check_f64(status, kStepStatusSize, device, "finish_step", "status");
  check_f64(sums, 1, device, "finish_step", "sums");
  check_f64(step, 1, device, "finish_step", "step");
  double* record = records.data<double>() + slot * kStepRecordSize;
  const int64_t n = sums.numel() - 1;
  if (device == Device::CUDA)
    HLA_CUDA_ONLY(cuda::finish_step(record, status.data<double>(), sums.data<double>(), n, max_norm, step.data<double>()));
  else cpu::finish_step(record, status.data<double>(), sums.data<double>(), n, max_norm, step.data<double>());
}

}  // namespace hla
