// Causal softmax attention: the device dispatch (cuda::attention_* for GPU tensors, the CPU
// reference of nn/ops/attention_reference.cpp otherwise) and the Var function with its one
// backward closure.
#include "nn/ops/attention.h"

#include <vector>

#include "nn/ops/check.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/attention.h"
#endif

namespace hla {
namespace {

// The device's kernels: cuda::attention_* (flash style) for GPU tensors, cpu::attention_*
// otherwise. lse in d.lse_dtype.
void attention_forward(Tensor& o, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionDims& d) {
  if (q.is_cuda()) {
    HLA_CUDA_ONLY(cuda::attention_forward(o.raw(), lse.data<float>(), q.raw(), k.raw(), v.raw(), d, q.dtype()));
    return;
  }
  dispatch_float(q.dtype(), "attention", [&](auto tag) {
    using Real = decltype(tag);
    cpu::attention_forward(o.data<Real>(), lse.data<Real>(), q.data<Real>(), k.data<Real>(), v.data<Real>(), d);
  });
}

void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& o, const Tensor& lse, const AttentionDims& d) {
  if (q.is_cuda()) {
    HLA_CUDA_ONLY(cuda::attention_backward(dq.raw(), dk.raw(), dv.raw(), dout.raw(), q.raw(), k.raw(), v.raw(), o.raw(),
                                           lse.data<float>(), d, q.dtype()));
    return;
  }
  dispatch_float(q.dtype(), "attention", [&](auto tag) {
    using Real = decltype(tag);
    cpu::attention_backward(dq.data<Real>(), dk.data<Real>(), dv.data<Real>(), dout.data<Real>(), q.data<Real>(),
                            k.data<Real>(), v.data<Real>(), o.data<Real>(), lse.data<Real>(), d);
  });
}

}  // namespace

Var attention(const Var& q, const Var& k, const Var& v, double scale, int64_t window) {
  HLA_CHECK(q.dim() == 4, "attention: q must be (B, T, H, D), got ", q.value().str());
  HLA_CHECK(k.dim() == 4, "attention: k must be (B, T, Hkv, D), got ", k.value().str());
  HLA_CHECK(v.dim() == 4, "attention: v must be (B, T, Hkv, Dv), got ", v.value().str());
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), Hkv = k.size(2), Dv = v.size(3);
  check_shape(k.value(), {B, T, Hkv, D}, "attention", "k");
  check_shape(v.value(), {B, T, Hkv, Dv}, "attention", "v");
  check_operand(k.value(), q.value(), "attention", "k");
  check_operand(v.value(), q.value(), "attention", "v");
  HLA_CHECK(Hkv > 0 && H % Hkv == 0, "attention: query heads H = ", H, " must be a multiple of kv heads Hkv = ", Hkv);
  HLA_CHECK(window >= 0, "attention: window must be >= 0 (0 = full causal), got ", window);
  const AttentionDims d{B, T, H, Hkv, D, Dv, scale, window, accum_dtype(q.value())};
  const DType dt = q.dtype();
  const Device dev = q.device();
  Tensor qv = q.value(), kv = k.value(), vv = v.value();
  Tensor o = Tensor::empty({B, T, H, Dv}, dt, dev);           // o: (B, T, H, Dv)
  Tensor lse = Tensor::empty({B, H, T}, d.lse_dtype, dev);    // lse: (B, H, T)
  attention_forward(o, lse, qv, kv, vv, d);
  return record_op1(o, {q, k, v}, [=](const std::vector<Tensor>& g) {
    Tensor dq = Tensor::empty(qv.shape(), dt, dev);
    Tensor dk = Tensor::empty(kv.shape(), dt, dev);
    Tensor dv = Tensor::empty(vv.shape(), dt, dev);
    attention_backward(dq, dk, dv, g[0], qv, kv, vv, o, lse, d);
    return std::vector<Tensor>{dq, dk, dv};
  }, "attention");
}

}  // namespace hla
