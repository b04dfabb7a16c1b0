// gpu-check cases (nn/check/registry.h) of the optimizer kernels (cuda/optim.h) against their
// float64 CPU references in train/optim.cpp: AdamW at step 3, Muon's momentum with and without
// Nesterov, and Newton-Schulz on a wide and a tall matrix. The optimizers have no Var op, so
// these cases call the update functions directly, on the inputs' device (cpu:: in the inputs'
// dtype, cuda:: in F32). F32 only: the master weights and optimizer states are fp32.
#include <cmath>
#include <string>

#include "nn/check/registry.h"
#include "tensor/dispatch.h"
#include "train/optim.h"
#ifdef HLA_CUDA
#include "cuda/optim.h"
#endif

namespace hla {
namespace {

using check::Inputs;
using check::randn64;
using Vars = std::vector<Var>;

constexpr int64_t kN = 10007;  // not a multiple of any block

check::Case optim_case(const std::string& name, const std::string& kernel, std::vector<std::string> outputs,
                check::MakeInputs inputs, check::OpFn op) {
  check::Case c = check::gpu_case("optim", name, check::named_kernel(kernel), std::move(inputs), std::move(op));
  c.outputs = std::move(outputs);
  c.gpu_dtypes = {DType::F32};
  return c;
}

// p, m, v after one AdamW update at step 3 from (p, g, m, v).
Vars adamw(const Vars& x) {
  Tensor p = x[0].value().clone(), m = x[2].value().clone(), v = x[3].value().clone();
  const Tensor& g = x[1].value();
  const double lr = 3e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  const double bc1 = 1 - std::pow(b1, 3), bc2 = 1 - std::pow(b2, 3);
  if (p.is_cuda()) {
    HLA_CUDA_ONLY(cuda::adamw_update(p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), kN, float(lr),
                                     float(b1), float(b2), float(eps), float(wd), float(bc1), float(bc2)));
  } else {
    dispatch_float(p.dtype(), "adamw_update", [&](auto tag) {
      using T = decltype(tag);
      cpu::adamw_update<T>(p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), kN, lr, b1, b2, eps, wd, bc1, bc2);
    });
  }
  return {Var(p), Var(m), Var(v)};
}

// buf and the update after one momentum step from (buf, g).
Vars muon_momentum(const Vars& x, bool nesterov) {
  Tensor buf = x[0].value().clone(), update = Tensor::empty(buf.shape(), buf.dtype(), buf.device());
  const Tensor& g = x[1].value();
  if (buf.is_cuda()) {
    HLA_CUDA_ONLY(cuda::muon_momentum(buf.data<float>(), update.data<float>(), g.data<float>(), kN, 0.95f, nesterov));
  } else {
    dispatch_float(buf.dtype(), "muon_momentum", [&](auto tag) {
      using T = decltype(tag);
      cpu::muon_momentum<T>(buf.data<T>(), update.data<T>(), g.data<T>(), kN, 0.95, nesterov);
    });
  }
  return {Var(buf), Var(update)};
}

// Five quintic Newton-Schulz steps on g: (rows, cols).
Vars newton_schulz(const Vars& x) {
  const Tensor& g = x[0].value();
  const int64_t rows = g.size(0), cols = g.size(1);
  Tensor out = Tensor::empty(g.shape(), g.dtype(), g.device());
  if (g.is_cuda()) {
    HLA_CUDA_ONLY(cuda::newton_schulz(out.data<float>(), g.data<float>(), rows, cols, 5));
  } else {
    dispatch_float(g.dtype(), "newton_schulz", [&](auto tag) {
      using T = decltype(tag);
      cpu::newton_schulz<T>(out.data<T>(), g.data<T>(), rows, cols, 5);
    });
  }
  return {Var(out)};
}

double abs_of(double x) { return std::abs(x); }

const bool registered = [] {
  check::add_case(optim_case("adamw_update", "elementwise", {"param", "m", "v"},
                             [](uint64_t s) {
                               return Inputs{{"p", randn64({kN}, s + 1), false},
                                             {"g", randn64({kN}, s + 2), false},
                                             {"m", randn64({kN}, s + 3, 0.1), false},
                                             {"v", check::map64(randn64({kN}, s + 4, 0.01), abs_of), false}};
                             },
                             adamw));
  for (bool nesterov : {false, true})
    check::add_case(optim_case(nesterov ? "muon_momentum nesterov" : "muon_momentum", "elementwise", {"buf", "update"},
                               [](uint64_t s) {
                                 return Inputs{{"buf", randn64({kN}, s + 5), false},
                                               {"g", randn64({kN}, s + 6), false}};
                               },
                               [nesterov](const Vars& x) { return muon_momentum(x, nesterov); }));
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{96, 160}, {160, 96}})
    check::add_case(optim_case("newton_schulz " + std::to_string(rows) + "x" + std::to_string(cols), "cublas", {"out"},
                               [rows = rows, cols = cols](uint64_t s) {
                                 return Inputs{{"g", randn64({rows, cols}, s + 7 + rows), false}};
                               },
                               newton_schulz));
  return true;
}();

}  // namespace
}  // namespace hla
