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
  GlaLayer(const ModelConfig& c, ParamStore& store) : store_(store), eps_(c.norm_eps), chunk_(c.chunk_size) {
    int64_t D = c.hidden_size, rank = 16;
    H_ = c.num_heads;
    dk_ = static_cast<int64_t>(D * c.expand_k) / H_;
    dv_ = static_cast<int64_t>(D * c.expand_v) / H_;
    q_ = store.normal("q_proj.weight", {H_ * dk_, D});
    k_ = store.normal("k_proj.weight", {H_ * dk_, D});
    v_ = store.normal("v_proj.weight", {H_ * dv_, D});
    g_ = store.normal("g_proj.weight", {H_ * dv_, D});
    gk0_ = store.normal("gk_proj.0.weight", {rank, D});
    gk1_ = store.normal("gk_proj.1.weight", {H_ * dk_, rank});
    gk1_bias_ = store.constant("gk_proj.1.bias", {H_ * dk_}, 0.0);
    norm_ = store.constant("g_norm_swish_gate.weight", {dv_}, 1.0);
    o_ = store.normal("o_proj.weight", {D, H_ * dv_});
  }

  Var forward(const Var& x, MixerIO& io) override {
    Var q = split_heads(project(store_, x, q_), H_, dk_);  // (B, T, H, dk)
    Var k = split_heads(project(store_, x, k_), H_, dk_);
    Var v = project(store_, x, v_);                        // (B, T, H*dv)
    if (io.want_values) io.values = v;
    Var gk = project(store_, project(store_, x, gk0_), gk1_, gk1_bias_);  // low-rank gate logits
    Var g = split_heads(gla_gate(gk, 16.0), H_, dk_);                      // g = logsigmoid(gk) / 16
    Var o = decay_attention(q, k, split_heads(v, H_, dv_), g, Var(), default_attention_scale(dk_), chunk_).o;
    return gated_output(store_, o, x, g_, norm_, o_, eps_);
  }

  int64_t value_width() const override { return H_ * dv_; }

 private:
  ParamStore& store_;
  double eps_;
  int64_t chunk_, H_, dk_, dv_;
  Var q_, k_, v_, g_, gk0_, gk1_, gk1_bias_, norm_, o_;
};

}  // namespace

std::unique_ptr<Mixer> make_gla_layer(const ModelConfig& c, ParamStore& store) {
  return std::make_unique<GlaLayer>(c, store);
}

}  // namespace hla
