// RunConfig: building the model config, validation, the settings table and its JSON copy.
#include "train/run_config.h"

#include <iomanip>
#include <sstream>

#include "train/checkpoint.h"

namespace hla {

ModelConfig RunConfig::model_config(int data_vocab) const {
  const bool from_file = !model.config.empty();
  const std::string source = from_file ? model.config : "run config [model]";
  auto given = [&](const std::string& key) { return !from_file || explicitly_set.count("model." + key) > 0; };
  // A file's fields, else the [model] section's; a file without vocab_size takes the data's.
  ModelConfig config = from_file ? ModelConfig::parse_json(read_json_file(model.config), source, ModelSettings().fields)
                                 : model.fields;
  if (from_file) {
    ModelConfig::visit_fields(
        [&](const ModelField& field, auto& into, const auto& setting) {
          if (given(field.key())) into = setting;
        },
        config, model.fields);
  }
  // Attention layers: an explicit list wins over the shorthand; a file's list stays unless
  // either is given. config.json has no attn block without attention layers, so the block's
  // settings go with it.
  if (given("attn_layers") && !model.fields.attn.layers.empty()) config.attn.layers = model.fields.attn.layers;
  else if (given("hybrid")) config.attn.layers = hybrid_attention_layers(config.num_hidden_layers, model.hybrid);
  config.has_attn = !config.attn.layers.empty();
  if (!config.has_attn) config.attn = AttnConfig();
  if (config.vocab_size == 0) config.vocab_size = data_vocab;
  config.validate(source);
  HLA_CHECK(config.vocab_size >= data_vocab, source, ": vocab_size ", config.vocab_size,
            " is smaller than the data's vocabulary (", data_vocab, ")");
  return config;
}

ScheduleConfig RunConfig::schedule() const {
  ScheduleConfig s = optim.schedule;
  s.total_steps = train.steps;
  return s;
}

void RunConfig::validate() const {
  optim.optim.validate();
  schedule().validate();
  HLA_CHECK(optim.clip >= 0, "[optim] clip must be >= 0 (0 = off), got ", optim.clip);
  HLA_CHECK(!data.source.empty(), "[data] source is empty: give mqar, text files or a shard directory (--data.source PATH)");
  HLA_CHECK(data.batch_size >= 1, "[data] batch_size must be >= 1, got ", data.batch_size);
  HLA_CHECK(data.seq_len >= 2, "[data] seq_len must be >= 2, got ", data.seq_len);
  HLA_CHECK(data.val_fraction >= 0 && data.val_fraction < 1,
            "[data] val_fraction must be in [0, 1), got ", data.val_fraction);
  HLA_CHECK(train.grad_accum >= 1, "[train] grad_accum must be >= 1, got ", train.grad_accum);
  HLA_CHECK(train.device == "cpu" || train.device == "cuda", "[train] device: '", train.device,
            "' is not a device (cpu | cuda)");
  HLA_CHECK(train.dtype == "f32" || train.dtype == "bf16", "[train] dtype: '", train.dtype,
            "' is not a compute dtype (f32 | bf16)");
  HLA_CHECK(train.dtype == "f32" || train.device == "cuda",
            "[train] dtype bf16 needs device cuda (the CPU computes in f32)");
  HLA_CHECK(train.log_every >= 1, "[train] log_every must be >= 1, got ", train.log_every);
  HLA_CHECK(train.val_every >= 0, "[train] val_every must be >= 0, got ", train.val_every);
  HLA_CHECK(train.val_batches >= 0, "[train] val_batches must be >= 0, got ", train.val_batches);
  HLA_CHECK(train.save_every >= 0, "[train] save_every must be >= 0, got ", train.save_every);
  HLA_CHECK(!train.out_dir.empty(), "[train] out_dir must not be empty");
}

nlohmann::json RunConfig::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  visit_settings(*this, [&](const std::string& section, const std::string& key, const auto& value,
                            const char*) { j[section][key] = value; });
  return j;
}

std::string RunConfig::table() const {
  std::ostringstream os;
  visit_settings(*this, [&](const std::string& section, const std::string& key, const auto& value,
                            const char*) {
    std::string name = section + "." + key;
    nlohmann::json v = value;
    std::string shown = v.is_string() ? v.get<std::string>() : v.dump();
    if (shown.empty()) shown = "-";
    os << "  " << std::left << std::setw(30) << name << shown
       << (explicitly_set.count(name) ? "" : "  (default)") << "\n";
  });
  return os.str();
}

}  // namespace hla
