// `hla train --config run.toml [--section.key value ...] [--device cpu|cuda] [--resume DIR]`
//
// Every setting of train/run_config.h is a flag --section.key. The TOML run file uses the same
// names in sections ([model], [data], [optim], [train]); a flag on the command line wins over
// the file (train/run_config.cpp: add_setting_flags, apply_given_settings).
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "train/trainer.h"

namespace {

struct TrainCommand {
  hla::RunConfig config;
  std::string config_file;
  std::string resume;
};

void setup(CLI::App& sub) {
  auto cmd = std::make_shared<TrainCommand>();
  sub.add_option("--config", cmd->config_file, "TOML run file with [model] [data] [optim] [train]")
      ->check(CLI::ExistingFile);
  sub.add_option("--resume", cmd->resume, "checkpoint directory to resume from (bit-exact)")
      ->check(CLI::ExistingDirectory);
  hla::add_setting_flags(sub, cmd->config);
  sub.callback([&sub, cmd] {
    hla::apply_given_settings(sub, cmd->config, cmd->config_file);
    hla::ValMetrics final_val = hla::run_training(cmd->config, cmd->resume, std::cout);
    std::cout << "final: " << final_val.to_json().dump() << std::endl;
  });
}

const bool registered = hla::cli::register_command(
    "train", "Train a hybrid model from a TOML run file and/or --section.key flags", setup);

}  // namespace
