// fla interop: config.json as fla's save_pretrained writes it (transformers 4.x and 5.x) loads
// into the right ModelConfig fields and is written back field for field; weights round-trip
// fla -> hla -> fla byte for byte, sharded and bf16 checkpoints load, and bad input fails
// with the exact message (file, field, value, what hla supports). The files below are written
// by hand from fla's configuration_*.py (fla's source is not in the repository);
// scripts/fla_export.py and scripts/fla_compare.sh check against files fla itself wrote.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "nn/config.h"
#include "nn/fla_config.h"
#include "nn/model.h"
#include "nn/weights.h"
#include "tensor/safetensors.h"
#include "tests/test_half.h"
#include "tests/test_util.h"

using namespace hla;
using hla::testing::error_of;
using hla::testing::max_rel_err;
namespace fs = std::filesystem;

namespace {

struct ScratchDir {
  std::string path;
  explicit ScratchDir(const std::string& tag)
      : path((fs::temp_directory_path() / ("hla_test_fla_" + tag + "_" + std::to_string(getpid()))).string()) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
};

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A Gated DeltaNet hybrid as fla 4.x's save_pretrained writes it (json.dumps, sorted keys).
const char* const kGdnHybrid = R"({
  "allow_neg_eigval": false,
  "architectures": ["GatedDeltaNetForCausalLM"],
  "attn": {"layers": [1, 3], "num_heads": 4, "num_kv_heads": 2, "qkv_bias": false, "rope_theta": 10000.0, "window_size": null},
  "attn_mode": "chunk",
  "attnres_block_size": null,
  "bos_token_id": 1,
  "conv_size": 4,
  "eos_token_id": 2,
  "expand_v": 1,
  "fuse_cross_entropy": true,
  "fuse_linear_cross_entropy": false,
  "fuse_norm": false,
  "fuse_swiglu": true,
  "head_dim": 16,
  "hidden_act": "swish",
  "hidden_ratio": 4,
  "hidden_size": 64,
  "initializer_range": 0.02,
  "intermediate_size": null,
  "max_position_embeddings": 4096,
  "model_type": "gated_deltanet",
  "norm_eps": 1e-06,
  "num_heads": 2,
  "num_hidden_layers": 4,
  "num_v_heads": 4,
  "tie_word_embeddings": false,
  "torch_dtype": "float32",
  "transformers_version": "4.57.1",
  "use_cache": true,
  "use_gate": true,
  "use_l2warp": false,
  "use_short_conv": true,
  "vocab_size": 128
})";

// Mamba-2 as transformers 4.x writes it: dt_limit's infinity is Python's bare Infinity.
const char* const kMamba2 = R"({
  "A_init_range": [1, 16],
  "D_has_hdim": false,
  "architectures": ["Mamba2ForCausalLM"],
  "bos_token_id": 1,
  "chunk_size": 64,
  "conv_init": null,
  "conv_kernel": 4,
  "dt_init_floor": 0.0001,
  "dt_limit": [0.0, Infinity],
  "dt_max": 0.1,
  "dt_min": 0.001,
  "eos_token_id": 2,
  "expand": 2,
  "fuse_cross_entropy": true,
  "fuse_linear_cross_entropy": false,
  "fuse_norm": true,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 64,
  "initializer_range": 0.02,
  "model_type": "mamba2",
  "n_groups": 1,
  "norm_before_gate": false,
  "norm_eps": 1e-05,
  "num_heads": 8,
  "num_hidden_layers": 2,
  "pad_token_id": 0,
  "rescale_prenorm_residual": true,
  "residual_in_fp32": true,
  "rmsnorm": true,
  "state_size": 16,
  "tie_word_embeddings": false,
  "torch_dtype": "float32",
  "transformers_version": "4.57.1",
  "use_bias": false,
  "use_cache": true,
  "use_conv_bias": true,
  "use_l2warp": false,
  "vocab_size": 128
})";

