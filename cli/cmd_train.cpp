// `hla train --config run.toml [--section.key value ...] [--device cpu|cuda] [--resume DIR]`
//
// Every setting of train/run_config.h is a flag --section.key. The TOML run file uses the same
// names in sections ([model], [data], [optim], [train]); a flag on the command line wins over
// the file. The file is read by train/run_config's strict reader (CLI11's own TOML reader drops
// the values' types and cuts strings at '#' or spaces), after the flags are parsed.
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
  hla::visit_settings(cmd->config, [&](const std::string& section, const std::string& key,
                                       auto& value, const char* help) {
    const std::string flag = "--" + section + "." + key;
    add_flag(sub, section == "train" && key == "device" ? flag + ",--device" : flag, value, flag, help);
  });
  sub.callback([&sub, cmd] {
    for (CLI::Option* option : sub.get_options())
      if (option->count() > 0 && option->get_name().rfind("--", 0) == 0) {
        std::string name = option->get_name().substr(2);
        if (name.find('.') != std::string::npos) cmd->config.explicitly_set.insert(name);
      }
    if (!cmd->config_file.empty()) cmd->config.apply_run_file(hla::read_run_file(cmd->config_file), cmd->config_file);
    hla::ValMetrics final_val = hla::run_training(cmd->config, cmd->resume, std::cout);
    std::cout << "final: " << final_val.to_json().dump() << std::endl;
  });
}

const bool registered = hla::cli::register_command(
    "train", "Train a hybrid model from a TOML run file and/or --section.key flags", setup);

}  // namespace
