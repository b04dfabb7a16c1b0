// The evaluator on the decoding state: greedy generation through load_hybrid_model (prefill +
// batched steps, mixed prompt lengths, stop tokens) gives exactly the tokens of the no-cache
// path, the argmax of the model's full-sequence logits; and `hla bench decode` at a small shape:
// its memory numbers are decode_memory's and the decoder's, the KV ratio of the Transformer to
// the 3:1 hybrid is 24 attention layers over 8 (r:1 closes every group of r layers with attention);
// `hla bench ruler` on a small model: every task timed, the parts within each task's time.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>

#include "autograd/var.h"
#include "eval/decode_bench.h"
#include "eval/hybrid_model.h"
#include "eval/ruler_bench.h"
#include "nn/model.h"
#include "nn/weights.h"
#include "tests/test_data_util.h"
#include "tests/test_eval_util.h"

using namespace hla;
using hla::data::testing::ScratchDir;

namespace {

// The no-cache path: the argmax of the last row of the logits of the whole sequence, per token,
// over the first `width` ids (0: all).
std::vector<int32_t> greedy_by_forward(TrainableModel& model, std::vector<int32_t> seq, int max_new_tokens,
                                       int32_t stop, int64_t width = 0) {
  NoGradGuard no_grad;
  std::vector<int32_t> out;
  for (int n = 0; n < max_new_tokens; n++) {
    const int64_t T = static_cast<int64_t>(seq.size());
    Tensor logits = model.logits(Tensor::from_i32(seq, {1, T})).value().to(Device::CPU).to(DType::F32);  // (1, T, V)
    const int64_t V = logits.shape()[2];
    const float* row = logits.data<float>() + (T - 1) * V;
    const int32_t next = static_cast<int32_t>(std::max_element(row, row + (width > 0 ? width : V)) - row);
    if (next == stop) break;
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

}  // namespace

TEST_CASE("eval: greedy generation on the decoding state gives the no-cache path's tokens") {
  ScratchDir dir("evaldecode");
  const ModelConfig config = eval::testing::small_model_config("gated_deltanet", 32, 4, 40, "2:1");  // LALA
  eval::testing::write_checkpoint(dir.path.string(), config, 3);
  std::unique_ptr<TrainableModel> reference = make_model(config, 3);
  std::unique_ptr<eval::LanguageModel> model = eval::load_hybrid_model(dir.path.string(), Device::CPU);

  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {7}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12}};
  const std::vector<int> budgets = {6, 9, 4};
  std::vector<std::vector<int32_t>> expected;
  for (size_t i = 0; i < prompts.size(); i++)
    expected.push_back(greedy_by_forward(*reference, prompts[i], budgets[i], -1));
  // the second request stops at its third token (not returned)
  const int32_t stop = expected[1][2];
  const bool stop_earlier = std::find(expected[1].begin(), expected[1].begin() + 2, stop) != expected[1].begin() + 2;
  REQUIRE_FALSE(stop_earlier);
  std::vector<eval::GenerateRequest> batch;
  for (size_t i = 0; i < prompts.size(); i++) batch.push_back({prompts[i], budgets[i], i == 1 ? std::vector<int32_t>{stop} : std::vector<int32_t>{}});
  const std::vector<std::vector<int32_t>> generated = model->generate(batch);
  REQUIRE(generated.size() == 3);
  CHECK(generated[0] == expected[0]);
  CHECK(generated[1] == std::vector<int32_t>(expected[1].begin(), expected[1].begin() + 2));
  CHECK(generated[2] == expected[2]);
  CHECK(generated[0].size() == 6);
  CHECK(generated[2].size() == 4);
}

TEST_CASE("eval: generation with a vocab_limit picks only ids the tokenizer has") {
  // A model of 40 ids read through a tokenizer of 10 (RULER sets the limit to the tokenizer's
  // vocabulary): every generated id is below 10, and they are the argmax over ids 0..9.
  ScratchDir dir("evaldecodelimit");
  const ModelConfig config = eval::testing::small_model_config("gated_deltanet", 32, 4, 40, "2:1");
  eval::testing::write_checkpoint(dir.path.string(), config, 5);
  std::unique_ptr<TrainableModel> reference = make_model(config, 5);
  std::unique_ptr<eval::LanguageModel> model = eval::load_hybrid_model(dir.path.string(), Device::CPU);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  const std::vector<int32_t> unlimited = greedy_by_forward(*reference, prompt, 12, -1);
  REQUIRE(std::any_of(unlimited.begin(), unlimited.end(), [](int32_t id) { return id >= 10; }));  // the limit matters
  eval::GenerateRequest request{prompt, 12, {}, 10};
  const std::vector<int32_t> generated = model->generate({request})[0];
  CHECK(generated == greedy_by_forward(*reference, prompt, 12, -1, 10));
  CHECK(std::all_of(generated.begin(), generated.end(), [](int32_t id) { return id < 10; }));
}

