// A full disk for the write-path tests: while a FullDisk is alive, a write that would grow any
// file past `bytes` fails (RLIMIT_FSIZE with SIGXFSZ ignored gives EFBIG, as a full disk gives
// ENOSPC), so a test can check that the error names the file and the old file survives.
// error_on_full_disk runs one write that way and returns its error message.
#pragma once
#include <doctest/doctest.h>
#include <sys/resource.h>

#include <csignal>
#include <string>

#include "tests/test_util.h"

namespace hla::testing {

class FullDisk {
 public:
  explicit FullDisk(rlim_t bytes = 16) {
    REQUIRE(getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = saved_;
    small.rlim_cur = bytes;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  }
  ~FullDisk() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FullDisk(const FullDisk&) = delete;
  FullDisk& operator=(const FullDisk&) = delete;

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = SIG_DFL;
};

// The message of the hla::Error that write() throws while the disk is full ("(no error)" if none).
template <class Fn>
std::string error_on_full_disk(Fn write, rlim_t bytes = 16) {
  FullDisk full(bytes);
  return error_of(write);
}

}  // namespace hla::testing
