// checkpoint (see checkpoint.h): the no-grad first run, and the recompute in the Node's backward.
#include "autograd/checkpoint.h"

#include <unordered_map>
#include <unordered_set>

namespace hla {
namespace {

// The Node's backward: recompute fn from stand-ins and back-propagate through it. node_inputs:
// fn's inputs (the first input_count) and then the Vars fn read from outside.
std::vector<Tensor> recompute_backward(const CheckpointFn& fn, const std::vector<Var>& node_inputs,
                                       size_t input_count, const char* name,
                                       const std::vector<Tensor>& grad_outputs) {
  // pass 1: detached stand-ins for the interior Vars among them; leaves stay themselves
  std::vector<Var> stand_ins(node_inputs.size());
  std::unordered_map<VarImpl*, Var> stand_in_of;
  for (size_t i = 0; i < node_inputs.size(); i++) {
    const Var& v = node_inputs[i];
    if (!v.defined() || v.is_leaf()) continue;
    stand_ins[i] = Var(v.value(), v.requires_grad());
    stand_in_of[v.impl()] = stand_ins[i];
  }
  std::vector<Var> fn_inputs(node_inputs.begin(), node_inputs.begin() + input_count);
  for (size_t i = 0; i < input_count; i++)
    if (stand_ins[i].defined()) fn_inputs[i] = stand_ins[i];
  // pass 2: the recompute, with recording on; an op reading an outside Var reads its stand-in
  std::vector<Var> outputs;
  {
    GradModeGuard grad_on(true);
    InputHookGuard hook(
        [&stand_in_of](const Var& v) {
          auto it = stand_in_of.find(v.impl());
          return it == stand_in_of.end() ? v : it->second;
        },
        name);
    outputs = fn(fn_inputs);
  }
  HLA_CHECK(outputs.size() == grad_outputs.size(), "checkpoint '", name, "': the recompute gave ", outputs.size(),
            " outputs, the first run ", grad_outputs.size());
  // pass 3: the outputs' gradients through the recomputed graph; leaves accumulate in place
  std::vector<Var> roots;
  std::vector<Tensor> root_grads;
  for (size_t i = 0; i < outputs.size(); i++)
    if (outputs[i].requires_grad()) {
      roots.push_back(outputs[i]);
      root_grads.push_back(grad_outputs[i]);
    }
  outputs.clear();
  if (!roots.empty()) run_backward(roots, root_grads);
  // pass 4: the stand-ins' gradients leave through the Node (the leaves have theirs)
  std::vector<Tensor> grads(node_inputs.size());
  for (size_t i = 0; i < node_inputs.size(); i++)
    if (stand_ins[i].defined()) grads[i] = stand_ins[i].grad();
  return grads;
}

}  // namespace

std::vector<Var> checkpoint(CheckpointFn fn, const std::vector<Var>& inputs, const char* name) {
  InputHookGuard::check_none(name);
  if (!grad_enabled()) return fn(inputs);
  // The first run without a graph; the hook notes each outside Var that requires grad, once.
  std::vector<Var> node_inputs = inputs;
  std::unordered_set<VarImpl*> noted;
  for (const Var& v : inputs)
    if (v.defined()) noted.insert(v.impl());
  std::vector<Var> outputs;
  {
    NoGradGuard no_grad;
    InputHookGuard hook(
        [&](const Var& v) {
          if (v.requires_grad() && noted.insert(v.impl()).second) node_inputs.push_back(v);
          return v;
        },
        name);
    outputs = fn(inputs);
  }
  std::vector<Tensor> values;
  for (size_t i = 0; i < outputs.size(); i++) {
    HLA_CHECK(outputs[i].defined(), "checkpoint '", name, "': output ", i, " is undefined");
    values.push_back(outputs[i].value());
  }
  const size_t input_count = inputs.size();
  BackwardFn backward = [fn = std::move(fn), node_inputs, input_count, name](const std::vector<Tensor>& grad_outputs) {
    return recompute_backward(fn, node_inputs, input_count, name, grad_outputs);
  };
  return record_op(values, node_inputs, std::move(backward), name);
}

}  // namespace hla
