// Decoding (nn/decode.h): decode_memory against hand-counted bytes; greedy decoding with the
// decoder (batched prefill of mixed-length prompts, then batched steps) gives the tokens of the
// no-cache path (re-running the forward for every token) for every mixer, hybrids with GQA,
// sliding-window attention and routing, and holds decode_memory's bytes; prefill-then-step
// leaves the state of one forward over all tokens; a right-padded prefill of mixed lengths
// leaves each prompt the logits and state of its own prefill; the decoder's argmax, sampling and
// tail ops on hand-made rows. On the GPU (when there is one) the same, with the step replayed from a
// CUDA graph.
#include <doctest/doctest.h>

#include <algorithm>

#include "nn/decode.h"
#include "nn/model.h"
#include "nn/ops/pick_tokens.h"
#include "nn/ops/last_tokens.h"
#include "test_util.h"
#ifdef HLA_CUDA
#include "cuda/runtime.h"
#endif

using namespace hla;

namespace {

// A tiny model of `model_type` (2 heads) whose logits are far enough apart for greedy decoding
// to be decided by the model, not by rounding (init std 0.2 over a vocabulary of 40).
// chunk_size 4 makes the prefill run several chunks of the chunked kernels.
ModelConfig tiny(const std::string& model_type, int layers, const std::string& hybrid, int hidden = 32) {
  ModelConfig c;
  c.model_type = model_type;
  c.hidden_size = hidden;
  c.num_hidden_layers = layers;
  c.num_heads = 2;
  c.vocab_size = 40;
  c.chunk_size = 4;
  c.initializer_range = 0.2;
  if (model_type == "mamba2") {
    c.expand_v = 2;
    c.head_dim = 8;
    c.state_size = 8;
  }
  c.set_hybrid(hybrid);
  c.validate("tiny " + model_type);
  return c;
}

}  // namespace

TEST_CASE("decode_memory counts states, tails and a GQA, window-capped KV cache") {
  // gated_deltanet D 64, 2 heads of 32, conv 4, 2:1 -> layers 1 and 3 are attention (1 kv head).
  ModelConfig c = tiny("gated_deltanet", 4, "2:1", 64);
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
  ModelConfig mamba = tiny("mamba2", 1, "pure", 64);
  mamba.expand_v = 2;  // inner 128 = 8 heads of P 16, N 16
  mamba.head_dim = 16;
  mamba.state_size = 16;
  mamba.validate("mamba");
  CHECK(decode_memory(mamba, 1000).state_bytes == 8 * 16 * 16 * 4 + (2 * 16 + 128) * 3 * 4);
  CHECK(decode_memory(mamba, 1000).kv_bytes == 0);
  mamba.n_groups = 2;  // B and C per group: the state is per value head, the conv tail holds 2 G N + inner
  mamba.validate("mamba");
  CHECK(decode_memory(mamba, 1000).state_bytes == 8 * 16 * 16 * 4 + (2 * 2 * 16 + 128) * 3 * 4);

  // RWKV-6: S (2, 32, 32) and the time-mix shift (64) per linear layer, the channel-mix shift
  // (64) in every block, attention included.
  ModelConfig rwkv = tiny("rwkv6", 2, "2:1", 64);
  DecodeMemory r = decode_memory(rwkv, 8);
  CHECK(r.state_bytes == (2 * 32 * 32 * 4 + 64 * 4) + 2 * 64 * 4);
  CHECK(r.kv_bytes == 2 * 2 * 32 * 8 * 4);

  CHECK(decode_memory(tiny("hgrn", 3, "pure", 64), 50).state_bytes == 3 * 64 * 4);
  ModelConfig gla = tiny("gla", 1, "pure", 64);
  gla.expand_k = 0.5;  // dk 16, dv 32
  gla.validate("gla");
  CHECK(decode_memory(gla, 5).state_bytes == 2 * 16 * 32 * 4);
  ModelConfig plain = tiny("delta_net", 1, "pure", 64);
  plain.use_short_conv = false;
  CHECK(decode_memory(plain, 5).state_bytes == 2 * 32 * 32 * 4);
  CHECK(decode_memory(tiny("transformer", 2, "transformer", 64), 7).kv_bytes == 2 * (2 * 2 * 32 * 7 * 4));
}

