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
}

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
  // one tensor for two inputs, or its own output gradient): later ones are added into it in place.
  // g's one other holder, the backward's result vector, is gone once the gradients are delivered.
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

void run_backward(const std::vector<Var>& roots, const std::vector<Tensor>& grad_outputs,
                  const LeafReadyFn& on_leaf_ready) {
  HLA_CHECK(roots.size() == grad_outputs.size(), "run_backward: ", roots.size(), " roots but ",
            grad_outputs.size(), " gradients");
  // Gradients of interior values wait here, per producing node and output index; leaves
  // accumulate into their own .grad. So a node's inputs can be dropped as soon as it has run.
  std::unordered_map<Node*, std::vector<Tensor>> pending;
  auto deliver = [&pending](const Var& v, const Tensor& g) {
    Node* producer = v.grad_fn().get();
    if (!producer) {
      accumulate(v.impl()->grad, g, v.shape());
      return;
    }
    auto& slots = pending[producer];
    slots.resize(producer->output_shapes.size());
    accumulate(slots[v.impl()->output_index], g, v.shape());
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
    std::vector<Tensor> gouts = std::move(pending[n]);
    pending.erase(n);
    gouts.resize(n->output_shapes.size());
    for (size_t i = 0; i < gouts.size(); i++)
      if (!gouts[i].defined()) gouts[i] = Tensor::zeros(n->output_shapes[i], n->output_dtypes[i], n->device);
    std::vector<Tensor> gins = n->backward(gouts);
    HLA_CHECK(gins.size() == n->inputs.size(), "op '", n->name, "' returned ", gins.size(),
              " gradients for ", n->inputs.size(), " inputs");
    for (size_t i = 0; i < gins.size(); i++)
      if (gins[i].defined() && n->inputs[i].requires_grad()) deliver(n->inputs[i], gins[i]);
    if (on_leaf_ready)
      for (const Var& in : n->inputs)
        if (in.defined() && in.is_leaf() && in.requires_grad() && --consumers_left[in.impl()] == 0) on_leaf_ready(in);
    n->backward = nullptr;  // release saved tensors
    n->inputs.clear();
  }
}

}  // namespace hla
