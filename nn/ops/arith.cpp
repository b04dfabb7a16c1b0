// add, mul, scale, sum, mean, reshape: forward through tensor/math.h, backward beside it.
#include "nn/ops/arith.h"

#include <algorithm>
#include <cstring>

#include "nn/ops/check.h"
#include "tensor/dispatch.h"
#include "tensor/math.h"
#ifdef HLA_CUDA
#include "cuda/arith.h"
#endif

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

// x, y: (outer, S, inner), s: (S)
template <class T>
void broadcast_forward(T* y, const T* x, const T* s, int64_t outer, int64_t S, int64_t inner, bool multiply) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < S; i++)
      for (int64_t j = 0; j < inner; j++) {
        int64_t n = (o * S + i) * inner + j;
        y[n] = multiply ? x[n] * s[i] : x[n] + s[i];
      }
}

// dx: (outer, S, inner), ds: (S) written
template <class T>
void broadcast_backward(T* dx, T* ds, const T* dy, const T* x, const T* s, int64_t outer, int64_t S, int64_t inner,
                        bool multiply) {
  std::fill(ds, ds + S, T(0));
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < S; i++)
      for (int64_t j = 0; j < inner; j++) {
        int64_t n = (o * S + i) * inner + j;
        dx[n] = multiply ? dy[n] * s[i] : dy[n];  // y = x * s => dx = dy * s ;  y = x + s => dx = dy
        ds[i] += multiply ? dy[n] * x[n] : dy[n];  // ds = sum dy * x           ;  ds = sum dy
      }
}

}  // namespace cpu

// One forward for both devices: cpu::broadcast_forward<T> or cuda::broadcast_forward.
// x, y: (outer, S, inner), s: (S)
static void broadcast_forward(Tensor& y, const Tensor& x, const Tensor& s, int64_t outer, int64_t S, int64_t inner,
                              bool multiply, const char* name) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::broadcast_forward(y.raw(), x.raw(), s.raw(), outer, S, inner, multiply, x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    cpu::broadcast_forward(y.data<T>(), x.data<T>(), s.data<T>(), outer, S, inner, multiply);
  });
}

// One backward for both devices; dx: (outer, S, inner), ds: (S) written.
static void broadcast_backward(Tensor& dx, Tensor& ds, const Tensor& dy, const Tensor& x, const Tensor& s,
                               int64_t outer, int64_t S, int64_t inner, bool multiply, const char* name) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::broadcast_backward(dx.raw(), ds.raw(), dy.raw(), x.raw(), s.raw(), outer, S, inner, multiply,
                                           x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    cpu::broadcast_backward(dx.data<T>(), ds.data<T>(), dy.data<T>(), x.data<T>(), s.data<T>(), outer, S, inner,
                            multiply);
  });
}

static Var broadcast_op(const Var& x, const Var& s, int64_t inner, bool multiply, const char* name) {
  int64_t S = s.numel();
  HLA_CHECK(S > 0 && inner > 0 && x.numel() % (S * inner) == 0, name, ": ", x.value().str(),
            " cannot be viewed as (outer, ", S, ", ", inner, ") for s ", s.value().str());
  int64_t outer = x.numel() / (S * inner);
  Tensor xv = x.value(), sv = s.value();
  check_operand(sv, xv, name, "s");
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
  broadcast_forward(y, xv, sv, outer, S, inner, multiply, name);
  return record_op1(y, {x, s}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
    Tensor ds = Tensor::empty(sv.shape(), xv.dtype(), xv.device());
    broadcast_backward(dx, ds, g[0], xv, sv, outer, S, inner, multiply, name);
    return std::vector<Tensor>{dx, ds};
  }, name);
}

Var mul_broadcast(const Var& x, const Var& s, int64_t inner) { return broadcast_op(x, s, inner, true, "mul_broadcast"); }
Var add_broadcast(const Var& x, const Var& s, int64_t inner) { return broadcast_op(x, s, inner, false, "add_broadcast"); }

