// Where `hla eval` gets its model: a trained checkpoint, or the n-gram baseline.
#pragma once
#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "eval/lm.h"

namespace hla::eval {

struct EvalModel {
  std::unique_ptr<LanguageModel> model;
  std::unique_ptr<data::Tokenizer> tokenizer;  // the one the model was trained with
};

// Loads a checkpoint written by `hla train` onto device "cpu" or "cuda", with the tokenizer
// `tokenizer_spec` ("byte" or a tokenizer.json; empty: the checkpoint's own). A tokenizer with
// more ids than the model has logits is an hla::Error naming both sizes and both files.
EvalModel load_model_for_eval(const std::string& checkpoint_dir, const std::string& device,
                              const std::string& tokenizer_spec = "");

// The tokenizer a checkpoint was trained with: its tokenizer.json, else trainer_state.json's
// settings.data.tokenizer, else "byte" (a spec for data::load_tokenizer).
std::string checkpoint_tokenizer(const std::string& checkpoint_dir);

}  // namespace hla::eval
