// `hla data prepare`: corpus files -> token shards + manifest.json.
//
// Documents are read in order, tokenised in parallel in batches of a few MB, and appended to
// the train or val stream, each preceded by eos (llm.c's convention: every document starts with
// the delimiter). A stream is cut into shards of shard_tokens tokens ("train_000000.bin", ...,
// ".bin.zst" with zstd). A document from `inputs` goes to val with probability val_fraction,
// decided by a hash of (seed, document index), so the split does not depend on thread count;
// every document of `val_inputs` goes to val.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/tokenizer.h"

namespace hla::data {

struct PrepareOptions {
  std::vector<std::string> inputs;      // files, globs, directories
  std::vector<std::string> val_inputs;  // the same, all of it validation
  std::string out_dir;
  double val_fraction = 0.0;
  uint64_t seed = 0;
  int threads = 0;  // 0 = all cores
  bool zstd = false;
  int zstd_level = 3;
  int64_t shard_tokens = 100'000'000;
  CorpusOptions corpus;
  bool progress = true;  // progress bar on stderr
};

struct PrepareStats {
  uint64_t text_bytes = 0;  // document bytes read
  int64_t train_tokens = 0, val_tokens = 0;
  int64_t train_docs = 0, val_docs = 0;
  double seconds = 0;
  nlohmann::ordered_json manifest;
};

// Writes the shards and DIR/manifest.json. Refuses a directory that already has a manifest.
PrepareStats prepare_shards(const PrepareOptions& options, const Tokenizer& tokenizer);

}  // namespace hla::data
