// MQAR generator (eval.md section 2.1): keys distinct within a sequence, each query's target is
// the value paired with that key in the context, loss only at query keys, the gap law,
// determinism by seed and independence of slices.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "data/mqar.h"
#include "tests/test_data_util.h"

using namespace hla::data;

TEST_CASE("MQAR examples have the Zoology layout") {
  MqarConfig c;
  c.vocab_size = 8192, c.seq_len = 64, c.num_kv_pairs = 8;
  for (bool random_fill : {true, false}) {
    c.random_non_queries = random_fill;
    MqarData d = mqar_train(c, 200);
    REQUIRE(d.inputs.size() == 200 * 64);
    for (int64_t e = 0; e < 200; e++) {
      const int32_t* in = d.inputs.data() + e * 64;
      const int32_t* tgt = d.targets.data() + e * 64;
      std::set<int32_t> keys, values;
      for (int i = 0; i < 8; i++) {
        CHECK(in[2 * i] >= 1);
        CHECK(in[2 * i] < 4096);
        CHECK(in[2 * i + 1] >= 4096);
        CHECK(in[2 * i + 1] < 8192);
        keys.insert(in[2 * i]);
        values.insert(in[2 * i + 1]);
      }
      CHECK(keys.size() == 8);
      CHECK(values.size() == 8);
      int labelled = 0;
      for (int p = 0; p < 64; p++) {
        if (tgt[p] == hla::kIgnoreIndex) {
          if (!random_fill && p >= 16) CHECK(in[p] == 0);
          continue;
        }
        labelled++;
        CHECK(p >= 16);             // only in the query region
        CHECK((p - 16) % 2 == 0);   // at even offsets 2 * gap
        int pair = -1;
        for (int i = 0; i < 8; i++) {
          if (in[2 * i] == in[p]) pair = i;
        }
        REQUIRE(pair >= 0);                   // the input there is a key of the context
        CHECK(tgt[p] == in[2 * pair + 1]);    // and the target its value
      }
      CHECK(labelled == 8);  // each key queried exactly once
    }
  }
}

TEST_CASE("MQAR is deterministic by seed; train and val differ; slices are independent") {
  MqarConfig c;
  c.seq_len = 128, c.num_kv_pairs = 16;
  MqarData a = mqar_train(c, 50), b = mqar_train(c, 50), v = mqar_val(c, 50);
  CHECK(a.inputs == b.inputs);
  CHECK(a.targets == b.targets);
  CHECK(a.inputs != v.inputs);
  MqarData slice = mqar_train(c, 10, 20);
  CHECK(std::vector<int32_t>(slice.inputs.begin(), slice.inputs.end()) ==
        std::vector<int32_t>(a.inputs.begin() + 20 * 128, a.inputs.begin() + 30 * 128));
  CHECK(std::vector<int32_t>(slice.targets.begin(), slice.targets.end()) ==
        std::vector<int32_t>(a.targets.begin() + 20 * 128, a.targets.begin() + 30 * 128));
}

TEST_CASE("MQAR query gaps follow the power law p(g) ~ (g+1)^(a-1)") {
  // The first key's gap is the first draw, so its distribution is p itself.
  MqarConfig c;
  c.seq_len = 64, c.num_kv_pairs = 4, c.random_non_queries = false;
  const int n = 20000, space = (64 - 8) / 2;
  MqarData d = mqar_train(c, n);
  double norm = 0;
  for (int g = 0; g < space; g++) norm += std::pow(g + 1.0, c.power_a - 1);
  std::vector<int> first_gap_count(space, 0);
  for (int e = 0; e < n; e++) {
    const int32_t* in = d.inputs.data() + e * 64;
    for (int g = 0; g < space; g++) {
      if (in[8 + 2 * g] == in[0]) first_gap_count[g]++;
    }
  }
  for (int g : {0, 1, 5, 27}) {
    double expected = std::pow(g + 1.0, c.power_a - 1) / norm;
    double sd = std::sqrt(expected * (1 - expected) / n);
    INFO("gap ", g, " expected ", expected);
    CHECK(std::abs(first_gap_count[g] / double(n) - expected) < 5 * sd);
  }
}

TEST_CASE("MQAR rejects impossible configs") {
  MqarConfig c;
  c.seq_len = 63;
  CHECK_THROWS_CONTAINING(mqar_train(c, 1), "seq_len must be even");
  c.seq_len = 64, c.num_kv_pairs = 17;
  CHECK_THROWS_CONTAINING(mqar_train(c, 1), "4 * num_kv_pairs <= seq_len");
}
