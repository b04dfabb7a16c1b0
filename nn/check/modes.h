// The three modes that read the check registry (nn/check/registry.h), behind `hla gradcheck`,
// `hla gpu-check` and `hla bench` and the tests.
//
// grad: the case's inputs at its fixed seed, autograd/gradcheck.h's central differences (eps
//   1e-6) on every differentiable input. New CPU float tensors from Tensor::empty are NaN while
//   it runs, so a backward that leaves part of a gradient unwritten fails.
// gpu: the op three times on the same inputs: the float64 CPU reference, then CUDA in F32 and
//   BF16 (the case's gpu_dtypes). Float inputs are rounded once to the narrowest of those dtypes.
//   Each output gets a fixed random output gradient (bf16-exact) and the backward runs into
//   every differentiable input. New allocations on the device that runs are NaN, so an element
//   a kernel forgets to write fails. One row per (dtype, output or gradient):
//     rel err = ||cuda - cpu||_2 / ||cpu||_2   (||cuda - cpu||_2 when the reference is 0)
// perf: the Var path in BF16 on the GPU, forward (recording the graph, as training does) and
//   forward + backward, each a median of CUDA-event timings after warm-up runs. Workspace: the
//   caching allocator's high-water mark during one untimed call above what is held both before
//   and after it (inputs, outputs, saved tensors, gradients), i.e. the temporary device memory
//   the call needed; the fwd+bwd row: the high-water mark of the forward and the backward
//   together above what is held before the forward and after the backward, so it also counts what
//   the forward keeps for the backward and the backward frees (the delta rule's kept chunk states).
//   Tables and JSON of the rows, and measured anchors: nn/check/perf_report.h.
#pragma once
#include <string>
#include <vector>

#include "nn/check/registry.h"

namespace hla::check {

// ---- grad ----
// tol > 0 replaces the case's tolerance.
std::vector<GradcheckResult> run_grad(const Case& c, double tol = 0);
int grad_row_count(const Case& c);  // its differentiable inputs

// ---- gpu ----
struct GpuRow {
  std::string op, dtype, kernel, tensor;  // tensor: an output ("out", "out1", "m") or "d<input>"
  bool gradient = false;
  double rel_err = 0;
  double tol = 0;
  bool pass = false;
};
std::vector<GpuRow> run_gpu(const Case& c, uint64_t seed);
// Rows run_gpu gives, counted without a GPU: (outputs of the CPU reference + differentiable
// inputs) per dtype.
int gpu_row_count(const Case& c);

// ||a - ref|| / ||ref|| over all elements (any dtypes and devices); ||a - ref|| when ref is 0.
double rel_rms_error(const Tensor& a, const Tensor& ref);
// One row comparing a CUDA result with its reference; NaN fails.
GpuRow compare(const std::string& op, DType dtype, const std::string& kernel, const std::string& tensor,
               bool gradient, const Tensor& cuda_value, const Tensor& reference, double tol);
const char* gpu_dtype_label(DType dtype);  // "f32", "bf16", "f64"

// ---- perf ----
struct PerfOptions {
  int warmup = 5;
  int repeats = 20;
};
struct PerfRow {
  std::string name, group, kernel, pass;  // pass: "fwd" or "fwd+bwd"
  std::vector<std::pair<std::string, int64_t>> dims;  // the case's shape (Perf::dims)
  double ms = 0;                   // median over the repeats
  double tflops = 0, gbps = 0;     // achieved; 0 when the case gives no count
  double workspace_bytes = 0;      // temporary device memory of one call (see above)
  double anchor_ms = 0;            // 0: no anchor figure
  std::string anchor;              // "fla chunk_gla"; empty: the case has no anchor
  std::string anchor_source;       // "targets.md", "measured" (hla bench --anchors), or empty
};
std::vector<PerfRow> run_perf(const Case& c, const PerfOptions& options);  // fwd, fwd+bwd
// The rows run_perf gives, without their measurements (no GPU needed): `hla bench --list --json`.
std::vector<PerfRow> perf_rows_unmeasured(const Case& c);
constexpr int kPerfRowsPerCase = 2;

// `--list` of the three commands: one line per case (group, name, the rows the mode gives it;
// perf adds the anchor), then the totals. Runs no GPU code.
void print_list(Mode mode, const std::vector<const Case*>& cases);

}  // namespace hla::check
