// `hla bench recurrence`: the recurrence ops' CUDA kernels (cuda/{hgrn,decay_attention,rwkv6,
// delta_rule}.cu) at the anchor shape of targets.md, B=4, T=4096, H=16, D=128 (dk = dv = D),
// bf16, forward and forward+backward, each beside its fla anchor:
//   decay scalar gate ~ chunk_simple_gla, vector gate ~ chunk_gla, rwkv6 ~ chunk_rwkv6,
//   delta rule no gate ~ chunk_delta_rule, scalar ~ chunk_gated_delta_rule, vector ~ chunk_kda,
//   vector gate + erase/write vectors ~ chunk_gdn2;  hgrn on x: (4, 4096, 2048) ~ fused_recurrent_hgrn.
// TFLOP/s counts the state arithmetic, 2 dk dv FLOPs per token and head for each pass over the
// state (decay, write, read: 3 passes; the delta rule's erase read: a 4th); fwd+bwd counts 3x
// the forward, as usual. GB/s counts each input read and each output written once (fwd+bwd:
// inputs, do, and the gradients; no scratch).
#include <cmath>
#include <string>

#include "cli/bench.h"
#ifdef HLA_CUDA
#include "cuda/decay_attention.h"
#include "cuda/delta_rule.h"
#include "cuda/hgrn.h"
#include "cuda/rwkv6.h"
#include "cuda/timer.h"
#include "tensor/tensor.h"
#endif

