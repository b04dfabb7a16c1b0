// RWKV-6 token shift, static lerp and data-dependent lerp (ddlerp), forward and backward
// (mixers.md 2.7 and 11). The ddlerp's five low-rank maps are column blocks of one weight
// (fla's einsum 'b t n r, h n r -> b t n h'), done here as N small Eigen products.
#include "nn/ops/token_shift.h"

#include <Eigen/Dense>
#include <initializer_list>
#include <utility>

#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/token_shift.h"
#endif

namespace hla {
namespace cpu {

template <class T>
void token_shift_forward(T* delta, T* last, const T* x, const T* state, int64_t B, int64_t L, int64_t D) {
  for (int64_t b = 0; b < B; b++) {
    for (int64_t t = 0; t < L; t++)
      for (int64_t d = 0; d < D; d++) {
        T prev = t > 0 ? x[(b * L + t - 1) * D + d] : (state ? state[b * D + d] : T(0));  // x_{t-1}
        delta[(b * L + t) * D + d] = prev - x[(b * L + t) * D + d];  // delta_t = x_{t-1} - x_t
      }
    for (int64_t d = 0; d < D; d++)  // last = x_L, or the state itself for an empty chunk
      last[b * D + d] = L > 0 ? x[(b * L + L - 1) * D + d] : (state ? state[b * D + d] : T(0));
  }
}

template <class T>
void token_shift_backward(T* dx, T* dstate, const T* ddelta, const T* dlast, int64_t B, int64_t L, int64_t D) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t d = 0; d < D; d++) {
      // x_t enters delta_t with -1 and delta_{t+1} with +1 (as x_{(t+1)-1}); x_L also is `last`
      for (int64_t t = 0; t < L; t++) {
        T next = t + 1 < L ? ddelta[(b * L + t + 1) * D + d] : dlast[b * D + d];
        dx[(b * L + t) * D + d] = -ddelta[(b * L + t) * D + d] + next;
      }
      if (dstate) dstate[b * D + d] = L > 0 ? ddelta[b * L * D + d] : dlast[b * D + d];  // state = x_0
    }
}

template <class T> void lerp_forward(T* y, const T* x, const T* delta, const T* mu, int64_t M, int64_t D) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t d = 0; d < D; d++) y[m * D + d] = x[m * D + d] + mu[d] * delta[m * D + d];  // y = x + mu * delta
}

template <class T>
void lerp_backward(T* dx, T* ddelta, T* dmu, const T* dy, const T* delta, const T* mu, int64_t M, int64_t D) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t d = 0; d < D; d++) {
      T g = dy[m * D + d];
      dx[m * D + d] = g;                    // y = x + ...        =>  dx = dy
      ddelta[m * D + d] = g * mu[d];        // y = ... mu * delta  =>  ddelta = dy * mu
      dmu[d] += g * delta[m * D + d];       //                        dmu = sum dy * delta
    }
}

namespace {
template <class T> using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T> using ConstMap = Eigen::Map<const RowMat<T>>;
template <class T> using MutMap = Eigen::Map<RowMat<T>>;

// m^n = tanh(zz_n) W2_n^T + 1 bias_n^T  : (M, D), with h_n = tanh(zz_n) : (M, R) returned too
template <class T>
RowMat<T> lowrank_mix(RowMat<T>& h, const ConstMap<T>& zzm, const ConstMap<T>& w2m, const ConstMap<T>& biasm,
                      int64_t n, int64_t R) {
  h = zzm.middleCols(n * R, R).array().tanh().matrix();
  RowMat<T> m = h * w2m.middleCols(n * R, R).transpose();
  m.rowwise() += biasm.row(n);
  return m;
}
}  // namespace

