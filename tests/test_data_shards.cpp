// Token shards (.bin / .bin.zst): exact round trips and the rejection of corrupt files; corpus
// readers (.txt, .jsonl, .zst, globs, directories) and their errors; `prepare` end to end.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/corpus.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "tests/test_data_util.h"

using namespace hla::data;
using namespace hla::data::testing;

namespace {

std::vector<int32_t> random_tokens(uint64_t seed, size_t n, int32_t vocab) {
  hla::Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng.below(vocab));
  return t;
}

std::string read_bytes(const std::string& path) { return FileReader(path).read_all(); }

std::string read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("shard write/read round trip is exact: uint16 and uint32, plain and zstd") {
  ScratchDir dir("shards");
  for (int32_t vocab : {258, 65536, 200000}) {
    int token_bytes = token_bytes_for_vocab(vocab);
    CHECK(token_bytes == (vocab <= 65536 ? 2 : 4));
    std::vector<int32_t> tokens = random_tokens(vocab, 12345, vocab);
    for (std::string name : {"s.bin", "s.bin.zst"}) {
      write_shard(dir / name, tokens.data(), tokens.size(), token_bytes);
      ShardHeader h = check_shard_tokens(dir / name, vocab);
      CHECK(h.num_tokens == 12345);
      CHECK(h.token_bytes == token_bytes);
      CHECK(read_shard_tokens(dir / name) == tokens);
    }
    // the .bin layout is llm.c's: 256 int32 header (magic, version, count), then the tokens
    std::string raw = read_bytes(dir / "s.bin");
    CHECK(raw.size() == 1024 + 12345 * token_bytes);
    const auto* header = reinterpret_cast<const int32_t*>(raw.data());
    CHECK(header[0] == (token_bytes == 2 ? 20240520 : 20240801));
    CHECK(header[1] == (token_bytes == 2 ? 1 : 2));
    CHECK(header[2] == 12345);
    // the .bin.zst is the same bytes, compressed
    CHECK(read_bytes(dir / "s.bin.zst") == raw);
  }
  std::vector<int32_t> empty;
  write_shard(dir / "empty.bin", empty.data(), 0, 2);
  CHECK(read_shard_tokens(dir / "empty.bin").empty());
  std::vector<int32_t> too_big = {1, 70000};
  CHECK_THROWS_CONTAINING(write_shard(dir / "big.bin", too_big.data(), 2, 2), "does not fit 16 bits");
}

TEST_CASE("corrupt shards are rejected with a message naming the file") {
  ScratchDir dir("badshards");
  std::vector<int32_t> tokens = random_tokens(1, 1000, 258);
  write_shard(dir / "good.bin", tokens.data(), tokens.size(), 2);
  const std::string good = read_bytes(dir / "good.bin");
  auto variant = [&](const std::string& name, std::string bytes) {
    write_file(dir / name, bytes);
    return dir / name;
  };
  auto with_int = [&](int index, int32_t value) {
    std::string b = good;
    std::memcpy(&b[index * 4], &value, 4);
    return b;
  };
  std::string wrong_magic = variant("magic.bin", with_int(0, 12345));
  CHECK_THROWS_CONTAINING(check_shard_tokens(wrong_magic, 258), "bad magic 12345");
  CHECK_THROWS_CONTAINING(read_shard(wrong_magic), wrong_magic);
  CHECK_THROWS_CONTAINING(check_shard_tokens(variant("version.bin", with_int(1, 7)), 258),
                          "corrupt header: magic 20240520 (uint16 tokens) with version 7");
  CHECK_THROWS_CONTAINING(check_shard_tokens(variant("negative.bin", with_int(2, -5)), 258),
                          "negative token count -5");
  CHECK_THROWS_CONTAINING(check_shard_tokens(variant("count.bin", with_int(2, 1001)), 258),
                          "truncated: header says 1001 tokens (2002 bytes) but only 2000 bytes");
  CHECK_THROWS_CONTAINING(read_shard(variant("cut.bin", good.substr(0, good.size() - 3))),
                          "truncated: header says 1000 tokens");
  CHECK_THROWS_CONTAINING(read_shard(variant("extra.bin", good + "xx")), "corrupt: header says 1000 tokens");
  CHECK_THROWS_CONTAINING(check_shard_tokens(variant("short.bin", good.substr(0, 100)), 258),
                          "smaller than the 1024-byte header");
  // zstd: the decompressed bytes are checked the same way, and a cut stream is an error
  write_file(dir / "magic.bin.zst", with_int(0, 99));
  CHECK_THROWS_CONTAINING(read_shard(dir / "magic.bin.zst"), "bad magic 99");
  write_file(dir / "count.bin.zst", with_int(2, 999));
  CHECK_THROWS_CONTAINING(read_shard(dir / "count.bin.zst"), "corrupt: header says 999 tokens");
  write_shard(dir / "good.bin.zst", tokens.data(), tokens.size(), 2);
  std::string compressed = read_raw(dir / "good.bin.zst");
  {
    std::ofstream out(dir / "cut.bin.zst", std::ios::binary);
    out << compressed.substr(0, compressed.size() / 2);
  }
  CHECK_THROWS_CONTAINING(read_shard(dir / "cut.bin.zst"), "truncated zstd stream");
  CHECK_THROWS_CONTAINING(read_shard(dir / "missing.bin"), "cannot open");
}

