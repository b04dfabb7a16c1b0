// [data] documents = "reset" (train/documents.h): the boundaries of packed windows, their padded
// rows, and the training step on them, which must equal running every document alone (loss and
// every gradient) for linear mixers with conv / token-shift tails and for attention hybrids; a
// state leaking across a boundary would break it, as the same batch as plain windows shows.
// The sequence ops that take packed documents natively (short_conv, token_shift, hgrn, delta_rule,
// decay_attention, rwkv6) against each document run alone: outputs, final states and every input
// gradient, in float64.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nn/check/registry.h"
#include "nn/model.h"
#include "nn/ops/attention.h"
#include "nn/ops/decay_attention.h"
#include "nn/ops/delta_rule.h"
#include "nn/ops/document_chunks.h"
#include "nn/ops/hgrn.h"
#include "nn/ops/rwkv6.h"
#include "nn/ops/short_conv.h"
#include "nn/ops/token_shift.h"
#include "tensor/ignore_index.h"
#include "tensor/math.h"
#include "tests/test_train_util.h"
#include "tests/test_util.h"
#include "train/data_parallel.h"
#include "train/documents.h"
#include "train/trainer.h"

using namespace hla;
using hla::testing::error_of;
using hla::testing::max_rel_err;
namespace fs = std::filesystem;

