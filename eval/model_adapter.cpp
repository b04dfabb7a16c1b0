// Checkpoint loading for `hla eval` (see model_adapter.h): the HybridLM of config.json +
// model.safetensors, with the tokenizer named in trainer_state.json (settings.data.tokenizer)
// or a tokenizer.json beside the weights; the byte tokenizer otherwise.
#include "eval/model_adapter.h"

#include <filesystem>

#include "data/bpe.h"
#include "eval/hybrid_model.h"
#include "nn/weights.h"
#include "tensor/error.h"

namespace hla::eval {

std::string checkpoint_tokenizer(const std::string& dir) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(dir) / "tokenizer.json")) return (fs::path(dir) / "tokenizer.json").string();
  fs::path state = fs::path(dir) / "trainer_state.json";
  if (fs::exists(state)) {
    nlohmann::json j = read_json_file(state.string());
    if (j.contains("settings") && j["settings"].contains("data") && j["settings"]["data"].contains("tokenizer"))
      return j["settings"]["data"]["tokenizer"].get<std::string>();
  }
  return "byte";
}

EvalModel load_model_for_eval(const std::string& checkpoint_dir, const std::string& device,
                              const std::string& tokenizer_spec) {
  HLA_CHECK(device == "cpu" || device == "cuda", "--device must be cpu or cuda, got '", device, "'");
  const std::string config = checkpoint_dir + "/" + kModelConfigFile;
  HLA_CHECK(std::filesystem::exists(config), checkpoint_dir, ": not a checkpoint directory (no ",
            kModelConfigFile, ")");
  EvalModel m;
  m.model = load_hybrid_model(checkpoint_dir, device == "cuda" ? Device::CUDA : Device::CPU);
  m.tokenizer = data::load_tokenizer(tokenizer_spec.empty() ? checkpoint_tokenizer(checkpoint_dir) : tokenizer_spec);
  // A token id at or past the model's vocabulary would be read past the end of a logits row.
  if (m.tokenizer->vocab_size() > m.model->vocab_size()) {
    fail("tokenizer ", m.tokenizer->name(), " has ", m.tokenizer->vocab_size(), " tokens but the model (",
         config, ") has only ", m.model->vocab_size(), " (vocab_size); evaluate with the tokenizer the ",
         "model was trained with");
  }
  return m;
}

}  // namespace hla::eval
