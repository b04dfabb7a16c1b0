// Fuzz target: the TOML run file of `hla train --config run.toml`. It lives in the CLI
// (cli/cmd_train.cpp: CLI11's TOML reader, each item applied to its --section.key flag, then
// RunConfig::validate when the run starts), so the target sets the train command up exactly as
// the hla binary does (cli/main.cpp's registry, linked with main renamed) and parses
//   train --config <input> --train.out_dir ""
// The flag wins over the file and is the last thing validate() refuses, so a run file that
// passes every check ends in that hla::Error instead of a training run.
#include <algorithm>

#include "cli/command.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void parse_train_command(const std::string& run_file) {
  auto& registry = hla::cli::command_registry();
  auto train = std::find_if(registry.begin(), registry.end(),
                            [](const hla::cli::CommandEntry& e) { return e.name == "train"; });
  if (train == registry.end()) hla::fuzz::finding("no train command registered");
  CLI::App app;
  train->setup(*app.add_subcommand("train"));
  std::vector<std::string> args = {"hla", "train", "--config", run_file, "--train.out_dir", ""};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  app.parse(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = hla::fuzz::write_input("run.toml", data, size);
  hla::fuzz::expect_only_hla_errors([&] { parse_train_command(path); });
  return 0;
}
