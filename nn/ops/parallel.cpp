// parallel_for and the CPU thread count (see parallel.h). Threads are started per call: the
// references call it a few dozen times per training step, where starting two threads costs
// tens of microseconds against milliseconds of work, and nothing outlives the call.
#include "nn/ops/parallel.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "tensor/error.h"

namespace hla {
namespace {

// HLA_CPU_THREADS when set, else the hardware threads (at least 1).
int default_threads() {
  const char* env = std::getenv("HLA_CPU_THREADS");
  if (!env) return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  HLA_CHECK(end != env && *end == '\0' && n >= 1 && n <= 4096,
            "HLA_CPU_THREADS must be a whole number in [1, 4096], got '", env, "'");
  return static_cast<int>(n);
}

std::atomic<int> g_threads{0};      // 0: not read yet
thread_local bool t_inside = false;  // this thread runs a range of some parallel_for

}  // namespace

int cpu_threads() {
  int n = g_threads.load();
  if (n == 0) {
    n = default_threads();
    g_threads.store(n);
  }
  return n;
}

void set_cpu_threads(int n) {
  HLA_CHECK(n >= 1, "set_cpu_threads: the thread count must be >= 1, got ", n);
  g_threads.store(n);
}

void parallel_for(int64_t n, const std::function<void(int64_t)>& body) {
  const int64_t ranges = t_inside ? 1 : std::min<int64_t>(cpu_threads(), n);
  if (ranges <= 1) {
    for (int64_t i = 0; i < n; i++) body(i);
    return;
  }
  // Range r covers [n * r / ranges, n * (r + 1) / ranges): sizes differ by at most one.
  std::vector<std::exception_ptr> errors(ranges);
  auto run_range = [&](int64_t r) {
    t_inside = true;
    try {
      for (int64_t i = n * r / ranges; i < n * (r + 1) / ranges; i++) body(i);
    } catch (...) {
      errors[r] = std::current_exception();
    }
    t_inside = false;
  };
  std::vector<std::thread> workers;
  for (int64_t r = 1; r < ranges; r++) workers.emplace_back(run_range, r);
  run_range(0);
  for (std::thread& w : workers) w.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace hla
