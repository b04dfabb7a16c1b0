// RWKV-6 token shift, static lerp and data-dependent lerp (ddlerp), forward and backward
// (mixers.md 2.7 and 11). The ddlerp's five low-rank maps are column blocks of one weight
// (fla's einsum 'b t n r, h n r -> b t n h'), done here as N small Eigen products.
#include "nn/ops/token_shift.h"

#include <Eigen/Dense>
#include <algorithm>

#include "nn/ops/attention.h"
#include "nn/ops/check.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/token_shift.h"
#endif

namespace hla {
namespace cpu {

// Whether x_{t-1} is zero for token t > 0 of row b: a packed document starts at t.
inline bool starts_document(const int32_t* doc_start, int64_t b, int64_t t, int64_t L) {
  return doc_start && doc_start[b * L + t] == t;
}

template <class T>
void token_shift_forward(T* delta, T* last, const T* x, const T* state, const int32_t* doc_start, int64_t B,
                         int64_t L, int64_t D) {
  for (int64_t b = 0; b < B; b++) {
    for (int64_t t = 0; t < L; t++)
      for (int64_t d = 0; d < D; d++) {
        T prev = t == 0 ? (state ? state[b * D + d] : T(0))  // x_{t-1}: the state, 0 at a document start
                        : starts_document(doc_start, b, t, L) ? T(0) : x[(b * L + t - 1) * D + d];
        delta[(b * L + t) * D + d] = prev - x[(b * L + t) * D + d];  // delta_t = x_{t-1} - x_t
      }
    for (int64_t d = 0; d < D; d++)  // last = x_L, or the state itself for an empty chunk
      last[b * D + d] = L > 0 ? x[(b * L + L - 1) * D + d] : (state ? state[b * D + d] : T(0));
  }
}

template <class T>
void token_shift_backward(T* dx, T* dstate, const T* ddelta, const T* dlast, const int32_t* doc_start, int64_t B,
                          int64_t L, int64_t D) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t d = 0; d < D; d++) {
      // x_t enters delta_t with -1 and delta_{t+1} with +1 (as x_{(t+1)-1}, unless a document
      // starts at t+1); x_L also is `last`
      for (int64_t t = 0; t < L; t++) {
        T next = t + 1 == L                                ? dlast[b * D + d]
                 : starts_document(doc_start, b, t + 1, L) ? T(0)
                                                           : ddelta[(b * L + t + 1) * D + d];
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
  std::fill(dmu, dmu + D, T(0));
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
    dbiasm.row(n) = dmix.colwise().sum();
    dw2m.middleCols(n * R, R) = dmix.transpose() * h;
    // h = tanh(zz_n)  =>  dzz_n = dh * (1 - h^2)
    dzzm.middleCols(n * R, R) = ((dmix * w2m.middleCols(n * R, R)).array() * (T(1) - h.array().square())).matrix();
  }
}

template void token_shift_forward<float>(float*, float*, const float*, const float*, const int32_t*, int64_t, int64_t,
                                         int64_t);
template void token_shift_forward<double>(double*, double*, const double*, const double*, const int32_t*, int64_t,
                                          int64_t, int64_t);
template void token_shift_backward<float>(float*, float*, const float*, const float*, const int32_t*, int64_t,
                                          int64_t, int64_t);
template void token_shift_backward<double>(double*, double*, const double*, const double*, const int32_t*, int64_t,
                                           int64_t, int64_t);
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

// token_shift, one forward for both devices: cpu::token_shift_forward<T> or cuda::token_shift_forward.
// x, delta: (B, L, D), state, last: (B, D), state may be undefined; doc_start: (B, L) I32 or undefined
static void token_shift_forward(Tensor& delta, Tensor& last, const Tensor& x, const Tensor& state,
                                const Tensor& doc_start, int64_t B, int64_t L, int64_t D) {
  const int32_t* starts = data_or_null<int32_t>(doc_start);
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::token_shift_forward(delta.raw(), last.raw(), x.raw(), raw_or_null(state), starts, B, L, D,
                                            x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), "token_shift", [&](auto tag) {
    using T = decltype(tag);
    cpu::token_shift_forward(delta.data<T>(), last.data<T>(), x.data<T>(), data_or_null<T>(state), starts, B, L, D);
  });
}

