// MQAR (multi-query associative recall), the Zoology generator as ../shared/design/eval.md
// section 2.1 describes it (zoology/data/multiquery_ar.py):
//
//   positions 0..2N-1: k0 v0 k1 v1 ... (N distinct keys from [1, V/2), N distinct values from
//                      [V/2, V), in random order)
//   positions 2N..L-1: the query region; key i appears again at 2N + 2*gap_i, where the N
//                      distinct gaps in [0, (L-2N)/2) follow p(g) ~ a (g+1)^(a-1) (drawn without
//                      replacement); every other position is 0, or a uniform token from [0, V)
//                      when random_non_queries is set.
//   targets: kIgnoreIndex (-100) everywhere except at each query key's position, where it is
//            value_i (the next token the model must predict after seeing the repeated key).
//
// Example i of a seed depends only on (seed, i), so train and validation sets are just two seeds
// (train_seed, val_seed) and any slice of either can be generated on its own. Gaps are drawn
// with exponential keys (Efraimidis-Spirakis), which gives the same distribution as numpy's
// sequential choice(replace=False, p); the random streams differ from numpy's.
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/ignore_index.h"

namespace hla::data {

struct MqarConfig {
  int64_t vocab_size = 8192;    // V
  int64_t seq_len = 64;         // L, even
  int64_t num_kv_pairs = 4;     // N, 4N <= L
  double power_a = 0.01;        // a of the gap power law
  bool random_non_queries = true;
  uint64_t train_seed = 0;
  uint64_t val_seed = 1;
};

struct MqarData {
  int64_t num_examples = 0, seq_len = 0;
  std::vector<int32_t> inputs;   // (num_examples, L)
  std::vector<int32_t> targets;  // (num_examples, L): kIgnoreIndex except at query keys
};

// Examples first_example .. first_example + num_examples - 1 of the stream `seed`.
MqarData generate_mqar(const MqarConfig& config, uint64_t seed, int64_t num_examples,
                       int64_t first_example = 0);
inline MqarData mqar_train(const MqarConfig& c, int64_t n, int64_t first = 0) {
  return generate_mqar(c, c.train_seed, n, first);
}
inline MqarData mqar_val(const MqarConfig& c, int64_t n, int64_t first = 0) {
  return generate_mqar(c, c.val_seed, n, first);
}

}  // namespace hla::data
