// AdamW and Muon updates on the GPU, line for line the cpu:: references in train/optim.cpp.
//
// Multi-tensor kernels: one launch updates every tensor of a table passed by value (a kernel
// parameter: no host-to-device copy, so the launch can be captured in a CUDA graph); the values
// that change every update (lr, bias corrections, Muon's decay and step) are read from device
// memory, so a captured training step replays with each update's own. The
// tensors are cut into chunks of kChunk elements; block b takes chunk b of the concatenation,
// finding its tensor by binary search over the table's first_chunk column, so a 1-element
// norm weight and a 32M-element embedding share one launch without idle blocks.
// Newton-Schulz runs a batch of same-shape matrices at once: the Frobenius norms in two small
// kernels (per-matrix partial sums in double, then a scale that adds them in a fixed order:
// deterministic), the quintic steps as strided-batched cuBLAS GEMMs (cuda/math.h), the two that add a
// multiple of their input through cuBLASLt's separate C (gemm_add: no copies in the step).
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/math.h"
#include "cuda/optim.h"

namespace hla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 8 * kThreads;  // elements per block of a multi-tensor launch
constexpr int kNormBlocks = 32;           // blocks per matrix in the norm's first pass

// Up to kTensorsPerLaunch tensors of Columns pointer columns each (param, grad, m, v for AdamW):
// col[c][t] is column c of tensor t, n[t] its length, copy[t] its bf16 compute copy or null;
// block b works on chunk b - first_chunk[t] of tensor t when first_chunk[t] <= b < first_chunk[t + 1].
template <int Columns>
struct TensorTable {
  float* col[Columns][kTensorsPerLaunch];
  __nv_bfloat16* copy[kTensorsPerLaunch];
  int64_t n[kTensorsPerLaunch];
  int64_t first_chunk[kTensorsPerLaunch + 1];
  int count;
};
static_assert(sizeof(TensorTable<4>) < 32764, "the table must fit the kernel parameter limit (CUDA >= 12.1)");