template <class T>
void ddlerp_forward(T* xi, const T* x, const T* delta, const T* zz, const T* w2, const T* bias, int64_t M,
                    int64_t D, int64_t N, int64_t R) {
  ConstMap<T> xm(x, M, D), dm(delta, M, D), zzm(zz, M, N * R), w2m(w2, D, N * R), biasm(bias, N, D);
  RowMat<T> h;  // h: (M, R)
  for (int64_t n = 0; n < N; n++) {
    RowMat<T> m = lowrank_mix(h, zzm, w2m, biasm, n, R);            // m^n: (M, D)
    MutMap<T>(xi + n * M * D, M, D) = xm + (m.array() * dm.array()).matrix();  // xi^n = x + m^n * delta
  }
}

template <class T>
void ddlerp_backward(T* dx, T* ddelta, T* dzz, T* dw2, T* dbias, const T* dxi, const T* delta, const T* zz,
                     const T* w2, const T* bias, int64_t M, int64_t D, int64_t N, int64_t R) {
  ConstMap<T> dm(delta, M, D), zzm(zz, M, N * R), w2m(w2, D, N * R), biasm(bias, N, D);
  MutMap<T> dxm(dx, M, D), ddm(ddelta, M, D), dzzm(dzz, M, N * R), dw2m(dw2, D, N * R), dbiasm(dbias, N, D);
  dxm.setZero();
  ddm.setZero();
  RowMat<T> h;  // h: (M, R)
  for (int64_t n = 0; n < N; n++) {
    RowMat<T> m = lowrank_mix(h, zzm, w2m, biasm, n, R);  // m^n: (M, D), recomputed
    ConstMap<T> g(dxi + n * M * D, M, D);                  // g = dxi^n: (M, D)
    // xi^n = x + m^n * delta  =>  dx += g, ddelta += g * m^n, dm^n = g * delta
    dxm += g;
    ddm += (g.array() * m.array()).matrix();
    RowMat<T> dmix = (g.array() * dm.array()).matrix();  // dm^n: (M, D)
    // m^n = h W2_n^T + bias_n  =>  dbias_n = colsum(dm^n), dW2_n = dm^n^T h, dh = dm^n W2_n
    dbiasm.row(n) += dmix.colwise().sum();
    dw2m.middleCols(n * R, R) += dmix.transpose() * h;
    // h = tanh(zz_n)  =>  dzz_n = dh * (1 - h^2)
    dzzm.middleCols(n * R, R) = ((dmix * w2m.middleCols(n * R, R)).array() * (T(1) - h.array().square())).matrix();
  }
}

template void token_shift_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t, int64_t);
template void token_shift_forward<double>(double*, double*, const double*, const double*, int64_t, int64_t, int64_t);
template void token_shift_backward<float>(float*, float*, const float*, const float*, int64_t, int64_t, int64_t);
template void token_shift_backward<double>(double*, double*, const double*, const double*, int64_t, int64_t, int64_t);
template void lerp_forward<float>(float*, const float*, const float*, const float*, int64_t, int64_t);
template void lerp_forward<double>(double*, const double*, const double*, const double*, int64_t, int64_t);
template void lerp_backward<float>(float*, float*, float*, const float*, const float*, const float*, int64_t, int64_t);
template void lerp_backward<double>(double*, double*, double*, const double*, const double*, const double*, int64_t,
                                    int64_t);
template void ddlerp_forward<float>(float*, const float*, const float*, const float*, const float*, const float*,
                                    int64_t, int64_t, int64_t, int64_t);
template void ddlerp_forward<double>(double*, const double*, const double*, const double*, const double*,
                                     const double*, int64_t, int64_t, int64_t, int64_t);
template void ddlerp_backward<float>(float*, float*, float*, float*, float*, const float*, const float*, const float*,
                                     const float*, const float*, int64_t, int64_t, int64_t, int64_t);
template void ddlerp_backward<double>(double*, double*, double*, double*, double*, const double*, const double*,
                                      const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                      int64_t);

}  // namespace cpu

