// TokenLoader: batch layout, windows per epoch, determinism by seed, bit-exact resume from a
// JSON position, reading across plain and zstd shards, and the text loader.
#include <doctest/doctest.h>

#include <set>

#include "data/loader.h"
#include "train/data_source.h"
#include "tests/test_data_util.h"

using namespace hla::data;
using namespace hla::data::testing;

namespace {

// Token i of the stream is `base + i`: a window's first input tells where it starts.
std::vector<int32_t> counting_tokens(int32_t base, int32_t n) {
  std::vector<int32_t> t(n);
  for (int32_t i = 0; i < n; i++) t[i] = base + i;
  return t;
}

// The counting streams below stay under 65536, the uint16 shards' limit.
LoaderOptions options(int64_t B, int64_t T, bool shuffle, uint64_t seed, int64_t vocab_size = 65536) {
  LoaderOptions o;
  o.batch_size = B, o.seq_len = T, o.shuffle = shuffle, o.seed = seed, o.vocab_size = vocab_size;
  return o;
}

}  // namespace

TEST_CASE("loader: targets are inputs shifted by one; sequential order walks the stream") {
  TokenLoader loader(counting_tokens(0, 101), options(2, 10, false, 0), "counting");
  CHECK(loader.windows_per_epoch() == 10);  // (101 - 1) / 10
  Batch b = loader.next_batch();
  REQUIRE(b.inputs.size() == 20);
  for (int i = 0; i < 20; i++) {
    CHECK(b.inputs[i] == i);  // windows [0, 11) and [10, 21)
    CHECK(b.targets[i] == i + 1);
  }
  for (int k = 0; k < 4; k++) loader.next_batch();
  // the sixth batch starts epoch 1 at the beginning again
  CHECK(loader.next_batch().inputs[0] == 0);
  CHECK(loader.position().epoch == 1);
}

TEST_CASE("loader: shuffled epochs visit every window once, deterministically by seed") {
  const int64_t T = 8;
  auto tokens = counting_tokens(0, 8 * 50 + 5);  // 50 windows, 4 tokens of slack for the offset
  TokenLoader a(tokens, options(5, T, true, 42), "a");
  TokenLoader b(tokens, options(5, T, true, 42), "b");
  TokenLoader c(tokens, options(5, T, true, 43), "c");
  CHECK(a.windows_per_epoch() == 50);
  std::vector<int32_t> starts_a, starts_c;
  for (int step = 0; step < 10; step++) {  // exactly one epoch
    Batch ba = a.next_batch(), bb = b.next_batch(), bc = c.next_batch();
    CHECK(ba.inputs == bb.inputs);
    CHECK(ba.targets == bb.targets);
    for (int i = 0; i < 5; i++) {
      starts_a.push_back(ba.inputs[i * T]);
      starts_c.push_back(bc.inputs[i * T]);
      for (int t = 0; t < T; t++) CHECK(ba.targets[i * T + t] == ba.inputs[i * T + t] + 1);
    }
  }
  CHECK(starts_a != starts_c);
  std::set<int32_t> distinct(starts_a.begin(), starts_a.end());
  CHECK(distinct.size() == 50);
  int32_t offset = starts_a[0] % T;  // one offset per (epoch, shard), in [0, 4]
  CHECK(offset <= 4);
  for (int32_t s : starts_a) CHECK(s % T == offset);
  CHECK(a.position().epoch == 0);
  a.next_batch();
  CHECK(a.position().epoch == 1);
}

TEST_CASE("loader: resume from a JSON position reproduces the batches exactly") {
  ScratchDir dir("resume");
  // three shards of different lengths, one compressed: the order crosses shards and epochs
  std::vector<std::string> shards = {dir / "s0.bin", dir / "s1.bin.zst", dir / "s2.bin"};
  int32_t sizes[] = {300, 170, 233};
  int32_t base = 0;
  for (int k = 0; k < 3; k++) {
    auto t = counting_tokens(base, sizes[k]);
    write_shard(shards[k], t.data(), t.size(), 2);
    base += 1000;
  }
  for (bool shuffle : {false, true}) {
    TokenLoader straight(shards, options(3, 16, shuffle, 7));
    std::vector<Batch> expected;
    nlohmann::json saved;
    for (int step = 0; step < 40; step++) {  // about 3 epochs of 42 windows
      if (step == 17) saved = straight.position().to_json();
      expected.push_back(straight.next_batch());
    }
    TokenLoader resumed(shards, options(3, 16, shuffle, 7));
    resumed.set_position(LoaderPosition::from_json(nlohmann::json::parse(saved.dump())));
    CHECK(resumed.position().batches == 17);
    for (int step = 17; step < 40; step++) {
      Batch b = resumed.next_batch();
      CHECK(b.inputs == expected[step].inputs);
      CHECK(b.targets == expected[step].targets);
    }
    // windows never cross shards: inside a window the tokens count up by one
    for (const auto& b : expected) {
      for (int i = 0; i < 3; i++) {
        for (int t = 1; t < 16; t++) CHECK(b.inputs[i * 16 + t] == b.inputs[i * 16] + t);
      }
    }
  }
  TokenLoader other_seed(shards, options(3, 16, true, 8));
  TokenLoader loader(shards, options(3, 16, true, 7));
  CHECK_THROWS_CONTAINING(other_seed.set_position(loader.position()), "saved with seed 7");
}

