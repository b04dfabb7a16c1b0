// Var: a tensor that remembers how it was made, micrograd-style.
//
// A Var is a handle to {value, grad, grad_fn, requires_grad}. An op computes its forward on
// Tensors and, when any input requires grad (and grad mode is on), records a Node: the
// inputs plus a backward closure that captures exactly the tensors it reads. backward() runs
// the nodes in reverse topological order, accumulating into .grad; a Var used twice gets the
// sum of both uses (a GEMM's backward may add into that sum itself: gradient_sum). Leaf grads
// persist (gradient accumulation); interior grads live only inside backward, and each node's
// closure and inputs are freed once it has run, so one backward releases the graph as it goes.
// A backward can report each leaf the moment its gradient is complete (no node still to run
// delivers to it): data parallelism (dist/) starts reducing a bucket while the rest runs.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace hla {

struct Node;

struct VarImpl {
  Tensor value;
  Tensor grad;  // undefined until a gradient arrives
  std::shared_ptr<Node> grad_fn;
  int output_index = 0;  // which output of grad_fn this is
  bool requires_grad = false;
};

class Var;
// Called during a backward with each leaf whose gradient for this backward is complete (once per
// leaf, after the last node that delivers to it has run).
using LeafReadyFn = std::function<void(const Var& leaf)>;

class Var {
 public:
  Var() = default;
  explicit Var(Tensor value, bool requires_grad = false);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const { return impl_->value; }
  Tensor& mutable_value() { return impl_->value; }
  const Tensor& grad() const { return impl_->grad; }
  Tensor& mutable_grad() { return impl_->grad; }
  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  bool is_leaf() const { return !impl_->grad_fn; }
  const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }
  VarImpl* impl() const { return impl_.get(); }

  const Shape& shape() const { return impl_->value.shape(); }
  int64_t size(int d) const { return impl_->value.size(d); }
  int dim() const { return impl_->value.dim(); }
  DType dtype() const { return impl_->value.dtype(); }
  Device device() const { return impl_->value.device(); }
  int64_t numel() const { return impl_->value.numel(); }

  // Reverse-mode from this Var. With no argument it must hold one element (seeded with 1).
  void backward() const;
  void backward(const Tensor& grad_output, const LeafReadyFn& on_leaf_ready = {}) const;
  Var detach() const;  // same value, no history
  void zero_grad();    // drops the gradient (it is re-created at the next backward)

 private:
  friend std::vector<Var> record_op(const std::vector<Tensor>&, const std::vector<Var>&,
                                    std::function<std::vector<Tensor>(const std::vector<Tensor>&)>,
                                    const char*);
  friend void run_backward(const std::vector<Var>&, const std::vector<Tensor>&, const LeafReadyFn&);
  std::shared_ptr<VarImpl> impl_;
};

// Backward closure: receives one gradient per output (zeros where an output got none) and
// returns one gradient per input (an undefined Tensor where an input needs none).
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

struct Node {
  const char* name;
  std::vector<Var> inputs;
  std::vector<Shape> output_shapes;
  std::vector<DType> output_dtypes;
  Device device = Device::CPU;
  BackwardFn backward;
  // Set by cast (nn/ops/cast.h): the backward only converts its one gradient to inputs[0]'s dtype,
  // so gradient_sum may hand a consumer the sum past it when that dtype is the wider one.
  bool is_cast = false;
};

// Inside a backward closure: the sum that the gradient of the running node's input `input` goes
// into, for a closure whose kernel can add into its output (a GEMM with beta = 1) instead of
// returning a gradient the engine adds with a kernel of its own. Asking commits the closure: it
// then adds its gradient into the returned tensor when that is defined (the sum so far, written in
// place as the engine's own add would), or sets it to a new tensor of the returned dtype when not,
// and returns an undefined Tensor for that input. Null where the input needs no gradient. Past a
// cast from a wider dtype (an fp32 master weight's bf16 compute copy) the sum is the wider one
// (the master's .grad): no cast kernel, no separate add; the cast's backward then runs only for
// the gradients other consumers returned; a kernel that writes only the input's own dtype asks
// with past_casts = false.
struct GradientSum {
  Tensor* sum = nullptr;
  DType dtype = DType::F32;  // of *sum, defined or not

  // Whether the kernel adds into the sum so far (beta = 1) rather than writing a new one (beta = 0).
  bool adds() const { return sum && sum->defined(); }
  // The tensor the kernel writes or adds into: the sum so far, or a new one of `shape` in dtype;
  // undefined where no gradient is wanted.
  Tensor target(const Shape& shape, Device device) const;
  // After the kernel: a new target becomes the sum (only once written: a failed kernel leaves no
  // sum of garbage).
  void keep(const Tensor& target) const;
};
GradientSum gradient_sum(size_t input, bool past_casts = true);

// Wraps forward results into Vars; records a Node when grad mode is on and an input needs it.
std::vector<Var> record_op(const std::vector<Tensor>& outputs, const std::vector<Var>& inputs,
                           BackwardFn backward, const char* name);
// The common one-output case.
Var record_op1(const Tensor& output, const std::vector<Var>& inputs, BackwardFn backward,
               const char* name);

// Runs backward from several roots at once (each seeded with its own gradient); on_leaf_ready,
// when given, hears of every leaf that requires grad and is reached, in completion order.
void run_backward(const std::vector<Var>& roots, const std::vector<Tensor>& grad_outputs,
                  const LeafReadyFn& on_leaf_ready = {});

bool grad_enabled();

// What checkpoint() (autograd/checkpoint.h) sees of record_op: while an InputHookGuard lives,
// every op's inputs pass through its hook before the op is recorded (or not, without grad).
// One at a time: a second guard while one lives is an error naming both.
using InputHook = std::function<Var(const Var& input)>;
class InputHookGuard {
 public:
  InputHookGuard(InputHook hook, const char* owner);
  static void check_none(const char* owner);  // the error above, before a guard is made
  ~InputHookGuard();
  InputHookGuard(const InputHookGuard&) = delete;
  InputHookGuard& operator=(const InputHookGuard&) = delete;
};

// Sets grad mode for its lifetime and restores it after (checkpoint's recompute turns it on).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

// Disables recording for its lifetime (evaluation, optimizer updates).
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

}  // namespace hla
