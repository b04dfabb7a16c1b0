// Fuzz target: one token shard (data/shard.h) and the loader over it (data/loader.h). The first
// input byte picks the file: 0 the rest as a .bin, 1 the rest as a .bin.zst (any zstd bytes),
// 2 the rest compressed here into a .bin.zst (a well-formed stream of a fuzzed .bin).
#include <zstd.h>

#include "data/loader.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::string write_shard_file(const uint8_t* data, size_t size) {
  if (size == 0 || data[0] % 3 == 0) return hla::fuzz::write_input("shard.bin", data + (size > 0), size - (size > 0));
  if (data[0] % 3 == 1) return hla::fuzz::write_input("shard.bin.zst", data + 1, size - 1);
  std::string packed(ZSTD_compressBound(size - 1), '\0');
  size_t n = ZSTD_compress(packed.data(), packed.size(), data + 1, size - 1, 1);
  if (ZSTD_isError(n)) hla::fuzz::finding(std::string("ZSTD_compress: ") + ZSTD_getErrorName(n));
  return hla::fuzz::write_input("shard.bin.zst", reinterpret_cast<const uint8_t*>(packed.data()), n);
}

constexpr int64_t kVocab = 258;  // the byte tokenizer's: ids 258 and up are refused

// read_shard on its own (the loader reads a shard again when its turn comes; eval --ppl-file
// reads one with read_shard_tokens, with no vocabulary pass first): it must not trust the
// header's token count (2^31 tokens claimed over a few bytes: gigabytes, an out-of-memory).
void read_whole(const std::string& path) {
  hla::data::ShardData shard = hla::data::read_shard(path);
  for (int64_t i = 0; i < shard.header.num_tokens; i++) (void)shard.token(i);
}

// The training path: the vocabulary check of every shard, then the loader.
void check_and_load(const std::string& path) {
  (void)hla::data::check_shard_tokens(path, kVocab);
  hla::data::LoaderOptions options;
  options.batch_size = 2;
  options.seq_len = 4;
  options.vocab_size = kVocab;
  (void)hla::data::TokenLoader({path}, options).next_batch();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = write_shard_file(data, size);
  hla::fuzz::expect_only_hla_errors([&] { read_whole(path); });
  hla::fuzz::expect_only_hla_errors([&] { check_and_load(path); });
  return 0;
}
