// The prepared data set of fuzz_data.h.
#include "tests/fuzz/fuzz_data.h"

#include <fstream>

#include "data/prepare.h"

namespace hla::fuzz {

nlohmann::ordered_json prepare_example_shards(const std::string& corpus_path, const std::string& out_dir) {
  {
    std::ofstream corpus(corpus_path, std::ios::binary | std::ios::trunc);
    for (int doc = 0; doc < 12; doc++)
      corpus << "Document " << doc << ": the quick brown fox jumps over the lazy dog.\n\n";
  }
  data::PrepareOptions options;
  options.inputs = {corpus_path};
  options.out_dir = out_dir;
  options.val_fraction = 0.3;
  options.threads = 1;
  options.shard_tokens = 200;
  options.progress = false;
  options.corpus.txt_split = data::TxtSplit::BlankLine;
  return data::prepare_shards(options, *data::make_byte_tokenizer()).manifest;
}

}  // namespace hla::fuzz
