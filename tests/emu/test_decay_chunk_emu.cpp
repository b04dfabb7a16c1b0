// Runs the chunked decay-attention kernels of cuda/decay_attention_chunk.cu on the host emulator
// (tests/emu/include/emu.h) and compares them with fp64 CPU references: RWKV-6's token
// recurrence (the formulas of nn/ops/rwkv6.cpp) for decay_chunk::rwkv6_forward / rwkv6_backward,
// and the CPU chunked references decay_chunk::forward / backward (nn/ops/chunk_util.h) for the
// scalar- and vector-gate forward and backward, at head widths 64, 128 and 256 and the mixed
// (128, 256) / (256, 128) (at dk = 256 the backward's chunk-local pass runs as two key blocks).
// Kept states (decay_chunk::kept_floats): every forward case runs twice, plain and keeping its
// chunk-start states (into a NaN-filled buffer), and checks the two write the same bits and that
// the kept states (bf16) are the reference's h[n] (every element written); every backward case runs
// twice, replaying the states and reading a keeping forward's, which must write the same bits,
// and once more reading NaN states, which must reach the gradients (the states are read).
// Packed documents (chunk_reset): every gate kind forward and backward on the documents' chunk
// layout, against the CPU chunked reference with the same resets (documents_case).
// Tolerances are gpu-check's bf16 ones (relative RMS); the exit status is 1 when a row fails.
#include "decay_attention_chunk_host.cpp"

#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "nn/ops/chunk_util.h"
#include "report.h"

using namespace hla;
using decay_chunk::Head;
using decay_chunk::HeadGrads;
using decay_chunk::Mat;
using decay_chunk::Row;
using Bf16 = __nv_bfloat16;

static double round_bf(double x) { return __bfloat162float(__float2bfloat16_rn(float(x))); }

struct Buf {
  std::vector<double> ref;  // exact values (bf16-rounded for bf16 inputs)
  std::vector<Bf16> b;      // bf16 copy
  std::vector<float> f;     // fp32 copy
  void fill(size_t n, std::mt19937_64& rng, double std, double shift, bool logsig, bool bf) {
    std::normal_distribution<double> N(0, 1);
    ref.resize(n), b.resize(n), f.resize(n);
    for (size_t i = 0; i < n; i++) {
      double x = N(rng) * std + shift;
      if (logsig) x = -std::log1p(std::exp(-x));
      if (bf) x = round_bf(x);
      ref[i] = x, b[i] = __float2bfloat16_rn(float(x)), f[i] = float(x);
    }
  }
};

// A float whose two bf16 halves are NaN too (the kept states are bf16 pairs in a float buffer).
static const float kNaN = [] {
  const uint32_t bits = 0x7fc07fc0u;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}();

// Whether two runs wrote the same bits.
template <class V>
static bool same_bits(const V& a, const V& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
}
template <class V>
static bool all_finite(const V& x) {
  for (const auto& e : x) {
    float f;
    if constexpr (std::is_same_v<typename V::value_type, Bf16>) f = __bfloat162float(e);
    else f = e;
    if (!std::isfinite(f)) return false;
  }
  return true;
}
// A row that holds or fails without an error figure (kept vs replay, and the like).
static void report_check(const std::string& what, const char* name, bool ok, const char* claim) {
  if (!ok) g_fail = true;
  g_rows++;
  std::printf("%-50s %-4s %s %s\n", what.c_str(), name, claim, ok ? "ok" : "FAIL");
}

// The gradients a backward writes (grad_u: RWKV-6's only).
struct Grads {
  std::vector<Bf16> dq, dk, dv, dg, du;
  std::vector<float> dh0;
  bool same_bits_as(const Grads& o) const {
    return same_bits(dq, o.dq) && same_bits(dk, o.dk) && same_bits(dv, o.dv) && same_bits(dg, o.dg) &&
           same_bits(du, o.du) && same_bits(dh0, o.dh0);
  }
  bool finite() const {
    return all_finite(dq) && all_finite(dk) && all_finite(dv) && all_finite(dg) && all_finite(du) && all_finite(dh0);
  }
};

// The backward with kept states: replaying them (`kernels(nullptr)`, the result the error rows
// read), reading a keeping forward's (`forward_into(kept)` then `kernels(kept)`), and reading
// NaN ones; the rows say the first two wrote the same bits and the third none finite (the
// backward reads the kept states: a backward that replays anyway would pass the first row alone).
template <class Backward, class Forward>
static Grads kept_vs_replay(const std::string& label, int64_t kept_floats, const Backward& kernels,
                            const Forward& forward_into) {
  Grads replayed = kernels(nullptr);
  std::vector<float> kept(kept_floats, kNaN);
  forward_into(kept.data());
  report_check(label, "kept", kernels(kept.data()).same_bits_as(replayed), "backward from kept == replay bit for bit");
  std::fill(kept.begin(), kept.end(), kNaN);
  report_check(label, "read", !kernels(kept.data()).finite(), "backward from NaN kept not finite");
  return replayed;
}