namespace {

using hla::bench::Row;

#ifdef HLA_CUDA

using hla::Device;
using hla::DType;
using hla::Tensor;

constexpr int64_t kB = 4, kT = 4096, kH = 16, kD = 128;
const std::string kShape = "B4 T4096 H16 D128 bf16";

// Random inputs are views of three pools made once (making every tensor on the host would
// take longer than the benchmarks): values ~ N(0, 1/D), log gates in [-1, -0.01), gates in [0, 1).
struct Pools {
  Tensor normal, log_gate, gate;
  static constexpr int64_t kSpread = 4096;  // offset between views of one pool
  Pools() {
    const int64_t n = kB * kT * kH * kD;
    normal = Tensor::randn({n + 8 * kSpread}, 1, 1 / std::sqrt(double(kD)), DType::BF16, Device::CUDA);
    log_gate = Tensor::uniform({n}, 2, -1.0, -0.01, DType::BF16, Device::CUDA);
    gate = Tensor::uniform({n + 8 * kSpread}, 3, 0.0, 1.0, DType::BF16, Device::CUDA);
  }
  // View i of a pool with the given shape.
  static Tensor view(const Tensor& pool, int i, const hla::Shape& s) {
    return pool.slice0(i * kSpread, i * kSpread + hla::shape_numel(s)).reshape(s);
  }
};

Tensor gpu_empty(const hla::Shape& s, DType dt = DType::BF16) { return Tensor::empty(s, dt, Device::CUDA); }

struct Timing {
  double fwd_ms, all_ms;
};

Timing time_pair(const std::function<void()>& forward, const std::function<void()>& backward,
                 const hla::bench::Options& opt) {
  const double fwd = hla::cuda::median(hla::cuda::time_ms(forward, opt.warmup, opt.repeats));
  const double all = hla::cuda::median(hla::cuda::time_ms([&] { forward(); backward(); }, opt.warmup, opt.repeats));
  return {fwd, all};
}

// Two rows (fwd, fwd+bwd) for one op.
void add_rows(std::vector<Row>& rows, const std::string& name, const std::string& shape, const Timing& t,
              double fwd_flops, double fwd_bytes, double all_bytes, double anchor_fwd, double anchor_all,
              const std::string& anchor) {
  rows.push_back({name + " fwd", shape, t.fwd_ms, fwd_flops / t.fwd_ms * 1e-9, fwd_bytes / t.fwd_ms * 1e-6, anchor_fwd,
                  anchor});
  rows.push_back({name + " fwd+bwd", shape, t.all_ms, 3 * fwd_flops / t.all_ms * 1e-9, all_bytes / t.all_ms * 1e-6,
                  anchor_all, anchor});
}

const double kTokenHeads = double(kB) * kT * kH;
const double kStatePass = 2.0 * kD * kD * kTokenHeads;  // FLOPs of one pass over every state
const double kRowBytes = 2.0 * kTokenHeads * kD;        // one (B, T, H, D) bf16 tensor

void bench_hgrn(std::vector<Row>& rows, const hla::bench::Options& opt, const Pools& p) {
  const int64_t D = 2048;
  const hla::Shape s{kB, kT, D};
  Tensor x = Pools::view(p.normal, 0, s), g = Pools::view(p.log_gate, 0, s), dout = Pools::view(p.normal, 1, s);
  Tensor o = gpu_empty(s);
  Tensor ht = gpu_empty({kB, D}, DType::F32), dx = gpu_empty(s), dg = gpu_empty(s);
  auto forward = [&] { hla::cuda::hgrn_forward(o.raw(), ht.data<float>(), x.raw(), g.raw(), nullptr, kB, kT, D, DType::BF16); };
  auto backward = [&] {
    hla::cuda::hgrn_backward(dx.raw(), dg.raw(), nullptr, dout.raw(), nullptr, g.raw(), nullptr, o.raw(), kB, kT, D,
                             DType::BF16);
  };
  const double tensor = 2.0 * kB * kT * D;
  add_rows(rows, "hgrn", "B4 T4096 D2048 bf16", time_pair(forward, backward, opt), 3.0 * kB * kT * D, 3 * tensor,
           8 * tensor, 1.773, 3.875, "fla fused_recurrent_hgrn");
}

void bench_decay(std::vector<Row>& rows, const hla::bench::Options& opt, const Pools& p, bool vector_gate) {
  const hla::Shape qs{kB, kT, kH, kD};
  const hla::Shape gs = vector_gate ? qs : hla::Shape{kB, kT, kH};
  Tensor q = Pools::view(p.normal, 0, qs), k = Pools::view(p.normal, 1, qs), v = Pools::view(p.normal, 2, qs);
  Tensor g = Pools::view(p.log_gate, 0, gs), dout = Pools::view(p.normal, 3, qs), o = gpu_empty(qs);
  Tensor ht = gpu_empty({kB, kH, kD, kD}, DType::F32);
  Tensor dq = gpu_empty(qs), dk = gpu_empty(qs), dv = gpu_empty(qs), dg = gpu_empty(gs);
  const double scale = 1 / std::sqrt(double(kD));
  auto forward = [&] {
    hla::cuda::decay_attention_forward(o.raw(), ht.data<float>(), q.raw(), k.raw(), v.raw(), g.raw(), nullptr, kB, kT,
                                       kH, kH, kD, kD, scale, 0, vector_gate, DType::BF16);
  };
  auto backward = [&] {
    hla::cuda::decay_attention_backward(dq.raw(), dk.raw(), dv.raw(), dg.raw(), nullptr, dout.raw(), nullptr, q.raw(),
                                        k.raw(), v.raw(), g.raw(), nullptr, kB, kT, kH, kH, kD, kD, scale, 0,
                                        vector_gate, DType::BF16);
  };
  const double gate = vector_gate ? kRowBytes : kRowBytes / kD;
  const std::string name = std::string(vector_gate ? "decay vector" : "decay scalar") + " [" +
                           hla::cuda::decay_attention_kernel(kD, kD, vector_gate, DType::BF16) + "]";
  add_rows(rows, name, kShape, time_pair(forward, backward, opt),
           3 * kStatePass, 4 * kRowBytes + gate, 8 * kRowBytes + 2 * gate, vector_gate ? 0.755 : 0.432,
           vector_gate ? 3.246 : 2.094, vector_gate ? "fla chunk_gla" : "fla chunk_simple_gla");
}

void bench_rwkv6(std::vector<Row>& rows, const hla::bench::Options& opt, const Pools& p) {
  const hla::Shape qs{kB, kT, kH, kD};
  Tensor r = Pools::view(p.normal, 0, qs), k = Pools::view(p.normal, 1, qs), v = Pools::view(p.normal, 2, qs);
  Tensor w = Pools::view(p.log_gate, 0, qs), u = Pools::view(p.normal, 4, {kH, kD}), o = gpu_empty(qs);
  Tensor dout = Pools::view(p.normal, 3, qs), ht = gpu_empty({kB, kH, kD, kD}, DType::F32);
  Tensor dr = gpu_empty(qs), dk = gpu_empty(qs), dv = gpu_empty(qs), dw = gpu_empty(qs), du = gpu_empty({kH, kD});
  auto forward = [&] {
    hla::cuda::rwkv6_forward(o.raw(), ht.data<float>(), r.raw(), k.raw(), v.raw(), w.raw(), u.raw(), nullptr, kB, kT,
                             kH, kD, kD, 1.0, 0, DType::BF16);
  };
  auto backward = [&] {
    hla::cuda::rwkv6_backward(dr.raw(), dk.raw(), dv.raw(), dw.raw(), du.raw(), nullptr, dout.raw(), nullptr, r.raw(),
                              k.raw(), v.raw(), w.raw(), u.raw(), nullptr, kB, kT, kH, kD, kD, 1.0, 0, DType::BF16);
  };
  add_rows(rows, "rwkv6", kShape, time_pair(forward, backward, opt), 3 * kStatePass, 5 * kRowBytes, 10 * kRowBytes,
           0.908, 3.566, "fla chunk_rwkv6");
}

struct DeltaVariant {
  const char* name;
  hla::cuda::DeltaGate gate;
  bool vectors;  // GDN-2: erase b (B,T,H,dk) and write w (B,T,H,dv); else a tied scalar beta
  double anchor_fwd, anchor_all;
  const char* anchor;
};

void bench_delta(std::vector<Row>& rows, const hla::bench::Options& opt, const Pools& p, const DeltaVariant& m) {
  using hla::cuda::DeltaGate;
  const hla::Shape qs{kB, kT, kH, kD}, ss{kB, kT, kH};
  const hla::Shape gs = m.gate == DeltaGate::Vector ? qs : ss, bs = m.vectors ? qs : ss;
  Tensor q = Pools::view(p.normal, 0, qs), k = Pools::view(p.normal, 1, qs), v = Pools::view(p.normal, 2, qs);
  Tensor g = m.gate == DeltaGate::None ? Tensor() : Pools::view(p.log_gate, 0, gs);
  Tensor b = Pools::view(p.gate, 0, bs), w = m.vectors ? Pools::view(p.gate, 1, qs) : b;
  Tensor dout = Pools::view(p.normal, 3, qs), dres = Pools::view(p.normal, 4, qs);
  Tensor o = gpu_empty(qs), res = gpu_empty(qs), u32 = gpu_empty(qs, DType::F32);
  Tensor ht = gpu_empty({kB, kH, kD, kD}, DType::F32);
  Tensor dq = gpu_empty(qs), dk = gpu_empty(qs), dv = gpu_empty(qs), db = gpu_empty(bs), dw = gpu_empty(w.shape());
  Tensor dg = g.defined() ? gpu_empty(gs) : Tensor();
  const hla::cuda::DeltaRuleDims d{kB, kT, kH, kH, kD, kD, m.gate, m.vectors, m.vectors, 1 / std::sqrt(double(kD)), 0};
  const void* graw = g.defined() ? g.raw() : nullptr;
  auto forward = [&] {
    hla::cuda::delta_rule_forward(o.raw(), ht.data<float>(), res.raw(), q.raw(), k.raw(), v.raw(), graw, b.raw(),
                                  w.raw(), nullptr, d, u32.data<float>(), DType::BF16);
  };
  auto backward = [&] {
    hla::cuda::delta_rule_backward(dq.raw(), dk.raw(), dv.raw(), dg.defined() ? dg.raw() : nullptr, db.raw(), dw.raw(),
                                   nullptr, dout.raw(), nullptr, dres.raw(), q.raw(), k.raw(), v.raw(), graw, b.raw(),
                                   w.raw(), nullptr, d, u32.data<float>(), DType::BF16);
  };
  const double gates = (m.gate == DeltaGate::Vector ? kRowBytes : m.gate == DeltaGate::Scalar ? kRowBytes / kD : 0) +
                       (m.vectors ? 2 * kRowBytes : kRowBytes / kD);
  // The row names the kernels that run (chunked fwd+bwd for DeltaNet/GDN, recurrent otherwise).
  const std::string name = std::string("delta ") + m.name + " [" + hla::cuda::delta_rule_kernel(d, DType::BF16) + "]";
  add_rows(rows, name, kShape, time_pair(forward, backward, opt), 4 * kStatePass,
           5 * kRowBytes + gates, 10 * kRowBytes + 2 * gates, m.anchor_fwd, m.anchor_all, m.anchor);
}

std::vector<Row> bench_recurrence(const hla::bench::Options& opt) {
  using hla::cuda::DeltaGate;
  std::vector<Row> rows;
  const Pools pools;
  bench_hgrn(rows, opt, pools);
  bench_decay(rows, opt, pools, false);
  bench_decay(rows, opt, pools, true);
  bench_rwkv6(rows, opt, pools);
  for (const DeltaVariant& m : {DeltaVariant{"deltanet", DeltaGate::None, false, 1.078, 2.879, "fla chunk_delta_rule"},
                                DeltaVariant{"gdn", DeltaGate::Scalar, false, 0.799, 3.583, "fla chunk_gated_delta_rule"},
                                DeltaVariant{"kda", DeltaGate::Vector, false, 1.460, 3.781, "fla chunk_kda"},
                                DeltaVariant{"gdn2", DeltaGate::Vector, true, 1.645, 4.589, "fla chunk_gdn2"}})
    bench_delta(rows, opt, pools, m);
  return rows;
}

#else
std::vector<Row> bench_recurrence(const hla::bench::Options&) { return {}; }  // `hla bench` skips without a GPU
#endif

const bool registered = hla::bench::register_bench(
    "recurrence", "hgrn, decay attention, rwkv6, delta rule fwd and fwd+bwd vs fla (rows name the kernel)", bench_recurrence);

}  // namespace