TEST_CASE("loader: errors for data too small and for bad shards") {
  CHECK_THROWS_CONTAINING(TokenLoader(counting_tokens(0, 10), options(1, 16, false, 0), "tiny"),
                          "tiny: token loader: 10 tokens");
  ScratchDir dir("loaderbad");
  write_file(dir / "bad.bin", std::string(2000, 'x'));
  CHECK_THROWS_CONTAINING(TokenLoader({dir / "bad.bin"}, options(1, 4, false, 0)), dir / "bad.bin");
}

TEST_CASE("loader: every shard's tokens are checked against the vocabulary when the loader is built") {
  ScratchDir dir("loaderrange");
  std::vector<std::string> shards = {dir / "s0.bin", dir / "s1.bin.zst"};
  auto t0 = counting_tokens(0, 100), t1 = counting_tokens(100, 100);
  t1[50] = 300;  // outside a vocabulary of 258, far from the first window
  write_shard(shards[0], t0.data(), t0.size(), 2);
  write_shard(shards[1], t1.data(), t1.size(), 2);
  CHECK_THROWS_CONTAINING(TokenLoader(shards, options(1, 4, false, 0, 258)),
                          "shard " + shards[1] + ": token 300 at index 50 (byte offset 1124) is outside the vocabulary of 258 tokens");
  CHECK(TokenLoader(shards, options(1, 4, false, 0, 301)).total_tokens() == 200);
  CHECK_THROWS_CONTAINING(TokenLoader(t1, options(1, 4, false, 0, 258), "stream"),
                          "stream: token 300 at index 50 is outside the vocabulary of 258 tokens");
  CHECK_THROWS_CONTAINING(TokenLoader(shards, options(1, 4, false, 0, 0)),
                          "token loader: vocabulary size 0: the tokens cannot be checked");
}

TEST_CASE("a training run over shards checks every shard's tokens before its first step") {
  ScratchDir dir("runrange");
  // what `hla data prepare` writes, as far as a run reads it
  write_file(dir / "manifest.json", R"({"tokenizer": {"vocab_size": 258}, "splits": {"val": {"shards": 0}},
                                        "shards": [{"name": "train_000000.bin", "split": "train"}]})");
  std::vector<int32_t> tokens = counting_tokens(0, 40);
  tokens[33] = 258;  // outside the vocabulary of 258: ids 0..257
  write_shard(dir / "train_000000.bin", tokens.data(), tokens.size(), 2);
  hla::DataSettings settings;
  settings.source = dir.path.string();
  settings.batch_size = 1;
  settings.seq_len = 4;
  CHECK_THROWS_CONTAINING(hla::make_data_sources(settings),
                          "shard " + dir / "train_000000.bin" +
                              ": token 258 at index 33 (byte offset 1090) is outside the vocabulary of 258 tokens");
}

TEST_CASE("a shard directory's manifest with missing or mistyped fields is an error naming the field") {
  ScratchDir dir("badmanifest");
  write_shard(dir / "train_000000.bin", counting_tokens(0, 40).data(), 40, 2);
  hla::DataSettings settings;
  settings.source = dir.path.string();
  settings.batch_size = 1;
  settings.seq_len = 4;
  const std::string manifest = dir / "manifest.json";
  const std::string shards = R"("shards": [{"name": "train_000000.bin", "split": "train"}])";
  write_file(manifest, "{" + shards + "}");
  CHECK_THROWS_CONTAINING(hla::make_data_sources(settings), manifest + ": field 'tokenizer' is missing");
  write_file(manifest, R"({"tokenizer": {}, )" + shards + "}");
  CHECK_THROWS_CONTAINING(hla::make_data_sources(settings), manifest + ": field 'tokenizer.vocab_size' is missing");
  write_file(manifest, R"({"tokenizer": {"vocab_size": "258"}, )" + shards + "}");
  CHECK_THROWS_CONTAINING(hla::make_data_sources(settings), "tokenizer.vocab_size");
  write_file(manifest, R"({"tokenizer": {"vocab_size": 258}, "splits": {"val": 5}, )" + shards + "}");
  CHECK_THROWS_CONTAINING(hla::make_data_sources(settings), manifest + ": field 'splits.val' must be an object, got 5");
  write_file(manifest, "[1, 2]");
  CHECK_THROWS_CONTAINING(hla::make_data_sources(settings), manifest + ": a manifest must be a JSON object, got [1,2]");
}

TEST_CASE("text loader tokenises a corpus file in memory, eos before each document") {
  ScratchDir dir("textloader");
  write_file(dir / "t.txt.zst", "para one\n\npara two\n");
  auto tok = make_byte_tokenizer();
  CorpusOptions blocks;
  blocks.txt_split = TxtSplit::BlankLine;
  std::vector<int32_t> tokens = tokenize_corpus({dir / "t.txt.zst"}, *tok, blocks);
  std::vector<int32_t> expected = {256};
  for (char c : std::string("para one")) expected.push_back(c);
  expected.push_back(256);
  for (char c : std::string("para two")) expected.push_back(c);
  CHECK(tokens == expected);
  TokenLoader loader = make_text_loader({dir / "t.txt.zst"}, *tok, options(1, 4, false, 0), blocks);
  CHECK(loader.total_tokens() == 18);
  Batch b = loader.next_batch();
  CHECK(b.inputs == std::vector<int32_t>{256, 'p', 'a', 'r'});
  CHECK(b.targets == std::vector<int32_t>{'p', 'a', 'r', 'a'});
}