namespace {

constexpr int32_t kVocab = 20, kEos = 19;

// Windows of a token stream as the loader cuts them: row r holds stream[r T, r T + T), its
// targets stream[r T + 1, r T + T + 1); `ignored` targets are kIgnoreIndex. With cu_seqlens.
TrainBatch packed_batch(const std::vector<int32_t>& stream, int64_t B, int64_t T,
                        const std::vector<int64_t>& ignored = {}) {
  REQUIRE(int64_t(stream.size()) == B * T + 1);
  std::vector<int32_t> ids(stream.begin(), stream.end() - 1);  // ids: (B, T)
  std::vector<int32_t> targets(stream.begin() + 1, stream.end());  // targets: (B, T)
  for (int64_t i : ignored) targets[size_t(i)] = kIgnoreIndex;
  TrainBatch b{Tensor::from_i32(ids, {B, T}), Tensor::from_i32(targets, {B, T}), 0};
  b.valid = count_valid_targets(b.targets);
  b.cu_seqlens = document_cu_seqlens(b.ids, kEos);
  return b;
}

// Two windows of 12 tokens: an EOS as the first token, two EOS in a row, an EOS at the end.
TrainBatch two_windows() {
  const int32_t E = kEos;
  return packed_batch({E, 3, 5, 7, 1, E, 2, 4, 6, 8, 10, 12,  //
                       9, 11, 13, E, E, 14, 15, 16, 17, 18, 1, E, 2},
                      2, 12, {4, 20});
}

// Three windows of 8 tokens with other cuts, and a window without EOS.
TrainBatch three_windows() {
  const int32_t E = kEos;
  return packed_batch({4, 6, 8, E, 3, 3, 5, 5,  //
                       1, 2, 3, 4, 5, 6, 7, 8,  //
                       E, 9, 10, E, 11, 12, 13, 14, 15},
                      3, 8);
}

// Three windows of 8 tokens again, cut elsewhere.
TrainBatch three_more_windows() {
  const int32_t E = kEos;
  return packed_batch({E, E, 1, 2, 3, 4, 5, 6,  //
                       7, 8, E, 9, 10, 11, 12, E,  //
                       13, 14, 15, 16, E, 1, 2, 3, 4},
                      3, 8);
}

// Two rows of 191 tokens packing documents of 37, 64 and 90 tokens (shorter than a 64-token
// chunk, exactly one, and crossing chunks), the second row in another order.
const std::vector<std::vector<int64_t>> kPackedRows = {{37, 64, 90}, {90, 37, 64}};
constexpr int64_t kPackedT = 191;

// doc_start (B, T) of kPackedRows.
Tensor packed_doc_start() {
  std::vector<int64_t> cu{0};
  for (const std::vector<int64_t>& row : kPackedRows)
    for (int64_t len : row) cu.push_back(cu.back() + len);
  return document_starts(cu, int64_t(kPackedRows.size()), kPackedT);
}

// Tokens [t0, t1) of row b of a (B, T, ...) float64 tensor as (1, t1 - t0, ...); t0 = t1 = -1:
// row b of a per-row (B, ...) tensor as (1, ...).
Tensor slice_doc(const Tensor& x, int64_t b, int64_t t0 = -1, int64_t t1 = -1) {
  const bool per_row = t0 < 0;
  const int64_t rows = x.size(0), T = per_row ? 1 : x.size(1), inner = x.numel() / (rows * T);
  if (per_row) t0 = 0, t1 = 1;
  Shape s = x.shape();
  s[0] = 1;
  if (!per_row) s[1] = t1 - t0;
  const std::vector<double> v = x.to_f64_vector();
  std::vector<double> out(v.begin() + (b * T + t0) * inner, v.begin() + (b * T + t1) * inner);
  return Tensor::from_f64(out, s, DType::F64);
}

// max |a - ref| / max |ref| (0 when both are 0).
double doc_err(const Tensor& a, const Tensor& ref) {
  const double scale = max_abs(ref);
  const double diff = max_abs(sub(a, ref));
  return scale > 0 ? diff / scale : diff;
}

// An op on packed documents: inputs with a token axis (B, T, ...) are cut per document, shared
// ones (weights) are whole; its first token_outputs outputs have a token axis, the rest are per
// row (final states: the packed row's equals its last document's).
struct PackedOp {
  std::vector<Tensor> tokens, shared;  // float64 on the CPU; an undefined one is absent
  size_t token_outputs;
  std::function<std::vector<Var>(const std::vector<Var>& tokens, const std::vector<Var>& shared,
                                 const Tensor& doc_start)>
      run;
};

// Checks every output and every input gradient of op on kPackedRows against each document run
// alone (with the same output gradients, cut per document) to 1e-10.
void check_documents_alone(const PackedOp& op, const std::string& what) {
  auto leaves = [](const std::vector<Tensor>& ts) {
    std::vector<Var> vs;
    for (const Tensor& t : ts) vs.push_back(t.defined() ? Var(t, true) : Var());
    return vs;
  };
  std::vector<Var> tokens = leaves(op.tokens), shared = leaves(op.shared);
  std::vector<Var> outs = op.run(tokens, shared, packed_doc_start());
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < outs.size(); i++) seeds.push_back(Tensor::randn(outs[i].shape(), 4100 + i, 1.0, DType::F64));
  run_backward(outs, seeds);
  std::vector<Tensor> shared_sum(shared.size());  // the documents' gradients of the shared inputs, summed
  for (size_t r = 0; r < kPackedRows.size(); r++) {
    int64_t t0 = 0;
    for (size_t f = 0; f < kPackedRows[r].size(); f++) {
      const int64_t t1 = t0 + kPackedRows[r][f];
      const bool last = f + 1 == kPackedRows[r].size();
      INFO(what, ": row ", r, " tokens [", t0, ", ", t1, ")");
      std::vector<Tensor> doc_tokens;
      for (const Tensor& t : op.tokens) doc_tokens.push_back(t.defined() ? slice_doc(t, r, t0, t1) : Tensor());
      std::vector<Var> doc_in = leaves(doc_tokens), doc_shared = leaves(op.shared);
      std::vector<Var> doc_outs = op.run(doc_in, doc_shared, Tensor());
      std::vector<Tensor> doc_seeds;
      for (size_t i = 0; i < doc_outs.size(); i++)
        doc_seeds.push_back(i < op.token_outputs ? slice_doc(seeds[i], r, t0, t1)
                            : last              ? slice_doc(seeds[i], r)
                                                : Tensor::zeros(doc_outs[i].shape(), DType::F64));
      run_backward(doc_outs, doc_seeds);
      for (size_t i = 0; i < outs.size(); i++) {
        if (i >= op.token_outputs && !last) continue;
        const Tensor packed =
            i < op.token_outputs ? slice_doc(outs[i].value(), r, t0, t1) : slice_doc(outs[i].value(), r);
        INFO("output ", i);
        CHECK(doc_err(packed, doc_outs[i].value()) <= 1e-10);
      }
      for (size_t i = 0; i < tokens.size(); i++) {
        if (!tokens[i].defined()) continue;
        INFO("gradient of token input ", i);
        CHECK(doc_err(slice_doc(tokens[i].grad(), r, t0, t1), doc_in[i].grad()) <= 1e-10);
      }
      for (size_t i = 0; i < shared.size(); i++)
        if (shared[i].defined())
          shared_sum[i] = shared_sum[i].defined() ? add(shared_sum[i], doc_shared[i].grad()) : doc_shared[i].grad();
      t0 = t1;
    }
  }
  for (size_t i = 0; i < shared.size(); i++) {
    if (!shared[i].defined()) continue;
    INFO(what, ": gradient of shared input ", i);
    CHECK(doc_err(shared[i].grad(), shared_sum[i]) <= 1e-10);
  }
}

ModelConfig tiny_model(const std::string& type, const std::string& hybrid) {
  ModelConfig c;
  c.model_type = type;
  c.hidden_size = 16;
  c.num_hidden_layers = 3;
  c.num_heads = 2;
  c.vocab_size = kVocab;
  c.intermediate_size = 24;
  c.conv_size = 3;
  c.initializer_range = 0.3;  // large enough that every token changes the later ones' outputs
  c.set_hybrid(hybrid);
  return c;
}

