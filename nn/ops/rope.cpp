// Rotate-half RoPE forward (rotation by phi) and backward (rotation by -phi), mixers.md 2.9.
#include "nn/ops/rope.h"

#include <cmath>

#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/rope.h"
#endif

namespace hla {
namespace cpu {
namespace {

// Rotates every (i, i + D/2) channel pair of x by direction * phi_{p,i} into y, p the position
// of the token: position_offset + t, or token_positions[b * T + t] when given.
// x, y: (B, T, H, D); direction +1 = forward, -1 = inverse (the backward).
template <class Real>
void rotate_half(Real* y, const Real* x, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                 int64_t position_offset, const int32_t* token_positions, Real direction) {
  const int64_t half = D / 2;
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      const Real p = static_cast<Real>(token_positions ? token_positions[b * T + t] : position_offset + t);
      for (int64_t i = 0; i < half; i++) {
        const Real inv_freq = Real(1) / std::pow(static_cast<Real>(theta), Real(2 * i) / Real(D));  // theta^(-2i/D)
        const Real phi = p * inv_freq;
        const Real c = std::cos(phi), s = direction * std::sin(phi);
        for (int64_t h = 0; h < H; h++) {
          const Real* xr = x + ((b * T + t) * H + h) * D;  // xr: (D)
          Real* yr = y + ((b * T + t) * H + h) * D;        // yr: (D)
          const Real x1 = xr[i], x2 = xr[i + half];
          yr[i] = x1 * c - x2 * s;         // y_i       = x_i cos - x_{i+D/2} sin
          yr[i + half] = x1 * s + x2 * c;  // y_{i+D/2} = x_i sin + x_{i+D/2} cos
        }
      }
    }
}

}  // namespace

template <class Real>
void rope_forward(Real* y, const Real* x, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                  int64_t position_offset) {
  rotate_half(y, x, B, T, H, D, theta, position_offset, nullptr, Real(1));
}

// y = R(phi) x with R orthogonal  =>  dx = R(phi)^T dy = R(-phi) dy
template <class Real>
void rope_backward(Real* dx, const Real* dy, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                   int64_t position_offset) {
  rotate_half(dx, dy, B, T, H, D, theta, position_offset, nullptr, Real(-1));
}

template void rope_forward<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t, double, int64_t);
template void rope_forward<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t, double, int64_t);
template void rope_backward<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t, double, int64_t);
template void rope_backward<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t, double, int64_t);

// Per sequence (positions (B)): sequence b is a batch of one starting at positions[b]; per
// token (positions (B, T)): token t of sequence b at positions[b * T + t].
template <class Real>
void rope_forward_at(Real* y, const Real* x, const int32_t* positions, bool per_token, int64_t B, int64_t T, int64_t H,
                     int64_t D, double theta) {
  if (per_token) return rotate_half(y, x, B, T, H, D, theta, 0, positions, Real(1));
  const int64_t seq = T * H * D;  // elements of one sequence
  for (int64_t b = 0; b < B; b++)
    rotate_half(y + b * seq, x + b * seq, 1, T, H, D, theta, positions[b], nullptr, Real(1));
}

template <class Real>
void rope_backward_at(Real* dx, const Real* dy, const int32_t* positions, bool per_token, int64_t B, int64_t T,
                      int64_t H, int64_t D, double theta) {
  if (per_token) return rotate_half(dx, dy, B, T, H, D, theta, 0, positions, Real(-1));
  const int64_t seq = T * H * D;
  for (int64_t b = 0; b < B; b++)
    rotate_half(dx + b * seq, dy + b * seq, 1, T, H, D, theta, positions[b], nullptr, Real(-1));
}

template void rope_forward_at<float>(float*, const float*, const int32_t*, bool, int64_t, int64_t, int64_t, int64_t,
                                     double);
template void rope_forward_at<double>(double*, const double*, const int32_t*, bool, int64_t, int64_t, int64_t,
                                      int64_t, double);
template void rope_backward_at<float>(float*, const float*, const int32_t*, bool, int64_t, int64_t, int64_t, int64_t,
                                      double);
template void rope_backward_at<double>(double*, const double*, const int32_t*, bool, int64_t, int64_t, int64_t,
                                       int64_t, double);

}  // namespace cpu

// One rotation for both devices: cpu:: or cuda::, forward (direction +1) or backward (-1), at
// position_offset + t, or when positions is defined at positions[b] + t (positions (B)) or at
// positions[b, t] (positions (B, T)). x, y: (B, T, H, D)
static void rotate(Tensor& y, const Tensor& x, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                   int64_t position_offset, const Tensor& positions, int direction) {
  const bool fwd = direction > 0;
  const int32_t* pos = data_or_null<int32_t>(positions);
  const bool per_token = positions.defined() && positions.dim() == 2;
  if (x.is_cuda()) {
#ifdef HLA_CUDA
    if (pos)
      (fwd ? cuda::rope_forward_at : cuda::rope_backward_at)(y.raw(), x.raw(), pos, per_token, B, T, H, D, theta,
                                                             x.dtype());
    else (fwd ? cuda::rope_forward : cuda::rope_backward)(y.raw(), x.raw(), B, T, H, D, theta, position_offset, x.dtype());
#else
    fail("rope: this operation needs a CUDA build of hla");
#endif
    return;
  }
  dispatch_float(x.dtype(), "rope", [&](auto tag) {
    using Real = decltype(tag);
    if (pos)
      (fwd ? cpu::rope_forward_at<Real> : cpu::rope_backward_at<Real>)(y.data<Real>(), x.data<Real>(), pos, per_token,
                                                                       B, T, H, D, theta);
    else (fwd ? cpu::rope_forward<Real> : cpu::rope_backward<Real>)(y.data<Real>(), x.data<Real>(), B, T, H, D, theta, position_offset);
  });
}

static Var rope_op(const Var& x, double theta, int64_t position_offset, const Tensor& positions) {
  HLA_CHECK(x.dim() == 4, "rope: x must be (B, T, H, D), got ", x.value().str());
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3);
  HLA_CHECK(D % 2 == 0, "rope: head dim D must be even (rotate-half pairs i with i + D/2), got ", D);
  HLA_CHECK(theta > 0, "rope: theta must be > 0, got ", theta);
  if (positions.defined()) {
    if (positions.dim() == 2) check_shape(positions, {B, T}, "rope", "positions");
    else check_shape(positions, {B}, "rope", "positions");
    check_dtype(positions, DType::I32, "rope", "positions");
    HLA_CHECK(positions.device() == x.device(), "rope: positions ", positions.str(), " is not on the device of x ",
              x.value().str());
  }
  Tensor xv = x.value();
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), xv.device());  // y: (B, T, H, D)
  rotate(y, xv, B, T, H, D, theta, position_offset, positions, +1);
  return record_op1(y, {x}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(g[0].shape(), g[0].dtype(), g[0].device());
    rotate(dx, g[0], B, T, H, D, theta, position_offset, positions, -1);
    return std::vector<Tensor>{dx};
  }, "rope");
}

Var rope(const Var& x, double theta, int64_t position_offset) { return rope_op(x, theta, position_offset, Tensor()); }

Var rope(const Var& x, double theta, const Tensor& positions) {
  HLA_CHECK(positions.defined(), "rope: positions is undefined");
  return rope_op(x, theta, 0, positions);
}

}  // namespace hla