// The Transformer keeps its attention settings at the top level; transformers 5.x writes dtype.
const char* const kTransformer = R"({
  "architectures": ["TransformerForCausalLM"],
  "attnres_block_size": null,
  "bos_token_id": 1,
  "dtype": "float32",
  "elementwise_affine": true,
  "eos_token_id": 2,
  "fuse_cross_entropy": true,
  "fuse_linear_cross_entropy": false,
  "fuse_norm": true,
  "fuse_swiglu": true,
  "hidden_act": "swish",
  "hidden_ratio": 4,
  "hidden_size": 64,
  "initializer_range": 0.02,
  "intermediate_size": null,
  "max_position_embeddings": 2048,
  "model_type": "transformer",
  "norm_eps": 1e-06,
  "num_heads": 4,
  "num_hidden_layers": 2,
  "num_kv_heads": 2,
  "qk_norm": false,
  "qkv_bias": false,
  "rope_theta": 500.0,
  "tie_word_embeddings": false,
  "transformers_version": "5.0.0",
  "use_cache": true,
  "use_l2warp": false,
  "vocab_size": 128,
  "window_size": 16
})";

// DeltaNet's widths come from expand_k / expand_v of hidden_size; HGRN-2's heads from expand_ratio.
const char* const kDeltaNet = R"({"model_type": "delta_net", "hidden_size": 64, "num_heads": 4, "expand_k": 0.5,
  "expand_v": 1.0, "num_hidden_layers": 2, "vocab_size": 128, "use_gate": false, "qk_norm": "l2"})";
const char* const kHgrn2 = R"({"model_type": "hgrn2", "hidden_size": 64, "num_heads": 4, "expand_ratio": 16,
  "num_hidden_layers": 2, "vocab_size": 128, "attn_mode": "chunk", "use_lower_bound": true})";

// The JSON of a config.json file with this text, as hla reads it (Python's Infinity too).
nlohmann::json read_config_text(const std::string& text) {
  ScratchDir dir("parse");
  write_text(dir.path + "/config.json", text);
  return read_json_file(dir.path + "/config.json");
}

ModelConfig parse(const std::string& text, const std::string& source = "c.json") {
  return ModelConfig::from_json(read_config_text(text), source);
}

std::string parse_error(const std::string& text) {
  return error_of([&] { parse(text); });
}

// kGdnHybrid with one field replaced (or added).
std::string gdn_with(const std::string& field, const nlohmann::json& value) {
  nlohmann::json j = read_config_text(kGdnHybrid);
  j[field] = value;
  return j.dump();
}

// The error of kMamba2 with one field replaced (as JSON: its dt_limit holds an infinity).
std::string mamba2_error(const std::string& field, const nlohmann::json& value) {
  nlohmann::json j = read_config_text(kMamba2);
  j[field] = value;
  return error_of([&] { ModelConfig::from_json(j, "c.json"); });
}

