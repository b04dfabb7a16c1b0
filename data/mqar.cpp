// MQAR example generation; see mqar.h for the layout.
#include "data/mqar.h"

#include <algorithm>
#include <cmath>

#include "tensor/error.h"
#include "tensor/random.h"

namespace hla::data {

namespace {

void check_config(const MqarConfig& c) {
  HLA_CHECK(c.seq_len > 0 && c.seq_len % 2 == 0, "MQAR seq_len must be even and positive, got ", c.seq_len);
  HLA_CHECK(c.num_kv_pairs > 0 && 4 * c.num_kv_pairs <= c.seq_len, "MQAR needs 4 * num_kv_pairs <= seq_len, got ",
            c.num_kv_pairs, " pairs for seq_len ", c.seq_len);
  HLA_CHECK(c.num_kv_pairs <= c.vocab_size / 2 - 1, "MQAR vocab_size ", c.vocab_size,
            " has only ", c.vocab_size / 2 - 1, " keys for ", c.num_kv_pairs, " pairs");
  HLA_CHECK(c.power_a > 0, "MQAR power_a must be positive, got ", c.power_a);
}

// `count` distinct values from [lo, hi) in random order (rejection sampling; count << hi-lo).
void distinct_tokens(Rng& rng, int64_t lo, int64_t hi, int64_t count, std::vector<uint8_t>& taken,
                     std::vector<int32_t>& out) {
  out.clear();
  while (static_cast<int64_t>(out.size()) < count) {
    int64_t t = lo + static_cast<int64_t>(rng.below(hi - lo));
    if (taken[t]) continue;
    taken[t] = 1;
    out.push_back(static_cast<int32_t>(t));
  }
  for (int32_t t : out) taken[t] = 0;
}

// `count` distinct gaps from [0, space) with p(g) ~ (g+1)^(a-1), in order of drawing.
// log(u)/w is the Efraimidis-Spirakis key: the largest keys are a weighted sample without
// replacement, in the order a sequential draw would produce them.
void power_law_gaps(Rng& rng, int64_t space, int64_t count, double a, std::vector<int32_t>& gaps) {
  std::vector<std::pair<double, int32_t>> keyed(space);
  for (int64_t g = 0; g < space; g++) {
    double weight = a * std::pow(static_cast<double>(g + 1), a - 1.0);
    double u = 1.0 - rng.uniform();  // (0, 1]
    keyed[g] = {std::log(u) / weight, static_cast<int32_t>(g)};
  }
  std::partial_sort(keyed.begin(), keyed.begin() + count, keyed.end(),
                    [](const auto& x, const auto& y) { return x.first > y.first; });
  gaps.resize(count);
  for (int64_t i = 0; i < count; i++) gaps[i] = keyed[i].second;
}

}  // namespace

MqarData generate_mqar(const MqarConfig& c, uint64_t seed, int64_t num_examples, int64_t first_example) {
  check_config(c);
  const int64_t L = c.seq_len, N = c.num_kv_pairs, V = c.vocab_size;
  const int64_t context = 2 * N, space = (L - context) / 2;
  MqarData data{num_examples, L, std::vector<int32_t>(num_examples * L, 0),
                std::vector<int32_t>(num_examples * L, kIgnoreIndex)};
  std::vector<uint8_t> taken(V, 0);
  std::vector<int32_t> keys, values, gaps;
  for (int64_t e = 0; e < num_examples; e++) {
    uint64_t example = static_cast<uint64_t>(first_example + e);
    Rng rng(splitmix64(seed) ^ splitmix64(splitmix64(example + 1)));
    int32_t* in = data.inputs.data() + e * L;    // (L,)
    int32_t* tgt = data.targets.data() + e * L;  // (L,)
    distinct_tokens(rng, 1, V / 2, N, taken, keys);
    distinct_tokens(rng, V / 2, V, N, taken, values);
    power_law_gaps(rng, space, N, c.power_a, gaps);
    for (int64_t i = 0; i < N; i++) {
      in[2 * i] = keys[i];
      in[2 * i + 1] = values[i];
      int64_t query = context + 2 * gaps[i];
      in[query] = keys[i];
      tgt[query] = values[i];
    }
    if (c.random_non_queries) {
      for (int64_t t = 0; t < L; t++) {
        if (in[t] == 0) in[t] = static_cast<int32_t>(rng.below(V));
      }
    }
  }
  return data;
}

}  // namespace hla::data
