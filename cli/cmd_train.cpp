// `hla train --config run.toml [--section.key value ...] [--device cpu|cuda] [--resume DIR]`
//
// Every setting of train/run_config.h is a flag --section.key. The TOML run file uses the same
// names in sections ([model], [data], [optim], [train]); a flag on the command line wins over
// the file. The file is read by train/run_config's strict reader (CLI11's own TOML reader drops
// the values' types and cuts strings at '#' or spaces), after the flags are parsed.
//
// --gpus N (= --train.gpus) > 1: this process starts N ranks of itself (dist/launch.h), each
// with --rank r added, and waits for them; a rank makes its NCCL communicator first (GPU r),
// then trains its share of every update. A build without NCCL refuses at once.
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "dist/launch.h"
#include "train/trainer.h"

namespace {

struct TrainCommand {
  hla::RunConfig config;
  std::string config_file;
  std::string resume;
  int rank = -1;  // set by the --gpus launcher: this process is that rank
};

// How long a rank waits for rank 0's NCCL unique id: every rank makes its communicator before
// anything else, so this covers process start-up only.
constexpr double kUniqueIdTimeoutS = 120;

void train(TrainCommand& cmd) {
  hla::RunConfig& config = cmd.config;
  const int gpus = static_cast<int>(config.train.gpus);
  if (gpus == 1) {
    hla::ValMetrics final_val = hla::run_training(config, cmd.resume, std::cout);
    std::cout << "final: " << final_val.to_json().dump() << std::endl;
    return;
  }
  config.validate();
  HLA_CHECK_INPUT(hla::dist::kBuiltWithNccl, hla::dist::no_nccl_message(gpus));
  HLA_CHECK_INPUT(config.train.device == "cuda", "--gpus ", gpus, " trains on GPUs: give --device cuda");
  hla::rank_share(config.data.batch_size, config.train.grad_accum, gpus);  // the batch must split
  HLA_CHECK_INPUT(hla::cuda_device_count() >= gpus, "--gpus ", gpus, ": this machine has ", hla::cuda_device_count(),
                  " GPU(s)");
  if (cmd.rank < 0) {
    const int code = hla::dist::launch_ranks(hla::dist::own_program(), hla::dist::own_command_line(), gpus,
                                             config.train.out_dir);
    if (code != 0) throw hla::cli::ExitCode{code};
    return;
  }
  try {
    auto comm = hla::dist::make_nccl_communicator(cmd.rank, gpus, hla::dist::unique_id_path(config.train.out_dir),
                                                  kUniqueIdTimeoutS);
    hla::ValMetrics final_val = hla::run_training(config, cmd.resume, std::cout, comm.get());
    if (cmd.rank == 0) std::cout << "final: " << final_val.to_json().dump() << std::endl;
  } catch (const std::exception& e) {
    hla::fail("rank ", cmd.rank, " of ", gpus, ": ", e.what());  // which process it was
  }
}

// A flag whose text is read as the setting's type (train/run_config.h read_flag), so a flag and
// the run file accept the same values and fail with the same errors.
template <class T>
void add_flag(CLI::App& sub, const std::string& names, T& value, const std::string& flag, const char* help) {
  nlohmann::json shown = value;
  sub.add_option_function<std::string>(
         names, [&value, flag](const std::string& text) { hla::read_flag(text, value, flag); }, help)
      ->default_str(shown.is_string() ? shown.get<std::string>() : shown.dump());
}

void setup(CLI::App& sub) {
  auto cmd = std::make_shared<TrainCommand>();
  sub.add_option("--config", cmd->config_file, "TOML run file with [model] [data] [optim] [train]")
      ->check(CLI::ExistingFile);
  sub.add_option("--resume", cmd->resume, "checkpoint directory to resume from (bit-exact)")
      ->check(CLI::ExistingDirectory);
  sub.add_option("--rank", cmd->rank, "(set by --gpus for the processes it starts) this process's rank")
      ->group("");
  hla::visit_settings(cmd->config, [&](const std::string& section, const std::string& key,
                                       auto& value, const char* help) {
    const std::string flag = "--" + section + "." + key;
    const bool alias = section == "train" && (key == "device" || key == "gpus");
    add_flag(sub, alias ? flag + ",--" + key : flag, value, flag, help);
  });
  sub.callback([&sub, cmd] {
    for (CLI::Option* option : sub.get_options())
      if (option->count() > 0 && option->get_name().rfind("--", 0) == 0) {
        std::string name = option->get_name().substr(2);
        if (name.find('.') != std::string::npos) cmd->config.explicitly_set.insert(name);
      }
    if (!cmd->config_file.empty()) cmd->config.apply_run_file(hla::read_run_file(cmd->config_file), cmd->config_file);
    train(*cmd);
  });
}

const bool registered = hla::cli::register_command(
    "train", "Train a hybrid model from a TOML run file and/or --section.key flags", setup);

}  // namespace