// Random values for every parameter of `config`'s model, saved under fla's names.
void write_random_weights(const ModelConfig& config, const std::string& dir, DType dtype = DType::F32) {
  std::unique_ptr<TrainableModel> model = make_model(config, 7);
  NamedTensors weights;
  uint64_t seed = 100;
  for (const NamedParameter& p : model->parameters())
    weights.emplace_back(p.name, Tensor::randn(p.var.value().shape(), seed++, 0.5, DType::F32).to(dtype));
  save_safetensors(dir + "/model.safetensors", weights, {{"format", "pt"}});
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace

TEST_CASE("fla's config.json loads into hla's fields, for 4.x and 5.x files") {
  ModelConfig gdn = parse(kGdnHybrid);
  CHECK(gdn.model_type == "gated_deltanet");
  CHECK((gdn.hidden_size == 64 && gdn.num_heads == 2 && gdn.num_v_heads == 4 && gdn.head_dim == 16));
  CHECK((gdn.expand_v == 1.0 && gdn.use_short_conv && gdn.conv_size == 4 && gdn.intermediate_size == 0));
  CHECK((gdn.has_attn && gdn.attn.layers == std::vector<int>{1, 3} && gdn.attn.num_heads == 4));
  CHECK((gdn.attn.num_kv_heads == 2 && gdn.attn.window_size == 0 && gdn.attn.rope_theta == 10000.0));
  CHECK(gdn.fla_kept["max_position_embeddings"] == 4096);  // ignored fields are kept as read
  CHECK(gdn.fla_kept["fuse_norm"] == false);

  ModelConfig mamba = parse(kMamba2);
  CHECK((mamba.expand_v == 2.0 && mamba.head_dim == 16 && mamba.state_size == 16 && mamba.conv_size == 4));
  CHECK((mamba.chunk_size == 64 && !mamba.norm_before_gate && mamba.norm_eps == 1e-5));
  // transformers 5.x writes the infinity as an object
  std::string v5 = kMamba2;
  v5.replace(v5.find("Infinity"), 8, R"({"__float__": "Infinity"})");
  CHECK(parse(v5).to_json() == mamba.to_json());

  ModelConfig t = parse(kTransformer);
  CHECK((t.num_heads == 4 && t.attn_heads() == 4 && t.attn.num_kv_heads == 2));
  CHECK((t.attn.rope_theta == 500.0 && t.attn.window_size == 16 && !t.has_attn));

  ModelConfig dn = parse(kDeltaNet);
  CHECK((dn.head_dim == 8 && dn.expand_v == 2.0));  // dk = 64 * 0.5 / 4, dv = 64 * 1.0 / 4 = 2 dk
  CHECK(parse(kHgrn2).num_heads == 4);               // 64 / expand_ratio 16
}

TEST_CASE("fla's config.json is written back field for field (fla -> hla -> fla)") {
  for (const char* text : {kGdnHybrid, kMamba2, kTransformer}) {
    const nlohmann::json original = read_config_text(text);
    ScratchDir dir("write");
    parse(text).save(dir.path + "/config.json");
    const nlohmann::json written = read_json_file(dir.path + "/config.json");
    CAPTURE(original.at("model_type"));
    for (auto it = original.begin(); it != original.end(); ++it) {
      CAPTURE(it.key());
      REQUIRE(written.contains(it.key()));
      CHECK(written[it.key()] == it.value());
    }
    for (auto it = written.begin(); it != written.end(); ++it) {
      CAPTURE(it.key());
      CHECK((original.contains(it.key()) || it.key() == "pad_token_id"));  // fla's default, null
    }
  }
  // The infinity is written the way Python's json writes it, which 4.x and 5.x both read.
  ScratchDir dir("inf");
  parse(kMamba2).save(dir.path + "/config.json");
  CHECK(read_text(dir.path + "/config.json").find("\"dt_limit\": [\n    0.0,\n    Infinity\n  ],") != std::string::npos);
}

TEST_CASE("Mamba-2's init fields are read, initialise the model and are written back") {
  nlohmann::json j = read_config_text(kMamba2);
  j["A_init_range"] = {2, 8.5};
  j["dt_min"] = 0.01;
  j["dt_max"] = 0.05;
  j["dt_init_floor"] = 0.02;
  j["conv_init"] = 0.25;
  j["rescale_prenorm_residual"] = false;
  j["initializer_range"] = 0.04;
  const ModelConfig c = ModelConfig::from_json(j, "c.json");
  CHECK((c.a_init_range == std::vector<double>{2.0, 8.5} && c.dt_min == 0.01 && c.dt_max == 0.05));
  CHECK((c.dt_init_floor == 0.02 && c.conv_init == 0.25 && !c.rescale_residual && c.initializer_range == 0.04));
  const nlohmann::json written = c.to_json();
  for (const char* field : {"A_init_range", "dt_min", "dt_max", "dt_init_floor", "conv_init", "rescale_prenorm_residual",
                            "initializer_range"}) {
    CAPTURE(field);
    CHECK(written.at(field) == j.at(field));
    CHECK(!c.fla_kept.contains(field));  // read into hla's fields, not kept aside
  }
  CHECK(written.at("A_init_range").dump() == "[2,8.5]");
  // The model follows them (tests/test_init.cpp checks the distributions): conv1d within
  // conv_init, out_proj not rescaled, every dt at or above the floor.
  std::unique_ptr<TrainableModel> model = make_model(c, 3);
  for (const NamedParameter& p : model->parameters()) {
    CAPTURE(p.name);
    const std::vector<double> v = p.var.value().to_f64_vector();
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    if (p.name.find("conv1d.weight") != std::string::npos) CHECK((*lo >= -0.25 && *hi <= 0.25 && *hi > 0.2));
    if (p.name.find("dt_bias") != std::string::npos) CHECK(std::log1p(std::exp(*lo)) >= 0.02 * (1 - 1e-5));
    if (p.name.find("A_log") != std::string::npos)
      CHECK((std::exp(*lo) >= 2.0 * (1 - 1e-6) && std::exp(*hi) <= 8.5 * (1 + 1e-6)));
    if (p.name.find("out_proj.weight") != std::string::npos) CHECK(*hi > 0.1);  // normal(0.04): past kaiming's 1/16
  }
}

TEST_CASE("hla's configs are written with fla's model_type, class and defaults") {
  // A config in hla's own format (its field names, the hybrid shorthand) is written as fla's.
  const ModelConfig c = ModelConfig::from_json(
      nlohmann::json::parse(R"({"model_type": "gla", "hidden_size": 64, "num_heads": 2, "expand_k": 0.5,
        "chunk_size": 32, "routing": "clvr", "hybrid": "2:1"})"),
      "own.json");
  const nlohmann::json j = c.to_json();
  CHECK(j.dump() ==
        R"({"architectures":["GLAForCausalLM"],"attn":{"layers":[1,3],"num_heads":2,"num_kv_heads":2,"qkv_bias":false,)"
        R"("rope_theta":10000.0,"window_size":null},"attn_mode":"chunk","attnres_block_size":null,"bos_token_id":1,)"
        R"("clamp_min":null,"conv_size":4,"elementwise_affine":true,"eos_token_id":2,"expand_k":0.5,"expand_v":1.0,)"
        R"("feature_map":null,"fuse_cross_entropy":true,"fuse_linear_cross_entropy":false,"fuse_norm":true,)"
        R"("fuse_swiglu":true,"hidden_act":"swish","hidden_ratio":4.0,"hidden_size":64,"hla":{"chunk_size":32,)"
        R"("routing":"clvr"},"initializer_range":0.02,"intermediate_size":null,"max_position_embeddings":2048,)"
        R"("model_type":"gla","norm_eps":1e-06,"num_heads":2,"num_hidden_layers":4,"num_kv_heads":null,)"
        R"("pad_token_id":null,"tie_word_embeddings":false,"torch_dtype":"float32","use_cache":true,"use_gk":true,)"
        R"("use_gv":false,"use_l2warp":false,"use_output_gate":true,"use_short_conv":false,"vocab_size":258})");
  const ModelConfig back = ModelConfig::from_json(j, "w.json");
  CHECK((back.chunk_size == 32 && back.routing == Routing::Clvr && back.attn.layers == c.attn.layers));
  // gdn2 has no fla class: no architectures, Gated DeltaNet's field names.
  ModelConfig g;
  g.model_type = "gdn2";
  const nlohmann::json gj = g.to_json();
  CHECK_FALSE(gj.contains("architectures"));
  CHECK((gj["head_dim"] == 64 && gj["num_heads"] == 4 && gj["expand_v"] == 1.0 && gj["use_short_conv"] == true));
  // hla's own format (before this change, and configs/models/*.json) keeps loading.
  const ModelConfig old = ModelConfig::from_json(
      nlohmann::json::parse(R"({"model_type": "mamba2", "hidden_size": 64, "num_hidden_layers": 2, "num_heads": 2,
        "head_dim": 16, "intermediate_size": 128, "vocab_size": 258, "conv_size": 4, "state_size": 16,
        "hybrid": "pure", "expand_v": 2.0, "routing": "none", "chunk_size": 64})"),
      "old.json");
  CHECK((old.expand_v == 2.0 && old.head_dim == 16 && old.state_size == 16));
  CHECK(ModelConfig::from_json(old.to_json(), "new.json").to_json() == old.to_json());
  CHECK_FALSE(old.to_json().contains("attn"));  // a pure Mamba-2 config is fla's, key for key
  // A Mamba-2 hybrid (no fla counterpart) keeps its attention layers through config.json: without
  // them hla could not read back its own checkpoint (every layer read as Mamba-2).
  const ModelConfig m2 = ModelConfig::from_json(
      nlohmann::json::parse(R"({"model_type": "mamba2", "hidden_size": 64, "num_hidden_layers": 6, "num_heads": 2,
        "head_dim": 32, "hybrid": "6:1"})"),
      "m2.json");
  const ModelConfig m2_back = ModelConfig::from_json(m2.to_json(), "m2-written.json");
  CHECK((m2_back.has_attn && m2_back.attn.layers == std::vector<int>{5} && m2_back.attn.layers == m2.attn.layers));
  CHECK(m2_back.to_json() == m2.to_json());
}

