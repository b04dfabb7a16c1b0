// Linear layer on the GEMMs of tensor/math.h (Eigen on CPU, cuBLAS on GPU). The backward's two
// GEMMs add into the gradient sums themselves (autograd/var.h: gradient_sum): dW goes straight into
// an fp32 master weight's gradient (no cast of a bf16 dW, no separate add when it accumulates over
// micro-batches or tied uses), dx into the sum of x's other uses (no separate add).
#include "nn/ops/linear.h"

#include "tensor/math.h"

namespace hla {
namespace {

// Input `input`'s gradient, op(a) op(b) of shape `shape`, summed by the GEMM into the gradient sum:
// beta = 1 into the sum so far, or beta = 0 into a new one in the sum's dtype (F32 for a bf16
// compute copy of an fp32 master weight). Returns the undefined Tensor the engine then expects.
Tensor gemm_into_gradient(size_t input, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                          const Shape& shape) {
  GradientSum g = gradient_sum(input);
  if (!g.sum) return Tensor();  // the input needs no gradient
  Tensor sum = g.target(shape, a.device());
  Tensor c = sum.reshape({-1, shape.back()});  // c: (rows, cols), a view of the sum
  gemm_(c, a, b, trans_a, trans_b, 1.0, g.adds() ? 1.0 : 0.0);
  g.keep(sum);
  return Tensor();
}

}  // namespace

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
  Shape x_shape = x.shape(), w_shape = weight.shape();
  return record_op1(y.reshape(out_shape), inputs, [=](const std::vector<Tensor>& g) {
    Tensor dy = g[0].reshape({-1, out});                              // dy: (N, out)
    std::vector<Tensor> grads;
    grads.push_back(gemm_into_gradient(0, dy, w, false, false, x_shape));  // dx = dy W
    grads.push_back(gemm_into_gradient(1, dy, x2, true, false, w_shape));  // dW = dy^T x
    if (has_bias) grads.push_back(sum_rows(dy));                       // db = sum over rows of dy
    return grads;
  }, "linear");
}

}  // namespace hla
