// hla::Error and the checks that throw it.
// Every failure names what broke and the values that broke it: a shape mismatch prints both
// shapes, a file error names the file and the field.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace hla {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {
inline void append(std::ostringstream&) {}
template <class A, class... Rest>
void append(std::ostringstream& os, const A& a, const Rest&... rest) {
  os << a;
  append(os, rest...);
}
}  // namespace detail

// Builds a message from any streamable pieces: fail("bad dim ", d, " in ", name).
template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  throw Error(os.str());
}

}  // namespace hla

#define HLA_CHECK(cond, ...)                                                     \
  do {                                                                           \
    if (!(cond)) ::hla::fail(__FILE__, ":", __LINE__, ": ", __VA_ARGS__);        \
  } while (0)

// A check of what a user handed us (a file, a flag, a setting): the message is the whole error,
// "<file>: <field> must be ..., got ...", with no hla source location in front of it.
#define HLA_CHECK_INPUT(cond, ...)           \
  do {                                       \
    if (!(cond)) ::hla::fail(__VA_ARGS__);   \
  } while (0)