// RWKV-6's token recurrence backward in fp64 (nn/ops/rwkv6.cpp's formulas).
static HeadGrads<double> recurrent_backward(const Head<double>& x, const Mat<double>& d_o, const Mat<double>& ds_final,
                                            double scale) {
  const int64_t T = x.q.rows();
  const std::vector<Mat<double>> S = decay_chunk::replay_states(x);
  HeadGrads<double> g;
  g.dq.resize(T, x.q.cols()), g.dk.resize(T, x.k.cols()), g.dv.resize(T, x.v.cols()), g.dg.resize(T, x.g.cols());
  g.dbonus = Row<double>::Zero(x.bonus.cols());
  Mat<double> dS = ds_final;
  for (int64_t t = T - 1; t >= 0; t--) {
    auto r = x.q.row(t), k = x.k.row(t), v = x.v.row(t), dot = d_o.row(t);
    const double v_do = v.dot(dot), bonus = r.cwiseProduct(x.bonus).dot(k);
    Row<double> decay = x.g.row(t).array().exp();
    g.dk.row(t) = v * dS.transpose() + scale * v_do * x.bonus.cwiseProduct(r);
    g.dv.row(t) = k * dS + scale * bonus * dot;
    g.dq.row(t) = scale * (dot * S[t].transpose() + v_do * x.bonus.cwiseProduct(k));
    g.dbonus += scale * v_do * r.cwiseProduct(k);
    g.dg.row(t) = (decay.asDiagonal() * S[t]).cwiseProduct(dS).rowwise().sum().transpose();
    dS = decay.asDiagonal() * dS + scale * r.transpose() * dot;
  }
  g.ds0 = dS;
  return g;
}

// x[b, t, h, :] of a (B, T, H, W) buffer as float.
template <class V>
static double at(const V& x, int64_t i) {
  if constexpr (std::is_same_v<typename V::value_type, Bf16>) return __bfloat162float(x[i]);
  else return double(x[i]);
}

// Value head (b, h) of the fp64 reference inputs (H value heads, `group` a key head): q (r), k
// (of key head h / group), v, the gate (per channel or scalar), the diagonal weight (RWKV-6's u,
// else ones) and the initial state (zeros when null).
static Head<double> reference_head(const Buf& q, const Buf& k, const Buf& v, const Buf& g, bool vector_gate,
                                   const double* u, const double* h0, int64_t b, int64_t h, int64_t T, int64_t H,
                                   int64_t dk, int64_t dv, int64_t group = 1) {
  Head<double> x;
  x.q = decay_chunk::gather_head(q.ref.data(), b, h / group, T, H / group, dk);
  x.k = decay_chunk::gather_head(k.ref.data(), b, h / group, T, H / group, dk);
  x.v = decay_chunk::gather_head(v.ref.data(), b, h, T, H, dv);
  x.g = vector_gate ? decay_chunk::gather_gate<double, true>(g.ref.data(), b, h, T, H, dk)
                    : decay_chunk::gather_gate<double, false>(g.ref.data(), b, h, T, H, dk);
  x.bonus = u ? Row<double>(Eigen::Map<const Row<double>>(u + h * dk, dk)) : Row<double>(Row<double>::Ones(dk));
  x.s0 = decay_chunk::gather_state(h0, b, h, H, dk, dv);
  return x;
}

