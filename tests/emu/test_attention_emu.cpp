// Runs the softmax attention kernels of cuda/attention.cu on the host emulator
// (tests/emu/include/emu.h) and compares them with the CPU reference in fp64,
// cpu::attention_forward / attention_backward (nn/ops/attention_reference.cpp): the bf16
// tensor-core path (forward, dQ and dK/dV kernels; 128-query forward blocks of 4 warps of 32
// rows, 64-row backward blocks) at head widths 64 and 128, and at 256 (64-query forward blocks of
// 4 warps of 16 rows, 128-row backward blocks, dK/dV in two sweeps), T a multiple of the blocks or not
// (5, 64, 100, 129, 200, 257, 300), grouped kv heads and sliding windows (2, 20: shorter than a
// key tile, 70: longer, 47: the distance between corners of some warps' tiles, so a wrong "no
// mask needed" shows), scores of std 2 and 8 (the forward's running max lags the true one by
// up to 2^8 and moves many times along a row at 8); packed documents (varlen: one-token
// documents, boundaries on and off the tile edges, with and without a window);
// some cases again with cp.async copies landing at issue and warps run one after another (the
// emulator's other extreme of copy and warp timing: a buffer overwritten before its readers are
// done shows there); then the fma kernels: fp32 at head width 64, fp32 and bf16 at 20; then the
// head width 128 and 64 cases (with those of copies landing at issue) with the forward on the
// wgmma kernel (cuda::set_attention_wgmma: descriptors and fragments as
// tests/emu/include/cuda/wgmma.cuh decodes them; a producer warpgroup and two consumers, three
// at head width 64 (blocks of 192 queries), handing K/V tiles of 128 keys over through named
// barriers, the ring of 3 stages wrapping twice at T 520), and the head width 128, 64 and 256
// cases again with the backward on the wgmma kernels as well (cuda::set_attention_wgmma_backward;
// at 256 the dK/dV kernel's two warpgroups, one for dV and one for dK).
// The backward runs on the kernel's own o and lse, as in training. Tolerances are gpu-check's
// (relative RMS: bf16 5e-3 outputs, 1e-2 gradients; fp32 1e-5); the exit status is 1 when a row
// fails.
#include "attention_host.cpp"

#include <random>
#include <string>
#include <vector>

#include "nn/ops/attention_reference.h"
#include "report.h"

using namespace hla;
using Bf16 = __nv_bfloat16;

// n normal values of standard deviation std: exact (rounded to the storage dtype) in fp64, and
// as stored.
struct Input {
  std::vector<double> ref;
  std::vector<Bf16> b;
  std::vector<float> f;
  Input(size_t n, std::mt19937_64& rng, double std) : ref(n), b(n), f(n) {
    std::normal_distribution<double> N(0, std);
    for (size_t i = 0; i < n; i++) {
      b[i] = __float2bfloat16_rn(float(N(rng)));
      f[i] = __bfloat162float(b[i]);
      ref[i] = f[i];
    }
  }
  const void* data(DType t) const { return t == DType::BF16 ? static_cast<const void*>(b.data()) : f.data(); }
};

// A kernel output buffer of n elements in the storage dtype.
struct Output {
  DType dtype;
  std::vector<Bf16> b;
  std::vector<float> f;
  Output(size_t n, DType t) : dtype(t), b(t == DType::BF16 ? n : 0), f(t == DType::F32 ? n : 0) {}
  void* data() { return dtype == DType::BF16 ? static_cast<void*>(b.data()) : f.data(); }
  double operator[](size_t i) const { return dtype == DType::BF16 ? __bfloat162float(b[i]) : f[i]; }
  size_t size() const { return std::max(b.size(), f.size()); }
};

template <class Got>
static Err compare(const Got& got, const std::vector<double>& ref) {
  Err e;
  for (size_t i = 0; i < ref.size(); i++) e.add(got[i], ref[i]);
  return e;
}

// doc_start (B, T) of rows split into documents of the given lengths (each row's sum to T).
static std::vector<int32_t> doc_starts(const std::vector<std::vector<int>>& lengths, int64_t T) {
  std::vector<int32_t> starts;
  for (const auto& row : lengths) {
    int first = 0;
    for (int n : row) {
      starts.insert(starts.end(), n, first);
      first += n;
    }
    if (first != T) std::abort();
  }
  return starts;
}

