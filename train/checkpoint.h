// Checkpoints: one directory per checkpoint, a model directory (nn/weights.h) plus the state
// to resume from
//   model.safetensors      parameters under their fla names (metadata format = "pt")
//   config.json            the model config (ModelConfig::to_json, or any JSON the caller gives)
//   optimizer.safetensors  optimizer state (Optimizer::state)
//   trainer_state.json     step, data position, schedule, settings, last step's metrics
//
// Writing is all-or-nothing. The files go to DIR.tmp-<pid> and are fsynced with that directory;
// then an existing DIR moves aside (DIR.old-<pid>), the new one takes its name, the parent is
// fsynced and the old one deleted. A failure while writing removes the temporary directory and
// leaves DIR as it was. A process killed between the two renames leaves no DIR:
// recover_checkpoint, which every save and resume runs first, puts it back (the new one, which
// was complete before the first rename) and removes what interrupted saves left behind.
// A checkpoint never holds NaN or Inf: a save refuses them, and a load that finds them reports
// the file as corrupt. Loading the weights (load_model_weights, nn/weights.h) checks every name,
// shape and dtype against the model and names the file and tensor in each error.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/weights.h"
#include "train/optim.h"

namespace hla {

struct CheckpointData {
  const ParameterList* params = nullptr;
  nlohmann::json model_config;
  const Optimizer* optimizer = nullptr;  // optional: no optimizer.safetensors without it
  const NamedTensors* optimizer_state = nullptr;  // optional: written instead of optimizer->state() (ZeRO-1's gathered state)
  nlohmann::json trainer_state;
};

// The points of a save where a crash leaves a distinct state on disk.
enum class CommitPoint {
  FilesWritten,   // DIR.tmp-<pid> complete and synced; DIR untouched
  OldMovedAside,  // DIR renamed to DIR.old-<pid>; no DIR (the gap recover_checkpoint closes)
  NewInPlace,     // DIR is the new checkpoint; DIR.old-<pid> not yet deleted
};
// Called at each point with the temporary directory. Tests throw from it to simulate a failed
// save, or kill the process to simulate a crash.
using CommitHook = std::function<void(CommitPoint point, const std::string& tmp_dir)>;

void save_checkpoint(const std::string& dir, const CheckpointData& data, const CommitHook& hook = {});

// Finishes or undoes what interrupted saves left beside `dir`. Only DIR.tmp-<pid> and
// DIR.old-<pid> of processes that no longer run are touched (and those of this process's pid,
// which a restarted container reuses); another live process's are its save in progress.
//   no DIR, DIR.old-P and DIR.tmp-P: killed between the renames; DIR.tmp-P becomes DIR
//   no DIR, DIR.old-P only:           DIR.old-P becomes DIR
//   anything else left:               removed (an unfinished DIR.tmp-P, a DIR.old-P beside DIR)
// Returns one line per action taken, for the log.
std::vector<std::string> recover_checkpoint(const std::string& dir);

// Loads the weights and the optimizer state of a checkpoint into `params` and `optimizer`.
// A NaN or Inf found there means a damaged file; the error names the file and the tensor.
void load_checkpoint(const std::string& dir, const ParameterList& params, Optimizer& optimizer);
// The optimizer part of load_checkpoint.
void load_optimizer_state(const std::string& dir, Optimizer& optimizer);

// The name of the first tensor holding a NaN or an Inf, or "" when every value is finite. One
// reduction per tensor, on the tensor's device: the sum of squares in double, which a NaN or Inf
// anywhere makes non-finite (F32 and BF16 squares cannot overflow it; F64 values beyond 1e154
// would count as non-finite).
std::string first_non_finite(const NamedTensors& tensors);
NamedTensors values_of(const ParameterList& params);
NamedTensors grads_of(const ParameterList& params);  // those that have one

}  // namespace hla
