// `hla`: the one binary. Subcommands register themselves (cli/command.h); main only parses.
#include <algorithm>
#include <iostream>

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
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
