// The token moves of packed documents' chunk-aligned layout (nn/ops/document_chunks.h) on the
// GPU: one thread per element of the (B, Tp, inner) side, a grid-stride loop. Every token has
// exactly one place, so the scatter writes each output element once.
#include "cuda/common.cuh"
#include "cuda/document_chunks.h"

namespace hla::cuda {
namespace {

// gather: out (B, Tp, inner) = x[index] or 0;  scatter: out (B, T, inner) at index = y (B, Tp, inner)
template <class S, bool kGather>
__global__ void move_tokens_kernel(S* out, const S* in, const int32_t* index, int64_t B, int64_t T, int64_t Tp,
                                   int64_t inner) {
  HLA_GRID_STRIDE(idx, B * Tp * inner) {
    const int64_t i = idx % inner, place = idx / inner, b = place / Tp;
    const int32_t t = index[place];
    if constexpr (kGather) out[idx] = t >= 0 ? in[(b * T + t) * inner + i] : from_float<S>(0.0f);
    else if (t >= 0) out[(b * T + t) * inner + i] = in[idx];
  }
}

template <bool kGather>
void move_tokens(void* out, const void* in, const int32_t* index, int64_t B, int64_t T, int64_t Tp, int64_t inner,
                 DType dtype) {
  const int64_t n = B * Tp * inner;
  launch_elementwise(dtype, kGather ? "gather_tokens" : "scatter_tokens", n, [&](auto tag) {
    using S = decltype(tag);
    move_tokens_kernel<S, kGather><<<grid_1d(n), 256>>>(static_cast<S*>(out), static_cast<const S*>(in), index, B, T,
                                                        Tp, inner);
  });
}

}  // namespace

void gather_tokens_forward(void* out, const void* x, const int32_t* index, int64_t B, int64_t T, int64_t Tp,
                           int64_t inner, DType dtype) {
  move_tokens<true>(out, x, index, B, T, Tp, inner, dtype);
}

void scatter_tokens_forward(void* out, const void* y, const int32_t* index, int64_t B, int64_t T, int64_t Tp,
                            int64_t inner, DType dtype) {
  move_tokens<false>(out, y, index, B, T, Tp, inner, dtype);
}

}  // namespace hla::cuda
