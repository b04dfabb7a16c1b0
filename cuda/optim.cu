// AdamW and Muon updates on the GPU, line for line the cpu:: references in train/optim.cpp.
//
// Multi-tensor kernels: one launch updates every tensor of a table passed by value (a kernel
// parameter: no host-to-device copy, so the launch can be captured in a CUDA graph); the values
// that change every update (lr, bias corrections, Muon's decay and step) are read from device
// memory, so a captured training step replays with each update's own. The
// tensors are cut into chunks of kChunk elements; block b takes chunk b of the concatenation,
// finding its tensor by binary search over the table's first_chunk column, so a 1-element
// norm weight and a 32M-element embedding share one launch without idle blocks. A thread moves
// packs of 4 elements (16-byte accesses where the tensor's columns are aligned).
// Newton-Schulz runs every shape group's batch of matrices at once: the Frobenius norms in two
// small kernels (per-matrix partial sums in double, then a scale that adds them in a fixed order:
// deterministic), then three products a quintic step: those of all matrices up to 256 x 256 in one
// launch each (small_products_kernel: a small model's optimizer would otherwise spend its time on
// launches), the others as strided-batched cuBLASLt GEMMs (cuda/math.h's gemm_add: the two that
// add a multiple of their input read it as C and write elsewhere, so a step copies nothing).
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

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
// vec[t]: every column of tensor t starts 16-byte aligned (its copy 8-byte), so packs of kPack
// elements move as one access each.
template <int Columns>
struct TensorTable {
  float* col[Columns][kTensorsPerLaunch];
  __nv_bfloat16* copy[kTensorsPerLaunch];
  int64_t n[kTensorsPerLaunch];
  int64_t first_chunk[kTensorsPerLaunch + 1];
  bool vec[kTensorsPerLaunch];
  int count;
};

// A thread's pack: kPack consecutive elements (of which n < kPack at a tensor's end), loaded
// and stored as one 16-byte access when vec, else one by one. The ops load every column of a
// pack before they store any, so a thread's loads are in flight together.
constexpr int kPack = 4;
static_assert(kChunk % kPack == 0, "chunks start on pack boundaries");
__device__ __forceinline__ void load_pack(float (&v)[kPack], const float* p, int64_t i, int n, bool vec) {
  if (vec && n == kPack) {
    const float4 f = *reinterpret_cast<const float4*>(p + i);
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    return;
  }
#pragma unroll
  for (int k = 0; k < kPack; k++) v[k] = k < n ? p[i + k] : 0.0f;
}
__device__ __forceinline__ void store_pack(float* p, int64_t i, const float (&v)[kPack], int n, bool vec) {
  if (vec && n == kPack) {
    *reinterpret_cast<float4*>(p + i) = make_float4(v[0], v[1], v[2], v[3]);
    return;
  }
#pragma unroll
  for (int k = 0; k < kPack; k++)
    if (k < n) p[i + k] = v[k];
}
__device__ __forceinline__ void store_copy_pack(__nv_bfloat16* p, int64_t i, const float (&v)[kPack], int n, bool vec) {
  if (vec && n == kPack) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]), hi = __floats2bfloat162_rn(v[2], v[3]);
    uint2 packed;
    packed.x = *reinterpret_cast<const uint32_t*>(&lo);
    packed.y = *reinterpret_cast<const uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(p + i) = packed;
    return;
  }
#pragma unroll
  for (int k = 0; k < kPack; k++)
    if (k < n) p[i + k] = __float2bfloat16_rn(v[k]);
}

bool aligned_to(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }
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

