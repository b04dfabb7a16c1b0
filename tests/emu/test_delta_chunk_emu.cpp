// Runs the chunked delta-rule kernels of cuda/delta_rule_chunk.cu (DeltaNet: no gate; Gated
// DeltaNet: a scalar gate; KDA: a vector gate over dk; GDN-2: a vector gate and vector erase and
// write gates b over dk, w over dv) on the host emulator
// (tests/emu/include/emu.h), forward and backward, and compares them with the token recurrence
// in fp64: the formulas of nn/ops/delta_rule.cpp's recurrent_forward / recurrent_backward
// (mixers.md 4.5), restated here per (batch, value head).
// Cases: with and without h0 and the final state's gradient, chunk_reset (packed documents),
// tied (w = b) and untied gates, grouped value heads (HV = 2H: dq, dk summed over the group),
// (dk, dv) in {64, 128}^2 and 256,
// T a multiple of the 64-token chunk and not; KDA (dk 64 / 128, dv 64 / 128 / 256, gates
// -softplus(N(shift, 2)) per channel, down to about -8 a token: 16 tokens of such decay overflow
// fp32 if exp(G_t - G_s) were factored as exp(G_t) exp(-G_s) over a chunk; weak decay too, where
// the pairs of different 16-token sub-blocks weigh in); GDN-2 (dk, dv in {64, 128}, b and w
// sigmoid(N(0, 1)) per channel, db and dw compared per channel); KDA and GDN-2 at dk = 256 (group
// wide256, their layout of one key block at a time); and a few cases with cp.async copies
// landing at issue and the warps run one after another (tests/emu/include/emu.h), which shows a
// tile copied before its last reader is done. Every case runs twice: the backward replaying passes 1-2, and a
// forward keeping their buffers (delta_chunk::kept_floats) with the backward reading them; the
// two hashes must be equal (bit-identical); the forward's own hash (o, residual, final state) is
// printed beside them. The backward reads the forward's residual output as its Vnew. Tolerances are gpu-check's bf16 ones (relative RMS: 5e-3
// outputs and final state, 1e-2 gradients); the exit status is 1 when a row fails.
#include "delta_rule_chunk_host.cpp"

#include <Eigen/Dense>
#include <random>
#include <string>

#include "report.h"

using namespace hla;
using Bf16 = __nv_bfloat16;
using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Row = Eigen::Matrix<double, 1, Eigen::Dynamic>;

static double round_bf(double x) { return __bfloat162float(__float2bfloat16_rn(float(x))); }

// A buffer's exact values (bf16-rounded when stored as bf16) and its bf16 / fp32 copies.
struct Buf {
  std::vector<double> ref;
  std::vector<Bf16> b;
  std::vector<float> f;
  template <class Gen>
  void fill(size_t n, bool bf, Gen&& gen) {
    ref.resize(n), b.resize(n), f.resize(n);
    for (size_t i = 0; i < n; i++) {
      const double x = bf ? round_bf(gen()) : gen();
      ref[i] = x, b[i] = __float2bfloat16_rn(float(x)), f[i] = float(x);
    }
  }
};

// One (batch, value head) sequence in fp64; the gate and b per token and key channel, w per
// token and value channel (a scalar repeated over the channels).
struct Head {
  Mat q, k, v, h0, g;  // (T, dk), (T, dk), (T, dv), (dk, dv), (T, dk)
  Mat b, w;            // (T, dk), (T, dv)
  std::vector<bool> starts;  // (T) the state is zeroed before the token (a chunk_reset chunk's first), or empty
  bool zeroed(int64_t t) const { return !starts.empty() && starts[t]; }
};
struct Grads {
  Mat q, k, v, h0, g, b, w;
};

// Rows of head h of a (B, T, heads, width) buffer.
static Mat rows(const std::vector<double>& x, int64_t bi, int64_t h, int64_t T, int64_t heads, int64_t width) {
  Mat m(T, width);
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = 0; i < width; i++) m(t, i) = x[((bi * T + t) * heads + h) * width + i];
  return m;
}

