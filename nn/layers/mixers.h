// Constructors of the individual mixer layers (one file each in nn/layers/); make_mixer in
// mixer.cpp picks one by model_type. Parameters are created under the caller's scope.
#pragma once
#include "nn/layers/mixer.h"

namespace hla {

std::unique_ptr<Mixer> make_attention_layer(const ModelConfig& c, ParamStore& store);
std::unique_ptr<Mixer> make_hgrn_layer(const ModelConfig& c, int layer, ParamStore& store);
std::unique_ptr<Mixer> make_retnet_layer(const ModelConfig& c, ParamStore& store);
std::unique_ptr<Mixer> make_gla_layer(const ModelConfig& c, ParamStore& store);
std::unique_ptr<Mixer> make_hgrn2_layer(const ModelConfig& c, int layer, ParamStore& store);
std::unique_ptr<Mixer> make_mamba2_layer(const ModelConfig& c, ParamStore& store);
std::unique_ptr<Mixer> make_rwkv6_layer(const ModelConfig& c, ParamStore& store);
// DeltaNet, Gated DeltaNet, KDA and GDN-2 share one layer with per-mixer settings.
std::unique_ptr<Mixer> make_delta_layer(const ModelConfig& c, ParamStore& store);

}  // namespace hla