Var scale_by(const Var& x, const Var& s) {
  HLA_CHECK(s.numel() == 1, "scale_by: the scale must have one element, got ", s.value().str());
  return mul_broadcast(x, s, x.numel());
}

// Copies columns [begin, begin + width) of every row of src (rows, C) into dst (rows, width), or back;
// on the GPU as one strided copy (cuda/arith.cu).
static void copy_columns(Tensor& dst, const Tensor& src, int64_t rows, int64_t C, int64_t begin, int64_t width,
                         bool gather) {
  check_operand(src, dst, "split_last", gather ? "x" : "a gradient piece");
  size_t es = dtype_size(src.dtype());
  if (dst.is_cuda()) {
    HLA_CUDA_ONLY(cuda::copy_columns(dst.raw(), src.raw(), rows, C, begin, width, es, gather));
    return;
  }
  const char* sp = static_cast<const char*>(src.raw());
  char* dp = static_cast<char*>(dst.raw());
  for (int64_t r = 0; r < rows; r++) {
    if (gather) std::memcpy(dp + r * width * es, sp + (r * C + begin) * es, width * es);
    else std::memcpy(dp + (r * C + begin) * es, sp + r * width * es, width * es);
  }
}

std::vector<Var> split_last(const Var& x, const std::vector<int64_t>& widths) {
  int64_t C = x.size(-1), rows = x.numel() / C, total = 0;
  for (int64_t w : widths) total += w;
  HLA_CHECK(total == C, "split_last: widths add up to ", total, " but the last dim of ", x.value().str(), " is ", C);
  Tensor xv = x.value();
  std::vector<Tensor> outs;
  int64_t begin = 0;
  for (int64_t w : widths) {
    Shape s = xv.shape();
    s.back() = w;
    Tensor piece = Tensor::empty(s, xv.dtype(), xv.device());
    copy_columns(piece, xv, rows, C, begin, w, true);  // piece = x[..., begin : begin + w]
    outs.push_back(piece);
    begin += w;
  }
  Shape x_shape = xv.shape();
  DType dt = xv.dtype();
  Device dev = xv.device();
  return record_op(outs, {x}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(x_shape, dt, dev);
    int64_t b0 = 0;
    for (size_t i = 0; i < widths.size(); i++) {  // dx[..., piece i] = d piece_i
      copy_columns(dx, g[i], rows, C, b0, widths[i], false);
      b0 += widths[i];
    }
    return std::vector<Tensor>{dx};
  }, "split_last");
}

Var concat0(const std::vector<Var>& xs) {
  HLA_CHECK(!xs.empty(), "concat0: no pieces to stack");
  const Tensor first = xs[0].value();
  Shape shape = first.shape();
  HLA_CHECK(!shape.empty(), "concat0: pieces need a first dimension, got ", first.str());
  std::vector<int64_t> rows;
  for (const Var& x : xs) {  // the same dims past the first, dtype and device as the first piece
    const Tensor& t = x.value();
    const bool stacks = t.dim() == first.dim() && t.dtype() == first.dtype() && t.device() == first.device() &&
                        std::equal(t.shape().begin() + 1, t.shape().end(), shape.begin() + 1);
    HLA_CHECK(stacks, "concat0: piece ", t.str(), " does not stack on ", first.str());
    rows.push_back(t.size(0));
  }
  shape[0] = 0;
  for (int64_t r : rows) shape[0] += r;
  Tensor y = Tensor::empty(shape, first.dtype(), first.device());
  int64_t begin = 0;
  for (size_t i = 0; i < xs.size(); i++) {  // y[begin : begin + rows_i] = x_i
    y.slice0(begin, begin + rows[i]).copy_(xs[i].value());
    begin += rows[i];
  }
  return record_op1(y, xs, [=](const std::vector<Tensor>& g) {
    std::vector<Tensor> grads;
    int64_t b0 = 0;
    for (int64_t r : rows) {  // d x_i = dy[b0 : b0 + rows_i], a view (the engine copies what it keeps)
      grads.push_back(g[0].slice0(b0, b0 + r));
      b0 += r;
    }
    return grads;
  }, "concat0");
}

}  // namespace hla
