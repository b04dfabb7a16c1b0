// Linear layer on the GEMMs of tensor/math.h (Eigen on CPU, cuBLAS on GPU).
#include "nn/ops/linear.h"

#include "tensor/math.h"

namespace hla {

Var linear(const Var& x, const Var& weight, const Var& bias) {
  int64_t in = weight.size(1), out = weight.size(0);
  HLA_CHECK(x.size(-1) == in, "linear: input ", x.value().str(), " does not match weight ",
            weight.value().str());
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor x2 = x.value().reshape({-1, in});  // x2: (N, in)
  Tensor w = weight.value();                // w: (out, in)
  Tensor y = matmul(x2, w, false, true);    // y = x W^T : (N, out)
  bool has_bias = bias.defined();
  if (has_bias) {
    HLA_CHECK(bias.shape() == Shape{out}, "linear: bias ", bias.value().str(), " is not (", out, ",)");
    Tensor ones = Tensor::full({x2.size(0), 1}, 1.0, y.dtype(), y.device());
    gemm_(y, ones, bias.value().reshape({1, out}), false, false, 1.0, 1.0);  // y += 1 b^T
  }
  std::vector<Var> inputs{x, weight};
  if (has_bias) inputs.push_back(bias);
  Shape x_shape = x.shape();
  return record_op1(y.reshape(out_shape), inputs, [=](const std::vector<Tensor>& g) {
    Tensor dy = g[0].reshape({-1, out});               // dy: (N, out)
    std::vector<Tensor> grads;
    grads.push_back(matmul(dy, w).reshape(x_shape));   // dx = dy W
    grads.push_back(matmul(dy, x2, true, false));      // dW = dy^T x
    if (has_bias) grads.push_back(sum_rows(dy));       // db = sum over rows of dy
    return grads;
  }, "linear");
}

}  // namespace hla