// Loss (the mean over valid targets) and gradients of running every document fragment of the
// batches alone, each as a (1, L) sequence weighted by its valid targets over all of theirs.
double loss_of_documents_alone(TrainableModel& model, const std::vector<TrainBatch>& batches) {
  int64_t total_valid = 0;
  for (const TrainBatch& b : batches) total_valid += b.valid;
  double loss = 0;
  for (const TrainBatch& b : batches) {
    const std::vector<int64_t>& cu = b.cu_seqlens;
    const int32_t* ids = b.ids.data<int32_t>();
    const int32_t* targets = b.targets.data<int32_t>();
    for (size_t f = 0; f + 1 < cu.size(); f++) {
      const int64_t L = cu[f + 1] - cu[f];
      const Tensor doc_targets = Tensor::from_i32(std::vector<int32_t>(targets + cu[f], targets + cu[f + 1]), {1, L});
      const int64_t valid = count_valid_targets(doc_targets);
      if (valid == 0) continue;
      const Tensor doc_ids = Tensor::from_i32(std::vector<int32_t>(ids + cu[f], ids + cu[f + 1]), {1, L});
      const Var doc_loss = model.loss(doc_ids, doc_targets);
      const double weight = double(valid) / double(total_valid);
      doc_loss.backward(Tensor::full({}, weight, doc_loss.dtype()));
      loss += weight * doc_loss.value().item();
    }
  }
  return loss;
}

double accumulated_loss(TrainableModel& model, const std::vector<TrainBatch>& batches) {
  Tensor records = Tensor::zeros({1, kStepRecordSize}, DType::F64);  // records: (1, kStepRecordSize)
  accumulate_gradients(model, batches, records, 0);
  return records.to_f64_vector()[0];
}

std::vector<TrainBatch> without_boundaries(std::vector<TrainBatch> batches) {
  for (TrainBatch& b : batches) b.cu_seqlens.clear();
  return batches;
}

// A model that does not take packed documents natively, so that the trainer pads every document
// fragment into a row of its own: inner's loss and parameters with takes_documents() false (every
// HybridLM takes them, so the padded path's tests wrap one).
class PaddedRowsModel : public TrainableModel {
 public:
  explicit PaddedRowsModel(std::unique_ptr<TrainableModel> inner) : inner_(std::move(inner)) {}
  Var loss(const Tensor& ids, const Tensor& targets) override { return inner_->loss(ids, targets); }
  Var logits(const Tensor& ids) override { return inner_->logits(ids); }
  ParameterList parameters() override { return inner_->parameters(); }
  Device device() const override { return inner_->device(); }

 private:
  std::unique_ptr<TrainableModel> inner_;
};

// The packed step with resets against the documents alone, the loss within 1e-6 and each gradient
// within grad_bound (max abs error over the gradient's max abs); the same batches as plain
// windows must differ by far more, or the test could not see a leak. In f64 compute the two agree
// to ~1e-14 (exactness); in f32 the padded rows change the kernels' summation order (chunk and GEMM
// shapes), which moves the sum-over-tokens gradients of gate parameters (A_log, dt_bias) by up to
// ~6e-6 of their largest entry, so f32 gets 2e-5 there.
void check_reset_in(const ModelConfig& config, DType compute, double grad_bound) {
  const std::string dtype = dtype_name(compute);
  CAPTURE(dtype);
  const std::vector<TrainBatch> update = {two_windows(), three_windows()};
  auto packed = make_model(config, 11, Device::CPU, compute), alone = make_model(config, 11, Device::CPU, compute),
       windows = make_model(config, 11, Device::CPU, compute);
  const double packed_loss = accumulated_loss(*packed, update);
  const double alone_loss = loss_of_documents_alone(*alone, update);
  const double windows_loss = accumulated_loss(*windows, without_boundaries(update));
  CHECK(std::abs(packed_loss - alone_loss) <= 1e-6 * std::abs(alone_loss));
  CHECK(std::abs(windows_loss - alone_loss) >= 1e-4 * std::abs(alone_loss));  // 1.2e-3 (RWKV-6) to 7e-2
  ParameterList p = packed->parameters(), a = alone->parameters();
  REQUIRE(p.size() == a.size());
  for (size_t i = 0; i < p.size(); i++) {
    CAPTURE(p[i].name);
    const double err = max_rel_err(p[i].var.grad(), a[i].var.grad());
    CHECK(err <= grad_bound);
  }
}

void check_reset_equals_documents_alone(const std::string& type, const std::string& hybrid) {
  check_reset_in(tiny_model(type, hybrid), DType::F64, 1e-12);
  check_reset_in(tiny_model(type, hybrid), DType::F32, 2e-5);
}

// Serves the same batches in turn; its position is the count served.
class FixedSource : public BatchSource {
 public:
  explicit FixedSource(std::vector<TrainBatch> batches) : batches_(std::move(batches)) {}
  TrainBatch next() override { return batches_[size_t(served_++) % batches_.size()]; }
  nlohmann::json position() const override { return {{"served", served_}}; }
  void set_position(const nlohmann::json& p) override { served_ = p.at("served").get<int64_t>(); }

 private:
  std::vector<TrainBatch> batches_;
  int64_t served_ = 0;
};

std::string write_documents_jsonl(const std::string& name) {
  const std::string dir = (fs::temp_directory_path() / "hla_test_documents").string();
  fs::create_directories(dir);
  const std::string path = dir + "/" + name;
  std::ofstream out(path);
  for (int d = 0; d < 60; d++) {
    std::string text;
    for (int i = 0; i < 3 + (d * 7) % 23; i++) text += char('a' + (d * 3 + i * i) % 26);
    out << "{\"text\": \"" << text << "\"}\n";
  }
  return path;
}