static void rwkv6_case(int64_t B, int64_t T, int64_t H, int64_t D, bool with_h0, bool with_dht, double shift,
                       uint64_t seed, int64_t DV = 0) {
  const int64_t dk = D, dv = DV ? DV : D;
  std::mt19937_64 rng(seed);
  Buf r, k, v, w, u, h0, dO, dht;
  const double rk = 1.0 / std::sqrt(double(dk));
  r.fill(B * T * H * dk, rng, rk, 0, false, true);
  k.fill(B * T * H * dk, rng, rk, 0, false, true);
  v.fill(B * T * H * dv, rng, 1, 0, false, true);
  w.fill(B * T * H * dk, rng, 1, shift, true, true);
  u.fill(H * dk, rng, 1, 0, false, true);
  h0.fill(B * H * dk * dv, rng, 0.5, 0, false, false);
  dO.fill(B * T * H * dv, rng, 1, 0, false, true);
  dht.fill(B * H * dk * dv, rng, 1, 0, false, false);
  const double scale = 1.0;
  const Rwkv6Dims d{B, T, H, dk, dv, scale, 0, DType::F32};
  char label[160];
  if (dv == dk)
    std::snprintf(label, sizeof label, "rwkv6 B%ld T%ld H%ld D%ld h0 %d dht %d shift %g", long(B), long(T), long(H),
                  long(D), int(with_h0), int(with_dht), shift);
  else
    std::snprintf(label, sizeof label, "rwkv6 B%ld T%ld H%ld dk%ld dv%ld h0 %d dht %d", long(B), long(T), long(H),
                  long(dk), long(dv), int(with_h0), int(with_dht));
  const float* h0p = with_h0 ? h0.f.data() : nullptr;
  std::vector<Bf16> o(B * T * H * dv);
  std::vector<float> ht(B * H * dk * dv);
  auto backward = [&](const float* kept) {
    Grads x{std::vector<Bf16>(r.b.size()), std::vector<Bf16>(k.b.size()), std::vector<Bf16>(v.b.size()),
            std::vector<Bf16>(w.b.size()), std::vector<Bf16>(u.b.size()), std::vector<float>(h0.f.size())};
    cuda::decay_chunk::rwkv6_backward(x.dq.data(), x.dk.data(), x.dv.data(), x.dg.data(), x.du.data(), x.dh0.data(),
                                      dO.b.data(), with_dht ? dht.f.data() : nullptr, r.b.data(), k.b.data(),
                                      v.b.data(), w.b.data(), u.b.data(), h0p, d, kept);
    return x;
  };
  auto forward = [&](float* kept) {
    cuda::decay_chunk::rwkv6_forward(o.data(), ht.data(), r.b.data(), k.b.data(), v.b.data(), w.b.data(), u.b.data(),
                                     h0p, d, kept);
  };
  const Grads grads = kept_vs_replay(label, cuda::decay_chunk::kept_floats(d), backward, forward);
  const std::vector<Bf16>&gr = grads.dq, &gk = grads.dk, &gv = grads.dv, &gw = grads.dg, &gu = grads.du;
  const std::vector<float>& gh0 = grads.dh0;
  Err er, ek, ev, ew, eu, eh0, eo, eht, cr, cw;  // c*: CPU chunked vs recurrent (fp64)
  Mat<double> du_ref = Mat<double>::Zero(H, dk);  // (H, dk): summed over the batch
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const Head<double> x = reference_head(r, k, v, w, true, u.ref.data(), with_h0 ? h0.ref.data() : nullptr, b, h, T,
                                            H, dk, dv);
      const Mat<double> d_o = decay_chunk::gather_head(dO.ref.data(), b, h, T, H, dv);
      const Mat<double> ds = decay_chunk::gather_state(with_dht ? dht.ref.data() : nullptr, b, h, H, dk, dv);
      const HeadGrads<double> g = recurrent_backward(x, d_o, ds, scale);
      const HeadGrads<double> c =
          decay_chunk::backward<double, true>(x, d_o, ds, scale, 64, decay_chunk::ReadAt::before_update);
      Mat<double> o_ref, ht_ref;
      decay_chunk::forward<double, true>(o_ref, ht_ref, x, scale, 16, decay_chunk::ReadAt::before_update);
      du_ref.row(h) += g.dbonus;
      for (int64_t t = 0; t < T; t++) {
        for (int64_t i = 0; i < dk; i++) {
          const int64_t idx = ((b * T + t) * H + h) * dk + i;
          er.add(at(gr, idx), g.dq(t, i)), ek.add(at(gk, idx), g.dk(t, i)), ew.add(at(gw, idx), g.dg(t, i));
          cr.add(c.dq(t, i), g.dq(t, i)), cw.add(c.dg(t, i), g.dg(t, i));
        }
        for (int64_t i = 0; i < dv; i++) {
          const int64_t idx = ((b * T + t) * H + h) * dv + i;
          ev.add(at(gv, idx), g.dv(t, i)), eo.add(at(o, idx), o_ref(t, i));
        }
      }
      for (int64_t i = 0; i < dk; i++)
        for (int64_t j = 0; j < dv; j++) {
          const int64_t idx = ((b * H + h) * dk + i) * dv + j;
          eh0.add(gh0[idx], g.ds0(i, j)), eht.add(ht[idx], ht_ref(i, j));
        }
    }
  for (int64_t h = 0; h < H; h++)
    for (int64_t i = 0; i < dk; i++) eu.add(at(gu, h * dk + i), du_ref(h, i));
  const double tol = 1e-2;  // gpu-check's bf16_grad (relative RMS)
  report(label, "dr", er, tol), report(label, "dk", ek, tol), report(label, "dv", ev, tol);
  report(label, "dw", ew, tol), report(label, "du", eu, tol), report(label, "dh0", eh0, tol);
  report(label, "o", eo, 5e-3), report(label, "ht", eht, 5e-3);
  report(label, "cpu-chunk vs recurrent dr", cr, 1e-12), report(label, "cpu-chunk vs recurrent dw", cw, 1e-12);
}

