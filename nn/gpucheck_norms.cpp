// CUDA-vs-CPU cases of the normalisations and RoPE for `hla gpu-check` (autograd/gpucheck.h):
// l2norm, gated_rmsnorm (both gate orders, both activations, with and without groups),
// group_norm / layer_norm (with and without bias) and rope. Each op runs the shapes the model
// layers use (delta-rule q/k of dk 256, per-head output norms of dv 64 and 256, HGRN's whole-row
// gated norm, Mamba-2's gate-then-norm over d_inner, RWKV-6's per-head GroupNorm over the hidden
// size, attention and RetNet RoPE) plus odd widths that leave warps partly idle (33, 165, 1000),
// B > 1, several heads and T = 37 (no tile multiple); rope also runs one long sequence (T = 4096).
#include <string>

#include "autograd/gpucheck.h"
#include "nn/ops/gated_norm.h"
#include "nn/ops/group_norm.h"
#include "nn/ops/l2norm.h"
#include "nn/ops/rope.h"

namespace hla {
namespace {

// Norm weights near 1, as trained ones are.
Tensor norm_weight(int64_t C, uint64_t seed) { return randn64({C}, seed, 0.3, 1.0); }

}  // namespace

HLA_GPUCHECK("l2norm", seed) {
  std::vector<GpucheckResult> all;
  auto fn = [](const std::vector<Var>& v) { return std::vector<Var>{l2norm(v[0], 1e-6)}; };
  for (const Shape& shape : {Shape{2, 37, 3, 64}, Shape{2, 37, 4, 256}, Shape{2, 37, 5, 33}, Shape{3, 37, 1000}})
    append(all, gpucheck("l2norm " + shape_str(shape), named_kernel("warp per row"), fn, {{"x", randn64(shape, seed + 1)}},
                         seed));
  return all;
}

HLA_GPUCHECK("gated_rmsnorm", seed) {
  struct Case {
    const char* name;
    Shape shape;
    GateAct act;
    GateOrder order;
    int64_t group_size;
  };
  const Case cases[] = {
      {"swish heads", {2, 37, 3, 64}, GateAct::Swish, GateOrder::NormThenGate, 0},      // GLA, GDN
      {"sigmoid heads", {2, 37, 4, 256}, GateAct::Sigmoid, GateOrder::NormThenGate, 0},  // KDA, GDN-2
      {"swish whole row", {2, 37, 1000}, GateAct::Swish, GateOrder::NormThenGate, 0},    // HGRN
      {"swish groups of 33", {2, 37, 165}, GateAct::Swish, GateOrder::NormThenGate, 33},
      {"gate-then-norm", {2, 37, 2048}, GateAct::Swish, GateOrder::GateThenNorm, 2048},  // Mamba-2 d_inner
      {"gate-then-norm groups of 80", {2, 37, 320}, GateAct::Swish, GateOrder::GateThenNorm, 80},
      {"sigmoid gate-then-norm", {3, 37, 1, 33}, GateAct::Sigmoid, GateOrder::GateThenNorm, 0},
  };
  std::vector<GpucheckResult> all;
  for (const Case& c : cases) {
    auto fn = [c](const std::vector<Var>& v) {
      return std::vector<Var>{gated_rmsnorm(v[0], v[1], v[2], 1e-6, c.act, c.order, c.group_size)};
    };
    const int64_t C = c.shape.back();
    append(all, gpucheck(std::string("gated_rmsnorm ") + c.name + " " + shape_str(c.shape), named_kernel("warp per group"),
                         fn,
                         {{"x", randn64(c.shape, seed + 1)},
                          {"z", randn64(c.shape, seed + 2, 1.5)},
                          {"weight", norm_weight(C, seed + 3)}},
                         seed));
  }
  return all;
}

HLA_GPUCHECK("group_norm", seed) {
  struct Case {
    const char* name;
    Shape shape;
    int64_t num_groups;
    bool bias;
  };
  const Case cases[] = {
      {"heads", {2, 37, 1024}, 4, true},       // RWKV-6 g_norm: H = 4 heads of 256 channels
      {"groups of 33", {2, 37, 165}, 5, true},
      {"layer_norm", {2, 37, 1000}, 1, true},  // block LayerNorm with bias
      {"layer_norm no bias", {3, 37, 320}, 1, false},
  };
  std::vector<GpucheckResult> all;
  for (const Case& c : cases) {
    auto fn = [c](const std::vector<Var>& v) {
      return std::vector<Var>{group_norm(v[0], v[1], c.bias ? v[2] : Var(), c.num_groups, 1e-5)};
    };
    const int64_t C = c.shape.back();
    std::vector<GpucheckInput> inputs = {{"x", randn64(c.shape, seed + 1, 1.0, 0.5)},
                                         {"weight", norm_weight(C, seed + 2)}};
    if (c.bias) inputs.push_back({"bias", randn64({C}, seed + 3, 0.3)});
    append(all, gpucheck(std::string("group_norm ") + c.name + " " + shape_str(c.shape), named_kernel("warp per group"), fn,
                         inputs, seed));
  }
  return all;
}

HLA_GPUCHECK("rope", seed) {
  struct Case {
    Shape shape;
    int64_t position_offset;
  };
  const Case cases[] = {
      {{2, 37, 3, 64}, 0},
      {{2, 77, 16, 64}, 5},     // attention heads
      {{2, 37, 4, 256}, 0},     // RetNet dk
      {{2, 37, 3, 48}, 11},     // D/2 = 24: a warp spans two tokens
      {{1, 4096, 2, 64}, 100},  // long: angles up to ~4200 rad
  };
  std::vector<GpucheckResult> all;
  for (const Case& c : cases) {
    auto fn = [c](const std::vector<Var>& v) { return std::vector<Var>{rope(v[0], 10000.0, c.position_offset)}; };
    append(all, gpucheck("rope " + shape_str(c.shape) + " offset " + std::to_string(c.position_offset),
                         named_kernel("rotate_half"), fn, {{"x", randn64(c.shape, seed + 1)}}, seed));
  }
  return all;
}

}  // namespace hla
