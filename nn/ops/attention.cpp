// Causal softmax attention forward and backward (mixers.md section 5), one query row at a time.
//
// Forward, per (batch b, query head h, token t), in three passes over the keys t may see:
//   pass 1: scores s[tau] = scale * q_t . k_tau and their max (so exp never overflows)
//   pass 2: lse_t = max + log sum exp(s - max)
//   pass 3: o_t = sum_tau P[t, tau] v_tau  with  P[t, tau] = exp(s[tau] - lse_t)
// Backward recomputes P from lse and uses Delta_t = do_t . o_t (which equals rowsum(P * dP)),
// so no T x T matrix is ever stored; the CUDA flash kernel follows the same recipe in tiles.
#include "nn/ops/attention.h"

#include <Eigen/Dense>
#include <algorithm>
#include <limits>
#include <vector>

#include "nn/ops/check.h"
#include "nn/ops/parallel.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/attention.h"
#endif

namespace hla {
namespace cpu {
namespace {

template <class Real> using Vec = Eigen::Matrix<Real, Eigen::Dynamic, 1>;
template <class Real> using VecMap = Eigen::Map<Vec<Real>>;
template <class Real> using ConstVecMap = Eigen::Map<const Vec<Real>>;

// Offset of row (b, t, head) in a (B, T, heads, width) buffer.
int64_t row(int64_t b, int64_t t, int64_t head, int64_t T, int64_t heads, int64_t width) {
  return ((b * T + t) * heads + head) * width;
}

// The first key query t may see: 0 when fully causal, t - window + 1 with a sliding window.
int64_t first_key(int64_t t, int64_t window) { return window > 0 ? std::max<int64_t>(0, t - window + 1) : 0; }

}  // namespace

template <class Real>
void attention_forward(Real* o, Real* lse, const Real* q, const Real* k, const Real* v, const AttentionDims& d) {
  const int64_t B = d.B, T = d.T, H = d.H, Hkv = d.Hkv, D = d.D, Dv = d.Dv, window = d.window;
  const int64_t group = H / Hkv;  // query heads per kv head
  const Real sc = static_cast<Real>(d.scale);
  parallel_for(B * H, [&](int64_t i) {  // (batch, query head) i = b * H + h writes its own rows
    const int64_t b = i / H, h = i % H;
    const int64_t m = h / group;  // kv head read by query head h
    std::vector<Real> s(T);       // s: (T) scores of one query row
    for (int64_t t = 0; t < T; t++) {
      ConstVecMap<Real> q_t(q + row(b, t, h, T, H, D), D);  // q_t: (D)
      const int64_t lo = first_key(t, window);
      // pass 1: s[tau] = scale * q_t . k_tau for allowed tau, and the row max
      Real s_max = -std::numeric_limits<Real>::infinity();
      for (int64_t tau = lo; tau <= t; tau++) {
        s[tau] = sc * q_t.dot(ConstVecMap<Real>(k + row(b, tau, m, T, Hkv, D), D));
        s_max = std::max(s_max, s[tau]);
      }
      // pass 2: lse_t = log sum_tau exp(s[tau])
      Real sum = 0;
      for (int64_t tau = lo; tau <= t; tau++) sum += std::exp(s[tau] - s_max);
      const Real lse_t = s_max + std::log(sum);
      lse[(b * H + h) * T + t] = lse_t;
      // pass 3: o_t = sum_tau P[t, tau] v_tau
      VecMap<Real> o_t(o + row(b, t, h, T, H, Dv), Dv);  // o_t: (Dv)
      o_t.setZero();
      for (int64_t tau = lo; tau <= t; tau++)
        o_t += std::exp(s[tau] - lse_t) * ConstVecMap<Real>(v + row(b, tau, m, T, Hkv, Dv), Dv);
    }
  });
}

template <class Real>
void attention_backward(Real* dq, Real* dk, Real* dv, const Real* dout, const Real* q, const Real* k, const Real* v,
                        const Real* o, const Real* lse, const AttentionDims& d) {
  const int64_t B = d.B, T = d.T, H = d.H, Hkv = d.Hkv, D = d.D, Dv = d.Dv, window = d.window;
  const int64_t group = H / Hkv;
  const Real sc = static_cast<Real>(d.scale);
  std::fill(dk, dk + B * T * Hkv * D, Real(0));  // dk, dv collect every query row of their group
  std::fill(dv, dv + B * T * Hkv * Dv, Real(0));
  // One task per (batch, kv head): the query heads of its group add into the same dk, dv rows,
  // so they run in one task, in order.
  parallel_for(B * Hkv, [&](int64_t i) {
    const int64_t b = i / Hkv, m = i % Hkv;
    for (int64_t h = m * group; h < (m + 1) * group; h++) {
      for (int64_t t = 0; t < T; t++) {
        ConstVecMap<Real> q_t(q + row(b, t, h, T, H, D), D);         // q_t: (D)
        ConstVecMap<Real> do_t(dout + row(b, t, h, T, H, Dv), Dv);   // do_t: (Dv)
        ConstVecMap<Real> o_t(o + row(b, t, h, T, H, Dv), Dv);       // o_t: (Dv)
        VecMap<Real> dq_t(dq + row(b, t, h, T, H, D), D);            // dq_t: (D)
        dq_t.setZero();
        const Real lse_t = lse[(b * H + h) * T + t];
        const Real delta = do_t.dot(o_t);  // Delta_t = do_t . o_t = sum_tau P[t, tau] dP[t, tau]
        for (int64_t tau = first_key(t, window); tau <= t; tau++) {
          ConstVecMap<Real> k_tau(k + row(b, tau, m, T, Hkv, D), D);
          ConstVecMap<Real> v_tau(v + row(b, tau, m, T, Hkv, Dv), Dv);
          VecMap<Real> dk_tau(dk + row(b, tau, m, T, Hkv, D), D);
          VecMap<Real> dv_tau(dv + row(b, tau, m, T, Hkv, Dv), Dv);
          const Real p = std::exp(sc * q_t.dot(k_tau) - lse_t);  // P[t, tau], rebuilt from lse
          dv_tau += p * do_t;                                     // o_t = sum P v_tau  =>  dv_tau += P do_t
          const Real ds = p * (do_t.dot(v_tau) - delta);          // softmax: dS = P (dP - Delta), dP = do_t . v_tau
          dq_t += sc * ds * k_tau;                                // s = scale q_t . k_tau  =>  dq_t += scale dS k_tau
          dk_tau += sc * ds * q_t;                                //                        =>  dk_tau += scale dS q_t
        }
      }
    }
  });
}

template void attention_forward<float>(float*, float*, const float*, const float*, const float*,
                                       const AttentionDims&);
template void attention_forward<double>(double*, double*, const double*, const double*, const double*,
                                        const AttentionDims&);
template void attention_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                        const float*, const float*, const float*, const AttentionDims&);
template void attention_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const double*, const double*, const AttentionDims&);

}  // namespace cpu