TEST_CASE("fla -> hla -> fla keeps every tensor byte for byte, and the config's fields") {
  for (const char* text : {kGdnHybrid, kMamba2, kTransformer, kDeltaNet, kHgrn2}) {
    ScratchDir from("from"), to("to");
    write_text(from.path + "/config.json", text);
    const ModelConfig config = ModelConfig::load(from.path + "/config.json");
    CAPTURE(config.model_type);
    write_random_weights(config, from.path);
    std::unique_ptr<TrainableModel> model = make_model(config, 1);
    load_model_weights(from.path, model->parameters());
    config.save(to.path + "/config.json");
    save_model_weights(to.path, model->parameters());
    const SafetensorsFile a = load_safetensors(from.path + "/model.safetensors");
    const SafetensorsFile b = load_safetensors(to.path + "/model.safetensors");
    REQUIRE(a.tensors.size() == b.tensors.size());
    for (size_t i = 0; i < a.tensors.size(); i++) {
      CAPTURE(a.tensors[i].first);
      CHECK(a.tensors[i].first == b.tensors[i].first);
      CHECK(same_bytes(a.tensors[i].second, b.tensors[i].second));
    }
    const nlohmann::json original = read_json_file(from.path + "/config.json"),
                         written = read_json_file(to.path + "/config.json");
    for (auto it = original.begin(); it != original.end(); ++it) {
      CAPTURE(it.key());
      CHECK(written.value(it.key(), nlohmann::json()) == it.value());
    }
  }
}

