// The last n inputs of each right-padded sequence (nn/ops/last_tokens.h) on the GPU: one thread
// per output element (b, c, j), a grid-stride loop.
#include "cuda/common.cuh"
#include "cuda/last_tokens.h"

namespace hla::cuda {
namespace {

template <class T>
__global__ void last_tokens_kernel(T* out, const T* x, const int32_t* lengths, int64_t B, int64_t steps, int64_t C,
                                   int64_t n) {
  HLA_GRID_STRIDE(idx, B * C * n) {
    const int64_t j = idx % n, c = (idx / n) % C, b = idx / (n * C);
    const int64_t t = lengths[b] - n + j;  // the token of tail column j
    out[idx] = t >= 0 ? x[(b * steps + t) * C + c] : from_float<T>(0.0f);
  }
}

}  // namespace

void last_tokens_forward(void* out, const void* x, const int32_t* lengths, int64_t B, int64_t T, int64_t C, int64_t n,
                         DType dtype) {
  launch_elementwise(dtype, "last_tokens", B * C * n, [&](auto tag) {
    using S = decltype(tag);
    last_tokens_kernel<S><<<grid_1d(B * C * n), 256>>>(static_cast<S*>(out), static_cast<const S*>(x), lengths, B, T,
                                                       C, n);
  });
}

}  // namespace hla::cuda
