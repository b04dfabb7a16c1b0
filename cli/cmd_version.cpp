// `hla version`: version, build type, whether CUDA was compiled in, and the GPU if any.
#include <iostream>

#include "cli/command.h"
#include "tensor/tensor.h"
#ifdef HLA_CUDA
#include "cuda/runtime.h"
#endif

namespace {

void print_version() {
  std::cout << "hla " << HLA_VERSION << "\n";
  std::cout << "build: " << HLA_BUILD_TYPE << "\n";
#ifdef HLA_CUDA
  std::cout << "cuda: yes\n";
  int n = hla::cuda_device_count();
  if (n == 0) std::cout << "gpu: none found\n";
  for (int i = 0; i < n; i++) std::cout << "gpu " << i << ": " << hla::cuda::device_name(i) << "\n";
#else
  std::cout << "cuda: no (built without nvcc)\n";
#endif
}

const bool registered = hla::cli::register_command(
    "version", "Print version, build type, CUDA support and GPU name",
    [](CLI::App& sub) { sub.callback(print_version); });

}  // namespace
