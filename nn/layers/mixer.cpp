// make_mixer: softmax attention for the attention layers of a hybrid, the native mixer elsewhere.
#include "nn/layers/mixers.h"

namespace hla {

std::unique_ptr<Mixer> make_mixer(const ModelConfig& c, int layer, ParamStore& store) {
  if (c.is_attention_layer(layer)) return make_attention_layer(c, store);
  return c.mixer().make(c, store);
}

}  // namespace hla
