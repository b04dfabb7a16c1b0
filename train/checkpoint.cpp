// Checkpoint directories, written to a temporary directory and renamed into place.
#include "train/checkpoint.h"

#include <unistd.h>

#include <filesystem>

#include "tensor/safetensors.h"

namespace fs = std::filesystem;

namespace hla {

namespace {

void write_files(const std::string& tmp, const CheckpointData& data) {
  save_model_weights(tmp, *data.params);
  write_json_file(tmp + "/" + kModelConfigFile, data.model_config);
  if (data.optimizer)
    save_safetensors(tmp + "/optimizer.safetensors", data.optimizer->state(),
                     data.optimizer->state_metadata());
  write_json_file(tmp + "/trainer_state.json", data.trainer_state);
}

// Replaces `dir` by `tmp`; the old directory is removed only after the new one has its name.
void commit(const std::string& tmp, const std::string& dir) {
  std::string old = dir + ".old-" + std::to_string(getpid());
  bool had_old = fs::exists(dir);
  HLA_CHECK(!had_old || fs::is_empty(dir) || fs::exists(dir + "/" + kModelWeightsFile),
            "refusing to replace ", dir, ": it exists and is not a checkpoint directory");
  if (had_old) {
    fs::remove_all(old);
    fs::rename(dir, old);
  }
  fs::rename(tmp, dir);
  if (had_old) fs::remove_all(old);
}

}  // namespace

void save_checkpoint(const std::string& dir, const CheckpointData& data,
                     const BeforeCommitHook& before_commit) {
  HLA_CHECK(data.params, "save_checkpoint: no parameters given for ", dir);
  std::string clean = dir;
  while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
  std::string tmp = clean + ".tmp-" + std::to_string(getpid());
  try {
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    write_files(tmp, data);
    if (before_commit) before_commit(tmp);
    commit(tmp, clean);
  } catch (const std::exception& e) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    fail("checkpoint ", clean, " not written (any previous checkpoint there is kept): ", e.what());
  }
}

void load_optimizer_state(const std::string& dir, Optimizer& optimizer) {
  std::string path = dir + "/optimizer.safetensors";
  HLA_CHECK(fs::exists(path), "checkpoint ", dir, ": no optimizer.safetensors to resume from");
  optimizer.load_state(load_safetensors(path));
}

}  // namespace hla
