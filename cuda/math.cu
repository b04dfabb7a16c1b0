// cuBLAS GEMMs and the small elementwise / reduction kernels behind tensor/math.h.
// GEMMs run bf16 or fp32 inputs with fp32 accumulation (CUBLAS_COMPUTE_32F); bf16 inputs may
// write an fp32 output (cuBLAS's bf16 x bf16 -> fp32 GemmEx). gemm_add reads C and writes D,
// the same buffer or another, through cuBLASLt (cuBLAS's own GEMMs update C in place), so a
// caller needs no copy of C first.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/math.h"
#include "cuda/runtime.h"

#define CUBLAS_CHECK(expr)                                                             \
  do {                                                                                 \
    cublasStatus_t st_ = (expr);                                                       \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::hla::fail(__FILE__, ":", __LINE__, ": cuBLAS error ", cublasGetStatusString(st_), \
                  " in " #expr);                                                       \
  } while (0)

namespace hla::cuda {
namespace {

// cuBLAS's workspace: 32 MiB, its recommendation for Hopper. hla's own, allocated once and never
// freed, so a GEMM captured in a CUDA graph (cuda/graph.h) uses the same fixed buffer at every
// replay instead of workspace cuBLAS would allocate during the capture.
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

void* workspace() {
  static void* w = device_alloc(kCublasWorkspaceBytes);
  return w;
}

cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t x;
    CUBLAS_CHECK(cublasCreate(&x));
    CUBLAS_CHECK(cublasSetStream(x, cudaStreamPerThread));  // hla's stream (cuda/graph.h), not the legacy one
    // after SetStream, which resets the workspace to cuBLAS's default pool
    CUBLAS_CHECK(cublasSetWorkspace(x, workspace(), kCublasWorkspaceBytes));
    return x;
  }();
  return h;
}

// A cuBLASLt plan for one fp32 gemm_add shape: the descriptors and the heuristic's algorithm,
// made once per shape (building them costs host time every eager step would pay again).
struct LtPlan {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c;  // column-major views: a = the caller's B, b = the caller's A (see gemm_add)
  cublasLtMatmulAlgo_t algo;
};

cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t x;
    CUBLAS_CHECK(cublasLtCreate(&x));
    return x;
  }();
  return h;
}

// A (rows, cols) column-major fp32 layout with leading dimension rows, batch_count of them at stride.
cublasLtMatrixLayout_t lt_layout(int64_t rows, int64_t cols, int64_t batch_count, int64_t stride) {
  cublasLtMatrixLayout_t l;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, rows, cols, rows));
  const int32_t count = static_cast<int32_t>(batch_count);
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  return l;
}

// out, a, b: (n); each thread a group of W elements (common.cuh's map_pairs).
template <class T, int W>
__global__ void binary_kernel(T* out, const T* a, const T* b, int64_t n, Binary op) {
  map_pairs<W>(out, a, b, n, [op](float x, float y) {
    return op == Binary::Add ? x + y : op == Binary::Sub ? x - y : x * y;
  });
}

// y, x: (n); y = beta * y + alpha * x
template <class T, int W>
__global__ void axpby_kernel(T* y, float beta, const T* x, float alpha, int64_t n) {
  map_pairs<W>(y, y, x, n, [beta, alpha](float yv, float xv) { return beta * yv + alpha * xv; });
}

// One thread per column; rows summed in fp32.
template <class T>
__global__ void sum_rows_kernel(T* out, const T* a, int64_t rows, int64_t cols) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float s = 0;
  for (int64_t i = 0; i < rows; i++) s += to_float(a[i * cols + j]);
  out[j] = from_float<T>(s);
}

enum class Reduce { Sum, Dot, MaxAbs };

// Pass 1 of a reduction: each block writes one double partial; the host adds the partials.
template <class T>
__global__ void reduce_kernel(double* partial, const T* a, const T* b, int64_t n, Reduce kind) {
  __shared__ double buf[256];
  double acc = 0;
  HLA_GRID_STRIDE(i, n) {
    double x = to_float(a[i]);
    if (kind == Reduce::Sum) acc += x;
    else if (kind == Reduce::Dot) acc += x * to_float(b[i]);
    else acc = fmax(acc, fabs(x));
  }
  buf[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      buf[threadIdx.x] = kind == Reduce::MaxAbs ? fmax(buf[threadIdx.x], buf[threadIdx.x + s])
                                                : buf[threadIdx.x] + buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = buf[0];
}

double reduce(const void* a, const void* b, DType dtype, int64_t n, Reduce kind) {
  if (n == 0) return 0;
  int grid = static_cast<int>(std::min<int64_t>((n + 255) / 256, 1024));
  double* partial = static_cast<double*>(device_alloc(grid * sizeof(double)));
  dispatch_storage(dtype, "reduce", [&](auto tag) {
    using T = decltype(tag);
    reduce_kernel<T><<<grid, 256>>>(partial, static_cast<const T*>(a), static_cast<const T*>(b), n, kind);
  });
  CUDA_CHECK_LAUNCH();
  std::vector<double> host(grid);
  copy_d2h(host.data(), partial, grid * sizeof(double));
  device_free(partial, grid * sizeof(double));
  double r = 0;
  for (double v : host) r = kind == Reduce::MaxAbs ? std::max(r, v) : r + v;
  return r;
}

}  // namespace

