// ModelConfig <-> config.json, the hybrid shorthand and validation (see config.h).
#include "nn/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "tensor/error.h"

namespace hla {

const std::vector<std::string> kMixerTypes = {"transformer", "hgrn",      "retnet",         "gla",
                                              "hgrn2",       "mamba2",    "rwkv6",          "delta_net",
                                              "gated_deltanet", "kda",    "gdn2"};

std::vector<int> hybrid_attention_layers(int num_layers, const std::string& hybrid) {
  std::vector<int> layers;
  if (hybrid == "pure") return layers;
  if (hybrid == "transformer") {
    for (int i = 0; i < num_layers; i++) layers.push_back(i);
    return layers;
  }
  int r = 0;
  char tail[8] = {0};
  if (std::sscanf(hybrid.c_str(), "%d:%7s", &r, tail) != 2 || std::string(tail) != "1" || r < 1)
    fail("hybrid '", hybrid, "' is not one of pure, transformer or r:1 (e.g. 24:1, 12:1, 6:1, 3:1)");
  for (int i = 0; i < num_layers; i++)
    if ((i + 1) % r == 0) layers.push_back(i);  // one attention layer closes each group of r
  return layers;
}

void ModelConfig::set_hybrid(const std::string& hybrid) {
  attn.layers = hybrid_attention_layers(num_hidden_layers, hybrid);
  has_attn = !attn.layers.empty();
}

bool ModelConfig::is_attention_layer(int i) const {
  if (model_type == "transformer") return true;
  return std::find(attn.layers.begin(), attn.layers.end(), i) != attn.layers.end();
}

std::string ModelConfig::pattern() const {
  // Group by the distance between attention layers when it is regular, else by 6.
  int group = 6;
  if (attn.layers.size() >= 1 && model_type != "transformer") {
    int first = attn.layers[0] + 1;
    bool regular = true;
    for (size_t i = 0; i < attn.layers.size(); i++)
      regular = regular && attn.layers[i] == static_cast<int>((i + 1) * first - 1);
    if (regular && first > 1) group = first;
  }
  std::string s;
  for (int i = 0; i < num_hidden_layers; i++) {
    if (i > 0 && i % group == 0) s += ' ';
    s += is_attention_layer(i) ? 'A' : 'L';
  }
  return s;
}

int ModelConfig::key_head_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_heads; }

int ModelConfig::mlp_intermediate_size() const {
  if (intermediate_size > 0) return intermediate_size;
  // I = 256 * ceil(floor(D * hidden_ratio * 2/3) / 256)   (mixers.md 2.8)
  int64_t base = static_cast<int64_t>(std::floor(hidden_size * hidden_ratio * 2.0 / 3.0));
  return static_cast<int>(256 * ((base + 255) / 256));
}

void ModelConfig::validate(const std::string& source) const {
  if (std::find(kMixerTypes.begin(), kMixerTypes.end(), model_type) == kMixerTypes.end()) {
    std::ostringstream os;
    for (const auto& m : kMixerTypes) os << " " << m;
    fail(source, ": model_type '", model_type, "' is not a mixer hla knows; one of:", os.str());
  }
  HLA_CHECK(hidden_size > 0 && num_hidden_layers > 0 && num_heads > 0 && vocab_size > 0, source,
            ": hidden_size, num_hidden_layers, num_heads and vocab_size must be positive");
  HLA_CHECK(hidden_size % num_heads == 0 || head_dim > 0, source, ": hidden_size ", hidden_size,
            " is not divisible by num_heads ", num_heads, " (set head_dim)");
  std::set<int> seen;
  for (int i : attn.layers) {
    HLA_CHECK(i >= 0 && i < num_hidden_layers, source, ": attn.layers has index ", i,
              " outside [0, ", num_hidden_layers, ")");
    HLA_CHECK(seen.insert(i).second, source, ": attn.layers lists layer ", i, " twice");
  }
  if (has_attn || model_type == "transformer") {
    int h = attn.num_heads > 0 ? attn.num_heads : num_heads;
    int kv = attn.num_kv_heads > 0 ? attn.num_kv_heads : h;
    HLA_CHECK(hidden_size % h == 0, source, ": attn.num_heads ", h, " does not divide hidden_size ", hidden_size);
    HLA_CHECK(h % kv == 0, source, ": attn.num_heads ", h, " is not a multiple of num_kv_heads ", kv);
  }
  const std::set<std::string> routings = {"none", "clvr", "cler", "cler_h"};
  HLA_CHECK(routings.count(routing), source, ": routing '", routing, "' is not one of none, clvr, cler, cler_h");
  if (routing != "none")
    HLA_CHECK(model_type == "delta_net" || model_type == "gated_deltanet" || model_type == "kda" ||
                  model_type == "gdn2" || routing == "clvr",
              source, ": routing '", routing, "' needs a delta-rule mixer (delta_net, gated_deltanet, kda, gdn2)");
}

