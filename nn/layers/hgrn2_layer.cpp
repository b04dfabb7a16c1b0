// HGRN-2 (mixers.md section 9): GLA's vector-gated state with the key tied to the forget gate,
// k = 1 - exp(g), q = silu(W_q x), v = W_i x, and an RMSNorm over the full width (no gate).
#include "nn/layers/common.h"
#include "nn/layers/mixers.h"
#include "nn/ops/activation.h"
#include "nn/ops/attention.h"
#include "nn/ops/decay_attention.h"
#include "nn/ops/gates.h"
#include "nn/ops/rmsnorm.h"

namespace hla {
namespace {

class Hgrn2Layer : public Mixer {
 public:
  // The output norm's epsilon is 1e-5 whatever norm_eps says: fla fuses it with o_proj
  // (rms_norm_linear), which is called without an eps and so uses its default (compared with
  // fla on the GPU: with norm_eps here the logits differ by 0.18 relative).
  Hgrn2Layer(const ModelConfig& c, ParamStore& store) : store_(store), eps_(1e-5), chunk_(c.chunk_size) {
    D_ = c.hidden_size;
    H_ = c.num_heads;
    dk_ = D_ / H_;  // the lower bound needs H * dk == D
    dv_ = D_ / H_;
    q_ = store.normal("q_proj.weight", {H_ * dk_, D_});
    f_ = store.normal("f_proj.weight", {H_ * dk_, D_});
    i_ = store.normal("i_proj.weight", {D_, D_});
    norm_ = store.constant("g_norm.weight", {D_}, 1.0);
    o_ = store.normal("o_proj.weight", {D_, D_});
  }

  Var forward(const Var& x, MixerIO& io) override {
    Var q = split_heads(silu(project(store_, x, q_)), H_, dk_);  // q = silu(W_q x)
    // log forget gate (B, T, H*dk); 0 at padded tokens (a right-padded prefill), so k = 0 there too
    Var g = zero_at_padding(hgrn_gate(project(store_, x, f_), io.lower_bound), io.state);
    Var k = split_heads(one_minus_exp(g), H_, dk_);               // k = 1 - exp(g)
    Var v = project(store_, x, i_);                               // (B, T, D)
    if (io.want_values) io.values = v;
    Tensor* S = recurrent_slot(io.state);
    DecayAttentionOutput rec = decay_attention(q, k, split_heads(v, H_, dv_), split_heads(g, H_, dk_),
                                               initial_state(S, q), default_attention_scale(dk_), chunk_,
                                               io.keep_chunk_states, io.documents.doc_start);
    keep_state(S, rec.final_state);
    const Var& o = rec.o;
    return project(store_, rmsnorm(merge_heads(o), store_.use(norm_), eps_), o_);
  }

  int64_t value_width() const override { return D_; }

 private:
  ParamStore& store_;
  double eps_;
  int64_t chunk_, D_, H_, dk_, dv_;
  Var q_, f_, i_, norm_, o_;
};

}  // namespace

std::unique_ptr<Mixer> make_hgrn2_layer(const ModelConfig& c, ParamStore& store) {
  return std::make_unique<Hgrn2Layer>(c, store);
}

}  // namespace hla
