// add, mul, scale, sum, mean, reshape: forward through tensor/math.h, backward beside it.
#include "nn/ops/arith.h"

#include "autograd/gradcheck.h"
#include "tensor/dispatch.h"
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

namespace cpu {

// x, y: (N, C), w: (C)
template <class T>
void rows_forward(T* y, const T* x, const T* w, int64_t N, int64_t C, bool multiply) {
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) y[n * C + c] = multiply ? x[n * C + c] * w[c] : x[n * C + c] + w[c];
}

// dx: (N, C) written, dw: (C) accumulated
template <class T>
void rows_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, int64_t N, int64_t C, bool multiply) {
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) {
      T g = dy[n * C + c];
      dx[n * C + c] = multiply ? g * w[c] : g;  // y = x * w  => dx = dy * w ;  y = x + w => dx = dy
      dw[c] += multiply ? g * x[n * C + c] : g;  // dw = sum_rows dy * x      ;  dw = sum_rows dy
    }
}

}  // namespace cpu

static Var rows_op(const Var& x, const Var& w, bool multiply, const char* name) {
  int64_t C = x.size(-1), N = x.numel() / C;
  check_shape(w.value(), {C}, name, "w");
  HLA_CHECK(!x.value().is_cuda(), name, ": the CUDA kernel is not built yet");
  Tensor xv = x.value(), wv = w.value();
  Tensor y = Tensor::empty(xv.shape(), xv.dtype());
  dispatch_float(xv.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    cpu::rows_forward(y.data<T>(), xv.data<T>(), wv.data<T>(), N, C, multiply);
  });
  return record_op1(y, {x, w}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(xv.shape(), xv.dtype()), dw = Tensor::zeros({C}, xv.dtype());
    dispatch_float(xv.dtype(), name, [&](auto tag) {
      using T = decltype(tag);
      cpu::rows_backward(dx.data<T>(), dw.data<T>(), g[0].data<T>(), xv.data<T>(), wv.data<T>(), N, C, multiply);
    });
    return std::vector<Tensor>{dx, dw};
  }, name);
}

Var mul_rows(const Var& x, const Var& w) { return rows_op(x, w, true, "mul_rows"); }
Var add_rows(const Var& x, const Var& w) { return rows_op(x, w, false, "add_rows"); }

Var scale_by(const Var& x, const Var& s) {
  HLA_CHECK(s.numel() == 1, "scale_by: the scale must have one element, got ", s.value().str());
  return reshape(mul_rows(reshape(x, {-1, 1}), reshape(s, {1})), x.shape());
}

HLA_GRADCHECK("arith") {
  auto add_mul = [](const std::vector<Var>& v) {
    // (a + b) * a, then scaled and reshaped: a is used twice, so its gradient accumulates.
    Var y = reshape(scale(mul(add(v[0], v[1]), v[0]), 0.5), {6});
    return std::vector<Var>{y, sum(v[1]), mean(v[0]), mul_rows(v[0], v[2]), add_rows(v[1], v[2]),
                            scale_by(v[0], v[3])};
  };
  return gradcheck("arith", add_mul, {{"a", gc_randn({2, 3}, 1)}, {"b", gc_randn({2, 3}, 2)},
                                      {"w", gc_randn({3}, 3)}, {"s", gc_randn({1}, 4)}});
}

}  // namespace hla