void gemm(void* c, DType c_dtype, const void* a, const void* b, DType dtype, int64_t M, int64_t N, int64_t K,
          bool trans_a, bool trans_b, float alpha, float beta, int64_t batch_count,
          int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  HLA_CHECK(dtype == DType::F32 || dtype == DType::BF16, "gemm: CUDA takes F32 or BF16, got ",
            dtype_name(dtype));
  HLA_CHECK(c_dtype == dtype || (dtype == DType::BF16 && c_dtype == DType::F32), "gemm: a ", dtype_name(c_dtype),
            " output for ", dtype_name(dtype), " inputs (CUDA writes their dtype, or F32 for BF16)");
  auto cuda_type = [](DType t) { return t == DType::F32 ? CUDA_R_32F : CUDA_R_16BF; };
  const cudaDataType_t t = cuda_type(dtype), tc = cuda_type(c_dtype);
  int64_t lda = trans_a ? M : K, ldb = trans_b ? K : N;
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha, b, t,
      static_cast<int>(ldb), stride_b, a, t, static_cast<int>(lda), stride_a, &beta, c, tc,
      static_cast<int>(N), stride_c, static_cast<int>(batch_count), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

void gemm_add(float* d, const float* c, const float* a, const float* b, int64_t M, int64_t N, int64_t K, bool trans_a,
              bool trans_b, float alpha, float beta, int64_t batch_count, int64_t stride_a, int64_t stride_b,
              int64_t stride_c) {
  // Row-major D = op(A) op(B) + C is column-major D^T = op(B)^T op(A)^T + C^T, as in gemm: the
  // caller's B is cuBLASLt's first operand, a (trans_b ? K x N : N x K) column-major matrix.
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t, int64_t>;
  static std::map<Key, LtPlan> plans;
  static std::mutex plans_mutex;
  const Key key{M, N, K, trans_a, trans_b, batch_count, stride_a, stride_b, stride_c};
  std::lock_guard<std::mutex> lock(plans_mutex);
  auto it = plans.find(key);
  if (it == plans.end()) {
    LtPlan p;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
    p.a = lt_layout(trans_b ? K : N, trans_b ? N : K, batch_count, stride_b);
    p.b = lt_layout(trans_a ? M : K, trans_a ? K : M, batch_count, stride_a);
    p.c = lt_layout(N, M, batch_count, stride_c);
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t bytes = kCublasWorkspaceBytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes)));
    cublasLtMatmulHeuristicResult_t found;
    int count = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt_handle(), p.op, p.a, p.b, p.c, p.c, pref, 1, &found, &count));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    HLA_CHECK(count > 0, "gemm_add: cuBLASLt has no algorithm for M = ", M, ", N = ", N, ", K = ", K, ", batch ",
              batch_count);
    p.algo = found.algo;
    it = plans.emplace(key, p).first;
  }
  const LtPlan& p = it->second;
  // cuBLAS's GEMMs and these run on one stream, so they may share the workspace.
  CUBLAS_CHECK(cublasLtMatmul(lt_handle(), p.op, &alpha, b, p.a, a, p.b, &beta, c, p.c, d, p.c, &p.algo, workspace(),
                              kCublasWorkspaceBytes, cudaStreamPerThread));
}

void binary(void* out, const void* a, const void* b, DType dtype, int64_t n, Binary op) {
  launch_elementwise(dtype, "binary", n, [&](auto tag) {
    using T = decltype(tag);
    dispatch_width<T>([&](auto width) {
      constexpr int W = decltype(width)::value;
      binary_kernel<T, W><<<grid_1d((n + W - 1) / W), 256>>>(static_cast<T*>(out), static_cast<const T*>(a),
                                                             static_cast<const T*>(b), n, op);
    }, out, a, b);
  });
}

void axpby(void* y, float beta, const void* x, float alpha, DType dtype, int64_t n) {
  launch_elementwise(dtype, "axpby", n, [&](auto tag) {
    using T = decltype(tag);
    dispatch_width<T>([&](auto width) {
      constexpr int W = decltype(width)::value;
      axpby_kernel<T, W><<<grid_1d((n + W - 1) / W), 256>>>(static_cast<T*>(y), beta, static_cast<const T*>(x), alpha,
                                                            n);
    }, y, x);
  });
}

void sum_rows(void* out, const void* a, DType dtype, int64_t rows, int64_t cols) {
  if (cols == 0) return;
  dispatch_storage(dtype, "sum_rows", [&](auto tag) {
    using T = decltype(tag);
    sum_rows_kernel<T><<<static_cast<int>((cols + 255) / 256), 256>>>(
        static_cast<T*>(out), static_cast<const T*>(a), rows, cols);
  });
  CUDA_CHECK_LAUNCH();
}

double reduce_sum(const void* a, DType dtype, int64_t n) { return reduce(a, a, dtype, n, Reduce::Sum); }
double reduce_dot(const void* a, const void* b, DType dtype, int64_t n) {
  return reduce(a, b, dtype, n, Reduce::Dot);
}
double reduce_max_abs(const void* a, DType dtype, int64_t n) {
  return reduce(a, a, dtype, n, Reduce::MaxAbs);
}

}  // namespace hla::cuda
