// gpu-check cases (nn/check/registry.h) of the optimizer kernels (cuda/optim.h) against their
// float64 CPU references in train/optim.cpp: the multi-tensor AdamW update at step 3, Muon's
// momentum with and without Nesterov and its decayed step, and batched Newton-Schulz on three
// wide and three tall matrices. The optimizers have no Var op, so these cases call the update
// functions directly, on the inputs' device (cpu:: in the inputs' dtype, cuda:: in F32). F32
// only: the master weights and optimizer states are fp32.
// The multi-tensor cases cut one flat input into kTensors tensors of the sizes below: more than
// one launch's table (cuda::kTensorsPerLaunch), an empty tensor, tensors of exactly one chunk
// (2048) and one element past it, and one of many chunks. The AdamW and Muon-step cases run
// twice: as they are, and clipped (gradients read times 0.37) with a bf16 copy for every odd
// tensor (output "param_bf16", zero where none); that run's threshold is the bf16 output's, since
// the reference rounds its float64 parameter through float and an element where the two straddle
// a bf16 rounding boundary differs by one bf16 ulp. Nesterov momentum reads clipped gradients too.
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

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

constexpr int kTensors = 300;

// n[t] of tensor t of the multi-tensor cases.
std::vector<int64_t> tensor_sizes() {
  const int64_t pattern[] = {1, 2048, 2049, 37, 517};
  std::vector<int64_t> n(kTensors);
  for (int t = 0; t < kTensors; t++) n[t] = pattern[t % 5];
  n[4] = 0;
  n[kTensors - 1] = 20011;
  return n;
}

int64_t total_size() {
  int64_t total = 0;
  for (int64_t n : tensor_sizes()) total += n;
  return total;
}

// Pointers to the consecutive pieces of flat, piece t of n[t] elements.
template <class T>
std::vector<T*> pieces(const Tensor& flat) {
  std::vector<T*> out;
  T* at = const_cast<T*>(flat.data<std::remove_const_t<T>>());
  for (int64_t n : tensor_sizes()) {
    out.push_back(at);
    at += n;
  }
  return out;
}

check::Case optim_case(const std::string& name, const std::string& kernel, std::vector<std::string> outputs,
                       check::MakeInputs inputs, check::OpFn op) {
  check::Case c = check::gpu_case("optim", name, check::named_kernel(kernel), std::move(inputs), std::move(op));
  c.outputs = std::move(outputs);
  c.gpu_dtypes = {DType::F32};
  return c;
}

// The clip factor of the clipped cases, (1) F64 on the device of `like`.
Tensor clip_factor(const Tensor& like) { return Tensor::from_f64({0.37}, {1}, DType::F64).to(like.device()); }

// (total) bf16 zeros, and pointers into it for the odd tensors (null for the even ones).
std::pair<Tensor, std::vector<bf16*>> odd_compute_copies(const Tensor& like) {
  Tensor copy = Tensor::zeros({total_size()}, DType::BF16, like.device());
  std::vector<bf16*> at = pieces<bf16>(copy);
  for (int t = 0; t < kTensors; t += 2) at[t] = nullptr;
  return {copy, at};
}

// Calls fn(T{}) for the storage dtype of t: float on CUDA, the CPU reference's dtype on the CPU
// (so fn's cuda:: call sits under `if constexpr (std::is_same_v<T, float>)`).
template <class Fn>
void on_device_dtype(const Tensor& t, const char* what, Fn&& fn) {
  if (t.is_cuda()) fn(float{});
  else dispatch_float(t.dtype(), what, fn);
}

