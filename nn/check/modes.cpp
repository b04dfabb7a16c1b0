// The grad, gpu and perf modes of the check registry (see modes.h).
#include "nn/check/modes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#ifdef HLA_CUDA
#include "cuda/runtime.h"
#include "cuda/timer.h"
#endif

namespace hla::check {
namespace {

// While alive, new float tensors on `device` are NaN (set_poison_allocations, tensor.h).
class PoisonGuard {
 public:
  explicit PoisonGuard(Device device) : device_(device) { set_poison_allocations(device_, true); }
  ~PoisonGuard() { set_poison_allocations(device_, false); }
  PoisonGuard(const PoisonGuard&) = delete;
  PoisonGuard& operator=(const PoisonGuard&) = delete;

 private:
  Device device_;
};

// An input as a run sees it: floats in `dtype` on `device`; ids and targets only moved.
Var as_var(const Input& in, const Tensor& value, DType dtype, Device device) {
  return Var(is_float(value.dtype()) ? value.to(dtype).to(device) : value.to(device), in.differentiable);
}

std::string output_name(const Case& c, size_t k, size_t count) {
  if (!c.outputs.empty()) {
    HLA_CHECK(c.outputs.size() == count, "check ", c.name, ": ", c.outputs.size(), " output names for ", count,
              " outputs");
    return c.outputs[k];
  }
  return count == 1 ? "out" : "out" + std::to_string(k);
}

struct OpRun {
  std::vector<Tensor> outputs, grads;  // grads: one per input (undefined when not differentiable)
};

// The output gradient of output k: fixed by (seed, k), bf16-exact, in F64 on the CPU.
Tensor output_grad(const Shape& shape, uint64_t seed, size_t k) {
  return Tensor::randn(shape, seed * 7919 + 31 * (k + 1), 1.0, DType::F64).to(DType::BF16).to(DType::F64);
}

// Runs the op forward and backward with its inputs in (dtype, device).
OpRun run_op(const Case& c, const Inputs& in, const std::vector<Tensor>& values, DType dtype, Device device,
             uint64_t seed) {
  const std::shared_ptr<void> setting = c.setting ? c.setting() : nullptr;
  std::vector<Var> vars;
  for (size_t i = 0; i < in.size(); i++) vars.push_back(as_var(in[i], values[i], dtype, device));
  std::vector<Var> outs = c.op(vars);
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

// The narrowest float dtype of the case's GPU runs: every run rounds its inputs to it.
DType narrowest(const std::vector<DType>& dtypes) {
  for (DType d : dtypes)
    if (d == DType::BF16) return DType::BF16;
  return DType::F32;
}

}  // namespace

// ---- grad ----

std::vector<GradcheckResult> run_grad(const Case& c, double tol) {
  PoisonGuard poison(Device::CPU);
  return gradcheck(c.name, c.op, c.inputs(c.seed), tol > 0 ? tol : c.tol.grad);
}

int grad_row_count(const Case& c) {
  int rows = 0;
  for (const Input& in : c.inputs(c.seed)) rows += in.differentiable;
  return rows;
}

// ---- gpu ----

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

GpuRow compare(const std::string& op, DType dtype, const std::string& kernel, const std::string& tensor,
               bool gradient, const Tensor& cuda_value, const Tensor& reference, double tol) {
  GpuRow r{op, gpu_dtype_label(dtype), kernel, tensor, gradient};
  r.tol = tol;
  r.rel_err = rel_rms_error(cuda_value, reference);
  r.pass = r.rel_err <= tol;  // NaN fails
  return r;
}

std::vector<GpuRow> run_gpu(const Case& c, uint64_t seed) {
  const Inputs in = c.inputs(seed);
  const DType rounding = narrowest(c.gpu_dtypes);
  std::vector<Tensor> values;  // float inputs exact in `rounding`, as F64: every run sees the same numbers
  for (const Input& x : in) {
    const bool float_input = is_float(x.value.dtype());
    HLA_CHECK(!x.value.is_cuda() && (float_input ? x.value.dtype() == DType::F64 : !x.differentiable), "gpu-check ",
              c.name, ": input ", x.name, " must be F64 on the CPU (or non-differentiable ids), got ", x.value.str());
    values.push_back(float_input ? x.value.to(rounding).to(DType::F64) : x.value);
  }
  OpRun ref;
  {
    PoisonGuard poison(Device::CPU);
    ref = run_op(c, in, values, DType::F64, Device::CPU, seed);
  }
  std::vector<GpuRow> rows;
#ifdef HLA_CUDA
  for (DType dtype : c.gpu_dtypes) {
    OpRun got;
    {
      PoisonGuard poison(Device::CUDA);
      got = run_op(c, in, values, dtype, Device::CUDA, seed);
    }
    const bool bf16 = dtype == DType::BF16;
    const std::string kernel = c.kernel ? c.kernel(dtype) : "-";
    for (size_t k = 0; k < ref.outputs.size(); k++)
      rows.push_back(compare(c.name, dtype, kernel, output_name(c, k, ref.outputs.size()), false, got.outputs[k],
                             ref.outputs[k], bf16 ? c.tol.bf16_out : c.tol.f32));
    for (size_t i = 0; i < in.size(); i++) {
      if (!in[i].differentiable) continue;
      HLA_CHECK(ref.grads[i].defined(), "gpu-check ", c.name, ": the CPU reference gave no gradient for ", in[i].name);
      Tensor g = got.grads[i].defined() ? got.grads[i] : Tensor::full(ref.grads[i].shape(), NAN, DType::F64);
      rows.push_back(compare(c.name, dtype, kernel, "d" + in[i].name, true, g, ref.grads[i],
                             bf16 ? c.tol.bf16_grad : c.tol.f32));
    }
  }
#else
  fail("gpu-check ", c.name, ": this build of hla has no CUDA backend");
#endif
  return rows;
}

int gpu_row_count(const Case& c) {
  const Inputs in = c.inputs(1);
  std::vector<Var> vars;
  int differentiable = 0;
  for (const Input& x : in) {
    vars.emplace_back(x.value, false);
    differentiable += x.differentiable;
  }
  NoGradGuard no_grad;
  const size_t outputs = c.op(vars).size();
  for (size_t k = 0; k < outputs; k++) output_name(c, k, outputs);  // the names fit the outputs
  return (static_cast<int>(outputs) + differentiable) * static_cast<int>(c.gpu_dtypes.size());
}

// ---- perf ----

std::vector<PerfRow> perf_rows_unmeasured(const Case& c) {
  const Perf& p = c.perf;
  std::vector<PerfRow> rows;
  for (const auto& [pass, anchor_ms] : {std::pair<const char*, double>{"fwd", p.anchor_fwd_ms},
                                        {"fwd+bwd", p.anchor_fwd_bwd_ms}}) {
    PerfRow r;
    r.name = c.name;
    r.group = c.group;
    r.kernel = c.kernel ? c.kernel(DType::BF16) : "-";
    r.pass = pass;
    for (const auto& [letter, size] : p.dims) r.dims.emplace_back(letter, size);
    r.anchor = p.anchor;
    r.anchor_ms = anchor_ms;
    r.anchor_source = anchor_ms > 0 ? "targets.md" : "";
    rows.push_back(r);
  }
  return rows;
}

#ifdef HLA_CUDA
namespace {

// The allocator's high-water mark during call().
size_t peak_bytes_of(const std::function<void()>& call) {
  cuda::reset_peak_bytes();
  call();
  return cuda::peak_bytes();
}

}  // namespace
#endif

std::vector<PerfRow> run_perf(const Case& c, const PerfOptions& options) {
#ifdef HLA_CUDA
  const std::shared_ptr<void> setting = c.setting ? c.setting() : nullptr;
  const Inputs in = c.inputs(0);
  std::vector<Var> vars;
  for (const Input& x : in) vars.push_back(as_var(x, x.value, DType::BF16, Device::CUDA));
  std::vector<size_t> seeded;  // outputs that take a gradient, and their gradients
  std::vector<Tensor> seeds;
  double fwd_workspace = 0, all_workspace = 0;
  {
    // Pass 1: one untimed forward and backward, which picks the output gradients and measures
    // the workspaces: peaks above what is held before the forward and after the call.
    std::vector<Var> outs;
    const size_t before = cuda::allocated_bytes();
    const size_t fwd_peak = peak_bytes_of([&] { outs = c.op(vars); });
    fwd_workspace = double(fwd_peak - std::max(before, cuda::allocated_bytes()));
    std::vector<Var> roots;
    for (size_t k = 0; k < outs.size(); k++) {
      if (!outs[k].requires_grad()) continue;
      seeded.push_back(k);
      roots.push_back(outs[k]);
      seeds.push_back(perf_input(PerfPool::Normal, 5 + static_cast<int>(seeds.size()), outs[k].shape())
                          .to(outs[k].dtype()));
    }
    const size_t bwd_peak = roots.empty() ? 0 : peak_bytes_of([&] { run_backward(roots, seeds); });
    all_workspace = double(std::max(fwd_peak, bwd_peak) - std::max(before, cuda::allocated_bytes()));
    for (Var& v : vars) v.zero_grad();
  }
  auto forward = [&] { c.op(vars); };
  auto forward_backward = [&] {
    std::vector<Var> outs = c.op(vars), roots;
    for (size_t k : seeded) roots.push_back(outs[k]);
    if (!roots.empty()) run_backward(roots, seeds);
    for (Var& v : vars) v.zero_grad();
  };
  // Pass 2: the timings.
  const double fwd_ms = cuda::median(cuda::time_ms(forward, options.warmup, options.repeats));
  const double all_ms = cuda::median(cuda::time_ms(forward_backward, options.warmup, options.repeats));
  const Perf& p = c.perf;
  std::vector<PerfRow> rows = perf_rows_unmeasured(c);
  rows[0].ms = fwd_ms;
  rows[0].tflops = p.fwd_flops / fwd_ms * 1e-9;
  rows[0].gbps = p.fwd_bytes / fwd_ms * 1e-6;
  rows[0].workspace_bytes = fwd_workspace;
  rows[1].ms = all_ms;
  rows[1].tflops = p.fwd_bwd_flops / all_ms * 1e-9;
  rows[1].gbps = p.fwd_bwd_bytes / all_ms * 1e-6;
  rows[1].workspace_bytes = all_workspace;
  return rows;
#else
  (void)options;
  fail("bench ", c.name, ": this build of hla has no CUDA backend");
#endif
}

// ---- --list ----

void print_list(Mode mode, const std::vector<const Case*>& cases) {
  int name_width = 4;
  for (const Case* c : cases) name_width = std::max(name_width, static_cast<int>(c->name.size()));
  std::printf("%-16s %-*s %5s%s\n", "group", name_width, "case", "rows", mode == kPerf ? "  anchor" : "");
  int rows = 0;
  for (const Case* c : cases) {
    const int n = mode == kGrad ? grad_row_count(*c) : mode == kGpu ? gpu_row_count(*c) : kPerfRowsPerCase;
    rows += n;
    std::printf("%-16s %-*s %5d%s%s\n", c->group.c_str(), name_width, c->name.c_str(), n, mode == kPerf ? "  " : "",
                mode == kPerf ? c->perf.anchor.c_str() : "");
  }
  std::printf("%s: %zu cases, %d rows\n", mode == kGrad ? "gradcheck" : mode == kGpu ? "gpu-check" : "bench",
              cases.size(), rows);
}

}  // namespace hla::check
