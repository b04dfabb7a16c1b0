// What every fuzz target shares: the input bytes as a file in a directory of the process's
// own, and the rule the targets check. For bad input an hla::Error is the correct answer, and
// its message stays short (it names the file and field, it does not echo the input); a crash,
// a sanitizer report, a hang, an out-of-memory or any other exception is a finding.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "tensor/error.h"

namespace hla::fuzz {

// An hla::Error longer than this quotes far more of the input than the ~100-character excerpt
// the error rules allow.
constexpr size_t kMaxErrorChars = 2000;

// A directory made once per process (removed at exit), for the input and whatever a target
// prepares next to it.
const std::string& scratch_dir();

// Writes the bytes to scratch_dir()/name and returns that path.
std::string write_input(const std::string& name, const uint8_t* data, size_t size);

// Reports a finding on stderr and aborts (libFuzzer saves the input that caused it).
[[noreturn]] void finding(const std::string& what);

// Whether HLA_FUZZ_VERBOSE is set: then every outcome is printed (to check the seeds).
bool verbose();

// Runs `read`: returning or throwing a short hla::Error is the correct outcome.
template <class F>
void expect_only_hla_errors(F&& read) {
  try {
    read();
    if (verbose()) std::fprintf(stderr, "accepted\n");
  } catch (const hla::Error& e) {
    std::string message = e.what();
    if (verbose()) std::fprintf(stderr, "hla::Error: %s\n", message.c_str());
    if (message.size() > kMaxErrorChars)
      finding("an hla::Error of " + std::to_string(message.size()) + " characters: " + message.substr(0, 300));
  } catch (const std::exception& e) {
    finding(std::string("an exception that is not an hla::Error: ") + e.what());
  } catch (...) {
    finding("an exception that is not a std::exception");
  }
}

}  // namespace hla::fuzz