// ---- decoding against the no-cache path ----

namespace {

struct DecodeRun {
  std::string label;
  ModelConfig config;
};

// Every mixer (pure, and with an attention layer), the Transformer, GQA, a sliding window that
// the prompts and steps run past, and routing.
std::vector<DecodeRun> decode_runs() {
  std::vector<DecodeRun> runs;
  for (const char* m : {"hgrn", "retnet", "gla", "hgrn2", "mamba2", "rwkv6", "delta_net", "gated_deltanet", "kda",
                        "gdn2"}) {
    runs.push_back({std::string(m) + " pure", tiny(m, 2, "pure")});
    runs.push_back({std::string(m) + " 2:1", tiny(m, 2, "2:1")});
  }
  ModelConfig groups = tiny("mamba2", 2, "pure");  // 8 heads of 8, 4 a group
  groups.n_groups = 2;
  runs.push_back({"mamba2 pure, 2 groups", groups});
  runs.push_back({"transformer", tiny("transformer", 2, "transformer")});
  ModelConfig gqa = tiny("gated_deltanet", 4, "2:1");
  gqa.attn.num_kv_heads = 1;
  runs.push_back({"gated_deltanet 2:1 gqa", gqa});
  ModelConfig window = tiny("gla", 3, "3:1");
  window.attn.window_size = 4;
  runs.push_back({"gla 3:1 window 4", window});
  ModelConfig windowed_transformer = tiny("transformer", 2, "transformer");
  windowed_transformer.attn.window_size = 3;
  windowed_transformer.attn.num_kv_heads = 1;
  runs.push_back({"transformer window 3 gqa", windowed_transformer});
  ModelConfig cler = tiny("gated_deltanet", 3, "3:1");
  cler.routing = Routing::Cler;
  runs.push_back({"gated_deltanet 3:1 cler", cler});
  return runs;
}

// Mixed lengths, two of them equal (they prefill as one batch of two).
const std::vector<std::vector<int32_t>> kPrompts = {
    {3, 17, 5, 29, 11}, {8, 1, 33, 2, 2, 19, 7, 24, 30}, {12}, {39, 0}, {6, 6, 21, 38, 4}};
constexpr int kNewTokens = 6;

int32_t argmax_row(const std::vector<double>& z, int64_t row, int64_t V) {
  auto first = z.begin() + row * V;
  return static_cast<int32_t>(std::max_element(first, first + V) - first);
}

// Greedy decoding by re-running the whole forward for every token (the no-cache path), one
// sequence at a time; the logits of each generated position go to `logits` (per sequence).
std::vector<std::vector<int32_t>> greedy_full(TrainableModel& model, Device device,
                                              std::vector<std::vector<std::vector<double>>>& logits) {
  NoGradGuard no_grad;
  const int64_t V = 40;
  std::vector<std::vector<int32_t>> out;
  logits.assign(kPrompts.size(), {});
  for (size_t b = 0; b < kPrompts.size(); b++) {
    std::vector<int32_t> seq = kPrompts[b];
    out.emplace_back();
    for (int n = 0; n < kNewTokens; n++) {
      const int64_t T = static_cast<int64_t>(seq.size());
      std::vector<double> z = model.logits(Tensor::from_i32(seq, {1, T}).to(device)).value().to_f64_vector();
      logits[b].emplace_back(z.end() - V, z.end());
      seq.push_back(argmax_row(z, T - 1, V));
      out.back().push_back(seq.back());
    }
  }
  return out;
}

// The same with the decoder: one batched prefill of the mixed-length prompts, then batched steps.
std::vector<std::vector<int32_t>> greedy_decoder(Decoder& decoder, std::vector<std::vector<std::vector<double>>>& logits) {
  const int64_t V = 40, B = static_cast<int64_t>(kPrompts.size());
  std::vector<std::vector<int32_t>> out(B);
  logits.assign(B, {});
  Tensor z = decoder.prefill(kPrompts);
  for (int n = 0; n < kNewTokens; n++) {
    REQUIRE(z.shape() == Shape{B, V});
    CHECK(z.dtype() == DType::F32);
    std::vector<double> rows = z.to_f64_vector();
    std::vector<int32_t> next(B);
    for (int64_t b = 0; b < B; b++) {
      logits[b].emplace_back(rows.begin() + b * V, rows.begin() + (b + 1) * V);
      next[b] = argmax_row(rows, b, V);
      out[b].push_back(next[b]);
    }
    if (n + 1 < kNewTokens) z = decoder.step(next);
  }
  return out;
}

double max_rel_err_nested(const std::vector<std::vector<std::vector<double>>>& a,
                          const std::vector<std::vector<std::vector<double>>>& ref) {
  std::vector<double> fa, fr;
  for (size_t b = 0; b < a.size(); b++)
    for (size_t n = 0; n < a[b].size(); n++) {
      fa.insert(fa.end(), a[b][n].begin(), a[b][n].end());
      fr.insert(fr.end(), ref[b][n].begin(), ref[b][n].end());
    }
  return testing::max_rel_err(fa, fr);
}

// Greedy decoding with the decoder equals the no-cache path, token for token, with logits within
// `tol` (fp32: the chunked prefill and the one-token step round differently), for every run.
// prefill_tokens: the default puts the five prompts in one right-padded group; 12 makes the
// groups {12}, {39, 0} (padded), the two of length 5 (unpadded) and the longest alone.
void check_decoder_matches_full_forward(Device device, bool cuda_graph, double tol,
                                        int64_t prefill_tokens = kPrefillTokens) {
  for (const DecodeRun& run : decode_runs()) {
    CAPTURE(run.label);
    CAPTURE(prefill_tokens);
    std::unique_ptr<TrainableModel> model = make_model(run.config, 7, device);
    std::vector<std::vector<std::vector<double>>> ref_logits, got_logits;
    std::vector<std::vector<int32_t>> ref = greedy_full(*model, device, ref_logits);
    std::unique_ptr<Decoder> decoder = make_decoder(*model, 64, cuda_graph, prefill_tokens);
    std::vector<std::vector<int32_t>> got = greedy_decoder(*decoder, got_logits);
    CHECK(got == ref);
    CHECK(max_rel_err_nested(got_logits, ref_logits) <= tol);
    std::vector<int64_t> lengths;
    for (const auto& p : kPrompts) lengths.push_back(static_cast<int64_t>(p.size()) + kNewTokens - 1);
    CHECK(decoder->lengths() == lengths);
    // The bytes held: the batch times decode_memory at the decoder's max_context.
    DecodeMemory per_seq = decode_memory(run.config, 64);
    DecodeMemory held = decoder->memory();
    const int64_t B = static_cast<int64_t>(kPrompts.size());
    CHECK(held.state_bytes == B * per_seq.state_bytes);
    CHECK(held.kv_bytes == B * per_seq.kv_bytes);
  }
}

// Every state tensor of a ModelState, in a fixed order.
std::vector<Tensor> state_tensors(const ModelState& s) {
  std::vector<Tensor> out;
  for (const LayerState& l : s.layers) {
    out.push_back(l.recurrent);
    out.insert(out.end(), l.tails.begin(), l.tails.end());
    out.push_back(l.ffn_tail);
    out.push_back(l.kv.k);
    out.push_back(l.kv.v);
  }
  return out;
}

// Every state tensor of `got` equals ref's within 1e-5 relative (each defined in both or in
// neither); at least one is compared. got[i] may be a batch, whose row `row` is compared.
void check_states_match(const std::vector<Tensor>& got, const std::vector<Tensor>& ref, int64_t row = -1) {
  REQUIRE(got.size() == ref.size());
  int compared = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    CAPTURE(i);
    REQUIRE(got[i].defined() == ref[i].defined());
    if (!ref[i].defined()) continue;
    const Tensor a = row >= 0 ? got[i].slice0(row, row + 1) : got[i];
    REQUIRE(a.shape() == ref[i].shape());
    CHECK(testing::max_rel_err(a, ref[i]) <= 1e-5);
    compared++;
  }
  CHECK(compared > 0);
}