// The scalar- or vector-gate (GLA, after_update) backward against the CPU chunked reference; the
// D64 GLA row validates the emulator on a kernel the H200 has passed. DV = 0: dv = dk = D. G value
// heads a key head (HV = G H): dq, dk are the sums over a group's value heads.
static void gla_case(int64_t B, int64_t T, int64_t H, int64_t D, uint64_t seed, bool vg = true, int64_t DV = 0,
                     bool with_h0 = true, bool with_dht = true, int64_t G = 1) {
  const int64_t dk = D, dv = DV ? DV : D, HV = G * H;
  std::mt19937_64 rng(seed);
  Buf q, k, v, g, h0, dO, dht;
  const double rk = 1.0 / std::sqrt(double(dk));
  q.fill(B * T * H * dk, rng, rk, 0, false, true);
  k.fill(B * T * H * dk, rng, rk, 0, false, true);
  v.fill(B * T * HV * dv, rng, 1, 0, false, true);
  g.fill(B * T * HV * (vg ? dk : 1), rng, 1, 0, true, true);
  h0.fill(B * HV * dk * dv, rng, 0.5, 0, false, false);
  dO.fill(B * T * HV * dv, rng, 1, 0, false, true);
  dht.fill(B * HV * dk * dv, rng, 1, 0, false, false);
  const DecayAttentionDims d{B, T, H, HV, dk, dv, vg, 1.0, 0, DType::F32};
  char label[160];
  if (G > 1)
    std::snprintf(label, sizeof label, "%s B%ld T%ld H%ld HV%ld dk%ld dv%ld", vg ? "vector bwd" : "scalar bwd",
                  long(B), long(T), long(H), long(HV), long(dk), long(dv));
  else if (dv == dk && with_h0 && with_dht)
    std::snprintf(label, sizeof label, "%s B%ld T%ld H%ld D%ld", vg ? "gla" : "scalar bwd", long(B), long(T), long(H),
                  long(D));
  else
    std::snprintf(label, sizeof label, "%s B%ld T%ld H%ld dk%ld dv%ld h0 %d dht %d", vg ? "vector bwd" : "scalar bwd",
                  long(B), long(T), long(H), long(dk), long(dv), int(with_h0), int(with_dht));
  const float* h0p = with_h0 ? h0.f.data() : nullptr;
  auto backward = [&](const float* kept) {
    Grads x{std::vector<Bf16>(q.b.size()), std::vector<Bf16>(k.b.size()), std::vector<Bf16>(v.b.size()),
            std::vector<Bf16>(g.b.size()), {}, std::vector<float>(h0.f.size())};
    cuda::decay_chunk::backward(x.dq.data(), x.dk.data(), x.dv.data(), x.dg.data(), x.dh0.data(), dO.b.data(),
                                with_dht ? dht.f.data() : nullptr, q.b.data(), k.b.data(), v.b.data(), g.b.data(), h0p,
                                d, kept);
    return x;
  };
  std::vector<Bf16> o(B * T * HV * dv);
  std::vector<float> ht(B * HV * dk * dv);
  auto forward = [&](float* kept) {
    cuda::decay_chunk::forward(o.data(), ht.data(), q.b.data(), k.b.data(), v.b.data(), g.b.data(), h0p, d, kept);
  };
  const Grads grads = kept_vs_replay(label, cuda::decay_chunk::kept_floats(d), backward, forward);
  const std::vector<Bf16>&gq = grads.dq, &gk = grads.dk, &gv = grads.dv, &gg = grads.dg;
  const std::vector<float>& gh0 = grads.dh0;
  Err eq, ek, ev, eg, eh0;
  for (int64_t b = 0; b < B; b++)
    for (int64_t hk = 0; hk < H; hk++) {
      Mat<double> dq = Mat<double>::Zero(T, dk), dks = Mat<double>::Zero(T, dk);  // summed over the group
      for (int64_t h = hk * G; h < (hk + 1) * G; h++) {
        const Head<double> x =
            reference_head(q, k, v, g, vg, nullptr, with_h0 ? h0.ref.data() : nullptr, b, h, T, HV, dk, dv, G);
        const Mat<double> d_o = decay_chunk::gather_head(dO.ref.data(), b, h, T, HV, dv);
        const Mat<double> ds = decay_chunk::gather_state(with_dht ? dht.ref.data() : nullptr, b, h, HV, dk, dv);
        const HeadGrads<double> c =
            decay_chunk::backward<double, true>(x, d_o, ds, 1.0, 16, decay_chunk::ReadAt::after_update);
        dq += c.dq, dks += c.dk;
        for (int64_t t = 0; t < T; t++) {
          if (vg)
            for (int64_t i = 0; i < dk; i++) eg.add(at(gg, ((b * T + t) * HV + h) * dk + i), c.dg(t, i));
          else eg.add(at(gg, (b * T + t) * HV + h), c.dg.row(t).sum());
          for (int64_t i = 0; i < dv; i++) ev.add(at(gv, ((b * T + t) * HV + h) * dv + i), c.dv(t, i));
        }
        for (int64_t i = 0; i < dk * dv; i++) eh0.add(gh0[(b * HV + h) * dk * dv + i], c.ds0(i / dv, i % dv));
      }
      for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < dk; i++) {
          const int64_t idx = ((b * T + t) * H + hk) * dk + i;
          eq.add(at(gq, idx), dq(t, i)), ek.add(at(gk, idx), dks(t, i));
        }
    }
  report(label, "dq", eq, 1e-2), report(label, "dk", ek, 1e-2), report(label, "dv", ev, 1e-2);
  report(label, "dg", eg, 1e-2), report(label, "dh0", eh0, 1e-2);
}

