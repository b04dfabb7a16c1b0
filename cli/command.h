// Subcommand registry for the `hla` binary. Each cli/cmd_*.cpp registers itself:
//
//   static const bool registered = hla::cli::register_command(
//       "version", "Print version, build type and GPU", [](CLI::App& sub) { ... });
//
// The setup function adds options to `sub` and sets sub.callback(...). A callback signals
// failure by throwing hla::cli::ExitCode{n} (after printing its own message) or any
// std::exception (printed as "error: ...", exit 1).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace hla::cli {

struct ExitCode {
  int code;
};

using SetupFn = std::function<void(CLI::App&)>;

struct CommandEntry {
  std::string name;
  std::string help;
  SetupFn setup;
};

std::vector<CommandEntry>& command_registry();
bool register_command(const std::string& name, const std::string& help, SetupFn setup);

}  // namespace hla::cli