// The last tensor whose first chunk is <= b (empty tensors own no chunk, so they are skipped).
template <int Columns>
__device__ int tensor_of_block(const TensorTable<Columns>& table, int64_t b) {
  int lo = 0, hi = table.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table.first_chunk[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Calls op(table, t, i) for every element i of this block's chunk of tensor t, with the op's
// values of this update read from device memory once per thread (op.at_step()).
template <int Columns, class Op>
__global__ void multi_tensor_kernel(const __grid_constant__ TensorTable<Columns> table, Op op) {
  const int64_t b = blockIdx.x;
  const int t = tensor_of_block(table, b);
  const int64_t start = (b - table.first_chunk[t]) * kChunk;
  const int64_t end = min(start + kChunk, table.n[t]);
  const Op now = op.at_step();
  for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) now(table, t, i);
}

// The tables of `count` tensors, kTensorsPerLaunch at a time, one launch each. Read-only
// columns (grad, ortho) enter the table through a const_cast; the ops only read them.
// compute_copy: (count) pointers or null, as in cuda/optim.h.
template <int Columns, class Op>
void launch_multi_tensor(float* const* const (&columns)[Columns], const int64_t* n, int count, Op op,
                         bf16* const* compute_copy = nullptr) {
  for (int first = 0; first < count; first += kTensorsPerLaunch) {
    TensorTable<Columns> table;
    table.count = std::min(count - first, kTensorsPerLaunch);
    table.first_chunk[0] = 0;
    for (int t = 0; t < table.count; t++) {
      table.n[t] = n[first + t];
      table.first_chunk[t + 1] = table.first_chunk[t] + (table.n[t] + kChunk - 1) / kChunk;
      for (int c = 0; c < Columns; c++) table.col[c][t] = columns[c][first + t];
      table.copy[t] = compute_copy ? reinterpret_cast<__nv_bfloat16*>(compute_copy[first + t]) : nullptr;
    }
    const int64_t blocks = table.first_chunk[table.count];
    if (blocks == 0) continue;
    HLA_CHECK(blocks <= INT32_MAX, "optimizer: ", blocks, " blocks exceed one launch");
    multi_tensor_kernel<<<static_cast<unsigned>(blocks), kThreads>>>(table, op);
    CUDA_CHECK_LAUNCH();
  }
}

// A gradient as an update reads it, times the clip factor at grad_scale (null: 1), as
// multi_scale_ would have written it (cuda/optim.h).
struct GradScale {
  float factor = 1;
  bool drop = false, scaled = false;
  __device__ static GradScale at(const double* grad_scale) {
    GradScale s;
    if (!grad_scale) return s;
    const double f = *grad_scale;
    s.factor = static_cast<float>(f);
    s.drop = f == 0.0;
    s.scaled = f != 1.0;
    return s;
  }
  __device__ float operator()(float g) const { return drop ? 0.0f : scaled ? g * factor : g; }
};

// col: param, grad, m, v. schedule: (3) on the device, this update's lr, bias_correction1 and
// bias_correction2; at_step() derives the factors in float as the host did before they moved to
// the device (the _rn intrinsics keep the multiply and subtract unfused, as on the host).
struct AdamwOp {
  const double* schedule;
  float b1, b2, eps, weight_decay;
  const double* grad_scale;
  float decay = 0, step_size = 0, inv_sqrt_bc2 = 0;  // from at_step()
  GradScale scale;                                  // from at_step()
  __device__ AdamwOp at_step() const {
    AdamwOp now = *this;
    now.scale = GradScale::at(grad_scale);
    const float lr = static_cast<float>(schedule[0]), bc1 = static_cast<float>(schedule[1]),
                bc2 = static_cast<float>(schedule[2]);
    now.decay = __fsub_rn(1.0f, __fmul_rn(lr, weight_decay));
    now.step_size = __fdiv_rn(lr, bc1);
    now.inv_sqrt_bc2 = __fdiv_rn(1.0f, __fsqrt_rn(bc2));
    return now;
  }
  __device__ void operator()(const TensorTable<4>& x, int t, int64_t i) const {
    float* param = x.col[0][t];
    const float* grad = x.col[1][t];
    float* m = x.col[2][t];
    float* v = x.col[3][t];
    const float g = scale(grad[i]);
    const float mi = b1 * m[i] + (1.0f - b1) * g;      // first moment
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;  // second moment
    m[i] = mi;
    v[i] = vi;
    const float p = param[i] * decay;  // decoupled weight decay
    // lr * (m / bc1) / (sqrt(v / bc2) + eps)
    const float updated = p - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    param[i] = updated;
    if (x.copy[t]) x.copy[t][i] = __float2bfloat16_rn(updated);
  }
};

// col: buf, update, grad
struct MomentumOp {
  float mu;
  bool nesterov;
  const double* grad_scale;
  GradScale scale;  // from at_step()
  __device__ MomentumOp at_step() const {
    MomentumOp now = *this;
    now.scale = GradScale::at(grad_scale);
    return now;
  }
  __device__ void operator()(const TensorTable<3>& x, int t, int64_t i) const {
    const float g = scale(x.col[2][t][i]);
    const float b = mu * x.col[0][t][i] + g;
    x.col[0][t][i] = b;
    x.col[1][t][i] = nesterov ? g + mu * b : b;
  }
};

// col: param, ortho. schedule: (2) on the device, this update's decay and step.
struct MuonApplyOp {
  const double* schedule;
  float decay = 0, step = 0;  // from at_step()
  __device__ MuonApplyOp at_step() const {
    MuonApplyOp now = *this;
    now.decay = static_cast<float>(schedule[0]);
    now.step = static_cast<float>(schedule[1]);
    return now;
  }
  __device__ void operator()(const TensorTable<2>& x, int t, int64_t i) const {
    const float p = x.col[0][t][i] * decay;  // decoupled weight decay
    const float updated = p - step * x.col[1][t][i];
    x.col[0][t][i] = updated;
    if (x.copy[t]) x.copy[t][i] = __float2bfloat16_rn(updated);
  }
};

// partial: (batch, kNormBlocks), g: (batch, n); grid (kNormBlocks, batch). Sums of g^2 in double.
__global__ void sq_norm_partials_kernel(double* partial, const float* g, int64_t n) {
  __shared__ double buf[kThreads];
  const float* gm = g + blockIdx.y * n;  // gm: (n), this block's matrix
  double acc = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    acc += static_cast<double>(gm[i]) * gm[i];
  buf[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.y * kNormBlocks + blockIdx.x] = buf[0];
}

// x, g: (batch, n), partial: (batch, kNormBlocks); grid (blocks, batch). x = g / (||g||_F + 1e-7).
__global__ void normalize_kernel(float* x, const float* g, const double* partial, int64_t n) {
  double sq = 0;
  for (int k = 0; k < kNormBlocks; k++) sq += partial[blockIdx.y * kNormBlocks + k];  // fixed order
  const float scale = static_cast<float>(1.0 / (sqrt(sq) + 1e-7));
  const int64_t base = blockIdx.y * n;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    x[base + i] = g[base + i] * scale;
}

}  // namespace

