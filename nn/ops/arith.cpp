// add, mul, scale, sum, mean, reshape: forward through tensor/math.h, backward beside it.
#include "nn/ops/arith.h"

#include "autograd/gradcheck.h"
#include "tensor/math.h"

namespace hla {

Var add(const Var& a, const Var& b) {
  Tensor y = add(a.value(), b.value());  // y = a + b
  return record_op1(y, {a, b}, [](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0], g[0]};  // dy/da = dy/db = 1
  }, "add");
}

Var mul(const Var& a, const Var& b) {
  Tensor y = mul(a.value(), b.value());  // y = a * b
  Tensor av = a.value(), bv = b.value();
  return record_op1(y, {a, b}, [av, bv](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{mul(g[0], bv), mul(g[0], av)};  // da = dy * b, db = dy * a
  }, "mul");
}

Var scale(const Var& a, double s) {
  return record_op1(scale(a.value(), s), {a}, [s](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{scale(g[0], s)};
  }, "scale");
}

// Broadcasts the one-element gradient of a full reduction back to `shape`, times `factor`.
static Tensor broadcast_scalar_grad(const Tensor& g, const Shape& shape, DType dtype, Device device,
                                    double factor) {
  return Tensor::full(shape, g.item() * factor, dtype, device);
}

Var sum(const Var& a) {
  Shape shape = a.shape();
  DType dt = a.dtype();
  Device dev = a.device();
  return record_op1(sum_all(a.value()), {a}, [=](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{broadcast_scalar_grad(g[0], shape, dt, dev, 1.0)};
  }, "sum");
}

Var mean(const Var& a) {
  Shape shape = a.shape();
  DType dt = a.dtype();
  Device dev = a.device();
  double inv_n = 1.0 / static_cast<double>(a.numel());
  return record_op1(scale(sum_all(a.value()), inv_n), {a}, [=](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{broadcast_scalar_grad(g[0], shape, dt, dev, inv_n)};
  }, "mean");
}

Var reshape(const Var& a, const Shape& shape) {
  Shape in_shape = a.shape();
  return record_op1(a.value().reshape(shape), {a}, [in_shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].reshape(in_shape)};
  }, "reshape");
}

HLA_GRADCHECK("arith") {
  auto add_mul = [](const std::vector<Var>& v) {
    // (a + b) * a, then scaled and reshaped: a is used twice, so its gradient accumulates.
    Var y = reshape(scale(mul(add(v[0], v[1]), v[0]), 0.5), {6});
    return std::vector<Var>{y, sum(v[1]), mean(v[0])};
  };
  return gradcheck("arith", add_mul, {{"a", gc_randn({2, 3}, 1)}, {"b", gc_randn({2, 3}, 2)}});
}

}  // namespace hla
