// Helpers shared by the tests: the relative error that compares a result with a reference
// written in the test, and the message of the hla::Error a call throws.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tensor/error.h"
#include "tensor/tensor.h"

namespace hla::testing {

// max |a - ref| / max |ref|, or max |a - ref| when ref is all zeros (e.g. dq with window 1).
inline double max_rel_err(const std::vector<double>& a, const std::vector<double>& ref) {
  REQUIRE(a.size() == ref.size());
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); i++) {
    err = std::max(err, std::abs(a[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return scale > 0 ? err / scale : err;
}
inline double max_rel_err(const Tensor& a, const std::vector<double>& ref) {
  return max_rel_err(a.to_f64_vector(), ref);
}
inline double max_rel_err(const Tensor& a, const Tensor& ref) {
  return max_rel_err(a.to_f64_vector(), ref.to_f64_vector());
}

// The message of the hla::Error that fn throws; "(no error)" when it returns.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace hla::testing
