// mul_broadcast / add_broadcast and split_last on the GPU (nn/ops/arith.cpp).
//
// Broadcast: x viewed as (outer, S, inner), y[o, i, j] = x[o, i, j] (*|+) s[i]. The forward is
// elementwise. In the backward, ds[i] sums over the outer * inner items of entry i, which may be
// few (a per-token scalar: outer = 1) or millions (a learned scalar: S = 1). The items of each
// entry are cut into segments of at least kMinSegment items, at most kMaxParts per entry; one warp
// per segment writes dx for its items and one fp32 partial sum, and cuda/reduce.cuh sums each
// entry's partials in a fixed order into ds (deterministic, no atomics).
//
// split_last: each piece is a strided 2-D copy, cudaMemcpy2DAsync on the one stream.
#include "cuda/arith.h"
#include "cuda/reduce.cuh"

namespace hla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = 8;
constexpr int64_t kMinSegment = 1024;  // items per warp segment, at least
constexpr int64_t kMaxParts = 4096;    // segments per entry s[i], at most

// y, x: (outer, S, inner) = (n), s: (S)
template <class T>
__global__ void broadcast_forward_kernel(T* y, const T* x, const T* s, int64_t S, int64_t inner, int64_t n,
                                         bool multiply) {
  HLA_GRID_STRIDE(k, n) {
    const float sv = to_float(s[(k / inner) % S]), xv = to_float(x[k]);
    y[k] = from_float<T>(multiply ? xv * sv : xv + sv);
  }
}

// Warp w takes segment (i, part) = (w / parts, w % parts): the items k in [part * seg, (part + 1) * seg)
// of entry i, item k = (o, j) = (k / inner, k % inner). It writes dx for them and
// partial[i, part] (partial: (S, parts)).
template <class T>
__global__ void broadcast_backward_kernel(T* dx, float* partial, const T* dy, const T* x, const T* s, int64_t S,
                                          int64_t inner, int64_t items, int64_t seg, int64_t parts, bool multiply) {
  const int lane = threadIdx.x % 32;
  const int64_t segments = S * parts, warps = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32; w < segments; w += warps) {
    const int64_t i = w / parts, part = w % parts, k_end = std::min(items, (part + 1) * seg);
    const float sv = to_float(s[i]);
    float acc = 0;
    for (int64_t k = part * seg + lane; k < k_end; k += 32) {
      const int64_t o = k / inner, j = k % inner, n = (o * S + i) * inner + j;
      const float g = to_float(dy[n]);
      dx[n] = from_float<T>(multiply ? g * sv : g);  // y = x * s => dx = dy * s ;  y = x + s => dx = dy
      acc += multiply ? g * to_float(x[n]) : g;      // ds = sum dy * x           ;  ds = sum dy
    }
    acc = warp_sum(acc);
    if (lane == 0) partial[w] = acc;
  }
}

}  // namespace

void broadcast_forward(void* y, const void* x, const void* s, int64_t outer, int64_t S, int64_t inner, bool multiply,
                       DType dtype) {
  const int64_t n = outer * S * inner;
  launch_elementwise(dtype, "broadcast_forward", n, [&](auto tag) {
    using T = decltype(tag);
    broadcast_forward_kernel<T><<<grid_1d(n), kThreads>>>(static_cast<T*>(y), static_cast<const T*>(x),
                                                          static_cast<const T*>(s), S, inner, n, multiply);
  });
}

void broadcast_backward(void* dx, void* ds, const void* dy, const void* x, const void* s, int64_t outer, int64_t S,
                        int64_t inner, bool multiply, DType dtype) {
  const int64_t items = outer * inner;  // items per entry s[i]
  if (items * S == 0) return write_zeros(ds, S, dtype);  // nothing to sum: ds = 0
  const int64_t seg = std::max(kMinSegment, (items + kMaxParts - 1) / kMaxParts);
  const int64_t parts = (items + seg - 1) / seg;
  FloatScratch partial(S * parts);  // partial: (S, parts)
  const int64_t warps = S * parts;  // one per segment
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock, 65535));
  dispatch_storage(dtype, "broadcast_backward", [&](auto tag) {
    using T = decltype(tag);
    broadcast_backward_kernel<T><<<blocks, 32 * kWarpsPerBlock>>>(
        static_cast<T*>(dx), partial.get(), static_cast<const T*>(dy), static_cast<const T*>(x),
        static_cast<const T*>(s), S, inner, items, seg, parts, multiply);
    CUDA_CHECK_LAUNCH();
    write_group_sums(static_cast<T*>(ds), partial.get(), 1, S, parts);  // ds[i] = sum_part partial[i, part]
  });
}

void copy_columns(void* dst, const void* src, int64_t rows, int64_t C, int64_t begin, int64_t width,
                  size_t elem_size, bool gather) {
  if (rows == 0 || width == 0) return;
  const size_t piece_pitch = static_cast<size_t>(width) * elem_size, wide_pitch = static_cast<size_t>(C) * elem_size;
  const size_t offset = static_cast<size_t>(begin) * elem_size;
  if (gather)  // dst (rows, width) = src[:, begin : begin + width]
    CUDA_CHECK(cudaMemcpy2DAsync(dst, piece_pitch, static_cast<const char*>(src) + offset, wide_pitch, piece_pitch,
                                 static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, 0));
  else  // dst[:, begin : begin + width] = src (rows, width)
    CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(dst) + offset, wide_pitch, src, piece_pitch, piece_pitch,
                                 static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, 0));
}

}  // namespace hla::cuda