// Calls op(table, t, i, n, vec) for every pack (elements i .. i + n - 1) of this block's chunk
// of tensor t, with the op's values of this update read from device memory once per thread
// (op.at_step()).
template <int Columns, class Op>
__global__ void multi_tensor_kernel(const __grid_constant__ TensorTable<Columns> table, Op op) {
  const int64_t b = blockIdx.x;
  const int t = tensor_of_block(table, b);
  const int64_t start = (b - table.first_chunk[t]) * kChunk;
  const int64_t end = min(start + kChunk, table.n[t]);
  const Op now = op.at_step();
  for (int64_t i = start + kPack * threadIdx.x; i < end; i += kPack * blockDim.x)
    now(table, t, i, static_cast<int>(end - i < kPack ? end - i : kPack), table.vec[t]);
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
      table.vec[t] = true;
      for (int c = 0; c < Columns; c++) {
        table.col[c][t] = columns[c][first + t];
        table.vec[t] = table.vec[t] && aligned_to(table.col[c][t], 16);
      }
      table.copy[t] = compute_copy ? reinterpret_cast<__nv_bfloat16*>(compute_copy[first + t]) : nullptr;
      table.vec[t] = table.vec[t] && aligned_to(table.copy[t], 8);
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
  __device__ void operator()(const TensorTable<4>& x, int t, int64_t i, int n, bool vec) const {
    float param[kPack], grad[kPack], m[kPack], v[kPack];
    load_pack(param, x.col[0][t], i, n, vec);
    load_pack(grad, x.col[1][t], i, n, vec);
    load_pack(m, x.col[2][t], i, n, vec);
    load_pack(v, x.col[3][t], i, n, vec);
#pragma unroll
    for (int k = 0; k < kPack; k++) {
      const float g = scale(grad[k]);
      m[k] = b1 * m[k] + (1.0f - b1) * g;         // first moment
      v[k] = b2 * v[k] + (1.0f - b2) * g * g;     // second moment
      const float p = param[k] * decay;           // decoupled weight decay
      // lr * (m / bc1) / (sqrt(v / bc2) + eps)
      param[k] = p - step_size * m[k] / (sqrtf(v[k]) * inv_sqrt_bc2 + eps);
    }
    store_pack(x.col[2][t], i, m, n, vec);
    store_pack(x.col[3][t], i, v, n, vec);
    store_pack(x.col[0][t], i, param, n, vec);
    if (x.copy[t]) store_copy_pack(x.copy[t], i, param, n, vec);
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
  __device__ void operator()(const TensorTable<3>& x, int t, int64_t i, int n, bool vec) const {
    float buf[kPack], grad[kPack], update[kPack];
    load_pack(buf, x.col[0][t], i, n, vec);
    load_pack(grad, x.col[2][t], i, n, vec);
#pragma unroll
    for (int k = 0; k < kPack; k++) {
      const float g = scale(grad[k]);
      buf[k] = mu * buf[k] + g;
      update[k] = nesterov ? g + mu * buf[k] : buf[k];
    }
    store_pack(x.col[0][t], i, buf, n, vec);
    store_pack(x.col[1][t], i, update, n, vec);
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
  __device__ void operator()(const TensorTable<2>& x, int t, int64_t i, int n, bool vec) const {
    float param[kPack], ortho[kPack];
    load_pack(param, x.col[0][t], i, n, vec);
    load_pack(ortho, x.col[1][t], i, n, vec);
#pragma unroll
    for (int k = 0; k < kPack; k++) {
      const float p = param[k] * decay;  // decoupled weight decay
      param[k] = p - step * ortho[k];
    }
    store_pack(x.col[0][t], i, param, n, vec);
    if (x.copy[t]) store_copy_pack(x.copy[t], i, param, n, vec);
  }
};

// ---- Newton-Schulz. A call takes up to kNsGroups batches (shape groups) at a time: the norms of
// all their matrices in two launches, then per quintic step three products a group. Groups of
// small matrices (both sides <= kNsSmallSide) run each product of all of them in one launch of
// small_products_kernel, whose tiles are few enough that a cuBLAS call a group would spend its
// time on launches; larger groups run their products on cuBLASLt.
constexpr int kNsGroups = 16;       // shape groups a launch takes
constexpr int64_t kNsSmallSide = kNewtonSchulzSmallSide;  // the largest side small_products_kernel takes
constexpr int kNsTile = 32;         // its output tile (kNsTile x kNsTile) and k slab
constexpr int kNsThreads = 256;     // its threads: each 2 x 2 outputs of the tile

// The matrices of up to kNsGroups batches, as the norm kernels take them: group i has n[i]
// elements a matrix and matrices first[i] .. first[i + 1] - 1 of the launch, g[i] and x[i]
// pointing at its first.
struct NsMatrices {
  const float* g[kNsGroups];
  float* x[kNsGroups];
  int64_t n[kNsGroups];
  int first[kNsGroups + 1];
  int count;
};

// The group of the launch's matrix m.
__device__ int group_of_matrix(const NsMatrices& t, int m) {
  int i = 0;
  while (i + 1 < t.count && t.first[i + 1] <= m) i++;
  return i;
}

// partial: (matrices, kNormBlocks); grid (kNormBlocks, matrices). Sums of g^2 in double.
__global__ void sq_norm_partials_kernel(double* partial, const __grid_constant__ NsMatrices t) {
  __shared__ double buf[kThreads];
  const int i = group_of_matrix(t, blockIdx.y);
  const int64_t n = t.n[i];
  const float* gm = t.g[i] + (blockIdx.y - t.first[i]) * n;  // gm: (n), this block's matrix
  double acc = 0;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
    acc += static_cast<double>(gm[e]) * gm[e];
  buf[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.y * kNormBlocks + blockIdx.x] = buf[0];
}

// partial: (matrices, kNormBlocks); grid (blocks, matrices). x = g / (||g||_F + 1e-7) a matrix.
__global__ void normalize_kernel(const __grid_constant__ NsMatrices t, const double* partial) {
  double sq = 0;
  for (int k = 0; k < kNormBlocks; k++) sq += partial[blockIdx.y * kNormBlocks + k];  // fixed order
  const float scale = static_cast<float>(1.0 / (sqrt(sq) + 1e-7));
  const int i = group_of_matrix(t, blockIdx.y);
  const int64_t n = t.n[i], base = (blockIdx.y - t.first[i]) * n;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
    t.x[i][base + e] = t.g[i][base + e] * scale;
}

// One product for every matrix of a batch: row-major fp32 D = alpha op(A) op(B) + beta C (C
// read only when beta != 0; it may be D), matrix m at a + m * stride_a and so on.
struct Product {
  const float *a, *b, *c;
  float* d;
  int64_t stride_a, stride_b, stride_cd;
  int batch, M, N, K;
  bool trans_a, trans_b;
  float alpha, beta;
};

// The products of one launch of small_products_kernel: product i owns blocks first[i] ..
// first[i + 1] - 1, a block one kNsTile x kNsTile tile of D of one matrix.
struct SmallProducts {
  Product p[kNsGroups];
  int first[kNsGroups + 1];
  int count;
};

__host__ __device__ inline int tiles_of(int rows) { return (rows + kNsTile - 1) / kNsTile; }

// A thread's share of one k slab of both operands: element e = threadIdx.x + kNsThreads * r of
// the slab, along = e % kNsTile running along each operand's contiguous side.
constexpr int kNsSlabShare = kNsTile * kNsTile / kNsThreads;
struct Slab {
  float a[kNsSlabShare], b[kNsSlabShare];

  // The slab at k0 of op(A) rows i0.. and op(B) columns j0.., zeros outside the matrices.
  __device__ void load(const Product& p, const float* A, const float* B, int i0, int j0, int k0) {
#pragma unroll
    for (int r = 0; r < kNsSlabShare; r++) {
      const int e = threadIdx.x + kNsThreads * r, along = e % kNsTile, across = e / kNsTile;
      const int ai = i0 + (p.trans_a ? along : across), ak = k0 + (p.trans_a ? across : along);
      a[r] = ai < p.M && ak < p.K ? A[p.trans_a ? int64_t(ak) * p.M + ai : int64_t(ai) * p.K + ak] : 0.f;
      const int bj = j0 + (p.trans_b ? across : along), bk = k0 + (p.trans_b ? along : across);
      b[r] = bj < p.N && bk < p.K ? B[p.trans_b ? int64_t(bj) * p.K + bk : int64_t(bk) * p.N + bj] : 0.f;
    }
  }
  // Into as[k][i] = op(A)(i0 + i, k0 + k) and bs[k][j] = op(B)(k0 + k, j0 + j).
  __device__ void store(const Product& p, float (*as)[kNsTile + 1], float (*bs)[kNsTile + 1]) const {
#pragma unroll
    for (int r = 0; r < kNsSlabShare; r++) {
      const int e = threadIdx.x + kNsThreads * r, along = e % kNsTile, across = e / kNsTile;
      as[p.trans_a ? across : along][p.trans_a ? along : across] = a[r];
      bs[p.trans_b ? along : across][p.trans_b ? across : along] = b[r];
    }
  }
};

// Each block: one output tile, k in slabs of kNsTile through shared memory, the next slab's loads
// in flight while the current one's products run; every output summed over k in order
// (deterministic).
__global__ void __launch_bounds__(kNsThreads) small_products_kernel(const __grid_constant__ SmallProducts t) {
  __shared__ float as[kNsTile][kNsTile + 1], bs[kNsTile][kNsTile + 1];
  int i = 0;
  while (i + 1 < t.count && t.first[i + 1] <= int(blockIdx.x)) i++;
  const Product& p = t.p[i];
  const int tiles_n = tiles_of(p.N), per_matrix = tiles_of(p.M) * tiles_n;
  const int local = blockIdx.x - t.first[i], m = local / per_matrix, tile = local % per_matrix;
  const int i0 = tile / tiles_n * kNsTile, j0 = tile % tiles_n * kNsTile;
  const float* A = p.a + m * p.stride_a;  // A: (M, K), or (K, M) when trans_a
  const float* B = p.b + m * p.stride_b;  // B: (K, N), or (N, K) when trans_b
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;  // outputs (ty + 16 r, tx + 16 c), r, c < 2
  float acc[2][2] = {};
  Slab slab;
  slab.load(p, A, B, i0, j0, 0);
  for (int k0 = 0; k0 < p.K; k0 += kNsTile) {
    slab.store(p, as, bs);
    __syncthreads();
    if (k0 + kNsTile < p.K) slab.load(p, A, B, i0, j0, k0 + kNsTile);
#pragma unroll 8
    for (int k = 0; k < kNsTile; k++)
#pragma unroll
      for (int r = 0; r < 2; r++)
#pragma unroll
        for (int c = 0; c < 2; c++) acc[r][c] = fmaf(as[k][ty + 16 * r], bs[k][tx + 16 * c], acc[r][c]);
    __syncthreads();
  }
  const int64_t base = m * p.stride_cd;
#pragma unroll
  for (int r = 0; r < 2; r++)
#pragma unroll
    for (int c = 0; c < 2; c++) {
      const int gi = i0 + ty + 16 * r, gj = j0 + tx + 16 * c;
      if (gi >= p.M || gj >= p.N) continue;
      const int64_t at = base + int64_t(gi) * p.N + gj;
      p.d[at] = p.beta != 0.f ? p.alpha * acc[r][c] + p.beta * p.c[at] : p.alpha * acc[r][c];
    }
}

// One launch of small_products_kernel for products[0 .. count).
void launch_small_products(const Product* products, int count) {
  SmallProducts t;
  t.count = count;
  t.first[0] = 0;
  for (int i = 0; i < count; i++) {
    t.p[i] = products[i];
    t.first[i + 1] = t.first[i] + products[i].batch * tiles_of(products[i].M) * tiles_of(products[i].N);
  }
  small_products_kernel<<<static_cast<unsigned>(t.first[count]), kNsThreads>>>(t);
  CUDA_CHECK_LAUNCH();
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

namespace {

// A batch's buffers through the quintic steps: A, Bm (batch, small, small) and X, Y (batch, rows,
// cols) taking turns as a step's input and output; X starts where an even number of turns leaves
// the last step's output: in out.
struct NsState {
  NewtonSchulzBatch batch;
  int64_t n, small;
  bool tall;  // rows > cols: A = X^T X and products multiply X on the right
  FloatScratch A, Bm, Y;
  float *X, *Ybuf;
  NsState(const NewtonSchulzBatch& b, int steps)
      : batch(b), n(b.rows * b.cols), small(std::min(b.rows, b.cols)), tall(b.rows > b.cols), A(b.batch * small * small),
        Bm(b.batch * small * small), Y(b.batch * n), X(steps % 2 ? Y.get() : b.out), Ybuf(steps % 2 ? b.out : Y.get()) {}
  bool is_small() const { return batch.rows <= kNsSmallSide && batch.cols <= kNsSmallSide; }
  // The step's products in order, with (a, b, c) = (3.4445, -4.7750, 2.0315):
  //   0: A = X^T X (tall) or X X^T;  1: Bm = b A + c A A;  2: Y = a X + X Bm (tall) or a X + Bm X.
  Product product(int which) const {
    const int batch_count = static_cast<int>(batch.batch), rows = static_cast<int>(batch.rows),
              cols = static_cast<int>(batch.cols), s = static_cast<int>(small);
    const int64_t gram = small * small;
    constexpr float a = 3.4445f, b = -4.7750f, c = 2.0315f;
    if (which == 0)
      return tall ? Product{X, X, nullptr, A.get(), n, n, gram, batch_count, s, s, rows, true, false, 1.f, 0.f}
                  : Product{X, X, nullptr, A.get(), n, n, gram, batch_count, s, s, cols, false, true, 1.f, 0.f};
    if (which == 1) return Product{A.get(), A.get(), A.get(), Bm.get(), gram, gram, gram, batch_count, s, s, s, false, false, c, b};
    return tall ? Product{X, Bm.get(), X, Ybuf, n, gram, n, batch_count, rows, cols, cols, false, false, 1.f, a}
                : Product{Bm.get(), X, X, Ybuf, gram, n, n, batch_count, rows, cols, rows, false, false, 1.f, a};
  }
};

// Up to kNsGroups batches: pass 1 the norms, pass 2 the steps.
void newton_schulz_groups(const NewtonSchulzBatch* batches, int count, int steps) {
  std::vector<std::unique_ptr<NsState>> states;
  NsMatrices t{};
  t.count = count;
  int64_t largest = 0;
  for (int i = 0; i < count; i++) {
    states.push_back(std::make_unique<NsState>(batches[i], steps));
    t.g[i] = batches[i].g, t.x[i] = states[i]->X, t.n[i] = states[i]->n;
    t.first[i + 1] = t.first[i] + static_cast<int>(batches[i].batch);
    largest = std::max(largest, states[i]->n);
  }
  const int matrices = t.first[count];
  HLA_CHECK(matrices <= 65535, "newton_schulz: ", matrices, " matrices in one call exceed the grid's y limit 65535");
  // pass 1: X = g / (||g||_F + 1e-7), per matrix
  Scratch<double> partial(int64_t(matrices) * kNormBlocks);  // (matrices, kNormBlocks)
  sq_norm_partials_kernel<<<dim3(kNormBlocks, static_cast<unsigned>(matrices)), kThreads>>>(partial.get(), t);
  CUDA_CHECK_LAUNCH();
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((largest + kThreads - 1) / kThreads, 1024));
  normalize_kernel<<<dim3(blocks, static_cast<unsigned>(matrices)), kThreads>>>(t, partial.get());
  CUDA_CHECK_LAUNCH();
  // pass 2: the quintic steps: each product of the small groups in one launch, of the others on cuBLASLt
  for (int s = 0; s < steps; s++) {
    for (int which = 0; which < 3; which++) {
      std::vector<Product> small;
      for (const auto& st : states) {
        const Product p = st->product(which);
        if (st->is_small()) small.push_back(p);
        else gemm_add(p.d, p.beta != 0.f ? p.c : p.d, p.a, p.b, p.M, p.N, p.K, p.trans_a, p.trans_b, p.alpha, p.beta,
                      p.batch, p.stride_a, p.stride_b, p.stride_cd);
      }
      if (!small.empty()) launch_small_products(small.data(), static_cast<int>(small.size()));
    }
    for (auto& st : states) std::swap(st->X, st->Ybuf);  // X = Y
  }
}

}  // namespace

void newton_schulz(const NewtonSchulzBatch* batches, int count, int steps) {
  std::vector<NewtonSchulzBatch> live;
  for (int i = 0; i < count; i++)
    if (batches[i].batch > 0 && batches[i].rows * batches[i].cols > 0) live.push_back(batches[i]);
  for (size_t first = 0; first < live.size(); first += kNsGroups)
    newton_schulz_groups(live.data() + first, static_cast<int>(std::min<size_t>(kNsGroups, live.size() - first)), steps);
}

}  // namespace hla::cuda