// docs: each row's document lengths (packed documents), or empty: one document a row.
static void attention_case(DType dtype, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D, int64_t window,
                           uint64_t seed, double q_std = 2.0, const std::vector<std::vector<int>>& docs = {}) {
  std::mt19937_64 rng(seed);
  // q of std 2 gives scores of std ~2 at scale 1 / sqrt(D): peaked rows, so the online max moves;
  // std 8 gives scores of std ~8 (~11.5 in log2 units), so the forward's max, which moves only
  // when passed by 2^8, moves many times along a row and lags in between.
  const Input q(B * T * H * D, rng, q_std), k(B * T * Hkv * D, rng, 1.0), v(B * T * Hkv * D, rng, 1.0),
      dout(B * T * H * D, rng, 1.0);
  AttentionDims d{B, T, H, Hkv, D, D, 1.0 / std::sqrt(double(D)), window, DType::F32};
  const std::vector<int32_t> starts = docs.empty() ? std::vector<int32_t>() : doc_starts(docs, T);
  if (!docs.empty()) d.doc_start = starts.data();
  Output o(B * T * H * D, dtype), dq(B * T * H * D, dtype), dk(B * T * Hkv * D, dtype), dv(B * T * Hkv * D, dtype);
  std::vector<float> lse(B * H * T);
  cuda::attention_forward(o.data(), lse.data(), q.data(dtype), k.data(dtype), v.data(dtype), d, dtype);
  cuda::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(dtype), q.data(dtype), k.data(dtype),
                           v.data(dtype), o.data(), lse.data(), d, dtype);

  std::vector<double> o_ref(o.size()), lse_ref(lse.size()), dq_ref(dq.size()), dk_ref(dk.size()), dv_ref(dv.size());
  cpu::attention_forward(o_ref.data(), lse_ref.data(), q.ref.data(), k.ref.data(), v.ref.data(), d);
  cpu::attention_backward(dq_ref.data(), dk_ref.data(), dv_ref.data(), dout.ref.data(), q.ref.data(), k.ref.data(),
                          v.ref.data(), o_ref.data(), lse_ref.data(), d);

  std::string doc_label;
  for (const auto& row : docs) {
    doc_label += doc_label.empty() ? " docs " : " | ";
    for (size_t i = 0; i < row.size(); i++) doc_label += (i ? "," : "") + std::to_string(row[i]);
  }
  char label[240];
  std::snprintf(label, sizeof label, "%s%s %s B%ld T%ld H%ld Hkv%ld D%ld window %ld q_std %g%s",
                emu::cp_async_lands_at_issue ? "early " : "", cuda::attention_kernel(D, D, dtype), dtype_name(dtype),
                long(B), long(T), long(H), long(Hkv), long(D), long(window), q_std, doc_label.c_str());
  const bool bf = dtype == DType::BF16;
  const double out_tol = bf ? 5e-3 : 1e-5, grad_tol = bf ? 1e-2 : 1e-5;
  report(label, "o", compare(o, o_ref), out_tol);
  report(label, "lse", compare(lse, lse_ref), out_tol);
  report(label, "dq", compare(dq, dq_ref), grad_tol);
  report(label, "dk", compare(dk, dk_ref), grad_tol);
  report(label, "dv", compare(dv, dv_ref), grad_tol);
}

// The cases at head width D: T a multiple of the blocks or not, GQA, windows, peaked rows,
// packed documents.
static void width_cases(int64_t D) {
  for (int64_t T : {64, 100, 257}) attention_case(DType::BF16, T == 64 ? 2 : 1, T, 2, 1, D, 0, T + D);  // GQA 2 -> 1
  attention_case(DType::BF16, 1, 257, 2, 2, D, 70, 1 + D);   // a window longer than a key tile
  attention_case(DType::BF16, 1, 100, 4, 2, D, 20, 2 + D);   // shorter than a key tile, GQA 4 -> 2
  attention_case(DType::BF16, 1, 200, 2, 1, D, 47, 7 + D);   // a warp's tile whose corner is 47 apart
  attention_case(DType::BF16, 1, 129, 2, 2, D, 2, 3 + D);    // two keys a query; a block of 1 query
  attention_case(DType::BF16, 3, 5, 2, 1, D, 0, 4 + D);      // 5 tokens: 3 of the 4 forward warps idle
  attention_case(DType::BF16, 1, 300, 2, 1, D, 0, 8 + D, 8.0);  // peaked rows: the lagging max
  // packed documents: one-token documents, boundaries on a tile edge (64) and inside tiles,
  // a document longer than a forward block; GQA 2 -> 1 so the dK/dV steps cross heads
  attention_case(DType::BF16, 2, 300, 2, 1, D, 0, 9 + D, 2.0, {{1, 63, 64, 100, 72}, {150, 1, 1, 148}});
  attention_case(DType::BF16, 1, 200, 2, 2, D, 20, 10 + D, 2.0, {{50, 3, 147}});  // and a window
}

