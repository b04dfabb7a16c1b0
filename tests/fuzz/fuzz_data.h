// The small prepared data set that the manifest target reads and the seed generator's
// manifests describe: one text file through `hla data prepare` (prepare_shards, byte
// tokenizer, a train and a val split of several shards each).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace hla::fuzz {

// Writes the corpus to corpus_path and prepares it into out_dir; returns the manifest.
nlohmann::ordered_json prepare_example_shards(const std::string& corpus_path, const std::string& out_dir);

}  // namespace hla::fuzz
