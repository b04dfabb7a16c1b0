// Row argmax over a width per row (see argmax.h). The CPU reference is the sequential scan.
#include "nn/ops/argmax.h"

#include <algorithm>

#include "nn/ops/check.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/argmax.h"
#endif

namespace hla {
namespace cpu {

template <class Real>
void argmax_rows_forward(int32_t* ids, const Real* z, const int32_t* widths, int64_t B, int64_t V) {
  for (int64_t b = 0; b < B; b++) {
    const Real* row = z + b * V;  // row: (V)
    ids[b] = static_cast<int32_t>(std::max_element(row, row + widths[b]) - row);  // the first maximum
  }
}

template void argmax_rows_forward<float>(int32_t*, const float*, const int32_t*, int64_t, int64_t);
template void argmax_rows_forward<double>(int32_t*, const double*, const int32_t*, int64_t, int64_t);

}  // namespace cpu

Tensor argmax_rows(const Tensor& logits, const Tensor& widths) {
  const char* op = "argmax_rows";
  HLA_CHECK(logits.dim() == 2 && logits.size(1) >= 1, op, ": logits must be (B, V >= 1), got ", logits.str());
  const int64_t B = logits.size(0), V = logits.size(1);
  check_shape(widths, {B}, op, "widths");
  check_dtype(widths, DType::I32, op, "widths");
  HLA_CHECK(widths.device() == logits.device(), op, ": widths ", widths.str(), " is not on the device of logits ",
            logits.str());
  Tensor ids = Tensor::empty({B}, DType::I32, logits.device());  // ids: (B)
  if (logits.is_cuda()) {
    HLA_CUDA_ONLY(cuda::argmax_rows_forward(ids.data<int32_t>(), logits.raw(), widths.data<int32_t>(), B, V,
                                            logits.dtype()));
    return ids;
  }
  const int32_t* w = widths.data<int32_t>();
  for (int64_t b = 0; b < B; b++)
    HLA_CHECK(w[b] >= 1 && w[b] <= V, op, ": widths[", b, "] is ", w[b], ", must be in [1, ", V, "]");
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using Real = decltype(tag);
    cpu::argmax_rows_forward(ids.data<int32_t>(), logits.data<Real>(), w, B, V);
  });
  return ids;
}

}  // namespace hla
