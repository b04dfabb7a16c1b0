// Log-likelihood scoring against hand-computed cases: acc vs acc_norm (by characters, not
// bytes), argmax ties, LAMBADA multi-token greedy and perplexity, encode-pair, truncation,
// batching order, --limit 0.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "eval/lm_eval.h"
#include "tensor/error.h"
#include "tests/test_eval_util.h"

using namespace hla::eval;
using namespace hla::eval::testing;

namespace {

// Context-free log-probs: ' ' -1, 'a' -2, 'b' -2, the two bytes of "é" -1.5 each, others -20.
double unigram_logprob(const std::vector<int32_t>&, int32_t next) {
  static const std::map<int32_t, double> table = {
      {' ', -1.0}, {'a', -2.0}, {'b', -2.0}, {0xC3, -1.5}, {0xA9, -1.5}};
  auto it = table.find(next);
  return it == table.end() ? -20.0 : it->second;
}

BatchOptions quiet(int batch_size = 32) {
  BatchOptions o;
  o.batch_size = batch_size;
  o.show_progress = false;
  return o;
}

}  // namespace

TEST_CASE("eval: acc and acc_norm disagree, acc_norm divides by characters, ties go first") {
  TestByteTokenizer tok;
  FunctionModel model(unigram_logprob);
  std::vector<MultipleChoiceDoc> docs = {
      // LL(" aa") = -5, LL(" b") = -3: acc picks "b"; per char -2.5 vs -3: acc_norm picks "aa"
      {"Q", {"aa", "b"}, 0},
      // LL(" é") = -4 (1 character, 2 bytes), LL(" ab") = -5: acc picks "é";
      // per character -4 vs -2.5 picks "ab" (per byte it would be -2 vs -2.5, picking "é")
      {"Q", {"\xC3\xA9", "ab"}, 1},
      // equal scores: the first choice wins
      {"Q", {"a", "b"}, 0},
      {"Q", {"a", "b"}, 1},
  };
  std::vector<LoglikRequest> requests = {{"Q", " aa"}, {"Q", " b"}, {"Q", " \xC3\xA9"}};
  std::vector<LoglikResult> ll = loglikelihood(model, tok, requests, quiet());
  CHECK(ll[0].logprob == -5.0);
  CHECK(ll[1].logprob == -3.0);
  CHECK(ll[2].logprob == -4.0);

  MultipleChoiceMetrics m = evaluate_multiple_choice(docs, model, tok, quiet());
  CHECK(m.n == 4);
  CHECK(m.acc == 0.25);
  CHECK(m.acc_norm == 0.75);
  // sqrt(p (1 - p) / (n - 1)) = sqrt(0.1875 / 3) = 0.25 for both
  CHECK(m.acc_stderr == doctest::Approx(0.25).epsilon(1e-12));
  CHECK(m.acc_norm_stderr == doctest::Approx(0.25).epsilon(1e-12));
}

TEST_CASE("eval: binomial standard error and first argmax") {
  CHECK(binomial_stderr(0.5, 5) == doctest::Approx(0.25));
  CHECK(binomial_stderr(1.0, 10) == 0.0);
  CHECK(binomial_stderr(0.3, 1) == 0.0);
  CHECK(first_argmax({1.0, 3.0, 3.0, 2.0}) == 1);
  CHECK(first_argmax({-1.0}) == 0);
}

TEST_CASE("eval: LAMBADA counts a hit only when every target token is greedy") {
  // Bigram preferences: after ' ' comes 'c', after 'c' 'a', after 'a' 't', after anything
  // else ' '. The preferred token scores -0.5, every other token -3.
  auto favourite = [](int32_t prev) -> int32_t {
    switch (prev) {
      case ' ': return 'c';
      case 'c': return 'a';
      case 'a': return 't';
      default: return ' ';
    }
  };
  FunctionModel model([&](const std::vector<int32_t>& prefix, int32_t next) {
    return next == favourite(prefix.back()) ? -0.5 : -3.0;
  });
  TestByteTokenizer tok;
  std::vector<LambadaDoc> docs = {
      lambada_doc_from_text("the cat"),  // " cat": 4 greedy tokens, LL -2
      lambada_doc_from_text("a cab"),    // after 'a' comes ' ' (miss), ..., 'b' (miss): LL -7
      lambada_doc_from_text("x ca"),     // " ca": 3 greedy tokens, LL -1.5
  };
  CHECK(docs[0].context == "the");
  CHECK(docs[0].target == " cat");
  LambadaMetrics m = evaluate_lambada(docs, model, tok, quiet());
  CHECK(m.n == 3);
  CHECK(m.acc == doctest::Approx(2.0 / 3));
  CHECK(m.perplexity == doctest::Approx(std::exp((2.0 + 7.0 + 1.5) / 3)));
}

