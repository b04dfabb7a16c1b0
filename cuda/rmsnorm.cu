// RMSNorm forward and backward on the GPU (mixers.md 2.1).
//
// A row of C is read as V = C / W vectors of W elements: W = 8 bf16 or 4 fp32 (16-byte loads)
// when C is a multiple of that and the pointers are aligned, else W = 1. A block of
// (row_threads, rows) threads takes `rows` rows at once; lane x of a row holds the vectors
// x, x + row_threads, ... (at most kSlots of them) in registers, so pass 2 reads nothing again;
// C up to 1024 * max_slots(W) * W: 16384 for bf16 vectors, else 8192.
//
// Forward: pass 1 sums x^2 over the row (row reduction), pass 2 writes y = x * rstd * w. The
// residual stream's add fused before it (add_rmsnorm_forward) reads x and h in pass 1 and writes
// r = x + h, rounded to T as the add kernel would, and normalises that rounded r: the results
// are the add's and the norm's bit for bit, without the norm reading r back.
// Backward: dx needs one more row reduction, mean(x_hat * dy * w). dw = sum_rows(dy * x_hat)
// is a column sum over all N rows: each block keeps fp32 partial sums in shared memory (one set
// per block row, each lane its own columns, stored slot- and element-major so that a warp's
// lanes touch consecutive words: no bank conflicts), adds them in row order at the end and writes one
// (C) row of a (blocks, C) scratch buffer; write_column_sums (cuda/reduce.cuh) writes their
// column sums into dw. No atomics, so dw is deterministic. Either gradient may be added into its
// buffer instead (a gradient sum, autograd/var.h): dx into the sum of x's other uses (the residual
// stream: no separate add kernel), or beside another sum (add_rmsnorm: dr = dsum + the norm's dx),
// dw in fp32 into an fp32 master's gradient (no cast kernel).
#include "cuda/reduce.cuh"
#include "cuda/rmsnorm.h"

