// Check cases (nn/check/registry.h) of the normalisations: rmsnorm, l2norm, gated_rmsnorm (both
// gate orders, both activations, with and without groups), group_norm / layer_norm (with and
// without bias). gpu runs the shapes the model layers use (delta-rule q/k of dk 256, per-head
// output norms of dv 64 and 256, HGRN's whole-row gated norm, Mamba-2's gate-then-norm over
// d_inner, RWKV-6's per-head GroupNorm over the hidden size) plus odd widths that leave warps
// partly idle (33, 165, 1000), B > 1, several heads and T = 37 (no tile multiple); rmsnorm also
// in the model's block, its gradients added into their sums (a residual add, an fp32 master), and
// add_rmsnorm, the residual add fused with it.
#include <string>

#include "nn/check/registry.h"
#include "nn/ops/arith.h"
#include "nn/ops/cast.h"
#include "nn/ops/gated_norm.h"
#include "nn/ops/group_norm.h"
#include "nn/ops/l2norm.h"
#include "nn/ops/rmsnorm.h"

namespace hla::check {
namespace {

using Vars = std::vector<Var>;

// Norm weights near 1, as trained ones are.
Tensor norm_weight(int64_t C, uint64_t seed) { return randn64({C}, seed, 0.3, 1.0); }

void add_rmsnorm_cases() {
  auto inputs = [](Shape shape) {
    return [shape](uint64_t seed) {
      return Inputs{{"x", randn64(shape, seed + 1)}, {"weight", norm_weight(shape.back(), seed + 2)}};
    };
  };
  auto op = [](const Vars& v) { return Vars{rmsnorm(v[0], v[1], 1e-6)}; };
  add_case(grad_case("rmsnorm", "rmsnorm", 4, inputs({2, 3, 8}), op));
  // C a multiple of 8 (16-byte vectors) at 320 and 1024 (the Transformer's width), 333 and 1500
  // (not a multiple of 8 in bf16: single elements, two per lane at 1500), 8000 (one row per
  // block of 1000 bf16 vectors, two fp32 vectors per lane)
  for (const Shape& shape : {Shape{3, 37, 320}, Shape{2, 37, 1024}, Shape{2, 37, 333}, Shape{2, 5, 1500},
                             Shape{1, 3, 8000}})
    add_case(gpu_case("rmsnorm", "rmsnorm " + shape_str(shape), named_kernel("rmsnorm"), inputs(shape), op));
  // The model's path: x's residual add (the kernel adds dx into the add's gradient of x) and the
  // weight a compute copy of an fp32 master (the inner cast) used by two rmsnorms (dw summed in
  // fp32 into the master's gradient: beta 0, then 1).
  add_case(gpu_case(
      "rmsnorm", "rmsnorm " + shape_str({2, 37, 1024}) + " residual, fp32 master used twice", named_kernel("rmsnorm"),
      [](uint64_t seed) {
        return Inputs{{"x", randn64({2, 37, 1024}, seed + 1)}, {"x2", randn64({74, 1024}, seed + 2)},
                      {"weight", norm_weight(1024, seed + 3)}};
      },
      [](const Vars& v) {
        Var copy = cast(cast(v[2], DType::F32), v[0].dtype());  // an F32 master, its copy in x's dtype
        return Vars{add(v[0], rmsnorm(v[0], copy, 1e-6)), rmsnorm(v[1], copy, 1e-6)};
      }));
  // perf: the 374M models' norm (B 8, T 2048, C 1024); bytes in bf16: the forward reads x and
  // writes y, the backward reads x and dy and writes dx
  const int64_t N = 8 * 2048, C = 1024;
  const double tensor = 2.0 * N * C;
  add_case(perf_case("rmsnorm", "rmsnorm 374M " + dims_label({{"N", N}, {"C", C}}), named_kernel("rmsnorm"),
                     [](uint64_t) {
                       return Inputs{{"x", perf_input(PerfPool::Normal, 0, {N, C})},
                                     {"weight", perf_input(PerfPool::Normal, 1, {C}, 0.3)}};
                     },
                     op, {0, 0, 2 * tensor, 5 * tensor, 0, 0, "", {{"N", N}, {"C", C}}}));
}

// add_rmsnorm: both outputs (the sum and its norm) carry a loss, so the backward's dr = d sum +
// the norm's dx is checked whole; the model's path also feeds the sum to a second add_rmsnorm (a
// block's two adds) with the weight a compute copy of an fp32 master.
void add_add_rmsnorm_cases() {
  auto inputs = [](Shape shape) {
    return [shape](uint64_t seed) {
      return Inputs{{"x", randn64(shape, seed + 1)}, {"h", randn64(shape, seed + 2)},
                    {"weight", norm_weight(shape.back(), seed + 3)}};
    };
  };
  auto op = [](const Vars& v) {
    const ResidualNorm out = add_rmsnorm(v[0], v[1], v[2], 1e-6);
    return Vars{out.sum, out.normed};
  };
  add_case(grad_case("rmsnorm", "add_rmsnorm", 4, inputs({2, 3, 8}), op));
  for (const Shape& shape : {Shape{2, 37, 1024}, Shape{2, 37, 333}})
    add_case(gpu_case("rmsnorm", "add_rmsnorm " + shape_str(shape), named_kernel("rmsnorm"), inputs(shape), op));
  add_case(gpu_case("rmsnorm", "add_rmsnorm " + shape_str({2, 37, 1024}) + " two adds, fp32 master",
                    named_kernel("rmsnorm"), inputs({2, 37, 1024}), [](const Vars& v) {
                      Var copy = cast(cast(v[2], DType::F32), v[0].dtype());  // an F32 master, its copy in x's dtype
                      const ResidualNorm first = add_rmsnorm(v[0], v[1], copy, 1e-6);
                      const ResidualNorm second = add_rmsnorm(first.sum, first.normed, copy, 1e-6);
                      return Vars{second.sum, second.normed};
                    }));
  // perf: the 374M models' residual add and norm; bytes in bf16: the forward reads x and h and
  // writes the sum and y, the backward reads the sum, d sum and dy and writes dr
  const int64_t N = 8 * 2048, C = 1024;
  const double tensor = 2.0 * N * C;
  add_case(perf_case("rmsnorm", "add_rmsnorm 374M " + dims_label({{"N", N}, {"C", C}}), named_kernel("rmsnorm"),
                     [](uint64_t) {
                       return Inputs{{"x", perf_input(PerfPool::Normal, 0, {N, C})},
                                     {"h", perf_input(PerfPool::Normal, 1, {N, C})},
                                     {"weight", perf_input(PerfPool::Normal, 2, {C}, 0.3)}};
                     },
                     op, {0, 0, 4 * tensor, 8 * tensor, 0, 0, "", {{"N", N}, {"C", C}}}));
}

void add_l2norm_cases() {
  auto inputs = [](Shape shape) { return [shape](uint64_t seed) { return Inputs{{"x", randn64(shape, seed + 1)}}; }; };
  auto op = [](const Vars& v) { return Vars{l2norm(v[0], 1e-6)}; };
  // q/k-like rows (B=2, T=3, H=2, dk=5); a tiny eps so the rows are not all length ~1.
  add_case(grad_case("l2norm", "l2norm", 10, inputs({2, 3, 2, 5}), op));
  for (const Shape& shape : {Shape{2, 37, 3, 64}, Shape{2, 37, 4, 256}, Shape{2, 37, 5, 33}, Shape{3, 37, 1000}})
    add_case(gpu_case("l2norm", "l2norm " + shape_str(shape), named_kernel("warp per row"), inputs(shape), op));
}

struct GatedNormCase {
  std::string name;
  Shape shape;
  GateAct act;
  GateOrder order;
  int64_t group_size;
  double eps;
};

void add_gated_norm_cases() {
  auto inputs = [](Shape shape) {
    return [shape](uint64_t seed) {
      return Inputs{{"x", randn64(shape, seed + 1)}, {"z", randn64(shape, seed + 2, 1.5)},
                    {"weight", norm_weight(shape.back(), seed + 3)}};
    };
  };
  auto op = [](const GatedNormCase& c) {
    return [c](const Vars& v) { return Vars{gated_rmsnorm(v[0], v[1], v[2], c.eps, c.act, c.order, c.group_size)}; };
  };
  // (B=2, T=2, H=2, dv=6): per-head rows, or one row of 6 split into 2 groups (mixers.md 2.3, 2.4)
  using A = GateAct;
  using O = GateOrder;
  for (const GatedNormCase& c : {
           GatedNormCase{"gated_rmsnorm swish (2.3)", {2, 2, 2, 6}, A::Swish, O::NormThenGate, 0, 1e-5},
           GatedNormCase{"gated_rmsnorm sigmoid (2.3)", {2, 2, 2, 6}, A::Sigmoid, O::NormThenGate, 0, 1e-5},
           GatedNormCase{"gated_rmsnorm gate-then-norm groups of 3 (2.4)", {2, 2, 2, 6}, A::Swish, O::GateThenNorm, 3,
                         1e-5},
       })
    add_case(grad_case("gated_norm", c.name, 50, inputs(c.shape), op(c)));
  for (const GatedNormCase& c : {
           GatedNormCase{"swish heads", {2, 37, 3, 64}, A::Swish, O::NormThenGate, 0, 1e-6},      // GLA, GDN
           // more group rows than the fused dw's 512 blocks x 8 warps: warps take several rows
           GatedNormCase{"swish heads, 8800 rows", {2, 1100, 4, 64}, A::Swish, O::NormThenGate, 0, 1e-6},
           GatedNormCase{"sigmoid heads", {2, 37, 4, 256}, A::Sigmoid, O::NormThenGate, 0, 1e-6},  // KDA, GDN-2
           GatedNormCase{"swish whole row", {2, 37, 1000}, A::Swish, O::NormThenGate, 0, 1e-6},    // HGRN
           GatedNormCase{"swish groups of 33", {2, 37, 165}, A::Swish, O::NormThenGate, 33, 1e-6},
           GatedNormCase{"gate-then-norm", {2, 37, 2048}, A::Swish, O::GateThenNorm, 2048, 1e-6},  // Mamba-2 d_inner
           GatedNormCase{"gate-then-norm groups of 80", {2, 37, 320}, A::Swish, O::GateThenNorm, 80, 1e-6},
           GatedNormCase{"sigmoid gate-then-norm", {3, 37, 1, 33}, A::Sigmoid, O::GateThenNorm, 0, 1e-6},
       })
    add_case(gpu_case("gated_norm", "gated_rmsnorm " + c.name + " " + shape_str(c.shape),
                      named_kernel("warp per group"), inputs(c.shape), op(c)));
  // perf: GDN's output norm in fla's 340M layout (B 8, T 2048, 4 heads of 256); bytes in bf16: the
  // forward reads o and the gate and writes y, the backward reads them and dy and writes do, dgate
  const int64_t N = 8 * 2048, H = 4, G = 256;
  const double tensor = 2.0 * N * H * G;
  const GatedNormCase gdn{"", {N, H, G}, A::Swish, O::NormThenGate, 0, 1e-6};
  add_case(perf_case("gated_norm", "gated_rmsnorm gdn-340m " + dims_label({{"N", N}, {"H", H}, {"G", G}}),
                     named_kernel("warp per group"),
                     [](uint64_t) {
                       return Inputs{{"x", perf_input(PerfPool::Normal, 0, {N, H, G})},
                                     {"z", perf_input(PerfPool::Normal, 1, {N, H, G})},
                                     {"weight", perf_input(PerfPool::Normal, 2, {G}, 0.3)}};
                     },
                     op(gdn), {0, 0, 3 * tensor, 8 * tensor, 0, 0, "", {{"N", N}, {"H", H}, {"G", G}}}));
}

struct GroupNormCase {
  std::string name;
  Shape shape;
  int64_t num_groups;  // 0: the layer_norm function (one group)
  bool bias;
  double x_shift;
};

void add_group_norm_cases() {
  auto inputs = [](const GroupNormCase& c) {
    return [c](uint64_t seed) {
      const int64_t C = c.shape.back();
      Inputs in = {{"x", randn64(c.shape, seed + 1, 1.0, c.x_shift)}, {"weight", norm_weight(C, seed + 2)}};
      if (c.bias) in.push_back({"bias", randn64({C}, seed + 3, 0.3)});
      return in;
    };
  };
  auto op = [](const GroupNormCase& c) {
    return [c](const Vars& v) {
      const Var bias = c.bias ? v[2] : Var();
      return Vars{c.num_groups == 0 ? layer_norm(v[0], v[1], bias, 1e-5)
                                    : group_norm(v[0], v[1], bias, c.num_groups, 1e-5)};
    };
  };
  // RWKV-6 g_norm: (B=2, T=3, H*dv = 2*4) with num_groups = H = 2; block LayerNorm over the last
  // dim, with and without bias.
  for (const auto& [c, seed] : {std::pair<GroupNormCase, uint64_t>{{"group_norm H=2", {2, 3, 8}, 2, true, 0.5}, 60},
                                {{"layer_norm", {2, 3, 5}, 0, true, -0.5}, 63},
                                {{"layer_norm no bias", {2, 2, 5}, 0, false, 0.0}, 66}})
    add_case(grad_case("group_norm", c.name, seed, inputs(c), op(c)));
  for (const GroupNormCase& c : {
           GroupNormCase{"heads", {2, 37, 1024}, 4, true, 0.5},  // RWKV-6 g_norm: H = 4 heads of 256 channels
           GroupNormCase{"groups of 33", {2, 37, 165}, 5, true, 0.5},
           GroupNormCase{"layer_norm", {2, 37, 1000}, 1, true, 0.5},  // block LayerNorm with bias
           GroupNormCase{"layer_norm no bias", {3, 37, 320}, 1, false, 0.5},
       })
    add_case(gpu_case("group_norm", "group_norm " + c.name + " " + shape_str(c.shape), named_kernel("warp per group"),
                      inputs(c), op(c)));
}

const Registrar registered{add_rmsnorm_cases, add_add_rmsnorm_cases, add_l2norm_cases, add_gated_norm_cases,
                           add_group_norm_cases};

}  // namespace
}  // namespace hla::check
