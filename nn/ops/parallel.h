// parallel_for: the CPU references' one threading helper (issue 14 item 7).
//
// The references loop over independent sequences (batch x heads, batch x channels); this splits
// such a loop into contiguous ranges, one per thread. Each index must write memory no other
// index writes, and the loop body must not depend on which thread runs it: then the result is
// bit for bit the same for every thread count (the tests and gradcheck do not move), and a
// reduction that several indices share stays inside one index, in the serial order.
//
// The thread count is cpu_threads(): the environment variable HLA_CPU_THREADS (a whole number
// >= 1) when set, else the machine's hardware threads; set_cpu_threads overrides both. A loop
// started inside another parallel_for runs serially on its caller's thread.
#pragma once
#include <cstdint>
#include <functional>

namespace hla {

int cpu_threads();
void set_cpu_threads(int n);  // n >= 1

// Runs body(i) for i = 0 .. n-1, at most cpu_threads() ranges at once; an exception in any
// range is rethrown on the caller's thread after every range has stopped.
void parallel_for(int64_t n, const std::function<void(int64_t)>& body);

}  // namespace hla
