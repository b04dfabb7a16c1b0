// dtype cast on any device through Tensor::to(DType).
#include "nn/ops/cast.h"

namespace hla {

Var cast(const Var& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return cast_made(x, x.value().to(dtype));
}

Var cast_made(const Var& x, const Tensor& cast_value) {
  HLA_CHECK(cast_value.shape() == x.shape() && cast_value.device() == x.device(), "cast_made: the cast ",
            cast_value.str(), " is not of x ", x.value().str());
  DType from = x.dtype();
  Var y = record_op1(cast_value, {x}, [from](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].to(from)};  // y = x (rounded): dy/dx = 1
  }, "cast");
  if (y.grad_fn()) y.grad_fn()->is_cast = true;  // a consumer may sum its gradient past it (gradient_sum)
  return y;
}

}  // namespace hla
