// Tokenizers: byte-level, the GPT-2 pre-tokenizer, BPE training (determinism and a hand-checked
// merge sequence), exact round trips, and tokenizer.json export/import, including the
// Llama-2-style byte-fallback layout and the errors for files hla cannot read (bad or repeated
// ids, deep nesting), and a save on a full disk that keeps the old file.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/bpe.h"
#include "data/bpe_train.h"
#include "data/pretokenize.h"
#include "tensor/json.h"
#include "tests/test_data_util.h"
#include "tests/test_full_disk.h"

using namespace hla::data;
using namespace hla::data::testing;

namespace {

std::vector<std::string> pieces_of(std::string_view text) {
  std::vector<std::string_view> views;
  split_gpt2(text, views);
  return {views.begin(), views.end()};
}

const std::vector<std::string>& utf8_samples() {
  static const std::vector<std::string> samples = {
      "Hello world! It's 2024, isn't it?",
      "naïve café — Ünïcödé “quotes” and emoji 🙂🚀",
      "日本語のテキスト、中文文本。한국어 텍스트",
      "Ελληνικά, русский текст, עברית, العربية",
      "  leading spaces\n\n\ttabs\r\nand CRLF   \n",
      "x = f(3.14) + 1e-9; // code\n    indented();",
      "",
  };
  return samples;
}

std::unique_ptr<BpeTokenizer> small_trained_tokenizer() {
  BpeTrainOptions options;
  options.vocab_size = 350;
  return train_bpe(make_documents(1, 200, 60), options, "bpe:test");
}

}  // namespace

TEST_CASE("byte tokenizer: ids are the bytes, specials follow, round trip is exact") {
  auto tok = make_byte_tokenizer();
  CHECK(tok->vocab_size() == 258);
  CHECK(tok->eos_id() == 256);
  CHECK(tok->pad_id() == 257);
  std::string bytes = random_bytes(7, 5000);
  std::vector<int32_t> ids = tok->encode(bytes);
  REQUIRE(ids.size() == bytes.size());
  for (size_t i = 0; i < ids.size(); i++) CHECK(ids[i] == static_cast<uint8_t>(bytes[i]));
  CHECK(tok->decode(ids) == bytes);
  CHECK(load_tokenizer("byte")->hash() == tok->hash());
  CHECK_THROWS_CONTAINING(tok->decode({258}), "cannot decode id 258");
}

TEST_CASE("GPT-2 pre-tokenizer splits as the GPT-2 regex does") {
  using V = std::vector<std::string>;
  CHECK(pieces_of("Hello world") == V{"Hello", " world"});
  CHECK(pieces_of("I'm  here\n\n") == V{"I", "'m", " ", " here", "\n\n"});
  CHECK(pieces_of("don't!! 's") == V{"don", "'t", "!!", " '", "s"});
  CHECK(pieces_of("x\n y") == V{"x", "\n", " y"});
  CHECK(pieces_of("abc123 4.5") == V{"abc", "123", " 4", ".", "5"});
  CHECK(pieces_of("héllo wörld 日本") == V{"héllo", " wörld", " 日本"});
  CHECK(pieces_of("a \t b") == V{"a", " \t", " b"});
  CHECK(pieces_of("end  ") == V{"end", "  "});
  CHECK(pieces_of("\xff\xfe" "ab") == V{"\xff\xfe", "ab"});
  // the pieces always cover the input exactly, whatever the bytes
  for (uint64_t seed = 0; seed < 20; seed++) {
    std::string text = random_bytes(seed, 300);
    std::string joined;
    for (const auto& p : pieces_of(text)) {
      CHECK(!p.empty());
      joined += p;
    }
    CHECK(joined == text);
  }
}

