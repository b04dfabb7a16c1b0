// Runs the short convolution kernels of cuda/short_conv.cu (forward with final state; the one-kernel
// backward with dx, dw, dbias and the dstate kernel) on the host emulator and compares every
// output with a literal loop in fp64 over the same inputs, the CPU reference's semantics
// (nn/ops/short_conv.cpp: xe = [state ; x], output t reads xe_t .. xe_{t+K-1} of its document,
// the final state xe_L ..). Cases: bf16 with 16-byte loads (C a multiple of 8) and the scalar path
// (odd C, or x one element off alignment), fp32; K = 4, 3 (a padded tap) and 6 (the kMaxTaps
// path), with and without bias and initial state, SiLU and identity, L shorter than K-1, L not a
// multiple of the runs or the backward's tiles (halos across them), C not a multiple of the tiles'
// 128 channels, packed documents with one-token documents and boundaries on and off the run and
// tile edges, and the fused l2norm (norm_width: y and rstd against the
// reference's normalised heads) with 32, 16, 8, 4 and 1 lanes a head and the fallback (64 lanes a
// head: the plain kernel, then tests/emu/include/cuda/l2norm.h in place). Tolerances (relative
// RMS): bf16 1e-2 (outputs rounded to bf16), fp32 1e-5; the exit status is 1 when a row fails.
#include "short_conv_host.cpp"

#include <random>
#include <string>
#include <vector>

#include "report.h"

using namespace hla;
using Bf16 = __nv_bfloat16;

namespace {

struct Case {
  int64_t B, L, C, K;
  bool bias, state;
  ConvAct act;
  std::vector<int64_t> documents;  // each row cut into these lengths (sum L), or none
  int64_t x_offset = 0;            // x starts this many elements into its buffer (0: aligned)
  int64_t norm_width = 0;          // the fused l2norm's head width, or 0: none
};

double to_double(float v) { return v; }
double to_double(Bf16 v) { return __bfloat162float(v); }

template <class T>
std::vector<T> random_values(int64_t n, std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<T> v(n);
  for (T& x : v) x = cuda::from_float<T>(normal(rng));
  return v;
}

template <class T>
void run_case(const Case& c, uint64_t seed) {
  const int64_t B = c.B, L = c.L, C = c.C, K = c.K, S = K - 1;
  std::mt19937_64 rng(seed);
  std::vector<T> x_buf = random_values<T>(c.x_offset + B * L * C, rng, 1.f);
  const T* x = x_buf.data() + c.x_offset;  // x: (B, L, C)
  const std::vector<T> w = random_values<T>(C * K, rng, 0.5f), bias = random_values<T>(C, rng, 0.3f),
                       state = random_values<T>(B * C * S, rng, 1.f), dy = random_values<T>(B * L * C, rng, 1.f),
                       dfinal = random_values<T>(B * C * S, rng, 1.f);
  std::vector<int32_t> doc_start(B * L);  // doc_start: (B, L)
  for (int64_t b = 0; b < B; b++) {
    int64_t t = 0;
    for (int64_t len : c.documents)
      for (const int64_t start = t; t < start + len; t++) doc_start[b * L + t] = static_cast<int32_t>(start);
  }
  ShortConvDims d{B, L, C, K, c.act, c.documents.empty() ? nullptr : doc_start.data(), c.norm_width};
  const T* bias_p = c.bias ? bias.data() : nullptr;
  const T* state_p = c.state ? state.data() : nullptr;
  const DType dtype = std::is_same_v<T, float> ? DType::F32 : DType::BF16;

  std::vector<T> y(B * L * C), final_state(B * C * S), dx(B * L * C), dw(C * K), dbias(C), dstate(B * C * S);
  const int64_t heads = c.norm_width > 0 ? B * L * C / c.norm_width : 0;
  std::vector<float> rstd(heads);  // rstd: (B, L, C / norm_width)
  cuda::short_conv_forward(y.data(), final_state.data(), c.norm_width > 0 ? rstd.data() : nullptr, x, w.data(),
                           bias_p, state_p, d, dtype);
  cuda::short_conv_backward(dx.data(), dw.data(), c.bias ? dbias.data() : nullptr, c.state ? dstate.data() : nullptr,
                            dy.data(), dfinal.data(), x, w.data(), bias_p, state_p, d, dtype);

  // the reference in fp64, one (b, c) at a time over xe = [state ; x]
  Err e_y, e_rstd, e_final, e_dx, e_dw, e_db, e_dstate;
  std::vector<double> y_ref(B * L * C), dw_ref(C * K, 0.0), db_ref(C, 0.0);
  for (int64_t b = 0; b < B; b++)
    for (int64_t ch = 0; ch < C; ch++) {
      std::vector<double> xe(L + S), dxe(L + S, 0.0);
      for (int64_t e = 0; e < S; e++) xe[e] = state_p ? to_double(state[(b * C + ch) * S + e]) : 0.0;
      for (int64_t t = 0; t < L; t++) xe[S + t] = to_double(x[(b * L + t) * C + ch]);
      auto first = [&](int64_t t) { return c.documents.empty() ? int64_t{0} : doc_start[b * L + t] + S; };
      for (int64_t t = 0; t < L; t++) {
        double pre = bias_p ? to_double(bias[ch]) : 0.0;
        for (int64_t i = 0; i < K; i++)
          if (t + i >= first(t)) pre += to_double(w[ch * K + i]) * xe[t + i];
        const double s = 1.0 / (1.0 + std::exp(-pre));
        const double silu = c.act == ConvAct::SiLU;
        y_ref[(b * L + t) * C + ch] = silu ? pre * s : pre;
        const double dpre = to_double(dy[(b * L + t) * C + ch]) * (silu ? s * (1 + pre * (1 - s)) : 1.0);
        db_ref[ch] += dpre;
        for (int64_t i = 0; i < K; i++)
          if (t + i >= first(t)) dw_ref[ch * K + i] += dpre * xe[t + i], dxe[t + i] += to_double(w[ch * K + i]) * dpre;
      }
      for (int64_t j = 0; j < S; j++) {
        const bool visible = L == 0 || L + j >= first(L - 1);
        e_final.add(to_double(final_state[(b * C + ch) * S + j]), visible ? xe[L + j] : 0.0);
        if (visible) dxe[L + j] += to_double(dfinal[(b * C + ch) * S + j]);
      }
      for (int64_t t = 0; t < L; t++) e_dx.add(to_double(dx[(b * L + t) * C + ch]), dxe[S + t]);
      if (state_p)
        for (int64_t j = 0; j < S; j++) e_dstate.add(to_double(dstate[(b * C + ch) * S + j]), dxe[j]);
    }
  for (int64_t n = 0; n < heads; n++) {  // y = y / sqrt(sum(y^2) + eps) per head of norm_width channels
    double* yr = y_ref.data() + n * c.norm_width;
    double sum_sq = 0;
    for (int64_t i = 0; i < c.norm_width; i++) sum_sq += yr[i] * yr[i];
    const double r = 1.0 / std::sqrt(sum_sq + d.norm_eps);
    for (int64_t i = 0; i < c.norm_width; i++) yr[i] *= r;
    e_rstd.add(rstd[n], r);
  }
  for (int64_t i = 0; i < B * L * C; i++) e_y.add(to_double(y[i]), y_ref[i]);
  for (int64_t i = 0; i < C * K; i++) e_dw.add(to_double(dw[i]), dw_ref[i]);
  for (int64_t i = 0; i < C && bias_p; i++) e_db.add(to_double(dbias[i]), db_ref[i]);

  std::string what = std::string(dtype == DType::F32 ? "f32" : "bf16") + " B" + std::to_string(B) + " L" +
                     std::to_string(L) + " C" + std::to_string(C) + " K" + std::to_string(K) +
                     (c.bias ? " bias" : "") + (c.state ? " state" : "") +
                     (c.act == ConvAct::SiLU ? " silu" : " identity") + (c.documents.empty() ? "" : " docs") +
                     (c.x_offset ? " x+1" : "") + (c.norm_width ? " norm" + std::to_string(c.norm_width) : "");
  const double tol = dtype == DType::F32 ? 1e-5 : 1e-2;
  if (L > 0) report(what, "y", e_y, tol), report(what, "dx", e_dx, tol);
  if (heads > 0) report(what, "rstd", e_rstd, tol);
  if (S > 0) report(what, "fin", e_final, tol);
  report(what, "dw", e_dw, tol);
  if (bias_p) report(what, "db", e_db, tol);
  if (state_p && S > 0) report(what, "dst", e_dstate, tol);
}

}  // namespace