// A fresh state for `run`'s model with `batch` sequences, KV caches of `capacity` slots.
ModelState fresh_state(const DecodeRun& run, int64_t batch, int64_t capacity, Device device) {
  ModelState s;
  s.layers.resize(run.config.num_hidden_layers);
  for (int i = 0; i < run.config.num_hidden_layers; i++)
    if (run.config.is_attention_layer(i))
      s.layers[i].kv.capacity = run.config.attn.window_size > 0 ? run.config.attn.window_size : capacity;
  s.positions = Tensor::zeros({batch}, DType::I32, device);
  return s;
}

// One right-padded forward over the mixed-length prompts (ModelState::lengths) gives, for every
// prompt, the last-token logits and the state (recurrent S, conv and token-shift tails, KV
// cache) of that prompt's own unpadded forward, within 1e-5 relative per tensor.
void check_padded_prefill_matches_single(Device device) {
  const int64_t B = static_cast<int64_t>(kPrompts.size()), L = 9, capacity = 16;
  std::vector<int32_t> ids(B * L, 0);  // ids: (B, L), right-padded with token 0
  std::vector<int64_t> lengths;
  for (int64_t b = 0; b < B; b++) {
    std::copy(kPrompts[b].begin(), kPrompts[b].end(), ids.begin() + b * L);
    lengths.push_back(static_cast<int64_t>(kPrompts[b].size()));
  }
  for (const DecodeRun& run : decode_runs()) {
    CAPTURE(run.label);
    std::unique_ptr<TrainableModel> model = make_model(run.config, 7, device);
    auto& stateful = dynamic_cast<StatefulModel&>(*model);
    NoGradGuard no_grad;
    ModelState padded = fresh_state(run, B, capacity, device);
    padded.lengths = lengths;
    Tensor z = stateful.last_logits_with_state(Tensor::from_i32(ids, {B, L}).to(device), padded).value();  // (B, V)
    REQUIRE(z.shape() == Shape{B, 40});
    const std::vector<Tensor> batch_state = state_tensors(padded);
    for (int64_t b = 0; b < B; b++) {
      CAPTURE(b);
      ModelState single = fresh_state(run, 1, capacity, device);
      const int64_t T = lengths[b];
      Tensor ref = stateful.last_logits_with_state(Tensor::from_i32(kPrompts[b], {1, T}).to(device), single).value();
      CHECK(testing::max_rel_err(z.slice0(b, b + 1), ref) <= 1e-5);
      check_states_match(batch_state, state_tensors(single), b);
    }
  }
}