// The forward of one gate kind (0 scalar, 1 vector, 2 RWKV-6) against the CPU chunked reference.
// G value heads a key head (HV = G H; scalar and vector gate only).
static void forward_case(int kind, int64_t B, int64_t T, int64_t H, int64_t D, bool with_h0, uint64_t seed,
                         int64_t DV = 0, int64_t G = 1) {
  const int64_t dk = D, dv = DV ? DV : D, HV = G * H;
  const bool vg = kind > 0;
  std::mt19937_64 rng(seed);
  Buf q, k, v, g, u, h0;
  const double rk = 1.0 / std::sqrt(double(dk));
  q.fill(B * T * H * dk, rng, rk, 0, false, true);
  k.fill(B * T * H * dk, rng, rk, 0, false, true);
  v.fill(B * T * HV * dv, rng, 1, 0, false, true);
  g.fill(B * T * HV * (vg ? dk : 1), rng, 1, 0, true, true);
  u.fill(H * dk, rng, 1, 0, false, true);
  h0.fill(B * HV * dk * dv, rng, 0.5, 0, false, false);
  const float* h0p = with_h0 ? h0.f.data() : nullptr;
  const Rwkv6Dims rwkv6_dims{B, T, H, dk, dv, 1.0, 0, DType::F32};
  const DecayAttentionDims dims{B, T, H, HV, dk, dv, vg, 1.0, 0, DType::F32};
  // o and ht of a forward given `kept` (null: a plain forward)
  auto forward = [&](float* kept) {
    std::pair<std::vector<Bf16>, std::vector<float>> out{std::vector<Bf16>(B * T * HV * dv),
                                                         std::vector<float>(B * HV * dk * dv)};
    auto& [o, ht] = out;
    if (kind == 2)
      cuda::decay_chunk::rwkv6_forward(o.data(), ht.data(), q.b.data(), k.b.data(), v.b.data(), g.b.data(),
                                       u.b.data(), h0p, rwkv6_dims, kept);
    else
      cuda::decay_chunk::forward(o.data(), ht.data(), q.b.data(), k.b.data(), v.b.data(), g.b.data(), h0p, dims, kept);
    return out;
  };
  const auto [o, ht] = forward(nullptr);
  std::vector<float> kept(kind == 2 ? cuda::decay_chunk::kept_floats(rwkv6_dims) : cuda::decay_chunk::kept_floats(dims),
                          kNaN);
  const auto [o_keeping, ht_keeping] = forward(kept.data());
  const Bf16* kept_states = reinterpret_cast<const Bf16*>(kept.data());  // bf16 (B, HV, NT, dk, dv)
  const int64_t NT = (T + 63) / 64;
  Err eo, eht, ekept;  // ekept: every kept h[n] against the reference's state after 64 n tokens
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < HV; h++) {
      const Head<double> x = reference_head(q, k, v, g, vg, kind == 2 ? u.ref.data() : nullptr,
                                            with_h0 ? h0.ref.data() : nullptr, b, h, T, HV, dk, dv, G);
      Mat<double> o_ref, ht_ref;
      decay_chunk::forward<double, true>(o_ref, ht_ref, x, 1.0, 16,
                                         kind == 2 ? decay_chunk::ReadAt::before_update : decay_chunk::ReadAt::after_update);
      for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < dv; i++) eo.add(at(o, ((b * T + t) * HV + h) * dv + i), o_ref(t, i));
      for (int64_t i = 0; i < dk * dv; i++) eht.add(ht[(b * HV + h) * dk * dv + i], ht_ref(i / dv, i % dv));
      const std::vector<Mat<double>> S = decay_chunk::replay_states(x);  // S[t]: after t tokens
      for (int64_t n = 0; n < NT; n++)
        for (int64_t i = 0; i < dk * dv; i++)
          ekept.add(__bfloat162float(kept_states[((b * HV + h) * NT + n) * dk * dv + i]), S[64 * n](i / dv, i % dv));
    }
  static const char* names[] = {"scalar fwd", "vector fwd", "rwkv6 fwd"};
  char label[160];
  std::snprintf(label, sizeof label, "%s B%ld T%ld H%ld HV%ld dk%ld dv%ld h0 %d", names[kind], long(B), long(T),
                long(H), long(HV), long(dk), long(dv), int(with_h0));
  report(label, "o", eo, 5e-3), report(label, "ht", eht, 5e-3), report(label, "h[n]", ekept, 5e-3);
  report_check(label, "keep", same_bits(o, o_keeping) && same_bits(ht, ht_keeping),
               "keeping forward's o, ht == plain forward's bit for bit");
}

