// Fuzz target: the safetensors reader (tensor/safetensors.h) on arbitrary file bytes. A file it
// accepts has every element of every tensor read back, so a tensor that points outside the
// data section shows up under AddressSanitizer.
#include "tensor/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = hla::fuzz::write_input("model.safetensors", data, size);
  hla::fuzz::expect_only_hla_errors([&] {
    hla::SafetensorsFile file = hla::load_safetensors(path);
    for (const auto& [name, tensor] : file.tensors) (void)tensor.to_f64_vector();
  });
  return 0;
}