namespace {

// Reads field `key` of `j` into `out` when present, with a typed error naming the file.
template <class T>
void read_field(const nlohmann::json& j, const char* key, T& out, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return;
  try {
    out = j[key].get<T>();
  } catch (const std::exception&) {
    fail(source, ": field '", key, "' has the wrong type: ", j[key].dump());
  }
}

const std::set<std::string> kKnownFields = {
    "model_type", "hidden_size", "num_hidden_layers", "num_heads", "num_v_heads", "head_dim",
    "expand_v", "expand_k", "intermediate_size", "hidden_ratio", "vocab_size", "norm_eps",
    "conv_size", "state_size", "chunk_size", "use_short_conv", "tie_word_embeddings", "initializer_range", "routing", "attn",
    "hybrid", "architectures", "torch_dtype", "transformers_version", "fuse_norm", "fuse_swiglu",
    "fuse_cross_entropy", "bos_token_id", "eos_token_id", "pad_token_id", "hidden_act",
    "max_position_embeddings", "use_cache"};
const std::set<std::string> kKnownAttnFields = {"layers", "num_heads", "num_kv_heads", "rope_theta",
                                                "window_size", "qkv_bias"};

}  // namespace

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& source) {
  HLA_CHECK(j.is_object(), source, ": a model config must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it)
    HLA_CHECK(kKnownFields.count(it.key()), source, ": unknown field '", it.key(), "'");
  ModelConfig c;
  read_field(j, "model_type", c.model_type, source);
  read_field(j, "hidden_size", c.hidden_size, source);
  read_field(j, "num_hidden_layers", c.num_hidden_layers, source);
  read_field(j, "num_heads", c.num_heads, source);
  read_field(j, "num_v_heads", c.num_v_heads, source);
  read_field(j, "head_dim", c.head_dim, source);
  read_field(j, "expand_v", c.expand_v, source);
  read_field(j, "expand_k", c.expand_k, source);
  read_field(j, "intermediate_size", c.intermediate_size, source);
  read_field(j, "hidden_ratio", c.hidden_ratio, source);
  read_field(j, "vocab_size", c.vocab_size, source);
  read_field(j, "norm_eps", c.norm_eps, source);
  read_field(j, "conv_size", c.conv_size, source);
  read_field(j, "state_size", c.state_size, source);
  read_field(j, "chunk_size", c.chunk_size, source);
  read_field(j, "use_short_conv", c.use_short_conv, source);
  read_field(j, "tie_word_embeddings", c.tie_word_embeddings, source);
  read_field(j, "initializer_range", c.initializer_range, source);
  read_field(j, "routing", c.routing, source);
  if (j.contains("attn") && !j["attn"].is_null()) {
    const auto& a = j["attn"];
    HLA_CHECK(a.is_object(), source, ": field 'attn' must be an object {layers, num_heads, ...}");
    for (auto it = a.begin(); it != a.end(); ++it)
      HLA_CHECK(kKnownAttnFields.count(it.key()), source, ": unknown field 'attn.", it.key(), "'");
    HLA_CHECK(a.contains("layers"), source, ": 'attn' needs a 'layers' list");
    read_field(a, "layers", c.attn.layers, source);
    read_field(a, "num_heads", c.attn.num_heads, source);
    read_field(a, "num_kv_heads", c.attn.num_kv_heads, source);
    read_field(a, "rope_theta", c.attn.rope_theta, source);
    read_field(a, "window_size", c.attn.window_size, source);
    c.has_attn = true;
  }
  if (j.contains("hybrid")) {
    HLA_CHECK(!j.contains("attn"), source, ": give either 'hybrid' or 'attn.layers', not both");
    std::string h;
    read_field(j, "hybrid", h, source);
    c.set_hybrid(h);
  }
  c.validate(source);
  return c;
}

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json j = {{"model_type", model_type},
                      {"hidden_size", hidden_size},
                      {"num_hidden_layers", num_hidden_layers},
                      {"num_heads", num_heads},
                      {"num_v_heads", num_v_heads > 0 ? num_v_heads : num_heads},
                      {"head_dim", key_head_dim()},
                      {"expand_v", expand_v},
                      {"expand_k", expand_k},
                      {"intermediate_size", mlp_intermediate_size()},
                      {"hidden_ratio", hidden_ratio},
                      {"vocab_size", vocab_size},
                      {"norm_eps", norm_eps},
                      {"conv_size", conv_size},
                      {"state_size", state_size},
                      {"chunk_size", chunk_size},
                      {"use_short_conv", use_short_conv},
                      {"tie_word_embeddings", tie_word_embeddings},
                      {"initializer_range", initializer_range},
                      {"routing", routing}};
  if (has_attn)
    j["attn"] = {{"layers", attn.layers},
                 {"num_heads", attn.num_heads > 0 ? attn.num_heads : num_heads},
                 {"num_kv_heads", attn.num_kv_heads > 0 ? attn.num_kv_heads
                                                        : (attn.num_heads > 0 ? attn.num_heads : num_heads)},
                 {"rope_theta", attn.rope_theta},
                 {"window_size", attn.window_size > 0 ? nlohmann::json(attn.window_size) : nlohmann::json()}};
  return j;
}

ModelConfig ModelConfig::load(const std::string& path) {
  std::ifstream f(path);
  HLA_CHECK(f, path, ": cannot open model config");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
  return from_json(j, path);
}

void ModelConfig::save(const std::string& path) const {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    HLA_CHECK(f, "cannot write ", tmp);
    f << to_json().dump(2) << "\n";
    HLA_CHECK(f.good(), "write to ", tmp, " failed");
  }
  HLA_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp, " to ", path);
}

}  // namespace hla