// Prefill of the first 5 tokens then one-token steps leaves the state one forward over all 13
// tokens leaves (recurrent states, tails, KV caches), within 1e-5 relative per tensor.
void check_prefill_then_step_state(Device device) {
  const std::vector<int32_t> tokens = {3, 17, 5, 29, 11, 8, 1, 33, 2, 2, 19, 7, 24};
  const int64_t N = static_cast<int64_t>(tokens.size()), prefix = 5;
  for (const DecodeRun& run : decode_runs()) {
    CAPTURE(run.label);
    std::unique_ptr<TrainableModel> model = make_model(run.config, 7, device);
    auto& stateful = dynamic_cast<StatefulModel&>(*model);
    NoGradGuard no_grad;
    ModelState full = fresh_state(run, 1, N, device), stepped = fresh_state(run, 1, N, device);
    stateful.logits_with_state(Tensor::from_i32(tokens, {1, N}).to(device), full);
    std::vector<int32_t> head(tokens.begin(), tokens.begin() + prefix);
    stateful.logits_with_state(Tensor::from_i32(head, {1, prefix}).to(device), stepped);
    for (int64_t t = prefix; t < N; t++) {
      stepped.positions = Tensor::from_i32({static_cast<int32_t>(t)}, {1}).to(device);
      stateful.logits_with_state(Tensor::from_i32({tokens[t]}, {1, 1}).to(device), stepped);
    }
    check_states_match(state_tensors(stepped), state_tensors(full));
  }
}

}  // namespace

TEST_CASE("greedy decoding with the decoder equals re-running the forward, every mixer, CPU fp32") {
  check_decoder_matches_full_forward(Device::CPU, false, 1e-4);
  check_decoder_matches_full_forward(Device::CPU, false, 1e-4, 12);
}

