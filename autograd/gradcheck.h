// Finite-difference gradient checks in float64, and the registry behind `hla gradcheck`.
//
// gradcheck(fn, inputs) builds the scalar L = sum_k <out_k, W_k> with fixed random W_k (so
// every output element is checked), differentiates it with backward(), and compares each
// input's gradient with central differences (L(x+e) - L(x-e)) / 2e.
//   max abs err = max_i |analytic_i - numeric_i|
//   max rel err = max abs err / max_i |numeric_i|   (relative to the gradient's scale)
// An input passes when max rel err <= tol, or when the whole gradient is below 1e-12 and so
// is the error (an input that correctly gets no gradient).
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
  Tensor value;  // F64, CPU
  bool check = true;  // false: passed to fn but not perturbed (e.g. integer ids)
};

std::vector<GradcheckResult> gradcheck(const std::string& op, const GradcheckFn& fn,
                                       const std::vector<GradcheckInput>& inputs,
                                       double tol = 1e-6, double eps = 1e-6);

// Registry: each op file registers its cases; `hla gradcheck` and the tests run them all.
struct GradcheckCase {
  std::string op;
  std::function<std::vector<GradcheckResult>()> run;
};
std::vector<GradcheckCase>& gradcheck_registry();
bool register_gradcheck(const std::string& op, std::function<std::vector<GradcheckResult>()> run);

// Random F64 test input: N(0, std^2) + shift, seeded.
Tensor gc_randn(const Shape& shape, uint64_t seed, double std = 1.0, double shift = 0.0);

}  // namespace hla

#define HLA_GC_CONCAT2(a, b) a##b
#define HLA_GC_CONCAT(a, b) HLA_GC_CONCAT2(a, b)
// Registers a gradcheck case: HLA_GRADCHECK("rmsnorm") { return gradcheck(...); }
#define HLA_GRADCHECK(op_name)                                                              \
  static std::vector<::hla::GradcheckResult> HLA_GC_CONCAT(hla_gc_fn_, __LINE__)();         \
  static const bool HLA_GC_CONCAT(hla_gc_reg_, __LINE__) =                                  \
      ::hla::register_gradcheck(op_name, HLA_GC_CONCAT(hla_gc_fn_, __LINE__));              \
  static std::vector<::hla::GradcheckResult> HLA_GC_CONCAT(hla_gc_fn_, __LINE__)()
