// The general delta rule's descriptor (nn/ops/delta_rule.h): the gate kind and the sizes and
// flags cpu::delta_rule_* (nn/ops/delta_rule.cpp) and cuda::delta_rule_* (cuda/delta_rule.cu,
// cuda/delta_rule_chunk.cu) both take. Knows nothing of Var.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace hla {

// The decay g: absent (DeltaNet), a scalar per value head (GDN) or a vector over dk (KDA, GDN-2).
enum class DeltaGate { None, Scalar, Vector };

struct DeltaRuleDims {
  int64_t B, T, H, HV, dk, dv;  // q, k: (B, T, H, dk);  v, o, residual: (B, T, HV, dv);  states (B, HV, dk, dv)
  DeltaGate gate;               // g: absent, (B, T, HV) or (B, T, HV, dk)
  bool erase_vector;            // b: (B, T, HV, dk) when true, else (B, T, HV)
  bool write_vector;            // w: (B, T, HV, dv) when true, else (B, T, HV)
  double scale;                 // resolved (never 0)
  int64_t chunk_size;           // CPU: 0 = token recurrence, C > 0 = chunked WY form; the GPU picks its own kernel
  // final_state, h0 and their gradients: fp32 on the GPU, the storage dtype on the CPU. The
  // default serves dims built only to ask cuda::delta_rule_kernel which kernel runs.
  DType state_dtype = DType::F32;
  // Packed documents (varlen): doc_start (B, T) I32 on the kernels' device, the row-relative
  // index of the first token of t's document (nn/ops/attention.h: document_starts); the state
  // is zero before every document's first token t > 0. Null: one document a row.
  const int32_t* doc_start = nullptr;
  // The CPU chunked form on packed documents' chunk-aligned layout (nn/ops/document_chunks.h):
  // chunk_reset (B, T / chunk_size) I32, 1 where a chunk starts a document (the state entering it
  // is zero). Null: no resets.
  const int32_t* chunk_reset = nullptr;
};

}  // namespace hla
