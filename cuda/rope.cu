// Rotate-half RoPE forward (rotation by phi) and backward (rotation by -phi) on the GPU,
// mixers.md 2.9, the same lines as nn/ops/rope.cpp.
//
// One thread per (b, t) token, group of kHeadsPerThread heads and group of W consecutive pair
// indices i (W = 8 bf16 or 4 fp32 when D/2 is a multiple of that and the pointers are aligned:
// 16-byte loads of x_i and x_{i+D/2}; else W = 1), looping over its heads: the angles
// phi = p * theta^(-2i/D), p = position_offset + positions[b] + t (positions null: 0) or, per
// token, positions[b * T + t], and their sines and cosines are computed once and reused by the
// thread's heads. A group of heads rather than all H: with 16 heads a thread, the 374M
// Transformer's rope ran 256 blocks (~2 an SM) at ~3 TB/s (ncu, f0ed7fd). Each block first
// writes inv_freq = theta^(-2i/D) of the D/2 columns into shared memory.
//
// Angle precision follows the storage: bf16 runs take fp32 angles the way HF / fla do (inv_freq in
// fp32, phi = p * inv_freq, sincosf): over positions 0..4095 at D = 64, phi is off by up to
// 1.5e-4 rad and y by 1.5e-5 relative RMS against fp64 angles, far inside bf16's rounding (~3e-3).
// fp32 runs keep fp64 angles: there 1.5e-5 would already fail the fp32 check (1e-5) against the
// fp64 reference. The rotation itself runs in fp32.
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/rope.h"

namespace hla::cuda {
namespace {

template <class T> using AngleOf = std::conditional_t<std::is_same_v<T, float>, double, float>;
constexpr int kHeadsPerThread = 4;

__device__ __forceinline__ void sin_cos(float phi, float* s, float* c) { sincosf(phi, s, c); }
__device__ __forceinline__ void sin_cos(double phi, double* s, double* c) { sincos(phi, s, c); }

// x, y: (B, T, H, D); BT = B * T; direction +1 = forward, -1 = inverse (the backward).
// positions: (B) per-sequence offsets, (B, T) per-token positions (per_token), or null.
// Dynamic shared memory: D/2 angles (AngleOf<T>).
template <class T, int W>
__global__ void rotate_half_kernel(T* y, const T* x, int64_t BT, int64_t seq_len, int H, int D, double theta,
                                   int64_t position_offset, const int32_t* positions, bool per_token,
                                   float direction) {
  using Angle = AngleOf<T>;
  extern __shared__ double inv_freq_storage[];
  Angle* inv_freq = reinterpret_cast<Angle*>(inv_freq_storage);  // inv_freq: (D/2) theta^(-2i/D)
  const int half = D / 2, groups = half / W, head_groups = (H + kHeadsPerThread - 1) / kHeadsPerThread;
  for (int i = threadIdx.x; i < half; i += blockDim.x)
    inv_freq[i] = Angle(1) / pow(static_cast<Angle>(theta), static_cast<Angle>(2 * i) / static_cast<Angle>(D));
  __syncthreads();
  HLA_GRID_STRIDE(idx, BT * head_groups * groups) {
    const int i0 = static_cast<int>(idx % groups) * W;  // pair indices i0 .. i0 + W
    const int64_t token_heads = idx / groups;
    const int h0 = static_cast<int>(token_heads % head_groups) * kHeadsPerThread;  // heads h0 .. h0 + kHeadsPerThread
    const int64_t bt = token_heads / head_groups;                                  // b * T + t
    const int64_t start = position_offset + (positions && !per_token ? positions[bt / seq_len] : 0);
    const Angle p = static_cast<Angle>(per_token ? positions[bt] : start + bt % seq_len);  // position of token t
    float c[W], s[W];
#pragma unroll
    for (int k = 0; k < W; k++) {
      Angle sin_phi, cos_phi;
      sin_cos(p * inv_freq[i0 + k], &sin_phi, &cos_phi);
      c[k] = static_cast<float>(cos_phi);
      s[k] = direction * static_cast<float>(sin_phi);
    }
#pragma unroll
    for (int h = h0; h < h0 + kHeadsPerThread; h++) {
      if (h >= H) break;
      const int64_t row = (bt * H + h) * D;  // x, y of (b, t, h) start here
      float x1[W], x2[W], y1[W], y2[W];
      load_floats(x1, x + row + i0);
      load_floats(x2, x + row + half + i0);
#pragma unroll
      for (int k = 0; k < W; k++) {
        y1[k] = x1[k] * c[k] - x2[k] * s[k];  // y_i       = x_i cos - x_{i+D/2} sin
        y2[k] = x1[k] * s[k] + x2[k] * c[k];  // y_{i+D/2} = x_i sin + x_{i+D/2} cos
      }
      store_floats(y + row + i0, y1);
      store_floats(y + row + half + i0, y2);
    }
  }
}

void rotate_half(void* y, const void* x, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                 int64_t position_offset, const int32_t* positions, bool per_token, float direction, DType dtype,
                 const char* op) {
  const int64_t half = D / 2;
  if (B * T * half == 0 || H == 0) return;
  dispatch_storage(dtype, op, [&](auto tag) {
    using S = decltype(tag);
    const size_t smem = static_cast<size_t>(half) * sizeof(AngleOf<S>);
    HLA_CHECK(smem <= 48 * 1024, op, ": D = ", D, " is too wide for the shared-memory angle table");
    auto launch = [&](auto width) {
      constexpr int W = decltype(width)::value;
      const int64_t head_groups = (H + kHeadsPerThread - 1) / kHeadsPerThread;
      rotate_half_kernel<S, W><<<grid_1d(B * T * head_groups * (half / W)), 256, smem>>>(
          static_cast<S*>(y), static_cast<const S*>(x), B * T, T, static_cast<int>(H), static_cast<int>(D), theta,
          position_offset, positions, per_token, direction);
    };
    if (half % kVecWidth<S> == 0) dispatch_width<S>(launch, y, x);
    else launch(Width<1>{});
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_forward(void* y, const void* x, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                  int64_t position_offset, DType dtype) {
  rotate_half(y, x, B, T, H, D, theta, position_offset, nullptr, false, 1.0f, dtype, "rope_forward");
}

// y = R(phi) x with R orthogonal  =>  dx = R(phi)^T dy = R(-phi) dy
void rope_backward(void* dx, const void* dy, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                   int64_t position_offset, DType dtype) {
  rotate_half(dx, dy, B, T, H, D, theta, position_offset, nullptr, false, -1.0f, dtype, "rope_backward");
}

void rope_forward_at(void* y, const void* x, const int32_t* positions, bool per_token, int64_t B, int64_t T, int64_t H,
                     int64_t D, double theta, DType dtype) {
  rotate_half(y, x, B, T, H, D, theta, 0, positions, per_token, 1.0f, dtype, "rope_forward_at");
}

void rope_backward_at(void* dx, const void* dy, const int32_t* positions, bool per_token, int64_t B, int64_t T,
                      int64_t H, int64_t D, double theta, DType dtype) {
  rotate_half(dx, dy, B, T, H, D, theta, 0, positions, per_token, -1.0f, dtype, "rope_backward_at");
}

}  // namespace hla::cuda
