// config.json as fla writes it (PretrainedConfig.save_pretrained, transformers 4.x and 5.x)
// <-> ModelConfig. The table in fla_config.cpp lists, per fla model_type, every field fla's
// config class writes and what it means in hla:
//   honoured  read into a ModelConfig field (and written back from it)
//   ignored   changes neither the outputs nor the initialisation (kernel choice, fusion, dtype,
//             caching, token ids, transformers' bookkeeping; each row says why); kept as read in
//             ModelConfig::fla_kept and written back unchanged, fla's default when absent
//   fixed     hla implements one value (fla's default); any other is an error naming the
//             file, the field, the value and the value hla supports
// hla's own settings that fla has no field for (chunk_size except for Mamba-2, routing) live
// in a block "hla": {...}, written only when they differ from hla's defaults; fla's config
// classes keep an unknown key as an attribute, so fla loads these files too.
//
// gdn2 has no fla model class (fla has GDN-2's ops and layer only): hla writes and reads
// model_type "gdn2" with Gated DeltaNet's field names, and fla's classes cannot load it.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "nn/config.h"

namespace hla {

// Whether j reads as an fla config.json: every key is a field of fla's config for its
// model_type (or the "hla" / "attn" blocks). Otherwise it is hla's own format (config.h).
bool is_fla_config(const nlohmann::json& j);

// The first key of j that is not a field of fla's config for j's model_type ("" if none).
std::string first_non_fla_field(const nlohmann::json& j);

// Reads an fla config.json (is_fla_config) over `defaults`, without validate(); every error
// starts with `source` and names the field.
ModelConfig parse_fla_config(const nlohmann::json& j, const std::string& source, const ModelConfig& defaults);

// config.json as fla's config class for c.model_type would write it: every field of the
// table, fla's defaults for the fields hla does not use (or the values read, fla_kept).
nlohmann::json fla_config_json(const ModelConfig& c);

}  // namespace hla
