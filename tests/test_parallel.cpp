// parallel_for (nn/ops/parallel.h): every index runs exactly once for any thread count, an
// exception in a worker's range reaches the caller, a loop inside a loop runs serially, and a
// bad thread count is refused with its value.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "nn/ops/parallel.h"
#include "tensor/error.h"

using namespace hla;

TEST_CASE("parallel_for runs every index once for 1 to 7 threads") {
  const int threads_before = cpu_threads();
  for (int threads = 1; threads <= 7; threads++)
    for (int64_t n : {0, 1, 2, 5, 64, 101}) {
      set_cpu_threads(threads);
      std::vector<std::atomic<int>> hits(n);
      parallel_for(n, [&](int64_t i) { hits[i]++; });
      int64_t once = 0;
      for (const auto& h : hits) once += h.load() == 1;
      INFO("threads ", threads, " n ", n);
      CHECK(once == n);
    }
  set_cpu_threads(threads_before);
}

TEST_CASE("parallel_for rethrows a worker's exception; a nested loop runs on its caller's thread") {
  const int threads_before = cpu_threads();
  set_cpu_threads(4);
  CHECK_THROWS_WITH_AS(parallel_for(8, [](int64_t i) {
                         if (i == 7) throw std::runtime_error("index 7");
                       }),
                       "index 7", std::runtime_error);
  std::atomic<int> inner{0}, elsewhere{0};
  parallel_for(4, [&](int64_t) {
    const std::thread::id outer = std::this_thread::get_id();
    parallel_for(3, [&](int64_t) {
      inner++;
      if (std::this_thread::get_id() != outer) elsewhere++;
    });
  });
  CHECK(inner.load() == 12);
  CHECK(elsewhere.load() == 0);
  CHECK_THROWS_AS(set_cpu_threads(0), Error);
  set_cpu_threads(threads_before);
}
