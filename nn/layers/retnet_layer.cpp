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
  RetNetLayer(const ModelConfig& c, ParamStore& store)
      : store_(store), eps_(c.norm_eps), chunk_(c.chunk_size), proj_(gated_attention_projections(c, store)) {
    int64_t D = c.hidden_size;
    norm_ = store.constant("g_norm_swish_gate.weight", {proj_.dv}, 1.0);
    o_ = store.normal("o_proj.weight", {D, proj_.H * proj_.dv});
  }

  Var forward(const Var& x, MixerIO& io) override {
    const int64_t H = proj_.H, dk = proj_.dk, dv = proj_.dv;
    int64_t B = x.size(0), T = x.size(1);
    Var q = rotate(split_heads(project(store_, x, proj_.q), H, dk), io);  // (B, T, H, dk)
    Var k = rotate(split_heads(project(store_, x, proj_.k), H, dk), io);
    Var v = project(store_, x, proj_.v);                                      // (B, T, H*dv)
    if (io.want_values) io.values = v;
    Var g(constant_gate(B, T, x.dtype(), x.device()), false);
    Tensor* S = recurrent_slot(io.state);
    // padded tokens (a right-padded prefill) write nothing and decay nothing
    DecayAttentionOutput rec = decay_attention(q, zero_at_padding(k, io.state), split_heads(v, H, dv),
                                               zero_at_padding(g, io.state), initial_state(S, q),
                                               default_attention_scale(dk), chunk_, io.keep_chunk_states,
                                               io.documents.doc_start);
    keep_state(S, rec.final_state);
    return gated_output(store_, rec.o, x, proj_.g, norm_, o_, eps_);
  }

  int64_t value_width() const override { return proj_.H * proj_.dv; }

 private:
  // RoPE (theta 10000) from position 0, from each sequence's position when decoding, or from
  // each packed document's start.
  static Var rotate(const Var& x, const MixerIO& io) {
    if (io.state) return rope(x, 10000.0, io.state->positions);
    if (io.documents.doc_start.defined()) return rope(x, 10000.0, io.documents.positions);
    return rope(x, 10000.0);
  }

  // The constant log gate g_h = ln(1 - 2^(-5-h)), the same at every token: (B, T, H). Built on
  // the host once per shape, dtype and device, then reused (it never needs a gradient).
  Tensor constant_gate(int64_t B, int64_t T, DType dtype, Device device) {
    const Tensor& c = gate_cache_;
    if (c.defined() && c.size(0) == B && c.size(1) == T && c.dtype() == dtype && c.device() == device) return c;
    std::vector<double> gates(B * T * proj_.H);
    std::vector<double> per_head = retnet_gate(proj_.H, DType::F64).to_f64_vector();
    for (size_t i = 0; i < gates.size(); i++) gates[i] = per_head[i % proj_.H];
    gate_cache_ = Tensor::from_f64(gates, {B, T, proj_.H}, dtype).to(device);
    return gate_cache_;
  }


  ParamStore& store_;
  double eps_;
  int64_t chunk_;
  GatedAttentionProjections proj_;
  Var norm_, o_;
  Tensor gate_cache_;
};

}  // namespace

std::unique_ptr<Mixer> make_retnet_layer(const ModelConfig& c, ParamStore& store) {
  return std::make_unique<RetNetLayer>(c, store);
}

}  // namespace hla
