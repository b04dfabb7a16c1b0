// The CUDA-vs-CPU cases behind `hla gpu-check` (see autograd/gpucheck.h): one entry per op and
// shape. Shapes cover B > 1, several heads, grouped kv heads, lengths that are not a multiple
// of any tile, odd widths, and one long sequence (T = 4096). Inputs are fresh for every seed.
// An op's owner may move its case next to the op; the registry does not care where it lives.
#include <cmath>

#include "autograd/gpucheck.h"
#include "nn/ops/attention.h"
#include "nn/ops/cast.h"
#include "nn/ops/cross_entropy.h"
#include "nn/ops/rmsnorm.h"
#include "nn/ops/swiglu.h"
#include "tensor/random.h"
#ifdef HLA_CUDA
#include "cuda/attention.h"
#include "cuda/optim.h"
#include "train/optim.h"
#endif

namespace hla {
namespace {

// Random targets in [0, V) with about one in eight rows ignored.
Tensor random_targets(int64_t N, int64_t V, uint64_t seed) {
  std::vector<int32_t> c(N);
  Rng rng(seed);
  for (auto& x : c) x = rng.below(8) == 0 ? kIgnoreIndex : static_cast<int32_t>(rng.below(V));
  return Tensor::from_i32(c, {N});
}

struct AttentionShape {
  int64_t B, T, H, Hkv, D, Dv, window;
};

std::vector<GpucheckResult> check_attention(const std::string& op, AttentionShape s, uint64_t seed) {
  const double scale = default_attention_scale(s.D);
  auto fn = [s, scale](const std::vector<Var>& x) {
    return std::vector<Var>{attention(x[0], x[1], x[2], scale, s.window)};
  };
#ifdef HLA_CUDA
  KernelName kernel = [s](DType dtype) { return std::string(cuda::attention_kernel(s.D, s.Dv, dtype)); };
#else
  KernelName kernel = named_kernel("attention");
#endif
  return gpucheck(op, kernel, fn,
                  {{"q", randn64({s.B, s.T, s.H, s.D}, seed + 1)},
                   {"k", randn64({s.B, s.T, s.Hkv, s.D}, seed + 2)},
                   {"v", randn64({s.B, s.T, s.Hkv, s.Dv}, seed + 3)}},
                  seed);
}

}  // namespace

HLA_GPUCHECK("rmsnorm", seed) {
  auto fn = [](const std::vector<Var>& v) { return std::vector<Var>{rmsnorm(v[0], v[1], 1e-6)}; };
  return gpucheck("rmsnorm", named_kernel("rmsnorm"), fn,
                  {{"x", randn64({3, 37, 320}, seed + 1)}, {"weight", randn64({320}, seed + 2, 0.3, 1.0)}}, seed);
}

HLA_GPUCHECK("swiglu", seed) {
  auto fn = [](const std::vector<Var>& v) { return std::vector<Var>{swiglu(v[0], v[1])}; };
  return gpucheck("swiglu", named_kernel("swiglu"), fn,
                  {{"a", randn64({5, 999}, seed + 1, 2.0)}, {"b", randn64({5, 999}, seed + 2)}}, seed);
}

HLA_GPUCHECK("cross_entropy", seed) {
  std::vector<GpucheckResult> all;
  for (int64_t V : {1001, 32000}) {  // an odd vocabulary and a real one
    Tensor targets = random_targets(2 * 37, V, seed + V);
    auto fn = [targets](const std::vector<Var>& v) {
      return std::vector<Var>{cross_entropy(v[0], targets.to(v[0].device()))};
    };
    auto r = gpucheck("cross_entropy V=" + std::to_string(V), named_kernel("fused"), fn,
                      {{"logits", randn64({2, 37, V}, seed + 1, 3.0)}}, seed);
    all.insert(all.end(), r.begin(), r.end());
  }
  return all;
}

HLA_GPUCHECK("cast", seed) {
  auto fn = [](const std::vector<Var>& v) { return std::vector<Var>{cast(v[0], DType::BF16)}; };
  return gpucheck("cast to bf16", named_kernel("convert"), fn, {{"x", randn64({4, 333}, seed + 1)}}, seed);
}

HLA_GPUCHECK("attention", seed) {
  std::vector<GpucheckResult> all;
  auto add = [&](const std::string& op, AttentionShape s) {
    auto r = check_attention(op, s, seed);
    all.insert(all.end(), r.begin(), r.end());
  };
  add("attention gqa D=64", {2, 77, 4, 2, 64, 64, 0});
  add("attention window D=128", {2, 200, 4, 1, 128, 128, 70});
  add("attention D=48 Dv=32", {2, 50, 2, 2, 48, 32, 0});
  add("attention long T=4096", {1, 4096, 2, 1, 128, 128, 0});
  return all;
}

#ifdef HLA_CUDA
// The optimizer kernels against train/optim.cpp's float64 references.
HLA_GPUCHECK("optim", seed) {
  PoisonGuard poison;
  std::vector<GpucheckResult> all;
  const DType f32 = DType::F32;
  const int64_t n = 10007;
  {  // AdamW at step 3: p, m, v after one update
    Tensor p = randn64({n}, seed + 1), g = randn64({n}, seed + 2), m = randn64({n}, seed + 3, 0.1),
           v = randn64({n}, seed + 4, 0.01).to(DType::F32).to(DType::F64);
    for (int64_t i = 0; i < n; i++) v.data<double>()[i] = std::abs(v.data<double>()[i]);
    Tensor p32 = p.to(f32).to(Device::CUDA), g32 = g.to(f32).to(Device::CUDA), m32 = m.to(f32).to(Device::CUDA),
           v32 = v.to(f32).to(Device::CUDA);
    Tensor pr = p.to(f32).to(DType::F64), gr = g.to(f32).to(DType::F64), mr = m.to(f32).to(DType::F64), vr = v.clone();
    const double lr = 3e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    const double bc1 = 1 - std::pow(b1, 3), bc2 = 1 - std::pow(b2, 3);
    cuda::adamw_update(p32.data<float>(), g32.data<float>(), m32.data<float>(), v32.data<float>(), n, float(lr),
                       float(b1), float(b2), float(eps), float(wd), float(bc1), float(bc2));
    cpu::adamw_update(pr.data<double>(), gr.data<double>(), mr.data<double>(), vr.data<double>(), n, lr, b1, b2, eps,
                      wd, bc1, bc2);
    all.push_back(compare("adamw_update", f32, "elementwise", "param", p32, pr, kGpuTolF32));
    all.push_back(compare("adamw_update", f32, "elementwise", "m", m32, mr, kGpuTolF32));
    all.push_back(compare("adamw_update", f32, "elementwise", "v", v32, vr, kGpuTolF32));
  }
  for (bool nesterov : {false, true}) {
    Tensor buf = randn64({n}, seed + 5).to(f32).to(DType::F64), g = randn64({n}, seed + 6).to(f32).to(DType::F64);
    Tensor buf32 = buf.to(f32).to(Device::CUDA), g32 = g.to(f32).to(Device::CUDA);
    Tensor upd32 = Tensor::empty({n}, f32, Device::CUDA), upd = Tensor::empty({n}, DType::F64);
    cuda::muon_momentum(buf32.data<float>(), upd32.data<float>(), g32.data<float>(), n, 0.95f, nesterov);
    cpu::muon_momentum(buf.data<double>(), upd.data<double>(), g.data<double>(), n, 0.95, nesterov);
    const std::string op = nesterov ? "muon_momentum nesterov" : "muon_momentum";
    all.push_back(compare(op, f32, "elementwise", "buf", buf32, buf, kGpuTolF32));
    all.push_back(compare(op, f32, "elementwise", "update", upd32, upd, kGpuTolF32));
  }
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{96, 160}, {160, 96}}) {
    Tensor g = randn64({rows, cols}, seed + 7 + rows).to(f32).to(DType::F64);
    Tensor g32 = g.to(f32).to(Device::CUDA), out32 = Tensor::empty({rows, cols}, f32, Device::CUDA);
    Tensor out = Tensor::empty({rows, cols}, DType::F64);
    cuda::newton_schulz(out32.data<float>(), g32.data<float>(), rows, cols, 5);
    cpu::newton_schulz(out.data<double>(), g.data<double>(), rows, cols, 5);
    all.push_back(compare("newton_schulz " + std::to_string(rows) + "x" + std::to_string(cols), f32, "cublas",
                          "out", out32, out, kGpuTolF32));
  }
  return all;
}
#endif

}  // namespace hla
