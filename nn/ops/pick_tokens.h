// Picking the next token of every sequence on the model's device, so a decoding step moves B
// token ids to the host instead of B x V logits. Two ops over rows of logits, each row read over
// its first widths[b] ids (a tokenizer may know fewer ids than the model has rows):
//
// argmax_rows: greedy, ties to the lowest id (std::max_element's rule, which the host code of
// hla generate and the evaluator used):
//   ids[b] = min { i < widths[b] : z[b, i] = max_{j < widths[b]} z[b, j] }
// Logits are expected finite; a NaN is never chosen on the GPU.
//
// sample_tokens: the sampling rule of `hla generate` (cli/cmd_generate.cpp): the ids ranked by
// logit, highest first, ties lowest id first; the top_k of them (0: all); p_i = exp((z_i -
// z_max) / temperature) in double; the nucleus, the shortest prefix whose mass reaches top_p *
// (the top-k's total); then the candidate where u[b] * mass falls, walking the prefix. The walk
// and its sums run in the ranked order in double on both devices, so the GPU draws the CPU's ids
// (up to a last-ulp difference of exp at a cut, which the inputs would have to hit exactly).
// The GPU ranks the top k by k block-wide argmax rounds, each over the ids ranked after the last
// one taken, so it takes top_k in [1, kMaxDeviceTopK]; a larger or zero top_k is the CPU
// reference's (the caller copies the logits).
//
// No autograd: they pick tokens, nothing flows back through them.
#pragma once
#include "nn/ops/pick_tokens_dims.h"
#include "tensor/tensor.h"

namespace hla {

// logits: (B, V) float on any device; widths: (B) I32 on that device, each in [1, V].
// Returns ids: (B) I32 on that device.
Tensor argmax_rows(const Tensor& logits, const Tensor& widths);
// The same, sampling; uniforms: (B) F64 in [0, 1) on that device.
Tensor sample_tokens(const Tensor& logits, const Tensor& widths, const Tensor& uniforms, const SampleParams& p);

namespace cpu {
// ids: (B); z: (B, V); widths, uniforms: (B)
template <class Real>
void argmax_rows_forward(int32_t* ids, const Real* z, const int32_t* widths, int64_t B, int64_t V);
template <class Real>
void sample_tokens_forward(int32_t* ids, const Real* z, const int32_t* widths, const double* uniforms, int64_t B,
                           int64_t V, const SampleParams& p);
}  // namespace cpu

}  // namespace hla
