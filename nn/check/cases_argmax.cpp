// Check case (nn/check/registry.h) of the decoding argmax (nn/ops/argmax.h): gpu mode compares
// the CUDA ids with the float64 CPU scan, exactly (tolerance 0). The logits are multiples of
// 1/4 in [-2, 2], so every row has tied maxima (the lowest id must win); rows read widths below
// V (a tokenizer smaller than the model), one of width 1, and a row of 50k ids wider than the
// block. Inputs are rounded to bf16 for both sides, so the bf16 run sees the same ties.
#include <algorithm>
#include <cmath>
#include <string>

#include "nn/check/registry.h"
#include "nn/ops/argmax.h"

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

const Registrar registered{add_argmax_cases};

}  // namespace
}  // namespace hla::check
