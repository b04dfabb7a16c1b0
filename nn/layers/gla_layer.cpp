// GLA (mixers.md section 8): decay linear attention with a data-dependent vector gate from a
// rank-16 projection, g = logsigmoid(gk) / 16, and a swish-gated RMSNorm per head.
#include "nn/layers/common.h"
#include "nn/layers/mixers.h"
#include "nn/ops/attention.h"
#include "nn/ops/decay_attention.h"
#include "nn/ops/gates.h"

namespace hla {
namespace {

class GlaLayer : public Mixer {
 public:
  GlaLayer(const ModelConfig& c, ParamStore& store)
      : store_(store), eps_(c.norm_eps), chunk_(c.chunk_size), proj_(gated_attention_projections(c, store)) {
    int64_t D = c.hidden_size, rank = 16;
    gk0_ = store.normal("gk_proj.0.weight", {rank, D});
    gk1_ = store.normal("gk_proj.1.weight", {proj_.H * proj_.dk, rank});
    gk1_bias_ = store.constant("gk_proj.1.bias", {proj_.H * proj_.dk}, 0.0);
    norm_ = store.constant("g_norm_swish_gate.weight", {proj_.dv}, 1.0);
    o_ = store.normal("o_proj.weight", {D, proj_.H * proj_.dv});
  }

  Var forward(const Var& x, MixerIO& io) override {
    const int64_t H = proj_.H, dk = proj_.dk, dv = proj_.dv;
    Var q = split_heads(project(store_, x, proj_.q), H, dk);  // (B, T, H, dk)
    Var k = split_heads(project(store_, x, proj_.k), H, dk);
    Var v = project(store_, x, proj_.v);                      // (B, T, H*dv)
    if (io.want_values) io.values = v;
    Var gk = project(store_, project(store_, x, gk0_), gk1_, gk1_bias_);  // low-rank gate logits
    Var g = split_heads(gla_gate(gk, 16.0), H, dk);                        // g = logsigmoid(gk) / 16
    Tensor* S = recurrent_slot(io.state);
    // padded tokens (a right-padded prefill) write nothing and decay nothing
    DecayAttentionOutput rec = decay_attention(q, zero_at_padding(k, io.state), split_heads(v, H, dv),
                                               zero_at_padding(g, io.state), initial_state(S, q),
                                               default_attention_scale(dk), chunk_, io.keep_chunk_states,
                                               io.documents.doc_start);
    keep_state(S, rec.final_state);
    const Var& o = rec.o;
    return gated_output(store_, o, x, proj_.g, norm_, o_, eps_);
  }

  int64_t value_width() const override { return proj_.H * proj_.dv; }

 private:
  ParamStore& store_;
  double eps_;
  int64_t chunk_;
  GatedAttentionProjections proj_;
  Var gk0_, gk1_, gk1_bias_, norm_, o_;
};

}  // namespace

std::unique_ptr<Mixer> make_gla_layer(const ModelConfig& c, ParamStore& store) {
  return std::make_unique<GlaLayer>(c, store);
}

}  // namespace hla
