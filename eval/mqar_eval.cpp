// MQAR grid evaluation (see mqar_eval.h).
#include "eval/mqar_eval.h"

#include <algorithm>
#include <iostream>

#include "data/mqar.h"
#include "eval/text_util.h"
#include "tensor/error.h"

namespace hla::eval {

std::vector<MqarCell> parse_mqar_grid(const std::string& spec) {
  std::vector<MqarCell> cells;
  for (const std::string& entry : split_on(spec, ',')) {
    std::vector<std::string> parts = split_on(strip(entry), 'x');
    MqarCell cell;
    size_t used_l = 0, used_n = 0;
    try {
      if (parts.size() == 2) {
        cell.seq_len = std::stoll(parts[0], &used_l);
        cell.num_kv_pairs = std::stoll(parts[1], &used_n);
      }
    } catch (const std::exception&) {
      parts.clear();
    }
    if (parts.size() != 2 || used_l != parts[0].size() || used_n != parts[1].size())
      fail("MQAR grid entry \"", entry, "\" is not LENGTHxPAIRS (e.g. 256x16)");
    if (cell.seq_len % 2 != 0 || cell.num_kv_pairs < 1 || 4 * cell.num_kv_pairs > cell.seq_len)
      fail("MQAR grid entry \"", entry, "\" needs an even length and 1 <= 4 * pairs <= length");
    cells.push_back(cell);
  }
  return cells;
}

namespace {

nlohmann::json evaluate_cell(LanguageModel& model, const MqarCell& cell, int64_t vocab_size,
                             const MqarEvalOptions& options) {
  data::MqarConfig config;
  config.vocab_size = vocab_size;
  config.seq_len = cell.seq_len;
  config.num_kv_pairs = cell.num_kv_pairs;
  config.power_a = options.power_a;
  config.random_non_queries = options.random_non_queries;
  data::MqarData examples = data::generate_mqar(config, options.seed, options.examples);

  std::vector<ScoreRequest> requests;
  for (int64_t e = 0; e < examples.num_examples; e++) {
    const int32_t* inputs = examples.inputs.data() + e * cell.seq_len;    // (L)
    const int32_t* targets = examples.targets.data() + e * cell.seq_len;  // (L)
    ScoreRequest r;
    r.tokens.assign(inputs, inputs + cell.seq_len);
    for (int64_t p = 0; p < cell.seq_len; p++) {
      if (targets[p] == kIgnoreIndex) continue;
      r.positions.push_back(static_cast<int32_t>(p));
      r.targets.push_back(targets[p]);
    }
    requests.push_back(std::move(r));
  }
  BatchOptions batch = options.batch;
  batch.label = "mqar " + std::to_string(cell.seq_len) + "x" + std::to_string(cell.num_kv_pairs);
  std::vector<std::vector<TargetScore>> scores = score_in_batches(model, requests, batch);

  double accuracy_sum = 0, loss_sum = 0;
  int64_t queries = 0;
  for (const auto& example : scores) {
    HLA_CHECK(!example.empty(), "an MQAR example has no query positions");
    int64_t hits = 0;
    for (const TargetScore& t : example) {
      hits += t.is_argmax;
      loss_sum -= t.logprob;
    }
    accuracy_sum += static_cast<double>(hits) / static_cast<double>(example.size());
    queries += static_cast<int64_t>(example.size());
  }
  return {{"seq_len", cell.seq_len},
          {"num_kv_pairs", cell.num_kv_pairs},
          {"accuracy", accuracy_sum / static_cast<double>(scores.size())},
          {"loss", loss_sum / static_cast<double>(queries)}};
}

}  // namespace

nlohmann::json run_mqar(LanguageModel& model, const MqarEvalOptions& options) {
  HLA_CHECK(options.examples >= 1, "MQAR needs at least one example per cell");
  const int64_t vocab_size =
      options.vocab_size > 0 ? options.vocab_size : std::min<int64_t>(model.vocab_size(), 8192);
  if (vocab_size > model.vocab_size())
    fail("MQAR vocabulary ", vocab_size, " is larger than the model's ", model.vocab_size());
  nlohmann::json cells = nlohmann::json::array(), notes = nlohmann::json::array();
  double accuracy_sum = 0;
  for (const MqarCell& cell : options.grid) {
    if (model.position_limit() > 0 && cell.seq_len > model.position_limit())
      fail("MQAR length ", cell.seq_len, " is longer than the model's position limit of ",
           model.position_limit(), " tokens");
    if (cell.seq_len > model.max_length()) {
      notes.push_back("length " + std::to_string(cell.seq_len) + " is beyond the model's context of " +
                      std::to_string(model.max_length()) + " tokens: it measures length extrapolation");
      std::cerr << "warning: MQAR " << notes.back().get<std::string>() << "\n";
    }
    cells.push_back(evaluate_cell(model, cell, vocab_size, options));
    accuracy_sum += cells.back()["accuracy"].get<double>();
  }
  return {{"vocab_size", vocab_size},
          {"examples", options.examples},
          {"seed", options.seed},
          {"power_a", options.power_a},
          {"random_non_queries", options.random_non_queries},
          {"notes", notes},
          {"cells", cells},
          {"mean_accuracy", accuracy_sum / static_cast<double>(options.grid.size())}};
}

}  // namespace hla::eval