// The cases again with cp.async copies landing at issue and warps run one after another.
static void early_cases(int64_t D) {
  emu::cp_async_lands_at_issue = true;
  attention_case(DType::BF16, 1, 300, 4, 1, D, 0, 5 + D);   // GQA 4 -> 1: the dK/dV steps cross heads
  attention_case(DType::BF16, 1, 257, 2, 2, D, 70, 6 + D);
  attention_case(DType::BF16, 1, 257, 4, 1, D, 0, 11 + D, 2.0, {{30, 1, 130, 96}});
  emu::cp_async_lands_at_issue = false;
}

// Every case by default (ctest); a group by name: d64, d128, d256, early, fma, wgmma (the D = 128,
// 64 and 256 cases with the forward on wgmma, cuda::set_attention_wgmma), wgmma-bwd (the D = 128,
// 64 and 256 cases with the backward on wgmma too, cuda::set_attention_wgmma_backward), fused-bwd
// (the D = 128 and 64 cases with the backward as one kernel, cuda::set_attention_fused_backward).
int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "all";
  // The mma kernels except in the wgmma groups (a build with wgmma code, as this one, would
  // otherwise run wgmma at the widths where it is the default: cuda/attention.h)
  cuda::set_attention_wgmma(cuda::WgmmaSetting::off);
  cuda::set_attention_wgmma_backward(cuda::WgmmaSetting::off);
  for (int64_t D : {64, 128, 256})
    if (which == "all" || which == "d" + std::to_string(D)) width_cases(D);
  if (which == "all" || which == "early")
    for (int64_t D : {64, 128, 256}) early_cases(D);
  if (which == "all" || which == "wgmma") {
    const cuda::WgmmaSetting was = cuda::set_attention_wgmma(cuda::WgmmaSetting::on);
    for (int64_t D : {128, 64, 256}) {
      width_cases(D);
      early_cases(D);
      emu::cp_async_lands_at_issue = true;
      attention_case(DType::BF16, 1, 520, 2, 1, D, 0, 16 + D);  // 5 tiles in the last block
      emu::cp_async_lands_at_issue = false;
    }
    cuda::set_attention_wgmma(was);
  }
  if (which == "all" || which == "wgmma-bwd") {
    const cuda::WgmmaSetting forward_was = cuda::set_attention_wgmma(cuda::WgmmaSetting::on);
    const cuda::WgmmaSetting backward_was = cuda::set_attention_wgmma_backward(cuda::WgmmaSetting::on);
    const cuda::FusedSetting fused_was = cuda::set_attention_fused_backward(cuda::FusedSetting::off);
    for (int64_t D : {128, 64, 256}) {
      width_cases(D);
      early_cases(D);
    }
    cuda::set_attention_fused_backward(fused_was);
    cuda::set_attention_wgmma_backward(backward_was);
    cuda::set_attention_wgmma(forward_was);
  }
  if (which == "all" || which == "fused-bwd") {
    const cuda::WgmmaSetting forward_was = cuda::set_attention_wgmma(cuda::WgmmaSetting::on);
    const cuda::WgmmaSetting backward_was = cuda::set_attention_wgmma_backward(cuda::WgmmaSetting::on);
    const cuda::FusedSetting fused_was = cuda::set_attention_fused_backward(cuda::FusedSetting::on);
    for (int64_t D : {128, 64}) {
      width_cases(D);
      early_cases(D);
      // 8 key blocks: turn chains of up to 8 shares a query tile, a window that ends them early,
      // documents that end them at their first block; GQA 4 -> 2
      attention_case(DType::BF16, 1, 1000, 4, 2, D, 0, 12 + D);
      attention_case(DType::BF16, 1, 1000, 2, 1, D, 300, 13 + D);
      attention_case(DType::BF16, 1, 1000, 2, 1, D, 0, 14 + D, 2.0, {{400, 1, 599}});
    }
    cuda::set_attention_fused_backward(fused_was);
    cuda::set_attention_wgmma_backward(backward_was);
    cuda::set_attention_wgmma(forward_was);
  }
  if (which == "all" || which == "fma") {
    attention_case(DType::F32, 1, 70, 2, 1, 64, 30, 3);
    attention_case(DType::F32, 2, 70, 2, 1, 64, 0, 12, 2.0, {{10, 1, 59}, {33, 37}});
    attention_case(DType::F32, 1, 70, 2, 2, 64, 30, 13, 2.0, {{40, 30}});
    // D = 20: the backward's delta rows in 16-byte vectors (F32, 5 a row) and element by element
    // (BF16: 20 is no multiple of 8), odd T, GQA 3 -> 1
    attention_case(DType::F32, 1, 37, 3, 1, 20, 0, 14);
    attention_case(DType::BF16, 2, 37, 3, 1, 20, 0, 15);
  }
  std::printf(g_fail ? "SOME FAILED\n" : "ALL OK\n");
  return g_fail;
}