RunConfig text_run(const std::string& source, const std::string& documents) {
  RunConfig run = hla::testing::tiny_mqar_run("");
  run.data.source = source;
  run.data.documents = documents;
  run.data.seq_len = 24;
  run.data.val_fraction = 0.2;
  run.train.steps = 6;
  return run;
}

}  // namespace

TEST_CASE("packed documents: short_conv equals each document alone (outputs, final state, every gradient)") {
  const int64_t B = int64_t(kPackedRows.size()), C = 6, K = 4;
  for (ConvAct act : {ConvAct::SiLU, ConvAct::Identity}) {
    PackedOp op;
    op.tokens = {check::randn64({B, kPackedT, C}, 11)};
    op.shared = {check::randn64({C, 1, K}, 12, 0.5), check::randn64({C}, 13, 0.5)};
    op.token_outputs = 1;
    op.run = [act](const std::vector<Var>& x, const std::vector<Var>& w, const Tensor& doc_start) {
      ShortConvOut o = short_conv(x[0], w[0], w[1], Var(), act, doc_start);
      return std::vector<Var>{o.y, o.final_state};
    };
    check_documents_alone(op, act == ConvAct::SiLU ? "short_conv silu" : "short_conv identity");
  }
  // with documents the initial state must be undefined
  const Var x(check::randn64({B, kPackedT, C}, 11)), w(check::randn64({C, 1, K}, 12));
  CHECK(error_of([&] { short_conv(x, w, Var(), Var(Tensor::zeros({B, C, K - 1}, DType::F64)), ConvAct::SiLU,
                                  packed_doc_start()); })
            .find("initial state must be undefined") != std::string::npos);
}

TEST_CASE("packed documents: token_shift and hgrn equal each document alone (outputs, final state, every gradient)") {
  const int64_t B = int64_t(kPackedRows.size()), D = 5;
  PackedOp shift;
  shift.tokens = {check::randn64({B, kPackedT, D}, 41)};
  shift.token_outputs = 1;  // delta; then the last token
  shift.run = [](const std::vector<Var>& x, const std::vector<Var>&, const Tensor& doc_start) {
    TokenShiftOut o = token_shift(x[0], Var(), doc_start);
    return std::vector<Var>{o.delta, o.last_token};
  };
  check_documents_alone(shift, "token_shift");
  PackedOp rec;
  rec.tokens = {check::randn64({B, kPackedT, D}, 42), check::log_gate({B, kPackedT, D}, 43, 2.0)};
  rec.token_outputs = 1;  // o; then the final state
  rec.run = [](const std::vector<Var>& x, const std::vector<Var>&, const Tensor& doc_start) {
    HgrnOutput o = hgrn(x[0], x[1], Var(), doc_start);
    return std::vector<Var>{o.o, o.final_state};
  };
  check_documents_alone(rec, "hgrn");
  // with documents the initial state must be undefined
  const Var x(check::randn64({B, kPackedT, D}, 41)), state(Tensor::zeros({B, D}, DType::F64));
  CHECK(error_of([&] { token_shift(x, state, packed_doc_start()); }).find("state must be undefined") !=
        std::string::npos);
  CHECK(error_of([&] { hgrn(x, x, state, packed_doc_start()); }).find("initial state must be undefined") !=
        std::string::npos);
}

TEST_CASE("packed documents: the chunk-aligned layout, and gather / scatter between it and the rows") {
  // rows of 8 tokens: documents 3 + 5, and 1 + 2 + 5; chunks of 4
  const Tensor doc_start = document_starts({0, 3, 8, 9, 11, 16}, 2, 8);
  const DocumentChunks layout = document_chunks(doc_start, 4);
  // row 0: [0 1 2 -] [3 4 5 6] [7 - - -];  row 1: [0 - - -] [1 2 - -] [3 4 5 6] [7 - - -]
  CHECK(layout.index.shape() == Shape{2, 16});
  CHECK(layout.index.to_f64_vector() == std::vector<double>{0, 1, 2, -1, 3, 4, 5, 6, 7, -1, -1, -1, -1, -1, -1, -1,
                                                            0, -1, -1, -1, 1, 2, -1, -1, 3, 4, 5, 6, 7, -1, -1, -1});
  CHECK(layout.chunk_reset.to_f64_vector() == std::vector<double>{1, 1, 0, 0, 1, 1, 1, 0});
  // gather then scatter gives the rows back exactly; the gradients are the other move
  const Var x(check::randn64({2, 8, 3}, 31), true);
  const Var placed = gather_tokens(x, layout.index);  // (2, 16, 3)
  CHECK(placed.value().to_f64_vector()[3 * 3] == 0.0);  // padding place (0, 3)
  const Var back = scatter_tokens(placed, layout.index, 8);
  CHECK(max_abs(sub(back.value(), x.value())) == 0.0);
  const Tensor seed = check::randn64({2, 8, 3}, 32);
  run_backward({back}, {seed});
  CHECK(max_abs(sub(x.grad(), seed)) == 0.0);
  CHECK(error_of([&] { document_chunks(doc_start, 0); }).find("chunk size must be >= 1") != std::string::npos);
}