namespace hla::cuda {
namespace {

constexpr int kBlockThreads = 256;             // threads of a block, unless one row needs more
constexpr int kMaxRowThreads = 1024;           // threads of one row, at most
constexpr int kMaxRows = kBlockThreads / 32;   // rows of a block, at most
// Vectors a lane holds, at most (no spills at 1024 threads): 2 of 16 bytes or 8 single elements.
constexpr int max_slots(int W) { return W == 1 ? 8 : 2; }

// How a row of C is spread: W elements a vector, row_threads lanes holding `slots` vectors each.
struct RowLayout {
  int W, row_threads, rows, slots;
};

RowLayout row_layout(int64_t C, int vec_width, const char* op) {
  const int W = C % vec_width == 0 ? vec_width : 1;
  const int64_t V = C / W;
  const int row_threads = static_cast<int>(std::min<int64_t>(kMaxRowThreads, (V + 31) / 32 * 32));
  const int64_t slots = (V + row_threads - 1) / row_threads;
  HLA_CHECK(slots <= max_slots(W), op, ": C = ", C, " is too wide (at most ", kMaxRowThreads * max_slots(W) * W,
            " for this dtype)");
  return {W, row_threads, std::max(1, kBlockThreads / row_threads), slots == 1 ? 1 : max_slots(W)};
}

// Calls fn(Width<W>{}, Width<kSlots>{}) for the layout's W (kVecWidth<T> or 1) and slots (1 or
// max_slots(W)).
template <class T, class Fn>
void dispatch_layout(const RowLayout& layout, Fn&& fn) {
  auto with_slots = [&](auto width) {
    if (layout.slots == 1) fn(width, Width<1>{});
    else fn(width, Width<max_slots(decltype(width)::value)>{});
  };
  if (layout.W == 1) with_slots(Width<1>{});
  else with_slots(Width<kVecWidth<T>>{});
}

// y, x: (N, C), w: (C), rstd: (N); block (row_threads, rows), grid ceil(N / rows). kAdd: the row
// normalised is r = x + h (h: (N, C)), written to sum (N, C).
template <class T, int W, int kSlots, bool kAdd>
__global__ void __launch_bounds__(kMaxRowThreads) rmsnorm_forward_kernel(T* y, T* sum, float* rstd, const T* x,
                                                                         const T* h, const T* w, int64_t N, int C,
                                                                         float eps) {
  __shared__ float scratch[kMaxRows][32];
  const int64_t n = blockIdx.x * (int64_t)blockDim.y + threadIdx.y;
  const bool valid = n < N;  // the last block's rows past N only join the reduction
  const int V = C / W;
  Vec<T, W> xv[kSlots];  // this lane's vectors of row n (of r = x + h with kAdd)
  // pass 1: mean(x^2)
  float ss = 0;
#pragma unroll
  for (int k = 0; k < kSlots; k++) {
    const int j = threadIdx.x + k * blockDim.x;
    if (!valid || j >= V) continue;
    xv[k] = load_vec<W>(x + n * C + j * W);
    if constexpr (kAdd) {  // r = x + h in fp32, rounded to T
      float r[W], hf[W];
      to_floats(r, xv[k]);
      load_floats(hf, h + n * C + j * W);
#pragma unroll
      for (int e = 0; e < W; e++) xv[k].v[e] = from_float<T>(r[e] + hf[e]);
      *reinterpret_cast<Vec<T, W>*>(sum + n * C + j * W) = xv[k];
    }
    float f[W];
    to_floats(f, xv[k]);
#pragma unroll
    for (int e = 0; e < W; e++) ss += f[e] * f[e];
  }
  const float r = rsqrtf(block_sum(ss, scratch[threadIdx.y]) / C + eps);  // rstd = 1/sqrt(mean(x^2) + eps)
  if (!valid) return;
  if (threadIdx.x == 0) rstd[n] = r;
  // pass 2: y = x * rstd * w
#pragma unroll
  for (int k = 0; k < kSlots; k++) {
    const int j = threadIdx.x + k * blockDim.x;
    if (j >= V) continue;
    float f[W], wf[W];
    to_floats(f, xv[k]);
    load_floats(wf, w + j * W);
#pragma unroll
    for (int e = 0; e < W; e++) f[e] = f[e] * r * wf[e];
    store_floats(y + n * C + j * W, f);
  }
}

// dx, dy, x: (N, C), w: (C), rstd: (N), dw_partial: (gridDim.x, C) fp32; block (row_threads, rows)
// takes the rows blockIdx.x * rows + threadIdx.y + i * gridDim.x * rows. dx written, or not wanted
// (null); dx_sum: added into dx when not null (N, C), dx itself or another buffer.
template <class T, int W, int kSlots>
__global__ void __launch_bounds__(kMaxRowThreads) rmsnorm_backward_kernel(T* dx, const T* dx_sum, float* dw_partial,
                                                                          const T* dy, const T* x, const T* w,
                                                                          const float* rstd, int64_t N, int C) {
  // dw_acc: (blockDim.y, kSlots, W, blockDim.x) each block row's share of dw; lane x's slot k,
  // element e is column (x + k blockDim.x) W + e
  extern __shared__ float dw_acc[];
  __shared__ float scratch[kMaxRows][32];
  const int V = C / W, lanes = blockDim.x, share = kSlots * W * lanes;
  float* acc = dw_acc + threadIdx.y * share + threadIdx.x;  // acc[(k W + e) lanes]: this lane's columns
#pragma unroll
  for (int k = 0; k < kSlots * W; k++) acc[k * lanes] = 0;
  const int64_t stride = (int64_t)gridDim.x * blockDim.y;
  for (int64_t n = blockIdx.x * (int64_t)blockDim.y + threadIdx.y; n - threadIdx.y < N; n += stride) {
    const bool valid = n < N;  // rows past N only join the reduction
    const float r = valid ? rstd[n] : 0.0f;
    Vec<T, W> xv[kSlots], gv[kSlots];  // this lane's vectors of x and dy of row n
    // pass 1: sum(x_hat * dy * w), x_hat = x * rstd; dw += dy * x_hat
    float dot = 0;
#pragma unroll
    for (int k = 0; k < kSlots; k++) {
      const int j = threadIdx.x + k * blockDim.x;
      if (!valid || j >= V) continue;
      xv[k] = load_vec<W>(x + n * C + j * W);
      gv[k] = load_vec<W>(dy + n * C + j * W);
      float xf[W], g[W], wf[W];
      to_floats(xf, xv[k]);
      to_floats(g, gv[k]);
      load_floats(wf, w + j * W);
#pragma unroll
      for (int e = 0; e < W; e++) {
        const float xhat = xf[e] * r;
        dot += xhat * g[e] * wf[e];
        acc[(k * W + e) * lanes] += g[e] * xhat;  // y = x_hat * w  =>  dw = sum_rows dy * x_hat
      }
    }
    const float mean_dot = block_sum(dot, scratch[threadIdx.y]) / C;
    // pass 2: dx = rstd * (dy w - x_hat * mean(x_hat dy w)), plus dx_sum when given
#pragma unroll
    for (int k = 0; k < kSlots; k++) {
      const int j = threadIdx.x + k * blockDim.x;
      if (!valid || j >= V || !dx) continue;
      float xf[W], g[W], wf[W];
      to_floats(xf, xv[k]);
      to_floats(g, gv[k]);
      load_floats(wf, w + j * W);
#pragma unroll
      for (int e = 0; e < W; e++) g[e] = r * (g[e] * wf[e] - xf[e] * r * mean_dot);
      if (dx_sum) {
        float sum[W];
        load_floats(sum, dx_sum + n * C + j * W);
#pragma unroll
        for (int e = 0; e < W; e++) g[e] += sum[e];
      }
      store_floats(dx + n * C + j * W, g);
    }
  }
  // the block's rows' shares added in row order: dw_partial[blockIdx.x] = sum_y dw_acc[y]
  __syncthreads();
  if (threadIdx.y != 0) return;
  for (int k = 0; k < kSlots; k++) {
    const int j = threadIdx.x + k * blockDim.x;
    if (j >= V) continue;
    for (int e = 0; e < W; e++) {
      float s = 0;
      for (int y = 0; y < blockDim.y; y++) s += dw_acc[y * share + (k * W + e) * lanes + threadIdx.x];
      dw_partial[blockIdx.x * (int64_t)C + j * W + e] = s;
    }
  }
}

}  // namespace

namespace {

// The forward of rmsnorm_forward (sum and h null) and of add_rmsnorm_forward.
void launch_forward(void* y, void* sum, float* rstd, const void* x, const void* h, const void* w, int64_t N, int64_t C,
                    double eps, DType dtype, const char* op) {
  if (N == 0) return;
  dispatch_storage(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    const bool aligned = aligned16(y) && aligned16(sum) && aligned16(x) && aligned16(h) && aligned16(w);  // null is
    const RowLayout layout = row_layout(C, aligned ? kVecWidth<T> : 1, op);
    dispatch_layout<T>(layout, [&](auto width, auto slots) {
      const auto blocks = static_cast<unsigned>((N + layout.rows - 1) / layout.rows);
      auto launch = [&](auto kernel) {
        kernel<<<blocks, dim3(layout.row_threads, layout.rows)>>>(
            static_cast<T*>(y), static_cast<T*>(sum), rstd, static_cast<const T*>(x), static_cast<const T*>(h),
            static_cast<const T*>(w), N, static_cast<int>(C), static_cast<float>(eps));
      };
      constexpr int kW = decltype(width)::value, kS = decltype(slots)::value;
      if (h) launch(rmsnorm_forward_kernel<T, kW, kS, true>);
      else launch(rmsnorm_forward_kernel<T, kW, kS, false>);
    });
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rmsnorm_forward(void* y, float* rstd, const void* x, const void* w, int64_t N, int64_t C, double eps,
                     DType dtype) {
  launch_forward(y, nullptr, rstd, x, nullptr, w, N, C, eps, dtype, "rmsnorm_forward");
}

void add_rmsnorm_forward(void* sum, void* y, float* rstd, const void* x, const void* h, const void* w, int64_t N,
                         int64_t C, double eps, DType dtype) {
  launch_forward(y, sum, rstd, x, h, w, N, C, eps, dtype, "add_rmsnorm_forward");
}

void rmsnorm_backward(void* dx, const void* dx_sum, void* dw, bool add_dw, const void* dy, const void* x,
                      const void* w, const float* rstd, int64_t N, int64_t C, DType dtype, DType dw_dtype) {
  HLA_CHECK(dw_dtype == dtype || dw_dtype == DType::F32, "rmsnorm_backward: dw in ", dtype_name(dw_dtype), " for ",
            dtype_name(dtype), " x (it takes x's dtype or F32)");
  if (N == 0) {  // no rows: dw = 0, or the sum so far
    if (!add_dw) write_zeros(dw, C, dw_dtype);
    return;
  }
  dispatch_storage(dtype, "rmsnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    const bool aligned =  // null is aligned
        aligned16(dx) && aligned16(dx_sum) && aligned16(dy) && aligned16(x) && aligned16(w);
    const RowLayout layout = row_layout(C, aligned ? kVecWidth<T> : 1, "rmsnorm_backward");
    const size_t smem = sizeof(float) * layout.rows * layout.slots * layout.W * layout.row_threads;  // dw_acc
    HLA_CHECK(smem <= 200 * 1024, "rmsnorm_backward: C = ", C, " is too wide for the shared-memory dw partials");
    dispatch_layout<T>(layout, [&](auto width, auto slots) {
      auto kernel = rmsnorm_backward_kernel<T, decltype(width)::value, decltype(slots)::value>;
      const int threads = layout.row_threads * layout.rows;
      if (smem > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      int per_sm = 0;  // resident blocks per SM: enough rows in flight to cover the memory latency
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
      const int blocks = static_cast<int>(
          std::min<int64_t>((N + layout.rows - 1) / layout.rows, std::max(1, per_sm) * (int64_t)sm_count()));
      FloatScratch partial(blocks * C);  // partial: (blocks, C)
      kernel<<<blocks, dim3(layout.row_threads, layout.rows), smem>>>(
          static_cast<T*>(dx), static_cast<const T*>(dx_sum), partial.get(), static_cast<const T*>(dy),
          static_cast<const T*>(x), static_cast<const T*>(w), rstd, N, static_cast<int>(C));
      CUDA_CHECK_LAUNCH();
      if (!dw) return;
      dispatch_storage(dw_dtype, "rmsnorm_backward", [&](auto dw_tag) {
        write_column_sums(static_cast<decltype(dw_tag)*>(dw), partial.get(), blocks, C, add_dw);
      });
    });
  });
}

}  // namespace hla::cuda