namespace {

// The device's kernels: cuda::attention_* (flash style) for GPU tensors, cpu::attention_*
// otherwise. lse in d.lse_dtype.
void attention_forward(Tensor& o, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionDims& d) {
  if (q.is_cuda()) {
    HLA_CUDA_ONLY(cuda::attention_forward(o.raw(), lse.data<float>(), q.raw(), k.raw(), v.raw(), d, q.dtype()));
    return;
  }
  dispatch_float(q.dtype(), "attention", [&](auto tag) {
    using Real = decltype(tag);
    cpu::attention_forward(o.data<Real>(), lse.data<Real>(), q.data<Real>(), k.data<Real>(), v.data<Real>(), d);
  });
}

void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& o, const Tensor& lse, const AttentionDims& d) {
  if (q.is_cuda()) {
    HLA_CUDA_ONLY(cuda::attention_backward(dq.raw(), dk.raw(), dv.raw(), dout.raw(), q.raw(), k.raw(), v.raw(), o.raw(),
                                           lse.data<float>(), d, q.dtype()));
    return;
  }
  dispatch_float(q.dtype(), "attention", [&](auto tag) {
    using Real = decltype(tag);
    cpu::attention_backward(dq.data<Real>(), dk.data<Real>(), dv.data<Real>(), dout.data<Real>(), q.data<Real>(),
                            k.data<Real>(), v.data<Real>(), o.data<Real>(), lse.data<Real>(), d);
  });
}

}  // namespace

Var attention(const Var& q, const Var& k, const Var& v, double scale, int64_t window) {
  HLA_CHECK(q.dim() == 4, "attention: q must be (B, T, H, D), got ", q.value().str());
  HLA_CHECK(k.dim() == 4, "attention: k must be (B, T, Hkv, D), got ", k.value().str());
  HLA_CHECK(v.dim() == 4, "attention: v must be (B, T, Hkv, Dv), got ", v.value().str());
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), Hkv = k.size(2), Dv = v.size(3);
  check_shape(k.value(), {B, T, Hkv, D}, "attention", "k");
  check_shape(v.value(), {B, T, Hkv, Dv}, "attention", "v");
  check_operand(k.value(), q.value(), "attention", "k");
  check_operand(v.value(), q.value(), "attention", "v");
  HLA_CHECK(Hkv > 0 && H % Hkv == 0, "attention: query heads H = ", H, " must be a multiple of kv heads Hkv = ", Hkv);
  HLA_CHECK(window >= 0, "attention: window must be >= 0 (0 = full causal), got ", window);
  const AttentionDims d{B, T, H, Hkv, D, Dv, scale, window, accum_dtype(q.value())};
  const DType dt = q.dtype();
  const Device dev = q.device();
  Tensor qv = q.value(), kv = k.value(), vv = v.value();
  Tensor o = Tensor::empty({B, T, H, Dv}, dt, dev);           // o: (B, T, H, Dv)
  Tensor lse = Tensor::empty({B, H, T}, d.lse_dtype, dev);    // lse: (B, H, T)
  attention_forward(o, lse, qv, kv, vv, d);
  return record_op1(o, {q, k, v}, [=](const std::vector<Tensor>& g) {
    Tensor dq = Tensor::empty(qv.shape(), dt, dev);
    Tensor dk = Tensor::empty(kv.shape(), dt, dev);
    Tensor dv = Tensor::empty(vv.shape(), dt, dev);
    attention_backward(dq, dk, dv, g[0], qv, kv, vv, o, lse, d);
    return std::vector<Tensor>{dq, dk, dv};
  }, "attention");
}

}  // namespace hla