TEST_CASE("eval: LAMBADA splits on the last space only") {
  LambadaDoc d = lambada_doc_from_text("He said \"go\n\nto the end of\n\nPower");
  CHECK(d.context == "He said \"go\n\nto the end");
  CHECK(d.target == " of\n\nPower");
  LambadaDoc single = lambada_doc_from_text("word");
  CHECK(single.context == "");
  CHECK(single.target == " word");
}

namespace {

// Bytes, except that "ab" is one token (300) wherever it occurs.
class MergingTokenizer : public TestByteTokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size(); i++) {
      if (text.compare(i, 2, "ab") == 0) {
        ids.push_back(300);
        i++;
      } else {
        ids.push_back(static_cast<unsigned char>(text[i]));
      }
    }
    return ids;
  }
  int32_t vocab_size() const override { return 301; }
};

}  // namespace

TEST_CASE("eval: encode-pair moves trailing spaces and takes the tail of the joint encoding") {
  TestByteTokenizer bytes_tok;
  TokenPair p = encode_pair(bytes_tok, "Answer:  ", "x");
  CHECK(p.context == bytes("Answer:"));
  CHECK(p.continuation == bytes("  x"));

  // joint "abc" -> [300, 'c']; context "a" -> ['a'] (1 token): continuation = ['c']
  MergingTokenizer merging;
  TokenPair q = encode_pair(merging, "a", "bc");
  CHECK(q.context == std::vector<int32_t>{'a'});
  CHECK(q.continuation == std::vector<int32_t>{'c'});

  // an empty context is the eos token
  TokenPair e = encode_pair(bytes_tok, "", "hi");
  CHECK(e.context == std::vector<int32_t>{256});
  CHECK(e.continuation == bytes("hi"));
}

TEST_CASE("eval: requests are truncated from the left to the model's context") {
  TokenPair pair{bytes("abcdef"), bytes("gh")};
  ScoreRequest r = continuation_request(pair, 4);
  // whole = "abcdefgh"; input = whole[-5:][:-1] = "defg"; targets g, h read at positions 2, 3
  CHECK(r.tokens == bytes("defg"));
  CHECK(r.positions == std::vector<int32_t>{2, 3});
  CHECK(r.targets == bytes("gh"));
  ScoreRequest untouched = continuation_request(pair, 100);
  CHECK(untouched.tokens == bytes("abcdefg"));
  CHECK(untouched.positions == std::vector<int32_t>{5, 6});
  CHECK_THROWS_AS(continuation_request({bytes("a"), bytes("bcdef")}, 4), hla::Error);
}

TEST_CASE("eval: batches go longest first and answers come back in request order") {
  FunctionModel model(unigram_logprob);
  TestByteTokenizer tok;
  std::vector<LoglikRequest> requests = {
      {"Q", " a"}, {"QQQQ", " a"}, {"QQ", " b"}, {"QQQQQ", " ab"}, {"Q", " b"}};
  std::vector<LoglikResult> batched = loglikelihood(model, tok, requests, quiet(2));
  REQUIRE(model.batches.size() == 3);
  CHECK(model.batches[0].size() == 2);
  CHECK(model.batches[0][0].tokens.size() == 7);  // "QQQQQ ab" minus the last token
  CHECK(model.batches[0][1].tokens.size() == 5);
  CHECK(model.batches[2].size() == 1);
  std::vector<double> expected = {-3, -3, -3, -5, -3};
  for (size_t i = 0; i < requests.size(); i++) CHECK(batched[i].logprob == expected[i]);
}

TEST_CASE("eval: --limit 0 is an error, not accuracy 0 over n = 0") {
  const auto dir = std::filesystem::temp_directory_path() / "hla_test_eval_limit";
  std::filesystem::create_directories(dir);
  std::ofstream((dir / "lambada_openai.jsonl").string()) << "{\"text\": \"a b\"}\n";
  FunctionModel model(unigram_logprob);
  TestByteTokenizer tokenizer;
  const LmTaskInfo& lambada = *find_lm_task("lambada");
  CHECK(run_lm_task(lambada, dir.string(), model, tokenizer, {1, quiet()})["n"] == 1);
  CHECK_THROWS_WITH_AS(run_lm_task(lambada, dir.string(), model, tokenizer, {0, quiet()}),
                       "task lambada: --limit 0 leaves no documents to evaluate (-1 evaluates all)", hla::Error);
  std::filesystem::remove_all(dir);
}