TEST_CASE("packed documents: the delta rule's token recurrence and chunked form equal each document alone") {
  struct Variant {
    const char* name;
    bool gate, vector_gate, erase_vector, write_vector;
  };
  const Variant variants[] = {{"DeltaNet", false, false, false, false},
                              {"GDN", true, false, false, false},
                              {"KDA", true, true, false, false},
                              {"GDN-2", true, true, true, true}};
  const int64_t B = int64_t(kPackedRows.size()), T = kPackedT, H = 2, HV = 4, dk = 8, dv = 6;
  for (const Variant& var : variants) {
    PackedOp op;
    const Shape coef{B, T, HV};
    op.tokens = {check::unit_rows(check::randn64({B, T, H, dk}, 21)),
                 check::unit_rows(check::randn64({B, T, H, dk}, 22)), check::randn64({B, T, HV, dv}, 23),
                 var.gate ? check::log_gate(var.vector_gate ? Shape{B, T, HV, dk} : coef, 24, 2.0) : Tensor(),
                 check::map64(check::randn64(var.erase_vector ? Shape{B, T, HV, dk} : coef, 25), check::sigmoid),
                 var.write_vector ? check::map64(check::randn64({B, T, HV, dv}, 26), check::sigmoid) : Tensor()};
    op.token_outputs = 2;  // o, residual; then the final state
    for (int64_t chunk : {0, 64, 16}) {  // the token recurrence; chunks of 64 (one document of 64); of 16
      op.run = [chunk](const std::vector<Var>& x, const std::vector<Var>&, const Tensor& doc_start) {
        DeltaRuleOutputs o = delta_rule(x[0], x[1], x[2], x[3], x[4], x[5], Var(), {0, chunk}, doc_start);
        return std::vector<Var>{o.o, o.residual, o.final_state};
      };
      check_documents_alone(op, std::string(var.name) + " chunk " + std::to_string(chunk));
    }
  }
}

TEST_CASE("packed documents: decay attention's token recurrence and chunked form equal each document alone") {
  const int64_t B = int64_t(kPackedRows.size()), T = kPackedT, H = 2, HV = 4, dk = 8, dv = 6;
  for (bool vector_gate : {false, true}) {  // RetNet / Mamba-2's scalar gate, GLA / HGRN-2's vector gate
    PackedOp op;
    op.tokens = {check::randn64({B, T, H, dk}, 51, 0.5), check::randn64({B, T, H, dk}, 52, 0.5),
                 check::randn64({B, T, HV, dv}, 53),
                 check::log_gate(vector_gate ? Shape{B, T, HV, dk} : Shape{B, T, HV}, 54, 2.0)};
    op.token_outputs = 1;  // o; then the final state
    for (int64_t chunk : {0, 64, 16}) {  // the token recurrence; chunks of 64 (one document of 64); of 16
      op.run = [chunk](const std::vector<Var>& x, const std::vector<Var>&, const Tensor& doc_start) {
        DecayAttentionOutput o = decay_attention(x[0], x[1], x[2], x[3], Var(), 0.4, chunk, true, doc_start);
        return std::vector<Var>{o.o, o.final_state};
      };
      check_documents_alone(op, std::string(vector_gate ? "vector" : "scalar") + " gate, chunk " +
                                    std::to_string(chunk));
    }
  }
  // with documents the initial state must be undefined
  const Var q(check::randn64({B, T, H, dk}, 51)), v(check::randn64({B, T, HV, dv}, 53));
  const Var g(check::log_gate({B, T, HV}, 54, 2.0)), h0(Tensor::zeros({B, HV, dk, dv}, DType::F64));
  CHECK(error_of([&] { decay_attention(q, q, v, g, h0, 1.0, 0, true, packed_doc_start()); })
            .find("initial state must be undefined") != std::string::npos);
}

TEST_CASE("packed documents: RWKV-6's token recurrence and chunked form equal each document alone") {
  const int64_t B = int64_t(kPackedRows.size()), T = kPackedT, H = 2, dk = 8, dv = 6;
  PackedOp op;
  op.tokens = {check::randn64({B, T, H, dk}, 61, 0.5), check::randn64({B, T, H, dk}, 62, 0.5),
               check::randn64({B, T, H, dv}, 63), check::log_gate({B, T, H, dk}, 64, 2.0)};
  op.shared = {check::randn64({H, dk}, 65)};  // the bonus u: its gradient sums over the documents
  op.token_outputs = 1;  // o; then the final state
  for (int64_t chunk : {0, 64, 16}) {
    op.run = [chunk](const std::vector<Var>& x, const std::vector<Var>& u, const Tensor& doc_start) {
      Rwkv6Output o = rwkv6(x[0], x[1], x[2], x[3], u[0], Var(), 0.4, chunk, true, doc_start);
      return std::vector<Var>{o.o, o.final_state};
    };
    check_documents_alone(op, "rwkv6 chunk " + std::to_string(chunk));
  }
}

