// CPU (Eigen) implementations of tensor/math.h and the dispatch to cuda/math.h.
#include "tensor/math.h"

#include <Eigen/Dense>
#include <cmath>

#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/math.h"
#endif

namespace hla {
namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void check_same_device_dtype(const Tensor& a, const Tensor& b, const char* op) {
  HLA_CHECK(a.device() == b.device() && a.dtype() == b.dtype(), op, ": operands ", a.str(),
            " and ", b.str(), " differ in device or dtype");
}

struct GemmDims {
  int64_t M, N, K;
};

GemmDims gemm_dims(const Tensor& a, const Tensor& b, bool ta, bool tb, const char* op) {
  HLA_CHECK(a.dim() == b.dim() && (a.dim() == 2 || a.dim() == 3), op,
            ": needs two 2-D (or two 3-D) tensors, got ", a.str(), " and ", b.str());
  int64_t M = ta ? a.size(-1) : a.size(-2), K = ta ? a.size(-2) : a.size(-1);
  int64_t Kb = tb ? b.size(-1) : b.size(-2), N = tb ? b.size(-2) : b.size(-1);
  HLA_CHECK(K == Kb, op, ": inner dimensions differ: ", a.str(), (ta ? "^T" : ""), " x ", b.str(),
            (tb ? "^T" : ""));
  return {M, N, K};
}

// The product in the inputs' type T, then widened to c's type TC (the same, or double for float).
template <class T, class TC>
void gemm_cpu(TC* c, const T* a, const T* b, GemmDims d, bool ta, bool tb, double alpha, double beta) {
  Eigen::Map<const RowMat<T>> A(a, ta ? d.K : d.M, ta ? d.M : d.K);
  Eigen::Map<const RowMat<T>> Bm(b, tb ? d.N : d.K, tb ? d.K : d.N);
  Eigen::Map<RowMat<TC>> C(c, d.M, d.N);
  RowMat<T> prod;
  if (!ta && !tb) prod.noalias() = A * Bm;
  else if (ta && !tb) prod.noalias() = A.transpose() * Bm;
  else if (!ta && tb) prod.noalias() = A * Bm.transpose();
  else prod.noalias() = A.transpose() * Bm.transpose();
  if (beta == 0.0) C = static_cast<TC>(alpha) * prod.template cast<TC>();
  else C = static_cast<TC>(alpha) * prod.template cast<TC>() + static_cast<TC>(beta) * C;
}

void gemm_any(Tensor& c, const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha,
              double beta, int64_t batch) {
  GemmDims d = gemm_dims(a, b, ta, tb, "gemm");
  check_same_device_dtype(a, b, "gemm");
  const DType wider = a.is_cuda() ? DType::F32 : DType::F64;  // than BF16 on the GPU, F32 on the CPU
  const bool widens = c.dtype() == wider && a.dtype() == (a.is_cuda() ? DType::BF16 : DType::F32);
  HLA_CHECK(c.device() == a.device() && (c.dtype() == a.dtype() || widens), "gemm: output ", c.str(),
            " for operands ", a.str(), ": it takes their dtype, or F32 for BF16 on the GPU, F64 for F32 on the CPU");
  HLA_CHECK(c.size(-2) == d.M && c.size(-1) == d.N, "gemm: output ", c.str(), " is not (", d.M,
            ", ", d.N, ")");
  if (a.is_cuda()) {
    HLA_CUDA_ONLY(cuda::gemm(c.raw(), c.dtype(), a.raw(), b.raw(), a.dtype(), d.M, d.N, d.K, ta, tb,
                             static_cast<float>(alpha), static_cast<float>(beta), batch,
                             d.M * d.K, d.K * d.N, d.M * d.N));
    return;
  }
  dispatch_float(a.dtype(), "gemm", [&](auto tag) {
    using T = decltype(tag);
    dispatch_float(c.dtype(), "gemm", [&](auto c_tag) {
      using TC = decltype(c_tag);
      if constexpr (sizeof(TC) >= sizeof(T))  // the check above: TC is T or double for float
        for (int64_t i = 0; i < batch; i++)
          gemm_cpu<T, TC>(c.data<TC>() + i * d.M * d.N, a.data<T>() + i * d.M * d.K,
                          b.data<T>() + i * d.K * d.N, d, ta, tb, alpha, beta);
    });
  });
}

template <class Fn>
Tensor elementwise(const Tensor& a, const Tensor& b, const char* op, Fn fn) {
  check_same_shape(a, b, op);
  check_same_device_dtype(a, b, op);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  dispatch_float(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0; i < a.numel(); i++) po[i] = fn(pa[i], pb[i]);
  });
  return out;
}

#ifdef HLA_CUDA
Tensor binary_cuda(const Tensor& a, const Tensor& b, cuda::Binary op, const char* name) {
  check_same_shape(a, b, name);
  check_same_device_dtype(a, b, name);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  cuda::binary(out.raw(), a.raw(), b.raw(), a.dtype(), a.numel(), op);
  return out;
}
#endif

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  GemmDims d = gemm_dims(a, b, trans_a, trans_b, "matmul");
  HLA_CHECK(a.dim() == 2, "matmul: 2-D operands expected, got ", a.str(), "; use bmm for 3-D");
  Tensor c = Tensor::empty({d.M, d.N}, a.dtype(), a.device());
  gemm_any(c, a, b, trans_a, trans_b, 1.0, 0.0, 1);
  return c;
}

