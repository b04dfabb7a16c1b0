// SwiGLU z = silu(a) * b on the GPU, one thread per element; s = sigmoid(a).
#include "cuda/common.cuh"
#include "cuda/swiglu.h"

namespace hla::cuda {
namespace {

__device__ __forceinline__ float sigmoid_of(float x) { return 1.0f / (1.0f + expf(-x)); }

template <class T>
__global__ void swiglu_forward_kernel(T* z, const T* a, const T* b, int64_t n) {
  HLA_GRID_STRIDE(i, n) {
    float av = to_float(a[i]);
    z[i] = from_float<T>(av * sigmoid_of(av) * to_float(b[i]));  // z = silu(a) * b
  }
}

template <class T>
__global__ void swiglu_backward_kernel(T* da, T* db, const T* dz, const T* a, const T* b, int64_t n) {
  HLA_GRID_STRIDE(i, n) {
    float av = to_float(a[i]), s = sigmoid_of(av), g = to_float(dz[i]);
    da[i] = from_float<T>(g * to_float(b[i]) * s * (1.0f + av * (1.0f - s)));  // d silu(a) / da
    db[i] = from_float<T>(g * av * s);                                          // z is linear in b
  }
}

}  // namespace

void swiglu_forward(void* z, const void* a, const void* b, int64_t n, DType dtype) {
  launch_elementwise(dtype, "swiglu_forward", n, [&](auto tag) {
    using T = decltype(tag);
    swiglu_forward_kernel<T><<<grid_1d(n), 256>>>(static_cast<T*>(z), static_cast<const T*>(a),
                                                  static_cast<const T*>(b), n);
  });
}

void swiglu_backward(void* da, void* db, const void* dz, const void* a, const void* b, int64_t n, DType dtype) {
  launch_elementwise(dtype, "swiglu_backward", n, [&](auto tag) {
    using T = decltype(tag);
    swiglu_backward_kernel<T><<<grid_1d(n), 256>>>(static_cast<T*>(da), static_cast<T*>(db),
                                                   static_cast<const T*>(dz), static_cast<const T*>(a),
                                                   static_cast<const T*>(b), n);
  });
}

}  // namespace hla::cuda