TEST_CASE("packed documents: one DocumentStarts value builds each chunk size's layout once, for every op") {
  const Tensor doc_start = packed_doc_start();
  const DocumentStarts documents(doc_start);
  const DocumentStarts copy = documents;  // a layer's copy (MixerIO holds Documents by value)
  const DocumentChunks& layout = documents.chunks(16);
  CHECK(&copy.chunks(16) == &layout);  // shared, not rebuilt
  CHECK(&copy.chunks(64) != &layout);
  CHECK(layout.index.to_f64_vector() == document_chunks(doc_start, 16).index.to_f64_vector());
  CHECK(!DocumentStarts().defined());
}

TEST_CASE("document boundaries: row starts and every EOS (first token, twice in a row, at the end, none)") {
  const int32_t E = kEos;
  const Tensor ids = Tensor::from_i32({E, 1, 2, 3,  //
                                       1, 2, E, E,  //
                                       1, 2, 3, 4},
                                      {3, 4});
  const std::vector<int64_t> cu = document_cu_seqlens(ids, kEos);
  CHECK(cu == std::vector<int64_t>{0, 4, 6, 7, 8, 12});
  CHECK(slice_cu_seqlens(cu, 4, 12) == std::vector<int64_t>{0, 2, 3, 4, 8});
  CHECK(slice_cu_seqlens(cu, 0, 4) == std::vector<int64_t>{0, 4});
  CHECK(error_of([&] { slice_cu_seqlens(cu, 5, 12); }).find("document boundaries") != std::string::npos);
  CHECK(document_cu_seqlens(Tensor::from_i32({1, 2, 3}, {1, 3}), kEos) == std::vector<int64_t>{0, 3});
}

TEST_CASE("document rows: one fragment per row, right-padded with ignored targets, one shape per update") {
  const TrainBatch a = two_windows(), b = three_windows();
  REQUIRE(a.cu_seqlens == std::vector<int64_t>{0, 5, 12, 15, 16, 23, 24});
  REQUIRE(b.cu_seqlens == std::vector<int64_t>{0, 3, 8, 16, 19, 24});
  const std::vector<TrainBatch> rows = document_rows({a, b});
  REQUIRE(rows.size() == 2);
  for (const TrainBatch& r : rows) CHECK(r.ids.shape() == Shape{6, 8});  // a's 6 fragments, the longest 8
  const int32_t E = kEos, I = kIgnoreIndex;
  CHECK(rows[0].ids.to_f64_vector() == Tensor::from_i32({E, 3, 5, 7, 1, 0, 0, 0,    //
                                                         E, 2, 4, 6, 8, 10, 12, 0,  //
                                                         9, 11, 13, 0, 0, 0, 0, 0,  //
                                                         E, 0, 0, 0, 0, 0, 0, 0,    //
                                                         E, 14, 15, 16, 17, 18, 1, 0,  //
                                                         E, 0, 0, 0, 0, 0, 0, 0},
                                                        {6, 8})
                                           .to_f64_vector());
  CHECK(rows[0].targets.to_f64_vector() == Tensor::from_i32({3, 5, 7, 1, I, I, I, I,     //
                                                             2, 4, 6, 8, 10, 12, 9, I,  //
                                                             11, 13, E, I, I, I, I, I,  //
                                                             E, I, I, I, I, I, I, I,    //
                                                             14, 15, 16, 17, I, 1, E, I,  //
                                                             2, I, I, I, I, I, I, I},
                                                            {6, 8})
                                               .to_f64_vector());
  // b's 5 fragments, then a row of padding only
  const std::vector<double> b_targets = rows[1].targets.to_f64_vector();
  CHECK(std::vector<double>(b_targets.end() - 8, b_targets.end()) == std::vector<double>(8, double(I)));
  CHECK(count_valid_targets(rows[1].targets) == b.valid);
  CHECK(count_valid_targets(rows[0].targets) == a.valid);
  CHECK(rows[0].valid == a.valid);
  CHECK(rows[1].cu_seqlens == b.cu_seqlens);
  // (2 * 6 * 8 padded - 24 - 24 real) / 48 real tokens
  CHECK(padding_overhead(rows, {a, b}) == 1.0);
  // plain windows pass through untouched
  const std::vector<TrainBatch> plain = document_rows(without_boundaries({a}));
  CHECK(hla::testing::bit_equal(plain[0].ids, a.ids));
  CHECK(hla::testing::bit_equal(plain[0].targets, a.targets));
  CHECK(error_of([&] { document_rows({a, without_boundaries({b})[0]}); }).find("mixes") != std::string::npos);
}

TEST_CASE("a reset step equals every document alone: pure Gated DeltaNet (short convs), natively") {
  CHECK(make_model(tiny_model("gated_deltanet", "pure"), 11)->takes_documents());
  check_reset_equals_documents_alone("gated_deltanet", "pure");
}

TEST_CASE("a reset step equals every document alone: Gated DeltaNet 3:1 with softmax attention (RoPE), natively") {
  CHECK(make_model(tiny_model("gated_deltanet", "3:1"), 11)->takes_documents());
  check_reset_equals_documents_alone("gated_deltanet", "3:1");
}

