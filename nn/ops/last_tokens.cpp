// The last n inputs of each right-padded sequence (see last_tokens.h).
#include "nn/ops/last_tokens.h"

#include "nn/ops/check.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/last_tokens.h"
#endif

namespace hla {
namespace cpu {

template <class Real>
void last_tokens_forward(Real* out, const Real* x, const int32_t* lengths, int64_t B, int64_t T, int64_t C, int64_t n) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t j = 0; j < n; j++) {
        const int64_t t = lengths[b] - n + j;  // the token of tail column j
        out[(b * C + c) * n + j] = t >= 0 ? x[(b * T + t) * C + c] : Real(0);
      }
}

template void last_tokens_forward<float>(float*, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t);
template void last_tokens_forward<double>(double*, const double*, const int32_t*, int64_t, int64_t, int64_t, int64_t);

}  // namespace cpu

Tensor last_tokens(const Tensor& x, const Tensor& lengths, int64_t n) {
  const char* op = "last_tokens";
  HLA_CHECK(x.dim() == 3, op, ": x must be (B, T, C), got ", x.str());
  HLA_CHECK(n >= 1, op, ": n must be >= 1, got ", n);
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  check_shape(lengths, {B}, op, "lengths");
  check_dtype(lengths, DType::I32, op, "lengths");
  HLA_CHECK(lengths.device() == x.device(), op, ": lengths ", lengths.str(), " is not on the device of x ", x.str());
  Tensor out = Tensor::empty({B, C, n}, x.dtype(), x.device());  // out: (B, C, n)
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::last_tokens_forward(out.raw(), x.raw(), lengths.data<int32_t>(), B, T, C, n, x.dtype()));
    return out;
  }
  const int32_t* len = lengths.data<int32_t>();
  for (int64_t b = 0; b < B; b++)
    HLA_CHECK(len[b] >= 1 && len[b] <= T, op, ": lengths[", b, "] is ", len[b], ", must be in [1, ", T, "]");
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using Real = decltype(tag);
    cpu::last_tokens_forward(out.data<Real>(), x.data<Real>(), len, B, T, C, n);
  });
  return out;
}

}  // namespace hla