TEST_CASE("BPE training: a hand-checked merge sequence") {
  // One piece "aaabdaaabac". Pair counts: aa 4, ab 2, others 1 -> merge (a,a) = 256.
  // Then [aa a b d aa a b a c]: (aa,a) and (a,b) both occur twice; the smaller pair (97,98)
  // wins -> "ab" = 257. Then [aa ab d aa ab a c]: (aa,ab) twice -> "aaab" = 258. Every pair
  // left occurs once, below min_frequency 2, so training stops with 3 merges.
  BpeTrainOptions options;
  options.vocab_size = 1000;
  auto tok = train_bpe({"aaabdaaabac"}, options, "bpe:tiny");
  const BpeModel& m = tok->model();
  REQUIRE(m.merges.size() == 3);
  CHECK(m.merges[0].left == 'a');
  CHECK(m.merges[0].right == 'a');
  CHECK(m.merges[1].left == 'a');
  CHECK(m.merges[1].right == 'b');
  CHECK(m.merges[2].left == 256);
  CHECK(m.merges[2].right == 257);
  CHECK(m.vocab[256] == "aa");
  CHECK(m.vocab[257] == "ab");
  CHECK(m.vocab[258] == "aaab");
  CHECK(m.vocab[259] == "<|endoftext|>");
  CHECK(m.vocab[260] == "<|pad|>");
  CHECK(tok->vocab_size() == 261);
  CHECK(tok->eos_id() == 259);
  CHECK(tok->pad_id() == 260);
  CHECK(tok->encode("aaabdaaabac") == std::vector<int32_t>{258, 'd', 258, 'a', 'c'});
  // vocab_size caps the merges: 256 bytes + 2 merges + 2 specials
  options.vocab_size = 260;
  CHECK(train_bpe({"aaabdaaabac"}, options, "bpe:tiny")->model().merges.size() == 2);
  // with min_frequency 1 the merges continue down to single occurrences: "ac" (97,99) next
  options.vocab_size = 262;
  options.min_frequency = 1;
  auto more = train_bpe({"aaabdaaabac"}, options, "bpe:tiny");
  REQUIRE(more->model().merges.size() == 4);
  CHECK(more->model().vocab[259] == "ac");
}

TEST_CASE("BPE training is deterministic and its encoding round-trips any bytes") {
  auto a = small_trained_tokenizer();
  auto b = small_trained_tokenizer();
  CHECK(a->hash() == b->hash());
  CHECK(a->model().vocab == b->model().vocab);
  CHECK(a->vocab_size() == 350);
  for (const auto& s : utf8_samples()) {
    CHECK(a->decode(a->encode(s)) == s);
    CHECK(a->encode(s) == b->encode(s));
  }
  for (uint64_t seed = 0; seed < 10; seed++) {
    std::string bytes = random_bytes(seed, 2000);  // mostly invalid UTF-8
    CHECK(a->decode(a->encode(bytes)) == bytes);
  }
  // merges shorten text: the training-like text needs far fewer tokens than bytes
  std::string doc = make_documents(99, 1, 200)[0];
  CHECK(a->encode(doc).size() * 2 < doc.size());
  // parallel encoding equals serial encoding
  std::vector<std::string> docs = make_documents(5, 50, 40);
  auto parallel = encode_documents(*a, docs, 2);
  for (size_t i = 0; i < docs.size(); i++) CHECK(parallel[i] == a->encode(docs[i]));
}

