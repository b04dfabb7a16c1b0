// The backward engine: a topological sort over Nodes and one accumulation rule.
#include "autograd/var.h"

#include <unordered_map>
#include <unordered_set>

#include "tensor/math.h"

namespace hla {
namespace {
thread_local bool g_grad_enabled = true;
thread_local InputHook g_input_hook;  // empty: none
thread_local const char* g_input_hook_owner = nullptr;

// The backward walk running on this thread, for gradient_sum (a walk nests in a closure:
// checkpoint's recompute): the gradients of interior values waiting per producing node and output
// index, the node whose closure runs, and the casts a closure summed past.
struct Walk {
  std::unordered_map<Node*, std::vector<Tensor>> pending;
  Node* running = nullptr;
  std::unordered_set<Node*> summed_past;
};
thread_local Walk* g_walk = nullptr;

class WalkGuard {
 public:
  explicit WalkGuard(Walk* walk) : outer_(g_walk) { g_walk = walk; }
  ~WalkGuard() { g_walk = outer_; }
  WalkGuard(const WalkGuard&) = delete;
  WalkGuard& operator=(const WalkGuard&) = delete;

 private:
  Walk* outer_;
};

// Where an interior value's gradient waits until its producer runs.
Tensor& pending_slot(Walk& walk, const Var& v) {
  Node* producer = v.grad_fn().get();
  auto& slots = walk.pending[producer];
  slots.resize(producer->output_shapes.size());
  return slots[v.impl()->output_index];
}
}  // namespace

bool grad_enabled() { return g_grad_enabled; }
GradModeGuard::GradModeGuard(bool enabled) : previous_(g_grad_enabled) { g_grad_enabled = enabled; }
GradModeGuard::~GradModeGuard() { g_grad_enabled = previous_; }

void InputHookGuard::check_none(const char* owner) {
  HLA_CHECK(!g_input_hook, "'", owner, "' inside '", g_input_hook_owner,
            "': nested checkpoints are not supported (recompute one level only)");
}

InputHookGuard::InputHookGuard(InputHook hook, const char* owner) {
  check_none(owner);
  g_input_hook = std::move(hook);
  g_input_hook_owner = owner;
}
InputHookGuard::~InputHookGuard() {
  g_input_hook = nullptr;
  g_input_hook_owner = nullptr;
}

Var::Var(Tensor value, bool requires_grad) : impl_(std::make_shared<VarImpl>()) {
  impl_->value = std::move(value);
  impl_->requires_grad = requires_grad;
}

Var Var::detach() const { return Var(impl_->value, false); }
void Var::zero_grad() { impl_->grad = Tensor(); }

void Var::backward() const {
  HLA_CHECK(numel() == 1, "backward() without a gradient needs a one-element Var, got ",
            value().str());
  run_backward({*this}, {Tensor::full(shape(), 1.0, dtype(), device())});
}

void Var::backward(const Tensor& grad_output, const LeafReadyFn& on_leaf_ready) const {
  run_backward({*this}, {grad_output}, on_leaf_ready);
}

std::vector<Var> record_op(const std::vector<Tensor>& outputs, const std::vector<Var>& given_inputs,
                           BackwardFn backward, const char* name) {
  std::vector<Var> hooked;
  if (g_input_hook) {
    hooked = given_inputs;
    for (Var& v : hooked)
      if (v.defined()) v = g_input_hook(v);
  }
  const std::vector<Var>& inputs = g_input_hook ? hooked : given_inputs;
  bool needs_grad = false;
  if (g_grad_enabled)
    for (const Var& v : inputs) needs_grad = needs_grad || v.requires_grad();
  std::vector<Var> results;
  results.reserve(outputs.size());
  for (const Tensor& t : outputs) results.emplace_back(t, needs_grad);
  if (!needs_grad) return results;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->inputs = inputs;
  node->backward = std::move(backward);
  for (size_t i = 0; i < results.size(); i++) {
    results[i].impl_->grad_fn = node;
    results[i].impl_->output_index = static_cast<int>(i);
    node->output_shapes.push_back(outputs[i].shape());
    node->output_dtypes.push_back(outputs[i].dtype());
    node->device = outputs[i].device();
  }
  return results;
}

Var record_op1(const Tensor& output, const std::vector<Var>& inputs, BackwardFn backward,
               const char* name) {
  return record_op({output}, inputs, std::move(backward), name)[0];
}

static void accumulate(Tensor& slot, const Tensor& g, const Shape& shape) {
  HLA_CHECK(g.shape() == shape, "backward produced a gradient of shape ", shape_str(g.shape()),
            " for a value of shape ", shape_str(shape));
  // The first gradient is kept as it is unless another Tensor shares its storage (an op that returns
  // one tensor for two inputs, the earlier of them): later ones are added into it in place. g's one
  // other holder, its place in the backward's result vector, is let go once it is delivered.
  if (!slot.defined()) slot = g.owns_storage_alone() ? g : g.clone();
  else add_(slot, g);
}

// Depth-first post-order over nodes: each node after every node that consumes its outputs.
static void topo_sort(Node* n, std::unordered_set<Node*>& seen, std::vector<Node*>& order) {
  if (!n || !seen.insert(n).second) return;
  for (const Var& in : n->inputs)
    if (in.defined()) topo_sort(in.grad_fn().get(), seen, order);
  order.push_back(n);
}

Tensor GradientSum::target(const Shape& shape, Device device) const {
  if (!sum) return Tensor();
  if (!adds()) return Tensor::empty(shape, dtype, device);
  HLA_CHECK(sum->shape() == shape, "gradient sum ", sum->str(), " for a gradient of shape ", shape_str(shape));
  return *sum;  // a handle on the sum's storage
}

void GradientSum::keep(const Tensor& target) const {
  if (sum && !adds()) *sum = target;
}

GradientSum gradient_sum(size_t input, bool past_casts) {
  HLA_CHECK(g_walk && g_walk->running, "gradient_sum(", input, ") outside a backward closure");
  Node* n = g_walk->running;
  HLA_CHECK(input < n->inputs.size(), "gradient_sum(", input, ") in '", n->name, "', which has ",
            n->inputs.size(), " inputs");
  const Var* v = &n->inputs[input];
  if (!v->requires_grad()) return {};
  // Past each cast from a wider dtype, to the value it was made from.
  auto cast_from_wider = [](const Var& y) {
    Node* cast = y.grad_fn().get();
    return cast && cast->is_cast && dtype_size(cast->inputs[0].dtype()) > dtype_size(y.dtype()) ? cast : nullptr;
  };
  while (Node* cast = past_casts ? cast_from_wider(*v) : nullptr) {
    g_walk->summed_past.insert(cast);
    v = &cast->inputs[0];
  }
  Tensor* sum = v->is_leaf() ? &v->impl()->grad : &pending_slot(*g_walk, *v);
  return {sum, v->dtype()};
}

void run_backward(const std::vector<Var>& roots, const std::vector<Tensor>& grad_outputs,
                  const LeafReadyFn& on_leaf_ready) {
  HLA_CHECK(roots.size() == grad_outputs.size(), "run_backward: ", roots.size(), " roots but ",
            grad_outputs.size(), " gradients");
  // Gradients of interior values wait in walk.pending; leaves accumulate into their own .grad. So
  // a node's inputs can be dropped as soon as it has run.
  Walk walk;
  WalkGuard current(&walk);
  auto deliver = [&walk](const Var& v, const Tensor& g) {
    accumulate(v.grad_fn() ? pending_slot(walk, v) : v.impl()->grad, g, v.shape());
  };
  std::unordered_set<Node*> seen;
  std::vector<Node*> order;
  std::vector<std::shared_ptr<Node>> keep;  // every node stays alive until the walk ends
  for (size_t i = 0; i < roots.size(); i++) {
    HLA_CHECK(roots[i].requires_grad(), "backward on a Var that does not require grad");
    deliver(roots[i], grad_outputs[i]);
    topo_sort(roots[i].grad_fn().get(), seen, order);
  }
  for (Node* n : order)
    for (const Var& in : n->inputs)
      if (in.defined() && in.grad_fn()) keep.push_back(in.grad_fn());
  for (const Var& r : roots)
    if (r.grad_fn()) keep.push_back(r.grad_fn());
  // For on_leaf_ready: how many nodes still to run take each leaf as an input.
  std::unordered_map<VarImpl*, int> consumers_left;
  if (on_leaf_ready)
    for (Node* n : order)
      for (const Var& in : n->inputs)
        if (in.defined() && in.is_leaf() && in.requires_grad()) consumers_left[in.impl()]++;

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    HLA_CHECK(n->backward, "backward through '", n->name,
              "' a second time: its saved tensors were already released");
    auto waiting = walk.pending.find(n);
    // A cast that every consumer summed past (gradient_sum) has no gradient left to convert.
    const bool summed_past = waiting == walk.pending.end() && walk.summed_past.count(n);
    if (!summed_past) {
      std::vector<Tensor> gouts;
      if (waiting != walk.pending.end()) {
        gouts = std::move(waiting->second);
        walk.pending.erase(waiting);
      }
      gouts.resize(n->output_shapes.size());
      for (size_t i = 0; i < gouts.size(); i++)
        if (!gouts[i].defined()) gouts[i] = Tensor::zeros(n->output_shapes[i], n->output_dtypes[i], n->device);
      walk.running = n;
      std::vector<Tensor> gins = n->backward(gouts);
      walk.running = nullptr;
      HLA_CHECK(gins.size() == n->inputs.size(), "op '", n->name, "' returned ", gins.size(),
                " gradients for ", n->inputs.size(), " inputs");
      // Each gradient let go once delivered, and the output gradients before: the last holder of a
      // storage (an add's one gradient for both inputs, a view of the output gradient) passes it to
      // the sum as it is; only the earlier ones are cloned.
      gouts.clear();
      for (size_t i = 0; i < gins.size(); i++) {
        if (gins[i].defined() && n->inputs[i].requires_grad()) deliver(n->inputs[i], gins[i]);
        gins[i] = Tensor();
      }
    }
    if (on_leaf_ready)
      for (const Var& in : n->inputs)
        if (in.defined() && in.is_leaf() && in.requires_grad() && --consumers_left[in.impl()] == 0) on_leaf_ready(in);
    n->backward = nullptr;  // release saved tensors
    n->inputs.clear();
  }
}

}  // namespace hla