TEST_CASE("a reset step equals every document alone: DeltaNet, KDA and GDN-2, natively") {
  for (const std::string type : {"delta_net", "kda", "gdn2"}) {
    CAPTURE(type);
    CHECK(make_model(tiny_model(type, "2:1"), 11)->takes_documents());
    check_reset_in(tiny_model(type, "2:1"), DType::F64, 1e-12);
    // float32: a packed document's chunk holds 64 places (zeros past its end), a document alone's
    // only its own tokens, so Eigen's products sum in another order (up to 7e-5 seen)
    check_reset_in(tiny_model(type, "2:1"), DType::F32, 2e-4);
  }
}

TEST_CASE("a reset step equals every document alone: HGRN and an HGRN:attention hybrid, natively") {
  CHECK(make_model(tiny_model("hgrn", "pure"), 11)->takes_documents());
  check_reset_equals_documents_alone("hgrn", "pure");
  check_reset_equals_documents_alone("hgrn", "3:1");
}

TEST_CASE("a reset step equals every document alone: Mamba-2 (conv tails) and a 3:1 hybrid, natively") {
  CHECK(make_model(tiny_model("mamba2", "3:1"), 11)->takes_documents());
  check_reset_equals_documents_alone("mamba2", "pure");
  check_reset_equals_documents_alone("mamba2", "3:1");
}

TEST_CASE("a reset step equals every document alone: RWKV-6 (token shifts, channel mix), natively") {
  CHECK(make_model(tiny_model("rwkv6", "pure"), 11)->takes_documents());
  check_reset_equals_documents_alone("rwkv6", "pure");
}

TEST_CASE("a reset step equals every document alone: GLA:attention, RetNet (RoPE) and HGRN-2, natively") {
  for (const auto& model : {std::pair<std::string, std::string>{"gla", "2:1"}, {"retnet", "pure"},
                            {"hgrn2", "pure"}}) {
    const std::string& type = model.first;  // a named copy, not a structured binding: CAPTURE's lambda takes it
    const std::string& hybrid = model.second;
    CAPTURE(type);
    CHECK(make_model(tiny_model(type, hybrid), 11)->takes_documents());
    check_reset_equals_documents_alone(type, hybrid);
  }
}

TEST_CASE("a reset step equals every document alone: a Transformer, natively (packed rows, no padding)") {
  CHECK(make_model(tiny_model("transformer", "pure"), 11)->takes_documents());
  CHECK(training_rows(*make_model(tiny_model("transformer", "pure"), 11), {two_windows()})[0].ids.shape() ==
        Shape{2, 12});
  check_reset_equals_documents_alone("transformer", "pure");
}

// One training step of a model that takes packed documents natively: its loss is the documents'
// loss alone, and no row was padded.
static void check_trains_documents_natively(const ModelConfig& config) {
  auto model = make_model(config, 5), alone = make_model(config, 5);
  FixedSource source({three_windows(), three_more_windows()});  // one micro-batch shape, as a loader serves
  std::ostringstream log;
  Trainer trainer(hla::testing::small_options("adamw"), *model, source, nullptr, log);
  const StepMetrics step = trainer.train_step();
  const double alone_loss = loss_of_documents_alone(*alone, {three_windows(), three_more_windows()});
  CHECK(std::abs(step.loss - alone_loss) <= 1e-6 * std::abs(alone_loss));
  CHECK(step.padding == 0.0);  // the packed (3, 8) batches themselves
}

TEST_CASE("a Transformer trains and validates packed documents natively: the documents' loss, no padding") {
  const ModelConfig config = tiny_model("transformer", "pure");
  check_trains_documents_natively(config);
  auto alone = make_model(config, 5), evaluated = make_model(config, 5);
  FixedSource val({two_windows()});
  const double val_loss = evaluate(*evaluated, val, 1, false).loss;
  const double alone_val = loss_of_documents_alone(*alone, {two_windows()});
  CHECK(std::abs(val_loss - alone_val) <= 1e-6 * std::abs(alone_val));
}

TEST_CASE("Gated DeltaNet and its 3:1 attention hybrid train packed documents natively: the documents' loss") {
  for (const char* hybrid : {"pure", "3:1"}) {
    CAPTURE(hybrid);
    check_trains_documents_natively(tiny_model("gated_deltanet", hybrid));
  }
}

TEST_CASE("the trainer's staged step with resets (2 micro-batches, one padded shape) equals the documents alone") {
  const ModelConfig config = tiny_model("mamba2", "3:1");
  PaddedRowsModel model(make_model(config, 5));
  auto alone = make_model(config, 5);
  FixedSource source({two_windows(), three_windows()});
  TrainerOptions options = hla::testing::small_options("adamw");
  std::ostringstream log;
  Trainer trainer(options, model, source, nullptr, log);
  const StepMetrics step = trainer.train_step();
  const double alone_loss = loss_of_documents_alone(*alone, {two_windows(), three_windows()});
  CHECK(std::abs(step.loss - alone_loss) <= 1e-6 * std::abs(alone_loss));
  CHECK(step.tokens == 48);                                    // real tokens only
  CHECK(step.padding == 1.0);                                  // two (6, 8) row batches
  CHECK(step.to_json().at("padding").get<double>() == step.padding);
  CHECK(std::isnan(StepMetrics().padding));
  CHECK(!StepMetrics().to_json().contains("padding"));
}

