// Fuzz target: the manifest.json of a prepared shard directory, read as `hla train` reads it
// (make_data_sources, train/data_source.h: the tokenizer's vocabulary, the splits, the shard
// list, then the shards' headers). The directory holds real shards, prepared once per process
// by prepare_shards with the options the seed generator uses (fuzz_data.h), so a manifest may
// name them; the input replaces manifest.json.
#include "tests/fuzz/fuzz_data.h"
#include "tests/fuzz/fuzz_util.h"
#include "train/data_source.h"

namespace {

const std::string& shard_dir() {
  static const std::string dir = [] {
    std::string d = hla::fuzz::scratch_dir() + "/shards";
    hla::fuzz::prepare_example_shards(hla::fuzz::scratch_dir() + "/corpus.txt", d);
    return d;
  }();
  return dir;
}

void read_run_data(const std::string& dir) {
  hla::DataSettings settings;
  settings.source = dir;
  settings.batch_size = 2;
  settings.seq_len = 4;
  hla::DataSources sources = hla::make_data_sources(settings);
  (void)sources.train->next();
  if (sources.val) (void)sources.val->next();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = shard_dir();
  hla::fuzz::write_input("shards/manifest.json", data, size);
  hla::fuzz::expect_only_hla_errors([&] { read_run_data(dir); });
  return 0;
}
