// Var functions of the recurrence ops on the GPU (see nn/recurrence_cuda.h): allocate outputs
// on the device, run the forward kernel, record the node whose backward runs the backward
// kernel. The states cross this boundary in fp32.
#include "nn/recurrence_cuda.h"

#include "tensor/math.h"

#ifdef HLA_CUDA
#include "cuda/decay_attention.h"
#include "cuda/delta_rule.h"
#include "cuda/hgrn.h"
#include "cuda/rwkv6.h"
#endif

namespace hla {

#ifdef HLA_CUDA
namespace {

Tensor device_empty(const Shape& shape, DType dtype) { return Tensor::empty(shape, dtype, Device::CUDA); }

// An optional state as fp32 on the GPU (undefined stays undefined).
Tensor state_f32(const Var& s) {
  if (!s.defined()) return Tensor();
  HLA_CHECK(s.value().is_cuda(), "initial_state must be on the GPU with the other inputs, got ", s.value().str());
  return s.value().to(DType::F32);
}

const float* f32_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
float* f32_or_null(Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// An optional initial state's dtype, for handing its gradient back (kept instead of the Var so
// that the backward closure holds no Var).
struct StateInfo {
  bool defined;
  DType dtype;
  explicit StateInfo(const Var& s) : defined(s.defined()), dtype(s.defined() ? s.dtype() : DType::F32) {}
  Tensor grad_buffer(const Shape& shape) const { return defined ? device_empty(shape, DType::F32) : Tensor(); }
  Tensor grad(const Tensor& dh0_f32) const { return defined ? dh0_f32.to(dtype) : Tensor(); }
};

bool graph_needs_grad(std::initializer_list<const Var*> inputs) {
  bool any = false;
  for (const Var* x : inputs) any = any || x->requires_grad();
  return any && grad_enabled();
}

}  // namespace

HgrnOutput hgrn_cuda(const Var& x, const Var& g, const Var& initial_state) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  const DType dt = x.dtype();
  Tensor xv = x.value(), gv = g.value(), h0 = state_f32(initial_state);
  const StateInfo s0(initial_state);
  Tensor o = device_empty({B, T, D}, dt);             // o: (B, T, D)
  Tensor ht = device_empty({B, D}, DType::F32);       // ht: (B, D)
  cuda::hgrn_forward(o.raw(), ht.data<float>(), xv.raw(), gv.raw(), f32_or_null(h0), B, T, D, dt);
  auto backward = [=](const std::vector<Tensor>& grads) {
    Tensor dx = device_empty({B, T, D}, dt), dg = device_empty({B, T, D}, dt);
    Tensor dh0 = s0.grad_buffer({B, D});
    Tensor dht = grads[1].to(DType::F32);
    cuda::hgrn_backward(dx.raw(), dg.raw(), f32_or_null(dh0), grads[0].raw(), dht.data<float>(), gv.raw(),
                        f32_or_null(h0), o.raw(), B, T, D, dt);
    return std::vector<Tensor>{dx, dg, s0.grad(dh0)};
  };
  std::vector<Var> outs = record_op({o, ht}, {x, g, initial_state}, backward, "hgrn");
  return {outs[0], outs[1]};
}

DecayAttentionOutput decay_attention_cuda(const Var& q, const Var& k, const Var& v, const Var& g,
                                          const Var& initial_state, double scale, int64_t chunk_size) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), dk = q.size(3), HV = v.size(2), dv = v.size(3);
  const bool vector_gate = g.dim() == 4;
  const DType dt = q.dtype();
  Tensor qv = q.value(), kv = k.value(), vv = v.value(), gv = g.value(), h0 = state_f32(initial_state);
  const StateInfo s0(initial_state);
  Tensor o = device_empty({B, T, HV, dv}, dt);                 // o: (B, T, HV, dv)
  Tensor ht = device_empty({B, HV, dk, dv}, DType::F32);       // ht: (B, HV, dk, dv)
  cuda::decay_attention_forward(o.raw(), ht.data<float>(), qv.raw(), kv.raw(), vv.raw(), gv.raw(), f32_or_null(h0), B,
                                T, H, HV, dk, dv, scale, chunk_size, vector_gate, dt);
  auto backward = [=](const std::vector<Tensor>& grads) {
    Tensor dq = device_empty(qv.shape(), dt), dk_ = device_empty(kv.shape(), dt);
    Tensor dv_ = device_empty(vv.shape(), dt), dg = device_empty(gv.shape(), dt);
    Tensor dh0 = s0.grad_buffer({B, HV, dk, dv});
    Tensor dht = grads[1].to(DType::F32);
    cuda::decay_attention_backward(dq.raw(), dk_.raw(), dv_.raw(), dg.raw(), f32_or_null(dh0), grads[0].raw(),
                                   dht.data<float>(), qv.raw(), kv.raw(), vv.raw(), gv.raw(), f32_or_null(h0), B, T,
                                   H, HV, dk, dv, scale, chunk_size, vector_gate, dt);
    return std::vector<Tensor>{dq, dk_, dv_, dg, s0.grad(dh0)};
  };
  std::vector<Var> outs = record_op({o, ht}, {q, k, v, g, initial_state}, backward, "decay_attention");
  return {outs[0], outs[1]};
}