void gemm_(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, double alpha,
           double beta) {
  gemm_any(c, a, b, trans_a, trans_b, alpha, beta, a.dim() == 3 ? a.size(0) : 1);
}

Tensor bmm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  GemmDims d = gemm_dims(a, b, trans_a, trans_b, "bmm");
  HLA_CHECK(a.dim() == 3 && a.size(0) == b.size(0), "bmm: batch sizes differ: ", a.str(), " and ",
            b.str());
  Tensor c = Tensor::empty({a.size(0), d.M, d.N}, a.dtype(), a.device());
  gemm_any(c, a, b, trans_a, trans_b, 1.0, 0.0, a.size(0));
  return c;
}

Tensor add(const Tensor& a, const Tensor& b) {
#ifdef HLA_CUDA
  if (a.is_cuda()) return binary_cuda(a, b, cuda::Binary::Add, "add");
#endif
  return elementwise(a, b, "add", [](auto x, auto y) { return x + y; });
}

Tensor sub(const Tensor& a, const Tensor& b) {
#ifdef HLA_CUDA
  if (a.is_cuda()) return binary_cuda(a, b, cuda::Binary::Sub, "sub");
#endif
  return elementwise(a, b, "sub", [](auto x, auto y) { return x - y; });
}

Tensor mul(const Tensor& a, const Tensor& b) {
#ifdef HLA_CUDA
  if (a.is_cuda()) return binary_cuda(a, b, cuda::Binary::Mul, "mul");
#endif
  return elementwise(a, b, "mul", [](auto x, auto y) { return x * y; });
}

void axpy_(Tensor& y, double alpha, const Tensor& x) {
  check_same_shape(y, x, "axpy_");
  check_same_device_dtype(y, x, "axpy_");
  if (y.is_cuda()) {
    HLA_CUDA_ONLY(cuda::axpby(y.raw(), 1.0f, x.raw(), static_cast<float>(alpha), y.dtype(), y.numel()));
    return;
  }
  dispatch_float(y.dtype(), "axpy_", [&](auto tag) {
    using T = decltype(tag);
    T* py = y.data<T>();
    const T* px = x.data<T>();
    for (int64_t i = 0; i < y.numel(); i++) py[i] += static_cast<T>(alpha) * px[i];
  });
}

void add_(Tensor& a, const Tensor& b) { axpy_(a, 1.0, b); }

void scale_(Tensor& a, double s) {
  if (a.is_cuda()) {
    HLA_CUDA_ONLY(cuda::axpby(a.raw(), static_cast<float>(s), a.raw(), 0.0f, a.dtype(), a.numel()));
    return;
  }
  dispatch_float(a.dtype(), "scale_", [&](auto tag) {
    using T = decltype(tag);
    T* p = a.data<T>();
    for (int64_t i = 0; i < a.numel(); i++) p[i] *= static_cast<T>(s);
  });
}

Tensor scale(const Tensor& a, double s) {
  Tensor out = a.clone();
  scale_(out, s);
  return out;
}

Tensor sum_all(const Tensor& a) {
  double total = 0;
  if (a.is_cuda()) {
    HLA_CUDA_ONLY(total = cuda::reduce_sum(a.raw(), a.dtype(), a.numel()));
  } else {
    dispatch_float(a.dtype(), "sum_all", [&](auto tag) {
      using T = decltype(tag);
      const T* p = a.data<T>();
      for (int64_t i = 0; i < a.numel(); i++) total += p[i];
    });
  }
  return Tensor::full({}, total, a.dtype(), a.device());
}

Tensor sum_rows(const Tensor& a) {
  HLA_CHECK(a.dim() >= 1, "sum_rows: needs at least 1-D, got ", a.str());
  int64_t cols = a.size(-1), rows = cols ? a.numel() / cols : 0;
  Tensor out = Tensor::empty({cols}, a.dtype(), a.device());
  if (a.is_cuda()) {
    HLA_CUDA_ONLY(cuda::sum_rows(out.raw(), a.raw(), a.dtype(), rows, cols));
    return out;
  }
  dispatch_float(a.dtype(), "sum_rows", [&](auto tag) {
    using T = decltype(tag);
    const T* p = a.data<T>();
    T* o = out.data<T>();
    for (int64_t j = 0; j < cols; j++) o[j] = 0;
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++) o[j] += p[i * cols + j];
  });
  return out;
}

double dot(const Tensor& a, const Tensor& b) {
  check_same_shape(a, b, "dot");
  check_same_device_dtype(a, b, "dot");
  if (a.is_cuda()) {
    double r = 0;
    HLA_CUDA_ONLY(r = cuda::reduce_dot(a.raw(), b.raw(), a.dtype(), a.numel()));
    return r;
  }
  return dispatch_float(a.dtype(), "dot", [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    double s = 0;
    for (int64_t i = 0; i < a.numel(); i++) s += static_cast<double>(pa[i]) * pb[i];
    return s;
  });
}

double sq_norm(const Tensor& a) { return dot(a, a); }

double max_abs(const Tensor& a) {
  if (a.is_cuda()) {
    double r = 0;
    HLA_CUDA_ONLY(r = cuda::reduce_max_abs(a.raw(), a.dtype(), a.numel()));
    return r;
  }
  double m = 0;
  for (double v : a.to_f64_vector()) m = std::max(m, std::abs(v));
  return m;
}

}  // namespace hla
