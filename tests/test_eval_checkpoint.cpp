// `hla eval` on a checkpoint: the model and the tokenizer it is paired with must agree on the
// vocabulary, whether the tokenizer comes from the checkpoint or from --tokenizer.
#include <doctest/doctest.h>

#include "data/bpe.h"
#include "data/bpe_train.h"
#include "eval/model_adapter.h"
#include "nn/model.h"
#include "nn/weights.h"
#include "tests/test_data_util.h"

using namespace hla;
using namespace hla::data::testing;

namespace {

// config.json + model.safetensors of a 2-layer transformer over the byte vocabulary (258).
void write_byte_checkpoint(const std::string& dir) {
  ModelConfig c;
  c.model_type = "transformer";
  c.hidden_size = 16, c.intermediate_size = 24;
  c.num_hidden_layers = 2, c.num_heads = 2;
  c.vocab_size = 258;
  c.set_hybrid("transformer");
  c.save(dir + "/" + kModelConfigFile);
  save_model_weights(dir, make_model(c, 1)->parameters());
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
