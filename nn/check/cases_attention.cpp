// Check cases (nn/check/registry.h) of softmax attention and RoPE.
// attention: grouped kv heads, sliding windows (one of 20 keys, shorter than a key tile, so whole
// warps of the forward's 128-query blocks skip tiles), D != Dv and one long sequence (T = 4096)
// in gpu mode, with T = 77, 130, 200, 333 not multiples of the kernels' row blocks (64 in the
// backward, 128 in the forward: 130 leaves a block of 2 queries; at D = 256, 128 and 64); perf at the bench
// shapes (registry.h) and T = 16384, causal, bf16, against torch SDPA (flash).
// Packed documents (varlen, doc_start from cu_seqlens: an input never perturbed): empty and
// one-token documents, boundaries on and off the kernels' tiles, with a window, on the fma path,
// and at T = 4096; perf at the first bench shape in documents of 512 tokens (torch SDPA
// runs them as the batch of B T / 512 sequences they equal; FLOPs count each document's visible
// half).
// Perf FLOPs count the visible half of the causal square: forward 4 B H T^2 D / 2 (two
// products), forward+backward 3.5x that (the backward's five products), as flash-attention
// reports them; GB/s counts q, k, v and o once (fwd+bwd: also do, dq, dk and dv).
// Every gpu and perf case names its kernels: "attention ..." runs the mma kernels (the oracle),
// and at D = Dv = 64, 128 or 256 the case runs again with its bf16 forward on the wgmma kernel
// ("attention wgmma ...", cuda::set_attention_wgmma; the backward on mma), a third time with
// the backward on wgmma as well ("attention wgmma fwd+bwd ...", cuda::set_attention_wgmma_backward),
// and at 64 and 128 a fourth with that backward as one kernel ("attention wgmma fwd+bwd fused"),
// whatever the build's default (cuda/attention.h: WgmmaSetting) is.
// rope: the attention and RetNet widths, a head width whose half (24) makes a warp span two
// tokens, position offsets, a long sequence (angles up to ~4200 rad), a half width of 10 (no
// 16-byte groups: the single-element kernel); per-sequence
// positions (decoding a batch of mixed lengths); per-token positions (packed documents).
// attention_decode: a GQA step at mixed positions (0, mid, the last slot), a sliding window whose
// ring has wrapped, D != Dv, and a 4096-slot cache and a batch-1 wrapped window of 1000, both of
// which the CUDA kernel splits over the cache (split-K); inputs and outputs only (no gradient).
#include <algorithm>
#include <functional>
#include <memory>
#include <string>

#include "nn/check/registry.h"
#include "nn/ops/attention.h"
#include "nn/ops/attention_decode.h"
#include "nn/ops/rope.h"
#ifdef HLA_CUDA
#include "cuda/attention.h"
#endif

namespace hla::check {
namespace {

using Vars = std::vector<Var>;

struct AttentionCase {
  std::string name;
  int64_t B, T, H, Hkv, D, Dv;
  double scale;  // 0: 1 / sqrt(D)
  int64_t window;
  std::vector<int64_t> cu_seqlens = {};  // packed documents (the fourth input, doc_start); empty: none
  bool wgmma = false;           // the bf16 forward on the wgmma kernel (cuda::set_attention_wgmma)
  bool wgmma_backward = false;  // the backward too (cuda::set_attention_wgmma_backward)
  bool fused_backward = false;  // and the backward as one kernel (cuda::set_attention_fused_backward)
};

// While alive, cuda::attention_forward (BACKWARD: attention_backward) runs its wgmma kernels if
// `on` and its mma kernels if not (a CPU build has neither), whatever the default and the
// environment (HLA_ATTENTION_WGMMA, HLA_ATTENTION_WGMMA_BWD) say: every case names its kernels.
template <bool BACKWARD>
class WgmmaScope {
 public:
  explicit WgmmaScope(bool on) : was_(set(setting(on))) {}
  ~WgmmaScope() { set(was_); }
  WgmmaScope(const WgmmaScope&) = delete;
  WgmmaScope& operator=(const WgmmaScope&) = delete;