#ifdef HLA_CUDA
// The same ops on the GPU (cuda/token_shift.cu): every operand in x's dtype, on the GPU.
static void check_cuda_operands(const char* op, DType dt,
                                std::initializer_list<std::pair<Tensor, const char*>> operands) {
  for (const auto& [t, name] : operands) {
    if (!t.defined()) continue;
    check_dtype(t, dt, op, name);
    HLA_CHECK(t.is_cuda(), op, ": x is on cuda but ", name, " is on the cpu");
  }
}

static TokenShiftOut token_shift_cuda(const Var& x, const Var& state) {
  int64_t B = x.size(0), L = x.size(1), D = x.size(2);
  Tensor xv = x.value();
  Tensor sv = state.defined() ? state.value() : Tensor();
  const DType dt = xv.dtype();
  check_cuda_operands("token_shift", dt, {{sv, "state"}});
  Tensor delta = Tensor::empty({B, L, D}, dt, Device::CUDA);  // delta: (B, L, D)
  Tensor last = Tensor::empty({B, D}, dt, Device::CUDA);      // last: (B, D)
  cuda::token_shift_forward(delta.raw(), last.raw(), xv.raw(), sv.defined() ? sv.raw() : nullptr, B, L, D, dt);
  bool has_state = sv.defined();
  std::vector<Var> outs = record_op({delta, last}, {x, state}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty({B, L, D}, dt, Device::CUDA);
    Tensor ds = has_state ? Tensor::empty({B, D}, dt, Device::CUDA) : Tensor();
    cuda::token_shift_backward(dx.raw(), ds.defined() ? ds.raw() : nullptr, g[0].raw(), g[1].raw(), B, L, D, dt);
    return std::vector<Tensor>{dx, ds};
  }, "token_shift");
  return {outs[0], outs[1]};
}

static Var lerp_cuda(const Var& x, const Var& delta, const Var& mu) {
  int64_t D = x.size(-1), M = x.numel() / D;
  Tensor xv = x.value(), dv = delta.value(), mv = mu.value();
  const DType dt = xv.dtype();
  check_cuda_operands("lerp", dt, {{dv, "delta"}, {mv, "mu"}});
  Tensor y = Tensor::empty(xv.shape(), dt, Device::CUDA);  // y: (..., D)
  cuda::lerp_forward(y.raw(), xv.raw(), dv.raw(), mv.raw(), M, D, dt);
  return record_op1(y, {x, delta, mu}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(dv.shape(), dt, Device::CUDA), ddelta = Tensor::empty(dv.shape(), dt, Device::CUDA);
    Tensor dmu = Tensor::zeros({D}, dt, Device::CUDA);
    cuda::lerp_backward(dx.raw(), ddelta.raw(), dmu.raw(), g[0].raw(), dv.raw(), mv.raw(), M, D, dt);
    return std::vector<Tensor>{dx, ddelta, dmu};
  }, "lerp");
}

