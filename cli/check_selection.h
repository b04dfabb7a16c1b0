// What `hla gradcheck` and `hla gpu-check` share: --op picks cases of the check registry
// (nn/check/registry.h) by name or op group, --list prints them instead of running them, and
// one registration for both.
#pragma once
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "nn/check/modes.h"

namespace hla::cli {

struct CaseSelection {
  std::string op;     // only cases whose name or op group contains it; empty: every case
  bool list = false;  // print the cases and their row counts, run nothing
};

inline void add_selection_options(CLI::App& sub, CaseSelection& selection, const std::string& list_help) {
  sub.add_option("--op", selection.op, "Only cases whose name or op group contains this string");
  sub.add_flag("--list", selection.list, list_help);
}

// The cases of `mode` that the selection picks; none: "<command>: no case matches --op X" and exit 1.
inline std::vector<const check::Case*> selected_cases(const std::string& command, check::Mode mode,
                                                      const CaseSelection& selection) {
  std::vector<const check::Case*> found = check::cases(mode, {selection.op});
  if (found.empty()) {
    std::cerr << command << ": no case matches --op " << selection.op << "\n";
    throw ExitCode{1};
  }
  return found;
}

// Registers `name` as a command over the check registry's cases: --op and --list (into the
// Options' `selection`), then the options add_options adds; its callback is run(options).
template <class Options>
bool register_check_command(const std::string& name, const std::string& help, const std::string& list_help,
                            void (*add_options)(CLI::App&, Options&), void (*run)(const Options&)) {
  return register_command(name, help, [=](CLI::App& sub) {
    auto opt = std::make_shared<Options>();
    add_selection_options(sub, opt->selection, list_help);
    add_options(sub, *opt);
    sub.callback([opt, run] { run(*opt); });
  });
}

}  // namespace hla::cli