void adamw_update(float* const* param, const float* const* grad, float* const* m, float* const* v, const int64_t* n,
                  int count, const double* schedule, float beta1, float beta2, float eps, float weight_decay,
                  const double* grad_scale, bf16* const* compute_copy) {
  float* const* const columns[4] = {param, const_cast<float* const*>(grad), m, v};
  launch_multi_tensor(columns, n, count, AdamwOp{schedule, beta1, beta2, eps, weight_decay, grad_scale}, compute_copy);
}

void muon_momentum(float* const* buf, float* const* update, const float* const* grad, const int64_t* n, int count,
                   float momentum, bool nesterov, const double* grad_scale) {
  float* const* const columns[3] = {buf, update, const_cast<float* const*>(grad)};
  launch_multi_tensor(columns, n, count, MomentumOp{momentum, nesterov, grad_scale});
}

void muon_apply(float* const* param, const float* const* ortho, const int64_t* n, int count, const double* schedule,
                bf16* const* compute_copy) {
  float* const* const columns[2] = {param, const_cast<float* const*>(ortho)};
  launch_multi_tensor(columns, n, count, MuonApplyOp{schedule}, compute_copy);
}

void newton_schulz(float* out, const float* g, int64_t batch, int64_t rows, int64_t cols, int steps) {
  constexpr float a = 3.4445f, b = -4.7750f, c = 2.0315f;
  const int64_t n = rows * cols, small = std::min(rows, cols), gram = small * small;
  if (n == 0 || batch == 0) return;
  HLA_CHECK(batch <= 65535, "newton_schulz: a batch of ", batch, " matrices exceeds the grid's y limit 65535");
  const bool tall = rows > cols;  // then A = X^T X and products multiply X on the right
  FloatScratch A(batch * gram), Bm(batch * gram), Y(batch * n);  // A, Bm: (batch, small, small); Y: (batch, rows, cols)
  FloatScratch partial(batch * kNormBlocks * 2);                  // (batch, kNormBlocks) doubles
  double* sq = reinterpret_cast<double*>(partial.get());
  // pass 1: X = g / (||g||_F + 1e-7), per matrix. X and Y take turns as a step's input and
  // output, so X starts where an even number of turns leaves the last step's output: in out.
  float *X = steps % 2 ? Y.get() : out, *Ybuf = steps % 2 ? out : Y.get();  // X, Ybuf: (batch, rows, cols)
  sq_norm_partials_kernel<<<dim3(kNormBlocks, static_cast<unsigned>(batch)), kThreads>>>(sq, g, n);
  CUDA_CHECK_LAUNCH();
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1024));
  normalize_kernel<<<dim3(blocks, static_cast<unsigned>(batch)), kThreads>>>(X, g, sq, n);
  CUDA_CHECK_LAUNCH();
  // pass 2: the quintic steps, every matrix of the batch in each GEMM
  float *a_gram = A.get(), *b_gram = Bm.get();
  for (int s = 0; s < steps; s++) {
    // A = X^T X (tall) or X X^T
    if (tall) gemm(a_gram, DType::F32, X, X, DType::F32, cols, cols, rows, true, false, 1.0f, 0.0f, batch, n, n, gram);
    else gemm(a_gram, DType::F32, X, X, DType::F32, rows, rows, cols, false, true, 1.0f, 0.0f, batch, n, n, gram);
    // Bm = b A + c A A
    gemm_add(b_gram, a_gram, a_gram, a_gram, small, small, small, false, false, c, b, batch, gram, gram, gram);
    // Y = a X + X Bm (tall) or a X + Bm X
    if (tall) gemm_add(Ybuf, X, X, b_gram, rows, cols, cols, false, false, 1.0f, a, batch, n, gram, n);
    else gemm_add(Ybuf, X, b_gram, X, rows, cols, rows, false, false, 1.0f, a, batch, gram, n, n);
    std::swap(X, Ybuf);  // X = Y
  }
}

}  // namespace hla::cuda