// The token recurrence (nn/ops/delta_rule.cpp recurrent_forward):
//   S'_t = Diag(exp(g_t)) S_{t-1};  u_t = w_t (.) v_t - S'_t^T (b_t (.) k_t);  S_t = S'_t + k_t u_t^T;
//   o_t = scale S_t^T q_t.
static void forward(const Head& x, double scale, Mat& o, Mat& u, Mat& S) {
  const int64_t T = x.q.rows();
  o.resize(T, x.v.cols()), u.resize(T, x.v.cols());
  S = x.h0;
  for (int64_t t = 0; t < T; t++) {
    if (x.zeroed(t)) S.setZero();
    S = x.g.row(t).array().exp().matrix().asDiagonal() * S;
    u.row(t) = x.w.row(t).cwiseProduct(x.v.row(t)) - x.b.row(t).cwiseProduct(x.k.row(t)) * S;
    S += x.k.row(t).transpose() * u.row(t);
    o.row(t) = scale * x.q.row(t) * S;
  }
}

// Its reverse-time backward (recurrent_backward): dO, dU (T, dv); dS the final state's gradient.
static Grads backward(const Head& x, double scale, const Mat& dO, const Mat& dU, Mat dS) {
  const int64_t T = x.q.rows(), dk = x.k.cols();
  std::vector<Mat> S_prev(T);  // S_{t-1}
  Mat S = x.h0;
  for (int64_t t = 0; t < T; t++) {
    if (x.zeroed(t)) S.setZero();
    S_prev[t] = S;
    S = x.g.row(t).array().exp().matrix().asDiagonal() * S;
    S += x.k.row(t).transpose() * (x.w.row(t).cwiseProduct(x.v.row(t)) - x.b.row(t).cwiseProduct(x.k.row(t)) * S);
  }
  Grads gr{Mat(T, dk), Mat(T, dk), Mat(T, x.v.cols()), Mat(), Mat(T, dk), Mat(T, dk), Mat(T, x.v.cols())};
  for (int64_t t = T - 1; t >= 0; t--) {
    const auto decay = x.g.row(t).array().exp().matrix().asDiagonal();
    const Mat Sd = decay * S_prev[t];                     // S'_t
    const Row e = x.b.row(t).cwiseProduct(x.k.row(t));    // e_t = b_t (.) k_t
    const Row u = x.w.row(t).cwiseProduct(x.v.row(t)) - e * Sd;  // u_t
    const Mat St = Sd + x.k.row(t).transpose() * u;       // S_t
    dS += scale * x.q.row(t).transpose() * dO.row(t);     // o_t = scale S_t^T q_t
    gr.q.row(t) = scale * dO.row(t) * St.transpose();
    const Row du = dU.row(t) + x.k.row(t) * dS;           // S_t = S'_t + k_t u_t^T; u_t an output
    const Row dk_t = u * dS.transpose();
    const Mat dSd = dS - e.transpose() * du;              // u_t = y_t - S'_t^T e_t
    const Row de = -du * Sd.transpose();
    gr.g.row(t) = Sd.cwiseProduct(dSd).rowwise().sum().transpose();  // S'_t = Diag(exp(g_t)) S_{t-1}
    dS = decay * dSd;
    if (x.zeroed(t)) dS.setZero();                      // S_{t-1} was replaced by 0
    gr.k.row(t) = dk_t + x.b.row(t).cwiseProduct(de);
    gr.b.row(t) = x.k.row(t).cwiseProduct(de);
    gr.v.row(t) = x.w.row(t).cwiseProduct(du);
    gr.w.row(t) = x.v.row(t).cwiseProduct(du);
  }
  gr.h0 = dS;
  return gr;
}

// FNV-1a over the bytes of every buffer a case's kernels write: equal hashes = bit-identical
// results (printed per case, to compare two versions of the kernels).
struct Hash {
  uint64_t h = 1469598103934665603ull;
  template <class V>
  void add(const V& x) {
    const auto* p = reinterpret_cast<const unsigned char*>(x.data());
    for (size_t i = 0; i < x.size() * sizeof(x[0]); i++) h = (h ^ p[i]) * 1099511628211ull;
  }
};
static double at(const std::vector<Bf16>& x, int64_t i) { return __bfloat162float(x[i]); }
static double at(const std::vector<float>& x, int64_t i) { return x[i]; }

// What a case's kernels write.
struct Outputs {
  std::vector<Bf16> o, res, gq, gk, gv, gg, gb, gw;
  std::vector<float> ht, gh0;
  uint64_t hash() const {
    Hash h;
    for (const auto* x : {&o, &res, &gq, &gk, &gv, &gg, &gb, &gw}) h.add(*x);
    for (const auto* x : {&ht, &gh0}) h.add(*x);
    return h.h;
  }
};

