// MQAR evaluation over a grid of (sequence length, number of key-value pairs): the model reads
// each example (data/mqar.h, the Zoology generator) and is scored at the query positions only,
// where the target is the value of the key just repeated. Accuracy is the mean over examples of
// the fraction of query positions whose argmax is the value (Zoology's metric); loss is the
// mean cross-entropy over query positions.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/lm.h"
#include "eval/scoring.h"

namespace hla::eval {

struct MqarCell {
  int64_t seq_len = 0, num_kv_pairs = 0;
};

// "64x4,128x8,256x16" -> cells; a malformed entry is an hla::Error naming it.
std::vector<MqarCell> parse_mqar_grid(const std::string& spec);

struct MqarEvalOptions {
  std::vector<MqarCell> grid = {{64, 4}, {128, 8}, {256, 16}, {512, 64}};
  int64_t examples = 256;  // per cell
  int64_t vocab_size = 0;  // 0: the model's vocabulary, at most 8192 (Zoology's V)
  uint64_t seed = 1;       // the validation stream
  double power_a = 0.01;   // gap power law (data/mqar.h)
  bool random_non_queries = true;
  BatchOptions batch;
};

// A cell longer than the model's position limit is an hla::Error; one beyond its max_length()
// (the training context) runs, with a warning and a note. Returns
// {"vocab_size", "examples", "seed", "power_a", "random_non_queries", "notes": [...],
//  "cells": [{"seq_len", "num_kv_pairs", "accuracy", "loss"}], "mean_accuracy"}
nlohmann::json run_mqar(LanguageModel& model, const MqarEvalOptions& options);

}  // namespace hla::eval
