// RetNet multi-scale retention (mixers.md section 7): decay linear attention with a constant
// per-head gate gamma_h = 1 - 2^(-5-h), RoPE on q and k, swish-gated RMSNorm per head.
#include "nn/layers/common.h"
#include "nn/layers/mixers.h"
#include "nn/ops/attention.h"
#include "nn/ops/decay_attention.h"
#include "nn/ops/gates.h"
#include "nn/ops/rope.h"

namespace hla {
namespace {

class RetNetLayer : public Mixer {
 public:
  RetNetLayer(const ModelConfig& c, ParamStore& store) : store_(store), eps_(c.norm_eps), chunk_(c.chunk_size) {
    int64_t D = c.hidden_size;
    H_ = c.num_heads;
    dk_ = static_cast<int64_t>(D * c.expand_k) / H_;
    dv_ = static_cast<int64_t>(D * c.expand_v) / H_;
    q_ = store.normal("q_proj.weight", {H_ * dk_, D});
    k_ = store.normal("k_proj.weight", {H_ * dk_, D});
    v_ = store.normal("v_proj.weight", {H_ * dv_, D});
    g_ = store.normal("g_proj.weight", {H_ * dv_, D});
    norm_ = store.constant("g_norm_swish_gate.weight", {dv_}, 1.0);
    o_ = store.normal("o_proj.weight", {D, H_ * dv_});
  }

  Var forward(const Var& x, MixerIO& io) override {
    int64_t B = x.size(0), T = x.size(1);
    Var q = rope(split_heads(project(store_, x, q_), H_, dk_), 10000.0);  // (B, T, H, dk)
    Var k = rope(split_heads(project(store_, x, k_), H_, dk_), 10000.0);
    Var v = project(store_, x, v_);                                       // (B, T, H*dv)
    if (io.want_values) io.values = v;
    Var g(constant_gate(B, T, x.dtype(), x.device()), false);
    Var o = decay_attention(q, k, split_heads(v, H_, dv_), g, Var(), default_attention_scale(dk_), chunk_).o;
    return gated_output(store_, o, x, g_, norm_, o_, eps_);
  }

  int64_t value_width() const override { return H_ * dv_; }

 private:
  // The constant log gate g_h = ln(1 - 2^(-5-h)), the same at every token: (B, T, H). Built on
  // the host once per shape, dtype and device, then reused (it never needs a gradient).
  Tensor constant_gate(int64_t B, int64_t T, DType dtype, Device device) {
    const Tensor& c = gate_cache_;
    if (c.defined() && c.size(0) == B && c.size(1) == T && c.dtype() == dtype && c.device() == device) return c;
    std::vector<double> gates(B * T * H_);
    std::vector<double> per_head = retnet_gate(H_, DType::F64).to_f64_vector();
    for (size_t i = 0; i < gates.size(); i++) gates[i] = per_head[i % H_];
    gate_cache_ = Tensor::from_f64(gates, {B, T, H_}, dtype).to(device);
    return gate_cache_;
  }


  ParamStore& store_;
  double eps_;
  int64_t chunk_, H_, dk_, dv_;
  Var q_, k_, v_, g_, norm_, o_;
  Tensor gate_cache_;
};

}  // namespace

std::unique_ptr<Mixer> make_retnet_layer(const ModelConfig& c, ParamStore& store) {
  return std::make_unique<RetNetLayer>(c, store);
}

}  // namespace hla
