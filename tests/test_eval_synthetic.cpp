// MQAR grid evaluation and held-out perplexity: a model that solves MQAR scores 1, one that
// does not scores 0; rolling windows predict every token once; loss, perplexity and bits per
// byte of a uniform model are exact; text and shard inputs agree.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "data/mqar.h"
#include "data/shard.h"
#include "eval/mqar_eval.h"
#include "eval/perplexity.h"
#include "tensor/error.h"
#include "tests/test_eval_util.h"

using namespace hla::eval;
using namespace hla::eval::testing;

namespace {

// Predicts, after a token seen before, the token that followed its first occurrence.
double recall_logprob(const std::vector<int32_t>& prefix, int32_t next) {
  const int32_t key = prefix.back();
  for (size_t i = 0; i + 1 < prefix.size(); i++)
    if (prefix[i] == key) return next == prefix[i + 1] ? 0.0 : -5.0;
  return next == 0 ? 0.0 : -5.0;
}

MqarEvalOptions small_grid() {
  MqarEvalOptions o;
  o.grid = parse_mqar_grid("64x4, 128x8");
  o.examples = 6;
  o.batch.show_progress = false;
  return o;
}

}  // namespace

TEST_CASE("eval: MQAR grid parsing") {
  std::vector<MqarCell> cells = parse_mqar_grid("64x4,512x64");
  REQUIRE(cells.size() == 2);
  CHECK(cells[1].seq_len == 512);
  CHECK(cells[1].num_kv_pairs == 64);
  CHECK_THROWS_AS(parse_mqar_grid("64x"), hla::Error);
  CHECK_THROWS_AS(parse_mqar_grid("63x4"), hla::Error);   // odd length
  CHECK_THROWS_AS(parse_mqar_grid("64x17"), hla::Error);  // 4N > L
  CHECK_THROWS_AS(parse_mqar_grid("64*4"), hla::Error);
}

TEST_CASE("eval: MQAR accuracy counts query positions only") {
  FunctionModel recall(recall_logprob);
  nlohmann::json solved = run_mqar(recall, small_grid());
  CHECK(solved["vocab_size"] == 258);
  REQUIRE(solved["cells"].size() == 2);
  CHECK(solved["cells"][0]["accuracy"] == 1.0);
  CHECK(solved["cells"][1]["accuracy"] == 1.0);
  CHECK(solved["cells"][1]["loss"] == 0.0);
  CHECK(solved["mean_accuracy"] == 1.0);
  // every query is batched: 6 examples per cell, one request each
  size_t requests = 0;
  for (const auto& batch : recall.batches) requests += batch.size();
  CHECK(requests == 12);

  FunctionModel zero([](const std::vector<int32_t>&, int32_t next) { return next == 0 ? 0.0 : -5.0; });
  nlohmann::json failed = run_mqar(zero, small_grid());
  CHECK(failed["mean_accuracy"] == 0.0);
  CHECK(failed["cells"][0]["loss"] == 5.0);

  // beyond the training context (max_length 100): runs, with a note; beyond a position limit: an error
  FunctionModel short_context(recall_logprob, 100);
  nlohmann::json extrapolated = run_mqar(short_context, small_grid());
  CHECK(extrapolated["mean_accuracy"] == 1.0);
  CHECK(extrapolated["notes"] == nlohmann::json::array(
      {"length 128 is beyond the model's context of 100 tokens: it measures length extrapolation"}));
  FunctionModel position_limited(recall_logprob, 100, 258, 100);
  CHECK_THROWS_WITH_AS(run_mqar(position_limited, small_grid()),
                       "MQAR length 128 is longer than the model's position limit of 100 tokens", hla::Error);
}