TEST_CASE("Mamba-2 in fla's layout: backbone names, in_proj [z | xBC | dt], conv bias, D per head") {
  const ModelConfig c = parse(kMamba2);
  std::unique_ptr<TrainableModel> model = make_model(c, 1);
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  for (const NamedParameter& p : model->parameters())
    if (p.name.rfind("backbone.layers.0.", 0) == 0) names.push_back(p.name), shapes.push_back(p.var.value().shape());
  // d_inner 128, N 16, 8 heads: in_proj 128 (z) + 160 (x, B, C) + 8 (dt) rows
  CHECK(names == std::vector<std::string>{"backbone.layers.0.norm.weight", "backbone.layers.0.mixer.in_proj.weight",
                                          "backbone.layers.0.mixer.conv1d.weight", "backbone.layers.0.mixer.conv1d.bias",
                                          "backbone.layers.0.mixer.dt_bias", "backbone.layers.0.mixer.A_log",
                                          "backbone.layers.0.mixer.D", "backbone.layers.0.mixer.norm.weight",
                                          "backbone.layers.0.mixer.out_proj.weight"});
  CHECK(shapes == std::vector<Shape>{{64}, {296, 64}, {160, 1, 4}, {160}, {8}, {8}, {8}, {128}, {64, 128}});
  // norm_before_gate changes the output (RMSNorm(y) * silu(z) instead of RMSNorm(y * silu(z)))
  ModelConfig before = c;
  before.norm_before_gate = true;
  std::unique_ptr<TrainableModel> other = make_model(before, 1);
  const Tensor ids = Tensor::from_i32({1, 5, 9, 3, 7, 2}, {1, 6});
  CHECK(max_rel_err(model->logits(ids).value(), other->logits(ids).value()) > 1e-3);
}

TEST_CASE("sharded and bf16 checkpoints load, converted to the fp32 master weights") {
  const ModelConfig config = parse(kGdnHybrid);
  ScratchDir single("single"), sharded("sharded"), half("bf16");
  write_random_weights(config, single.path);
  const SafetensorsFile whole = load_safetensors(single.path + "/model.safetensors");
  NamedTensors first(whole.tensors.begin(), whole.tensors.begin() + 5), rest(whole.tensors.begin() + 5, whole.tensors.end());
  save_safetensors(sharded.path + "/model-00001-of-00002.safetensors", first);
  save_safetensors(sharded.path + "/model-00002-of-00002.safetensors", rest);
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (const auto& [name, t] : first) index["weight_map"][name] = "model-00001-of-00002.safetensors";
  for (const auto& [name, t] : rest) index["weight_map"][name] = "model-00002-of-00002.safetensors";
  write_json_file(sharded.path + "/model.safetensors.index.json", index);
  std::unique_ptr<TrainableModel> a = make_model(config, 1), b = make_model(config, 2);
  load_model_weights(single.path, a->parameters());
  load_model_weights(sharded.path, b->parameters());
  for (size_t i = 0; i < a->parameters().size(); i++)
    CHECK(same_bytes(a->parameters()[i].var.value(), b->parameters()[i].var.value()));
  // A tensor the index puts in the wrong shard.
  index["weight_map"][first[0].first] = "model-00002-of-00002.safetensors";
  write_json_file(sharded.path + "/model.safetensors.index.json", index);
  CHECK(error_of([&] { load_model_weights(sharded.path, b->parameters()); }) ==
        sharded.path + "/model.safetensors.index.json: weight_map puts tensor 'model.embeddings.weight' in " +
            sharded.path + "/model-00002-of-00002.safetensors but it is in " + sharded.path +
            "/model-00001-of-00002.safetensors");

  write_random_weights(config, half.path, DType::BF16);
  load_model_weights(half.path, b->parameters());
  const SafetensorsFile stored = load_safetensors(half.path + "/model.safetensors");
  for (size_t i = 0; i < stored.tensors.size(); i++) {
    CHECK(b->parameters()[i].var.value().dtype() == DType::F32);
    CHECK(same_bytes(b->parameters()[i].var.value(), stored.tensors[i].second.to(DType::F32)));
  }
}