static std::vector<Var> ddlerp_cuda(const Var& x, const Var& delta, const Var& zz, const Var& w2, const Var& bias,
                                    int64_t N, int64_t R) {
  int64_t B = x.size(0), L = x.size(1), D = x.size(2), M = B * L;
  Tensor xv = x.value(), dv = delta.value(), zv = zz.value(), wv = w2.value(), bv = bias.value();
  const DType dt = xv.dtype();
  check_cuda_operands("ddlerp", dt, {{dv, "delta"}, {zv, "zz"}, {wv, "w2"}, {bv, "bias"}});
  Tensor xi = Tensor::empty({N, B, L, D}, dt, Device::CUDA);  // xi: (N, B, L, D), one slab per output
  cuda::ddlerp_forward(xi.raw(), xv.raw(), dv.raw(), zv.raw(), wv.raw(), bv.raw(), M, D, N, R, dt);
  std::vector<Tensor> outs;
  for (int64_t n = 0; n < N; n++) outs.push_back(xi.slice0(n, n + 1).reshape({B, L, D}));
  return record_op(outs, {x, delta, zz, w2, bias}, [=](const std::vector<Tensor>& g) {
    Tensor dxi = Tensor::empty({N, B, L, D}, dt, Device::CUDA);  // dxi: (N, B, L, D), the N gradients packed
    for (int64_t n = 0; n < N; n++) {
      Tensor slab = dxi.slice0(n, n + 1).reshape({B, L, D});
      slab.copy_(g[n]);
    }
    Tensor dx = Tensor::empty(dv.shape(), dt, Device::CUDA), ddelta = Tensor::empty(dv.shape(), dt, Device::CUDA);
    Tensor dzz = Tensor::empty(zv.shape(), dt, Device::CUDA);
    Tensor dw2 = Tensor::zeros(wv.shape(), dt, Device::CUDA), dbias = Tensor::zeros(bv.shape(), dt, Device::CUDA);
    cuda::ddlerp_backward(dx.raw(), ddelta.raw(), dzz.raw(), dw2.raw(), dbias.raw(), dxi.raw(), dv.raw(), zv.raw(),
                          wv.raw(), bv.raw(), M, D, N, R, dt);
    return std::vector<Tensor>{dx, ddelta, dzz, dw2, dbias};
  }, "ddlerp");
}
#endif

TokenShiftOut token_shift(const Var& x, const Var& state) {
  HLA_CHECK(x.dim() == 3, "token_shift: x must be (B, L, D), got ", x.value().str());
  int64_t B = x.size(0), L = x.size(1), D = x.size(2);
  if (state.defined()) check_shape(state.value(), {B, D}, "token_shift", "state");
#ifdef HLA_CUDA
  if (x.value().is_cuda()) return token_shift_cuda(x, state);
#endif
  Tensor xv = x.value();
  Tensor sv = state.defined() ? state.value() : Tensor();
  Tensor delta = Tensor::empty({B, L, D}, xv.dtype());  // delta: (B, L, D)
  Tensor last = Tensor::empty({B, D}, xv.dtype());      // last: (B, D)
  dispatch_float(xv.dtype(), "token_shift", [&](auto tag) {
    using T = decltype(tag);
    cpu::token_shift_forward(delta.data<T>(), last.data<T>(), xv.data<T>(), sv.defined() ? sv.data<T>() : nullptr,
                             B, L, D);
  });
  bool has_state = sv.defined();
  DType dt = xv.dtype();
  std::vector<Var> outs = record_op({delta, last}, {x, state}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty({B, L, D}, dt);
    Tensor ds = has_state ? Tensor::empty({B, D}, dt) : Tensor();
    dispatch_float(dt, "token_shift", [&](auto tag) {
      using T = decltype(tag);
      cpu::token_shift_backward(dx.data<T>(), ds.defined() ? ds.data<T>() : nullptr, g[0].data<T>(),
                                g[1].data<T>(), B, L, D);
    });
    return std::vector<Tensor>{dx, ds};
  }, "token_shift");
  return {outs[0], outs[1]};
}

Var lerp(const Var& x, const Var& delta, const Var& mu) {
  check_same_shape(x.value(), delta.value(), "lerp");
  int64_t D = x.size(-1), M = x.numel() / D;
  check_shape(mu.value(), {D}, "lerp", "mu");
#ifdef HLA_CUDA
  if (x.value().is_cuda()) return lerp_cuda(x, delta, mu);
#endif
  Tensor xv = x.value(), dv = delta.value(), mv = mu.value();
  Tensor y = Tensor::empty(xv.shape(), xv.dtype());  // y: (..., D)
  dispatch_float(xv.dtype(), "lerp", [&](auto tag) {
    using T = decltype(tag);
    cpu::lerp_forward(y.data<T>(), xv.data<T>(), dv.data<T>(), mv.data<T>(), M, D);
  });
  return record_op1(y, {x, delta, mu}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(dv.shape(), dv.dtype()), ddelta = Tensor::empty(dv.shape(), dv.dtype());
    Tensor dmu = Tensor::zeros({D}, dv.dtype());
    dispatch_float(dv.dtype(), "lerp", [&](auto tag) {
      using T = decltype(tag);
      cpu::lerp_backward(dx.data<T>(), ddelta.data<T>(), dmu.data<T>(), g[0].data<T>(), dv.data<T>(),
                         mv.data<T>(), M, D);
    });
    return std::vector<Tensor>{dx, ddelta, dmu};
  }, "lerp");
}