TEST_CASE("eval: rolling windows predict every token once") {
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<ScoreRequest> r = rolling_window_requests(tokens, 256, 4);
  REQUIRE(r.size() == 3);
  CHECK(r[0].tokens == std::vector<int32_t>{256, 1, 2, 3});
  CHECK(r[0].positions == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(r[0].targets == std::vector<int32_t>{1, 2, 3, 4});
  CHECK(r[1].tokens == std::vector<int32_t>{4, 5, 6, 7});
  CHECK(r[1].targets == std::vector<int32_t>{5, 6, 7, 8});
  // the last, partial window sees a full window of context
  CHECK(r[2].tokens == std::vector<int32_t>{6, 7, 8, 9});
  CHECK(r[2].positions == std::vector<int32_t>{2, 3});
  CHECK(r[2].targets == std::vector<int32_t>{9, 10});
  CHECK(rolling_window_requests({}, 256, 4).empty());
}

TEST_CASE("eval: perplexity of a uniform model is exact, for text and for shards") {
  const double log_v = std::log(258.0);
  FunctionModel uniform([&](const std::vector<int32_t>&, int32_t) { return -log_v; }, 64);
  TestByteTokenizer tok;
  PerplexityOptions options;
  options.batch.show_progress = false;
  std::vector<std::string> docs = {"hello world", std::string(150, 'x'), "a b c"};
  PerplexityTotals t = score_documents(uniform, tok, docs, options);
  CHECK(t.tokens == 11 + 150 + 5);
  CHECK(t.bytes == t.tokens);
  CHECK(t.words == 2 + 1 + 3);
  CHECK(t.logprob == doctest::Approx(-log_v * t.tokens));

  auto dir = std::filesystem::temp_directory_path();
  std::string jsonl = (dir / "hla_test_eval_ppl.jsonl").string();
  std::ofstream(jsonl) << "{\"text\": \"hello world\"}\n{\"text\": \"" << docs[1]
                       << "\"}\n{\"text\": \"a b c\"}\n";
  nlohmann::json text = run_perplexity(uniform, tok, jsonl, options);
  CHECK(text["documents"] == 3);
  CHECK(text["loss"].get<double>() == doctest::Approx(log_v));
  CHECK(text["perplexity"].get<double>() == doctest::Approx(258.0));
  CHECK(text["bits_per_byte"].get<double>() == doctest::Approx(std::log2(258.0)));
  CHECK(text["word_perplexity"].get<double>() == doctest::Approx(std::exp(log_v * 166 / 6)));

  // the same documents as an llm.c shard: each document preceded by eos
  std::vector<int32_t> stream;
  for (const std::string& d : docs) {
    stream.push_back(256);
    for (int32_t id : tok.encode(d)) stream.push_back(id);
  }
  std::string shard = (dir / "hla_test_eval_ppl.bin").string();
  hla::data::write_shard(shard, stream.data(), stream.size(), 2);
  nlohmann::json from_shard = run_perplexity(uniform, tok, shard, options);
  CHECK(from_shard["documents"] == 3);
  CHECK(from_shard["tokens"] == text["tokens"]);
  CHECK(from_shard["bits_per_byte"].get<double>() == doctest::Approx(text["bits_per_byte"].get<double>()));
}

TEST_CASE("eval: MQAR examples are the generator's for the given power_a, filler and seed") {
  MqarEvalOptions options;
  options.grid = parse_mqar_grid("64x4");
  options.examples = 5;
  options.vocab_size = 128;
  options.power_a = 0.5;
  options.random_non_queries = false;
  options.seed = 7;
  options.batch.show_progress = false;
  FunctionModel recorder(recall_logprob);
  run_mqar(recorder, options);
  std::vector<std::vector<int32_t>> seen;
  for (const auto& batch : recorder.batches)
    for (const ScoreRequest& r : batch) seen.push_back(r.tokens);
  hla::data::MqarConfig config;
  config.vocab_size = 128, config.seq_len = 64, config.num_kv_pairs = 4;
  config.power_a = 0.5, config.random_non_queries = false;
  hla::data::MqarData expected = hla::data::generate_mqar(config, 7, 5);
  std::vector<std::vector<int32_t>> want;
  for (int64_t e = 0; e < 5; e++)
    want.emplace_back(expected.inputs.begin() + e * 64, expected.inputs.begin() + (e + 1) * 64);
  std::sort(seen.begin(), seen.end());
  std::sort(want.begin(), want.end());
  CHECK(seen == want);
  config.power_a = 0.01;  // the default draws other gaps: the setting reached the generator
  hla::data::MqarData other = hla::data::generate_mqar(config, 7, 5);
  CHECK(other.inputs != expected.inputs);
}