TEST_CASE("fp16 checkpoints load, widened exactly to the fp32 master weights, with a note") {
  const ModelConfig config = parse(kGdnHybrid);
  ScratchDir fp32("fp32"), fp16("fp16");
  write_random_weights(config, fp32.path);
  const SafetensorsFile original = load_safetensors(fp32.path + "/model.safetensors");
  hla::testing::save_half_safetensors(fp16.path + "/model.safetensors", original.tensors);
  std::unique_ptr<TrainableModel> model = make_model(config, 1);
  std::ostringstream note;
  std::streambuf* saved = std::cerr.rdbuf(note.rdbuf());
  load_model_weights(fp16.path, model->parameters());
  std::cerr.rdbuf(saved);
  CHECK(note.str() == "note: " + fp16.path +
                          ": weights stored in lower precision (F16) are converted to the model's master dtype (F32)\n");
  int64_t values = 0, changed = 0;
  for (size_t i = 0; i < original.tensors.size(); i++) {
    CAPTURE(original.tensors[i].first);
    const Tensor& loaded = model->parameters()[i].var.value();
    REQUIRE(loaded.dtype() == DType::F32);
    const std::vector<double> x = original.tensors[i].second.to_f64_vector(), y = loaded.to_f64_vector();
    int64_t wrong = 0;
    for (size_t j = 0; j < x.size(); j++) {
      wrong += y[j] != hla::testing::to_half(static_cast<float>(x[j])).value;
      changed += y[j] != x[j];
    }
    CHECK(wrong == 0);
    values += static_cast<int64_t>(x.size());
  }
  CHECK(changed > values / 2);  // fp32 values mostly do not survive half precision: rounding happened
  // A half tensor into a bf16 model would lose bits: refused, naming the file's dtype.
  std::unique_ptr<TrainableModel> bf16_model = make_model(config, 1);
  ParameterList params = bf16_model->parameters();
  for (NamedParameter& p : params) p.var.mutable_value() = p.var.value().to(DType::BF16);
  CHECK(error_of([&] { load_model_weights(fp16.path, params); }) ==
        fp16.path + "/model.safetensors: tensor 'model.embeddings.weight' is F16 but the model expects BF16");
}

