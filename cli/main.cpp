// `hla`: the one binary. Subcommands register themselves (cli/command.h); main only parses.
#include <algorithm>
#include <iostream>
#include <new>
#include <stdexcept>

#include "cli/command.h"
#include "tensor/error.h"

namespace hla::cli {

std::vector<CommandEntry>& command_registry() {
  static std::vector<CommandEntry> registry;
  return registry;
}

bool register_command(const std::string& name, const std::string& help, SetupFn setup) {
  command_registry().push_back({name, help, std::move(setup)});
  return true;
}

}  // namespace hla::cli

namespace {

// An error as the user reads it. hla's own errors say what broke; a library's bare text
// ("std::bad_alloc", "vector::_M_default_append") gets the command that was running and what
// the text means.
std::string failure_message(const std::exception& e, const CLI::App& app) {
  if (dynamic_cast<const hla::Error*>(&e)) return e.what();
  std::string doing = "hla";
  for (const CLI::App* sub : app.get_subcommands()) doing += " " + sub->get_name();
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return doing + ": out of memory (" + e.what() +
           "): a size in the config, the flags or an input file asks for more memory than this machine has";
  if (dynamic_cast<const std::length_error*>(&e))
    return doing + ": a size is beyond what a buffer can hold (" + e.what() +
           "): check the sizes in the config, the flags and the input files";
  return doing + ": " + e.what();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hla::cli;
  CLI::App app{"hla: hybrid linear-attention language models (train, evaluate, check, bench)"};
  app.require_subcommand(1);
  auto& entries = command_registry();
  std::sort(entries.begin(), entries.end(),
            [](const CommandEntry& a, const CommandEntry& b) { return a.name < b.name; });
  for (auto& e : entries) e.setup(*app.add_subcommand(e.name, e.help));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ExitCode& e) {
    return e.code;
  } catch (const std::exception& e) {
    std::cerr << "error: " << failure_message(e, app) << "\n";
    return 1;
  }
  return 0;
}
