// Finite-difference gradient checks in float64: the engine behind the check registry's grad
// mode (nn/check/, `hla gradcheck`) and the model-level tests.
//
// gradcheck(fn, inputs) builds the scalar L = sum_k <out_k, W_k> with fixed random W_k (so
// every output element is checked), differentiates it with backward(), and compares each
// input's gradient with central differences (L(x+e) - L(x-e)) / 2e.
//   max abs err = max_i |analytic_i - numeric_i|
//   max rel err = max abs err / max_i |numeric_i|   (relative to the gradient's scale)
// An input passes when max rel err <= tol, or when the whole gradient is below 1e-12 and so
// is the error (an input that correctly gets no gradient). A NaN anywhere fails.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "autograd/var.h"

namespace hla {

struct GradcheckResult {
  std::string op;
  std::string input;
  double max_abs_err = 0;
  double max_rel_err = 0;
  bool pass = false;
};

using GradcheckFn = std::function<std::vector<Var>(const std::vector<Var>&)>;

struct GradcheckInput {
  std::string name;
  Tensor value;                // F64 on the CPU (any dtype when not differentiable: ids, targets)
  bool differentiable = true;  // false: passed to fn as is, never perturbed, no result
};

std::vector<GradcheckResult> gradcheck(const std::string& op, const GradcheckFn& fn,
                                       const std::vector<GradcheckInput>& inputs,
                                       double tol = 1e-6, double eps = 1e-6);

}  // namespace hla
