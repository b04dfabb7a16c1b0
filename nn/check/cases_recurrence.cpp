// Check cases (nn/check/registry.h) of the recurrence ops: hgrn, decay_attention, rwkv6 and
// delta_rule. Every case checks the outputs, the final state and every input's gradient,
// initial state included.
// grad: B = 2, several (and grouped) heads, tiny widths, the token recurrence and the chunked
//   form with a last chunk of one token; packed documents (doc_start) for every op, the chunked
//   forms on the documents' chunk layout.
// gpu: B > 1, several heads, grouped value heads, lengths that are not a multiple of the
//   16-token tiles or the 64-token checkpoints, widths that do not fill a block of state
//   columns, every key-width class (dk <= 64, 128, 256), the chunked tensor-core kernels'
//   (dk, dv) templates, and one long sequence (T = 4096) per op.
// perf: every op at each bench shape (registry.h kBenchShapes: B4 T4096 H16 D128, B8 T2048
//   H16 D64, B8 T2048 H4 D256; dk = dv = D), bf16, each beside its fla anchor, with targets.md's
//   figure where it has one (hgrn on x: (B, T, H * D), so the last two shapes are one row).
//   TFLOP/s counts the state arithmetic,
//   2 dk dv FLOPs per token and head for each pass over the state (decay, write, read: 3
//   passes; the delta rule's erase read: a 4th); fwd+bwd counts 3x the forward. GB/s counts
//   each input read and each output written once (fwd+bwd: inputs, do, and the gradients).
// Inputs in realistic ranges: log gates = logsigmoid(N(shift, 1)) (decay per step in (0, 1)),
// beta and the GDN-2 gates = sigmoid(N(0, 1)), delta-rule keys and queries of norm about 1.
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "nn/check/registry.h"
#include "nn/ops/decay_attention.h"
#include "nn/ops/delta_rule.h"
#include "nn/ops/hgrn.h"
#include "nn/ops/rwkv6.h"
#ifdef HLA_CUDA
#include "cuda/decay_attention.h"
#include "cuda/delta_rule.h"
#include "cuda/rwkv6.h"
#endif