TEST_CASE("check_shard_tokens reads a shard once and names the first token outside the vocabulary") {
  ScratchDir dir("shardrange");
  std::vector<int32_t> tokens = random_tokens(3, 1000, 258);
  for (std::string name : {"s.bin", "s.bin.zst"}) {
    write_shard(dir / name, tokens.data(), tokens.size(), 2);
    CHECK(check_shard_tokens(dir / name, 258).num_tokens == 1000);
  }
  tokens[700] = 300;
  tokens[900] = 400;
  for (std::string name : {"bad.bin", "bad.bin.zst"}) {
    write_shard(dir / name, tokens.data(), tokens.size(), 2);
    CHECK_THROWS_CONTAINING(check_shard_tokens(dir / name, 258),
                            "shard " + dir / name +
                                ": token 300 at index 700 (byte offset 2424) is outside the vocabulary of 258 tokens");
  }
  // uint32 tokens, and a body that disagrees with the header, are checked on the same pass
  std::vector<int32_t> wide = {5, 70000, 65536};
  write_shard(dir / "wide.bin", wide.data(), wide.size(), 4);
  CHECK(check_shard_tokens(dir / "wide.bin", 70001).token_bytes == 4);
  CHECK_THROWS_CONTAINING(check_shard_tokens(dir / "wide.bin", 70000), "token 70000 at index 1 (byte offset 1028)");
  write_file(dir / "cut.bin.zst", read_bytes(dir / "wide.bin").substr(0, 1030));
  CHECK_THROWS_CONTAINING(check_shard_tokens(dir / "cut.bin.zst", 70001), "truncated: header says 3 tokens");
}