 private:
#ifdef HLA_CUDA
  using Setting = cuda::WgmmaSetting;
  static Setting setting(bool on) { return on ? Setting::on : Setting::off; }
  static Setting set(Setting s) {
    return BACKWARD ? cuda::set_attention_wgmma_backward(s) : cuda::set_attention_wgmma(s);
  }
#else
  using Setting = bool;
  static Setting setting(bool on) { return on; }
  static Setting set(Setting s) { return s; }
#endif
  Setting was_;
};
using WgmmaForward = WgmmaScope<false>;
using WgmmaBackward = WgmmaScope<true>;

// While alive, the wgmma backward runs as one kernel if `on` (dQ added by the dK/dV blocks:
// cuda::set_attention_fused_backward), as two if not, whatever the shape.
class FusedBackwardScope {
 public:
  explicit FusedBackwardScope(bool on) : was_(set(on)) {}
  ~FusedBackwardScope() { set(was_); }
  FusedBackwardScope(const FusedBackwardScope&) = delete;
  FusedBackwardScope& operator=(const FusedBackwardScope&) = delete;

 private:
#ifdef HLA_CUDA
  using Setting = cuda::FusedSetting;
  static Setting set(bool on) { return cuda::set_attention_fused_backward(on ? Setting::on : Setting::off); }
  static Setting set(Setting setting) { return cuda::set_attention_fused_backward(setting); }
  Setting was_;
#else
  static bool set(bool on) { return on; }
  bool was_;
#endif
};
// A run's backward settings together.
struct BackwardScopes {
  WgmmaBackward wgmma;
  FusedBackwardScope fused_backward;
  explicit BackwardScopes(const AttentionCase& c) : wgmma(c.wgmma_backward), fused_backward(c.fused_backward) {}
};

// q, k, v and, with documents, doc_start.
OpFn attention_op(const AttentionCase& c) {
  const double scale = c.scale != 0 ? c.scale : default_attention_scale(c.D);
  const int64_t window = c.window;
  const bool wgmma = c.wgmma;
  return [scale, window, wgmma](const Vars& x) {
    const WgmmaForward forward_on_wgmma(wgmma);
    return Vars{attention(x[0], x[1], x[2], scale, window, x.size() > 3 ? x[3].value() : Tensor())};
  };
}

// Whether the wgmma kernels (forward and backward) run at the case's widths, and the fused backward.
bool wgmma_widths(const AttentionCase& c) { return c.D == c.Dv && (c.D == 64 || c.D == 128 || c.D == 256); }
bool fused_backward_widths(const AttentionCase& c) { return c.D == c.Dv && (c.D == 64 || c.D == 128); }
// The case again with its forward on wgmma: "attention wgmma ...", bf16 only.
AttentionCase on_wgmma(AttentionCase c) {
  c.name.insert(std::string("attention").size(), " wgmma");
  c.wgmma = true;
  return c;
}

// The same with the backward on wgmma as well: "attention wgmma fwd+bwd ...".
AttentionCase on_wgmma_backward(AttentionCase c) {
  c = on_wgmma(c);
  c.name.insert(std::string("attention wgmma").size(), " fwd+bwd");
  c.wgmma_backward = true;
  return c;
}

// And the backward as one kernel: "attention wgmma fwd+bwd fused ...".
AttentionCase on_fused_backward(AttentionCase c) {
  c = on_wgmma_backward(c);
  c.name.insert(std::string("attention wgmma fwd+bwd").size(), " fused");
  c.fused_backward = true;
  return c;
}

// The case on each kernel choice its widths have: mma, and at D = Dv = 64, 128 or 256 also the
// wgmma forward, then both passes on wgmma, then (at 64 and 128) the backward fused.
std::vector<AttentionCase> kernel_runs(const AttentionCase& c) {
  std::vector<AttentionCase> runs = {c};
  if (wgmma_widths(c)) runs.push_back(on_wgmma(c));
  if (wgmma_widths(c)) runs.push_back(on_wgmma_backward(c));
  if (fused_backward_widths(c)) runs.push_back(on_fused_backward(c));
  return runs;
}

// The case's run setting (Case::setting): its backward kernels (wgmma or mma, dQ fused or not)
// for a whole run.
std::function<std::shared_ptr<void>()> attention_setting(const AttentionCase& c) {
  return [c] { return std::static_pointer_cast<void>(std::make_shared<BackwardScopes>(c)); };
}

// cu_seqlens of rows of T tokens, each split into documents of the given lengths (0: empty).
std::vector<int64_t> cu_seqlens_of(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> cu = {0};
  for (const auto& row : rows)
    for (int64_t n : row) cu.push_back(cu.back() + n);
  return cu;
}

KernelLabel attention_kernel(const AttentionCase& c) {
#ifdef HLA_CUDA
  return [c](DType dtype) {
    const WgmmaForward forward_on_wgmma(c.wgmma);
    const BackwardScopes backward(c);
    return std::string(cuda::attention_kernel(c.D, c.Dv, dtype));
  };
#else
  (void)c;
  return named_kernel("attention");
#endif
}

void add_attention_cases() {
  auto inputs = [](AttentionCase c) {
    return [c](uint64_t seed) {
      Inputs in{{"q", randn64({c.B, c.T, c.H, c.D}, seed + 1)},
                {"k", randn64({c.B, c.T, c.Hkv, c.D}, seed + 2)},
                {"v", randn64({c.B, c.T, c.Hkv, c.Dv}, seed + 3)}};
      if (!c.cu_seqlens.empty()) in.push_back({"doc_start", document_starts(c.cu_seqlens, c.B, c.T), false});
      return in;
    };
  };
  // Full causal, 4 query heads on 2 kv heads (GQA), default scale; a sliding window of 3 over 6
  // tokens (so early rows see fewer keys), GQA 2 -> 1, scale 0.7.
  // Packed documents: row 0 of 1, 3 and 2 tokens, row 1 an empty document then two of 3.
  for (const auto& [c, seed] : {std::pair<AttentionCase, uint64_t>{{"attention gqa", 2, 5, 4, 2, 3, 2, 0, 0}, 10},
                                {{"attention window", 2, 6, 2, 1, 3, 2, 0.7, 3}, 13},
                                {{"attention documents", 2, 6, 2, 1, 3, 2, 0, 0,
                                  cu_seqlens_of({{1, 3, 2}, {0, 3, 3}})}, 16}})
    add_case(grad_case("attention", c.name, seed, inputs(c), attention_op(c)));
  // gpu cases, each on its kernel runs (kernel_runs)
  auto add_gpu_case = [&](const AttentionCase& c) {
    for (const AttentionCase& k : kernel_runs(c)) {
      Case run = gpu_case("attention", k.name, attention_kernel(k), inputs(k), attention_op(k));
      if (k.wgmma) run.gpu_dtypes = {DType::BF16};
      run.setting = attention_setting(k);
      add_case(std::move(run));
    }
  };
  for (const AttentionCase& c : {AttentionCase{"attention gqa D=64", 2, 77, 4, 2, 64, 64, 0, 0},
                                 AttentionCase{"attention window D=128", 2, 200, 4, 1, 128, 128, 0, 70},
                                 AttentionCase{"attention gqa window D=64", 2, 333, 8, 2, 64, 64, 0, 100},
                                 AttentionCase{"attention gqa window=20 D=128", 2, 130, 4, 2, 128, 128, 0, 20},
                                 AttentionCase{"attention gqa D=256", 2, 200, 4, 2, 256, 256, 0, 0},
                                 AttentionCase{"attention D=48 Dv=32", 2, 50, 2, 2, 48, 32, 0, 0},
                                 AttentionCase{"attention D=40 Dv=20", 2, 37, 3, 1, 40, 20, 0, 0},
                                 AttentionCase{"attention long T=4096", 1, 4096, 2, 1, 128, 128, 0, 0}})
    add_gpu_case(c);
  // Packed documents: one-token and empty documents, boundaries on a key tile's edge (64) and
  // inside tiles, a document longer than a forward block (128), GQA (the dK/dV steps cross heads).
  const int64_t lengths[] = {1, 17, 300, 64, 1000, 0, 513, 129};
  std::vector<int64_t> long_docs;  // 4096 tokens in documents of 0 to 1000 tokens
  for (int64_t left = 4096, i = 0; left > 0; i++) {
    long_docs.push_back(std::min(left, lengths[i % 8]));
    left -= long_docs.back();
  }
  for (const AttentionCase& c :
       {AttentionCase{"attention documents D=128", 2, 300, 4, 2, 128, 128, 0, 0,
                      cu_seqlens_of({{1, 63, 64, 100, 72}, {150, 1, 0, 1, 148}})},
        AttentionCase{"attention documents D=256", 2, 300, 4, 2, 256, 256, 0, 0,
                      cu_seqlens_of({{1, 63, 64, 100, 72}, {150, 1, 0, 1, 148}})},
        AttentionCase{"attention documents window=20 D=64", 1, 333, 8, 2, 64, 64, 0, 20,
                      cu_seqlens_of({{100, 1, 232}})},
        AttentionCase{"attention documents D=48 Dv=32", 2, 50, 2, 2, 48, 32, 0, 0, cu_seqlens_of({{10, 1, 39}, {50}})},
        AttentionCase{"attention documents long T=4096", 1, 4096, 2, 1, 128, 128, 0, 0, cu_seqlens_of({long_docs})}})
    add_gpu_case(c);

  // perf: causal, at each bench shape, at B1 T16384 H16 D128 and B8 T2048 H8 D128, beside torch SDPA's flash
  // backend (targets.md's figures at the first two shapes); each again on the other kernel choices
  // of its width (kernel_runs: "attention wgmma ...", "attention wgmma fwd+bwd ...", "attention
  // wgmma fwd+bwd fused ...", the same anchor).
  auto perf_inputs = [](const AttentionCase& c) {
    return [c](uint64_t) {
      const Shape s{c.B, c.T, c.H, c.D};
      Inputs in{{"q", perf_input(PerfPool::Normal, 0, s)},
                {"k", perf_input(PerfPool::Normal, 1, s)},
                {"v", perf_input(PerfPool::Normal, 2, s)}};
      if (!c.cu_seqlens.empty()) in.push_back({"doc_start", document_starts(c.cu_seqlens, c.B, c.T), false});
      return in;
    };
  };
  auto add_perf_case = [&](const AttentionCase& c, const Perf& perf) {
    for (const AttentionCase& k : kernel_runs(c)) {
      Case run = perf_case("attention", k.name, attention_kernel(k), perf_inputs(k), attention_op(k), perf);
      run.setting = attention_setting(k);
      add_case(std::move(run));
    }
  };
  std::vector<std::pair<BenchShape, AnchorMs>> shapes;
  for (size_t i = 0; i < kBenchShapes.size(); i++)
    shapes.push_back({kBenchShapes[i], i == 0 ? AnchorMs{0.499, 2.029} : i == 1 ? AnchorMs{0.187, 0.733} : AnchorMs{}});
  shapes.push_back({{1, kBenchAttentionLongT, 16, 128}, {}});
  shapes.push_back({{8, 2048, 8, 128}, {}});  // the 8 x 128 hybrids' attention layers (bench train)
  for (const auto& [a, sdpa] : shapes) {
    const double fwd_flops = 4.0 * a.B * a.H * double(a.T) * a.T * a.D / 2;
    const double row_bytes = 2.0 * a.B * a.T * a.H * a.D;  // one (B, T, H, D) bf16 tensor
    add_perf_case({"attention " + dims_label(bench_dims(a)), a.B, a.T, a.H, a.H, a.D, a.D, 0, 0},
                  {fwd_flops, 3.5 * fwd_flops, 4 * row_bytes, 8 * row_bytes, sdpa.fwd, sdpa.fwd_bwd,
                   "torch SDPA flash", bench_dims(a)});
  }
  const BenchShape a = kBenchShapes[0];
  const int64_t kDoc = 512;  // tokens a document
  std::vector<std::pair<const char*, int64_t>> docs_dims = bench_dims(a);
  docs_dims.push_back({"doc", kDoc});
  const double docs_fwd_flops = 4.0 * a.B * a.H * double(a.T / kDoc) * kDoc * kDoc * a.D / 2;
  const double docs_row_bytes = 2.0 * a.B * a.T * a.H * a.D;
  add_perf_case({"attention " + dims_label(docs_dims), a.B, a.T, a.H, a.H, a.D, a.D, 0, 0,
                 cu_seqlens_of(std::vector<std::vector<int64_t>>(a.B, std::vector<int64_t>(a.T / kDoc, kDoc)))},
                {docs_fwd_flops, 3.5 * docs_fwd_flops, 4 * docs_row_bytes, 8 * docs_row_bytes, 0, 0,
                 "torch SDPA flash", docs_dims});
}

void add_rope_cases() {
  struct RopeCase {
    Shape shape;
    double theta;
    int64_t position_offset;
  };
  auto inputs = [](Shape shape) { return [shape](uint64_t seed) { return Inputs{{"x", randn64(shape, seed + 1)}}; }; };
  auto op = [](RopeCase c) { return [c](const Vars& x) { return Vars{rope(x[0], c.theta, c.position_offset)}; }; };
  const RopeCase small{{2, 4, 2, 6}, 100.0, 3};  // theta 100: every frequency turns visibly over positions 3..6
  add_case(grad_case("rope", "rope", 20, inputs(small.shape), op(small)));
  for (const RopeCase& c : {
           RopeCase{{2, 37, 3, 64}, 10000.0, 0},
           RopeCase{{2, 77, 16, 64}, 10000.0, 5},     // attention heads
           RopeCase{{2, 37, 4, 256}, 10000.0, 0},     // RetNet dk
           RopeCase{{2, 37, 3, 48}, 10000.0, 11},     // D/2 = 24: a warp spans two tokens
           RopeCase{{1, 4096, 2, 64}, 10000.0, 100},  // long: angles up to ~4200 rad
           RopeCase{{2, 37, 3, 20}, 10000.0, 3},      // D/2 = 10: no 16-byte groups, single elements
       })
    add_case(gpu_case("rope", "rope " + shape_str(c.shape) + " offset " + std::to_string(c.position_offset),
                      named_kernel("rotate_half"), inputs(c.shape), op(c)));
  // perf: the 374M Transformer's q (B 8, T 2048, H 16, D 64); bytes in bf16: each pass reads
  // and writes the tensor once
  const RopeCase model{{8, 2048, 16, 64}, 10000.0, 0};
  const double tensor = 2.0 * 8 * 2048 * 16 * 64;
  add_case(perf_case("rope", "rope 374M " + dims_label({{"B", 8}, {"T", 2048}, {"H", 16}, {"D", 64}}),
                     named_kernel("rotate_half"),
                     [](uint64_t) { return Inputs{{"x", perf_input(PerfPool::Normal, 0, {8, 2048, 16, 64})}}; },
                     op(model), {0, 0, 2 * tensor, 4 * tensor, 0, 0, "", {{"B", 8}, {"T", 2048}, {"H", 16}, {"D", 64}}}));

  // Per-sequence positions: sequence b starts at positions[b] (the second input, never perturbed).
  auto at = [](Shape shape, std::vector<int32_t> positions) {
    return [shape, positions](uint64_t seed) {
      return Inputs{{"x", randn64(shape, seed + 1)},
                    {"positions", Tensor::from_i32(positions, {shape[0]}), false}};
    };
  };
  auto op_at = [](double theta) { return [theta](const Vars& x) { return Vars{rope(x[0], theta, x[1].value())}; }; };
  add_case(grad_case("rope", "rope positions", 21, at({3, 2, 2, 6}, {0, 4, 9}), op_at(100.0)));
  add_case(gpu_case("rope", "rope (4, 1, 16, 64) positions 0 7 300 4000", named_kernel("rotate_half"),
                    at({4, 1, 16, 64}, {0, 7, 300, 4000}), op_at(10000.0)));
  // Per-token positions (packed documents: each token's place in its own document), (B, T).
  auto at_tokens = [](Shape shape, std::vector<int32_t> positions) {
    return [shape, positions](uint64_t seed) {
      return Inputs{{"x", randn64(shape, seed + 1)},
                    {"positions", Tensor::from_i32(positions, {shape[0], shape[1]}), false}};
    };
  };
  add_case(grad_case("rope", "rope token positions", 22, at_tokens({2, 3, 2, 6}, {0, 1, 0, 5, 6, 7}), op_at(100.0)));
  std::vector<int32_t> in_documents;  // row 0: documents of 1, 99 and 200 tokens; row 1: one of 300
  for (int start : {0, 1, 100})
    for (int t = start; t < (start == 0 ? 1 : start == 1 ? 100 : 300); t++) in_documents.push_back(t - start);
  for (int t = 0; t < 300; t++) in_documents.push_back(t);
  add_case(gpu_case("rope", "rope (2, 300, 4, 64) token positions", named_kernel("rotate_half"),
                    at_tokens({2, 300, 4, 64}, in_documents), op_at(10000.0)));
}

void add_attention_decode_cases() {
  struct DecodeCase {
    int64_t B, H, Hkv, D, Dv, capacity, window;
    std::vector<int32_t> positions;  // (B)
  };
  for (const DecodeCase& c : {DecodeCase{3, 4, 2, 64, 64, 256, 0, {0, 37, 255}},
                              DecodeCase{3, 4, 1, 128, 128, 16, 16, {5, 16, 100}},  // the ring has wrapped
                              DecodeCase{2, 2, 2, 48, 32, 40, 0, {1, 39}},
                              DecodeCase{2, 8, 2, 128, 128, 4096, 0, {4095, 1000}},  // 16 splits per row
                              DecodeCase{1, 4, 1, 64, 64, 1000, 1000, {2999}}}) {   // a wrapped window, 4 splits
    const std::string name = "attention_decode " + dims_label({{"B", c.B}, {"H", c.H}, {"Hkv", c.Hkv}, {"D", c.D},
                                                               {"Dv", c.Dv}, {"C", c.capacity}, {"w", c.window}});
    auto inputs = [c](uint64_t seed) {
      return Inputs{{"q", randn64({c.B, c.H, c.D}, seed + 1), false},
                    {"k", randn64({c.B, c.Hkv, c.D}, seed + 2), false},
                    {"v", randn64({c.B, c.Hkv, c.Dv}, seed + 3), false},
                    {"k_cache", randn64({c.B, c.capacity, c.Hkv, c.D}, seed + 4), false},
                    {"v_cache", randn64({c.B, c.capacity, c.Hkv, c.Dv}, seed + 5), false},
                    {"positions", Tensor::from_i32(c.positions, {c.B}), false}};
    };
    auto op = [c](const Vars& x) {
      Tensor k_cache = x[3].value().clone(), v_cache = x[4].value().clone();  // the op writes its caches
      Tensor o = attention_decode(x[0].value(), x[1].value(), x[2].value(), k_cache, v_cache, x[5].value(),
                                  default_attention_scale(c.D), c.window);
      return Vars{Var(o), Var(k_cache), Var(v_cache)};
    };
    Case k = gpu_case("attention_decode", name, named_kernel("attend"), inputs, op);
    k.outputs = {"o", "k_cache", "v_cache"};
    add_case(std::move(k));
  }
}

const Registrar registered{add_attention_cases, add_rope_cases, add_attention_decode_cases};

}  // namespace
}  // namespace hla::check