TEST_CASE("bad config.json: unknown model_type, unsupported values, contradictions, mixed formats") {
  // an unknown field beside a model_type that is a number (the fuzzer's find): an hla error, not json's
  CHECK(parse_error(R"({"fuse_line/ar": false, "model_type": 64})").rfind("c.json: ", 0) == 0);
  CHECK(parse_error(R"({"model_type": "mamba", "hidden_size": 64})") ==
        "c.json: model_type 'mamba' is not a mixer hla knows; one of: transformer hgrn retnet gla hgrn2 mamba2 rwkv6 "
        "delta_net gated_deltanet kda gdn2");
  CHECK(parse_error(gdn_with("use_gate", false)) ==
        "c.json: use_gate is false; hla implements gated_deltanet only with use_gate = true (the swish output gate "
        "(g_proj))");
  CHECK(parse_error(gdn_with("allow_neg_eigval", true)) ==
        "c.json: allow_neg_eigval is true; hla implements gated_deltanet only with allow_neg_eigval = false (beta in "
        "(0, 2) (negative eigenvalues))");
  CHECK(parse_error(gdn_with("use_l2warp", true)) ==
        "c.json: use_l2warp is true; hla implements gated_deltanet only with use_l2warp = false (l2warp adds a logit "
        "penalty to the loss; hla's loss is plain cross-entropy)");
  CHECK(parse_error(gdn_with("attn", {{"layers", {1}}, {"num_heads", 4}, {"qkv_bias", true}})) ==
        "c.json: attn.qkv_bias is true; hla's attention layers have no q/k/v biases (supports false)");
  CHECK(parse_error(gdn_with("attn", {{{"layers", {1}}, {"num_heads", 4}}, {{"layers", {3}}, {"num_heads", 2}}})) ==
        "c.json: attn[1].num_heads is 2 but attn[0].num_heads is 4; hla gives every attention layer the same settings");
  CHECK(parse(gdn_with("attn", {{{"layers", {1}}, {"num_heads", 4}}, {{"layers", {3}}, {"num_heads", 4}}})).attn.layers ==
        std::vector<int>{1, 3});
  nlohmann::json m = read_config_text(kMamba2);
  m["n_groups"] = 2;
  CHECK(ModelConfig::from_json(m, "c.json").n_groups == 2);
  CHECK(ModelConfig::from_json(ModelConfig::from_json(m, "c.json").to_json(), "c.json").to_json()["n_groups"] == 2);
  m["n_groups"] = 3;
  CHECK(error_of([&] { ModelConfig::from_json(m, "c.json"); }) ==
        "c.json: n_groups 3 does not divide the heads, d_inner / head_dim = 8");
  m["n_groups"] = 1;
  m["num_heads"] = 4;
  CHECK(error_of([&] { ModelConfig::from_json(m, "c.json"); }) == "c.json: num_heads 4 contradicts expand 2 * hidden_size 64 / head_dim 16 = 8");
  CHECK(parse_error(R"({"model_type": "hgrn2", "hidden_size": 64, "num_heads": 2, "expand_ratio": 16})") ==
        "c.json: num_heads 2 contradicts expand_ratio 16: fla's hgrn2 takes num_heads = hidden_size / expand_ratio = 4");
  CHECK(parse_error(R"({"model_type": "delta_net", "hidden_size": 64, "num_heads": 4, "expand_k": 0.3})") ==
        "c.json: expand_k 0.3 gives a key width hidden_size * expand_k = 19.2 that num_heads 4 does not split into "
        "whole heads");
  CHECK(parse_error(R"({"model_type": "rwkv6", "hidden_size": 64, "num_heads": 2, "hidden_ratio": 4})") ==
        "c.json: hidden_ratio is 4 with intermediate_size null; hla's rwkv6 channel mix has fla's default width 32 * "
        "ceil(3.5 * hidden_size / 32), so it supports hidden_ratio 3.5 (or give intermediate_size)");
  CHECK(parse_error(R"({"model_type": "gla", "use_gk": true, "routing": "clvr"})") ==
        "c.json: field 'use_gk' is fla's (nn/fla_config.cpp) but field 'routing' is hla's own format; an fla "
        "config.json keeps hla's settings in its 'hla' block");
  CHECK(parse_error(R"({"model_type": "gla", "hla": {"state_size": 3}})") ==
        "c.json: unknown field 'hla.state_size' (the hla block holds chunk_size, routing)");
  CHECK(parse_error(R"({"model_type": "gla", "colour": 3})") == "c.json: unknown field 'colour'");
  CHECK(parse_error(R"({"model_type": "gla", "use_gk": true, "colour": 3})") == "c.json: unknown field 'colour'");
  // Mamba-2's init fields: fla's rules between them, and the value hla does not implement.
  CHECK(mamba2_error("conv_init", 0) ==
        "c.json: conv_init is 0, which gives fla's conv1d.weight U(0, 0) = 0; hla supports null (N(0, "
        "initializer_range)) or a bound > 0 (U(-conv_init, conv_init))");
  CHECK(mamba2_error("conv_init", -0.5) == "c.json: conv_init must be >= 0 for mamba2 (model_type mamba2), got -0.5");
  CHECK(mamba2_error("A_init_range", {0, 16}) ==
        "c.json: A_init_range must be a pair [lo, hi] with 0 < lo <= hi, got [0.0,16.0]");
  CHECK(mamba2_error("A_init_range", {16, 1}) ==
        "c.json: A_init_range must be a pair [lo, hi] with 0 < lo <= hi, got [16.0,1.0]");
  CHECK(mamba2_error("A_init_range", {1, 2, 3}) ==
        "c.json: A_init_range must be a pair [lo, hi] with 0 < lo <= hi, got [1.0,2.0,3.0]");
  CHECK(mamba2_error("A_init_range", {1, "16"}) ==
        "c.json: A_init_range must be a list of finite numbers, got [1,\"16\"]");
  CHECK(mamba2_error("dt_min", 0.5) == "c.json: dt_min 0.5 is above dt_max 0.1");
  CHECK(mamba2_error("dt_init_floor", 0) ==
        "c.json: dt_init_floor must be > 0 for mamba2 (model_type mamba2), got 0");
  CHECK(mamba2_error("initializer_range", 0) == "c.json: initializer_range must be > 0, got 0");
  // Only Mamba-2 reads them: another mixer's config (hla's format) may not set them.
  CHECK(parse_error(R"({"model_type": "gated_deltanet", "dt_max": 0.2})") ==
        "c.json: dt_max is 0.2 but only mamba2 reads it; model_type gated_deltanet initialises its gates as fla's "
        "layer does (leave dt_max at its default 0.1)");
  CHECK(parse_error(R"({"model_type": "kda", "A_init_range": [0.5, 4]})") ==
        "c.json: A_init_range is [0.5,4.0] but only mamba2 reads it; model_type kda initialises its gates as fla's "
        "layer does (leave A_init_range at its default [1.0,16.0])");
  // fla fields that change the math, at values hla does not implement.
  nlohmann::json kda = read_config_text(kGdnHybrid);
  kda["model_type"] = "kda";
  kda.erase("use_gate");
  kda.erase("fuse_linear_cross_entropy");  // not a field of fla's KDAConfig
  kda["safe_gate"] = true;
  CHECK(error_of([&] { ModelConfig::from_json(kda, "c.json"); }) ==
        "c.json: safe_gate is true; hla implements kda only with safe_gate = false (KDA's bounded gate)");
  kda["safe_gate"] = false;
  kda["lower_bound"] = -5.0;
  CHECK(error_of([&] { ModelConfig::from_json(kda, "c.json"); }) ==
        "c.json: lower_bound is -5.0; hla implements kda only with lower_bound = null (KDA's gate lower bound)");
  kda["lower_bound"] = nullptr;
  kda["allow_neg_eigval"] = true;
  CHECK(error_of([&] { ModelConfig::from_json(kda, "c.json"); }) ==
        "c.json: allow_neg_eigval is true; hla implements kda only with allow_neg_eigval = false (beta in (0, 2) "
        "(negative eigenvalues))");
  CHECK(mamba2_error("use_l2warp", true) ==
        "c.json: use_l2warp is true; hla implements mamba2 only with use_l2warp = false (l2warp adds a logit penalty "
        "to the loss; hla's loss is plain cross-entropy)");
  CHECK(mamba2_error("dt_limit", {0.0, 10.0}) ==
        "c.json: dt_limit is [0.0,10.0]; hla implements mamba2 only with dt_limit = [0.0,Infinity] (a clamp on Delta)");
  CHECK(parse_error(R"({"model_type": "gla", "use_short_conv": true})") ==
        "c.json: use_short_conv is true; hla implements gla only with use_short_conv = false (short convolutions (this "
        "layer has none in hla))");
}

