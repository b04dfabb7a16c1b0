// SwiGLU z = silu(a) * b on the GPU, s = sigmoid(a). Each thread takes a group of 8 bf16 or 4 fp32
// (one 16-byte load per operand, common.cuh's for_each_group), the n % W elements left one by one.
#include "cuda/common.cuh"
#include "cuda/swiglu.h"

namespace hla::cuda {
namespace {


// z, a, b: (n)
template <class T, int W>
__global__ void swiglu_forward_kernel(T* z, const T* a, const T* b, int64_t n) {
  map_pairs<W>(z, a, b, n, [](float av, float bv) { return av * sigmoid_of(av) * bv; });  // z = silu(a) * b
}

// da, db, dz, a, b: (n)
template <class T, int W>
__global__ void swiglu_backward_kernel(T* da, T* db, const T* dz, const T* a, const T* b, int64_t n) {
  for_each_group<W>(n, [&](int64_t i, auto width) {
    constexpr int w = decltype(width)::value;
    float av[w], bv[w], g[w], dav[w], dbv[w];
    load_floats(av, a + i);
    load_floats(bv, b + i);
    load_floats(g, dz + i);
#pragma unroll
    for (int k = 0; k < w; k++) {
      const float s = sigmoid_of(av[k]);
      dav[k] = g[k] * bv[k] * s * (1.0f + av[k] * (1.0f - s));  // d silu(a) / da
      dbv[k] = g[k] * av[k] * s;                                 // z is linear in b
    }
    store_floats(da + i, dav);
    store_floats(db + i, dbv);
  });
}

}  // namespace

void swiglu_forward(void* z, const void* a, const void* b, int64_t n, DType dtype) {
  launch_elementwise(dtype, "swiglu_forward", n, [&](auto tag) {
    using T = decltype(tag);
    dispatch_width<T>([&](auto width) {
      constexpr int W = decltype(width)::value;
      swiglu_forward_kernel<T, W><<<grid_1d((n + W - 1) / W), 256>>>(static_cast<T*>(z), static_cast<const T*>(a),
                                                                     static_cast<const T*>(b), n);
    }, z, a, b);
  });
}

void swiglu_backward(void* da, void* db, const void* dz, const void* a, const void* b, int64_t n, DType dtype) {
  launch_elementwise(dtype, "swiglu_backward", n, [&](auto tag) {
    using T = decltype(tag);
    dispatch_width<T>([&](auto width) {
      constexpr int W = decltype(width)::value;
      swiglu_backward_kernel<T, W><<<grid_1d((n + W - 1) / W), 256>>>(
          static_cast<T*>(da), static_cast<T*>(db), static_cast<const T*>(dz), static_cast<const T*>(a),
          static_cast<const T*>(b), n);
    }, da, db, dz, a, b);
  });
}

}  // namespace hla::cuda
