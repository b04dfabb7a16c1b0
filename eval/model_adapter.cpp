// Checkpoint loading for `hla eval` (see model_adapter.h): the HybridLM of config.json +
// model.safetensors, with the tokenizer named in trainer_state.json (settings.data.tokenizer)
// or a tokenizer.json beside the weights; the byte tokenizer otherwise.
#include "eval/model_adapter.h"

#include <algorithm>
#include <filesystem>

#include "data/bpe.h"
#include "eval/hybrid_model.h"
#include "nn/weights.h"
#include "tensor/error.h"
#include "tensor/json.h"

namespace hla::eval {

namespace {

// trainer_state.json's "settings" (an object), or {} without the file.
nlohmann::json training_settings(const std::string& state_file) {
  if (!std::filesystem::exists(state_file)) return nlohmann::json::object();
  nlohmann::json state = read_json_file(state_file);
  if (!state.is_object() || !state.contains("settings")) return nlohmann::json::object();
  HLA_CHECK(state["settings"].is_object(), state_file, ": settings is not an object: ", json_excerpt(state["settings"]));
  return state["settings"];
}

// settings.data.<key> read into `value` when present; another type is an error naming the field.
template <class T>
void read_data_setting(const nlohmann::json& settings, const std::string& key, T& value, const std::string& file) {
  if (!settings.contains("data") || !settings["data"].is_object() || !settings["data"].contains(key)) return;
  const nlohmann::json& v = settings["data"][key];
  const bool ok = std::is_same_v<T, bool>          ? v.is_boolean()
                  : std::is_same_v<T, std::string> ? v.is_string()
                  : std::is_floating_point_v<T>    ? v.is_number()
                  : std::is_unsigned_v<T>          ? v.is_number_unsigned()
                                                   : v.is_number_integer();
  if (!ok) fail(file, ": settings.data.", key, " has the wrong type: ", json_excerpt(v));
  value = v.get<T>();
}

TrainingRun read_training_run(const nlohmann::json& settings, const std::string& file) {
  TrainingRun run;
  std::string source;
  read_data_setting(settings, "source", source, file);
  run.mqar = source == "mqar";
  read_data_setting(settings, "seq_len", run.seq_len, file);
  read_data_setting(settings, "mqar_vocab", run.mqar_vocab, file);
  read_data_setting(settings, "mqar_kv_pairs", run.mqar_kv_pairs, file);
  read_data_setting(settings, "mqar_power_a", run.mqar_power_a, file);
  read_data_setting(settings, "mqar_random_non_queries", run.mqar_random_non_queries, file);
  read_data_setting(settings, "val_seed", run.val_seed, file);
  HLA_CHECK(run.seq_len >= 0, file, ": settings.data.seq_len must be >= 0, got ", run.seq_len);
  return run;
}

std::string state_file_of(const std::string& dir) { return dir + "/trainer_state.json"; }

}  // namespace

std::string checkpoint_tokenizer(const std::string& dir) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(dir) / "tokenizer.json")) return (fs::path(dir) / "tokenizer.json").string();
  std::string tokenizer = "byte";
  read_data_setting(training_settings(state_file_of(dir)), "tokenizer", tokenizer, state_file_of(dir));
  return tokenizer;
}

EvalModel load_model_for_eval(const std::string& checkpoint_dir, const std::string& device,
                              const EvalModelOptions& options) {
  HLA_CHECK(device == "cpu" || device == "cuda", "--device must be cpu or cuda, got '", device, "'");
  const std::string config = checkpoint_dir + "/" + kModelConfigFile;
  HLA_CHECK(std::filesystem::exists(config), checkpoint_dir, ": not a checkpoint directory (no ",
            kModelConfigFile, ")");
  const std::string state_file = state_file_of(checkpoint_dir);
  const nlohmann::json settings = training_settings(state_file);
  EvalModel m;
  m.training = read_training_run(settings, state_file);
  const int max_length = options.max_length > 0 ? options.max_length
                         : m.training.seq_len > 0 ? static_cast<int>(m.training.seq_len)
                                                  : 2048;
  HLA_CHECK(options.compute_dtype == DType::F32 || device == "cuda", "--dtype bf16 needs --device cuda");
  m.model = load_hybrid_model(checkpoint_dir, device == "cuda" ? Device::CUDA : Device::CPU, max_length,
                              options.compute_dtype);
  m.tokenizer = data::load_tokenizer(options.tokenizer.empty() ? checkpoint_tokenizer(checkpoint_dir) : options.tokenizer);
  // A token id at or past the model's vocabulary would be read past the end of a logits row.
  if (options.check_tokenizer && m.tokenizer->vocab_size() > m.model->vocab_size()) {
    fail("tokenizer ", m.tokenizer->name(), " has ", m.tokenizer->vocab_size(), " tokens but the model (",
         config, ") has only ", m.model->vocab_size(), " (vocab_size); evaluate with the tokenizer the ",
         "model was trained with");
  }
  return m;
}

void use_training_mqar(const TrainingRun& run, bool add_training_cell, MqarEvalOptions& options) {
  if (!run.mqar) return;
  options.power_a = run.mqar_power_a;
  options.random_non_queries = run.mqar_random_non_queries;
  options.seed = run.val_seed;
  if (options.vocab_size == 0) options.vocab_size = run.mqar_vocab;
  const MqarCell trained{run.seq_len, run.mqar_kv_pairs};
  const bool listed = std::any_of(options.grid.begin(), options.grid.end(), [&](const MqarCell& c) {
    return c.seq_len == trained.seq_len && c.num_kv_pairs == trained.num_kv_pairs;
  });
  if (add_training_cell && run.seq_len > 0 && !listed) options.grid.insert(options.grid.begin(), trained);
}

}  // namespace hla::eval