TEST_CASE("tokenizer.json export and import give identical encodings") {
  ScratchDir dir("tokjson");
  auto trained = small_trained_tokenizer();
  save_tokenizer_json(*trained, dir / "tok.json");
  auto loaded = load_tokenizer(dir / "tok.json");
  CHECK(loaded->hash() == trained->hash());
  CHECK(loaded->vocab_size() == trained->vocab_size());
  CHECK(loaded->eos_id() == trained->eos_id());
  CHECK(loaded->pad_id() == trained->pad_id());
  CHECK(loaded->name() == "bpe:" + dir / "tok.json");
  for (const auto& s : utf8_samples()) CHECK(loaded->encode(s) == trained->encode(s));
  std::string bytes = random_bytes(3, 3000);
  CHECK(loaded->encode(bytes) == trained->encode(bytes));
  // the file is standard: ByteLevel pre-tokenizer, GPT-2 byte alphabet ("Ġ" is the space)
  std::ifstream in(dir / "tok.json");
  auto j = nlohmann::json::parse(in);
  CHECK(j["model"]["type"] == "BPE");
  CHECK(j["pre_tokenizer"]["type"] == "ByteLevel");
  CHECK(j["model"]["vocab"]["\xC4\xA0"] == int(' '));  // "Ġ" -> byte 32 -> id 32
  // merges written as ["a", "b"] pairs (newer tokenizers) read the same as "a b" strings
  for (auto& merge : j["model"]["merges"]) {
    std::string s = merge;
    merge = nlohmann::json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  write_file(dir / "pairs.json", j.dump());
  CHECK(load_tokenizer(dir / "pairs.json")->hash() == trained->hash());
}

TEST_CASE("tokenizer.json with byte fallback and metaspace (Llama-2 layout)") {
  ScratchDir dir("llama");
  const std::string meta = "\xE2\x96\x81";  // ▁
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; b++) vocab[std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">"] = 3 + b;
  vocab[meta] = 259, vocab["h"] = 260, vocab["i"] = 261, vocab[meta + "h"] = 262, vocab[meta + "hi"] = 263;
  nlohmann::json added = nlohmann::json::array();
  for (auto [id, content] : {std::pair{0, "<unk>"}, {1, "<s>"}, {2, "</s>"}}) {
    added.push_back({{"id", id}, {"content", content}, {"special", true}});
  }
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", meta}},
                                                              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", meta}}}}}},
      {"pre_tokenizer", nullptr},
      {"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", meta}}}, {"content", " "}},
                                                        {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                                        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true},
                 {"vocab", vocab}, {"merges", {meta + " h", meta + "h i"}}}},
  };
  write_file(dir / "llama.json", j.dump());
  auto tok = load_tokenizer(dir / "llama.json");
  CHECK(tok->eos_id() == 2);
  CHECK(tok->pad_id() == 2);  // no pad token: pad falls back to eos
  CHECK(tok->vocab_size() == 264);
  // "hi hi" -> "▁hi▁hi" -> two "▁hi"
  CHECK(tok->encode("hi hi") == std::vector<int32_t>{263, 263});
  // "é" is not in the vocabulary: its two UTF-8 bytes become <0xC3> <0xA9>
  CHECK(tok->encode("hé") == std::vector<int32_t>{262, 3 + 0xC3, 3 + 0xA9});
  for (std::string s : {"hé hi", " hi", "ih  h\xff", ""}) CHECK(tok->decode(tok->encode(s)) == s);
  // and the layout survives export/import
  save_tokenizer_json(dynamic_cast<const BpeTokenizer&>(*tok), dir / "again.json");
  auto again = load_tokenizer(dir / "again.json");
  CHECK(again->hash() == tok->hash());
  CHECK(again->encode("hé hi") == tok->encode("hé hi"));
}

