// HGRN layer (mixers.md section 6): an elementwise gated recurrence over E = D channels.
//   i = W_i x ; f = W_f x ; g = log(lb + (1 - lb) sigma(f)) ; i' = silu(i) * (1 - exp(g))
//   h_t = exp(g_t) h_{t-1} + i'_t ;  y = W_o FusedRMSNormGated_E(h, W_g x ; swish)
// lb is this layer's lower bound from model.lower_bounds (lb_0 = 0 gives logsigmoid(f)).
#include "nn/layers/common.h"
#include "nn/layers/mixers.h"
#include "nn/ops/activation.h"
#include "nn/ops/gated_norm.h"
#include "nn/ops/gates.h"
#include "nn/ops/hgrn.h"

namespace hla {
namespace {

class HgrnLayer : public Mixer {
 public:
  HgrnLayer(const ModelConfig& c, ParamStore& store) : store_(store), eps_(c.norm_eps) {
    int64_t D = c.hidden_size, E = D;  // expand_ratio 1: the lower bound needs E == D
    i_ = store.normal("i_proj.weight", {E, D});
    f_ = store.normal("f_proj.weight", {E, D});
    g_ = store.normal("g_proj.weight", {E, D});
    norm_ = store.constant("g_norm.weight", {E}, 1.0);
    o_ = store.normal("o_proj.weight", {D, E});
    width_ = E;
  }

  Var forward(const Var& x, MixerIO& io) override {
    Var i = project(store_, x, i_);                                  // (B, T, E)
    Var g = hgrn_gate(project(store_, x, f_), io.lower_bound);       // log forget gate (B, T, E)
    Var input = mul(silu(i), one_minus_exp(g));                      // i' = silu(i) * (1 - exp(g))
    if (io.want_values) io.values = input;
    Tensor* S = recurrent_slot(io.state);
    // h_t = e^g h_{t-1} + i'_t; padded tokens (a right-padded prefill) write nothing and decay nothing
    // packed documents (io.documents): h restarts from 0 at each document start; the rest is per token
    HgrnOutput rec = hgrn(zero_at_padding(input, io.state), zero_at_padding(g, io.state), initial_state(S, input),
                          io.documents.doc_start.tensor());
    keep_state(S, rec.final_state);
    const Var& h = rec.o;
    Var y = gated_rmsnorm(h, project(store_, x, g_), store_.use(norm_), eps_, GateAct::Swish);
    return project(store_, y, o_);
  }

  int64_t value_width() const override { return width_; }

 private:
  ParamStore& store_;
  double eps_;
  int64_t width_;
  Var i_, f_, g_, norm_, o_;
};

}  // namespace

std::unique_ptr<Mixer> make_hgrn_layer(const ModelConfig& c, ParamStore& store) {
  return std::make_unique<HgrnLayer>(c, store);
}

}  // namespace hla
