// Fuzz target: config.json (ModelConfig::load, nn/config.h). A config it accepts is written
// back with to_json and its layer pattern is drawn, the two things every run does next.
#include "nn/config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = hla::fuzz::write_input("config.json", data, size);
  hla::fuzz::expect_only_hla_errors([&] {
    hla::ModelConfig config = hla::ModelConfig::load(path);
    (void)config.to_json().dump();
    (void)config.pattern();
  });
  return 0;
}
