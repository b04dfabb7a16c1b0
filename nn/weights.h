// Model weights and the JSON files beside them: the file I/O that training (checkpoints) and
// evaluation (loading a trained model) share, so neither reaches into the other. A model
// directory, as Hugging Face and fla write it, holds
//   config.json        the model config (ModelConfig::to_json)
//   model.safetensors  the parameters under their fla names, metadata format = "pt"
// train/checkpoint.h adds the optimizer state and trainer_state.json and replaces the whole
// directory at once; eval/ reads config.json and model.safetensors.
//
// Every write goes through tensor/atomic_file.h ("<path>.tmp-<pid>", renamed over <path> only
// when complete), so a failed write never destroys the previous file and a partial file never
// replaces a good one. Every error names the file, and the tensor where there is one.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "nn/module.h"

namespace hla {

inline constexpr char kModelConfigFile[] = "config.json";
inline constexpr char kModelWeightsFile[] = "model.safetensors";
inline constexpr char kModelWeightsIndexFile[] = "model.safetensors.index.json";  // sharded checkpoints

// Writes dir/model.safetensors: every parameter, copied to the CPU, in list order.
void save_model_weights(const std::string& dir, const ParameterList& params);

// Copies dir/model.safetensors (or the shards of dir/model.safetensors.index.json, as
// save_pretrained writes a large model) into the parameters: the names must match one to one,
// each shape must equal the parameter's, each dtype equal it or widen to it (bf16 or fp16 weights
// into fp32 master weights, with a note on stderr naming the stored dtypes), and every value must be finite (the error names
// the tensor and the first NaN or Inf). A missing, extra or misshaped tensor's error names, where
// dir/config.json says, the setting that decided it ("config.json: use_short_conv is true").
// All are checked before any is copied, so a failed load leaves the parameters as they were.
// Each parameter's compute copy (nn/module.h) is made again from the loaded value.
void load_model_weights(const std::string& dir, const ParameterList& params);

// Reads a JSON file; Python's Infinity / -Infinity / NaN (transformers 4.x) and transformers
// 5.x's {"__float__": "Infinity"} read as the numbers.
nlohmann::json read_json_file(const std::string& path);
void write_json_file(const std::string& path, const nlohmann::json& j);  // 2-space indent
// config.json: as write_json_file, with infinities as Python writes them (Infinity, which
// transformers 4.x and 5.x both read), not as JSON's null.
void write_model_config_file(const std::string& path, const nlohmann::json& j);

}  // namespace hla
