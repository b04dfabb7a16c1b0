// Where `hla eval` gets its model: a trained checkpoint, or the n-gram baseline.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "eval/lm.h"
#include "eval/mqar_eval.h"
#include "tensor/dtype.h"

namespace hla::eval {

// What `hla eval` takes from the training run: trainer_state.json "settings" (absent file or
// fields keep these defaults, which are hla train's).
struct TrainingRun {
  int64_t seq_len = 0;  // data.seq_len; 0: unknown
  bool mqar = false;    // data.source is "mqar": the mqar_* fields are the task it learnt
  int64_t mqar_vocab = 8192, mqar_kv_pairs = 16;
  double mqar_power_a = 0.01;
  bool mqar_random_non_queries = true;
  uint64_t val_seed = 1;  // the MQAR validation stream
};

struct EvalModel {
  std::unique_ptr<LanguageModel> model;
  std::unique_ptr<data::Tokenizer> tokenizer;  // the one the model was trained with
  TrainingRun training;
};

struct EvalModelOptions {
  std::string tokenizer;  // "byte" or a tokenizer.json; empty: the checkpoint's own
  int max_length = 0;     // the model's context; 0: the training seq_len, else 2048
  // The tasks tokenise text (LM tasks, RULER, perplexity; MQAR does not): a tokenizer with more
  // ids than the model has logits is then an hla::Error naming both sizes and both files.
  bool check_tokenizer = true;
  DType compute_dtype = DType::F32;  // BF16: the forward and the decoder in bf16 (cuda)
};

// Loads a checkpoint written by `hla train` onto device "cpu" or "cuda". A malformed
// trainer_state.json setting is an hla::Error naming the file and the field.
EvalModel load_model_for_eval(const std::string& checkpoint_dir, const std::string& device,
                              const EvalModelOptions& options = {});

// The tokenizer a checkpoint was trained with: its tokenizer.json, else trainer_state.json's
// settings.data.tokenizer, else "byte" (a spec for data::load_tokenizer).
std::string checkpoint_tokenizer(const std::string& checkpoint_dir);

// MQAR as the run trained on it: power_a, random_non_queries and the validation seed; the
// vocabulary when options.vocab_size is 0; and, when `add_training_cell`, the training cell
// (seq_len x kv_pairs) in front of the grid unless it is there. Nothing for a text run.
void use_training_mqar(const TrainingRun& run, bool add_training_cell, MqarEvalOptions& options);

}  // namespace hla::eval