std::vector<Var> ddlerp(const Var& x, const Var& delta, const Var& zz, const Var& w2, const Var& bias) {
  HLA_CHECK(x.dim() == 3, "ddlerp: x must be (B, L, D), got ", x.value().str());
  check_same_shape(x.value(), delta.value(), "ddlerp");
  int64_t B = x.size(0), L = x.size(1), D = x.size(2), M = B * L;
  HLA_CHECK(bias.dim() == 2 && bias.size(1) == D, "ddlerp: bias (x_bias) must be (N, D) with D = ", D, ", got ",
            bias.value().str());
  int64_t N = bias.size(0);
  HLA_CHECK(zz.dim() == 3 && zz.size(0) == B && zz.size(1) == L && zz.size(2) % N == 0,
            "ddlerp: zz must be (B, L, N*R) with B = ", B, ", L = ", L, ", N = ", N, ", got ", zz.value().str());
  int64_t R = zz.size(2) / N;
  check_shape(w2.value(), {D, N * R}, "ddlerp", "w2");
#ifdef HLA_CUDA
  if (x.value().is_cuda()) return ddlerp_cuda(x, delta, zz, w2, bias, N, R);
#endif
  Tensor xv = x.value(), dv = delta.value(), zv = zz.value(), wv = w2.value(), bv = bias.value();
  Tensor xi = Tensor::empty({N, B, L, D}, xv.dtype());  // xi: (N, B, L, D), one slab per output
  dispatch_float(xv.dtype(), "ddlerp", [&](auto tag) {
    using T = decltype(tag);
    cpu::ddlerp_forward(xi.data<T>(), xv.data<T>(), dv.data<T>(), zv.data<T>(), wv.data<T>(), bv.data<T>(), M, D,
                        N, R);
  });
  std::vector<Tensor> outs;
  for (int64_t n = 0; n < N; n++) outs.push_back(xi.slice0(n, n + 1).reshape({B, L, D}));
  return record_op(outs, {x, delta, zz, w2, bias}, [=](const std::vector<Tensor>& g) {
    Tensor dxi = Tensor::empty({N, B, L, D}, dv.dtype());  // dxi: (N, B, L, D), the N gradients packed
    for (int64_t n = 0; n < N; n++) {
      Tensor slab = dxi.slice0(n, n + 1).reshape({B, L, D});
      slab.copy_(g[n]);
    }
    Tensor dx = Tensor::empty(dv.shape(), dv.dtype()), ddelta = Tensor::empty(dv.shape(), dv.dtype());
    Tensor dzz = Tensor::empty(zv.shape(), dv.dtype());
    Tensor dw2 = Tensor::zeros(wv.shape(), dv.dtype()), dbias = Tensor::zeros(bv.shape(), dv.dtype());
    dispatch_float(dv.dtype(), "ddlerp", [&](auto tag) {
      using T = decltype(tag);
      cpu::ddlerp_backward(dx.data<T>(), ddelta.data<T>(), dzz.data<T>(), dw2.data<T>(), dbias.data<T>(),
                           dxi.data<T>(), dv.data<T>(), zv.data<T>(), wv.data<T>(), bv.data<T>(), M, D, N, R);
    });
    return std::vector<Tensor>{dx, ddelta, dzz, dw2, dbias};
  }, "ddlerp");
}

}  // namespace hla