namespace hla::check {
namespace {

using Vars = std::vector<Var>;

// " B2 T150 H2/4 dk128 dv96"
std::string dims(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t dk, int64_t dv) {
  return " B" + std::to_string(B) + " T" + std::to_string(T) + " H" + std::to_string(H) + "/" + std::to_string(HV) +
         " dk" + std::to_string(dk) + " dv" + std::to_string(dv);
}

double unit_std(int64_t width) { return 1.0 / std::sqrt(double(width)); }

// The work units of a perf case at a bench shape: FLOPs of one pass over every state, and the
// bytes of one (B, T, H, D) bf16 tensor.
struct PerfUnits {
  double state_pass, row_bytes;
};
PerfUnits perf_units(const BenchShape& s) {
  const double token_heads = double(s.B) * s.T * s.H;
  return {2.0 * s.D * s.D * token_heads, 2.0 * token_heads * s.D};
}

// Packed documents for a perf row at shape s: documents of kPerfDocument tokens, each row's last
// shorter (T 4096: eight and one of 96, a chunk layout of 4224 places a row); and the row's dims.
constexpr int64_t kPerfDocument = 500;
std::vector<int64_t> perf_documents(const BenchShape& s) {
  std::vector<int64_t> lengths(s.T / kPerfDocument, kPerfDocument);
  if (s.T % kPerfDocument) lengths.push_back(s.T % kPerfDocument);
  return lengths;
}
std::vector<std::pair<const char*, int64_t>> perf_documents_dims(const BenchShape& s) {
  std::vector<std::pair<const char*, int64_t>> d = bench_dims(s);
  d.push_back({"doc", kPerfDocument});
  return d;
}

// targets.md's figures at kBenchShapes[i] of an anchor that has them at the first shape only.
AnchorMs first_shape_only(size_t i, AnchorMs first) { return i == 0 ? first : AnchorMs{}; }

// ---- hgrn ----

Vars hgrn_op(const Vars& x) {
  HgrnOutput out = hgrn(x[0], x[1], x[2]);
  return {out.o, out.final_state};
}

void add_hgrn_cases() {
  // Gates g = logsigmoid(z) in about [-3, 0), nonzero initial state, both outputs weighted.
  add_case(grad_case("hgrn", "hgrn", 30,
                     [](uint64_t s) {
                       return Inputs{{"x", randn64({2, 7, 5}, s + 1)}, {"g", log_gate({2, 7, 5}, s + 3, 0.0)},
                                     {"initial_state", randn64({2, 5}, s + 2)}};
                     },
                     hgrn_op));
  // packed documents of 2, 1 and 3 tokens: h restarts from 0 at each
  auto documents_op = [](std::vector<int64_t> documents) {
    return [documents](const Vars& x) {
      HgrnOutput out = hgrn(x[0], x[1], Var(), packed_doc_start(x[0].size(0), documents).to(x[0].value().device()));
      return Vars{out.o, out.final_state};
    };
  };
  add_case(grad_case("hgrn", "hgrn documents", 30,
                     [](uint64_t s) {
                       return Inputs{{"x", randn64({2, 6, 5}, s + 1)}, {"g", log_gate({2, 6, 5}, s + 3, 0.0)}};
                     },
                     documents_op({2, 1, 3})));
  for (const auto& [B, T, D] : {std::tuple<int64_t, int64_t, int64_t>{2, 300, 200}, {1, 4096, 256}})
    add_case(gpu_case("hgrn", "hgrn " + dims_label({{"B", B}, {"T", T}, {"D", D}}), named_kernel("recurrent"),
                      [B = B, T = T, D = D](uint64_t s) {
                        return Inputs{{"x", randn64({B, T, D}, s + 1)}, {"g", log_gate({B, T, D}, s + 2, 2.0)},
                                      {"initial_state", randn64({B, D}, s + 3)}};
                      },
                      hgrn_op));
  // documents of 37, 64 and 90 tokens: starts inside the kernels' 16-token loads
  add_case(gpu_case("hgrn", "hgrn documents " + dims_label({{"B", 2}, {"T", 191}, {"D", 200}}),
                    named_kernel("recurrent"),
                    [](uint64_t s) {
                      return Inputs{{"x", randn64({2, 191, 200}, s + 1)}, {"g", log_gate({2, 191, 200}, s + 2, 2.0)}};
                    },
                    documents_op({37, 64, 90})));

  // perf: x and g (B, T, H * D) at each bench shape; one row per distinct (B, T, H * D).
  std::vector<Shape> added;
  for (size_t i = 0; i < kBenchShapes.size(); i++) {
    const BenchShape& b = kBenchShapes[i];
    const Shape s{b.B, b.T, b.H * b.D};
    if (std::find(added.begin(), added.end(), s) != added.end()) continue;
    added.push_back(s);
    const double elements = double(shape_numel(s)), tensor = 2.0 * elements;
    const AnchorMs a = first_shape_only(i, {1.773, 3.875});
    add_case(perf_case("hgrn", "hgrn " + dims_label({{"B", b.B}, {"T", b.T}, {"D", b.H * b.D}}),
                       named_kernel("recurrent"),
                       [s, D = b.D](uint64_t) {
                         return Inputs{{"x", perf_input(PerfPool::Normal, 0, s, unit_std(D))},
                                       {"g", perf_input(PerfPool::LogGate, 0, s)}};
                       },
                       [](const Vars& x) {
                         HgrnOutput out = hgrn(x[0], x[1]);
                         return Vars{out.o, out.final_state};
                       },
                       {3 * elements, 9 * elements, 3 * tensor, 8 * tensor, a.fwd, a.fwd_bwd,
                        "fla fused_recurrent_hgrn", {{"B", b.B}, {"T", b.T}, {"D", b.H * b.D}}}));
  }
}

// ---- decay_attention ----

enum class DecayGate { Scalar, Vector, Gla, RetNet, Mamba2 };

struct DecayCase {
  int64_t B, T, H, HV, dk, dv;
  DecayGate gate;
  double gate_shift;    // Scalar, Vector: g = logsigmoid(N(shift, 1)); Gla: logsigmoid(N(shift, 1)) / 16
  double q_std, k_std;
  double h0_std;        // 0: no initial state
  double scale;
  int64_t chunk_size;
  std::vector<int64_t> documents = {};  // packed documents: each row cut into these lengths (sum T), or none
};

// Packed documents `documents` (each row cut alike) on x's device, with their host copy (the chunk
// layouts are built without a copy back from the device), or none.
DocumentStarts documents_on(const Var& x, const std::vector<int64_t>& documents) {
  if (documents.empty()) return {};
  const Tensor host = packed_doc_start(x.size(0), documents);
  return DocumentStarts(host.to(x.value().device()), host);
}

// g: (B, T, HV) or (B, T, HV, dk) log gates. The scalar-gate mixers draw theirs per value head j
// (mixers.md 7, 10): RetNet g = ln(1 - 2^(-5 - j)), constant over time; Mamba-2 g = Delta_t A_j,
// Delta = softplus(N(-3, 1)) (~0.05), A_j = -(1 .. 16) over the heads. GLA's vector gate is
// logsigmoid(x) / 16 (its gate_logit_normalizer, mixers.md 8).
Tensor decay_gates(const DecayCase& c, uint64_t seed) {
  if (c.gate == DecayGate::Vector) return log_gate({c.B, c.T, c.HV, c.dk}, seed, c.gate_shift);
  if (c.gate == DecayGate::Gla)
    return map64(log_gate({c.B, c.T, c.HV, c.dk}, seed, c.gate_shift), [](double x) { return x / 16.0; });
  if (c.gate == DecayGate::Scalar) return log_gate({c.B, c.T, c.HV}, seed, c.gate_shift);
  Tensor g = randn64({c.B, c.T, c.HV}, seed, 1.0, -3.0);
  double* p = g.data<double>();
  for (int64_t i = 0; i < g.numel(); i++) {
    const int64_t j = i % c.HV;
    if (c.gate == DecayGate::RetNet) {
      p[i] = std::log(1.0 - std::exp2(-5.0 - double(j)));
    } else {
      const double delta = std::log1p(std::exp(p[i]));  // softplus
      const double A = -(1.0 + 15.0 * double(j) / double(std::max<int64_t>(c.HV - 1, 1)));
      p[i] = delta * A;
    }
  }
  return g;
}

MakeInputs decay_inputs(const DecayCase& c) {
  return [c](uint64_t seed) {
    Inputs in = {{"q", randn64({c.B, c.T, c.H, c.dk}, seed + 1, c.q_std)},
                 {"k", randn64({c.B, c.T, c.H, c.dk}, seed + 2, c.k_std)},
                 {"v", randn64({c.B, c.T, c.HV, c.dv}, seed + 3)},
                 {"g", decay_gates(c, seed + 4)}};
    if (c.h0_std > 0) in.push_back({"initial_state", randn64({c.B, c.HV, c.dk, c.dv}, seed + 5, c.h0_std)});
    return in;
  };
}

// final_state false: o is the only output (the final state's gradient is zero). keep false: the
// GPU backward replays the chunk-start states instead of reading the forward's ([train] delta_rule_keep).
// documents: as DecayCase's.
OpFn decay_op(double scale, int64_t chunk_size, bool final_state = true, bool keep = true,
              std::vector<int64_t> documents = {}) {
  return [scale, chunk_size, final_state, keep, documents](const Vars& x) {
    DecayAttentionOutput out = decay_attention(x[0], x[1], x[2], x[3], x.size() > 4 ? x[4] : Var(), scale, chunk_size,
                                               keep, documents_on(x[0], documents));
    return final_state ? Vars{out.o, out.final_state} : Vars{out.o};
  };
}

KernelLabel decay_kernel(int64_t dk, int64_t dv, bool vector_gate) {
#ifdef HLA_CUDA
  return [=](DType dtype) { return std::string(cuda::decay_attention_kernel(dk, dv, vector_gate, dtype)); };
#else
  (void)dk, (void)dv, (void)vector_gate;
  return named_kernel("recurrent");
#endif
}

#ifdef HLA_CUDA
// The chunk size of the layout on which the GPU's chunked kernels take packed documents, or 0.
int64_t document_chunk(const DecayAttentionDims& d, DType dtype) {
  return cuda::decay_attention_document_chunk(d, dtype);
}
int64_t document_chunk(const Rwkv6Dims& d, DType dtype) { return cuda::rwkv6_document_chunk(d, dtype); }
int64_t document_chunk(const DeltaRuleDims& d, DType dtype) { return cuda::delta_rule_document_chunk(d, dtype); }
#endif

// The kernels packed documents take at dims d (DecayAttentionDims, Rwkv6Dims or DeltaRuleDims):
// the chunked ones on the documents' chunk layout, or the recurrent ones.
template <class Dims>
KernelLabel documents_kernel(const Dims& d) {
#ifdef HLA_CUDA
  return [d](DType dtype) {
    return std::string(document_chunk(d, dtype) > 0 ? "chunked, document layout" : "recurrent");
  };
#else
  (void)d;
  return named_kernel("recurrent");
#endif
}

void add_decay_cases() {
  // B = 2, T = 5, H = 2 q/k heads, HV = 4 value heads (groups of 2), dk = 3, dv = 2, nonzero
  // initial state; the chunked runs use C = 2, so the last chunk holds one token.
  for (int64_t chunk : {0, 2}) {
    for (DecayGate gate : {DecayGate::Scalar, DecayGate::Vector}) {
      const DecayCase c{2, 5, 2, 4, 3, 2, gate, 0.0, 1.0, 1.0, 1.0, 0.6, chunk};
      add_case(grad_case("decay_attention",
                         std::string("decay_attention ") + (gate == DecayGate::Vector ? "vector" : "scalar") + " gate" +
                             (chunk > 0 ? " chunked" : ""),
                         10, decay_inputs(c), decay_op(c.scale, c.chunk_size)));
    }
  }
  // packed documents of 2, 1 and 3 tokens (no initial state): the state restarts at each; the
  // chunked form on the chunk layout (C = 2: documents of 2, 1 + padding, 3 + padding)
  for (int64_t chunk : {0, 2})
    for (DecayGate gate : {DecayGate::Scalar, DecayGate::Vector}) {
      const DecayCase c{2, 6, 2, 4, 3, 2, gate, 0.0, 1.0, 1.0, 0.0, 0.6, chunk, {2, 1, 3}};
      add_case(grad_case("decay_attention",
                         std::string("decay_attention ") + (gate == DecayGate::Vector ? "vector" : "scalar") +
                             " gate documents" + (chunk > 0 ? " chunked" : ""),
                         10, decay_inputs(c), decay_op(c.scale, chunk, true, true, c.documents)));
    }

  struct GpuRow {
    int64_t B, T, H, HV, dk, dv;
    bool vector_gate, initial_state;
    double gate_shift;
  };
  for (const GpuRow& r : {GpuRow{2, 150, 2, 4, 64, 48, false, true, 0.0},    // grouped value heads
                          GpuRow{2, 100, 3, 3, 40, 200, true, false, 0.0},   // dv over two column blocks, no h0
                          GpuRow{2, 70, 1, 2, 128, 64, true, true, 1.0},
                          GpuRow{1, 4096, 1, 1, 64, 64, false, true, 3.0}}) {  // long
    const DecayCase c{r.B, r.T, r.H, r.HV, r.dk, r.dv, r.vector_gate ? DecayGate::Vector : DecayGate::Scalar,
                      r.gate_shift, 1.0, unit_std(r.dk), r.initial_state ? 0.5 : 0.0, unit_std(r.dk), 0};
    add_case(gpu_case("decay_attention",
                      std::string("decay_attention ") + (r.vector_gate ? "vector" : "scalar") +
                          dims(r.B, r.T, r.H, r.HV, r.dk, r.dv),
                      decay_kernel(r.dk, r.dv, r.vector_gate), decay_inputs(c), decay_op(c.scale, 0)));
  }
  // packed documents: in bf16 where the chunked kernels run, on the documents' chunk layout (the
  // scans resetting at chunk_reset; the layout's padding places zero); otherwise, fp32 included,
  // the recurrent kernels (the state zeroed at each start, the reverse sweep's dS too, the gate
  // scan restarting): documents shorter than a 64-token chunk / checkpoint segment, exactly one,
  // crossing two, one of a single token, starts on segment boundaries; both gates, grouped value
  // heads, every (dk, dv) in {64, 128}, dk 256 and unsupported widths (recurrent), a long row of
  // 4096 tokens, and one row with the backward replaying the chunk-start states.
  struct DocumentsRow {
    bool vector_gate;
    int64_t T, H, HV, dk, dv;
    std::vector<int64_t> documents;
    bool keep = true;
  };
  for (const DocumentsRow& r : {DocumentsRow{false, 191, 2, 4, 64, 48, {37, 64, 90}},
                                DocumentsRow{true, 191, 2, 2, 128, 64, {90, 37, 64}},
                                DocumentsRow{false, 191, 1, 2, 128, 128, {64, 64, 1, 62}},
                                DocumentsRow{true, 300, 2, 4, 64, 64, {37, 64, 1, 70, 128}},
                                DocumentsRow{true, 130, 1, 1, 256, 96, {64, 66}},
                                DocumentsRow{false, 191, 2, 4, 64, 64, {37, 64, 90}},
                                DocumentsRow{true, 191, 2, 2, 128, 128, {37, 64, 90}},
                                DocumentsRow{false, 191, 2, 2, 64, 128, {90, 37, 64}, false},
                                DocumentsRow{false, 300, 2, 2, 128, 64, {37, 64, 1, 70, 128}},
                                DocumentsRow{true, 191, 1, 2, 64, 128, {1, 100, 90}},
                                DocumentsRow{true, 4096, 2, 4, 128, 128, {1000, 37, 64, 1, 2994}}}) {
    const DecayCase c{2, r.T, r.H, r.HV, r.dk, r.dv, r.vector_gate ? DecayGate::Vector : DecayGate::Scalar, 1.0, 1.0,
                      unit_std(r.dk), 0.0, unit_std(r.dk), 0, r.documents};
    const DecayAttentionDims d{2, r.T, r.H, r.HV, r.dk, r.dv, r.vector_gate, 1.0, 0, DType::F32};
    add_case(gpu_case("decay_attention",
                      std::string("decay_attention documents ") + (r.vector_gate ? "vector" : "scalar") +
                          (r.keep ? "" : " replay") + dims(2, r.T, r.H, r.HV, r.dk, r.dv),
                      documents_kernel(d), decay_inputs(c), decay_op(c.scale, 0, true, r.keep, r.documents)));
  }

  // Cases that take the chunked tensor-core kernels (cuda/decay_attention_chunk.cu, forward and
  // backward) in bf16: the two scalar-gate mixers' gates, a plain scalar log gate
  // logsigmoid(N(0, 1)) (a decay of ~0.45 a step: exp(G) reaches ~e^-50 inside a chunk), grouped
  // value heads (H 2 / HV 4, H 1 / HV 4) and ungrouped ones, every (dk, dv) template class,
  // partial last chunks (T = 100, 130, 150; 193 leaves one token) and one exact chunk (T = 64),
  // with and without an initial state, and a long sequence (64 chunks). The vector-gate rows draw
  // the strong gate logsigmoid(N(0, 1)) per channel (in-chunk cumulative gates reach ~-50), GLA's
  // logsigmoid(N(0, 1)) / 16, and logsigmoid(N(-3, 1)) (~-3 a step: G passes -88 within ~30
  // tokens, where a factorisation q e^G . k e^-G overflows fp32). The f32 rows run the
  // recurrent kernel (fp32 storage never takes the chunked path); under RetNet's constant near-1
  // decays they check that its decay keeps full fp32 precision over a memory of hundreds of
  // tokens (cuda/recurrence.cuh, decay()). The dk = dv = 256 rows (fla's 340M layout) take the
  // chunked forward and backward too (the backward's chunk-local pass in two 128-channel key
  // blocks): both gates, T = 70, 130, 193 (partial last chunks), 64 and 1000 (16 chunks), grouped
  // value heads (H 2 / HV 4), with and without h0 and the final state's gradient; so do
  // (128, 256) and (256, 128) for both gates. Every row with the forward keeping its chunk-start
  // states for the backward (the default), the last four with the backward replaying them.
  struct ChunkRow {
    int64_t B, T, H, HV, dk, dv;
    DecayGate gate;
    bool initial_state;
    double gate_shift = 0.0;
    bool final_state = true;
    bool keep = true;
  };
  for (const ChunkRow& r : {
           ChunkRow{2, 100, 2, 4, 64, 64, DecayGate::RetNet, true},
           ChunkRow{2, 130, 2, 4, 64, 64, DecayGate::Mamba2, true},
           ChunkRow{2, 100, 2, 4, 128, 128, DecayGate::Mamba2, true},
           ChunkRow{2, 130, 2, 4, 128, 128, DecayGate::RetNet, true},
           ChunkRow{2, 100, 2, 4, 64, 128, DecayGate::RetNet, true},
           ChunkRow{2, 130, 2, 4, 64, 128, DecayGate::Mamba2, false},
           ChunkRow{3, 64, 3, 3, 128, 64, DecayGate::Mamba2, true},
           ChunkRow{2, 193, 2, 2, 128, 64, DecayGate::RetNet, false},
           ChunkRow{2, 150, 1, 4, 64, 64, DecayGate::Scalar, true},
           ChunkRow{2, 4096, 2, 4, 128, 128, DecayGate::RetNet, true},
           ChunkRow{2, 4096, 2, 4, 128, 128, DecayGate::Mamba2, true},
           ChunkRow{2, 100, 2, 4, 64, 64, DecayGate::Vector, true},
           ChunkRow{2, 130, 2, 4, 128, 128, DecayGate::Gla, true},
           ChunkRow{2, 193, 2, 2, 128, 64, DecayGate::Vector, false},
           ChunkRow{3, 64, 3, 3, 64, 128, DecayGate::Gla, true},
           ChunkRow{2, 150, 1, 4, 64, 64, DecayGate::Gla, false},
           ChunkRow{2, 4096, 2, 4, 128, 128, DecayGate::Gla, true},
           ChunkRow{2, 4096, 2, 4, 128, 128, DecayGate::Vector, true},
           ChunkRow{2, 130, 2, 4, 128, 64, DecayGate::Vector, true, -3.0},
           ChunkRow{1, 70, 2, 2, 256, 256, DecayGate::RetNet, true},
           ChunkRow{1, 193, 1, 2, 256, 256, DecayGate::Mamba2, false, 0.0, false},
           ChunkRow{1, 64, 2, 2, 256, 256, DecayGate::Scalar, false},
           ChunkRow{1, 70, 2, 2, 256, 256, DecayGate::Gla, false, 0.0, false},
           ChunkRow{1, 193, 2, 2, 256, 256, DecayGate::Vector, true},
           ChunkRow{1, 64, 1, 2, 256, 256, DecayGate::Vector, true, -3.0, false},
           ChunkRow{1, 70, 2, 2, 128, 256, DecayGate::Gla, true},
           ChunkRow{1, 193, 1, 2, 256, 128, DecayGate::RetNet, true},
           ChunkRow{2, 130, 2, 4, 256, 256, DecayGate::Mamba2, true},
           ChunkRow{1, 1000, 1, 1, 256, 256, DecayGate::Gla, true},
           ChunkRow{1, 100, 1, 2, 128, 256, DecayGate::RetNet, false, 0.0, false},
           ChunkRow{1, 130, 2, 2, 256, 128, DecayGate::Vector, false},
           ChunkRow{2, 130, 2, 4, 128, 128, DecayGate::Mamba2, true, 0.0, true, false},
           ChunkRow{2, 193, 2, 2, 128, 64, DecayGate::Gla, false, 0.0, true, false},
           ChunkRow{1, 70, 2, 2, 256, 256, DecayGate::Vector, true, -3.0, false, false},
           ChunkRow{2, 4096, 2, 4, 64, 64, DecayGate::RetNet, true, 0.0, true, false},
       }) {
    // Mamba-2 reads unit-norm queries at scale 1; RetNet (and the plain gate) scale 1 / sqrt(dk).
    const bool mamba2 = r.gate == DecayGate::Mamba2;
    const DecayCase c{r.B, r.T, r.H, r.HV, r.dk, r.dv, r.gate, r.gate_shift, mamba2 ? unit_std(r.dk) : 1.0, unit_std(r.dk),
                      r.initial_state ? 0.5 : 0.0, mamba2 ? 1.0 : unit_std(r.dk), 0};
    const bool vector_gate = r.gate == DecayGate::Vector || r.gate == DecayGate::Gla;
    const char* gate = mamba2                         ? "mamba2"
                       : r.gate == DecayGate::RetNet  ? "retnet"
                       : r.gate == DecayGate::Scalar  ? "scalar"
                       : r.gate == DecayGate::Vector  ? "vector"
                                                      : "gla";
    const std::string name = std::string("decay chunk ") + gate + (r.keep ? "" : " replay") +
                             dims(r.B, r.T, r.H, r.HV, r.dk, r.dv) + (r.final_state ? "" : " no grad_ht");
    add_case(gpu_case("decay_attention", name, decay_kernel(r.dk, r.dv, vector_gate), decay_inputs(c),
                      decay_op(c.scale, 0, r.final_state, r.keep)));
  }

  // Perf at each bench shape, dk = dv = D, beside fla's chunk kernel of the same gate:
  // chunk_simple_gla (scalar) and chunk_gla (vector), but chunk_retention for the scalar gate at
  // B8 T2048 H16 D64, where targets.md has a same-run figure for it (2026-12-01, 0.323 / 1.141
  // ms). targets.md: chunk_simple_gla and chunk_gla at the anchor shape, chunk_gla at B8 T2048
  // H16 D64 (0.552 / 2.706 ms). Each also with the backward replaying the chunk-start states
  // ("vector replay", [train] delta_rule_keep = false), and at the anchor shape with packed
  // documents (perf_documents, on the chunk layout: gathers and scatters included; the anchor is the
  // same fla op on those documents through cu_seqlens, measured only: targets.md has no figure).
  struct GateAnchors {
    bool vector_gate;
    std::vector<std::pair<const char*, AnchorMs>> per_shape;  // aligned with kBenchShapes
  };
  for (const GateAnchors& g :
       {GateAnchors{false, {{"fla chunk_simple_gla", {0.432, 2.094}}, {"fla chunk_retention", {0.323, 1.141}},
                            {"fla chunk_simple_gla", {}}}},
        GateAnchors{true, {{"fla chunk_gla", {0.755, 3.246}}, {"fla chunk_gla", {0.552, 2.706}}, {"fla chunk_gla", {}}}}})
    for (size_t i = 0; i < kBenchShapes.size(); i++)
      for (const auto& [keep, documents] : {std::pair{true, false}, {false, false}, {true, true}}) {
        if (documents && i > 0) continue;
        const BenchShape r = kBenchShapes[i];
        const auto& [anchor, shape_ms] = g.per_shape[i];
        const AnchorMs ms = documents ? AnchorMs{} : shape_ms;
        const PerfUnits u = perf_units(r);
        const double gate_bytes = g.vector_gate ? u.row_bytes : u.row_bytes / r.D;
        const DecayAttentionDims d{r.B, r.T, r.H, r.H, r.D, r.D, g.vector_gate, 1.0, 0, DType::F32};
        const auto row_dims = documents ? perf_documents_dims(r) : bench_dims(r);
        add_case(perf_case(
            "decay_attention", std::string("decay_attention ") + (g.vector_gate ? "vector " : "scalar ") +
                                   (keep ? "" : "replay ") + dims_label(row_dims),
            documents ? documents_kernel(d) : decay_kernel(r.D, r.D, g.vector_gate),
            [r, vector_gate = g.vector_gate](uint64_t) {
              const Shape s{r.B, r.T, r.H, r.D};
              return Inputs{{"q", perf_input(PerfPool::Normal, 0, s, unit_std(r.D))},
                            {"k", perf_input(PerfPool::Normal, 1, s, unit_std(r.D))},
                            {"v", perf_input(PerfPool::Normal, 2, s, unit_std(r.D))},
                            {"g", perf_input(PerfPool::LogGate, 0, vector_gate ? s : Shape{r.B, r.T, r.H})}};
            },
            decay_op(unit_std(r.D), 0, true, keep, documents ? perf_documents(r) : std::vector<int64_t>{}),
            {3 * u.state_pass, 9 * u.state_pass, 4 * u.row_bytes + gate_bytes, 8 * u.row_bytes + 2 * gate_bytes, ms.fwd,
             ms.fwd_bwd, anchor, row_dims}));
      }
}

// ---- rwkv6 ----

struct Rwkv6Case {
  int64_t B, T, H, dk, dv;
  double rk_std, gate_shift, h0_std, scale;  // h0_std 0: no initial state
  int64_t chunk_size;
  std::vector<int64_t> documents = {};  // packed documents: each row cut into these lengths (sum T), or none
};

MakeInputs rwkv6_inputs(const Rwkv6Case& c) {
  return [c](uint64_t seed) {
    Inputs in{{"r", randn64({c.B, c.T, c.H, c.dk}, seed + 1, c.rk_std)},
              {"k", randn64({c.B, c.T, c.H, c.dk}, seed + 2, c.rk_std)},
              {"v", randn64({c.B, c.T, c.H, c.dv}, seed + 3)},
              {"w", log_gate({c.B, c.T, c.H, c.dk}, seed + 4, c.gate_shift)},
              {"u", randn64({c.H, c.dk}, seed + 5)}};
    if (c.h0_std > 0) in.push_back({"initial_state", randn64({c.B, c.H, c.dk, c.dv}, seed + 6, c.h0_std)});
    return in;
  };
}

// final_state false: o is the only output, so the final state's gradient is zero. keep,
// documents: as decay_op's.
OpFn rwkv6_op(double scale, int64_t chunk_size, bool final_state = true, bool keep = true,
              std::vector<int64_t> documents = {}) {
  return [scale, chunk_size, final_state, keep, documents](const Vars& x) {
    Rwkv6Output out = rwkv6(x[0], x[1], x[2], x[3], x[4], x.size() > 5 ? x[5] : Var(), scale, chunk_size, keep,
                            documents_on(x[0], documents));
    return final_state ? Vars{out.o, out.final_state} : Vars{out.o};
  };
}

KernelLabel rwkv6_kernel(int64_t dk, int64_t dv) {
#ifdef HLA_CUDA
  return [=](DType dtype) { return std::string(cuda::rwkv6_kernel(dk, dv, dtype)); };
#else
  (void)dk, (void)dv;
  return named_kernel("recurrent");
#endif
}

void add_rwkv6_cases() {
  // B = 2, T = 5, H = 2, dk = 3, dv = 2, nonzero initial state; the chunked run uses C = 2, so
  // the last chunk holds one token.
  for (int64_t chunk : {0, 2}) {
    const Rwkv6Case c{2, 5, 2, 3, 2, 1.0, 0.0, 1.0, 0.6, chunk};
    add_case(grad_case("rwkv6", chunk > 0 ? "rwkv6 chunked" : "rwkv6", 20, rwkv6_inputs(c), rwkv6_op(c.scale, chunk)));
  }
  // packed documents of 2, 1 and 3 tokens (no initial state), the recurrence and the chunk layout
  for (int64_t chunk : {0, 2}) {
    const Rwkv6Case c{2, 6, 2, 3, 2, 1.0, 0.0, 0.0, 0.6, chunk, {2, 1, 3}};
    add_case(grad_case("rwkv6", chunk > 0 ? "rwkv6 documents chunked" : "rwkv6 documents", 20, rwkv6_inputs(c),
                       rwkv6_op(c.scale, chunk, true, true, c.documents)));
  }
  // bf16 rows with dk, dv in {64, 128} or {128, 256} take the chunked forward and backward
  // (cuda/decay_attention_chunk.cu): every (dk, dv) class, partial last chunks (T = 130, 100, 193),
  // long sequences (64 chunks; 16 at dk = dv = 256), and the gate logsigmoid(N(-3, 1)) (~-3 a
  // step: the exclusive in-chunk gate passes -88 within ~30 tokens); (96, 40) and fp32 run the
  // recurrent kernel.
  for (const auto& [B, T, H, dk, dv, gate_shift] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, double>{
                                                        2, 130, 3, 64, 64, 0.0},
                                                    {2, 50, 2, 96, 40, 1.0},
                                                    {1, 4096, 1, 64, 64, 3.0},  // long
                                                    {2, 100, 2, 128, 128, 0.0},
                                                    {2, 193, 2, 64, 128, -3.0},
                                                    {3, 64, 2, 128, 64, 1.0},
                                                    {2, 4096, 2, 128, 128, 0.0},  // long
                                                    {1, 70, 2, 128, 256, 0.0},
                                                    {1, 193, 2, 256, 128, 1.0},
                                                    {2, 130, 2, 256, 256, -3.0},
                                                    {1, 1000, 1, 256, 256, 0.0}}) {  // 16 chunks
    const Rwkv6Case c{B, T, H, dk, dv, unit_std(dk), gate_shift, 0.5, 1.0, 0};
    add_case(gpu_case("rwkv6", "rwkv6" + dims(B, T, H, H, dk, dv), rwkv6_kernel(dk, dv), rwkv6_inputs(c),
                      rwkv6_op(1.0, 0)));
  }
  // packed documents, as decay attention's document rows: in bf16 where the chunked kernels run,
  // on the documents' chunk layout; otherwise (fp32, dk 256 with dv 96) the recurrent kernels,
  // the gate scan restarting with RWKV-6's one-token lag (dw_t = 0 and Y_{t-1} = 0 at a start);
  // every (dk, dv) in {64, 128}, a long row, one with the backward replaying the states
  struct DocumentsRow {
    int64_t T, H, dk, dv;
    std::vector<int64_t> documents;
    bool keep = true;
  };
  for (const DocumentsRow& r : {DocumentsRow{191, 2, 64, 64, {37, 64, 90}},
                                DocumentsRow{191, 3, 128, 64, {64, 64, 1, 62}},
                                DocumentsRow{300, 2, 64, 128, {37, 64, 1, 70, 128}},
                                DocumentsRow{130, 1, 256, 96, {64, 66}},
                                DocumentsRow{191, 2, 128, 128, {37, 64, 90}},
                                DocumentsRow{191, 2, 64, 64, {90, 37, 64}, false},
                                DocumentsRow{4096, 2, 128, 128, {1000, 37, 64, 1, 2994}}}) {
    const Rwkv6Case c{2, r.T, r.H, r.dk, r.dv, unit_std(r.dk), 1.0, 0.0, 1.0, 0, r.documents};
    const Rwkv6Dims d{2, r.T, r.H, r.dk, r.dv, 1.0, 0, DType::F32};
    add_case(gpu_case("rwkv6",
                      std::string("rwkv6 documents") + (r.keep ? "" : " replay") + dims(2, r.T, r.H, r.H, r.dk, r.dv),
                      documents_kernel(d), rwkv6_inputs(c), rwkv6_op(1.0, 0, true, r.keep, r.documents)));
  }
  // The rows above run the chunked backward too, all with an initial state and a final-state
  // gradient; these take either away: no h0 (T = 70, 333: partial last chunks; 128 a multiple
  // of 64), o the only output (the final state's gradient zero), or both, at dk = dv = 64, 128 and
  // 256 (T = 70, 193, 64); the last two with the backward replaying the chunk-start states (every
  // other row reads the forward's).
  struct StateRow {
    int64_t B, T, H, D;
    bool initial_state, final_state;
    bool keep = true;
  };
  for (const StateRow& r : {StateRow{2, 70, 2, 64, false, true}, StateRow{2, 128, 2, 128, false, true},
                            StateRow{2, 333, 2, 128, true, false}, StateRow{1, 333, 2, 64, false, false},
                            StateRow{2, 70, 2, 128, false, false}, StateRow{1, 70, 2, 256, true, true},
                            StateRow{1, 193, 2, 256, false, false}, StateRow{1, 64, 2, 256, false, true},
                            StateRow{2, 333, 2, 128, true, true, false}, StateRow{1, 70, 2, 64, false, false, false}}) {
    const Rwkv6Case c{r.B, r.T, r.H, r.D, r.D, unit_std(r.D), 0.0, r.initial_state ? 0.5 : 0.0, 1.0, 0};
    const std::string name = std::string("rwkv6") + (r.keep ? "" : " replay") + dims(r.B, r.T, r.H, r.H, r.D, r.D) +
                             (r.initial_state ? "" : " no h0") + (r.final_state ? "" : " no grad_ht");
    add_case(gpu_case("rwkv6", name, rwkv6_kernel(r.D, r.D), rwkv6_inputs(c),
                      rwkv6_op(1.0, 0, r.final_state, r.keep)));
  }