TEST_CASE("eval: the decode bench at a small shape: memory from decode_memory and the decoder, KV ratio 3 at 3:1") {
  ScratchDir dir("evaldecodebench");
  eval::testing::small_model_config("gated_deltanet", 16, 24, 32, "pure").save(dir / "small.json");

  eval::DecodeBenchOptions o;
  o.config = dir / "small.json";
  o.contexts = {64, 256};
  o.batches = {1, 3};
  o.speed_context = 8;
  o.warmup = 1;
  o.steps = 2;
  const eval::DecodeBench bench = eval::run_decode_bench(o);
  REQUIRE(bench.rows.size() == 6);
  // pure, 24:1, 12:1, 6:1, 3:1, transformer: (i + 1) % r == 0 is attention
  const std::vector<size_t> attention_layers = {0, 1, 2, 4, 8, 24};
  for (size_t r = 0; r < bench.rows.size(); r++) {
    const eval::DecodeBenchRow& row = bench.rows[r];
    CAPTURE(row.hybrid);
    CHECK(row.config.attn.layers.size() == attention_layers[r]);
    for (size_t i = 0; i < o.contexts.size(); i++) {
      const DecodeMemory expected = decode_memory(row.config, o.contexts[i], DType::F32);
      CHECK(row.memory[i].state_bytes == expected.state_bytes);
      CHECK(row.memory[i].kv_bytes == expected.kv_bytes);
      REQUIRE(row.measured.size() == o.contexts.size());
      CHECK(row.measured[i].state_bytes == expected.state_bytes);
      CHECK(row.measured[i].kv_bytes == expected.kv_bytes);
    }
    REQUIRE(row.tokens_per_second.size() == 2);
    CHECK(row.tokens_per_second[0] > 0);
    CHECK(row.tokens_per_second[1] > 0);
  }
  // by hand: an attention layer holds K and V, 2 heads x 8 dims each, 4 bytes, per token
  CHECK(bench.rows[5].memory[1].kv_bytes == 24 * 2 * 2 * 8 * 256 * 4);
  CHECK(bench.rows[5].memory[1].state_bytes == 0);
  CHECK(bench.rows[0].memory[1].kv_bytes == 0);
  CHECK(bench.rows[5].memory[1].kv_bytes == 3 * bench.rows[4].memory[1].kv_bytes);  // 24 over 8 layers
  const std::string table = eval::decode_bench_table(bench);
  CHECK(table.find("3:1          256            ") != std::string::npos);
  CHECK(table.find(" 3.00x ") != std::string::npos);
  const nlohmann::json j = eval::decode_bench_json(bench);
  CHECK(j["weights"] == "random init");
  CHECK(j["rows"][4]["memory_per_sequence"][1]["decode_memory"]["kv_bytes"] == 8 * 2 * 2 * 8 * 256 * 4);
  CHECK(j["rows"][5]["tokens_per_second"].contains("3"));
  const std::string svg = eval::decode_bench_svg(bench);
  size_t lines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) lines++;
  CHECK(lines == 6);
  CHECK(svg.find("state + KV memory per sequence (MiB)") != std::string::npos);
  CHECK(svg.find("context (tokens)") != std::string::npos);
}

TEST_CASE("eval: the decode bench's 340M rows: the mixer's config, the Transformer's attention heads") {
  eval::DecodeBenchOptions o;
  o.configs_dir = std::string(HLA_SOURCE_DIR) + "/configs/models";
  std::string source;
  const auto configs = eval::decode_bench_configs(o, &source);
  REQUIRE(configs.size() == 6);
  CHECK(source == o.configs_dir + "/gated_deltanet-340m.json + " + o.configs_dir + "/transformer-340m.json");
  CHECK(configs[0].second.attn.layers.empty());
  CHECK(configs[3].second.attn.layers == std::vector<int>{5, 11, 17, 23});  // 6:1
  CHECK(configs[4].second.attn_heads() == 16);                               // the Transformer's 16 x 64
  CHECK(configs[5].second.model_type == "transformer");
  // per token at bf16: 24 layers x K and V x 16 heads x 64 dims x 2 bytes, and 8 of those layers at 3:1
  CHECK(decode_memory(configs[5].second, 1, DType::BF16).kv_bytes == 24 * 2 * 16 * 64 * 2);
  CHECK(decode_memory(configs[4].second, 1, DType::BF16).kv_bytes == 8 * 2 * 16 * 64 * 2);
  o.mixer = "attention";
  CHECK_THROWS_WITH_AS(eval::decode_bench_configs(o), doctest::Contains("attention-340m.json"), Error);
}

TEST_CASE("eval: hla bench ruler times the tasks on the evaluator's path, and its total adds the rows up") {
  ScratchDir dir("rulerbench");
  const std::string config = (dir.path / "config.json").string();
  eval::testing::small_model_config("gated_deltanet", 32, 4, 258, "2:1").save(config);
  eval::RulerBenchOptions o;
  o.shape.config = config;
  o.hybrid = "3:1";
  o.tasks = {"niah_single_1", "fwe"};
  o.length = 2048;
  o.samples = 3;
  o.batch_size = 2;  // two batches per task: a padded prefill of two prompts, then one alone
  const eval::RulerBench bench = eval::run_ruler_bench(o);
  CHECK(bench.model.find("LLA L") != std::string::npos);  // the --hybrid pattern, not the file's
  REQUIRE(bench.rows.size() == 2);
  double total = 0;
  for (const eval::RulerBenchRow& r : bench.rows) {
    CAPTURE(r.task);
    CHECK(r.error.empty());
    CHECK(r.samples == 3);
    CHECK(r.mean_length > 1500);
    CHECK(r.mean_length <= 2048);
    CHECK(r.prefill_seconds > 0);
    CHECK(r.steps_seconds > 0);  // a random model runs past its first token
    CHECK(r.seconds >= r.samples_seconds + r.prefill_seconds + r.steps_seconds);
    total += r.seconds;
  }
  const std::string table = eval::ruler_bench_table(bench);
  char expected[32];
  std::snprintf(expected, sizeof expected, "%9.2f\n", total);
  CHECK(table.find("total") != std::string::npos);
  CHECK(table.substr(table.size() - std::string(expected).size()) == expected);
}
