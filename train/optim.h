// Optimizers: AdamW and Muon, over a model's named parameters.
//
// Every parameter gets one update rule, decided once from its name and shape and printed by
// describe():
//   AdamW  optimizer: every parameter is AdamW. Weight decay only on weight tensors: rank >= 2,
//          named "*.weight", not a norm's. So none on 1-D tensors (norms, biases, A_log,
//          dt_bias, D, mu) nor on other parameters such as RWKV-6's x_bias and bonus or HGRN's
//          lower_bounds.
//   Muon   optimizer: the 2-D hidden weight matrices (rank 2, decayed, not the embedding or
//          lm_head) are Muon; everything else (embeddings, lm_head, 1-D tensors, short-conv
//          kernels of rank 3, x_bias, lower_bounds) stays AdamW with its own lr (adam_lr) and
//          decay (adam_weight_decay), as Moonlight and papers.md 3.4 do.
//
// AdamW (decoupled decay, PyTorch's order), t = number of this update (1-based):
//   p -= lr * wd * p
//   m  = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
//   p -= lr * (m / bc1) / (sqrt(v / bc2) + eps),   bc1 = 1 - b1^t, bc2 = 1 - b2^t
// Muon, for a (rows, cols) matrix W with gradient G:
//   buf = mu buf + G;   U = nesterov ? G + mu buf : buf          (SGD-Nesterov momentum)
//   O   = NewtonSchulz5(U): X = U / (||U||_F + 1e-7), transposed when rows > cols, then
//         5 times: A = X X^T; X = a X + (b A + c A A) X with (a, b, c) = (3.4445, -4.7750, 2.0315)
//   W  -= lr * wd * W;   W -= lr * scale(rows, cols) * O
// The quintic does not converge to exactly 1: singular values of O land in about [0.68, 1.13].
// scale ("muon_scale"):
//   rms   (default) 0.2 * sqrt(max(rows, cols)): the update's RMS is about 0.2 lr, the RMS of a
//         typical AdamW update (Moonlight), so Muon can use AdamW's lr.
//   shape max(1, rows / cols)^0.5 (Keller Jordan's Muon; wants lr around 0.02).
//
// ZeRO-1 (train/zero.h): an optimizer can be given the parameters it updates (`updates`, one flag
// per parameter); the others hold no state here and are skipped by step() (their owner rank
// updates them), state() holds only this optimizer's part, and load_state takes that part from a
// file holding every parameter's state.
// State (m, v, momentum buffers, step count) saves to and loads from safetensors bit-exactly:
// tensors "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.momentum_buffer"; metadata
// "optimizer" and "step".
// The updates run per group: the parameters of one rule, lr and decay (Muon's also of one
// shape) are updated together, on CUDA parameters (F32 master weights) by the multi-tensor
// kernels of cuda/optim.h (one launch per group, Newton-Schulz batched over the group's
// matrices), on the CPU by the functions below, which those kernels follow line for line.
// A parameter with a compute copy (nn/module.h: its bf16 value for a bf16 forward) gets it
// written by the same update, so the forward never casts the master weights.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nn/module.h"
#include "tensor/safetensors.h"

namespace hla {

struct OptimConfig {
  std::string name = "adamw";     // adamw | muon
  double lr = 1e-3;               // peak lr: AdamW's, or Muon's for the hidden matrices
  double adam_lr = 0.0;           // muon: peak lr of its AdamW side; 0 = same as lr
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;      // decoupled; AdamW's, or Muon's on the matrices
  double adam_weight_decay = 0.0; // muon: decay on its AdamW side (embeddings, head)
  double momentum = 0.95;         // muon
  bool nesterov = true;           // muon
  int ns_steps = 5;               // muon: Newton-Schulz iterations
  std::string muon_scale = "rms"; // muon: rms | shape

  void validate() const;  // errors name the [optim] setting and the bad value
};

enum class UpdateRule { AdamW, Muon };

// How one parameter is updated.
struct ParamPlan {
  std::string name;
  Var var;
  UpdateRule rule = UpdateRule::AdamW;
  bool decay = false;   // weight decay applies
  double lr_scale = 1;  // peak lr of this parameter / OptimConfig::lr
  double weight_decay = 0;
  Tensor compute_copy;  // the parameter's compute copy (nn/module.h), written with each update
};

// Parameters that never get weight decay: all but the rank >= 2 "*.weight" tensors of modules
// that are not norms.
bool no_weight_decay(const std::string& name, const Shape& shape);
// Token embeddings and the output head (AdamW side of Muon).
bool is_embedding_or_head(const std::string& name);

class Optimizer {
 public:
  // updates: per parameter, whether this optimizer updates it (empty: all)
  Optimizer(const ParameterList& params, const OptimConfig& config, const std::vector<bool>& updates = {});

  // One update of every parameter that has a gradient, at lr = peak * lr_factor: stage, then apply.
  void step(double lr_factor);
  // The update in two halves, so a captured CUDA graph of the training step (train/trainer.h) can
  // hold apply() while stage() runs before each replay: stage counts the update and writes its
  // scheduled values (per group: AdamW's lr and bias corrections, Muon's decay and step) into
  // schedule(), a tensor on the parameters' device (on the GPU an upload that does not wait);
  // apply queues the updates, whose kernels read the values there.
  // grad_scale: undefined, or (1) F64 on the parameters' device, the clip factor every gradient is
  // multiplied by as the update reads it (train/schedule.h: clip_factor_; cuda/optim.h: 0 drops it).
  void stage(double lr_factor);
  void apply(const Tensor& grad_scale = Tensor());
  void zero_grad();
  int64_t steps_taken() const { return step_; }
  const OptimConfig& config() const { return config_; }
  const std::vector<ParamPlan>& plan() const { return plan_; }

