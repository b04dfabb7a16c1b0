// Greedy token choice on the model's device: the argmax of each row of logits over the row's
// first widths[b] ids, ties to the lowest id (std::max_element's rule, which the host code of
// hla generate and the evaluator used). A decoding step then moves B token ids to the host
// instead of B x V logits. Logits are expected finite; a NaN is never chosen on the GPU.
//
//   ids[b] = min { i < widths[b] : z[b, i] = max_{j < widths[b]} z[b, j] }
//
// No autograd: it picks tokens, nothing flows back through it.
#pragma once
#include "tensor/tensor.h"

namespace hla {

// logits: (B, V) float on any device; widths: (B) I32 on that device, each in [1, V].
// Returns ids: (B) I32 on that device.
Tensor argmax_rows(const Tensor& logits, const Tensor& widths);

namespace cpu {
// ids: (B); z: (B, V); widths: (B)
template <class Real>
void argmax_rows_forward(int32_t* ids, const Real* z, const int32_t* widths, int64_t B, int64_t V);
}  // namespace cpu

}  // namespace hla
