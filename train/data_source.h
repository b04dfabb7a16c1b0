// Batch sources for the trainer: MQAR (data/mqar.h), text files tokenised in memory, or token
// shards (data/loader.h). Each serves (B, T) I32 input and target tensors and can report and
// restore its position as JSON, which is all a bit-exact resume needs from the data side. With
// [data] documents = "reset" a text or shard source also serves each batch's document
// boundaries (train/documents.h).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tensor/tensor.h"
#include "train/run_config.h"

namespace hla {

struct TrainBatch {
  Tensor ids;      // (B, T) I32, CPU
  Tensor targets;  // (B, T) I32, CPU; kIgnoreIndex where no loss
  int64_t valid = 0;  // targets that count in the loss
  // [data] documents = "reset": offsets of the document fragments' first tokens in the
  // row-major B * T tokens, then B * T (train/documents.h); empty: the rows are whole sequences.
  std::vector<int64_t> cu_seqlens;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual TrainBatch next() = 0;
  virtual nlohmann::json position() const = 0;
  virtual void set_position(const nlohmann::json& position) = 0;
};

// Counts the non-ignored targets of a (B, T) I32 tensor.
int64_t count_valid_targets(const Tensor& targets);

struct DataSources {
  std::unique_ptr<BatchSource> train;
  std::unique_ptr<BatchSource> val;  // null when the data has no validation part
  bool mqar = false;                 // validation reports MQAR accuracy
  int vocab_size = 0;                // smallest model vocabulary that covers the data
  std::string description;           // one line for the start-up table
};

// "mqar", a shard directory (with manifest.json) or .bin/.bin.zst files, else text corpus
// inputs (.txt/.jsonl[.zst] files, globs, directories; several separated by commas).
DataSources make_data_sources(const DataSettings& settings);

// An MQAR stream: batch k holds examples k*B .. k*B+B-1 of `seed` (cycling over
// `num_examples` when that is > 0).
std::unique_ptr<BatchSource> make_mqar_source(const DataSettings& settings, uint64_t seed,
                                              int64_t num_examples);

}  // namespace hla
