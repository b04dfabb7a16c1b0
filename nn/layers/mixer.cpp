// make_mixer: softmax attention for the attention layers of a hybrid, the native mixer elsewhere.
#include "nn/layers/mixers.h"

namespace hla {

std::unique_ptr<Mixer> make_mixer(const ModelConfig& c, int layer, ParamStore& store) {
  if (c.is_attention_layer(layer)) return make_attention_layer(c, store);
  const std::string& t = c.model_type;
  if (t == "hgrn") return make_hgrn_layer(c, layer, store);
  if (t == "retnet") return make_retnet_layer(c, store);
  if (t == "gla") return make_gla_layer(c, store);
  if (t == "hgrn2") return make_hgrn2_layer(c, layer, store);
  if (t == "mamba2") return make_mamba2_layer(c, store);
  if (t == "rwkv6") return make_rwkv6_layer(c, store);
  if (t == "delta_net" || t == "gated_deltanet" || t == "kda" || t == "gdn2") return make_delta_layer(c, store);
  fail("model_type '", t, "' has no mixer layer");
}

}  // namespace hla
