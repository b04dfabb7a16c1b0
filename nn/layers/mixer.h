// The sequence-mixer interface every layer implements, and the factory that picks one by
// model_type. A mixer maps (B, T, D) -> (B, T, D); it may also expose what cross-layer routing
// needs: its values (CLVR) and its delta-rule write residual (CLER, CLER-H), and accept the
// residual routed from a lower layer (CLER).
#pragma once
#include <memory>

#include "nn/config.h"
#include "nn/layers/params.h"

namespace hla {

struct MixerIO {
  Var lower_bound;   // in (HGRN, HGRN-2): this layer's forget-gate lower bound lb, (D), from model.lower_bounds
  Var routed_error;  // in (CLER): r of the nearest lower routing-capable layer, (B, T, value_width)
  Var values;        // out (CLVR): v after conv + SiLU, flattened over heads, (B, T, value_width)
  Var error;         // out (CLER, CLER-H): write residual beta * (v - S'^T k), (B, T, value_width)
  bool want_values = false;
  bool want_error = false;
};

class Mixer {
 public:
  virtual ~Mixer() = default;
  virtual Var forward(const Var& x, MixerIO& io) = 0;  // x: (B, T, D) -> (B, T, D)
  virtual int64_t value_width() const { return 0; }      // HV * dv; 0 when routing is unsupported
  virtual bool produces_error() const { return false; }  // delta-rule mixers
};

// Builds layer `layer`'s mixer for config (softmax attention for attention layers); its
// parameters are created in `store` under the current scope ("model.layers.{i}.attn.").
std::unique_ptr<Mixer> make_mixer(const ModelConfig& config, int layer, ParamStore& store);

}  // namespace hla
