// CUDA-vs-CPU cases that take the chunked tensor-core forward of decay attention
// (cuda/decay_attention_chunk.cu) in bf16: scalar gates, grouped value heads (H 2 / HV 4), every
// (dk, dv) template class, partial last chunks with an initial state, and a long sequence
// (64 chunks). Gates as the two scalar-gate mixers draw them (mixers.md 7, 10):
//   RetNet:  g = ln(1 - 2^(-5 - j)) per value head j, constant over time;
//   Mamba-2: g = Delta_t * A_j, Delta = softplus(N(-3, 1)) (~0.05), A_j = -(1 .. 16) over heads.
// The f32 rows run the recurrent kernel (fp32 storage never takes the chunked path); under
// RetNet's constant near-1 decays they check that its decay keeps full fp32 precision over a
// memory of hundreds of tokens (cuda/recurrence.cuh, decay()).
#include <algorithm>
#include <cmath>
#include <string>

#include "autograd/gpucheck.h"
#include "nn/ops/decay_attention.h"
#ifdef HLA_CUDA
#include "cuda/decay_attention.h"
#endif

namespace hla {
namespace {

enum class GateKind { RetNet, Mamba2 };

struct ChunkCase {
  int64_t B, T, H, HV, dk, dv;
  GateKind gate;
  bool initial_state;
};

// g: (B, T, HV) log gates of the case's kind.
Tensor scalar_gates(const ChunkCase& c, uint64_t seed) {
  Tensor g = randn64({c.B, c.T, c.HV}, seed, 1.0, -3.0);
  double* p = g.data<double>();
  for (int64_t i = 0; i < g.numel(); i++) {
    const int64_t j = i % c.HV;
    if (c.gate == GateKind::RetNet) {
      p[i] = std::log(1.0 - std::exp2(-5.0 - double(j)));
    } else {
      const double delta = std::log1p(std::exp(p[i]));                        // softplus
      const double A = -(1.0 + 15.0 * double(j) / double(std::max<int64_t>(c.HV - 1, 1)));
      p[i] = delta * A;
    }
  }
  return g;
}

KernelName chunk_kernel(const ChunkCase& c) {
#ifdef HLA_CUDA
  return [c](DType dtype) { return std::string(cuda::decay_attention_kernel(c.dk, c.dv, false, dtype)); };
#else
  (void)c;
  return named_kernel("recurrent");
#endif
}

std::vector<GpucheckResult> check_chunk(const ChunkCase& c, uint64_t seed) {
  const double scale = c.gate == GateKind::RetNet ? 1.0 / std::sqrt(double(c.dk)) : 1.0;
  const bool has_h0 = c.initial_state;
  auto fn = [scale, has_h0](const std::vector<Var>& x) {
    DecayAttentionOutput out = decay_attention(x[0], x[1], x[2], x[3], has_h0 ? x[4] : Var(), scale, 0);
    return std::vector<Var>{out.o, out.final_state};
  };
  const double unit = 1.0 / std::sqrt(double(c.dk));
  std::vector<GpucheckInput> in = {{"q", randn64({c.B, c.T, c.H, c.dk}, seed + 1, c.gate == GateKind::RetNet ? 1.0 : unit)},
                                   {"k", randn64({c.B, c.T, c.H, c.dk}, seed + 2, unit)},
                                   {"v", randn64({c.B, c.T, c.HV, c.dv}, seed + 3)},
                                   {"g", scalar_gates(c, seed + 4)}};
  if (has_h0) in.push_back({"initial_state", randn64({c.B, c.HV, c.dk, c.dv}, seed + 5, 0.5)});
  const std::string op = std::string("decay chunk ") + (c.gate == GateKind::RetNet ? "retnet" : "mamba2") + " B" +
                         std::to_string(c.B) + " T" + std::to_string(c.T) + " H" + std::to_string(c.H) + "/" +
                         std::to_string(c.HV) + " dk" + std::to_string(c.dk) + " dv" + std::to_string(c.dv);
  return gpucheck(op, chunk_kernel(c), fn, in, seed);
}

}  // namespace

HLA_GPUCHECK("decay_attention chunked", seed) {
  using G = GateKind;
  std::vector<GpucheckResult> all;
  for (const ChunkCase& c : {
           ChunkCase{2, 100, 2, 4, 64, 64, G::RetNet, true},
           ChunkCase{2, 130, 2, 4, 64, 64, G::Mamba2, true},
           ChunkCase{2, 100, 2, 4, 128, 128, G::Mamba2, true},
           ChunkCase{2, 130, 2, 4, 128, 128, G::RetNet, true},
           ChunkCase{2, 100, 2, 4, 64, 128, G::RetNet, true},
           ChunkCase{2, 130, 2, 4, 64, 128, G::Mamba2, false},
           ChunkCase{2, 4096, 2, 4, 128, 128, G::RetNet, true},
           ChunkCase{2, 4096, 2, 4, 128, 128, G::Mamba2, true},
       })
    append(all, check_chunk(c, seed));
  return all;
}

}  // namespace hla