struct Case {
  bool gated, tied, with_h0, with_dht;
  int64_t B, T, H, HV, dk, dv;
  double shift;         // gate = logsigmoid(N(shift, 1)); KDA: -softplus(N(shift, 2)) per channel
  bool kda = false;     // a vector gate (B, T, HV, dk) (gated must be true)
  bool gdn2 = false;    // and vector gates b (B, T, HV, dk), w (B, T, HV, dv) (kda must be true, tied false)
  std::vector<int> resets = {};  // chunks whose incoming state is zeroed (chunk_reset, every row), or none
};

static void run(const Case& c, uint64_t seed) {
  const int64_t B = c.B, T = c.T, H = c.H, HV = c.HV, dk = c.dk, dv = c.dv;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N(0, 1);
  auto normal = [&] { return N(rng); };
  Buf q, k, v, g, b, w, h0, dO, dres, dht;
  // q, k: rows of norm 1 (as gpu-check's delta-rule cases), rounded to bf16 after normalising.
  for (Buf* x : {&q, &k}) {
    std::vector<double> raw(B * T * H * dk);
    for (double& r : raw) r = N(rng);
    for (size_t r = 0; r < raw.size(); r += dk) {
      double ss = 0;
      for (int64_t i = 0; i < dk; i++) ss += raw[r + i] * raw[r + i];
      for (int64_t i = 0; i < dk; i++) raw[r + i] /= std::sqrt(ss);
    }
    size_t i = 0;
    x->fill(raw.size(), true, [&] { return raw[i++]; });
  }
  v.fill(B * T * HV * dv, true, normal);
  if (c.kda) g.fill(B * T * HV * dk, true, [&] { return -std::log1p(std::exp(2 * N(rng) + c.shift)); });
  else g.fill(B * T * HV, true, [&] { return c.gated ? -std::log1p(std::exp(-(N(rng) + c.shift))) : 0.0; });
  const int64_t b_width = c.gdn2 ? dk : 1, w_width = c.gdn2 ? dv : 1;
  b.fill(B * T * HV * b_width, true, [&] { return 1 / (1 + std::exp(-N(rng))); });
  if (c.tied) w = b;
  else w.fill(B * T * HV * w_width, true, [&] { return 1 / (1 + std::exp(-N(rng))); });
  h0.fill(B * HV * dk * dv, false, [&] { return c.with_h0 ? 0.5 * N(rng) : 0.0; });
  dO.fill(B * T * HV * dv, true, normal);
  dres.fill(B * T * HV * dv, true, normal);
  dht.fill(B * HV * dk * dv, false, [&] { return c.with_dht ? N(rng) : 0.0; });
  const double scale = 1 / std::sqrt(double(dk));
  const DeltaGate gate = c.kda ? DeltaGate::Vector : c.gated ? DeltaGate::Scalar : DeltaGate::None;
  DeltaRuleDims d{B, T, H, HV, dk, dv, gate, c.gdn2, c.gdn2, scale, 0};
  const int64_t NT = (T + 63) / 64;
  std::vector<int32_t> chunk_reset(B * NT, 0);  // (B, NT)
  for (int64_t bi = 0; bi < B; bi++)
    for (int n : c.resets) chunk_reset[bi * NT + n] = 1;
  if (!c.resets.empty()) d.chunk_reset = chunk_reset.data();
  HLA_CHECK(cuda::delta_chunk::supported(d, DType::BF16), "not a chunked case");
  const Bf16* gp = c.gated ? g.b.data() : nullptr;
  const float* h0p = c.with_h0 ? h0.f.data() : nullptr;
  // The kernels' outputs, from the backward that replays passes 1-2 (keep false) or from the one
  // that reads what a keeping forward wrote (keep true; delta_chunk::kept_floats).
  auto kernels = [&](bool keep) {
    Outputs r{std::vector<Bf16>(B * T * HV * dv), {}, std::vector<Bf16>(q.b.size()), std::vector<Bf16>(k.b.size()),
              std::vector<Bf16>(v.b.size()), std::vector<Bf16>(g.b.size()), std::vector<Bf16>(b.b.size()),
              std::vector<Bf16>(w.b.size()), std::vector<float>(B * HV * dk * dv), std::vector<float>(h0.f.size())};
    r.res.resize(r.o.size());
    std::vector<float> kept(keep ? cuda::delta_chunk::kept_floats(d) : 0);
    float* keptp = keep ? kept.data() : nullptr;
    cuda::delta_chunk::forward(r.o.data(), r.ht.data(), r.res.data(), q.b.data(), k.b.data(), v.b.data(), gp,
                               b.b.data(), w.b.data(), h0p, d, keptp);
    cuda::delta_chunk::backward(r.gq.data(), r.gk.data(), r.gv.data(), c.gated ? r.gg.data() : nullptr, r.gb.data(),
                                r.gw.data(), c.with_h0 ? r.gh0.data() : nullptr, dO.b.data(),
                                c.with_dht ? dht.f.data() : nullptr, dres.b.data(), q.b.data(), k.b.data(),
                                v.b.data(), gp, b.b.data(), w.b.data(), h0p, d, r.res.data(), keptp);
    return r;
  };
  const Outputs replayed = kernels(false);
  const auto& [o, res, gq, gk, gv, gg, gb, gw, ht, gh0] = replayed;
  Err eo, eu, eht, eq, ek, ev, eg, eb, ew, eh0;
  std::vector<double> dq_ref(q.b.size(), 0.0), dk_ref(k.b.size(), 0.0);  // summed over a group
  for (int64_t bi = 0; bi < B; bi++)
    for (int64_t j = 0; j < HV; j++) {
      const int64_t hq = j / (HV / H);
      Head x;
      x.q = rows(q.ref, bi, hq, T, H, dk), x.k = rows(k.ref, bi, hq, T, H, dk), x.v = rows(v.ref, bi, j, T, HV, dv);
      x.g = c.kda ? rows(g.ref, bi, j, T, HV, dk) : rows(g.ref, bi, j, T, HV, 1).replicate(1, dk);
      x.b = rows(b.ref, bi, j, T, HV, b_width).replicate(1, dk / b_width);
      x.w = rows(w.ref, bi, j, T, HV, w_width).replicate(1, dv / w_width);
      x.h0 = Eigen::Map<const Mat>(h0.ref.data() + (bi * HV + j) * dk * dv, dk, dv);
      if (!c.resets.empty()) {
        x.starts.assign(T, false);
        for (int n : c.resets) x.starts[n * 64] = true;
      }
      Mat o_ref, u_ref, S_ref;
      forward(x, scale, o_ref, u_ref, S_ref);
      for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < dv; i++) {
          const int64_t tok = (bi * T + t) * HV + j;
          eo.add(at(o, tok * dv + i), o_ref(t, i)), eu.add(at(res, tok * dv + i), u_ref(t, i));
        }
      for (int64_t i = 0; i < dk * dv; i++) eht.add(at(ht, (bi * HV + j) * dk * dv + i), S_ref(i / dv, i % dv));
      const Mat dS = Eigen::Map<const Mat>(dht.ref.data() + (bi * HV + j) * dk * dv, dk, dv);
      const Grads gr = backward(x, scale, rows(dO.ref, bi, j, T, HV, dv), rows(dres.ref, bi, j, T, HV, dv), dS);
      for (int64_t t = 0; t < T; t++) {
        const int64_t tok = (bi * T + t) * HV + j;
        for (int64_t i = 0; i < dv; i++) ev.add(at(gv, tok * dv + i), gr.v(t, i));
        for (int64_t i = 0; i < dk; i++) {
          dq_ref[((bi * T + t) * H + hq) * dk + i] += gr.q(t, i);
          dk_ref[((bi * T + t) * H + hq) * dk + i] += gr.k(t, i);
        }
        if (c.kda)
          for (int64_t i = 0; i < dk; i++) eg.add(at(gg, tok * dk + i), gr.g(t, i));
        else if (c.gated)
          eg.add(at(gg, tok), gr.g.row(t).sum());
        if (c.gdn2) {
          for (int64_t i = 0; i < dk; i++) eb.add(at(gb, tok * dk + i), gr.b(t, i));
          for (int64_t i = 0; i < dv; i++) ew.add(at(gw, tok * dv + i), gr.w(t, i));
        } else {
          eb.add(at(gb, tok), gr.b.row(t).sum()), ew.add(at(gw, tok), gr.w.row(t).sum());
        }
      }
      if (c.with_h0)
        for (int64_t i = 0; i < dk * dv; i++) eh0.add(at(gh0, (bi * HV + j) * dk * dv + i), gr.h0(i / dv, i % dv));
    }
  for (size_t i = 0; i < dq_ref.size(); i++) eq.add(at(gq, i), dq_ref[i]), ek.add(at(gk, i), dk_ref[i]);
  std::string resets;
  for (int n : c.resets) resets += (resets.empty() ? " resets " : ",") + std::to_string(n);
  char label[160];
  const char* mixer = c.gdn2 ? "gdn2" : c.kda ? "kda" : c.gated ? "gdn" : "deltanet";
  std::snprintf(label, sizeof label, "%s%s%s B%ld T%ld H%ld HV%ld dk%ld dv%ld h0 %d dht %d%s",
                emu::cp_async_lands_at_issue ? "early " : "", mixer,
                c.tied ? "" : " b,w",
                long(B), long(T), long(H), long(HV), long(dk), long(dv), int(c.with_h0), int(c.with_dht),
                resets.c_str());
  const double out = 5e-3, grad = 1e-2;  // gpu-check's bf16_out, bf16_grad
  const uint64_t replay = replayed.hash(), keep = kernels(true).hash();
  std::printf("%-50s hash %016llx, keeping forward %016llx %s\n", label, (unsigned long long)replay,
              (unsigned long long)keep, keep == replay ? "ok" : "FAIL");
  Hash forward_hash;
  forward_hash.add(o), forward_hash.add(res), forward_hash.add(ht);
  std::printf("%-50s forward %016llx\n", label, (unsigned long long)forward_hash.h);
  g_rows += 1, g_fail |= keep != replay;
  report(label, "o", eo, out), report(label, "u", eu, out), report(label, "ht", eht, out);
  report(label, "dq", eq, grad), report(label, "dk", ek, grad), report(label, "dv", ev, grad);
  if (c.gated) report(label, "dg", eg, grad);
  report(label, "db", eb, grad), report(label, "dw", ew, grad);
  if (c.with_h0) report(label, "dh0", eh0, grad);
}

