// A one-line progress bar on stderr: label, bar, done/total, items per second, time left.
// On a terminal it redraws in place (at most 10 times a second); when stderr is not a
// terminal (logs, CI) it prints only the final line, so logs stay short.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace hla::eval {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, bool enabled = true);
  ~ProgressBar();
  void advance(int64_t items);
  void finish();  // prints the final line (once)
  double items_per_second() const;

 private:
  void draw(bool final_line);
  std::string label_;
  int64_t total_, done_ = 0;
  bool enabled_, on_terminal_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace hla::eval