  // perf at each bench shape beside fla's chunk_rwkv6, also with the backward replaying the
  // chunk-start states ("rwkv6 replay", [train] delta_rule_keep = false), and at the anchor shape
  // with packed documents (perf_documents; fla's chunk_rwkv6 through cu_seqlens, measured only).
  for (size_t i = 0; i < kBenchShapes.size(); i++)
    for (const auto& [keep, documents] : {std::pair{true, false}, {false, false}, {true, true}}) {
      if (documents && i > 0) continue;
      const BenchShape b = kBenchShapes[i];
      const PerfUnits u = perf_units(b);
      const AnchorMs a = documents ? AnchorMs{} : first_shape_only(i, {0.908, 3.566});
      const Rwkv6Dims d{b.B, b.T, b.H, b.D, b.D, 1.0, 0, DType::F32};
      const auto row_dims = documents ? perf_documents_dims(b) : bench_dims(b);
      add_case(perf_case("rwkv6", std::string("rwkv6 ") + (keep ? "" : "replay ") + dims_label(row_dims),
                         documents ? documents_kernel(d) : rwkv6_kernel(b.D, b.D),
                         [b](uint64_t) {
                           const Shape s{b.B, b.T, b.H, b.D};
                           return Inputs{{"r", perf_input(PerfPool::Normal, 0, s, unit_std(b.D))},
                                         {"k", perf_input(PerfPool::Normal, 1, s, unit_std(b.D))},
                                         {"v", perf_input(PerfPool::Normal, 2, s, unit_std(b.D))},
                                         {"w", perf_input(PerfPool::LogGate, 0, s)},
                                         {"u", perf_input(PerfPool::Normal, 4, {b.H, b.D}, unit_std(b.D))}};
                         },
                         rwkv6_op(1.0, 0, true, keep, documents ? perf_documents(b) : std::vector<int64_t>{}),
                         {3 * u.state_pass, 9 * u.state_pass, 5 * u.row_bytes, 10 * u.row_bytes, a.fwd, a.fwd_bwd,
                          "fla chunk_rwkv6", row_dims}));
    }
}

// ---- delta_rule ----

struct DeltaCase {
  std::string what;
  int64_t B, T, H, HV, dk, dv;
  DeltaGate gate;
  bool erase_vector, write_vector, tied, initial_state;
  double gate_shift;
  int64_t chunk_size;
  bool keep = true;  // DeltaRuleOptions::keep_states (false: the GPU backward replays passes 1-2)
  std::vector<int64_t> documents = {};  // packed documents: each row cut into these lengths (sum T), or none
  bool inference = false;  // no input differentiable: the GPU forward alone, without u_f32 (outputs only)
};

// q, k: rows of norm 1 (unit_qk), or N(0, 1/dk) entries (rows of norm about 1).
MakeInputs delta_inputs(const DeltaCase& c, bool unit_qk) {
  return [c, unit_qk](uint64_t seed) {
    auto qk = [&](uint64_t s) {
      return unit_qk ? unit_rows(randn64({c.B, c.T, c.H, c.dk}, s)) : randn64({c.B, c.T, c.H, c.dk}, s, unit_std(c.dk));
    };
    const Shape scalar{c.B, c.T, c.HV};
    Inputs in = {{"q", qk(seed + 1)}, {"k", qk(seed + 2)}, {"v", randn64({c.B, c.T, c.HV, c.dv}, seed + 3)}};
    if (c.gate != DeltaGate::None)
      in.push_back({"g", log_gate(c.gate == DeltaGate::Vector ? Shape{c.B, c.T, c.HV, c.dk} : scalar, seed + 4,
                                  c.gate_shift)});
    in.push_back({c.tied ? "beta" : "b",
                  map64(randn64(c.erase_vector ? Shape{c.B, c.T, c.HV, c.dk} : scalar, seed + 5), sigmoid)});
    if (!c.tied)
      in.push_back({"w", map64(randn64(c.write_vector ? Shape{c.B, c.T, c.HV, c.dv} : scalar, seed + 6), sigmoid)});
    if (c.initial_state) in.push_back({"initial_state", randn64({c.B, c.HV, c.dk, c.dv}, seed + 7, 0.5)});
    if (c.inference)
      for (Input& x : in) x.differentiable = false;
    return in;
  };
}

// Inputs in delta_inputs' order: q, k, v, [g], b, [w], [initial_state].
OpFn delta_op(const DeltaCase& c) {
  const bool gated = c.gate != DeltaGate::None, tied = c.tied, has_h0 = c.initial_state;
  const int64_t chunk = c.chunk_size;
  const bool keep = c.keep;
  const std::vector<int64_t> documents = c.documents;
  return [=](const Vars& x) {
    size_t next = 3;
    Var g = gated ? x[next++] : Var();
    Var b = x[next++];
    Var w = tied ? Var() : x[next++];
    Var h0 = has_h0 ? x[next++] : Var();
    DeltaRuleOutputs r = delta_rule(x[0], x[1], x[2], g, b, w, h0, {0, chunk, keep}, documents_on(x[0], documents));
    return Vars{r.o, r.final_state, r.residual};
  };
}

// The kernels cuda::delta_rule_forward/backward pick for a case (chunked in bf16 where supported).
// Packed documents: the chunked kernels on the documents' chunk layout, or the recurrent ones.
KernelLabel delta_kernel(const DeltaCase& c) {
#ifdef HLA_CUDA
  const DeltaRuleDims d{c.B, c.T, c.H, c.HV, c.dk, c.dv, c.gate, c.erase_vector, c.write_vector, 1.0, 0};
  if (!c.documents.empty()) return documents_kernel(d);
  return [d](DType dtype) { return std::string(cuda::delta_rule_kernel(d, dtype)); };
#else
  (void)c;
  return named_kernel("recurrent");
#endif
}

void add_delta_rule_cases() {
  using G = DeltaGate;
  // grad: one case per mixer and two through the chunked form, B = 2, H = 2, nonzero initial
  // state, every differentiable input, log gates in about [-3, 0).
  for (const DeltaCase& c : {
           DeltaCase{"delta_rule/deltanet", 2, 5, 2, 2, 3, 3, G::None, false, false, true, true, 1.5, 0},  // beta
           DeltaCase{"delta_rule/gdn", 2, 4, 2, 4, 3, 2, G::Scalar, false, false, true, true, 1.5, 0},     // HV = 2H
           DeltaCase{"delta_rule/kda", 2, 4, 2, 2, 3, 3, G::Vector, false, false, true, true, 1.5, 0},
           // vector gate, erase b (dk), write w (dv)
           DeltaCase{"delta_rule/gdn2", 2, 4, 2, 2, 3, 3, G::Vector, true, true, false, true, 1.5, 0},
           // chunked, C = 2, T = 5, HV = 2H
           DeltaCase{"delta_rule/chunk gdn", 2, 5, 2, 4, 2, 2, G::Scalar, false, false, true, true, 1.5, 2},
           // chunked, C = 3, T = 5: vector gate, erase b, scalar w
           DeltaCase{"delta_rule/chunk b,w", 2, 5, 2, 2, 3, 2, G::Vector, true, false, false, true, 1.5, 3},
           // packed documents of 2, 1 and 3 tokens: the state restarts at each
           DeltaCase{"delta_rule/gdn2 documents", 2, 6, 2, 2, 3, 3, G::Vector, true, true, false, false, 1.5, 0, true,
                     {2, 1, 3}},
           DeltaCase{"delta_rule/gdn documents", 2, 6, 2, 4, 3, 2, G::Scalar, false, false, true, false, 1.5, 0, true,
                     {2, 1, 3}},
           // the chunked form on the chunk-aligned layout (C = 2: documents of 2, 1 + padding, 3 + padding)
           DeltaCase{"delta_rule/chunk kda documents", 2, 6, 2, 2, 3, 3, G::Vector, false, false, true, false, 1.5, 2,
                     true, {2, 1, 3}},
       })
    add_case(grad_case("delta_rule", c.what, 10, delta_inputs(c, false), delta_op(c)));

  // gpu: the recurrent kernel's cases, then those that take the chunked tensor-core forward and
  // backward (cuda/delta_rule_chunk.cu) in bf16: DeltaNet, GDN, KDA and GDN-2 (but dk = 128 with
  // dv = 256), grouped and ungrouped value heads, every (dk, dv) template, partial last chunks
  // with and without an initial state, untied beta and w, and long sequences (32 and 64 chunks);
  // every chunked case with the forward keeping its chunk states for the backward (the default),
  // seven with the backward replaying them, six forwards alone (inference). KDA and GDN-2 at dk = 256
  // run in their own shared-memory layout ("chunk kda dk256", "chunk gdn2 dk256": one 128-wide key
  // block of q, k and G at a time in pass 4); GDN-2 at dk = 128, dv = 256 stays recurrent ("gdn2 dv256").
  for (const DeltaCase& c : {
           DeltaCase{"deltanet", 2, 100, 2, 2, 64, 64, G::None, false, false, true, false, 0.0, 0},
           DeltaCase{"gdn", 2, 150, 2, 4, 128, 96, G::Scalar, false, false, true, true, 0.0, 0},  // grouped value heads
           DeltaCase{"kda", 2, 90, 2, 2, 64, 64, G::Vector, false, false, true, true, 1.0, 0},
           DeltaCase{"gdn2", 2, 70, 1, 2, 48, 80, G::Vector, true, true, false, true, 1.0, 0},
           DeltaCase{"b,w scalar", 2, 40, 2, 2, 32, 32, G::None, false, false, false, true, 0.0, 0},
           DeltaCase{"gdn dk256", 1, 80, 1, 2, 256, 256, G::Scalar, false, false, true, true, 2.0, 0},
           DeltaCase{"gdn long", 1, 4096, 1, 1, 128, 128, G::Scalar, false, false, true, true, 3.0, 0},
           DeltaCase{"chunk deltanet", 2, 100, 2, 4, 64, 64, G::None, false, false, true, true, 0.0, 0},
           DeltaCase{"chunk deltanet", 2, 100, 2, 4, 128, 128, G::None, false, false, true, true, 0.0, 0},
           DeltaCase{"chunk gdn", 2, 100, 2, 4, 64, 64, G::Scalar, false, false, true, true, 0.0, 0},
           DeltaCase{"chunk gdn", 2, 100, 2, 4, 128, 128, G::Scalar, false, false, true, true, 0.0, 0},
           DeltaCase{"chunk gdn", 2, 100, 2, 4, 64, 128, G::Scalar, false, false, true, true, 1.0, 0},
           DeltaCase{"chunk gdn", 2, 130, 2, 4, 128, 64, G::Scalar, false, false, true, false, 1.0, 0},
           DeltaCase{"chunk gdn b,w", 2, 200, 3, 3, 64, 64, G::Scalar, false, false, false, true, 2.0, 0},
           DeltaCase{"chunk gdn long", 2, 4096, 2, 4, 128, 128, G::Scalar, false, false, true, true, 3.0, 0},
           DeltaCase{"chunk deltanet long", 2, 4096, 2, 4, 64, 64, G::None, false, false, true, true, 0.0, 0},
           // head width 256 (fla's 340M layout), the scan's state in 128-row blocks, pass 4 in
           // key blocks and value slices; mixed widths; a partial last chunk (300 = 4 * 64 + 44)
           DeltaCase{"chunk gdn", 2, 300, 2, 4, 256, 256, G::Scalar, false, false, true, true, 1.0, 0},
           DeltaCase{"chunk deltanet", 2, 130, 2, 2, 256, 256, G::None, false, false, true, false, 0.0, 0},
           DeltaCase{"chunk gdn b,w", 2, 100, 2, 2, 256, 256, G::Scalar, false, false, false, true, 2.0, 0},
           DeltaCase{"chunk gdn", 2, 100, 2, 4, 128, 256, G::Scalar, false, false, true, true, 1.0, 0},
           DeltaCase{"chunk gdn", 2, 100, 2, 4, 256, 128, G::Scalar, false, false, true, true, 1.0, 0},
           DeltaCase{"chunk gdn", 2, 70, 1, 2, 256, 64, G::Scalar, false, false, true, true, 1.0, 0},
           DeltaCase{"chunk gdn long", 1, 4096, 2, 4, 256, 256, G::Scalar, false, false, true, true, 3.0, 0},
           DeltaCase{"chunk gdn replay", 2, 100, 2, 4, 128, 128, G::Scalar, false, false, true, true, 1.0, 0, false},
           DeltaCase{"chunk deltanet replay", 2, 130, 2, 2, 256, 256, G::None, false, false, true, false, 0.0, 0,
                     false},
           DeltaCase{"chunk gdn long replay", 2, 4096, 2, 4, 64, 64, G::Scalar, false, false, true, true, 3.0, 0,
                     false},
           // KDA: per-channel gates, the in-chunk decays by 16-token sub-blocks; weak (shift 3)
           // and strong (shift 0) decay
           DeltaCase{"chunk kda", 2, 100, 2, 4, 64, 64, G::Vector, false, false, true, true, 0.0, 0},
           DeltaCase{"chunk kda", 2, 130, 2, 4, 128, 128, G::Vector, false, false, true, true, 1.0, 0},
           DeltaCase{"chunk kda", 2, 100, 2, 2, 64, 256, G::Vector, false, false, true, true, 3.0, 0},
           DeltaCase{"chunk kda b,w", 2, 150, 2, 2, 128, 64, G::Vector, false, false, false, false, 1.0, 0},
           DeltaCase{"chunk kda", 2, 100, 2, 4, 128, 256, G::Vector, false, false, true, true, 3.0, 0},
           DeltaCase{"chunk kda long", 2, 4096, 2, 4, 128, 128, G::Vector, false, false, true, true, 3.0, 0},
           DeltaCase{"chunk kda replay", 2, 130, 2, 4, 128, 128, G::Vector, false, false, true, true, 1.0, 0, false},
           // dk = 256: the vector gate's own layout (kWide), pass 4 in two key blocks
           DeltaCase{"chunk kda dk256", 2, 130, 2, 4, 256, 256, G::Vector, false, false, true, true, 1.0, 0},
           DeltaCase{"chunk kda dk256 b,w", 2, 100, 2, 2, 256, 64, G::Vector, false, false, false, false, 3.0, 0},
           DeltaCase{"chunk kda dk256", 1, 80, 1, 2, 256, 128, G::Vector, false, false, true, true, 0.0, 0},
           DeltaCase{"chunk kda dk256 long", 1, 2048, 1, 2, 256, 256, G::Vector, false, false, true, true, 3.0, 0},
           DeltaCase{"chunk kda dk256 replay", 2, 130, 2, 4, 256, 128, G::Vector, false, false, true, true, 1.0, 0,
                     false},
           // GDN-2: KDA's chunks with per-channel erase b (dk) and write w (dv) gates
           DeltaCase{"chunk gdn2", 2, 100, 2, 4, 64, 64, G::Vector, true, true, false, true, 0.0, 0},
           DeltaCase{"chunk gdn2", 2, 130, 2, 4, 128, 128, G::Vector, true, true, false, true, 1.0, 0},
           DeltaCase{"chunk gdn2", 2, 100, 2, 4, 64, 128, G::Vector, true, true, false, true, 3.0, 0},
           DeltaCase{"chunk gdn2", 2, 150, 2, 2, 128, 64, G::Vector, true, true, false, false, 1.0, 0},
           DeltaCase{"chunk gdn2 long", 2, 4096, 2, 4, 128, 128, G::Vector, true, true, false, true, 3.0, 0},
           DeltaCase{"chunk gdn2 replay", 2, 130, 2, 4, 128, 128, G::Vector, true, true, false, true, 1.0, 0, false},
           DeltaCase{"chunk gdn2 dk256", 2, 100, 2, 4, 256, 256, G::Vector, true, true, false, true, 1.0, 0},
           DeltaCase{"chunk gdn2 dk256", 2, 70, 1, 1, 256, 128, G::Vector, true, true, false, false, 3.0, 0},
           DeltaCase{"chunk gdn2 dk256", 2, 130, 2, 2, 256, 64, G::Vector, true, true, false, true, 0.0, 0},
           DeltaCase{"chunk gdn2 dk256 replay", 2, 100, 1, 2, 256, 256, G::Vector, true, true, false, true, 1.0, 0,
                     false},
           // the forward alone (inference: no u_f32, its output pass reads Vnew from the scan's
           // workspace), at each output-pass width: 64-column slices, 32 at dk = 256, a vector gate
           DeltaCase{"chunk gdn inference", 2, 130, 2, 4, 128, 128, G::Scalar, false, false, true, true, 1.0, 0, true,
                     {}, true},
           DeltaCase{"chunk deltanet inference", 2, 130, 2, 2, 256, 256, G::None, false, false, true, true, 0.0, 0, true,
                     {}, true},
           DeltaCase{"chunk kda inference", 2, 100, 2, 2, 64, 256, G::Vector, false, false, true, true, 1.0, 0, true,
                     {}, true},
           DeltaCase{"chunk gdn2 inference", 2, 70, 2, 4, 128, 64, G::Vector, true, true, false, true, 1.0, 0, true,
                     {}, true},
           DeltaCase{"chunk kda dk256 inference", 2, 130, 2, 2, 256, 128, G::Vector, false, false, true, true, 1.0, 0,
                     true, {}, true},
           DeltaCase{"chunk gdn2 dk256 inference", 2, 70, 1, 2, 256, 256, G::Vector, true, true, false, true, 1.0, 0,
                     true, {}, true},
           DeltaCase{"gdn2 dv256", 1, 80, 1, 2, 128, 256, G::Vector, true, true, false, true, 1.0, 0},
           // packed documents (bf16 where the chunked kernels run: on the documents' chunk layout,
           // the scans resetting at chunk_reset; otherwise the token recurrence, its state zeroed
           // at each start, the reverse sweep's dS too, the gate scan restarting): documents
           // shorter than a 64-token chunk / checkpoint segment, exactly one, crossing two; and
           // document starts on segment boundaries
           DeltaCase{"documents deltanet", 2, 191, 2, 2, 64, 64, G::None, false, false, true, false, 0.0, 0, true,
                     {37, 64, 90}},
           DeltaCase{"documents gdn", 2, 191, 2, 4, 128, 96, G::Scalar, false, false, true, false, 1.0, 0, true,
                     {37, 64, 90}},
           DeltaCase{"documents kda", 2, 191, 2, 2, 64, 64, G::Vector, false, false, true, false, 1.0, 0, true,
                     {90, 37, 64}},
           DeltaCase{"documents gdn2", 2, 191, 1, 2, 48, 80, G::Vector, true, true, false, false, 1.0, 0, true,
                     {64, 64, 1, 62}},
           DeltaCase{"documents gdn", 2, 300, 2, 4, 128, 128, G::Scalar, false, false, true, false, 1.0, 0, true,
                     {37, 64, 1, 70, 128}},
           // dk = 256, a vector gate (its own layout, kWide)
           DeltaCase{"documents kda dk256", 2, 191, 2, 2, 256, 128, G::Vector, false, false, true, false, 1.0, 0, true,
                     {90, 37, 64}},
           DeltaCase{"documents gdn2 dk256", 2, 191, 1, 2, 256, 64, G::Vector, true, true, false, false, 1.0, 0, true,
                     {64, 64, 1, 62}},
       })
    add_case(gpu_case("delta_rule", "delta_rule " + c.what + dims(c.B, c.T, c.H, c.HV, c.dk, c.dv), delta_kernel(c),
                      delta_inputs(c, true), delta_op(c)));

  // perf: beta tied (w = b) but for GDN-2's erase b (B,T,H,dk) and write w (B,T,H,dv); at each
  // bench shape beside fla's chunk kernel (targets.md's figure at the anchor shape); GDN, KDA and
  // GDN-2 also with the backward replaying the chunk states ("gdn replay", [train] delta_rule_keep = false).
  struct Variant {
    const char* name;
    G gate;
    bool vectors;
    AnchorMs anchor_shape_ms;
    const char* anchor;
  };
  for (const Variant& m : {Variant{"deltanet", G::None, false, {1.078, 2.879}, "fla chunk_delta_rule"},
                           Variant{"gdn", G::Scalar, false, {0.799, 3.583}, "fla chunk_gated_delta_rule"},
                           Variant{"kda", G::Vector, false, {1.460, 3.781}, "fla chunk_kda"},
                           Variant{"gdn2", G::Vector, true, {1.645, 4.589}, "fla chunk_gdn2"}})
    for (size_t i = 0; i < kBenchShapes.size(); i++)
      for (bool keep : {true, false}) {
        if (!keep && m.gate == G::None) continue;
        const BenchShape r = kBenchShapes[i];
        const AnchorMs a = first_shape_only(i, m.anchor_shape_ms);
        const DeltaCase c{std::string(m.name) + (keep ? "" : " replay"), r.B, r.T, r.H, r.H, r.D, r.D, m.gate,
                          m.vectors, m.vectors, !m.vectors, false, 0.0, 0, keep};
        const PerfUnits u = perf_units(r);
        const double gate_bytes = (m.gate == G::Vector ? u.row_bytes : m.gate == G::Scalar ? u.row_bytes / r.D : 0) +
                                  (m.vectors ? 2 * u.row_bytes : u.row_bytes / r.D);
        add_case(perf_case(
            "delta_rule", "delta_rule " + c.what + " " + dims_label(bench_dims(r)), delta_kernel(c),
            [c](uint64_t) {
              const Shape s{c.B, c.T, c.H, c.dk}, scalar{c.B, c.T, c.H};
              Inputs in = {{"q", perf_input(PerfPool::Normal, 0, s, unit_std(c.dk))},
                           {"k", perf_input(PerfPool::Normal, 1, s, unit_std(c.dk))},
                           {"v", perf_input(PerfPool::Normal, 2, s, unit_std(c.dk))}};
              if (c.gate != G::None)
                in.push_back({"g", perf_input(PerfPool::LogGate, 0, c.gate == G::Vector ? s : scalar)});
              in.push_back({"b", perf_input(PerfPool::Gate, 0, c.erase_vector ? s : scalar)});
              if (!c.tied) in.push_back({"w", perf_input(PerfPool::Gate, 1, s)});
              return in;
            },
            delta_op(c),
            {4 * u.state_pass, 12 * u.state_pass, 5 * u.row_bytes + gate_bytes, 10 * u.row_bytes + 2 * gate_bytes,
             a.fwd, a.fwd_bwd, m.anchor, bench_dims(r)}));
      }
}

const Registrar registered{add_hgrn_cases, add_decay_cases, add_rwkv6_cases, add_delta_rule_cases};

}  // namespace
}  // namespace hla::check