// Every case by default (ctest); a group by name: small (dk, dv <= 128), wide (a width of 256), kda,
// early (copies landing at issue too, tests/emu/include/emu.h), gdn2, documents (chunk_reset),
// wide256 (KDA and GDN-2 at dk = 256).
int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "all";
  auto wants = [&](const char* group) { return which == "all" || which == group; };
  uint64_t seed = 1;
  if (wants("small")) {
    // GDN and DeltaNet, T = 64 / 70 / 130 (one chunk, a partial second, a partial third),
    // grouped value heads, h0 / dht on and off, tied and untied gates.
    for (int64_t D : {64, 128})
      for (int64_t T : {64, 70, 130}) {
        run({true, true, T != 64, T != 70, 1, T, 1, 2, D, D, 1.0}, seed++);
        run({false, T == 130, T == 64, T != 64, 1, T, 1, 1, D, D, 0.0}, seed++);
      }
    run({true, false, true, true, 2, 70, 1, 2, 64, 128, 0.0}, seed++);  // mixed widths, B = 2
    run({true, true, true, false, 1, 130, 1, 1, 128, 64, -2.0}, seed++);  // strong decay
    run({true, true, true, true, 1, 40, 1, 2, 64, 64, 1.0}, seed++);  // one partial chunk
  }
  if (wants("wide")) {
    run({true, true, true, true, 1, 70, 1, 1, 256, 256, 1.0}, seed++);
    run({false, true, false, true, 1, 64, 1, 1, 256, 128, 0.0}, seed++);
  }
  if (wants("early")) {  // cp.async copies landing at issue: a tile copied before its readers are done shows
    emu::cp_async_lands_at_issue = true;
    run({true, true, true, true, 1, 200, 1, 2, 64, 64, 1.0}, seed++);
    run({false, false, true, true, 1, 130, 1, 1, 128, 128, 0.0}, seed++);
    run({true, true, true, true, 1, 130, 1, 1, 256, 64, 1.0}, seed++);
    run({true, true, true, true, 1, 130, 1, 2, 128, 64, 0.0, true}, seed++);
    emu::cp_async_lands_at_issue = false;
  }
  if (wants("kda")) {
    // KDA: T = 64 / 70 / 130 / 200, grouped value heads, h0 on and off, untied w, mixed
    // widths, dv = 256; weak decay (shift -5: most gates near 0, so the pairs 16 and more tokens
    // apart, the sub-block products, weigh in) and strong decay (shift 2: down to about -8 a token).
    run({true, true, true, true, 1, 70, 1, 2, 64, 64, 0.0, true}, seed++);
    run({true, true, false, true, 1, 64, 1, 1, 128, 128, -5.0, true}, seed++);
    run({true, false, true, true, 2, 130, 1, 2, 128, 64, 2.0, true}, seed++);
    run({true, true, true, true, 1, 200, 1, 1, 64, 256, -5.0, true}, seed++);
    run({true, true, true, true, 1, 130, 1, 1, 128, 128, 2.0, true}, seed++);
    run({true, false, true, true, 1, 130, 1, 1, 128, 128, -5.0, true}, seed++);
  }
  if (wants("gdn2")) {
    // GDN-2: dk = dv = 64 and 128 and mixed, grouped value heads, T = 64 / 128 (whole chunks) and
    // 70 / 130 (a partial last chunk), h0 on and off; weak, moderate and strong decay; once with
    // copies landing at issue.
    run({true, false, true, true, 1, 70, 1, 2, 64, 64, 0.0, true, true}, seed++);
    run({true, false, false, true, 1, 128, 1, 2, 128, 128, -5.0, true, true}, seed++);
    run({true, false, true, false, 2, 130, 1, 2, 128, 64, 2.0, true, true}, seed++);
    run({true, false, true, true, 1, 130, 1, 1, 128, 128, 2.0, true, true}, seed++);
    run({true, false, false, true, 1, 64, 1, 1, 64, 128, -5.0, true, true}, seed++);
    emu::cp_async_lands_at_issue = true;
    run({true, false, true, true, 1, 130, 1, 2, 128, 128, 0.0, true, true}, seed++);
    emu::cp_async_lands_at_issue = false;
  }
  if (wants("documents")) {
    // packed documents' chunk layout: the state entering flagged chunks zeroed (chunk_reset), and
    // the gradient leaving them; with h0 and dht (its gradient flows up to the first reset)
    run({true, true, true, true, 2, 200, 1, 2, 64, 64, 1.0, false, false, {1, 3}}, seed++);
    run({false, true, false, true, 1, 256, 1, 1, 128, 128, 0.0, false, false, {0, 1, 2}}, seed++);
    run({true, false, true, true, 1, 192, 1, 2, 128, 64, 0.0, true, false, {2}}, seed++);
    run({true, true, true, true, 1, 130, 1, 1, 256, 128, 1.0, false, false, {1}}, seed++);
    run({true, false, true, true, 1, 256, 1, 1, 128, 128, 0.0, true, false, {1, 2}}, seed++);  // KDA, one CTA an SM
  }
  if (wants("wide256")) {
    // KDA and GDN-2 at dk = 256: dv 256 / 128 / 64, a partial last chunk, grouped value heads,
    // h0, strong and weak decay, chunk_resets, B = 2, copies landing at issue.
    run({true, true, true, true, 1, 70, 1, 1, 256, 256, 2.0, true}, seed++);
    run({true, false, false, true, 1, 130, 1, 2, 256, 128, -5.0, true}, seed++);
    run({true, false, true, true, 1, 70, 1, 2, 256, 256, 0.0, true, true}, seed++);
    run({true, false, true, true, 1, 130, 1, 1, 256, 64, 2.0, true, true, {1}}, seed++);
    emu::cp_async_lands_at_issue = true;
    run({true, false, true, true, 1, 130, 1, 1, 256, 128, -5.0, true, true}, seed++);
    run({true, true, true, false, 1, 200, 1, 2, 256, 256, 2.0, true}, seed++);
    emu::cp_async_lands_at_issue = false;
    run({true, true, true, true, 2, 200, 1, 2, 256, 64, 0.0, true, false, {1, 3}}, seed++);
  }
  std::printf("%d rows: %s\n", g_rows, g_fail ? "SOME FAILED" : "ALL OK");
  return g_fail;
}
