// The table the multi-tensor step ops (nn/ops/grad_norm.h) hand to cpu:: (nn/ops/grad_norm.cpp)
// and cuda:: (cuda/grad_norm.cu): one flat span per tensor. Knows nothing of Var.
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/dtype.h"

namespace hla {

struct TensorSpan {
  void* data = nullptr;  // null with numel 0: a parameter without a gradient this step
  int64_t numel = 0;
  DType dtype = DType::F32;  // F32 or BF16 on the GPU; F32 or F64 on the CPU
};
using TensorTable = std::vector<TensorSpan>;

// The step record of one update, two doubles: {loss, grad norm}.
constexpr int kStepRecordSize = 2;
// The run's status, three doubles: {first non-finite step (0: none yet), index in the table of
// the first tensor whose sum of squares is not finite at that step (-1: none, the loss alone),
// the clip factor of the latest step}.
constexpr int kStepStatusSize = 3;

}  // namespace hla
