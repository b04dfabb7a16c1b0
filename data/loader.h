// Training batches from token shards or from a text corpus tokenised in memory.
//
// The token stream of each shard is cut into windows of seq_len + 1 tokens that overlap by one
// (window k covers [offset + k*T, offset + k*T + T]); inputs are the first T tokens, targets
// the last T. Windows never cross shards. An epoch visits every window once:
//   sequential: shards in the given order, windows in order, offset 0;
//   shuffle:    shards in a seeded random order, and within each shard the windows in a seeded
//               random order with a seeded offset in [0, (n-1) % T] (so every epoch sees
//               slightly different windows while the count per epoch stays fixed).
// Everything is a pure function of (seed, epoch, shard), so the position {epoch, shard, window}
// is all a resume needs: LoaderPosition goes into trainer_state.json as JSON.
// Only one shard is held in memory at a time; shards are all checked up front (header, size and
// token range; check_shard_tokens in shard.h).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace hla::data {

struct LoaderOptions {
  int64_t batch_size = 8;  // B
  int64_t seq_len = 256;   // T
  bool shuffle = true;
  uint64_t seed = 0;
  // Every token must be below it: each shard is read once, in full, when the loader is built,
  // so a bad token fails the run at its start, naming the shard and the offset.
  int64_t vocab_size = 0;
};

struct LoaderPosition {
  uint64_t epoch = 0;
  uint64_t shard = 0;    // index into this epoch's shard order
  uint64_t window = 0;   // index into that shard's window order: the next window served
  uint64_t batches = 0;  // batches served since the start
  // What the position was taken on; set_position refuses a different data set or seed.
  uint64_t seed = 0;
  int64_t data_tokens = 0;

  nlohmann::json to_json() const;
  static LoaderPosition from_json(const nlohmann::json& j);
};

struct Batch {
  int64_t batch_size = 0, seq_len = 0;
  std::vector<int32_t> inputs;   // (B, T)
  std::vector<int32_t> targets;  // (B, T): inputs shifted left by one token
};

class TokenLoader {
 public:
  // Shard files (.bin / .bin.zst), used in the given order.
  TokenLoader(const std::vector<std::string>& shard_paths, LoaderOptions options);
  // A token stream already in memory (e.g. a tokenised text file), as one shard.
  TokenLoader(const std::vector<int32_t>& tokens, LoaderOptions options, std::string name);

  Batch next_batch();
  LoaderPosition position() const;
  void set_position(const LoaderPosition& position);

  int64_t total_tokens() const { return total_tokens_; }
  int64_t windows_per_epoch() const { return windows_per_epoch_; }
  const LoaderOptions& options() const { return options_; }

 private:
  struct Source {
    std::string path;  // empty for the in-memory stream
    ShardHeader header;
    std::shared_ptr<const ShardData> resident;  // in-memory stream only
  };

  void check_vocab_size_given() const;
  void count_windows();  // fails when no shard holds a whole window
  int64_t windows_in(const Source& s) const;
  size_t shard_at(uint64_t epoch, uint64_t order_index) const;
  void enter_shard();  // loads the shard of position_ and builds its window order

  LoaderOptions options_;
  std::vector<Source> sources_;
  int64_t total_tokens_ = 0, windows_per_epoch_ = 0;
  LoaderPosition position_;

  // The shard being read.
  size_t current_source_ = SIZE_MAX;
  std::shared_ptr<const ShardData> current_data_;
  std::vector<int64_t> window_order_;  // window index -> window start token
};

// Every token of a corpus (see corpus.h), eos before each document, tokenised on `threads`
// threads (0 = all cores).
std::vector<int32_t> tokenize_corpus(const std::vector<std::string>& files,
                                     const Tokenizer& tokenizer, const CorpusOptions& options = {},
                                     int threads = 0);

// A loader straight from .txt / .jsonl (optionally .zst) files: tokenised in memory.
TokenLoader make_text_loader(const std::vector<std::string>& corpus_inputs,
                             const Tokenizer& tokenizer, LoaderOptions options,
                             const CorpusOptions& corpus = {}, int threads = 0);

// The shards of one split: `spec` is a directory written by `hla data prepare` (its
// manifest.json lists them), a glob or a single shard file.
std::vector<std::string> find_shards(const std::string& spec, const std::string& split = "train");

}  // namespace hla::data
