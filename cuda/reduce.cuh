// Deterministic two-pass sums for parameter gradients that add up over many rows (the norms'
// dw and db, short_conv's dw, lerp's dmu, the gates' dt_bias / A_log, the broadcasts' ds,
// ddlerp's dbias, rwkv6's du).
//
// Pass 1 (in the op's own kernel, or column_partial_sums_kernel here) splits the rows into fixed
// contiguous chunks and writes one fp32 partial sum per (chunk, column). Pass 2 adds the
// partials in a fixed order and WRITES the sum into the output (the gradient contract of every
// op: the caller's buffer may hold anything), or adds it into the output when asked (a gradient
// sum of autograd/var.h: gradient_sum; the output's dtype may then be the wider F32 of a master
// weight's gradient). No atomics: the same inputs give the same bits.
#pragma once
#include "cuda/common.cuh"

namespace hla::cuda {

// `rows` split into `count` contiguous chunks of `per_chunk` rows (the last may be shorter);
// count >= 1 even for rows == 0, so a pass-1 grid is never empty.
struct RowChunks {
  int64_t per_chunk;
  int count;
};
inline RowChunks split_rows(int64_t rows, int max_chunks = 256) {
  int64_t per_chunk = std::max<int64_t>(1, (rows + max_chunks - 1) / max_chunks);
  int count = static_cast<int>(std::max<int64_t>(1, (rows + per_chunk - 1) / per_chunk));
  return {per_chunk, count};
}

// out: (n) = 0, for a gradient summed over no rows (an empty batch); out null = not wanted.
inline void write_zeros(void* out, int64_t n, DType dtype) {
  if (out) memset_zero(out, static_cast<size_t>(n) * dtype_size(dtype));
}

// Pass 1 for a matrix a: (rows, cols): partial[chunk, c] = sum of a[r, c] over the chunk's rows.
// grid (chunks, ceil(cols / blockDim.x)); one thread per column, so loads are coalesced.
template <class T>
__global__ void column_partial_sums_kernel(float* partial, const T* a, int64_t rows, int64_t cols,
                                           int64_t per_chunk) {
  const int64_t c = blockIdx.y * (int64_t)blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = blockIdx.x * per_chunk, r1 = std::min(rows, r0 + per_chunk);
  float acc = 0;
  for (int64_t r = r0; r < r1; r++) acc += to_float(a[r * cols + c]);
  partial[blockIdx.x * cols + c] = acc;
}

// out[c] = s, or out[c] + s when `add` (in fp32, rounded once).
template <class T>
__device__ void write_or_add(T* out, int64_t c, float s, bool add) {
  out[c] = from_float<T>(add ? to_float(out[c]) + s : s);
}

// Pass 2: out[c] (+)= sum over chunks b of partial[b, c]; partial: (chunks, cols).
// Block (32, kColumnSumRows): lane x takes column c, row y the chunks y, y + kColumnSumRows, ...
// (coalesced rows of 32 columns); row 0 then adds the kColumnSumRows sums in order.
constexpr int kColumnSumRows = 32;
template <class T>
__global__ void write_column_sums_kernel(T* out, const float* partial, int chunks, int64_t cols, bool add) {
  __shared__ float sums[kColumnSumRows][33];  // sums: (rows, 32 columns), padded against bank conflicts
  const int64_t c = blockIdx.x * 32ll + threadIdx.x;
  float s = 0;
  if (c < cols)
#pragma unroll 4
    for (int b = threadIdx.y; b < chunks; b += kColumnSumRows) s += partial[b * cols + c];
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  for (int y = 1; y < kColumnSumRows; y++) s += sums[y][threadIdx.x];
  write_or_add(out, c, s, add);
}

// Pass 2 with groups of columns: out[g] = sum over chunks b and columns c in [g*group, (g+1)*group)
// of partial[b, c]; partial: (chunks, groups * group). One warp per output, fixed lane order.
template <class T>
__global__ void write_group_sums_kernel(T* out, const float* partial, int chunks, int64_t groups, int64_t group) {
  const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= groups) return;
  const int64_t items = chunks * group;
  float s = 0;
  for (int64_t k = lane; k < items; k += 32) {
    const int64_t b = k / group, c = warp * group + k % group;
    s += partial[b * groups * group + c];
  }
  s = warp_sum(s);
  if (lane == 0) out[warp] = from_float<T>(s);
}

// Pass 2 for at most kColumnSumRows chunks (e.g. decay attention's two key blocks at dk = 256,
// over millions of columns): one thread a column adds the chunks in order, the order and so the
// bits of write_column_sums_kernel, whose rows would each hold one chunk (and 32 threads a column
// would mostly idle).
template <class T>
__global__ void write_few_column_sums_kernel(T* out, const float* partial, int chunks, int64_t cols, bool add) {
  HLA_GRID_STRIDE(c, cols) {
    float s = 0;
    for (int b = 0; b < chunks; b++) s += partial[b * cols + c];
    write_or_add(out, c, s, add);
  }
}

// out[c] = the column sums of partial, or out[c] + them when `add`.
template <class T>
void write_column_sums(T* out, const float* partial, int chunks, int64_t cols, bool add = false) {
  if (cols == 0) return;
  if (chunks <= kColumnSumRows) {
    write_few_column_sums_kernel<T><<<grid_1d(cols), 256>>>(out, partial, chunks, cols, add);
  } else {
    const auto blocks = static_cast<unsigned>((cols + 31) / 32);
    write_column_sums_kernel<T><<<blocks, dim3(32, kColumnSumRows)>>>(out, partial, chunks, cols, add);
  }
  CUDA_CHECK_LAUNCH();
}

template <class T>
void write_group_sums(T* out, const float* partial, int chunks, int64_t groups, int64_t group) {
  if (groups == 0) return;
  const int warps_per_block = 8;
  const auto blocks = static_cast<unsigned>((groups + warps_per_block - 1) / warps_per_block);
  write_group_sums_kernel<T><<<blocks, 32 * warps_per_block>>>(out, partial, chunks, groups, group);
  CUDA_CHECK_LAUNCH();
}

// out[c] = sum over rows of a[r, c] for an fp32 matrix a: (rows, cols), both passes.
template <class T>
void write_fp32_column_sums(T* out, const float* a, int64_t rows, int64_t cols) {
  if (cols == 0) return;
  const RowChunks chunks = split_rows(rows);
  FloatScratch partial(chunks.count * cols);  // partial: (chunks, cols)
  const dim3 grid(chunks.count, static_cast<unsigned>((cols + 255) / 256));
  column_partial_sums_kernel<float><<<grid, 256>>>(partial.get(), a, rows, cols, chunks.per_chunk);
  CUDA_CHECK_LAUNCH();
  write_column_sums(out, partial.get(), chunks.count, cols);
}

}  // namespace hla::cuda
