// Fuzz target: the TOML run file of `hla train --config run.toml`. The bytes go through the
// strict run-file reader (train/run_config.h parse_run_file), are applied to a RunConfig as the
// train command applies them, and are validated as when a run starts.
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include "train/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  hla::fuzz::expect_only_hla_errors([&] {
    hla::RunConfig config;
    config.apply_run_file(hla::parse_run_file(text, "run.toml"), "run.toml");
    config.validate();
  });
  return 0;
}