// One backward for both devices; dx: (B, L, D), dstate: (B, D) written (dstate undefined when not wanted).
static void token_shift_backward(Tensor& dx, Tensor& dstate, const Tensor& ddelta, const Tensor& dlast,
                                 const Tensor& doc_start, int64_t B, int64_t L, int64_t D) {
  const int32_t* starts = data_or_null<int32_t>(doc_start);
  if (dx.is_cuda()) {
    HLA_CUDA_ONLY(cuda::token_shift_backward(dx.raw(), raw_or_null(dstate), ddelta.raw(), dlast.raw(), starts, B, L,
                                             D, dx.dtype()));
    return;
  }
  dispatch_float(dx.dtype(), "token_shift", [&](auto tag) {
    using T = decltype(tag);
    cpu::token_shift_backward(dx.data<T>(), data_or_null<T>(dstate), ddelta.data<T>(), dlast.data<T>(), starts, B, L,
                              D);
  });
}

// lerp, one forward for both devices: cpu::lerp_forward<T> or cuda::lerp_forward.
// x, delta, y: (M, D), mu: (D)
static void lerp_forward(Tensor& y, const Tensor& x, const Tensor& delta, const Tensor& mu, int64_t M, int64_t D) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::lerp_forward(y.raw(), x.raw(), delta.raw(), mu.raw(), M, D, x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), "lerp", [&](auto tag) {
    using T = decltype(tag);
    cpu::lerp_forward(y.data<T>(), x.data<T>(), delta.data<T>(), mu.data<T>(), M, D);
  });
}

// One backward for both devices; dx, ddelta: (M, D), dmu: (D) written.
static void lerp_backward(Tensor& dx, Tensor& ddelta, Tensor& dmu, const Tensor& dy, const Tensor& delta,
                          const Tensor& mu, int64_t M, int64_t D) {
  if (delta.is_cuda()) {
    HLA_CUDA_ONLY(cuda::lerp_backward(dx.raw(), ddelta.raw(), dmu.raw(), dy.raw(), delta.raw(), mu.raw(), M, D,
                                      delta.dtype()));
    return;
  }
  dispatch_float(delta.dtype(), "lerp", [&](auto tag) {
    using T = decltype(tag);
    cpu::lerp_backward(dx.data<T>(), ddelta.data<T>(), dmu.data<T>(), dy.data<T>(), delta.data<T>(), mu.data<T>(), M,
                       D);
  });
}

// ddlerp, one forward for both devices: cpu::ddlerp_forward<T> or cuda::ddlerp_forward.
// xi: (N, M, D); x, delta: (M, D); zz: (M, N*R); w2: (D, N*R); bias: (N, D)
static void ddlerp_forward(Tensor& xi, const Tensor& x, const Tensor& delta, const Tensor& zz, const Tensor& w2,
                           const Tensor& bias, int64_t M, int64_t D, int64_t N, int64_t R) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::ddlerp_forward(xi.raw(), x.raw(), delta.raw(), zz.raw(), w2.raw(), bias.raw(), M, D, N, R,
                                       x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), "ddlerp", [&](auto tag) {
    using T = decltype(tag);
    cpu::ddlerp_forward(xi.data<T>(), x.data<T>(), delta.data<T>(), zz.data<T>(), w2.data<T>(), bias.data<T>(), M, D,
                        N, R);
  });
}

// One backward for both devices; dx, ddelta: (M, D), dzz: (M, N*R), dw2: (D, N*R), dbias: (N, D) written.
static void ddlerp_backward(Tensor& dx, Tensor& ddelta, Tensor& dzz, Tensor& dw2, Tensor& dbias, const Tensor& dxi,
                            const Tensor& delta, const Tensor& zz, const Tensor& w2, const Tensor& bias, int64_t M,
                            int64_t D, int64_t N, int64_t R) {
  if (delta.is_cuda()) {
    HLA_CUDA_ONLY(cuda::ddlerp_backward(dx.raw(), ddelta.raw(), dzz.raw(), dw2.raw(), dbias.raw(), dxi.raw(),
                                        delta.raw(), zz.raw(), w2.raw(), bias.raw(), M, D, N, R, delta.dtype()));
    return;
  }
  dispatch_float(delta.dtype(), "ddlerp", [&](auto tag) {
    using T = decltype(tag);
    cpu::ddlerp_backward(dx.data<T>(), ddelta.data<T>(), dzz.data<T>(), dw2.data<T>(), dbias.data<T>(),
                         dxi.data<T>(), delta.data<T>(), zz.data<T>(), w2.data<T>(), bias.data<T>(), M, D, N, R);
  });
}