  // The grouping, one line per group: rule, lr, decay, tensor count, parameter count and the
  // parameter names with layer indices folded ("model.layers.*.attn.q_proj.weight").
  std::string describe() const;

  NamedTensors state() const;  // CPU copies, of the parameters this optimizer updates
  // The names ("<param>.exp_avg", ...) of parameter i's state tensors, whoever updates it, and
  // that state here (empty when another optimizer updates it); each tensor has the parameter's shape.
  std::vector<std::string> state_names(size_t i) const;
  const std::vector<std::pair<std::string, Tensor>>& param_state(size_t i) const { return state_[i]; }
  bool updates(size_t i) const { return updates_[i]; }
  std::map<std::string, std::string> state_metadata() const;
  // Validates optimizer name, names and shapes; errors name the file and the tensor.
  void load_state(const SafetensorsFile& file);

 private:
  // Parameters updated in one call: same rule, lr scale, decay, device and dtype, and for
  // Muon the same (rows, cols). Members are indices into plan_, in plan order.
  struct UpdateGroup {
    UpdateRule rule = UpdateRule::AdamW;
    double lr_scale = 1, weight_decay = 0;
    Device device = Device::CPU;
    DType dtype = DType::F32;
    int64_t rows = 0, cols = 0;  // Muon
    std::vector<size_t> members;
  };
  // live: the members that have a gradient this step
  // schedule: (3) F64 on the group's device, the group's row of schedule_
  // grad_scale: apply()'s, as a pointer (null: none)
  void adamw_step(const UpdateGroup& group, const std::vector<size_t>& live, const Tensor& schedule,
                  const double* grad_scale);
  // A Muon group's update for this step: apply() gathers them so that on CUDA the groups of
  // small matrices go through Newton-Schulz together.
  struct MuonPending {
    const UpdateGroup* group;
    std::vector<size_t> live;
    Tensor schedule;
  };
  // Every pending group's update: pass 1 momentum, pass 2 Newton-Schulz, pass 3 decay and the
  // scaled orthogonal step. The groups of small matrices on CUDA take each pass together
  // (cuda::newton_schulz shares their launches; their buffers are small); every other group
  // takes the three alone, its buffers free again before the next group's.
  void muon_steps(const std::vector<MuonPending>& pending, const double* grad_scale);
  // Pass 1 of one group: (count, rows, cols) momentum updates.
  Tensor muon_momentum(const MuonPending& p, const double* grad_scale);
  // Pass 3 of one group, from Newton-Schulz's (count, rows, cols) result.
  void muon_apply_step(const MuonPending& p, Tensor& ortho);

  OptimConfig config_;
  std::vector<ParamPlan> plan_;
  std::vector<UpdateGroup> groups_;
  std::vector<std::vector<std::pair<std::string, Tensor>>> state_;  // per parameter, named
  std::vector<bool> updates_;                                        // per parameter
  Tensor schedule_;  // (groups, kScheduleValues) F64 on the parameters' device: this update's values
  int64_t step_ = 0;
};

// Update scale of a Muon matrix (see the header comment).
double muon_update_scale(const std::string& mode, int64_t rows, int64_t cols);

// Values per group in Optimizer's schedule tensor: AdamW {lr, bias_correction1, bias_correction2},
// Muon {decay, step, unused}.
constexpr int64_t kScheduleValues = 3;

namespace cpu {
// The CPU references of cuda/optim.h (same arguments, T = float or double): `count` tensors,
// tensor t given by pointers param[t], grad[t], ... of n[t] elements; grad_scale and compute_copy
// as there (grad_scale: null or the clip factor, a gradient read as f == 1 ? g : f == 0 ? 0 :
// g * T(f), multi_scale_'s value; compute_copy: null, or per tensor null or its (n[t]) bf16 copy,
// the updated parameter rounded from float).
// param[t], grad[t], m[t], v[t]: (n[t]); schedule: (3) {lr, bias_correction1, bias_correction2}
template <class T>
void adamw_update(T* const* param, const T* const* grad, T* const* m, T* const* v, const int64_t* n,
                  int count, const double* schedule, double beta1, double beta2, double eps, double weight_decay,
                  const double* grad_scale, bf16* const* compute_copy);
// buf[t], update[t], grad[t]: (n[t]). buf = momentum buf + grad; update = nesterov ? grad + momentum buf : buf
template <class T>
void muon_momentum(T* const* buf, T* const* update, const T* const* grad, const int64_t* n, int count,
                   double momentum, bool nesterov, const double* grad_scale);
// out, g: (batch, rows, cols): the quintic Newton-Schulz orthogonalisation of each matrix of g.
template <class T>
void newton_schulz(T* out, const T* g, int64_t batch, int64_t rows, int64_t cols, int steps);
// param[t], ortho[t]: (n[t]); schedule: (2) {decay, step}. p *= decay; p -= step * ortho
template <class T>
void muon_apply(T* const* param, const T* const* ortho, const int64_t* n, int count, const double* schedule,
                bf16* const* compute_copy);
}  // namespace cpu

}  // namespace hla
