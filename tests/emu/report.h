// The emulator tests' error rows: relative RMS (and max) errors of a kernel's output against a
// reference, one printed line per output, checked against a tolerance; g_fail remembers a failure
// for the exit status, g_rows counts the rows.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

struct Err {
  double max_abs = 0, ref_max = 0, sq = 0, ref_sq = 0;
  void add(double got, double ref) {
    max_abs = std::max(max_abs, std::abs(got - ref)), ref_max = std::max(ref_max, std::abs(ref));
    sq += (got - ref) * (got - ref), ref_sq += ref * ref;
  }
  double rms_rel() const { return std::sqrt(sq / std::max(ref_sq, 1e-300)); }
};
inline bool g_fail = false;
inline int g_rows = 0;
inline void report(const std::string& what, const char* name, const Err& e, double tol) {
  const bool ok = e.rms_rel() <= tol && std::isfinite(e.sq);
  if (!ok) g_fail = true;
  g_rows++;
  std::printf("%-50s %-4s max_abs %.3e  max_abs/max|ref| %.3e  rms_rel %.3e %s\n", what.c_str(), name, e.max_abs,
              e.max_abs / std::max(e.ref_max, 1e-300), e.rms_rel(), ok ? "ok" : "FAIL");
}
