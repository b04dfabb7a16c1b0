// Decode-step attention against a KV ring cache (see attention_decode.h). The CPU reference
// runs the three passes of nn/ops/attention.cpp over the visible positions, oldest first, so a
// step gives the numbers the full forward gives for that query row.
#include "nn/ops/attention_decode.h"

#include <Eigen/Dense>
#include <algorithm>
#include <limits>
#include <vector>

#include "nn/ops/check.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/attention_decode.h"
#endif

namespace hla {
namespace cpu {
namespace {

// The first position the query at p sees (attention_decode.h).
int64_t first_visible(int64_t p, const AttentionDecodeDims& d) {
  int64_t lo = std::max<int64_t>(0, p - d.capacity + 1);
  if (d.window > 0) lo = std::max(lo, p - d.window + 1);
  return lo;
}

}  // namespace

template <class Real>
void attention_decode_forward(Real* o, Real* k_cache, Real* v_cache, const Real* q, const Real* k, const Real* v,
                              const int32_t* positions, const AttentionDecodeDims& d) {
  using Row = Eigen::Matrix<Real, Eigen::Dynamic, 1>;  // one head's vector, mapped onto a buffer
  const int64_t H = d.H, Hkv = d.Hkv, D = d.D, Dv = d.Dv, C = d.capacity;
  const int64_t group = H / Hkv;  // query heads per kv head
  const Real sc = static_cast<Real>(d.scale);
  for (int64_t b = 0; b < d.B; b++) {
    const int64_t p = positions[b];
    // pass 0: this token's k, v into slot p % C
    for (int64_t m = 0; m < Hkv; m++) {
      std::copy_n(k + (b * Hkv + m) * D, D, k_cache + ((b * C + p % C) * Hkv + m) * D);
      std::copy_n(v + (b * Hkv + m) * Dv, Dv, v_cache + ((b * C + p % C) * Hkv + m) * Dv);
    }
    const int64_t lo = first_visible(p, d);
    std::vector<Real> s(p - lo + 1);  // s: (p - lo + 1) scores, oldest position first
    for (int64_t h = 0; h < H; h++) {
      const int64_t m = h / group;  // kv head read by query head h
      Eigen::Map<const Row> q_h(q + (b * H + h) * D, D);  // q_h: (D)
      auto key = [&](int64_t tau) { return Eigen::Map<const Row>(k_cache + ((b * C + tau % C) * Hkv + m) * D, D); };
      auto value = [&](int64_t tau) { return Eigen::Map<const Row>(v_cache + ((b * C + tau % C) * Hkv + m) * Dv, Dv); };
      // pass 1: s[tau] = scale * q . K[tau] and the max
      Real s_max = -std::numeric_limits<Real>::infinity();
      for (int64_t tau = lo; tau <= p; tau++) {
        s[tau - lo] = sc * q_h.dot(key(tau));
        s_max = std::max(s_max, s[tau - lo]);
      }
      // pass 2: lse = log sum_tau exp(s[tau])
      Real sum = 0;
      for (int64_t tau = lo; tau <= p; tau++) sum += std::exp(s[tau - lo] - s_max);
      const Real lse = s_max + std::log(sum);
      // pass 3: o = sum_tau exp(s[tau] - lse) V[tau]
      Eigen::Map<Row> o_h(o + (b * H + h) * Dv, Dv);  // o_h: (Dv)
      o_h.setZero();
      for (int64_t tau = lo; tau <= p; tau++) o_h += std::exp(s[tau - lo] - lse) * value(tau);
    }
  }
}

template void attention_decode_forward<float>(float*, float*, float*, const float*, const float*, const float*,
                                              const int32_t*, const AttentionDecodeDims&);
template void attention_decode_forward<double>(double*, double*, double*, const double*, const double*,
                                               const double*, const int32_t*, const AttentionDecodeDims&);

}  // namespace cpu

Tensor attention_decode(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                        const Tensor& positions, double scale, int64_t window) {
  const char* op = "attention_decode";
  HLA_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, op, ": q, k, v must be (B, heads, width), got ", q.str(),
            ", ", k.str(), ", ", v.str());
  AttentionDecodeDims d{q.size(0), q.size(1), k.size(1), q.size(2), v.size(2), k_cache.dim() == 4 ? k_cache.size(1) : 0,
                        scale, window};
  HLA_CHECK(d.Hkv > 0 && d.H % d.Hkv == 0, op, ": query heads ", d.H, " are not a multiple of kv heads ", d.Hkv);
  HLA_CHECK(d.capacity > 0, op, ": k_cache must be (B, capacity >= 1, Hkv, D), got ", k_cache.str());
  check_shape(k, {d.B, d.Hkv, d.D}, op, "k");
  check_shape(v, {d.B, d.Hkv, d.Dv}, op, "v");
  check_shape(k_cache, {d.B, d.capacity, d.Hkv, d.D}, op, "k_cache");
  check_shape(v_cache, {d.B, d.capacity, d.Hkv, d.Dv}, op, "v_cache");
  check_shape(positions, {d.B}, op, "positions");
  check_dtype(positions, DType::I32, op, "positions");
  check_operand(k, q, op, "k");
  check_operand(v, q, op, "v");
  check_operand(k_cache, q, op, "k_cache");
  check_operand(v_cache, q, op, "v_cache");
  HLA_CHECK(positions.device() == q.device(), op, ": positions ", positions.str(), " is not on the device of q ",
            q.str());
  Tensor o = Tensor::empty({d.B, d.H, d.Dv}, q.dtype(), q.device());  // o: (B, H, Dv)
  if (q.is_cuda()) {
    HLA_CUDA_ONLY(cuda::attention_decode_forward(o.raw(), k_cache.raw(), v_cache.raw(), q.raw(), k.raw(), v.raw(),
                                                 positions.data<int32_t>(), d, q.dtype()));
    return o;
  }
  const int32_t* pos = positions.data<int32_t>();
  for (int64_t b = 0; b < d.B; b++)
    HLA_CHECK(pos[b] >= 0, op, ": positions[", b, "] is ", pos[b], ", must be >= 0");
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using Real = decltype(tag);
    cpu::attention_decode_forward(o.data<Real>(), k_cache.data<Real>(), v_cache.data<Real>(), q.data<Real>(),
                                  k.data<Real>(), v.data<Real>(), pos, d);
  });
  return o;
}

}  // namespace hla