TEST_CASE("a right-padded prefill of mixed lengths equals each prompt's own prefill, every mixer, CPU fp32") {
  check_padded_prefill_matches_single(Device::CPU);
}

TEST_CASE("prefill then steps leaves the state of one forward over all tokens, CPU fp32") {
  check_prefill_then_step_state(Device::CPU);
}

TEST_CASE("argmax_rows picks the first maximum below each row's width, as the host scan") {
  const std::vector<double> z = {1, 3, 3, 0, 5, 5,  //
                                 1, 3, 3, 0, 5, 5,  //
                                 2, 2, 2, 2, 2, 2};
  const std::vector<int32_t> widths = {4, 6, 1};
  const Tensor ids = argmax_rows(Tensor::from_f64(z, {3, 6}, DType::F32), Tensor::from_i32(widths, {3}));
  REQUIRE(ids.dtype() == DType::I32);
  CHECK(std::vector<int32_t>(ids.data<int32_t>(), ids.data<int32_t>() + 3) == std::vector<int32_t>{1, 4, 0});
  for (int64_t b = 0; b < 3; b++)  // the host path it replaces: std::max_element over the width
    CHECK(ids.data<int32_t>()[b] == std::max_element(z.begin() + b * 6, z.begin() + b * 6 + widths[b]) - z.begin() - b * 6);
  const std::string bad_width =
      testing::error_of([&] { argmax_rows(Tensor::zeros({2, 6}, DType::F32), Tensor::from_i32({3, 7}, {2})); });
  CHECK(bad_width.find("argmax_rows: widths[1] is 7, must be in [1, 6]") != std::string::npos);
}

TEST_CASE("sample_tokens ranks ties lowest id first, cuts the top-k and the nucleus, and draws by u") {
  // one row, z = (1, 3, 3, 0, 9): width 4 hides the 9; ranked 1, 2, 0, 3; at temperature 1 the
  // top two weigh 1 and 1
  const Tensor z = Tensor::from_f64({1, 3, 3, 0, 9}, {1, 5}, DType::F32), width = Tensor::from_i32({4}, {1});
  auto draw = [&](double u, SampleParams p) {
    return sample_tokens(z, width, Tensor::from_f64({u}, {1}, DType::F64), p).data<int32_t>()[0];
  };
  CHECK(draw(0.4, {1.0, 2, 1.0}) == 1);  // target 0.8 of mass 2 falls in the first
  CHECK(draw(0.6, {1.0, 2, 1.0}) == 2);  // 1.2: the second
  CHECK(draw(0.9, {1.0, 2, 0.5}) == 1);  // the nucleus of top_p 0.5 is the first alone
  CHECK(draw(0.99, {1.0, 1, 1.0}) == 1);  // top_k 1 is greedy
  CHECK(draw(0.999, {1.0, 0, 1.0}) == 3);  // every id: e^-3 / (2 + e^-2 + e^-3) is the last sliver
  const std::string bad =
      testing::error_of([&] { sample_tokens(z, width, Tensor::from_f64({0.5}, {1}, DType::F64), {0.0, 0, 1.0}); });
  CHECK(bad.find("sample_tokens: temperature must be > 0, got 0") != std::string::npos);
}

TEST_CASE("last_tokens takes each sequence's last n inputs, zeros before its first token") {
  std::vector<double> x(2 * 4 * 2);  // x: (2, 4, 2), x[b, t, c] = 100 b + 10 t + c
  for (int64_t i = 0; i < 16; i++) x[i] = 100 * (i / 8) + 10 * ((i / 2) % 4) + i % 2;
  const Tensor tail = last_tokens(Tensor::from_f64(x, {2, 4, 2}, DType::F32), Tensor::from_i32({1, 4}, {2}), 3);
  REQUIRE(tail.shape() == Shape{2, 2, 3});  // (B, C, n)
  CHECK(tail.to_f64_vector() == std::vector<double>{0, 0, 0, 0, 0, 1, 110, 120, 130, 111, 121, 131});
  const std::string bad_length =
      testing::error_of([&] { last_tokens(Tensor::zeros({2, 4, 2}, DType::F32), Tensor::from_i32({0, 4}, {2}), 1); });
  CHECK(bad_length.find("last_tokens: lengths[0] is 0, must be in [1, 4]") != std::string::npos);
}