// Packed documents on their chunk layout (nn/ops/document_chunks.h), every row alike: documents
// of the given lengths, each starting a 64-token chunk (its chunk flagged in chunk_reset); T = the
// last one's end (a partial last chunk where it leaves one). zero_padding: the places between a
// document's end and the next chunk hold zeros (q = k = v = g = dO = 0, as gather_tokens leaves
// them), else values drawn like the tokens' (the resets alone must separate the documents).
// kind 0 scalar gate, 1 vector gate, 2 RWKV-6 (G = 1); G value heads a key head. Forward (plain
// and keeping, the same bits) and backward (kept_vs_replay) against the CPU chunked reference at
// C = 64 with the same resets (Head::chunk_reset), which tests/test_documents.cpp checks against
// each document run alone.
static void documents_case(int kind, int64_t B, int64_t H, int64_t G, int64_t dk, int64_t dv,
                           const std::vector<int64_t>& lengths, bool zero_padding, bool with_h0, bool with_dht,
                           uint64_t seed) {
  const int64_t HV = G * H;
  const bool vg = kind > 0;
  // the layout: each document's first place, the flags, and which places are padding
  std::vector<int64_t> starts;
  int64_t T = 0;
  for (int64_t n : lengths) {
    starts.push_back((T + 63) / 64 * 64);
    T = starts.back() + n;
  }
  const int64_t NT = (T + 63) / 64;
  std::vector<int32_t> row_reset(NT, 0);  // (NT) one row's chunk_reset
  std::vector<bool> padding(T, true);     // (T)
  for (size_t i = 0; i < starts.size(); i++) {
    row_reset[starts[i] / 64] = 1;
    for (int64_t t = starts[i]; t < starts[i] + lengths[i]; t++) padding[t] = false;
  }
  std::vector<int32_t> chunk_reset;  // (B, NT)
  for (int64_t b = 0; b < B; b++) chunk_reset.insert(chunk_reset.end(), row_reset.begin(), row_reset.end());
  std::mt19937_64 rng(seed);
  Buf q, k, v, g, u, h0, dO, dht;
  const double rk = 1.0 / std::sqrt(double(dk));
  q.fill(B * T * H * dk, rng, rk, 0, false, true);
  k.fill(B * T * H * dk, rng, rk, 0, false, true);
  v.fill(B * T * HV * dv, rng, 1, 0, false, true);
  g.fill(B * T * HV * (vg ? dk : 1), rng, 1, 0, true, true);
  u.fill(H * dk, rng, 1, 0, false, true);
  h0.fill(B * HV * dk * dv, rng, 0.5, 0, false, false);
  dO.fill(B * T * HV * dv, rng, 1, 0, false, true);
  dht.fill(B * HV * dk * dv, rng, 1, 0, false, false);
  if (zero_padding)  // every (B, T, ...) input: the places' elements zero
    for (Buf* x : {&q, &k, &v, &g, &dO}) {
      const size_t inner = x->ref.size() / (B * T);
      for (size_t i = 0; i < x->ref.size(); i++)
        if (padding[i / inner % size_t(T)]) x->ref[i] = 0, x->b[i] = __float2bfloat16_rn(0.f), x->f[i] = 0;
    }
  const float* h0p = with_h0 ? h0.f.data() : nullptr;
  const float* dhtp = with_dht ? dht.f.data() : nullptr;
  Rwkv6Dims rwkv6_dims{B, T, H, dk, dv, 1.0, 0, DType::F32};
  DecayAttentionDims dims{B, T, H, HV, dk, dv, vg, 1.0, 0, DType::F32};
  rwkv6_dims.chunk_reset = dims.chunk_reset = chunk_reset.data();
  std::string docs;
  for (int64_t n : lengths) docs += (docs.empty() ? "" : "+") + std::to_string(n);
  static const char* names[] = {"scalar docs", "vector docs", "rwkv6 docs"};
  char label[160];
  std::snprintf(label, sizeof label, "%s %s%s B%ld H%ld HV%ld dk%ld dv%ld h0 %d dht %d", names[kind], docs.c_str(),
                zero_padding ? "" : " unpadded", long(B), long(H), long(HV), long(dk), long(dv), int(with_h0),
                int(with_dht));
  // o and ht of a forward given `kept` (null: a plain forward)
  auto forward = [&](float* kept) {
    std::pair<std::vector<Bf16>, std::vector<float>> out{std::vector<Bf16>(B * T * HV * dv),
                                                         std::vector<float>(B * HV * dk * dv)};
    auto& [o, ht] = out;
    if (kind == 2)
      cuda::decay_chunk::rwkv6_forward(o.data(), ht.data(), q.b.data(), k.b.data(), v.b.data(), g.b.data(),
                                       u.b.data(), h0p, rwkv6_dims, kept);
    else
      cuda::decay_chunk::forward(o.data(), ht.data(), q.b.data(), k.b.data(), v.b.data(), g.b.data(), h0p, dims, kept);
    return out;
  };
  const int64_t kept_floats =
      kind == 2 ? cuda::decay_chunk::kept_floats(rwkv6_dims) : cuda::decay_chunk::kept_floats(dims);
  const auto [o, ht] = forward(nullptr);
  std::vector<float> kept(kept_floats, kNaN);
  const auto [o_keeping, ht_keeping] = forward(kept.data());
  report_check(label, "keep", same_bits(o, o_keeping) && same_bits(ht, ht_keeping),
               "keeping forward's o, ht == plain forward's bit for bit");
  auto backward = [&](const float* kept_states) {
    Grads x{std::vector<Bf16>(q.b.size()), std::vector<Bf16>(k.b.size()), std::vector<Bf16>(v.b.size()),
            std::vector<Bf16>(g.b.size()), std::vector<Bf16>(kind == 2 ? u.b.size() : 0),
            std::vector<float>(h0.f.size())};
    if (kind == 2)
      cuda::decay_chunk::rwkv6_backward(x.dq.data(), x.dk.data(), x.dv.data(), x.dg.data(), x.du.data(),
                                        x.dh0.data(), dO.b.data(), dhtp, q.b.data(), k.b.data(), v.b.data(),
                                        g.b.data(), u.b.data(), h0p, rwkv6_dims, kept_states);
    else
      cuda::decay_chunk::backward(x.dq.data(), x.dk.data(), x.dv.data(), x.dg.data(), x.dh0.data(), dO.b.data(), dhtp,
                                  q.b.data(), k.b.data(), v.b.data(), g.b.data(), h0p, dims, kept_states);
    return x;
  };
  auto forward_into = [&](float* kept_states) { forward(kept_states); };
  const Grads grads = kept_vs_replay(label, kept_floats, backward, forward_into);
  const auto read = kind == 2 ? decay_chunk::ReadAt::before_update : decay_chunk::ReadAt::after_update;
  Err eo, eht, eq, ek, ev, eg, eu, eh0;
  Mat<double> du_ref = Mat<double>::Zero(H, dk);  // (H, dk): summed over the batch
  for (int64_t b = 0; b < B; b++)
    for (int64_t hk = 0; hk < H; hk++) {
      Mat<double> dq = Mat<double>::Zero(T, dk), dks = Mat<double>::Zero(T, dk);  // summed over the group
      for (int64_t h = hk * G; h < (hk + 1) * G; h++) {
        Head<double> x = reference_head(q, k, v, g, vg, kind == 2 ? u.ref.data() : nullptr,
                                        with_h0 ? h0.ref.data() : nullptr, b, h, T, HV, dk, dv, G);
        x.chunk_reset = row_reset.data();
        Mat<double> o_ref, ht_ref;
        decay_chunk::forward<double, true>(o_ref, ht_ref, x, 1.0, 64, read);
        const Mat<double> d_o = decay_chunk::gather_head(dO.ref.data(), b, h, T, HV, dv);
        const Mat<double> ds = decay_chunk::gather_state(with_dht ? dht.ref.data() : nullptr, b, h, HV, dk, dv);
        const HeadGrads<double> c = decay_chunk::backward<double, true>(x, d_o, ds, 1.0, 64, read);
        dq += c.dq, dks += c.dk;
        if (kind == 2) du_ref.row(h) += c.dbonus;
        for (int64_t t = 0; t < T; t++) {
          if (vg)
            for (int64_t i = 0; i < dk; i++) eg.add(at(grads.dg, ((b * T + t) * HV + h) * dk + i), c.dg(t, i));
          else eg.add(at(grads.dg, (b * T + t) * HV + h), c.dg.row(t).sum());
          for (int64_t i = 0; i < dv; i++) {
            const int64_t idx = ((b * T + t) * HV + h) * dv + i;
            ev.add(at(grads.dv, idx), c.dv(t, i)), eo.add(at(o, idx), o_ref(t, i));
          }
        }
        for (int64_t i = 0; i < dk * dv; i++) {
          const int64_t idx = (b * HV + h) * dk * dv + i;
          eh0.add(grads.dh0[idx], c.ds0(i / dv, i % dv)), eht.add(ht[idx], ht_ref(i / dv, i % dv));
        }
      }
      for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < dk; i++) {
          const int64_t idx = ((b * T + t) * H + hk) * dk + i;
          eq.add(at(grads.dq, idx), dq(t, i)), ek.add(at(grads.dk, idx), dks(t, i));
        }
    }
  for (int64_t h = 0; h < H && kind == 2; h++)
    for (int64_t i = 0; i < dk; i++) eu.add(at(grads.du, h * dk + i), du_ref(h, i));
  report(label, "o", eo, 5e-3), report(label, "ht", eht, 5e-3);
  report(label, "dq", eq, 1e-2), report(label, "dk", ek, 1e-2), report(label, "dv", ev, 1e-2);
  report(label, "dg", eg, 1e-2), report(label, "dh0", eh0, 1e-2);
  if (kind == 2) report(label, "du", eu, 1e-2);
}