int main() {
  const ConvAct silu = ConvAct::SiLU, identity = ConvAct::Identity;
  const std::vector<Case> cases = {
      {2, 77, 64, 4, false, false, silu, {}},                  // the GDN conv: 16-byte loads, runs cut to 8
      {2, 70, 64, 4, true, true, silu, {}},                    // bias and state
      {3, 33, 67, 4, true, true, silu, {}},                    // odd C: the scalar path, full runs
      {2, 40, 64, 4, true, true, silu, {}, 1},                 // x off alignment: the scalar path
      {3, 33, 24, 3, false, true, identity, {}},               // K = 3: one padded tap
      {2, 45, 16, 6, true, true, silu, {}},                    // K = 6: the kMaxTaps path
      {2, 2, 16, 4, true, true, silu, {}},                     // L < K-1 (decode)
      {2, 1, 8, 4, false, true, identity, {}},                 // one token
      {2, 100, 16, 4, true, false, silu, {1, 31, 1, 2, 33, 32}},  // documents on and off run edges
      {2, 33, 9, 3, false, false, identity, {1, 2, 30}},       // documents, scalar path, K = 3
      {1, 200, 136, 4, true, true, silu, {70, 60, 1, 69}},     // four backward tiles, documents across their
                                                               // edges, a second slab of 8 channels
      {1, 300, 64, 4, true, true, silu, {}},                   // five tiles, blocks of 3 and 2 (one SM here)
      // the fused l2norm, lanes a head in bf16 / fp32: 32 / 64 (fp32 unfused), 16 / 32, 8 / 16 (one-warp
      // blocks, the last warp half idle), 4 / 8 with documents, 4 / 1 (bf16's scalar path), 64 / 64 (x off
      // alignment: both unfused)
      {2, 37, 512, 4, true, true, silu, {}, 0, 256},
      {2, 45, 256, 4, false, true, silu, {}, 0, 128},
      {3, 33, 128, 4, false, false, silu, {}, 0, 64},
      {2, 100, 64, 4, true, false, silu, {1, 31, 1, 2, 33, 32}, 0, 32},
      {3, 33, 36, 4, true, true, silu, {}, 0, 4},
      {2, 40, 128, 4, true, true, silu, {}, 1, 64},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    run_case<Bf16>(c, seed++);
    run_case<float>(c, seed++);
  }
  std::printf(g_fail ? "SOME FAILED\n" : "ALL OK\n");
  return g_fail;
}
