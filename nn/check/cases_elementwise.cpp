// Check cases (nn/check/registry.h) of the elementwise and small dense ops: activation, arith
// (the broadcasts, split_last), cast, cross_entropy, embedding, linear, linear_cross_entropy, swiglu.
// grad: tiny shapes at fixed seeds. gpu: odd widths (333, 999, 1001), a real vocabulary (32000)
// and the broadcasts the Mamba-2 340M layer builds (B 2, T 37, H 32, P 64).
#include <cmath>
#include <string>

#include "nn/check/registry.h"
#include "nn/ops/activation.h"
#include "nn/ops/arith.h"
#include "nn/ops/cast.h"
#include "nn/ops/cross_entropy.h"
#include "nn/ops/embedding.h"
#include "nn/ops/linear.h"
#include "nn/ops/linear_cross_entropy.h"
#include "nn/ops/swiglu.h"
#include "tensor/random.h"

namespace hla::check {
namespace {

using Vars = std::vector<Var>;

void add_activation_cases() {
  for (Activation kind : {Activation::SiLU, Activation::Sigmoid, Activation::Softplus, Activation::LogSigmoid,
                          Activation::Tanh, Activation::ReluSquared, Activation::OneMinusExp, Activation::NegExp}) {
    // spread over [-4, 4]; the bounded ones also at points past the softplus threshold on both sides
    const bool bounded =
        kind != Activation::OneMinusExp && kind != Activation::NegExp && kind != Activation::ReluSquared;
    add_case(grad_case(
        "activation", activation_name(kind), 2,
        [bounded](uint64_t seed) {
          Tensor x = randn64({3, 5}, seed + 1, 2.0);
          if (bounded) {
            x.data<double>()[0] = 25.0;
            x.data<double>()[1] = -25.0;
          }
          return Inputs{{"x", x}};
        },
        [kind](const Vars& v) { return Vars{activation(v[0], kind)}; }));
  }
}

void add_arith_cases() {
  // (a + b) * a, then scaled and reshaped: a is used twice, so its gradient accumulates.
  add_case(grad_case(
      "arith", "arith", 0,
      [](uint64_t seed) {
        return Inputs{{"a", randn64({2, 3}, seed + 1)}, {"b", randn64({2, 3}, seed + 2)}, {"w", randn64({3}, seed + 3)},
                      {"s", randn64({1}, seed + 4)}, {"per_row", randn64({2}, seed + 5)}};
      },
      [](const Vars& v) {
        Var y = reshape(scale(mul(add(v[0], v[1]), v[0]), 0.5), {6});
        Vars pieces = split_last(v[1], {1, 2});
        return Vars{y, sum(v[1]), mean(v[0]), mul_rows(v[0], v[2]), add_rows(v[1], v[2]), scale_by(v[0], v[3]),
                    mul_broadcast(v[0], reshape(v[2], {3}), 1), mul_broadcast(v[1], v[4], 3), pieces[0], pieces[1]};
      }));

  struct BroadcastCase {
    const char* what;
    Shape x_shape;
    int64_t S, inner;
    bool multiply;
  };
  // Mamba-2 340M: xs * Delta per (b, t, h), y + D x per head, dt + dt_bias; a per-channel
  // weight with an odd width; a learned scalar (S = 1); an odd inner width.
  const BroadcastCase broadcasts[] = {
      {"mul per-token head scalar", {2 * 37 * 32, 64}, 2 * 37 * 32, 64, true},
      {"mul per-head D", {2, 37, 32, 64}, 32, 64, true},
      {"add_rows dt_bias", {2, 37, 32}, 32, 1, false},
      {"mul_rows", {3, 37, 333}, 333, 1, true},
      {"scale_by", {3, 1001}, 1, 3003, true},
      {"add inner 13", {5, 7, 13}, 7, 13, false},
  };
  for (const BroadcastCase& c : broadcasts) {
    add_case(gpu_case(
        "arith",
        std::string(c.multiply ? "mul_broadcast " : "add_broadcast ") + c.what + " " + shape_str(c.x_shape) + " S" +
            std::to_string(c.S) + " inner" + std::to_string(c.inner),
        named_kernel("broadcast"),
        [c](uint64_t seed) {
          return Inputs{{"x", randn64(c.x_shape, seed + 1)}, {"s", randn64({c.S}, seed + 2, 0.5, 0.5)}};
        },
        [c](const Vars& x) {
          return Vars{c.multiply ? mul_broadcast(x[0], x[1], c.inner) : add_broadcast(x[0], x[1], c.inner)};
        }));
  }

  // add / mul (binary) forward and backward, a used twice so its gradient accumulates (axpby):
  // n a multiple of the 16-byte vector, and n = 999 with a tail of 7 bf16 / 3 fp32.
  for (const Shape& shape : {Shape{4, 1024}, Shape{3, 333}}) {
    add_case(gpu_case(
        "arith", "add mul " + shape_str(shape), named_kernel("binary, axpby"),
        [shape](uint64_t seed) { return Inputs{{"a", randn64(shape, seed + 1)}, {"b", randn64(shape, seed + 2)}}; },
        [](const Vars& v) { return Vars{mul(add(v[0], v[1]), v[0])}; }));
  }

  struct SplitCase {
    Shape x_shape;
    std::vector<int64_t> widths;
  };
  // Mamba-2 tiny's in_proj split [z | xBC | dt] and xBC split [x | B | C]; odd widths.
  const SplitCase splits[] = {{{2, 37, 128 + 160 + 4}, {128, 160, 4}}, {{2, 37, 160}, {128, 16, 16}},
                              {{3, 7, 26}, {5, 1, 17, 3}}};
  for (const SplitCase& c : splits) {
    add_case(gpu_case(
        "arith", "split_last " + shape_str(c.x_shape) + " into " + std::to_string(c.widths.size()),
        named_kernel("memcpy2d"), [c](uint64_t seed) { return Inputs{{"x", randn64(c.x_shape, seed + 1)}}; },
        [c](const Vars& x) { return split_last(x[0], c.widths); }));
  }

  // concat0: pieces of 2, 1 and 3 rows, the first stacked twice (its gradient is the sum of its
  // two row blocks'); on the GPU GDN's a_proj and b_proj (4 heads, D = 1024) and odd rows.
  auto concat_inputs = [](std::vector<Shape> shapes) {
    return [shapes](uint64_t seed) {
      Inputs in;
      for (size_t i = 0; i < shapes.size(); i++) in.push_back({"x" + std::to_string(i), randn64(shapes[i], seed + i)});
      return in;
    };
  };
  add_case(grad_case("arith", "concat0", 7, concat_inputs({{2, 3}, {1, 3}, {3, 3}}),
                     [](const Vars& v) { return Vars{concat0({v[0], v[1], v[2], v[0]})}; }));
  for (const std::vector<Shape>& shapes : {std::vector<Shape>{{4, 1024}, {4, 1024}},
                                           std::vector<Shape>{{3, 5, 7}, {1, 5, 7}, {6, 5, 7}}}) {
    add_case(gpu_case("arith", "concat0 " + shape_str(shapes[0]) + " and " + std::to_string(shapes.size() - 1) + " more",
                      named_kernel("memcpy"), concat_inputs(shapes), [](const Vars& v) { return Vars{concat0(v)}; }));
  }
}

void add_cast_cases() {
  // both directions (the gradient casts back); n = 1332 in groups of 4, n = 999 with a tail of 3
  for (DType to : {DType::BF16, DType::F32})
    for (const Shape& shape : {Shape{4, 333}, Shape{3, 333}})
      add_case(gpu_case("cast", std::string("cast to ") + dtype_name(to) + " " + shape_str(shape),
                        named_kernel("convert"),
                        [shape](uint64_t seed) { return Inputs{{"x", randn64(shape, seed + 1)}}; },
                        [to](const Vars& v) { return Vars{cast(v[0], to)}; }));
}

// Random targets in [0, V) with about one in eight rows ignored.
Tensor random_targets(int64_t N, int64_t V, uint64_t seed) {
  std::vector<int32_t> c(N);
  Rng rng(seed);
  for (auto& x : c) x = rng.below(8) == 0 ? kIgnoreIndex : static_cast<int32_t>(rng.below(V));
  return Tensor::from_i32(c, {N});
}

void add_cross_entropy_cases() {
  auto loss = [](const Vars& v) { return Vars{cross_entropy(v[0], v[1].value())}; };
  add_case(grad_case(
      "cross_entropy", "cross_entropy", 8,
      [](uint64_t seed) {
        return Inputs{{"logits", randn64({2, 3, 7}, seed + 1, 3.0)},
                      {"targets", Tensor::from_i32({2, kIgnoreIndex, 0, 6, 6, 1}, {2, 3}), false}};
      },
      loss));
  for (int64_t V : {1001, 32000}) {  // an odd vocabulary and a real one
    add_case(gpu_case(
        "cross_entropy", "cross_entropy V=" + std::to_string(V), named_kernel("fused"),
        [V](uint64_t seed) {
          return Inputs{{"logits", randn64({2, 37, V}, seed + 1, 3.0)},
                        {"targets", random_targets(2 * 37, V, seed + V), false}};
        },
        loss));
  }
}

void add_embedding_cases() {
  add_case(grad_case(
      "embedding", "embedding", 3,
      [](uint64_t seed) {
        return Inputs{{"ids", Tensor::from_i32({0, 3, 3, 1, 4, 0}, {2, 3}), false},  // repeated ids accumulate
                      {"weight", randn64({5, 4}, seed + 1)}};
      },
      [](const Vars& v) { return Vars{embedding(v[0].value(), v[1])}; }));
  // gpu: 74 random ids over V = 1001 (some repeated); then a tied model's path, the weight a compute
  // copy of an fp32 master (the inner cast) shared by the embedding and the loss: the loss's GEMMs
  // write dW in fp32 into the master's gradient, the embedding's rows add into it.
  auto ids = [](uint64_t seed) {
    std::vector<int32_t> id(74);
    Rng rng(seed);
    for (auto& x : id) x = static_cast<int32_t>(rng.below(1001));
    return Tensor::from_i32(id, {2, 37});
  };
  add_case(gpu_case(
      "embedding", "embedding " + dims_label({{"N", 74}, {"V", 1001}, {"D", 64}}), named_kernel("sorted runs"),
      [ids](uint64_t seed) {
        return Inputs{{"ids", ids(seed + 1), false}, {"weight", randn64({1001, 64}, seed + 2)}};
      },
      [](const Vars& v) { return Vars{embedding(v[0].value(), v[1])}; }));
  add_case(gpu_case(
      "embedding", "embedding " + dims_label({{"N", 74}, {"V", 1001}, {"D", 64}}) + " tied to the loss, fp32 master",
      named_kernel("sorted runs"),
      [ids](uint64_t seed) {
        return Inputs{{"ids", ids(seed + 1), false}, {"h", randn64({74, 64}, seed + 2)},
                      {"weight", randn64({1001, 64}, seed + 3, 1.5 / 8.0)},  // z ~ N(0, 1.5^2)
                      {"targets", random_targets(74, 1001, seed + 4), false}};
      },
      [](const Vars& v) {
        Var copy = cast(cast(v[2], DType::F32), v[1].dtype());  // an F32 master, its copy in h's dtype
        return Vars{embedding(v[0].value(), copy), linear_cross_entropy(v[1], copy, v[3].value(), 256)};
      }));
}

void add_linear_cases() {
  add_case(grad_case(
      "linear", "linear", 0,
      [](uint64_t seed) {
        return Inputs{{"x", randn64({2, 3, 4}, seed + 1)}, {"weight", randn64({5, 4}, seed + 2)},
                      {"bias", randn64({5}, seed + 3)}};
      },
      [](const Vars& v) { return Vars{linear(v[0], v[1], v[2])}; }));
  // gpu: with a bias; then the model's path, the weight a compute copy of an fp32 master (the
  // inner cast), one copy used by two linears, so their GEMMs sum dW in fp32 (beta 0, then 1: no
  // cast kernel, no add), and x feeding two linears (dx summed by the second GEMM, beta 1).
  add_case(gpu_case(
      "linear", "linear " + dims_label({{"N", 74}, {"in", 64}, {"out", 48}}) + " bias", named_kernel("cublas"),
      [](uint64_t seed) {
        return Inputs{{"x", randn64({2, 37, 64}, seed + 1)}, {"weight", randn64({48, 64}, seed + 2)},
                      {"bias", randn64({48}, seed + 3)}};
      },
      [](const Vars& v) { return Vars{linear(v[0], v[1], v[2])}; }));
  add_case(gpu_case(
      "linear", "linear " + dims_label({{"N", 74}, {"in", 64}, {"out", 48}}) + " fp32 master used twice",
      named_kernel("cublas"),
      [](uint64_t seed) {
        return Inputs{{"x", randn64({2, 37, 64}, seed + 1)}, {"x2", randn64({2, 37, 64}, seed + 2)},
                      {"weight", randn64({48, 64}, seed + 3)}, {"u", randn64({40, 64}, seed + 4)}};
      },
      [](const Vars& v) {
        Var copy = cast(cast(v[2], DType::F32), v[0].dtype());  // an F32 master, its copy in x's dtype
        return Vars{linear(v[0], copy), linear(v[1], copy), linear(v[0], v[3])};
      }));
}

void add_linear_cross_entropy_cases() {
  // grad: 7 vocabulary rows in chunks of 3 (the last chunk shorter), one row ignored.
  add_case(grad_case(
      "linear_cross_entropy", "linear_cross_entropy V7 chunk3", 9,
      [](uint64_t seed) {
        return Inputs{{"h", randn64({2, 3, 4}, seed + 1)},
                      {"weight", randn64({7, 4}, seed + 2)},
                      {"targets", Tensor::from_i32({2, kIgnoreIndex, 0, 6, 3, 1}, {2, 3}), false}};
      },
      [](const Vars& v) { return Vars{linear_cross_entropy(v[0], v[1], v[2].value(), 3)}; }));
  struct GpuCase {
    int64_t D, V, chunk;
  };
  // an odd vocabulary with a short last chunk, and a real one in the model's chunks
  for (const GpuCase& c : {GpuCase{64, 1001, 256}, GpuCase{128, 32000, 4096}}) {
    add_case(gpu_case(
        "linear_cross_entropy",
        "linear_cross_entropy " + dims_label({{"N", 74}, {"D", c.D}, {"V", c.V}, {"chunk", c.chunk}}),
        named_kernel("cublas + online lse"),
        [c](uint64_t seed) {
          return Inputs{{"h", randn64({2, 37, c.D}, seed + 1)},
                        {"weight", randn64({c.V, c.D}, seed + 2, 1.5 / std::sqrt(double(c.D)))},  // z ~ N(0, 1.5^2)
                        {"targets", random_targets(2 * 37, c.V, seed + c.V), false}};
        },
        [c](const Vars& v) { return Vars{linear_cross_entropy(v[0], v[1], v[2].value(), c.chunk)}; }));
  }
  // The model's path: the weight a compute copy of an fp32 master (the inner cast) used by two
  // losses, so their chunks' GEMMs sum dW in fp32 into the master's gradient (beta 0, then 1).
  add_case(gpu_case(
      "linear_cross_entropy",
      "linear_cross_entropy " + dims_label({{"N", 74}, {"D", 64}, {"V", 1001}, {"chunk", 256}}) +
          " fp32 master used twice",
      named_kernel("cublas + online lse"),
      [](uint64_t seed) {
        return Inputs{{"h", randn64({2, 37, 64}, seed + 1)}, {"h2", randn64({74, 64}, seed + 2)},
                      {"weight", randn64({1001, 64}, seed + 3, 1.5 / 8.0)},  // z ~ N(0, 1.5^2)
                      {"targets", random_targets(74, 1001, seed + 4), false},
                      {"targets2", random_targets(74, 1001, seed + 5), false}};
      },
      [](const Vars& v) {
        Var copy = cast(cast(v[2], DType::F32), v[0].dtype());  // an F32 master, its copy in h's dtype
        return Vars{linear_cross_entropy(v[0], copy, v[3].value(), 256),
                    linear_cross_entropy(v[1], copy, v[4].value(), 256)};
      }));
  // perf: the 374M models' loss (B 8, T 2048, D 1024, V 32000), fused in the model's chunks and,
  // beside it, unfused (full logits); the fused backward recomputes the logits: 4 GEMMs, not 3.
  const int64_t N = 8 * 2048, D = 1024, V = 32000;
  const double gemm_flops = 2.0 * N * D * V;
  for (bool fused : {true, false}) {
    add_case(perf_case(
        "linear_cross_entropy", fused ? "linear_cross_entropy 374M chunk4096" : "cross_entropy(linear) 374M unfused",
        named_kernel(fused ? "cublas + online lse" : "cublas + fused"),
        [](uint64_t) {
          return Inputs{{"h", perf_input(PerfPool::Normal, 0, {N, D})},
                        {"weight", perf_input(PerfPool::Normal, 1, {V, D}, 0.03)},
                        {"targets", random_targets(N, V, 1), false}};
        },
        [fused](const Vars& v) {
          return Vars{fused ? linear_cross_entropy(v[0], v[1], v[2].value(), 4096)
                            : cross_entropy(linear(v[0], v[1]), v[2].value())};
        },
        {gemm_flops, (fused ? 4 : 3) * gemm_flops, 0, 0, 0, 0, "", {{"N", N}, {"D", D}, {"V", V}}}));
  }
}

void add_swiglu_cases() {
  auto inputs = [](Shape shape) {
    return [shape](uint64_t seed) {
      return Inputs{{"a", randn64(shape, seed + 1, 2.0)}, {"b", randn64(shape, seed + 2)}};
    };
  };
  auto op = [](const Vars& v) { return Vars{swiglu(v[0], v[1])}; };
  add_case(grad_case("swiglu", "swiglu", 6, inputs({3, 6}), op));
  // n = 4995: a tail of 3 bf16 / 3 fp32 after the 16-byte groups; the 374M Transformer's width 2816
  for (const Shape& shape : {Shape{5, 999}, Shape{3, 2816}})
    add_case(gpu_case("swiglu", "swiglu " + shape_str(shape), named_kernel("swiglu"), inputs(shape), op));
}

const Registrar registered{add_activation_cases, add_arith_cases, add_cast_cases, add_cross_entropy_cases,
                           add_embedding_cases, add_linear_cases, add_linear_cross_entropy_cases, add_swiglu_cases};

}  // namespace
}  // namespace hla::check
