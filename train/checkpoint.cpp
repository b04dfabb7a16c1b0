// Checkpoint directories: written to a temporary directory, synced, renamed into place; what an
// interrupted save leaves beside a checkpoint is finished or removed by the next start.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "tensor/math.h"
#include "tensor/safetensors.h"

namespace fs = std::filesystem;

namespace hla {

namespace {

constexpr char kTmpTag[] = ".tmp-", kOldTag[] = ".old-";

std::string without_trailing_slash(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

std::string tagged(const std::string& dir, const char* tag, long pid) { return dir + tag + std::to_string(pid); }

std::string parent_of(const std::string& dir) {
  fs::path parent = fs::path(dir).parent_path();
  return parent.empty() ? "." : parent.string();
}

// fsync of a file or a directory; the error names it and the errno text.
void sync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open ", path, " to fsync it (", std::strerror(errno), ")");
  int rc = ::fsync(fd);
  int fsync_errno = errno;
  ::close(fd);
  if (rc != 0) fail("fsync failed on ", path, " (", std::strerror(fsync_errno), ")");
}

// Every file of a new checkpoint, then its directory: on disk before it takes the final name.
void sync_tree(const std::string& dir) {
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) sync_path(e.path().string());
  sync_path(dir);
}

bool other_process_running(long pid) { return pid != getpid() && (::kill(pid, 0) == 0 || errno == EPERM); }

// The pid P of "<name><tag>P", or 0 when `entry` is not of that form.
long tagged_pid(const std::string& entry, const std::string& name, const char* tag) {
  const std::string prefix = name + tag;
  if (entry.size() <= prefix.size() || entry.compare(0, prefix.size(), prefix) != 0) return 0;
  const std::string digits = entry.substr(prefix.size());
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stol(digits);
}

// What interrupted saves of `dir` left: per pid, whether DIR.tmp-P and DIR.old-P exist. Pids of
// other running processes are left out (their saves are in progress).
std::map<long, std::pair<bool, bool>> leftovers(const std::string& dir) {
  std::map<long, std::pair<bool, bool>> found;
  const std::string parent = parent_of(dir), name = fs::path(dir).filename().string();
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(parent, ec)) {
    const std::string entry = e.path().filename().string();
    if (long pid = tagged_pid(entry, name, kTmpTag); pid > 0 && !other_process_running(pid)) found[pid].first = true;
    if (long pid = tagged_pid(entry, name, kOldTag); pid > 0 && !other_process_running(pid)) found[pid].second = true;
  }
  return found;
}

// Puts a leftover in dir's place (no dir exists), or returns false when pid left none that is complete.
bool restore_from(const std::string& dir, long pid, bool has_tmp, bool has_old, std::vector<std::string>& notes) {
  if (!has_old) return false;  // a DIR.tmp-P without DIR.old-P may be unfinished
  const std::string from = has_tmp ? tagged(dir, kTmpTag, pid) : tagged(dir, kOldTag, pid);
  fs::rename(from, dir);
  sync_path(parent_of(dir));
  notes.push_back("restored " + dir + " from " + from +
                  (has_tmp ? " (a save killed between its renames; this new checkpoint was complete)"
                           : " (the previous checkpoint, moved aside by a save that did not finish)"));
  return true;
}

void write_files(const std::string& tmp, const CheckpointData& data, const NamedTensors& optimizer_state) {
  save_model_weights(tmp, *data.params);
  write_model_config_file(tmp + "/" + kModelConfigFile, data.model_config);
  if (data.optimizer)
    save_safetensors(tmp + "/optimizer.safetensors", optimizer_state, data.optimizer->state_metadata());
  write_json_file(tmp + "/trainer_state.json", data.trainer_state);
}

// Fails with "<what> '<tensor>' holds NaN or Inf values<consequence>" for the first such tensor.
void refuse_non_finite(const NamedTensors& tensors, const std::string& what, const char* consequence = "") {
  const std::string bad = first_non_finite(tensors);
  if (!bad.empty()) fail(what, " '", bad, "' holds NaN or Inf values", consequence);
}