// Every case by default (ctest); a group by name: rwkv6, gla, scalar, grouped, fwd (D64, D128), fwd256, mixed,
// bwd256 (every gate's backward at (256, 256), (128, 256), (256, 128)), documents (chunk_reset),
// short (T = 40: one partial chunk, the scans' first chunk also their last), early (cp.async
// copies landing at issue: a scan's tile copied for the next chunk before this chunk's readers
// are done shows).
int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "all";
  auto wants = [&](const char* group) { return which == "all" || which == group; };
  if (wants("gla")) gla_case(1, 70, 2, 64, 1);
  if (wants("rwkv6")) {
    for (int64_t D : {64, 128})
      for (int64_t T : {64, 70, 130}) {
        rwkv6_case(2, T, 2, D, true, true, 0.0, 10 + T + D);
        rwkv6_case(1, T, 2, D, false, false, 0.0, 20 + T + D);
      }
    rwkv6_case(1, 130, 2, 64, true, false, -3.0, 7);  // strong gate: G passes -88 within a chunk
    rwkv6_case(1, 70, 2, 128, false, true, 1.0, 8);
  }
  if (wants("scalar"))
    for (int64_t D : {64, 128})
      for (int64_t T : {64, 70, 130}) gla_case(1, T, 2, D, 30 + T + D, false);
  if (wants("grouped")) {  // two value heads a key head: dq, dk per value head in fp32, then group sums
    for (bool vg : {false, true}) gla_case(2, 70, 2, 64, 40 + vg, vg, 128, true, true, 2);
    for (int kind = 0; kind < 2; kind++) forward_case(kind, 2, 70, 2, 128, true, 50 + kind, 64, 2);
  }
  for (const char* group : {"fwd", "fwd256"}) {
    if (!wants(group)) continue;
    const std::vector<int64_t> widths = std::string(group) == "fwd" ? std::vector<int64_t>{64, 128} : std::vector<int64_t>{256};
    for (int64_t D : widths)
      for (int kind = 0; kind < 3; kind++)  // scalar gate, vector gate, RWKV-6
        for (int64_t T : {64, 70, 130}) forward_case(kind, 1, T, D == 256 ? 1 : 2, D, T != 64, 100 * kind + T + D);
  }
  if (wants("mixed"))
    for (auto [dk, dv] : {std::pair<int64_t, int64_t>{128, 256}, {256, 128}})
      for (int kind = 0; kind < 3; kind++)
        for (int64_t T : {64, 70}) forward_case(kind, 1, T, 1, dk, T != 64, 200 * kind + T + dk, dv);
  if (wants("bwd256"))
    for (auto [dk, dv] : {std::pair<int64_t, int64_t>{256, 256}, {128, 256}, {256, 128}})
      for (int kind = 0; kind < 3; kind++)  // scalar gate, vector gate, RWKV-6
        for (int64_t T : {64, 70, 130}) {
          const bool with_h0 = T != 64, with_dht = T != 130;  // neither, both, h0 alone
          const uint64_t seed = 300 * kind + T + dk + 2 * dv;
          if (kind == 2) rwkv6_case(1, T, 1, dk, with_h0, with_dht, 0.0, seed, dv);
          else gla_case(1, T, 1, dk, seed, kind == 1, dv, with_h0, with_dht);
        }
  if (wants("short"))
    for (int kind = 0; kind < 3; kind++) {  // scalar gate, vector gate, RWKV-6
      forward_case(kind, 1, 40, 2, 64, true, 500 + kind);
      if (kind == 2) rwkv6_case(1, 40, 2, 64, true, true, 0.0, 510);
      else gla_case(1, 40, 2, 64, 510 + kind, kind == 1, 64, true, true);
    }
  if (wants("early")) {
    emu::cp_async_lands_at_issue = true;
    for (int kind = 0; kind < 3; kind++) {  // scalar gate, vector gate, RWKV-6
      forward_case(kind, 1, 130, 1, kind == 0 ? 256 : 64, true, 600 + kind);
      if (kind == 2) rwkv6_case(1, 130, 1, 64, true, true, 0.0, 610);
      else gla_case(1, 130, 1, kind == 0 ? 128 : 64, 610 + kind, kind == 1, 0, true, true);
    }
    emu::cp_async_lands_at_issue = false;
  }
  if (wants("documents")) {
    // documents of 37, 64 and 90 tokens: a partial first chunk, an exact one, one crossing into a
    // partial last chunk (T = 218); grouped value heads; the padding places zero (the layout's)
    // or random; with h0 and dht (chunk 0 flagged: h0 unread, dh0 = 0) and without
    const std::vector<int64_t> docs = {37, 64, 90};
    for (int kind = 0; kind < 3; kind++) {
      const int64_t G = kind == 2 ? 1 : 2;
      documents_case(kind, 2, 1, G, 64, 64, docs, true, false, true, 400 + kind);
      documents_case(kind, 1, 2, G, 128, 128, docs, true, true, false, 410 + kind);
      documents_case(kind, 1, 1, 1, 128, 64, {1, 64, 1, 70}, false, true, true, 420 + kind);
      documents_case(kind, 1, 1, 1, 64, 128, {100, 28}, true, false, false, 430 + kind);
    }
  }
  std::printf(g_fail ? "SOME FAILED\n" : "ALL OK\n");
  return g_fail;
}
