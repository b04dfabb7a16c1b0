// Central-difference gradient check (see gradcheck.h).
#include "autograd/gradcheck.h"

#include <algorithm>
#include <cmath>

#include "tensor/math.h"

namespace hla {

namespace {

// L = sum_k <out_k, W_k>, with W_k fixed per output index.
double weighted_loss(const std::vector<Var>& outs, const std::vector<Tensor>& weights) {
  double loss = 0;
  for (size_t k = 0; k < outs.size(); k++) loss += dot(outs[k].value(), weights[k]);
  return loss;
}

std::vector<Var> make_vars(const std::vector<GradcheckInput>& inputs) {
  std::vector<Var> vars;
  for (const auto& in : inputs) vars.emplace_back(in.value.clone(), in.differentiable);
  return vars;
}

}  // namespace

std::vector<GradcheckResult> gradcheck(const std::string& op, const GradcheckFn& fn,
                                       const std::vector<GradcheckInput>& inputs, double tol,
                                       double eps) {
  for (const auto& in : inputs)
    HLA_CHECK(!in.differentiable || (in.value.dtype() == DType::F64 && in.value.device() == Device::CPU),
              "gradcheck ", op, ": input ", in.name, " must be F64 on the CPU, got ", in.value.str());
  // Analytic gradients.
  std::vector<Var> vars = make_vars(inputs);
  std::vector<Var> outs = fn(vars);
  std::vector<Tensor> weights;
  for (size_t k = 0; k < outs.size(); k++)
    weights.push_back(Tensor::randn(outs[k].shape(), 1000 + k, 1.0, DType::F64));
  std::vector<Var> roots;
  std::vector<Tensor> seeds;
  for (size_t k = 0; k < outs.size(); k++) {
    if (!outs[k].requires_grad()) continue;
    roots.push_back(outs[k]);
    seeds.push_back(weights[k]);
  }
  if (!roots.empty()) run_backward(roots, seeds);

  std::vector<GradcheckResult> results;
  for (size_t i = 0; i < inputs.size(); i++) {
    if (!inputs[i].differentiable) continue;
    Tensor analytic = vars[i].grad().defined() ? vars[i].grad()
                                               : Tensor::zeros(inputs[i].value.shape(), DType::F64);
    const double* ga = analytic.data<double>();
    double max_err = 0, max_num = 0;
    Tensor x = inputs[i].value.clone();
    for (int64_t j = 0; j < x.numel(); j++) {
      double orig = x.data<double>()[j];
      std::vector<GradcheckInput> perturbed = inputs;
      x.data<double>()[j] = orig + eps;
      perturbed[i].value = x;
      double lp;
      {
        NoGradGuard ng;
        lp = weighted_loss(fn(make_vars(perturbed)), weights);
      }
      x.data<double>()[j] = orig - eps;
      double lm;
      {
        NoGradGuard ng;
        lm = weighted_loss(fn(make_vars(perturbed)), weights);
      }
      x.data<double>()[j] = orig;
      double numeric = (lp - lm) / (2 * eps);
      const double err = std::abs(ga[j] - numeric);
      max_err = std::isnan(err) ? err : std::max(max_err, err);  // a NaN (an unwritten gradient) sticks
      max_num = std::max(max_num, std::abs(numeric));
    }
    GradcheckResult r;
    r.op = op;
    r.input = inputs[i].name;
    r.max_abs_err = max_err;
    r.max_rel_err = max_num > 0 ? max_err / max_num : max_err;
    r.pass = r.max_rel_err <= tol || (max_num < 1e-12 && max_err < 1e-12);
    results.push_back(r);
  }
  return results;
}

}  // namespace hla
