// Runs a templated CPU body for the tensor's float dtype:
//   dispatch_float(t.dtype(), "rmsnorm", [&](auto tag) { using T = decltype(tag); ... });
// F32 -> float, F64 -> double; any other dtype is an error naming the op.
#pragma once
#include "tensor/tensor.h"

namespace hla {

template <class Fn>
decltype(auto) dispatch_float(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::F32: return fn(float{});
    case DType::F64: return fn(double{});
    default: fail(op, ": CPU kernels take F32 or F64, got ", dtype_name(dtype));
  }
}

}  // namespace hla

// Calls a CUDA function when hla was built with CUDA; otherwise a clear error.
#ifdef HLA_CUDA
#define HLA_CUDA_ONLY(expr) expr
#else
#define HLA_CUDA_ONLY(expr) ::hla::fail("this operation needs a CUDA build of hla: " #expr)
#endif
