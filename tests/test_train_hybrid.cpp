// Training a real HybridLM (make_model) end to end: bit-exact resume on MQAR, `hla train`'s
// run_training (metrics log, checkpoints, resume, model mismatch) and the run settings' model
// config (hybrid shorthand, config.json overlay, vocabulary checks).
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nn/model.h"
#include "tests/test_train_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

using namespace hla;
using hla::testing::tiny_mqar_run;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& name) {
  std::string dir = (fs::temp_directory_path() / ("hla_test_train_hybrid_" + name)).string();
  fs::remove_all(dir);
  return dir;
}

int count_lines_with(const std::string& path, const std::string& needle) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

}  // namespace

TEST_CASE("HybridLM resume is bit-exact: 10 steps equal 5 + save + resume + 5") {
  std::string dir = temp_dir("resume");
  RunConfig run = tiny_mqar_run("");
  DataSources probe = make_data_sources(run.data);
  ModelConfig mc = run.model_config(probe.vocab_size);
  REQUIRE(mc.pattern() == "LA");
  std::ostringstream log;

  auto straight_model = make_model(mc, 42);
  const TrainerOptions options =
      trainer_options(run, mc, count_parameters(straight_model->parameters()), probe.mqar);
  REQUIRE(options.mqar);
  DataSources straight_data = make_data_sources(run.data);
  Trainer straight(options, *straight_model, *straight_data.train, straight_data.val.get(), log);
  std::vector<double> straight_losses;
  for (int i = 0; i < 10; i++) straight_losses.push_back(straight.train_step().loss);
  ValMetrics straight_val = straight.validate();

  std::vector<double> split_losses;
  {
    auto model = make_model(mc, 42);
    DataSources data = make_data_sources(run.data);
    Trainer first(options, *model, *data.train, data.val.get(), log);
    for (int i = 0; i < 5; i++) split_losses.push_back(first.train_step().loss);
    first.validate();  // validation between saves must not disturb the training stream
    first.save(dir);
  }
  auto model = make_model(mc, 7);  // another init: the checkpoint must restore everything
  DataSources data = make_data_sources(run.data);
  Trainer second(options, *model, *data.train, data.val.get(), log);
  second.resume(dir);
  for (int i = 0; i < 5; i++) split_losses.push_back(second.train_step().loss);
  ValMetrics split_val = second.validate();

  CHECK(std::memcmp(split_losses.data(), straight_losses.data(), 10 * sizeof(double)) == 0);
  CHECK(split_val.loss == straight_val.loss);
  CHECK(split_val.accuracy == straight_val.accuracy);
  ParameterList a = straight_model->parameters(), b = model->parameters();
  for (size_t i = 0; i < a.size(); i++) {
    CAPTURE(a[i].name);
    CHECK(std::memcmp(a[i].var.value().raw(), b[i].var.value().raw(), a[i].var.value().nbytes()) == 0);
  }
  fs::remove_all(dir);
}

TEST_CASE("run_training writes metrics and checkpoints, resumes, and refuses another model") {
  std::string out = temp_dir("run");
  RunConfig run = tiny_mqar_run(out);
  run.train.steps = 4;
  run.train.val_every = 2;
  run.train.save_every = 2;
  std::ostringstream log;
  ValMetrics val = run_training(run, "", log);
  CAPTURE(log.str());
  CHECK(val.examples == 8);
  CHECK(val.accuracy >= 0.0);
  CHECK(val.accuracy <= 1.0);
  std::string metrics = out + "/metrics.jsonl";
  CHECK(count_lines_with(metrics, "\"tokens_per_s\"") == 4);
  CHECK(count_lines_with(metrics, "\"val_accuracy\"") == 2);
  std::string ckpt = out + "/checkpoint";
  CHECK(read_json_file(ckpt + "/trainer_state.json")["step"] == 4);
  CHECK(read_json_file(ckpt + "/config.json") == run.model_config(64).to_json());
  CHECK(log.str().find("pattern LA") != std::string::npos);
  CHECK(log.str().find("step 4/4 | loss") != std::string::npos);

  // Extending the run: resume at step 4 and train to 6.
  run.train.steps = 6;
  std::ostringstream resumed_log;
  run_training(run, ckpt, resumed_log);
  CHECK(resumed_log.str().find("resumed from " + ckpt + " at step 4") != std::string::npos);
  CHECK(count_lines_with(metrics, "\"tokens_per_s\"") == 6);
  CHECK(read_json_file(ckpt + "/trainer_state.json")["step"] == 6);

  RunConfig wider = run;
  wider.model.fields.hidden_size = 48;
  std::ostringstream ignored;
  CHECK_THROWS_WITH_AS(run_training(wider, ckpt, ignored),
                       doctest::Contains("hidden_size: 32 -> 48;"),
                       Error);
  fs::remove_all(out);
}

