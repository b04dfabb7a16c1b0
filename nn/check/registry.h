// The check registry, in the style of ggml's test-backend-ops: one list of op cases that three
// modes read (nn/check/modes.h):
//   grad  `hla gradcheck`  float64 central differences of every input's gradient
//   gpu   `hla gpu-check`  CUDA in F32 and BF16 against the float64 CPU reference
//   perf  `hla bench`      CUDA-event timings of the Var path, forward and forward+backward
// A case applies one op, through its public Var function (nn/ops/X.h: the path the model runs;
// only the optimizers, which have none, call their update functions), to named inputs drawn from
// a seed. Its name comes from its parameters ("delta_rule gdn B2 T150 H2/4 dk128 dv96"), its
// group is the op file it checks ("delta_rule"): --op filters on both, gpu-check summarises per
// group, dtype and kernel, and the modes list cases sorted by group.
// Families of cases are loops over parameter tables in the case files (nn/check/cases_*.cpp;
// train/optim_check.cpp for the optimizers), which register at static initialisation, one
// add_* function per op, handed to a Registrar in the order the cases are to be listed:
//   void add_l2norm_cases() {
//     for (const Shape& s : shapes) add_case(gpu_case("l2norm", "l2norm " + shape_str(s), ...));
//   }
//   const Registrar registered{add_rmsnorm_cases, add_l2norm_cases};
// Adding an op means adding its cases to one of those files.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/var.h"

