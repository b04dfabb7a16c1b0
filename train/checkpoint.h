// Checkpoints: one directory per checkpoint, a model directory (nn/weights.h) plus the state
// to resume from
//   model.safetensors      parameters under their fla names (metadata format = "pt")
//   config.json            the model config (ModelConfig::to_json, or any JSON the caller gives)
//   optimizer.safetensors  optimizer state (Optimizer::state)
//   trainer_state.json     step, data position, schedule, settings, last step's metrics
//
// Writing is all-or-nothing: the files go to DIR.tmp-<pid>; only when all are complete does an
// existing DIR move aside (DIR.old-<pid>), the new one take its name, and the old one get
// deleted. A failure while writing removes the temporary directory and leaves DIR as it was.
// Loading the weights (load_model_weights, nn/weights.h) checks every name, shape and dtype
// against the model and names the file and tensor in each error.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "nn/weights.h"
#include "train/optim.h"

namespace hla {

struct CheckpointData {
  const ParameterList* params = nullptr;
  nlohmann::json model_config;
  const Optimizer* optimizer = nullptr;  // optional: no optimizer.safetensors without it
  nlohmann::json trainer_state;
};

// Called with the temporary directory after every file is written and before the rename
// (tests throw from it to simulate an interrupted save).
using BeforeCommitHook = std::function<void(const std::string& tmp_dir)>;

void save_checkpoint(const std::string& dir, const CheckpointData& data,
                     const BeforeCommitHook& before_commit = {});

// Restores optimizer.safetensors into `optimizer` (the weights: load_model_weights).
void load_optimizer_state(const std::string& dir, Optimizer& optimizer);

}  // namespace hla