Rwkv6Output rwkv6_cuda(const Var& r, const Var& k, const Var& v, const Var& w, const Var& u,
                       const Var& initial_state, double scale, int64_t chunk_size) {
  const int64_t B = r.size(0), T = r.size(1), H = r.size(2), dk = r.size(3), dv = v.size(3);
  const DType dt = r.dtype();
  Tensor rv = r.value(), kv = k.value(), vv = v.value(), wv = w.value(), uv = u.value(), h0 = state_f32(initial_state);
  const StateInfo s0(initial_state);
  Tensor o = device_empty({B, T, H, dv}, dt);             // o: (B, T, H, dv)
  Tensor ht = device_empty({B, H, dk, dv}, DType::F32);   // ht: (B, H, dk, dv)
  cuda::rwkv6_forward(o.raw(), ht.data<float>(), rv.raw(), kv.raw(), vv.raw(), wv.raw(), uv.raw(), f32_or_null(h0), B,
                      T, H, dk, dv, scale, chunk_size, dt);
  auto backward = [=](const std::vector<Tensor>& grads) {
    Tensor dr = device_empty(rv.shape(), dt), dk_ = device_empty(kv.shape(), dt);
    Tensor dv_ = device_empty(vv.shape(), dt), dw = device_empty(wv.shape(), dt), du = device_empty(uv.shape(), dt);
    Tensor dh0 = s0.grad_buffer({B, H, dk, dv});
    Tensor dht = grads[1].to(DType::F32);
    cuda::rwkv6_backward(dr.raw(), dk_.raw(), dv_.raw(), dw.raw(), du.raw(), f32_or_null(dh0), grads[0].raw(),
                         dht.data<float>(), rv.raw(), kv.raw(), vv.raw(), wv.raw(), uv.raw(), f32_or_null(h0), B, T, H,
                         dk, dv, scale, chunk_size, dt);
    return std::vector<Tensor>{dr, dk_, dv_, dw, du, s0.grad(dh0)};
  };
  std::vector<Var> outs = record_op({o, ht}, {r, k, v, w, u, initial_state}, backward, "rwkv6");
  return {outs[0], outs[1]};
}

