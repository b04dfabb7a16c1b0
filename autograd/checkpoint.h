// Activation checkpointing: checkpoint(fn, inputs, name) trades compute for memory. The forward
// runs fn without recording a graph, so fn's intermediate values are freed at once; one Node
// keeps only the inputs. Its backward runs fn again with recording on and back-propagates the
// outputs' gradients through that recomputed graph (which frees itself as it goes).
//
// fn may read Vars it was not given (parameters, a routed tensor): the first run notes every
// such Var that requires grad (InputHookGuard in var.h sees each op's inputs) and they become
// inputs of the Node too. In the recompute, the interior Vars among the Node's inputs are
// replaced by detached copies, so the inner backward stops at them and their gradients leave
// through the Node; leaves (parameters, a leaf input) stay themselves and accumulate their
// gradients one contribution at a time, as without recompute, so they are bit-identical, also
// under gradient accumulation (e + a + b, never e + (a + b)). Being the Node's inputs, they
// count as its consumers for run_backward's on_leaf_ready: a parameter is reported after the
// Node has run, with its complete gradient.
//
// fn must be a function of its inputs and what it reads (no state it changes, no randomness):
// it runs twice. Nested checkpoints are refused.
#pragma once
#include <functional>
#include <vector>

#include "autograd/var.h"

namespace hla {

using CheckpointFn = std::function<std::vector<Var>(const std::vector<Var>& inputs)>;

// fn(inputs) with recompute in the backward; every output must be defined. Without grad mode
// it is fn(inputs).
std::vector<Var> checkpoint(CheckpointFn fn, const std::vector<Var>& inputs, const char* name);

}  // namespace hla