TEST_CASE("corpus readers: txt (whole file or blank-line blocks), jsonl, zst, globs, directories") {
  ScratchDir dir("corpus");
  std::filesystem::create_directories(dir / "sub");
  write_file(dir / "a.txt", "first para\nline two\n\n\nsecond para\n");
  write_file(dir / "b.jsonl", "{\"text\": \"doc one\", \"id\": 1}\n\n{\"body\": \"x\", \"text\": \"doc \\u00e9 two\\n\"}");
  write_file(dir / "sub/c.jsonl.zst", "{\"text\": \"zst doc\"}\n");
  write_file(dir / "sub/d.txt.zst", "compressed text\n\n");
  write_file(dir / "notes.md", "not a corpus file");
  CHECK(read_corpus({dir / "a.txt"}) == std::vector<std::string>{"first para\nline two\n\n\nsecond para\n"});
  CorpusOptions blocks;
  blocks.txt_split = TxtSplit::BlankLine;
  CHECK(read_corpus({dir / "a.txt"}, blocks) == std::vector<std::string>{"first para\nline two", "second para"});
  CHECK(read_corpus({dir / "b.jsonl"}) == std::vector<std::string>{"doc one", "doc \xC3\xA9 two\n"});
  CorpusOptions body;
  body.jsonl_field = "body";
  CHECK_THROWS_CONTAINING(read_corpus({dir / "b.jsonl"}, body), "b.jsonl:1: no string field \"body\"");
  CHECK(read_corpus({dir / "sub/c.jsonl.zst", dir / "sub/d.txt.zst"}, blocks) ==
        std::vector<std::string>{"zst doc", "compressed text"});
  // a directory gives its corpus files recursively, sorted; globs expand sorted too
  std::vector<std::string> all = expand_corpus_inputs({dir.path.string()});
  CHECK(all == std::vector<std::string>{dir / "a.txt", dir / "b.jsonl", dir / "sub/c.jsonl.zst", dir / "sub/d.txt.zst"});
  CHECK(expand_corpus_inputs({dir / "sub/*.zst"}) == std::vector<std::string>{dir / "sub/c.jsonl.zst", dir / "sub/d.txt.zst"});
  CHECK_THROWS_CONTAINING(expand_corpus_inputs({dir / "notes.md"}), "is not a supported kind");
  CHECK_THROWS_CONTAINING(expand_corpus_inputs({dir / "nothing*.txt"}), "matches no files");
  CHECK_THROWS_CONTAINING(expand_corpus_inputs({dir / "absent.txt"}), "does not exist");
  write_file(dir / "bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{\"text\": unquoted}\n");
  CHECK_THROWS_CONTAINING(read_corpus({dir / "bad.jsonl"}), "bad.jsonl:3: not valid JSON");
  write_file(dir / "num.jsonl", "{\"text\": 5}\n");
  CHECK_THROWS_CONTAINING(read_corpus({dir / "num.jsonl"}), "num.jsonl:1: no string field \"text\"");
}

namespace {

// The byte tokenizer's ids, but a vocabulary of 200: bytes 200..255 are out of range.
struct ShortVocabTokenizer : hla::data::Tokenizer {
  std::unique_ptr<Tokenizer> bytes = make_byte_tokenizer();
  std::vector<int32_t> encode(std::string_view text) const override { return bytes->encode(text); }
  std::string decode(const std::vector<int32_t>& ids) const override { return bytes->decode(ids); }
  int32_t vocab_size() const override { return 200; }
  int32_t eos_id() const override { return 0; }
  int32_t pad_id() const override { return 1; }
  std::string name() const override { return "short-vocab"; }
};

}  // namespace

TEST_CASE("prepare checks every shard it writes against the tokenizer's vocabulary") {
  ScratchDir dir("prepare_range");
  write_file(dir / "corpus.txt", "ab\xF0 and more");
  PrepareOptions o;
  o.inputs = {dir / "corpus.txt"};
  o.out_dir = dir / "out";
  o.progress = false;
  CHECK_THROWS_CONTAINING(prepare_shards(o, ShortVocabTokenizer()),
                          "shard " + dir / "out/train_000000.bin" +
                              ": token 240 at index 3 (byte offset 1030) is outside the vocabulary of 200 tokens");
}

