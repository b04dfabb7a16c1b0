// dtype conversion and fill on the GPU. The casts between fp32 and bf16 (the weights cast to the
// compute dtype and their gradients cast back, hundreds a step) take groups of 4 elements (one
// 16-byte fp32 access, common.cuh's for_each_group); every other pair goes one element per
// thread through fp64, the dtype switch in the loop.
#include "cuda/common.cuh"
#include "cuda/convert.h"

namespace hla::cuda {
namespace {

__device__ double load_as_f64(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::U16: return static_cast<const uint16_t*>(p)[i];
  }
  return 0;
}

__device__ void store_from_f64(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(p)[i] = v; break;
    case DType::BF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v)); break;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::U16: static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v); break;
  }
}

__global__ void convert_kernel(void* dst, DType dt, const void* src, DType st, int64_t n) {
  HLA_GRID_STRIDE(i, n) store_from_f64(dst, dt, i, load_as_f64(src, st, i));
}

// dst: (n) of D, src: (n) of S, for S, D float or __nv_bfloat16
template <class S, class D, int W>
__global__ void cast_kernel(D* dst, const S* src, int64_t n) {
  for_each_group<W>(n, [&](int64_t i, auto width) {
    constexpr int w = decltype(width)::value;
    float v[w];
    load_floats(v, src + i);
    store_floats(dst + i, v);
  });
}

__global__ void fill_kernel(void* dst, DType t, double v, int64_t n) {
  HLA_GRID_STRIDE(i, n) store_from_f64(dst, t, i, v);
}

}  // namespace

void convert(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) {
  if (n == 0) return;
  auto is_storage = [](DType t) { return t == DType::F32 || t == DType::BF16; };
  if (is_storage(dst_type) && is_storage(src_type) && dst_type != src_type) {
    dispatch_storage(src_type, "convert", [&](auto src_tag) {
      using S = decltype(src_tag);
      using D = std::conditional_t<std::is_same_v<S, float>, __nv_bfloat16, float>;
      dispatch_width<float>([&](auto width) {
        constexpr int W = decltype(width)::value;
        cast_kernel<S, D, W><<<grid_1d((n + W - 1) / W), 256>>>(static_cast<D*>(dst), static_cast<const S*>(src), n);
      }, dst, src);
    });
  } else {
    convert_kernel<<<grid_1d(n), 256>>>(dst, dst_type, src, src_type, n);
  }
  CUDA_CHECK_LAUNCH();
}

void fill(void* dst, DType type, double value, int64_t n) {
  if (n == 0) return;
  fill_kernel<<<grid_1d(n), 256>>>(dst, type, value, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace hla::cuda
