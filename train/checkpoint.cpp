// Checkpoint directories, written to a temporary directory and renamed into place.
#include "train/checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace fs = std::filesystem;

namespace hla {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  HLA_CHECK(in, "cannot open ", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  HLA_CHECK(out, "cannot create ", path);
  out << j.dump(2) << "\n";
  out.close();
  HLA_CHECK(out, "failed writing ", path);
}

namespace {

void write_files(const std::string& tmp, const CheckpointData& data) {
  NamedTensors weights;
  for (const NamedParameter& p : *data.params) weights.emplace_back(p.name, p.var.value().to(Device::CPU));
  save_safetensors(tmp + "/model.safetensors", weights, {{"format", "pt"}});
  write_json_file(tmp + "/config.json", data.model_config);
  if (data.optimizer)
    save_safetensors(tmp + "/optimizer.safetensors", data.optimizer->state(),
                     data.optimizer->state_metadata());
  write_json_file(tmp + "/trainer_state.json", data.trainer_state);
}

// Replaces `dir` by `tmp`; the old directory is removed only after the new one has its name.
void commit(const std::string& tmp, const std::string& dir) {
  std::string old = dir + ".old-" + std::to_string(getpid());
  bool had_old = fs::exists(dir);
  HLA_CHECK(!had_old || fs::is_empty(dir) || fs::exists(dir + "/model.safetensors"),
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

void load_model_weights(const std::string& dir, const ParameterList& params) {
  std::string path = dir + "/model.safetensors";
  HLA_CHECK(fs::exists(path), "checkpoint ", dir, ": no model.safetensors (is it a checkpoint directory?)");
  SafetensorsFile file = load_safetensors(path);
  std::set<std::string> names;
  for (const NamedParameter& p : params) {
    names.insert(p.name);
    const Tensor& saved = file.get(p.name);
    const Tensor& value = p.var.value();
    HLA_CHECK(saved.shape() == value.shape(), path, ": tensor '", p.name, "' has shape ",
              shape_str(saved.shape()), " but the model expects ", shape_str(value.shape()));
    HLA_CHECK(saved.dtype() == value.dtype(), path, ": tensor '", p.name, "' is ",
              dtype_name(saved.dtype()), " but the model expects ", dtype_name(value.dtype()));
  }
  for (const auto& [name, t] : file.tensors)
    HLA_CHECK(names.count(name), path, ": tensor '", name, "' is not a parameter of this model");
  for (const NamedParameter& p : params) {
    Var v = p.var;
    v.mutable_value().copy_(file.get(p.name));
  }
}

void load_optimizer_state(const std::string& dir, Optimizer& optimizer) {
  std::string path = dir + "/optimizer.safetensors";
  HLA_CHECK(fs::exists(path), "checkpoint ", dir, ": no optimizer.safetensors to resume from");
  optimizer.load_state(load_safetensors(path));
}

}  // namespace hla