DeltaRuleOutputs delta_rule_cuda(const Var& q, const Var& k, const Var& v, const Var& g, const Var& b, const Var& w,
                                 const Var& initial_state, const cpu::DeltaRuleDims& cd) {
  const cuda::DeltaRuleDims d{cd.B,
                              cd.T,
                              cd.H,
                              cd.HV,
                              cd.dk,
                              cd.dv,
                              cd.gate == cpu::DeltaGate::None     ? cuda::DeltaGate::None
                              : cd.gate == cpu::DeltaGate::Scalar ? cuda::DeltaGate::Scalar
                                                                  : cuda::DeltaGate::Vector,
                              cd.erase_vector,
                              cd.write_vector,
                              cd.scale,
                              cd.chunk_size};
  const bool tied = !w.defined();  // w = b: beta is read twice, its gradient is the sum
  const DType dt = q.dtype();
  Tensor qv = q.value(), kv = k.value(), vv = v.value(), bv = b.value();
  Tensor gv = g.defined() ? g.value() : Tensor();
  Tensor wv = tied ? bv : w.value();
  Tensor h0 = state_f32(initial_state);
  const StateInfo s0(initial_state);
  const bool has_g = g.defined();
  Tensor o = device_empty({d.B, d.T, d.HV, d.dv}, dt);                // o: (B, T, HV, dv)
  Tensor final_state = device_empty({d.B, d.HV, d.dk, d.dv}, DType::F32);
  Tensor residual = device_empty({d.B, d.T, d.HV, d.dv}, dt);         // u: (B, T, HV, dv)
  // u in fp32 for the backward (only when one will run).
  Tensor u_f32 = graph_needs_grad({&q, &k, &v, &g, &b, &w, &initial_state}) ? device_empty(o.shape(), DType::F32)
                                                                              : Tensor();
  cuda::delta_rule_forward(o.raw(), final_state.data<float>(), residual.raw(), qv.raw(), kv.raw(), vv.raw(),
                           raw_or_null(gv), bv.raw(), wv.raw(), f32_or_null(h0), d, f32_or_null(u_f32), dt);
  auto backward = [=](const std::vector<Tensor>& grads) {
    Tensor dq = device_empty(qv.shape(), dt), dk = device_empty(kv.shape(), dt), dv = device_empty(vv.shape(), dt);
    Tensor dg = has_g ? device_empty(gv.shape(), dt) : Tensor();
    Tensor db = device_empty(bv.shape(), dt), dw = device_empty(wv.shape(), dt);
    Tensor dh0 = s0.grad_buffer({d.B, d.HV, d.dk, d.dv});
    Tensor dht = grads[1].to(DType::F32);
    cuda::delta_rule_backward(dq.raw(), dk.raw(), dv.raw(), dg.defined() ? dg.raw() : nullptr, db.raw(), dw.raw(),
                              f32_or_null(dh0), grads[0].raw(), dht.data<float>(), grads[2].raw(), qv.raw(), kv.raw(),
                              vv.raw(), raw_or_null(gv), bv.raw(), wv.raw(), f32_or_null(h0), d, u_f32.data<float>(),
                              dt);
    if (tied) {
      add_(db, dw);  // beta is both the erase and the write gate
      dw = Tensor();
    }
    return std::vector<Tensor>{dq, dk, dv, dg, db, dw, s0.grad(dh0)};
  };
  std::vector<Var> outs =
      record_op({o, final_state, residual}, {q, k, v, g, b, w, initial_state}, backward, "delta_rule");
  return {outs[0], outs[1], outs[2]};
}

#else  // no CUDA backend: there are no GPU tensors to get here with

HgrnOutput hgrn_cuda(const Var&, const Var&, const Var&) { fail("hgrn: this build of hla has no CUDA backend"); }
DecayAttentionOutput decay_attention_cuda(const Var&, const Var&, const Var&, const Var&, const Var&, double, int64_t) {
  fail("decay_attention: this build of hla has no CUDA backend");
}
Rwkv6Output rwkv6_cuda(const Var&, const Var&, const Var&, const Var&, const Var&, const Var&, double, int64_t) {
  fail("rwkv6: this build of hla has no CUDA backend");
}
DeltaRuleOutputs delta_rule_cuda(const Var&, const Var&, const Var&, const Var&, const Var&, const Var&, const Var&,
                                 const cpu::DeltaRuleDims&) {
  fail("delta_rule: this build of hla has no CUDA backend");
}

#endif

}  // namespace hla