TEST_CASE("run settings build the model config: shorthand, config.json overlay, vocabulary") {
  RunConfig c;
  c.model.fields.num_hidden_layers = 6;
  c.model.fields.hidden_size = 64;
  c.model.hybrid = "3:1";
  ModelConfig m = c.model_config(258);
  CHECK(m.attn.layers == std::vector<int>{2, 5});
  CHECK(m.vocab_size == 258);
  c.model.fields.attn.layers = {0};
  CHECK(c.model_config(258).attn.layers == std::vector<int>{0});

  std::string dir = temp_dir("overlay");
  fs::create_directories(dir);
  std::string file = dir + "/config.json";
  write_json_file(file, {{"model_type", "gla"}, {"hidden_size", 96}, {"num_hidden_layers", 4},
                         {"num_heads", 2}, {"vocab_size", 300}, {"attn", {{"layers", {3}}}}});
  RunConfig f;
  f.model.config = file;
  f.model.fields.num_heads = 4;
  f.explicitly_set = {"model.num_heads"};
  ModelConfig from_file = f.model_config(258);
  CHECK(from_file.model_type == "gla");
  CHECK(from_file.hidden_size == 96);
  CHECK(from_file.num_heads == 4);
  CHECK(from_file.attn.layers == std::vector<int>{3});
  CHECK(from_file.vocab_size == 300);
  CHECK_THROWS_WITH_AS(f.model_config(512), doctest::Contains("vocab_size 300 is smaller than the data's vocabulary (512)"),
                       Error);
  f.model.hybrid = "pure";
  f.explicitly_set.insert("model.hybrid");
  CHECK(f.model_config(258).attn.layers.empty());
  // Explicit keys overlay the file field by field, the attn block's too; a bad value is an
  // error naming the field and value.
  f.model.fields.routing = Routing::Clvr;
  f.model.fields.attn.window_size = 32;
  f.model.fields.conv_size = 0;  // not given: the file's (the default) stays
  f.explicitly_set = {"model.routing", "model.attn_window_size"};
  ModelConfig overlaid = f.model_config(300);
  CHECK(overlaid.routing == Routing::Clvr);
  CHECK(overlaid.attn.window_size == 32);
  CHECK(overlaid.attn.layers == std::vector<int>{3});
  CHECK(overlaid.conv_size == 4);
  f.explicitly_set.insert("model.conv_size");
  CHECK(f.model_config(300).conv_size == 0);  // GLA has no short convolutions: no range to break
  f.model.fields.norm_eps = 0;
  f.explicitly_set.insert("model.norm_eps");
  CHECK_THROWS_WITH_AS(f.model_config(300), doctest::Contains((file + ": norm_eps must be > 0, got 0").c_str()), Error);
  // A file's own hybrid shorthand counts; a file without vocab_size takes the data's.
  write_json_file(file, {{"model_type", "gla"}, {"hidden_size", 96}, {"num_hidden_layers", 4}, {"hybrid", "2:1"}});
  RunConfig g;
  g.model.config = file;
  ModelConfig from_hybrid_file = g.model_config(300);
  CHECK(from_hybrid_file.attn.layers == std::vector<int>{1, 3});
  CHECK(from_hybrid_file.vocab_size == 300);
  fs::remove_all(dir);

  RunConfig bad;
  bad.train.device = "tpu";
  CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("[train] device: 'tpu'"), Error);
  bad = RunConfig();
  bad.optim.schedule.warmup_steps = 5000;
  CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("[optim] warmup_steps must be in [0, 1000]"), Error);
}

TEST_CASE("every model field is a [model] setting (the --model flag and run-file key), a table row and a settings entry") {
  // cli/cmd_train.cpp makes one --section.key flag per visit_settings entry and looks a run
  // file's [section] key up among those flags, so a setting here is a flag and a TOML key.
  RunConfig c;
  c.model.fields.routing = Routing::ClerH;
  std::map<std::string, std::string> help;
  visit_settings(c, [&](const std::string& section, const std::string& key, const auto&, const char* text) {
    CHECK(help.emplace(section + "." + key, text).second);  // no setting listed twice
  });
  const nlohmann::json settings = c.to_json();
  const std::string table = c.table();
  int fields = 0;
  ModelConfig::visit_fields([&](const ModelField& field) {
    CAPTURE(field.key());
    fields++;
    const std::string name = "model." + field.key();
    REQUIRE(help.count(name));
    CHECK(help.at(name) == field.help);
    CHECK(settings.at("model").contains(field.key()));
    CHECK(table.find("  " + name + " ") != std::string::npos);
  });
  CHECK(settings.at("model").size() == static_cast<size_t>(fields) + 2);  // + config and hybrid
  CHECK(settings["model"]["routing"] == "cler_h");
  CHECK(table.find("model.routing") != std::string::npos);
}

TEST_CASE("model FLOPs per token: 6 N plus causal attention, as targets.md counts them") {
  ModelConfig m;
  m.hidden_size = 64;
  m.num_hidden_layers = 4;
  m.set_hybrid("2:1");  // layers 1 and 3 are attention
  // 6 N + 2 layers x 6 T d
  CHECK(model_flops_per_token(m, 1000, 100) == doctest::Approx(6.0 * 1000 + 2 * 6.0 * 100 * 64));
  m.attn.window_size = 30;  // a window shorter than T: 12 w d per layer
  CHECK(model_flops_per_token(m, 1000, 100) == doctest::Approx(6.0 * 1000 + 2 * 12.0 * 30 * 64));
  // The targets.md anchor: 374M Transformer (24 layers, d 1024), T 2048: 289 TFLOP/s at 113,400 tok/s.
  ModelConfig t;
  t.model_type = "transformer";
  t.hidden_size = 1024;
  t.num_hidden_layers = 24;
  t.set_hybrid("transformer");
  CHECK(model_flops_per_token(t, 373867520, 2048) * 113400 / 1e12 == doctest::Approx(289).epsilon(0.01));
}
