// CUDA-vs-CPU comparison of an op's outputs and gradients (see gpucheck.h).
#include "autograd/gpucheck.h"

#include <cmath>

#ifdef HLA_CUDA
#include "cuda/runtime.h"
#endif

namespace hla {

std::vector<GpucheckCase>& gpucheck_registry() {
  static std::vector<GpucheckCase> registry;
  return registry;
}

bool register_gpucheck(const std::string& op, std::function<std::vector<GpucheckResult>(uint64_t)> run) {
  gpucheck_registry().push_back({op, std::move(run)});
  return true;
}

Tensor randn64(const Shape& shape, uint64_t seed, double std, double shift) {
  Tensor t = Tensor::randn(shape, seed, std, DType::F64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); i++) p[i] += shift;
  return t;
}

Tensor map64(Tensor t, double (*f)(double)) {
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); i++) p[i] = f(p[i]);
  return t;
}

KernelName named_kernel(const std::string& name) {
  return [name](DType) { return name; };
}

void append(std::vector<GpucheckResult>& all, const std::vector<GpucheckResult>& more) {
  all.insert(all.end(), more.begin(), more.end());
}

const char* gpu_dtype_label(DType dtype) { return dtype == DType::BF16 ? "bf16" : dtype == DType::F32 ? "f32" : "f64"; }

double rel_rms_error(const Tensor& a, const Tensor& ref) {
  HLA_CHECK(a.numel() == ref.numel(), "rel_rms_error: ", a.str(), " vs ", ref.str());
  std::vector<double> x = a.to_f64_vector(), y = ref.to_f64_vector();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); i++) {
    diff += (x[i] - y[i]) * (x[i] - y[i]);
    norm += y[i] * y[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

GpucheckResult compare(const std::string& op, DType dtype, const std::string& kernel, const std::string& tensor,
                       const Tensor& cuda_value, const Tensor& reference, double tol) {
  GpucheckResult r;
  r.op = op;
  r.dtype = gpu_dtype_label(dtype);
  r.kernel = kernel;
  r.tensor = tensor;
  r.tol = tol;
  r.rel_err = rel_rms_error(cuda_value, reference);
  r.pass = r.rel_err <= tol;  // NaN fails
  return r;
}

#ifdef HLA_CUDA
PoisonGuard::PoisonGuard() { cuda::set_poison_allocations(true); }
PoisonGuard::~PoisonGuard() { cuda::set_poison_allocations(false); }
#else
PoisonGuard::PoisonGuard() {}
PoisonGuard::~PoisonGuard() {}
#endif

namespace {

struct OpRun {
  std::vector<Tensor> outputs, grads;  // grads: one per input (undefined when not differentiable)
};

// The output gradient of output k: fixed by (seed, k), bf16-exact, in F64 on the CPU.
Tensor output_grad(const Shape& shape, uint64_t seed, size_t k) {
  return Tensor::randn(shape, seed * 7919 + 31 * (k + 1), 1.0, DType::F64).to(DType::BF16).to(DType::F64);
}

// Runs fn forward and backward with inputs converted to (dtype, device).
OpRun run_op(const GpucheckFn& fn, const std::vector<Tensor>& values, const std::vector<GpucheckInput>& inputs,
             DType dtype, Device device, uint64_t seed) {
  std::vector<Var> vars;
  for (size_t i = 0; i < values.size(); i++) vars.emplace_back(values[i].to(dtype).to(device), inputs[i].differentiable);
  std::vector<Var> outs = fn(vars);
  std::vector<Var> roots;
  std::vector<Tensor> seeds;
  for (size_t k = 0; k < outs.size(); k++) {
    if (!outs[k].requires_grad()) continue;
    roots.push_back(outs[k]);
    seeds.push_back(output_grad(outs[k].shape(), seed, k).to(outs[k].dtype()).to(device));
  }
  if (!roots.empty()) run_backward(roots, seeds);
  OpRun run;
  for (const Var& o : outs) run.outputs.push_back(o.value());
  for (const Var& v : vars) run.grads.push_back(v.grad());
  return run;
}

}  // namespace

std::vector<GpucheckResult> gpucheck(const std::string& op, const KernelName& kernel, const GpucheckFn& fn,
                                     const std::vector<GpucheckInput>& inputs, uint64_t seed) {
  std::vector<Tensor> values;  // bf16-exact F64 copies: every run sees the same numbers
  for (const auto& in : inputs) {
    HLA_CHECK(in.value.dtype() == DType::F64 && !in.value.is_cuda(), "gpucheck ", op, ": input ", in.name,
              " must be F64 on the CPU, got ", in.value.str());
    values.push_back(in.value.to(DType::BF16).to(DType::F64));
  }
  OpRun ref = run_op(fn, values, inputs, DType::F64, Device::CPU, seed);
  std::vector<GpucheckResult> results;
#ifdef HLA_CUDA
  for (DType dtype : {DType::F32, DType::BF16}) {
    OpRun got;
    {
      PoisonGuard poison;
      got = run_op(fn, values, inputs, dtype, Device::CUDA, seed);
    }
    const bool bf16 = dtype == DType::BF16;
    const std::string name = kernel(dtype);
    for (size_t k = 0; k < ref.outputs.size(); k++)
      results.push_back(compare(op, dtype, name, ref.outputs.size() == 1 ? "out" : "out" + std::to_string(k),
                                got.outputs[k], ref.outputs[k], bf16 ? kGpuTolBf16Output : kGpuTolF32));
    for (size_t i = 0; i < inputs.size(); i++) {
      if (!inputs[i].differentiable) continue;
      HLA_CHECK(ref.grads[i].defined(), "gpucheck ", op, ": the CPU reference gave no gradient for ", inputs[i].name);
      Tensor g = got.grads[i].defined() ? got.grads[i] : Tensor::full(ref.grads[i].shape(), NAN, DType::F64);
      results.push_back(compare(op, dtype, name, "d" + inputs[i].name, g, ref.grads[i],
                                bf16 ? kGpuTolBf16Grad : kGpuTolF32));
    }
  }
#else
  (void)kernel;
  fail("gpucheck ", op, ": this build of hla has no CUDA backend");
#endif
  return results;
}

}  // namespace hla
