// Decoding (nn/decode.h): decode_memory against hand-counted bytes.
#include <doctest/doctest.h>

#include "nn/decode.h"
#include "test_util.h"

using namespace hla;

namespace {

ModelConfig small_config(const std::string& model_type, int layers, const std::string& hybrid) {
  ModelConfig c;
  c.model_type = model_type;
  c.hidden_size = 64;
  c.num_hidden_layers = layers;
  c.num_heads = 2;
  c.vocab_size = 32;
  c.set_hybrid(hybrid);
  c.validate("test config");
  return c;
}

}  // namespace

TEST_CASE("decode_memory counts states, tails and a GQA, window-capped KV cache") {
  // gated_deltanet D 64, 2 heads of 32, conv 4, 2:1 -> layers 1 and 3 are attention (1 kv head).
  ModelConfig c = small_config("gated_deltanet", 4, "2:1");
  c.attn.num_kv_heads = 1;
  const int64_t S = 2 * 32 * 32 * 4;                  // (HV, dk, dv) fp32
  const int64_t conv = (2 * 2 * 32 + 2 * 32) * 3 * 4;  // q, k, v tails (K-1 = 3) in fp32
  DecodeMemory m = decode_memory(c, 100);
  CHECK(m.state_bytes == 2 * (S + conv));
  CHECK(m.kv_bytes == 2 * (2 * 1 * 32 * 100 * 4));    // K and V, 1 kv head of 32, 100 slots
  CHECK(m.total() == m.state_bytes + m.kv_bytes);
  DecodeMemory half = decode_memory(c, 100, DType::BF16);  // tails and caches in bf16, S stays fp32
  CHECK(half.state_bytes == 2 * (S + conv / 2));
  CHECK(half.kv_bytes == m.kv_bytes / 2);
  c.attn.window_size = 16;
  CHECK(decode_memory(c, 100).kv_bytes == 2 * (2 * 32 * 16 * 4));  // the ring buffer holds the window
  CHECK(decode_memory(c, 10).kv_bytes == 2 * (2 * 32 * 10 * 4));   // a context shorter than the window
  CHECK(decode_memory(c, 0).kv_bytes == 0);
  CHECK(testing::error_of([&] { decode_memory(c, -1); }) == "decode_memory: context must be >= 0, got -1");
}

TEST_CASE("decode_memory follows each mixer's head shape") {
  ModelConfig mamba = small_config("mamba2", 1, "pure");
  mamba.expand_v = 2;  // inner 128 = 8 heads of P 16, N 16
  mamba.head_dim = 16;
  mamba.state_size = 16;
  mamba.validate("mamba");
  CHECK(decode_memory(mamba, 1000).state_bytes == 8 * 16 * 16 * 4 + (2 * 16 + 128) * 3 * 4);
  CHECK(decode_memory(mamba, 1000).kv_bytes == 0);

  // RWKV-6: S (2, 32, 32) and the time-mix shift (64) per linear layer, the channel-mix shift
  // (64) in every block, attention included.
  ModelConfig rwkv = small_config("rwkv6", 2, "2:1");
  DecodeMemory r = decode_memory(rwkv, 8);
  CHECK(r.state_bytes == (2 * 32 * 32 * 4 + 64 * 4) + 2 * 64 * 4);
  CHECK(r.kv_bytes == 2 * 2 * 32 * 8 * 4);

  CHECK(decode_memory(small_config("hgrn", 3, "pure"), 50).state_bytes == 3 * 64 * 4);
  ModelConfig gla = small_config("gla", 1, "pure");
  gla.expand_k = 0.5;  // dk 16, dv 32
  gla.validate("gla");
  CHECK(decode_memory(gla, 5).state_bytes == 2 * 16 * 32 * 4);
  ModelConfig plain = small_config("delta_net", 1, "pure");
  plain.use_short_conv = false;
  CHECK(decode_memory(plain, 5).state_bytes == 2 * 32 * 32 * 4);
  CHECK(decode_memory(small_config("transformer", 2, "transformer"), 7).kv_bytes == 2 * (2 * 2 * 32 * 7 * 4));
}