TEST_CASE("data parallel: each rank's micro-batches keep their rows' document boundaries") {
  const int32_t E = kEos;
  const TrainBatch four_rows = packed_batch({1, E, 2, 3, 4, E, E, 5, 6, 7, 8, 9, 10}, 4, 3);
  for (int world : {1, 2, 4}) {
    const RankShare share = rank_share(4, 1, world);
    for (int rank = 0; rank < world; rank++)
      for (const TrainBatch& b : rank_micro_batches({four_rows}, share, rank))
        CHECK(b.cu_seqlens == document_cu_seqlens(b.ids, kEos));
  }
  // 3 ranks of 2 rows over 2 micro-batches of 3: rank 1 takes a row of each
  const RankShare share = rank_share(3, 2, 3);
  for (int rank = 0; rank < 3; rank++)
    for (const TrainBatch& b : rank_micro_batches({three_windows(), three_more_windows()}, share, rank)) {
      CHECK(b.ids.shape() == Shape{2, 8});
      CHECK(b.cu_seqlens == document_cu_seqlens(b.ids, kEos));
    }
}

TEST_CASE("[data] documents: a text source serves EOS boundaries with reset and none with windows") {
  const std::string path = write_documents_jsonl("docs.jsonl");
  DataSources reset = make_data_sources(text_run(path, "reset").data);
  DataSources windows = make_data_sources(text_run(path, "windows").data);
  CHECK(reset.description.find("documents reset at each EOS (id 256)") != std::string::npos);
  CHECK(windows.description.find("documents reset") == std::string::npos);
  int64_t boundaries = 0;
  for (int i = 0; i < 4; i++) {
    const TrainBatch r = reset.train->next(), w = windows.train->next();
    CHECK(w.cu_seqlens.empty());
    CHECK(hla::testing::bit_equal(r.ids, w.ids));  // the same windows, in the same order
    CHECK(r.cu_seqlens == document_cu_seqlens(r.ids, 256));
    boundaries += int64_t(r.cu_seqlens.size()) - 1 - r.ids.size(0);
  }
  CHECK(boundaries > 4);  // the documents are shorter than the windows
  CHECK(!reset.val->next().cu_seqlens.empty());
}

TEST_CASE("[data] documents: reset training resumes bit-exactly (6 steps = 3 + save + resume + 3)") {
  // Gated DeltaNet 2:1 takes the documents natively (no padding); GLA 2:1 pads them into rows
  // (PaddedRowsModel)
  for (const std::string type : {"gated_deltanet", "gla"}) {
    CAPTURE(type);
    const std::string dir = hla::testing::temp_dir("documents_resume_" + type);
    RunConfig run = text_run(write_documents_jsonl("resume.jsonl"), "reset");
    run.model.fields.model_type = type;
    DataSources probe = make_data_sources(run.data);
    const ModelConfig mc = run.model_config(probe.vocab_size);
    std::ostringstream log;
    auto made = [&](uint64_t seed) -> std::unique_ptr<TrainableModel> {
      if (type == "gla") return std::make_unique<PaddedRowsModel>(make_model(mc, seed));
      return make_model(mc, seed);
    };
    auto straight_model = made(42);
    const TrainerOptions options = trainer_options(run, mc, count_parameters(straight_model->parameters()), false);
    DataSources straight_data = make_data_sources(run.data);
    Trainer straight(options, *straight_model, *straight_data.train, straight_data.val.get(), log);
    std::vector<double> straight_losses, split_losses;
    for (int i = 0; i < 6; i++) straight_losses.push_back(straight.train_step().loss);
    {
      auto model = made(42);
      DataSources data = make_data_sources(run.data);
      Trainer first(options, *model, *data.train, data.val.get(), log);
      for (int i = 0; i < 3; i++) split_losses.push_back(first.train_step().loss);
      first.save(dir);
    }
    auto model = made(7);
    DataSources data = make_data_sources(run.data);
    Trainer second(options, *model, *data.train, data.val.get(), log);
    second.resume(dir);
    for (int i = 0; i < 3; i++) split_losses.push_back(second.train_step().loss);
    CHECK(std::memcmp(split_losses.data(), straight_losses.data(), 6 * sizeof(double)) == 0);
    CHECK(hla::testing::params_bit_equal(*straight_model, *model));
    CHECK(std::isfinite(straight.mean_padding()));
    CHECK((straight.mean_padding() > 0) == (type == "gla"));
    fs::remove_all(dir);
  }
}

TEST_CASE("[data] documents: a bad value or reset on MQAR fails naming the field") {
  RunConfig run = hla::testing::tiny_mqar_run("out");
  run.data.documents = "Reset";
  CHECK(error_of([&] { run.validate(); }) == "[data] documents: 'Reset' is not a document mode (windows | reset)");
  run.data.documents = "reset";
  CHECK(error_of([&] { run.validate(); }).find("[data] documents = reset needs documents") == 0);
  CHECK(error_of([&] { run.validate(); }).find("[data] source mqar has none") != std::string::npos);
  RunConfig from_file;
  CHECK(error_of([&] { from_file.apply_run_file(parse_run_file("[data]\ndocuments = 3\n", "run.toml"), "run.toml"); })
            .find("run.toml: [data] documents") == 0);
}