TEST_CASE("the decoder's bad inputs are errors that name the value") {
  ModelConfig c = tiny("transformer", 1, "transformer");
  std::unique_ptr<TrainableModel> model = make_model(c, 7);
  std::unique_ptr<Decoder> decoder = make_decoder(*model, 8);
  CHECK(testing::error_of([&] { decoder->step({1}); }) == "decoder: step before prefill");
  CHECK(testing::error_of([&] { decoder->prefill({}); }) == "decoder: prefill needs at least one prompt");
  CHECK(testing::error_of([&] { decoder->prefill({{1}, {}}); }) ==
        "decoder: prompt 1 is empty (a prompt needs at least one token)");
  CHECK(testing::error_of([&] { decoder->prefill({{1, 40}}); }) ==
        "decoder: prompt 0: token 1 is 40, outside the vocabulary [0, 40)");
  CHECK(testing::error_of([&] { decoder->prefill({std::vector<int32_t>(9, 1)}); }) ==
        "decoder: prompt 0 has 9 tokens, more than max_context 8");
  decoder->prefill({std::vector<int32_t>(7, 1), {2}});
  CHECK(testing::error_of([&] { decoder->step({1}); }) == "decoder: step got 1 tokens for a batch of 2");
  CHECK(testing::error_of([&] { decoder->step({1, -3}); }) == "decoder: step: token 1 is -3, outside the vocabulary [0, 40)");
  decoder->step({1, 2});
  CHECK(testing::error_of([&] { decoder->step({1, 2}); }) ==
        "decoder: sequence 0 already holds 8 tokens, the max_context of its full-attention KV cache");
  CHECK(testing::error_of([&] { make_decoder(*model, 0); }) == "decoder: max_context must be >= 1, got 0");
  // A sliding window within max_context bounds nothing: the ring keeps the window.
  c.attn.window_size = 4;
  std::unique_ptr<TrainableModel> windowed = make_model(c, 7);
  std::unique_ptr<Decoder> ring = make_decoder(*windowed, 8);
  ring->prefill({std::vector<int32_t>(20, 3)});
  for (int i = 0; i < 5; i++) ring->step({5});
  CHECK(ring->lengths() == std::vector<int64_t>{25});
  CHECK(ring->memory().kv_bytes == decode_memory(c, 8).kv_bytes);
}

#ifdef HLA_CUDA
TEST_CASE("GPU: decoding equals the no-cache path, the CUDA graph replays exactly, fp32") {
  if (!cuda_available()) {
    MESSAGE("SKIPPED: no CUDA GPU here; decoding on the GPU was not checked (run hla_tests on a GPU)");
    return;
  }
  check_decoder_matches_full_forward(Device::CUDA, true, 1e-4);
  check_decoder_matches_full_forward(Device::CUDA, false, 1e-4);
  check_decoder_matches_full_forward(Device::CUDA, true, 1e-4, 12);
  check_padded_prefill_matches_single(Device::CUDA);
  check_prefill_then_step_state(Device::CUDA);
  // Graph replays give the plain launches' logits bit for bit, and allocate nothing.
  for (const DecodeRun& run : decode_runs()) {
    CAPTURE(run.label);
    std::unique_ptr<TrainableModel> model = make_model(run.config, 7, Device::CUDA);
    std::unique_ptr<Decoder> graphed = make_decoder(*model, 64, true), plain = make_decoder(*model, 64, false);
    std::vector<double> a = graphed->prefill(kPrompts).to_f64_vector(), b = plain->prefill(kPrompts).to_f64_vector();
    CHECK(a == b);
    size_t mallocs = 0;
    for (int n = 0; n < 8; n++) {
      std::vector<int32_t> next = {static_cast<int32_t>(n), 5, static_cast<int32_t>(39 - n), 17, 3};
      a = graphed->step(next).to_f64_vector();
      b = plain->step(next).to_f64_vector();
      CHECK(a == b);
      if (n == 3) mallocs = cuda::cuda_malloc_calls();
    }
    CHECK(cuda::cuda_malloc_calls() == mallocs);  // replays after the capture reach no cudaMalloc
  }
}
#endif