// p, m, v after one AdamW update at step 3 from (p, g, m, v), over kTensors tensors; clipped: of
// the clipped gradients, with the bf16 copies as a fourth output.
Vars adamw(const Vars& x, bool clipped) {
  Tensor p = x[0].value().clone(), m = x[2].value().clone(), v = x[3].value().clone();
  auto [copy, copies] = odd_compute_copies(p);
  bf16* const* compute_copy = clipped ? copies.data() : nullptr;
  const Tensor factor = clip_factor(p);
  const double* grad_scale = clipped ? factor.data<double>() : nullptr;
  const Tensor& g = x[1].value();
  const double lr = 3e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  const double bc1 = 1 - std::pow(b1, 3), bc2 = 1 - std::pow(b2, 3);
  const Tensor schedule = Tensor::from_f64({lr, bc1, bc2}, {3}, DType::F64).to(p.device());  // on the update's device
  const double* sched = schedule.data<double>();
  const std::vector<int64_t> n = tensor_sizes();
  on_device_dtype(p, "adamw_update", [&](auto tag) {
    using T = decltype(tag);
    auto P = pieces<T>(p), M = pieces<T>(m), V = pieces<T>(v);
    auto G = pieces<const T>(g);
    if constexpr (std::is_same_v<T, float>)
      if (p.is_cuda())
        return HLA_CUDA_ONLY(cuda::adamw_update(P.data(), G.data(), M.data(), V.data(), n.data(), kTensors, sched,
                                                float(b1), float(b2), float(eps), float(wd), grad_scale,
                                                compute_copy));
    cpu::adamw_update<T>(P.data(), G.data(), M.data(), V.data(), n.data(), kTensors, sched, b1, b2, eps, wd,
                         grad_scale, compute_copy);
  });
  if (clipped) return {Var(p), Var(m), Var(v), Var(copy)};
  return {Var(p), Var(m), Var(v)};
}

// buf and the update after one momentum step from (buf, g), over kTensors tensors; Nesterov's of
// the clipped gradients.
Vars muon_momentum(const Vars& x, bool nesterov) {
  Tensor buf = x[0].value().clone(), update = Tensor::empty(buf.shape(), buf.dtype(), buf.device());
  const Tensor factor = clip_factor(buf);
  const double* grad_scale = nesterov ? factor.data<double>() : nullptr;
  const Tensor& g = x[1].value();
  const std::vector<int64_t> n = tensor_sizes();
  on_device_dtype(buf, "muon_momentum", [&](auto tag) {
    using T = decltype(tag);
    auto B = pieces<T>(buf), U = pieces<T>(update);
    auto G = pieces<const T>(g);
    if constexpr (std::is_same_v<T, float>)
      if (buf.is_cuda())
        return HLA_CUDA_ONLY(
            cuda::muon_momentum(B.data(), U.data(), G.data(), n.data(), kTensors, 0.95f, nesterov, grad_scale));
    cpu::muon_momentum<T>(B.data(), U.data(), G.data(), n.data(), kTensors, 0.95, nesterov, grad_scale);
  });
  return {Var(buf), Var(update)};
}

// p (and with_copies the bf16 copies) after Muon's decayed step p = 0.998 p - 0.013 ortho, over
// kTensors tensors.
Vars muon_apply(const Vars& x, bool with_copies) {
  Tensor p = x[0].value().clone();
  auto [copy, copies] = odd_compute_copies(p);
  bf16* const* compute_copy = with_copies ? copies.data() : nullptr;
  const Tensor& ortho = x[1].value();
  const std::vector<int64_t> n = tensor_sizes();
  const Tensor schedule = Tensor::from_f64({0.998, 0.013}, {2}, DType::F64).to(p.device());  // decay, step
  const double* sched = schedule.data<double>();
  on_device_dtype(p, "muon_apply", [&](auto tag) {
    using T = decltype(tag);
    auto P = pieces<T>(p);
    auto O = pieces<const T>(ortho);
    if constexpr (std::is_same_v<T, float>)
      if (p.is_cuda())
        return HLA_CUDA_ONLY(cuda::muon_apply(P.data(), O.data(), n.data(), kTensors, sched, compute_copy));
    cpu::muon_apply<T>(P.data(), O.data(), n.data(), kTensors, sched, compute_copy);
  });
  if (with_copies) return {Var(p), Var(copy)};
  return {Var(p)};
}

