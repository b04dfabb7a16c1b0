// Host-to-device uploads of the training step's per-step data (batches, loss weights, the
// optimizer's scheduled values) that never make the host wait: on the GPU through the pinned
// staging ring (cuda/staging.h), queued on hla's stream; on the CPU a plain copy. They run
// outside a captured CUDA graph, into the fixed tensors the graph reads (train/trainer.h).
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace hla {

// dst (contiguous, any device) = the dst.nbytes() bytes at src, which the caller may reuse at once.
void upload_async(Tensor& dst, const void* src);

// dst: (values.size()) F64 on any device.
void upload_f64_async(Tensor& dst, const std::vector<double>& values);

}  // namespace hla
