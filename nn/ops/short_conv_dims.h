// The descriptor of one short convolution call (nn/ops/short_conv.h), shared by the CPU reference
// and cuda/short_conv.cu (a leaf header: it knows nothing of Var).
#pragma once
#include <cstdint>

namespace hla {

enum class ConvAct { Identity, SiLU };  // y = pre or silu(pre)

// x, y: (B, L, C), w: (C, K), state: (B, C, K-1); L is the number of tokens (T in mixers.md).
struct ShortConvDims {
  int64_t B, L, C, K;
  ConvAct act;
  // Packed documents (varlen): doc_start (B, L) I32 on the kernels' device, the row-relative
  // index of the first token of t's document (nn/ops/attention.h: document_starts). Tap i of
  // output t reads x_{t-K+1+i} only when that index is >= doc_start[b, t] (else 0), and the
  // final state keeps only the last document's inputs. Null: one document a row.
  const int32_t* doc_start = nullptr;
  // The fused l2norm of the delta-rule mixers' q and k (mixers.md 2.5): 0 = none; else each
  // token's channels in groups of norm_width (heads; C % norm_width == 0) are scaled to unit
  // length after the activation, y = y * rstd, rstd = 1 / sqrt(sum(y^2) + norm_eps) (eps on the
  // SUM, as l2norm), and rstd (B, L, C / norm_width) is written for the backward.
  int64_t norm_width = 0;
  double norm_eps = 1e-6;
};

}  // namespace hla