// Five quintic Newton-Schulz steps on each matrix of every input g: (batch, rows, cols), the
// inputs' batches in one call on CUDA.
Vars newton_schulz(const Vars& x) {
  std::vector<Tensor> outs;
  for (const Var& v : x) outs.push_back(Tensor::empty(v.value().shape(), v.value().dtype(), v.value().device()));
  const Tensor& g0 = x[0].value();
  on_device_dtype(g0, "newton_schulz", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>)
      if (g0.is_cuda()) {
#ifdef HLA_CUDA
        std::vector<cuda::NewtonSchulzBatch> batches;
        for (size_t i = 0; i < x.size(); i++) {
          const Tensor& g = x[i].value();
          batches.push_back({outs[i].data<T>(), g.data<T>(), g.size(0), g.size(1), g.size(2)});
        }
        return cuda::newton_schulz(batches.data(), static_cast<int>(batches.size()), 5);
#endif
      }
    for (size_t i = 0; i < x.size(); i++) {
      const Tensor& g = x[i].value();
      cpu::newton_schulz<T>(outs[i].data<T>(), g.data<T>(), g.size(0), g.size(1), g.size(2), 5);
    }
  });
  return Vars(outs.begin(), outs.end());
}

double abs_of(double x) { return std::abs(x); }

const bool registered = [] {
  const int64_t total = total_size();
  const std::string tensors = " " + std::to_string(kTensors) + " tensors";
  check::Tolerances bf16_copies;
  bf16_copies.f32 = bf16_copies.bf16_out;
  for (bool copies : {false, true}) {
    const std::string suffix = copies ? ", bf16 copies" : "";
    std::vector<std::string> adamw_outputs = {"param", "m", "v"}, apply_outputs = {"param"};
    if (copies) adamw_outputs.push_back("param_bf16"), apply_outputs.push_back("param_bf16");
    const std::string adamw_name = "adamw_update" + tensors + (copies ? ", clipped" : "") + suffix;
    check::Case adamw_case = optim_case(adamw_name, "multi-tensor", adamw_outputs,
                                        [total](uint64_t s) {
                                          return Inputs{{"p", randn64({total}, s + 1), false},
                                                        {"g", randn64({total}, s + 2), false},
                                                        {"m", randn64({total}, s + 3, 0.1), false},
                                                        {"v", check::map64(randn64({total}, s + 4, 0.01), abs_of),
                                                         false}};
                                        },
                                        [copies](const Vars& x) { return adamw(x, copies); });
    check::Case apply_case = optim_case("muon_apply" + tensors + suffix, "multi-tensor", apply_outputs,
                                        [total](uint64_t s) {
                                          return Inputs{{"p", randn64({total}, s + 7), false},
                                                        {"ortho", randn64({total}, s + 8), false}};
                                        },
                                        [copies](const Vars& x) { return muon_apply(x, copies); });
    if (copies) adamw_case.tol = bf16_copies, apply_case.tol = bf16_copies;
    check::add_case(std::move(adamw_case));
    check::add_case(std::move(apply_case));
  }
  for (bool nesterov : {false, true})
    check::add_case(optim_case((nesterov ? "muon_momentum nesterov clipped" : "muon_momentum") + tensors,
                               "multi-tensor", {"buf", "update"},
                               [total](uint64_t s) {
                                 return Inputs{{"buf", randn64({total}, s + 5), false},
                                               {"g", randn64({total}, s + 6), false}};
                               },
                               [nesterov](const Vars& x) { return muon_momentum(x, nesterov); }));
  // One batch of small matrices (one launch a product), one of matrices past 256 (cuBLASLt), and
  // three shapes in one call, small and large mixed.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{96, 160}, {160, 96}, {320, 200}})
    check::add_case(optim_case("newton_schulz 3x" + std::to_string(rows) + "x" + std::to_string(cols),
                               rows > 256 ? "cublasLt batched" : "small products", {"out"},
                               [rows = rows, cols = cols](uint64_t s) {
                                 return Inputs{{"g", randn64({3, rows, cols}, s + 9 + rows), false}};
                               },
                               newton_schulz));
  check::add_case(optim_case("newton_schulz 2x48x80 + 3x80x48 + 1x300x40", "small products + cublasLt",
                             {"out0", "out1", "out2"},
                             [](uint64_t s) {
                               return Inputs{{"g0", randn64({2, 48, 80}, s + 11), false},
                                             {"g1", randn64({3, 80, 48}, s + 12), false},
                                             {"g2", randn64({1, 300, 40}, s + 13), false}};
                             },
                             newton_schulz));
  return true;
}();

}  // namespace
}  // namespace hla
