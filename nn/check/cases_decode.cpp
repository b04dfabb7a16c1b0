// Check cases (nn/check/registry.h) of the decoder's two small ops, gpu mode, exact (tolerance 0:
// both only select). argmax_rows (nn/ops/pick_tokens.h): the logits are multiples of 1/4 in [-2, 2],
// so every row has tied maxima (the lowest id must win); rows read widths below V (a tokenizer
// smaller than the model), one of width 1, and rows of 50k ids, far wider than the block.
// Inputs are rounded to bf16 for both sides, so the bf16 run sees the same ties.
// last_tokens (nn/ops/last_tokens.h): lengths shorter than n (zero columns), equal to T, and a
// conv tail (n = 3) and a token shift (n = 1) of a wide row.
// sample_tokens (nn/ops/pick_tokens.h): the same tied logits, fixed uniforms across [0, 1), a
// nucleus cut and none (top_p 1), top_k 1 (greedy), 40 and the GPU's largest, 1024.
#include <algorithm>
#include <cmath>
#include <string>

#include "nn/check/registry.h"
#include "nn/ops/pick_tokens.h"
#include "nn/ops/last_tokens.h"

namespace hla::check {
namespace {

using Vars = std::vector<Var>;

double quarter_steps(double x) { return std::round(std::clamp(x, -2.0, 2.0) * 4.0) / 4.0; }

void add_argmax_cases() {
  struct ArgmaxCase {
    int64_t B, V;
    std::vector<int32_t> widths;  // (B)
  };
  for (const ArgmaxCase& c : {ArgmaxCase{4, 300, {300, 258, 1, 37}}, ArgmaxCase{2, 50000, {50000, 32000}}}) {
    auto inputs = [c](uint64_t seed) {
      return Inputs{{"logits", map64(randn64({c.B, c.V}, seed + 1), quarter_steps), false},
                    {"widths", Tensor::from_i32(c.widths, {c.B}), false}};
    };
    auto op = [](const Vars& x) { return Vars{Var(argmax_rows(x[0].value(), x[1].value()))}; };
    Case k = gpu_case("argmax", "argmax_rows " + dims_label({{"B", c.B}, {"V", c.V}}), named_kernel("block per row"),
                      inputs, op);
    k.outputs = {"ids"};
    k.tol.f32 = 0;
    k.tol.bf16_out = 0;
    add_case(std::move(k));
  }
}

void add_last_tokens_cases() {
  struct TailCase {
    int64_t B, T, C, n;
    std::vector<int32_t> lengths;  // (B)
  };
  for (const TailCase& c : {TailCase{4, 9, 5, 3, {1, 2, 9, 4}}, TailCase{3, 37, 1000, 1, {37, 1, 20}}}) {
    auto inputs = [c](uint64_t seed) {
      return Inputs{{"x", randn64({c.B, c.T, c.C}, seed + 1), false},
                    {"lengths", Tensor::from_i32(c.lengths, {c.B}), false}};
    };
    const int64_t n = c.n;
    auto op = [n](const Vars& x) { return Vars{Var(last_tokens(x[0].value(), x[1].value(), n))}; };
    Case k = gpu_case("last_tokens", "last_tokens " + dims_label({{"B", c.B}, {"T", c.T}, {"C", c.C}, {"n", c.n}}),
                      named_kernel("elementwise"), inputs, op);
    k.tol.f32 = 0;
    k.tol.bf16_out = 0;
    add_case(std::move(k));
  }
}

void add_sample_tokens_cases() {
  struct SampleCase {
    int64_t B, V;
    std::vector<int32_t> widths;  // (B)
    SampleParams params;
  };
  const std::vector<double> uniforms = {0.0, 0.37, 0.73, 0.999};
  for (const SampleCase& c : {SampleCase{4, 300, {300, 258, 1, 37}, {0.7, 40, 0.9}},
                              SampleCase{4, 300, {300, 258, 2, 37}, {1.5, 1, 1.0}},
                              SampleCase{4, 32000, {32000, 31000, 1024, 5000}, {1.0, 1024, 0.95}}}) {
    auto inputs = [c, uniforms](uint64_t seed) {
      return Inputs{{"logits", map64(randn64({c.B, c.V}, seed + 1), quarter_steps), false},
                    {"widths", Tensor::from_i32(c.widths, {c.B}), false},
                    {"uniforms", Tensor::from_f64(uniforms, {c.B}, DType::F64), false}};
    };
    const SampleParams params = c.params;
    auto op = [params](const Vars& x) {
      return Vars{Var(sample_tokens(x[0].value(), x[1].value(), x[2].value().to(DType::F64), params))};
    };
    const std::string name = "sample_tokens " + dims_label({{"B", c.B}, {"V", c.V}, {"k", c.params.top_k}}) + " T" +
                             std::to_string(c.params.temperature).substr(0, 3) + " p" +
                             std::to_string(c.params.top_p).substr(0, 4);
    Case k = gpu_case("sample_tokens", name, named_kernel("block per row, k argmax rounds"), inputs, op);
    k.outputs = {"ids"};
    k.tol.f32 = 0;
    k.tol.bf16_out = 0;
    add_case(std::move(k));
  }
}

const Registrar registered{add_argmax_cases, add_last_tokens_cases, add_sample_tokens_cases};

}  // namespace
}  // namespace hla::check