TEST_CASE("prepare: shards hold eos + tokens of every document; the split ignores thread count") {
  ScratchDir dir("prepare");
  std::vector<std::string> docs = make_documents(11, 120, 30);
  std::string jsonl;
  for (const auto& d : docs) jsonl += nlohmann::json({{"text", d}}).dump() + "\n";
  write_file(dir / "corpus.jsonl.zst", jsonl);
  write_file(dir / "heldout.txt", "held-out document");
  auto tok = make_byte_tokenizer();
  PrepareOptions o;
  o.inputs = {dir / "corpus.jsonl.zst"};
  o.val_inputs = {dir / "heldout.txt"};
  o.val_fraction = 0.25;
  o.shard_tokens = 5000;
  o.progress = false;
  o.zstd = true;
  o.out_dir = dir / "out1";
  o.threads = 1;
  PrepareStats one = prepare_shards(o, *tok);
  o.out_dir = dir / "out2";
  o.threads = 2;
  o.zstd = false;
  PrepareStats two = prepare_shards(o, *tok);
  CHECK(one.train_docs + one.val_docs == 121);
  CHECK(one.val_docs > 15);  // about 0.25 * 120 + 1
  CHECK(one.val_docs < 50);
  // every document appears once, preceded by eos, in order, in the split the seed chose
  std::vector<std::string> split_docs[2];
  for (int k = 0; k < 2; k++) {
    std::vector<int32_t> zst_stream, bin_stream;
    for (const auto& shard : find_shards(dir / "out1", k ? "val" : "train")) {
      auto t = read_shard_tokens(shard);
      CHECK(t.size() <= 5000);
      zst_stream.insert(zst_stream.end(), t.begin(), t.end());
    }
    for (const auto& shard : find_shards(dir / "out2", k ? "val" : "train")) {
      auto t = read_shard_tokens(shard);
      bin_stream.insert(bin_stream.end(), t.begin(), t.end());
    }
    CHECK(zst_stream == bin_stream);
    CHECK(static_cast<int64_t>(zst_stream.size()) == (k ? one.val_tokens : one.train_tokens));
    REQUIRE(!zst_stream.empty());
    CHECK(zst_stream[0] == tok->eos_id());
    for (int32_t t : zst_stream) {
      if (t == tok->eos_id()) {
        split_docs[k].emplace_back();
      } else {
        split_docs[k].back() += static_cast<char>(t);
      }
    }
  }
  size_t next[2] = {0, 0};
  for (const auto& d : docs) {
    int k = next[0] < split_docs[0].size() && split_docs[0][next[0]] == d ? 0 : 1;
    REQUIRE(next[k] < split_docs[k].size());
    CHECK(split_docs[k][next[k]++] == d);
  }
  CHECK(next[0] == split_docs[0].size());
  REQUIRE(next[1] + 1 == split_docs[1].size());
  CHECK(split_docs[1].back() == "held-out document");
  // manifest
  std::ifstream in(dir / "out1/manifest.json");
  auto m = nlohmann::json::parse(in);
  CHECK(m["tokenizer"]["name"] == "byte");
  CHECK(m["tokenizer"]["hash"] == tok->hash());
  CHECK(m["token_dtype"] == "uint16");
  CHECK(m["compression"] == "zstd");
  CHECK(m["splits"]["train"]["tokens"] == one.train_tokens);
  CHECK(m["sources"].size() == 2);
  CHECK(m["shards"][0]["name"] == "train_000000.bin.zst");
  // find_shards reads the manifest through parse_json and checks every entry it uses
  auto manifest_error = [&](const std::string& text) {
    write_file(dir / "m/manifest.json", text);
    std::string message;
    try {
      find_shards(dir / "m");
    } catch (const hla::Error& e) {
      message = e.what();
    }
    return message;
  };
  std::filesystem::create_directories(dir / "m");
  const std::string m_path = dir / "m/manifest.json";
  CHECK(manifest_error(std::string(100000, '[')) == m_path + ": JSON nested deeper than 64 levels");
  CHECK(manifest_error("[1]") == m_path + ": not a JSON object with a \"shards\" list");
  CHECK(manifest_error(R"({"shards": 5})") == m_path + ": not a JSON object with a \"shards\" list");
  CHECK(manifest_error(R"({"shards": [{"name": "a.bin", "split": 7}]})") ==
        m_path + ": shards[0] needs a string \"name\" and \"split\": {\"name\":\"a.bin\",\"split\":7}");
  CHECK(manifest_error(R"({"shards": [{"name": "", "split": "train"}]})") ==
        m_path + ": shards[0] needs a string \"name\" and \"split\": {\"name\":\"\",\"split\":\"train\"}");
  // a second prepare into the same directory is refused
  CHECK_THROWS_CONTAINING(prepare_shards(o, *tok), "already holds a prepared data set");
}