namespace hla::check {

enum Mode : unsigned { kGrad = 1u << 0, kGpu = 1u << 1, kPerf = 1u << 2 };

// {name, value, differentiable}: value is F64 on the CPU (I32 for ids and targets, which are
// never differentiable). gpu mode rounds float inputs once to the narrowest dtype it runs, so
// every run sees the same numbers; perf cases return their inputs on the GPU (perf_input).
using Input = GradcheckInput;
using Inputs = std::vector<Input>;
using MakeInputs = std::function<Inputs(uint64_t seed)>;
using OpFn = std::function<std::vector<Var>(const std::vector<Var>&)>;
// The CUDA kernel an op runs for a storage dtype, shown in the gpu-check and bench tables.
using KernelLabel = std::function<std::string(DType)>;

// Pass thresholds; only wgmma_gemm's cases override one (nn/check/cases_wgmma.cpp). grad: max |analytic - numeric| / max |numeric|
// per input. gpu: relative RMS error ||cuda - cpu|| / ||cpu|| per output and gradient.
struct Tolerances {
  double grad = 1e-6;
  double f32 = 1e-5;        // outputs and gradients
  double bf16_out = 5e-3;
  double bf16_grad = 1e-2;
};

// What perf mode reports beside the times: the work of one call (0: that column stays empty)
// and the anchor's times for the same work (shared/design/targets.md; 0: none on file, then only a
// measured anchor fills the row: `hla bench --anchors`, scripts/bench_anchors.py). dims is the
// case's shape, the name's label ({{"B", 4}, {"T", 4096}, ...}): the bench JSON carries it and
// scripts/bench_anchors.py times the anchor at it.
struct Perf {
  double fwd_flops = 0, fwd_bwd_flops = 0;
  double fwd_bytes = 0, fwd_bwd_bytes = 0;
  double anchor_fwd_ms = 0, anchor_fwd_bwd_ms = 0;
  std::string anchor;  // "fla chunk_gla"; empty: no anchor
  std::vector<std::pair<const char*, int64_t>> dims;
};

// The kernel bench's shapes, every mixer at each: (B, T, H, D) with dk = dv = D. The first is
// targets.md's anchor shape, the second its smaller one, the third fla's 340M layout (4 heads
// of 256). kBenchAttentionLongT: attention also runs at B1 T16384 H16 D128.
struct BenchShape {
  int64_t B, T, H, D;
};
inline const std::vector<BenchShape> kBenchShapes = {{4, 4096, 16, 128}, {8, 2048, 16, 64}, {8, 2048, 4, 256}};
constexpr int64_t kBenchAttentionLongT = 16384;
// targets.md's anchor times (ms) at one bench shape; 0: none on file.
struct AnchorMs {
  double fwd = 0, fwd_bwd = 0;
};

struct Case {
  std::string group;  // the op file: "delta_rule"
  std::string name;   // unique among the cases of a mode
  unsigned modes = 0;
  uint64_t seed = 0;  // grad mode's fixed seed; gpu mode draws from the run's seed
  MakeInputs inputs;
  OpFn op;
  KernelLabel kernel;
  std::vector<std::string> outputs;  // output names; empty: "out", or "out0", "out1", ...
  std::vector<DType> gpu_dtypes = {DType::F32, DType::BF16};
  Tolerances tol;
  Perf perf;
  // Called as a gpu or perf run of the case starts; what it returns is held until the run's
  // backward is done (the op's own scope ends before the harness runs the backward): a kernel
  // switch for the backward (attention's wgmma kernels). Null: none.
  std::function<std::shared_ptr<void>()> setting;
};

void add_case(Case c);

// Calls a case file's add_* functions, in order, when the file's static is initialised.
struct Registrar {
  Registrar(std::initializer_list<void (*)()> add_families) {
    for (void (*add)() : add_families) add();
  }
};
// The cases of a mode whose name or group contains one of the patterns (every case when there
// are none), sorted by group (stable, so a group keeps its file's order). Throws when two cases
// of one mode share a name or a case lacks a group, a name, inputs or an op.
std::vector<const Case*> cases(Mode mode, const std::vector<std::string>& patterns = {});

// ---- helpers for writing cases (one copy for every case file) ----

// A grad-mode case drawn at a fixed seed; a gpu-mode case (drawn from the run's seed); a
// perf-mode case.
Case grad_case(std::string group, std::string name, uint64_t seed, MakeInputs inputs, OpFn op);
Case gpu_case(std::string group, std::string name, KernelLabel kernel, MakeInputs inputs, OpFn op);
Case perf_case(std::string group, std::string name, KernelLabel kernel, MakeInputs inputs, OpFn op, Perf perf);

// Float64 CPU inputs: N(0, std^2) + shift and U[lo, hi) from `seed`; f applied to every element.
Tensor randn64(const Shape& shape, uint64_t seed, double std = 1.0, double shift = 0.0);
Tensor uniform64(const Shape& shape, uint64_t seed, double lo, double hi);
Tensor map64(Tensor t, double (*f)(double));
double sigmoid(double x);
double logsigmoid(double x);
// Log decay gates in (-inf, 0): logsigmoid(N(shift, 1)).
Tensor log_gate(const Shape& shape, uint64_t seed, double shift);
// Rows of the last dimension scaled to norm 1 (l2-normalised keys and queries).
Tensor unit_rows(Tensor t);
// Packed documents: doc_start (B, T) I32 on the CPU of B rows each cut into documents of
// `lengths` tokens (T = their sum; nn/ops/attention.h: document_starts).
Tensor packed_doc_start(int64_t B, const std::vector<int64_t>& lengths);
// A kernel label that does not depend on the dtype.
KernelLabel named_kernel(const std::string& name);
// "B2 T37 D64" from {{"B", 2}, {"T", 37}, {"D", 64}}.
std::string dims_label(const std::vector<std::pair<const char*, int64_t>>& dims);
// {{"B", s.B}, {"T", s.T}, {"H", s.H}, {"D", s.D}}: a bench case's Perf::dims (its name's label).
inline std::vector<std::pair<const char*, int64_t>> bench_dims(const BenchShape& s) {
  return {{"B", s.B}, {"T", s.T}, {"H", s.H}, {"D", s.D}};
}

// Perf inputs. Drawing one (4, 4096, 16, 128) tensor on the host takes longer than timing the
// op, so perf cases take views of three bf16 GPU pools drawn once per process (each large
// enough for that shape plus 8 offsets of 4096): Normal N(0, 1), LogGate U[-1, -0.01) log decays,
// Gate U[0, 1). View `index` (0..7) starts 4096 * index elements in; std != 1 returns a scaled
// copy. perf mode seeds the output gradients with Normal views 5, 6, 7.
enum class PerfPool { Normal, LogGate, Gate };
Tensor perf_input(PerfPool pool, int index, const Shape& shape, double std = 1.0);

}  // namespace hla::check
