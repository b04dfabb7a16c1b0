// The scratch directory and the finding report of fuzz_util.h.
#include "tests/fuzz/fuzz_util.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace hla::fuzz {

namespace {

struct ScratchDir {
  std::string path;
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp && *tmp ? tmp : "/tmp") + "/hla-fuzz-" + std::to_string(getpid());
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

}  // namespace

const std::string& scratch_dir() {
  static ScratchDir dir;
  return dir.path;
}

std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  std::string path = scratch_dir() + "/" + name;
  std::filesystem::create_directories(scratch_dir());  // another process may have cleaned /tmp
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out.flush()) {
    std::perror(path.c_str());
    std::abort();
  }
  return path;
}

bool verbose() {
  static const bool on = std::getenv("HLA_FUZZ_VERBOSE") != nullptr;
  return on;
}

void finding(const std::string& what) {
  std::fprintf(stderr, "\nhla fuzz finding: %s\n", what.c_str());
  std::abort();
}

}  // namespace hla::fuzz
