// Causal softmax attention forward and backward (mixers.md section 5), one query row at a time.
//
// Forward, per (batch b, query head h, token t), in three passes over the keys t may see:
//   pass 1: scores s[tau] = scale * q_t . k_tau and their max (so exp never overflows)
//   pass 2: lse_t = max + log sum exp(s - max)
//   pass 3: o_t = sum_tau P[t, tau] v_tau  with  P[t, tau] = exp(s[tau] - lse_t)
// Backward recomputes P from lse and uses Delta_t = do_t . o_t (which equals rowsum(P * dP)),
// so no T x T matrix is ever stored; the CUDA flash kernel follows the same recipe in tiles.
#include "nn/ops/attention_reference.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "nn/ops/parallel.h"

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

// The first key query t of row b may see: 0 when fully causal, t - window + 1 with a sliding
// window, and never before the first token of t's document (packed documents).
int64_t first_key(int64_t b, int64_t t, const AttentionDims& d) {
  int64_t first = d.window > 0 ? std::max<int64_t>(0, t - d.window + 1) : 0;
  if (d.doc_start) first = std::max<int64_t>(first, d.doc_start[b * d.T + t]);
  return first;
}

}  // namespace

template <class Real>
void attention_forward(Real* o, Real* lse, const Real* q, const Real* k, const Real* v, const AttentionDims& d) {
  const int64_t B = d.B, T = d.T, H = d.H, Hkv = d.Hkv, D = d.D, Dv = d.Dv;
  const int64_t group = H / Hkv;  // query heads per kv head
  const Real sc = static_cast<Real>(d.scale);
  parallel_for(B * H, [&](int64_t i) {  // (batch, query head) i = b * H + h writes its own rows
    const int64_t b = i / H, h = i % H;
    const int64_t m = h / group;  // kv head read by query head h
    std::vector<Real> s(T);       // s: (T) scores of one query row
    for (int64_t t = 0; t < T; t++) {
      ConstVecMap<Real> q_t(q + row(b, t, h, T, H, D), D);  // q_t: (D)
      const int64_t lo = first_key(b, t, d);
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
  const int64_t B = d.B, T = d.T, H = d.H, Hkv = d.Hkv, D = d.D, Dv = d.Dv;
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
        for (int64_t tau = first_key(b, t, d); tau <= t; tau++) {
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

}  // namespace hla