constexpr char kDamaged[] = ": the file is damaged (a save never writes them)";

// The two renames; when the second fails, the previous checkpoint gets its name back.
void move_into_place(const std::string& tmp, const std::string& dir, const std::string& old, bool had_old,
                     const CommitHook& hook) {
  try {
    if (had_old) fs::rename(dir, old);
    if (hook) hook(CommitPoint::OldMovedAside, tmp);
    fs::rename(tmp, dir);
  } catch (...) {
    std::error_code ignored;
    if (had_old && !fs::exists(dir)) fs::rename(old, dir, ignored);
    throw;
  }
}

}  // namespace

std::vector<std::string> recover_checkpoint(const std::string& dir_given) {
  const std::string dir = without_trailing_slash(dir_given);
  std::vector<std::string> notes;
  bool have_dir = fs::exists(dir);
  for (const auto& [pid, present] : leftovers(dir))
    if (!have_dir) have_dir = restore_from(dir, pid, present.first, present.second, notes);
  for (const auto& [pid, present] : leftovers(dir))
    for (const char* tag : {kTmpTag, kOldTag})
      if (fs::remove_all(tagged(dir, tag, pid)) > 0)
        notes.push_back("removed " + tagged(dir, tag, pid) + " (left by a save that did not finish)");
  return notes;
}

void save_checkpoint(const std::string& dir_given, const CheckpointData& data, const CommitHook& hook) {
  HLA_CHECK(data.params, "save_checkpoint: no parameters given for ", dir_given);
  const std::string dir = without_trailing_slash(dir_given);
  const std::string tmp = tagged(dir, kTmpTag, getpid()), old = tagged(dir, kOldTag, getpid());
  try {
    recover_checkpoint(dir);
    const bool had_old = fs::exists(dir);
    if (had_old && !fs::is_empty(dir) && !fs::exists(dir + "/" + kModelWeightsFile))
      fail("refusing to replace ", dir, ": it exists and is not a checkpoint directory");
    NamedTensors optimizer_state = data.optimizer_state ? *data.optimizer_state
                                   : data.optimizer     ? data.optimizer->state()
                                                        : NamedTensors{};
    refuse_non_finite(values_of(*data.params), "parameter");
    refuse_non_finite(optimizer_state, "optimizer state");
    fs::create_directories(tmp);
    write_files(tmp, data, optimizer_state);
    sync_tree(tmp);
    if (hook) hook(CommitPoint::FilesWritten, tmp);
    move_into_place(tmp, dir, old, had_old, hook);
  } catch (const std::exception& e) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    fail("checkpoint ", dir, " not written (any previous checkpoint there is kept): ", e.what());
  }
  sync_path(parent_of(dir));  // the renames on disk before the previous checkpoint goes
  if (hook) hook(CommitPoint::NewInPlace, tmp);
  std::error_code ignored;
  fs::remove_all(old, ignored);  // should this fail, the next start removes it
}

void load_checkpoint(const std::string& dir, const ParameterList& params, Optimizer& optimizer) {
  load_model_weights(dir, params);  // refuses non-finite weights before copying them
  load_optimizer_state(dir, optimizer);
}

void load_optimizer_state(const std::string& dir, Optimizer& optimizer) {
  const std::string path = dir + "/optimizer.safetensors";
  if (!fs::exists(path)) fail("checkpoint ", dir, ": no optimizer.safetensors to resume from");
  optimizer.load_state(load_safetensors(path));
  refuse_non_finite(optimizer.state(), path + ": tensor", kDamaged);
}

std::string first_non_finite(const NamedTensors& tensors) {
  for (const auto& [name, t] : tensors)
    if (!std::isfinite(sq_norm(t))) return name;
  return "";
}

NamedTensors values_of(const ParameterList& params) {
  NamedTensors out;
  for (const NamedParameter& p : params) out.emplace_back(p.name, p.var.value());
  return out;
}

NamedTensors grads_of(const ParameterList& params) {
  NamedTensors out;
  for (const NamedParameter& p : params)
    if (p.var.grad().defined()) out.emplace_back(p.name, p.var.grad());
  return out;
}

}  // namespace hla