TEST_CASE("tokenizer files hla cannot read are clear errors") {
  ScratchDir dir("badtok");
  CHECK_THROWS_CONTAINING(load_tokenizer(dir / "missing.json"), "cannot open tokenizer file");
  write_file(dir / "garbage.json", "{not json");
  CHECK_THROWS_CONTAINING(load_tokenizer(dir / "garbage.json"), "not valid JSON");
  write_file(dir / "nomodel.json", R"({"version": "1.0"})");
  CHECK_THROWS_CONTAINING(load_tokenizer(dir / "nomodel.json"), "no \"model\" object");
  write_file(dir / "wordpiece.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
  CHECK_THROWS_CONTAINING(load_tokenizer(dir / "wordpiece.json"), "model type 'WordPiece' is not supported");
  auto trained = small_trained_tokenizer();
  save_tokenizer_json(*trained, dir / "tok.json");
  std::ifstream in(dir / "tok.json");
  auto j = nlohmann::json::parse(in);
  auto with = [&](const char* key, nlohmann::json value) {
    auto copy = j;
    copy[key] = value;
    write_file(dir / "edited.json", copy.dump());
    return dir / "edited.json";
  };
  CHECK_THROWS_CONTAINING(load_tokenizer(with("pre_tokenizer", {{"type", "Whitespace"}})),
                          "pre-tokenizer 'Whitespace' is not supported");
  CHECK_THROWS_CONTAINING(load_tokenizer(with("normalizer", {{"type", "NFKC"}})),
                          "normalizer 'NFKC' is not supported");
  CHECK_THROWS_CONTAINING(load_tokenizer(with("added_tokens", nlohmann::json::array())),
                          "no end-of-text token");
  auto merges = j["model"]["merges"];
  merges.push_back("zz\xC4\xA0 q");
  auto copy = j;
  copy["model"]["merges"] = merges;
  write_file(dir / "badmerge.json", copy.dump());
  CHECK_THROWS_CONTAINING(load_tokenizer(dir / "badmerge.json"), "is not in the vocabulary");
}

namespace {

// The saved small tokenizer as JSON, for tests that edit one part of it.
nlohmann::json small_tokenizer_json(const ScratchDir& dir) {
  save_tokenizer_json(*small_trained_tokenizer(), dir / "base.json");
  std::ifstream in(dir / "base.json");
  return nlohmann::json::parse(in);
}

std::string saved(const ScratchDir& dir, const nlohmann::json& j) {
  write_file(dir / "edited.json", j.dump());
  return dir / "edited.json";
}

nlohmann::json added_token(int64_t id, const std::string& content) {
  return {{"id", id}, {"content", content}, {"special", true}};
}

}  // namespace

TEST_CASE("tokenizer.json ids out of range or repeated are errors naming the file and the token") {
  ScratchDir dir("tokids");
  const nlohmann::json j = small_tokenizer_json(dir);  // 350 ids; added tokens at 348, 349
  REQUIRE(j["added_tokens"].size() == 2);
  auto with_added = [&](nlohmann::json extra) {
    auto copy = j;
    copy["added_tokens"].push_back(extra);
    return saved(dir, copy);
  };
  const std::string path = dir / "edited.json";
  CHECK_THROWS_WITH_AS(load_tokenizer(with_added(added_token(-1, "<x>"))),
                       ("tokenizer " + path + ": added token \"<x>\" has id -1; ids must be integers in "
                        "[0, 353) (vocabulary entries + added tokens)").c_str(),
                       hla::Error);
  CHECK_THROWS_CONTAINING(load_tokenizer(with_added(added_token(2147483647, "<x>"))), "has id 2147483647");
  CHECK_THROWS_CONTAINING(load_tokenizer(with_added(added_token(4294967296 + 5, "<x>"))), "has id 4294967301");
  CHECK_THROWS_CONTAINING(load_tokenizer(with_added({{"id", 1.5}, {"content", "<x>"}})), "has id 1.5");
  CHECK_THROWS_WITH_AS(load_tokenizer(with_added(added_token(349, "<other>"))),
                       ("tokenizer " + path + ": added tokens \"<|pad|>\" and \"<other>\" both have id 349").c_str(),
                       hla::Error);
  CHECK_THROWS_WITH_AS(load_tokenizer(with_added(added_token(350, "<|pad|>"))),
                       ("tokenizer " + path + ": added token \"<|pad|>\" appears twice (ids 349 and 350)").c_str(),
                       hla::Error);
  CHECK(load_tokenizer(with_added(added_token(350, "<extra>")))->vocab_size() == 351);  // appended: fine
  {  // a 5,000-character token is quoted by excerpt (through std::quoted, found by ADL, it was whole)
    auto copy = j;
    copy["added_tokens"].push_back(added_token(350, std::string(5000, 'x')));
    copy["added_tokens"].push_back(added_token(350, "<y>"));
    std::string message;
    try {
      load_tokenizer(saved(dir, copy));
    } catch (const hla::Error& e) {
      message = e.what();
    }
    CHECK(message.find("both have id 350") != std::string::npos);
    CHECK(message.size() < path.size() + 200);
  }

  auto with_vocab = [&](const std::string& token, nlohmann::json id) {
    auto copy = j;
    copy["model"]["vocab"][token] = id;
    return saved(dir, copy);
  };
  CHECK_THROWS_CONTAINING(load_tokenizer(with_vocab("zzz", -3)), ": token \"zzz\" has id -3; ids must be integers in [0, 353)");
  CHECK_THROWS_CONTAINING(load_tokenizer(with_vocab("zzz", 1000000000)), ": token \"zzz\" has id 1000000000");
  CHECK_THROWS_CONTAINING(load_tokenizer(with_vocab("zzz", "7")), ": token \"zzz\" has id \"7\"");
  CHECK_THROWS_CONTAINING(load_tokenizer(with_vocab("zzz", 65)), "both have id 65");

  CHECK_THROWS_WITH_AS(load_tokenizer(with_added({{"id", 350}})),
                       ("tokenizer " + path + ": added token 2 must be {\"id\": integer, \"content\": string}, "
                        "got {\"id\":350}").c_str(),
                       hla::Error);
  auto with_merge = [&](nlohmann::json merge) {
    auto copy = j;
    copy["model"]["merges"][3] = merge;
    return saved(dir, copy);
  };
  const std::string merge_rule = ": merge 3 must be \"left right\" or [\"left\", \"right\"], got ";
  CHECK_THROWS_WITH_AS(load_tokenizer(with_merge(7)), ("tokenizer " + path + merge_rule + "7").c_str(), hla::Error);
  CHECK_THROWS_CONTAINING(load_tokenizer(with_merge("nospace")), merge_rule + "\"nospace\"");
  CHECK_THROWS_CONTAINING(load_tokenizer(with_merge({"a"})), merge_rule + "[\"a\"]");
}

TEST_CASE("tokenizer.json: deep nesting is refused and errors quote at most an excerpt") {
  ScratchDir dir("tokdeep");
  write_file(dir / "deep.json", "{\"model\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  CHECK_THROWS_WITH_AS(load_tokenizer(dir / "deep.json"),
                       ("tokenizer " + dir / "deep.json" + ": JSON nested deeper than 64 levels").c_str(), hla::Error);
  auto j = small_tokenizer_json(dir);
  j["pre_tokenizer"] = {{"huge", std::string(100000, 'x')}};
  std::string message;
  try {
    load_tokenizer(saved(dir, j));
  } catch (const hla::Error& e) {
    message = e.what();
  }
  // The value is quoted as its first 100 characters and "...": {"huge":" then 91 x's.
  const std::string excerpt = "{\"huge\":\"" + std::string(91, 'x') + "...";
  CHECK(excerpt == hla::json_excerpt(j["pre_tokenizer"]));
  CHECK(message.find("pre-tokenizer '" + excerpt + "'") != std::string::npos);
  CHECK(message.size() < 400);
}

TEST_CASE("save_tokenizer_json on a full disk fails naming the file and keeps the old tokenizer.json") {
  ScratchDir dir("tokfull");
  auto tok = small_trained_tokenizer();
  const std::string path = dir / "tokenizer.json";
  write_file(path, "old tokenizer");
  const std::string message = hla::testing::error_on_full_disk([&] { save_tokenizer_json(*tok, path); });
  CHECK(message.find(path + ": write failed on " + path + ".tmp-") != std::string::npos);
  CHECK(message.find("File too large") != std::string::npos);
  std::ifstream in(path);
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "old tokenizer");
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path), {}) == 1);
}
