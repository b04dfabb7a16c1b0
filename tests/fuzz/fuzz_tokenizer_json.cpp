// Fuzz target: Hugging Face tokenizer.json (load_tokenizer_json, data/bpe.h). A tokenizer it
// accepts must encode and decode a text with spaces, a metaspace and invalid UTF-8, and decode
// each of its first ids alone.
#include "data/bpe.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

constexpr int32_t kIdsDecoded = 1024;

void use(const hla::data::BpeTokenizer& tokenizer) {
  std::vector<int32_t> ids = tokenizer.encode("Hello world,\n \xe2\x96\x81tab\there \xff\xfe end");
  (void)tokenizer.decode(ids);
  for (int32_t id = 0; id < std::min(tokenizer.vocab_size(), kIdsDecoded); id++) (void)tokenizer.decode({id});
  (void)tokenizer.hash();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = hla::fuzz::write_input("tokenizer.json", data, size);
  hla::fuzz::expect_only_hla_errors([&] { use(*hla::data::load_tokenizer_json(path)); });
  return 0;
}
