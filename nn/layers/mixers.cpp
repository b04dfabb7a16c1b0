// The rows of the mixer table (see mixers.h for what each column means).
#include "nn/layers/mixers.h"

#include <sstream>

#include "tensor/json.h"

namespace hla {

bool MixerSpec::serves(Routing r) const {
  switch (r) {
    case Routing::None: return true;
    case Routing::Clvr: return routes_values;
    case Routing::Cler:
    case Routing::ClerH: return routes_error;
  }
  return false;
}

const std::vector<MixerSpec>& mixer_table() {
  using F = MixerFamily;
  using B = BlockStyle;
  using H = HeadShape;
  using V = ValueHeads;
  using C = ShortConv;
  // clang-format off
  static const std::vector<MixerSpec> table = {
  // model_type        family             factory                     block        heads        num_v_heads     conv        N      lb     CLVR   CLER
    {"transformer",    F::Attention,      make_attention_layer,       B::Standard, H::None,     V::Unused,      C::None,     false, false, false, false},
    {"hgrn",           F::Hgrn,           make_hgrn_layer,            B::Standard, H::None,     V::Unused,      C::None,     false, true,  true,  false},
    {"retnet",         F::DecayAttention, make_retnet_layer,          B::Standard, H::Expand,   V::Unused,      C::None,     false, false, true,  false},
    {"gla",            F::DecayAttention, make_gla_layer,             B::Standard, H::Expand,   V::Unused,      C::None,     false, false, true,  false},
    {"hgrn2",          F::DecayAttention, make_hgrn2_layer,           B::Standard, H::Split,    V::Unused,      C::None,     false, true,  true,  false},
    {"mamba2",         F::DecayAttention, make_mamba2_layer,          B::Mamba2,   H::InnerByP, V::Unused,      C::Always,   true,  false, true,  false},
    {"rwkv6",          F::Rwkv6,          make_rwkv6_layer,           B::Rwkv6,    H::Expand,   V::Unused,      C::None,     false, false, true,  false},
    {"delta_net",      F::DeltaRule,      make_delta_net_layer,       B::Standard, H::HeadDim,  V::SameAsHeads, C::Optional, false, false, true,  true},
    {"gated_deltanet", F::DeltaRule,      make_gated_deltanet_layer,  B::Standard, H::HeadDim,  V::Grouped,     C::Optional, false, false, true,  true},
    {"kda",            F::DeltaRule,      make_kda_layer,             B::Standard, H::HeadDim,  V::Grouped,     C::Optional, false, false, true,  true},
    {"gdn2",           F::DeltaRule,      make_gdn2_layer,            B::Standard, H::HeadDim,  V::SameAsHeads, C::Optional, false, false, true,  true},
  };
  // clang-format on
  return table;
}

const MixerSpec& find_mixer(const std::string& model_type, const std::string& source) {
  for (const MixerSpec& m : mixer_table())
    if (model_type == m.model_type) return m;
  std::ostringstream names;
  for (const MixerSpec& m : mixer_table()) names << " " << m.model_type;
  fail(source, ": model_type '", excerpt(model_type), "' is not a mixer hla knows; one of:", names.str());
}

}  // namespace hla
