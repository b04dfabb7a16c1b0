// Rotate-half RoPE forward (rotation by phi) and backward (rotation by -phi) on the GPU,
// mixers.md 2.9, the same lines as nn/ops/rope.cpp.
//
// One thread per (b, t, i) channel pair index, looping over the H heads: the angle
// phi = p * theta^(-2i/D), p = position_offset + positions[b] + t (positions null: 0) or, per
// token, positions[b * T + t], and its sine and cosine are computed once and reused by every head; consecutive threads take consecutive i, so loads and stores are
// coalesced along the head dim. The angle and its sine/cosine are computed in fp64: at positions
// in the thousands an fp32 angle is off by ~1e-4 rad, more than the fp32 check allows, while
// the rotation itself runs in fp32.
#include "cuda/common.cuh"
#include "cuda/rope.h"

namespace hla::cuda {
namespace {

// x, y: (B, T, H, D); BT = B * T; direction +1 = forward, -1 = inverse (the backward).
// positions: (B) per-sequence offsets, (B, T) per-token positions (per_token), or null.
template <class T>
__global__ void rotate_half_kernel(T* y, const T* x, int64_t BT, int64_t seq_len, int H, int D, double theta,
                                   int64_t position_offset, const int32_t* positions, bool per_token,
                                   float direction) {
  const int half = D / 2;
  HLA_GRID_STRIDE(idx, BT * half) {
    const int i = static_cast<int>(idx % half);
    const int64_t bt = idx / half;  // b * T + t
    const int64_t start = position_offset + (positions && !per_token ? positions[bt / seq_len] : 0);
    const double p = static_cast<double>(per_token ? positions[bt] : start + bt % seq_len);  // position of token t
    const double inv_freq = 1.0 / pow(theta, 2.0 * i / D);                 // theta^(-2i/D)
    double sin_phi, cos_phi;
    sincos(p * inv_freq, &sin_phi, &cos_phi);
    const float c = static_cast<float>(cos_phi), s = direction * static_cast<float>(sin_phi);
    for (int h = 0; h < H; h++) {
      const int64_t row = (bt * H + h) * D;  // x, y of (b, t, h) start here
      const float x1 = to_float(x[row + i]), x2 = to_float(x[row + i + half]);
      y[row + i] = from_float<T>(x1 * c - x2 * s);         // y_i       = x_i cos - x_{i+D/2} sin
      y[row + i + half] = from_float<T>(x1 * s + x2 * c);  // y_{i+D/2} = x_i sin + x_{i+D/2} cos
    }
  }
}

void rotate_half(void* y, const void* x, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                 int64_t position_offset, const int32_t* positions, bool per_token, float direction, DType dtype,
                 const char* op) {
  const int64_t pairs = B * T * (D / 2);  // threads' work items: (b, t, i)
  if (pairs == 0 || H == 0) return;
  dispatch_storage(dtype, op, [&](auto tag) {
    using S = decltype(tag);
    rotate_half_kernel<S><<<grid_1d(pairs), 256>>>(static_cast<S*>(y), static_cast<const S*>(x), B * T, T,
                                                   static_cast<int>(H), static_cast<int>(D), theta, position_offset,
                                                   positions, per_token, direction);
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
