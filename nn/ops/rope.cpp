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

// Rotates every (i, i + D/2) channel pair of x by direction * phi_{p,i} into y.
// x, y: (B, T, H, D); direction +1 = forward, -1 = inverse (the backward).
template <class Real>
void rotate_half(Real* y, const Real* x, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                 int64_t position_offset, Real direction) {
  const int64_t half = D / 2;
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      const Real p = static_cast<Real>(position_offset + t);  // position of token t
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
  rotate_half(y, x, B, T, H, D, theta, position_offset, Real(1));
}

// y = R(phi) x with R orthogonal  =>  dx = R(phi)^T dy = R(-phi) dy
template <class Real>
void rope_backward(Real* dx, const Real* dy, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                   int64_t position_offset) {
  rotate_half(dx, dy, B, T, H, D, theta, position_offset, Real(-1));
}

template void rope_forward<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t, double, int64_t);
template void rope_forward<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t, double, int64_t);
template void rope_backward<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t, double, int64_t);
template void rope_backward<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t, double, int64_t);

}  // namespace cpu

// One forward for both devices: cpu::rope_forward<Real> or cuda::rope_forward.
// x, y: (B, T, H, D)
static void rope_forward(Tensor& y, const Tensor& x, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                         int64_t position_offset) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::rope_forward(y.raw(), x.raw(), B, T, H, D, theta, position_offset, x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), "rope", [&](auto tag) {
    using Real = decltype(tag);
    cpu::rope_forward(y.data<Real>(), x.data<Real>(), B, T, H, D, theta, position_offset);
  });
}

// One backward for both devices; dx: (B, T, H, D) written.
static void rope_backward(Tensor& dx, const Tensor& dy, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                          int64_t position_offset) {
  if (dy.is_cuda()) {
    HLA_CUDA_ONLY(cuda::rope_backward(dx.raw(), dy.raw(), B, T, H, D, theta, position_offset, dy.dtype()));
    return;
  }
  dispatch_float(dy.dtype(), "rope", [&](auto tag) {
    using Real = decltype(tag);
    cpu::rope_backward(dx.data<Real>(), dy.data<Real>(), B, T, H, D, theta, position_offset);
  });
}

Var rope(const Var& x, double theta, int64_t position_offset) {
  HLA_CHECK(x.dim() == 4, "rope: x must be (B, T, H, D), got ", x.value().str());
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3);
  HLA_CHECK(D % 2 == 0, "rope: head dim D must be even (rotate-half pairs i with i + D/2), got ", D);
  HLA_CHECK(theta > 0, "rope: theta must be > 0, got ", theta);
  Tensor xv = x.value();
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), xv.device());  // y: (B, T, H, D)
  rope_forward(y, xv, B, T, H, D, theta, position_offset);
  return record_op1(y, {x}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(g[0].shape(), g[0].dtype(), g[0].device());
    rope_backward(dx, g[0], B, T, H, D, theta, position_offset);
    return std::vector<Tensor>{dx};
  }, "rope");
}

}  // namespace hla