TokenShiftOut token_shift(const Var& x, const Var& state, const Tensor& doc_start) {
  HLA_CHECK(x.dim() == 3, "token_shift: x must be (B, L, D), got ", x.value().str());
  int64_t B = x.size(0), L = x.size(1), D = x.size(2);
  Tensor xv = x.value();
  Tensor sv = state.defined() ? state.value() : Tensor();
  if (sv.defined()) check_shape(sv, {B, D}, "token_shift", "state");
  check_operand(sv, xv, "token_shift", "state");
  if (doc_start.defined()) {
    check_document_starts(doc_start, B, L, xv.device(), "token_shift");
    HLA_CHECK(!sv.defined(), "token_shift: with packed documents (doc_start) the state must be undefined, got ",
              sv.str());
  }
  Tensor delta = Tensor::empty({B, L, D}, xv.dtype(), xv.device());  // delta: (B, L, D)
  Tensor last = Tensor::empty({B, D}, xv.dtype(), xv.device());      // last: (B, D)
  token_shift_forward(delta, last, xv, sv, doc_start, B, L, D);
  const bool has_state = sv.defined();
  const DType dt = xv.dtype();
  const Device dev = xv.device();
  // the closure's copy of doc_start keeps it alive for the backward
  std::vector<Var> outs = record_op({delta, last}, {x, state}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty({B, L, D}, dt, dev);
    Tensor ds = has_state ? Tensor::empty({B, D}, dt, dev) : Tensor();
    token_shift_backward(dx, ds, g[0], g[1], doc_start, B, L, D);
    return std::vector<Tensor>{dx, ds};
  }, "token_shift");
  return {outs[0], outs[1]};
}

Var lerp(const Var& x, const Var& delta, const Var& mu) {
  Tensor xv = x.value(), dv = delta.value(), mv = mu.value();
  check_same_shape(xv, dv, "lerp");
  int64_t D = xv.size(-1), M = xv.numel() / D;
  check_shape(mv, {D}, "lerp", "mu");
  check_operand(dv, xv, "lerp", "delta");
  check_operand(mv, xv, "lerp", "mu");
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), xv.device());  // y: (..., D)
  lerp_forward(y, xv, dv, mv, M, D);
  return record_op1(y, {x, delta, mu}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(dv.shape(), dv.dtype(), dv.device());
    Tensor ddelta = Tensor::empty(dv.shape(), dv.dtype(), dv.device());
    Tensor dmu = Tensor::empty({D}, dv.dtype(), dv.device());
    lerp_backward(dx, ddelta, dmu, g[0], dv, mv, M, D);
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
  Tensor xv = x.value(), dv = delta.value(), zv = zz.value(), wv = w2.value(), bv = bias.value();
  check_operand(dv, xv, "ddlerp", "delta");
  check_operand(zv, xv, "ddlerp", "zz");
  check_operand(wv, xv, "ddlerp", "w2");
  check_operand(bv, xv, "ddlerp", "bias");
  const DType dt = xv.dtype();
  const Device dev = xv.device();
  Tensor xi = Tensor::empty({N, B, L, D}, dt, dev);  // xi: (N, B, L, D), one slab per output
  ddlerp_forward(xi, xv, dv, zv, wv, bv, M, D, N, R);
  std::vector<Tensor> outs;
  for (int64_t n = 0; n < N; n++) outs.push_back(xi.slice0(n, n + 1).reshape({B, L, D}));
  return record_op(outs, {x, delta, zz, w2, bias}, [=](const std::vector<Tensor>& g) {
    Tensor dxi = Tensor::empty({N, B, L, D}, dt, dev);  // dxi: (N, B, L, D), the N gradients packed
    for (int64_t n = 0; n < N; n++) {
      Tensor slab = dxi.slice0(n, n + 1).reshape({B, L, D});
      slab.copy_(g[n]);
    }
    Tensor dx = Tensor::empty(dv.shape(), dt, dev), ddelta = Tensor::empty(dv.shape(), dt, dev);
    Tensor dzz = Tensor::empty(zv.shape(), dt, dev);
    Tensor dw2 = Tensor::empty(wv.shape(), dt, dev), dbias = Tensor::empty(bv.shape(), dt, dev);
    ddlerp_backward(dx, ddelta, dzz, dw2, dbias, dxi, dv, zv, wv, bv, M, D, N, R);
    return std::vector<Tensor>{dx, ddelta, dzz, dw2, dbias};
  }, "ddlerp");
}

}  // namespace hla
