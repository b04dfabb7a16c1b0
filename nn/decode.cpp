// Decoding state arithmetic and the Decoder (see decode.h).
#include "nn/decode.h"

#include <algorithm>

#include "nn/layers/mixers.h"

namespace hla {
namespace {

// The recurrent state's heads and widths of a linear layer, from the mixer table's head shape
// (the same rules the layers apply): S is (HV, dk, dv) per sequence, the short convolution runs
// over q and k (qk_heads * dk each) and v (HV * dv).
struct StateShape {
  int64_t qk_heads = 0, v_heads = 0, dk = 0, dv = 0;
};

StateShape state_shape(const ModelConfig& c) {
  const int64_t D = c.hidden_size, H = c.num_heads;
  StateShape s;
  switch (c.mixer().heads) {
    case HeadShape::None: break;  // HGRN: D scalar states, no heads
    case HeadShape::Expand:
      s = {H, H, static_cast<int64_t>(D * c.expand_k) / H, static_cast<int64_t>(D * c.expand_v) / H};
      break;
    case HeadShape::Split: s = {H, H, D / H, D / H}; break;
    case HeadShape::HeadDim:
      s = {H, c.value_heads(), c.key_head_dim(), static_cast<int64_t>(c.key_head_dim() * c.expand_v)};
      break;
    case HeadShape::InnerByP: {  // Mamba-2: one shared B/C head of width N, inner / P value heads
      const int64_t inner = static_cast<int64_t>(D * c.expand_v), P = c.key_head_dim();
      s = {1, inner / P, c.state_size, P};
      break;
    }
  }
  return s;
}

}  // namespace

DecodeMemory decode_memory(const ModelConfig& c, int64_t context, DType activation) {
  HLA_CHECK_INPUT(context >= 0, "decode_memory: context must be >= 0, got ", context);
  const int64_t act = static_cast<int64_t>(dtype_size(activation)), f32 = 4, D = c.hidden_size;
  const bool rwkv = c.mixer().block == BlockStyle::Rwkv6;
  const StateShape s = state_shape(c);
  DecodeMemory m;
  for (int i = 0; i < c.num_hidden_layers; i++) {
    if (rwkv) m.state_bytes += D * act;  // the channel mix's token shift, in every block
    if (c.is_attention_layer(i)) {
      const int64_t d = D / c.attn_heads();
      const int64_t slots = c.attn.window_size > 0 ? std::min<int64_t>(context, c.attn.window_size) : context;
      m.kv_bytes += 2 * c.attn_kv_heads() * d * slots * act;  // K and V
      continue;
    }
    if (c.mixer().family == MixerFamily::Hgrn) m.state_bytes += D * f32;
    else m.state_bytes += s.v_heads * s.dk * s.dv * f32;
    if (c.uses_short_conv()) m.state_bytes += (2 * s.qk_heads * s.dk + s.v_heads * s.dv) * (c.conv_size - 1) * act;
    if (rwkv) m.state_bytes += D * act;  // the time mix's token shift
  }
  return m;
}

}  // namespace hla
