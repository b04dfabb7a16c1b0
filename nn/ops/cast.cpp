// dtype cast on any device through Tensor::to(DType).
#include "nn/ops/cast.h"

namespace hla {

Var cast(const Var& x, DType dtype) {
  DType from = x.dtype();
  if (from == dtype) return x;
  return record_op1(x.value().to(dtype), {x}, [from](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].to(from)};  // y = x (rounded): dy/dx = 1
  }, "cast");
}

}  // namespace hla