TEST_CASE("a checkpoint whose tensors do not match its config.json names the tensor and the setting") {
  ScratchDir dir("mismatch");
  const std::string file = dir.path + "/model.safetensors";
  nlohmann::json j = read_config_text(kGdnHybrid);
  j["use_short_conv"] = false;
  write_random_weights(ModelConfig::from_json(j, "c.json"), dir.path);  // weights without convolutions
  // The error of loading those weights into the model of config.json `changed`.
  auto load_error = [&](const nlohmann::json& changed) {
    write_text(dir.path + "/config.json", changed.dump());
    std::unique_ptr<TrainableModel> model = make_model(ModelConfig::from_json(changed, "c.json"), 1);
    return error_of([&] { load_model_weights(dir.path, model->parameters()); });
  };
  nlohmann::json with_conv = j, tied = j, smaller = j, fewer = j;
  with_conv["use_short_conv"] = true;
  CHECK(load_error(with_conv) ==
        file + ": no tensor named 'model.layers.0.attn.q_conv1d.weight' (config.json: use_short_conv is true)");
  tied["tie_word_embeddings"] = true;
  CHECK(load_error(tied) ==
        file + ": tensor 'lm_head.weight' is not a parameter of this model (config.json: tie_word_embeddings is true)");
  smaller["vocab_size"] = 100;
  CHECK(load_error(smaller) ==
        file + ": tensor 'model.embeddings.weight' has shape (128, 64) but the model expects (100, 64) (config.json: "
               "vocab_size gives 100)");
  fewer["num_hidden_layers"] = 3;
  fewer["attn"]["layers"] = {1};
  CHECK(load_error(fewer) ==
        file + ": tensor 'model.layers.3.attn_norm.weight' is not a parameter of this model (config.json: "
               "num_hidden_layers is 3)");
}
