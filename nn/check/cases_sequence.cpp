// Check cases (nn/check/registry.h) of the small sequence ops around the mixers: short_conv,
// gather_tokens / scatter_tokens (packed documents' chunk layout), token_shift, lerp and ddlerp.
// Every case checks every output and every input's gradient.
// gpu shapes: the ones nn/layers/*.cpp build at 340M and tiny sizes (DeltaNet / GDN q/k/v
// convs, Mamba-2's xBC conv with bias, RWKV-6's token shift and lerps), plus B > 1, odd widths,
// lengths that are not a multiple of any tile, conv states, L < K-1, and packed documents (each
// document convolved as if alone: doc_start), and the delta-rule q/k convs with their l2norm fused
// (norm_width: heads of 256, 128, 64; bf16 takes the fused kernel, fp32 at 256 the conv then
// l2norm). perf: the GDN 340M convs, its q conv with the norm, and a wider one.
#include <string>

#include "nn/check/registry.h"
#include "nn/ops/arith.h"
#include "nn/ops/document_chunks.h"
#include "nn/ops/short_conv.h"
#include "nn/ops/token_shift.h"

namespace hla::check {
namespace {

using Vars = std::vector<Var>;

// ---- short_conv ----

struct ConvCase {
  const char* what;
  int64_t B, L, C, K;
  bool bias, state;
  ConvAct act;
  std::vector<int64_t> documents = {};  // packed documents: each row cut into these lengths (sum L), or none
  int64_t norm_width = 0;               // the fused l2norm's head width, or 0: none
};

// Inputs x, weight, then the optional bias and initial state; documents and norm_width as in ConvCase.
OpFn conv_op(bool has_bias, bool has_state, ConvAct act, const std::vector<int64_t>& documents = {},
             int64_t norm_width = 0) {
  return [=](const Vars& x) {
    size_t next = 2;
    Var bias = has_bias ? x[next++] : Var();
    Var state = has_state ? x[next++] : Var();
    const Tensor doc_start =
        documents.empty() ? Tensor() : packed_doc_start(x[0].size(0), documents).to(x[0].value().device());
    ShortConvOut o = short_conv(x[0], x[1], bias, state, act, doc_start, norm_width);
    return Vars{o.y, o.final_state};
  };
}

void add_short_conv_cases() {
  // Mixer case: SiLU, bias, initial state, L = 5 > K - 1.
  add_case(grad_case("short_conv", "short_conv silu+bias+state", 20,
                     [](uint64_t s) {
                       return Inputs{{"x", randn64({2, 5, 3}, s + 1)}, {"weight", randn64({3, 1, 4}, s + 2, 0.5)},
                                     {"bias", randn64({3}, s + 3, 0.3)}, {"initial_state", randn64({2, 3, 3}, s + 4)}};
                     },
                     conv_op(true, true, ConvAct::SiLU)));
  // Decoding-like case: no bias, identity, L = 2 < K - 1, so the final state mixes the
  // initial state and x and its gradient flows back into both.
  add_case(grad_case("short_conv", "short_conv identity, L < K-1", 24,
                     [](uint64_t s) {
                       return Inputs{{"x", randn64({2, 2, 3}, s + 1)}, {"weight", randn64({3, 1, 4}, s + 2, 0.5)},
                                     {"initial_state", randn64({2, 3, 3}, s + 3)}};
                     },
                     conv_op(false, true, ConvAct::Identity)));
  // Packed documents of 2, 1 and 4 tokens: no tap crosses a boundary, the final state is the
  // last document's.
  add_case(grad_case("short_conv", "short_conv silu+bias, documents 2+1+4", 26,
                     [](uint64_t s) {
                       return Inputs{{"x", randn64({2, 7, 3}, s + 1)}, {"weight", randn64({3, 1, 4}, s + 2, 0.5)},
                                     {"bias", randn64({3}, s + 3, 0.3)}};
                     },
                     conv_op(true, false, ConvAct::SiLU, {2, 1, 4})));
  // The delta-rule q/k conv with its l2norm fused: heads of 4 channels, C = 8.
  add_case(grad_case("short_conv", "short_conv silu+bias+state+l2norm heads of 4", 27,
                     [](uint64_t s) {
                       return Inputs{{"x", randn64({2, 5, 8}, s + 1)}, {"weight", randn64({8, 1, 4}, s + 2, 0.5)},
                                     {"bias", randn64({8}, s + 3, 0.3)}, {"initial_state", randn64({2, 8, 3}, s + 4)}};
                     },
                     conv_op(true, true, ConvAct::SiLU, {}, 4)));
  add_case(grad_case("short_conv", "short_conv silu+l2norm heads of 4, documents 2+1+4", 28,
                     [](uint64_t s) {
                       return Inputs{{"x", randn64({2, 7, 8}, s + 1)}, {"weight", randn64({8, 1, 4}, s + 2, 0.5)}};
                     },
                     conv_op(false, false, ConvAct::SiLU, {2, 1, 4}, 4)));

  for (const ConvCase& c : {
           ConvCase{"gdn-340m q/k conv", 2, 77, 1024, 4, false, false, ConvAct::SiLU},    // H*dk = 4*256
           ConvCase{"deltanet-tiny v conv", 3, 50, 64, 4, false, false, ConvAct::SiLU},    // HV*dv = 2*32
           ConvCase{"mamba2-340m xBC conv", 2, 37, 2304, 4, true, false, ConvAct::SiLU},  // inner + 2N = 2048 + 256
           ConvCase{"mamba2-tiny xBC conv", 2, 65, 160, 4, true, false, ConvAct::SiLU},   // 128 + 2*16
           ConvCase{"chunk with state", 2, 45, 67, 4, true, true, ConvAct::SiLU},
           ConvCase{"identity with state K=3", 3, 33, 129, 3, false, true, ConvAct::Identity},
           ConvCase{"decode L < K-1", 2, 2, 33, 4, true, true, ConvAct::SiLU},
           ConvCase{"documents 37+64+90", 2, 191, 67, 4, true, false, ConvAct::SiLU, {37, 64, 90}},
           ConvCase{"documents 1+2+30", 3, 33, 129, 3, false, false, ConvAct::Identity, {1, 2, 30}},
           // the q/k convs with their l2norm (bf16, 8 channels a thread: 32, 16, 8 lanes a head;
           // fp32, 4: 64 lanes at dk 256, so the conv then l2norm), and 4-channel heads of a C
           // that takes one channel a thread in bf16
           ConvCase{"gdn-340m q/k conv+l2norm dk256", 2, 77, 1024, 4, false, false, ConvAct::SiLU, {}, 256},
           ConvCase{"q/k conv+l2norm dk128 with state", 2, 45, 1024, 4, false, true, ConvAct::SiLU, {}, 128},
           ConvCase{"q/k conv+l2norm dk64 documents 37+64+90", 2, 191, 1024, 4, false, false, ConvAct::SiLU,
                    {37, 64, 90}, 64},
           ConvCase{"conv+l2norm heads of 4", 3, 33, 36, 4, true, true, ConvAct::SiLU, {}, 4},
       }) {
    add_case(gpu_case(
        "short_conv",
        std::string("short_conv ") + c.what + " " + dims_label({{"B", c.B}, {"L", c.L}, {"C", c.C}, {"K", c.K}}),
        named_kernel("short_conv"),
        [c](uint64_t seed) {
          Inputs in = {{"x", randn64({c.B, c.L, c.C}, seed + 1)}, {"weight", randn64({c.C, 1, c.K}, seed + 2, 0.5)}};
          if (c.bias) in.push_back({"bias", randn64({c.C}, seed + 3, 0.3)});
          if (c.state) in.push_back({"initial_state", randn64({c.B, c.C, c.K - 1}, seed + 4)});
          return in;
        },
        conv_op(c.bias, c.state, c.act, c.documents, c.norm_width)));
  }

  // perf: the GDN 340M q/k/v convs (B8 T2048, H*dk = 1024), its q conv with the l2norm of its
  // heads of 256 fused, and a wider one (B4 T4096 C2048), K = 4, SiLU, no bias or state. Bytes:
  // the forward reads x and writes y; the backward reads x and dy and writes dx, and with the
  // norm first reads dy and y and writes d(act) (bf16; w, rstd and the dw partials are small).
  for (const ConvCase& c : {ConvCase{"gdn-340m q/k/v conv", 8, 2048, 1024, 4, false, false, ConvAct::SiLU},
                            ConvCase{"gdn-340m q conv+l2norm dk256", 8, 2048, 1024, 4, false, false, ConvAct::SiLU,
                                     {}, 256},
                            ConvCase{"wide", 4, 4096, 2048, 4, false, false, ConvAct::SiLU}}) {
    const double elements = double(c.B * c.L * c.C), tensor = 2.0 * elements, norm = c.norm_width > 0;
    const std::vector<std::pair<const char*, int64_t>> dims = {{"B", c.B}, {"T", c.L}, {"C", c.C}, {"K", c.K}};
    add_case(perf_case("short_conv", std::string("short_conv ") + c.what + " " + dims_label(dims),
                       named_kernel("short_conv"),
                       [c](uint64_t) {
                         return Inputs{{"x", perf_input(PerfPool::Normal, 0, {c.B, c.L, c.C})},
                                       {"weight", perf_input(PerfPool::Normal, 1, {c.C, 1, c.K}, 0.5)}};
                       },
                       conv_op(c.bias, c.state, c.act, {}, c.norm_width),
                       // flops: the forward's K taps (and the norm's 3 an element); the backward recomputes
                       // them, then dx and dw (and the norm's backward, 4 an element)
                       {(2.0 * c.K + 3 * norm) * elements, (8.0 * c.K + 7 * norm) * elements, 2 * tensor,
                        (5 + 3 * norm) * tensor, 0, 0, "", dims}));
  }
}

// ---- gather_tokens, scatter_tokens (packed documents' chunk-aligned layout) ----

// Rows of documents `lengths` (each row the same) moved to the layout of chunks of C and back:
// gather_tokens, then scatter_tokens of the gathered rows times 2 (so the round trip is no identity).
void add_document_chunks_cases() {
  struct MoveCase {
    int64_t B, C, inner;
    std::vector<int64_t> lengths;
  };
  for (const MoveCase& c : {MoveCase{2, 4, 3, {3, 1, 5}}, MoveCase{2, 64, 96, {37, 64, 90}}}) {
    int64_t T = 0;
    for (int64_t len : c.lengths) T += len;
    const OpFn op = [c](const Vars& x) {
      const DocumentChunks layout = document_chunks(packed_doc_start(c.B, c.lengths), c.C);
      const Tensor index = layout.index.to(x[0].value().device());
      const Var placed = gather_tokens(x[0], index);
      return Vars{placed, scatter_tokens(add(placed, placed), index, x[0].size(1))};
    };
    const MakeInputs inputs = [c, T](uint64_t seed) { return Inputs{{"x", randn64({c.B, T, c.inner}, seed + 1)}}; };
    const std::string name = "document_chunks gather+scatter " + dims_label({{"B", c.B}, {"T", T}, {"C", c.C}});
    if (c.C == 4) add_case(grad_case("document_chunks", name, 30, inputs, op));
    else add_case(gpu_case("document_chunks", name, named_kernel("gather/scatter"), inputs, op));
  }
}

// ---- token_shift, lerp, ddlerp ----

struct ShiftCase {
  int64_t B, L, D;
  bool state;
  uint64_t first;  // x draws from seed + first, the state from seed + first + 1
  std::vector<int64_t> documents = {};  // packed documents: each row cut into these lengths (sum L), or none
};

void add_token_shift_cases() {
  auto shift_inputs = [](ShiftCase c) {
    return [c](uint64_t seed) {
      Inputs in = {{"x", randn64({c.B, c.L, c.D}, seed + c.first)}};
      if (c.state) in.push_back({"state", randn64({c.B, c.D}, seed + c.first + 1)});
      return in;
    };
  };
  auto shift = [](const ShiftCase& c) {
    return [documents = c.documents](const Vars& x) {
      const Tensor doc_start =
          documents.empty() ? Tensor() : packed_doc_start(x[0].size(0), documents).to(x[0].value().device());
      TokenShiftOut o = token_shift(x[0], x.size() > 1 ? x[1] : Var(), doc_start);
      return Vars{o.delta, o.last_token};
    };
  };
  const ShiftCase small{2, 4, 3, true, 1}, small_documents{2, 6, 3, false, 1, {2, 1, 3}};
  add_case(grad_case("token_shift", "token_shift", 30, shift_inputs(small), shift(small)));
  add_case(
      grad_case("token_shift", "token_shift documents", 30, shift_inputs(small_documents), shift(small_documents)));
  // RWKV-6 340M time mix / channel mix (no state), then a continued chunk with an odd width, then
  // packed documents (x_{t-1} = 0 at each start).
  for (const ShiftCase& c :
       {ShiftCase{2, 77, 1024, false, 1}, ShiftCase{3, 37, 67, true, 2}, ShiftCase{2, 1, 33, true, 4},
        ShiftCase{2, 191, 67, false, 5, {37, 64, 90}}})
    add_case(gpu_case("token_shift",
                      std::string("token_shift ") + (c.state ? "state " : "") +
                          (c.documents.empty() ? "" : "documents ") + dims_label({{"B", c.B}, {"L", c.L}, {"D", c.D}}),
                      named_kernel("token_shift"), shift_inputs(c), shift(c)));

  auto static_lerp = [](const Vars& x) { return Vars{lerp(x[0], x[1], x[2])}; };
  add_case(grad_case("token_shift", "lerp", 32,
                     [](uint64_t s) {
                       return Inputs{{"x", randn64({2, 3, 4}, s + 1)}, {"delta", randn64({2, 3, 4}, s + 2)},
                                     {"mu", randn64({4}, s + 3, 0.3, 0.5)}};
                     },
                     static_lerp));
  for (const Shape& shape : {Shape{2, 77, 1024}, Shape{3, 37, 67}, Shape{2, 5, 64}})
    add_case(gpu_case("token_shift", "lerp " + shape_str(shape), named_kernel("lerp"),
                      [shape](uint64_t s) {
                        return Inputs{{"x", randn64(shape, s + 1)}, {"delta", randn64(shape, s + 2)},
                                      {"mu", uniform64({shape.back()}, s + 3, 0.0, 1.0)}};
                      },
                      static_lerp));

  // ddlerp with N = 5 maps (r, w, k, v, g) of rank R.
  struct DdlerpCase {
    int64_t B, L, D, R;
    double w2_std;
  };
  auto ddlerp_inputs = [](DdlerpCase c) {
    return [c](uint64_t s) {
      const int64_t N = 5;
      return Inputs{{"x", randn64({c.B, c.L, c.D}, s + 1)}, {"delta", randn64({c.B, c.L, c.D}, s + 2)},
                    {"zz", randn64({c.B, c.L, N * c.R}, s + 3)}, {"w2", randn64({c.D, N * c.R}, s + 4, c.w2_std)},
                    {"bias", randn64({N, c.D}, s + 5, 0.3, 0.5)}};
    };
  };
  auto data_dependent = [](const Vars& x) { return ddlerp(x[0], x[1], x[2], x[3], x[4]); };
  add_case(grad_case("token_shift", "ddlerp", 35, ddlerp_inputs({2, 3, 3, 2, 0.5}), data_dependent));
  // RWKV-6 340M (D 1024, R 32), tiny (D 64), and an odd width and rank.
  for (const DdlerpCase& c :
       {DdlerpCase{2, 37, 1024, 32, 0.1}, DdlerpCase{2, 45, 64, 32, 0.1}, DdlerpCase{3, 9, 67, 3, 0.1}})
    add_case(gpu_case("token_shift", "ddlerp " + dims_label({{"B", c.B}, {"L", c.L}, {"D", c.D}, {"R", c.R}}),
                      named_kernel("ddlerp cublas"), ddlerp_inputs(c), data_dependent));
}

const Registrar registered{add_short_conv_cases, add_document_chunks_cases, add_token_shift_cases};

}  // namespace
}  // namespace hla::check
