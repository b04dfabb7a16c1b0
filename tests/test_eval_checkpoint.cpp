// `hla eval` on a checkpoint: the model and the tokenizer it is paired with must agree on the
// vocabulary, whether the tokenizer comes from the checkpoint or from --tokenizer.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "data/bpe.h"
#include "data/bpe_train.h"
#include "eval/model_adapter.h"
#include "eval/mqar_eval.h"
#include "nn/model.h"
#include "nn/weights.h"
#include "tests/test_data_util.h"
#include "tests/test_eval_util.h"

using namespace hla;
using namespace hla::data::testing;

namespace {

// config.json + model.safetensors of a 2-layer transformer over the byte vocabulary (258).
void write_byte_checkpoint(const std::string& dir) {
  eval::testing::write_checkpoint(dir, eval::testing::small_model_config("transformer", 16, 2, 258, "transformer"));
}

// A trained BPE tokenizer with 300 ids, saved as tokenizer.json.
void write_bpe_tokenizer(const std::string& path) {
  data::BpeTrainOptions options;
  options.vocab_size = 300;
  data::save_tokenizer_json(*data::train_bpe(make_documents(1, 100, 40), options, "bpe:test"), path);
}

}  // namespace

TEST_CASE("eval: a tokenizer with more ids than the model has logits is refused, naming both") {
  ScratchDir dir("evaltok");
  write_byte_checkpoint(dir.path.string());
  ScratchDir other("evaltok-file");
  write_bpe_tokenizer(other / "tokenizer.json");
  CHECK(eval::load_model_for_eval(dir.path.string(), "cpu", {"byte"}).tokenizer->vocab_size() == 258);
  CHECK_THROWS_WITH_AS(eval::load_model_for_eval(dir.path.string(), "cpu", {other / "tokenizer.json"}),
                       ("tokenizer bpe:" + other / "tokenizer.json" + " has 300 tokens but the model (" +
                        dir / "config.json" + ") has only 258 (vocab_size); evaluate with the tokenizer "
                        "the model was trained with")
                           .c_str(),
                       Error);
  write_bpe_tokenizer(dir / "tokenizer.json");  // the checkpoint's own tokenizer, the same mismatch
  CHECK_THROWS_CONTAINING(eval::load_model_for_eval(dir.path.string(), "cpu"), "has 300 tokens but the model (");
}

namespace {

// The MQAR demo's shape (configs/mqar-demo.toml, smaller): GDN + attention over vocabulary 256,
// with the trainer_state.json settings of an MQAR run (power_a and filler changed from the defaults).
void write_mqar_checkpoint(const std::string& dir, const std::string& data_settings) {
  eval::testing::write_checkpoint(dir, eval::testing::small_model_config("gated_deltanet", 16, 2, 256, "2:1"));
  std::ofstream(dir + "/trainer_state.json") << R"({"step": 10, "settings": {"data": )" << data_settings << "}}";
}

const char* const kMqarRun =
    R"({"source": "mqar", "tokenizer": "byte", "seq_len": 64, "mqar_vocab": 256, "mqar_kv_pairs": 8,
        "mqar_power_a": 0.5, "mqar_random_non_queries": false, "val_seed": 7})";

}  // namespace

TEST_CASE("eval: MQAR on a vocabulary-256 checkpoint needs no tokenizer and runs as it was trained") {
  ScratchDir dir("evalmqar");
  write_mqar_checkpoint(dir.path.string(), kMqarRun);
  // a text task would read byte ids 256 and 257 past the logits: refused
  CHECK_THROWS_CONTAINING(eval::load_model_for_eval(dir.path.string(), "cpu"),
                          "tokenizer byte has 258 tokens but the model (" + dir / "config.json" + ") has only 256");
  eval::EvalModel m = eval::load_model_for_eval(dir.path.string(), "cpu", {"", 0, false});
  CHECK(m.model->max_length() == 64);  // the training seq_len
  CHECK(m.training.mqar);
  CHECK(m.training.mqar_kv_pairs == 8);

  eval::MqarEvalOptions options;
  options.grid = eval::parse_mqar_grid("128x8");
  options.examples = 3;
  options.batch.show_progress = false;
  eval::use_training_mqar(m.training, true, options);
  REQUIRE(options.grid.size() == 2);
  CHECK(options.grid[0].seq_len == 64);  // the training cell first
  CHECK(options.grid[0].num_kv_pairs == 8);
  CHECK(options.power_a == 0.5);
  CHECK_FALSE(options.random_non_queries);
  CHECK(options.seed == 7);
  CHECK(options.vocab_size == 256);
  nlohmann::json result = eval::run_mqar(*m.model, options);
  CHECK(result["vocab_size"] == 256);
  CHECK(result["power_a"] == 0.5);
  CHECK(result["random_non_queries"] == false);
  CHECK(result["cells"].size() == 2);
  CHECK(result["notes"].size() == 1);  // 128 is beyond the training context of 64
  const double accuracy = result["cells"][0]["accuracy"].get<double>();
  CHECK(accuracy >= 0.0);
  CHECK(accuracy <= 1.0);

  // --mqar-grid given: the grid is kept as it is
  eval::MqarEvalOptions given;
  given.grid = eval::parse_mqar_grid("128x8");
  eval::use_training_mqar(m.training, false, given);
  CHECK(given.grid.size() == 1);
}

TEST_CASE("eval: --max-length, the training seq_len or 2048; a malformed training setting names the field") {
  ScratchDir dir("evalmaxlen");
  write_mqar_checkpoint(dir.path.string(), kMqarRun);
  CHECK(eval::load_model_for_eval(dir.path.string(), "cpu", {"", 300, false}).model->max_length() == 300);
  std::filesystem::remove(dir / "trainer_state.json");
  eval::EvalModel plain = eval::load_model_for_eval(dir.path.string(), "cpu", {"", 0, false});
  CHECK(plain.model->max_length() == 2048);
  CHECK_FALSE(plain.training.mqar);
  write_mqar_checkpoint(dir.path.string(), R"({"source": "mqar", "mqar_power_a": "steep"})");
  CHECK_THROWS_WITH_AS(eval::load_model_for_eval(dir.path.string(), "cpu", {"", 0, false}),
                       (dir / "trainer_state.json" + ": settings.data.mqar_power_a has the wrong type: \"steep\"").c_str(),
                       Error);
}
