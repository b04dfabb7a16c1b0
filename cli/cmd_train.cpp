// `hla train --config run.toml [--section.key value ...] [--device cpu|cuda] [--resume DIR]`
//
// Every setting of train/run_config.h is a flag --section.key. The TOML run file uses the same
// names in sections ([model], [data], [optim], [train]); a flag on the command line wins over
// the file. CLI11 reads the TOML (CLI::ConfigTOML) but does not map sections onto dotted flag
// names by itself, so the items are applied here, and an unknown key is an error naming the
// file and the key.
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

void apply_run_file(CLI::App& sub, TrainCommand& cmd) {
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(cmd.config_file);
  } catch (const CLI::Error& e) {
    hla::fail(cmd.config_file, ": ", e.what());
  }
  for (const CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // section open / close markers
    std::string key = item.fullname();
    CLI::Option* option = item.parents.empty() ? nullptr : sub.get_option_no_throw("--" + key);
    HLA_CHECK(option, cmd.config_file, ": unknown setting '", key,
              "' (settings are [model], [data], [optim], [train] keys; `hla train --help` lists them)");
    cmd.config.explicitly_set.insert(key);
    if (option->count() > 0) continue;  // the command line wins
    option->add_result(item.inputs);
    try {
      option->run_callback();
    } catch (const CLI::Error& e) {
      hla::fail(cmd.config_file, ": setting '", key, "': ", e.what());
    }
  }
}

template <class T>
void add_flag(CLI::App& sub, const std::string& names, T& value, const char* help) {
  sub.add_option(names, value, help)->capture_default_str();
}

// Routing is an enum: the flag takes its name, parsed once here (the error names the flag,
// the value and the choices; a run file's key gets the file's name in front).
void add_flag(CLI::App& sub, const std::string& names, hla::Routing& value, const char* help) {
  sub.add_option_function<std::string>(
         names,
         [&value, names](const std::string& text) {
           try {
             value = hla::parse_routing(text, names);
           } catch (const hla::Error& e) {
             throw CLI::ValidationError(e.what());
           }
         },
         help)
      ->default_str(hla::routing_name(value));
}

void setup(CLI::App& sub) {
  auto cmd = std::make_shared<TrainCommand>();
  sub.add_option("--config", cmd->config_file, "TOML run file with [model] [data] [optim] [train]")
      ->check(CLI::ExistingFile);
  sub.add_option("--resume", cmd->resume, "checkpoint directory to resume from (bit-exact)")
      ->check(CLI::ExistingDirectory);
  hla::visit_settings(cmd->config, [&](const std::string& section, const std::string& key,
                                       auto& value, const char* help) {
    std::string names = "--" + section + "." + key;
    if (section == "train" && key == "device") names += ",--device";
    add_flag(sub, names, value, help);
  });
  sub.callback([&sub, cmd] {
    for (CLI::Option* option : sub.get_options())
      if (option->count() > 0 && option->get_name().rfind("--", 0) == 0) {
        std::string name = option->get_name().substr(2);
        if (name.find('.') != std::string::npos) cmd->config.explicitly_set.insert(name);
      }
    if (!cmd->config_file.empty()) apply_run_file(sub, *cmd);
    hla::ValMetrics final_val = hla::run_training(cmd->config, cmd->resume, std::cout);
    std::cout << "final: " << final_val.to_json().dump() << std::endl;
  });
}

const bool registered = hla::cli::register_command(
    "train", "Train a hybrid model from a TOML run file and/or --section.key flags", setup);

}  // namespace
