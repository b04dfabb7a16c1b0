// Host-to-device uploads without a host wait (train/upload.h).
#include "train/upload.h"

#include <cstring>

#include "tensor/dispatch.h"

#ifdef HLA_CUDA
#include "cuda/staging.h"
#endif

namespace hla {

void upload_async(Tensor& dst, const void* src) {
  if (dst.is_cuda()) {
    HLA_CUDA_ONLY(cuda::copy_h2d_async(dst.raw(), src, dst.nbytes()));
    return;
  }
  std::memcpy(dst.raw(), src, dst.nbytes());
}

void upload_f64_async(Tensor& dst, const std::vector<double>& values) {
  HLA_CHECK(dst.dtype() == DType::F64 && dst.numel() == static_cast<int64_t>(values.size()),
            "upload_f64_async: ", values.size(), " values for ", dst.str());
  upload_async(dst, values.data());
}

}  // namespace hla
