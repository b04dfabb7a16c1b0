// Progress bar for long evaluations (see progress.h).
#include "eval/progress.h"

#include <unistd.h>

#include <cstdio>

namespace hla::eval {

ProgressBar::ProgressBar(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      on_terminal_(isatty(fileno(stderr)) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() { finish(); }

double ProgressBar::items_per_second() const {
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return seconds > 0 ? done_ / seconds : 0.0;
}

void ProgressBar::advance(int64_t items) {
  done_ += items;
  if (!enabled_ || !on_terminal_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw(false);
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_) draw(true);
}

void ProgressBar::draw(bool final_line) {
  constexpr int kWidth = 30;
  double fraction = total_ > 0 ? static_cast<double>(done_) / total_ : 1.0;
  int filled = static_cast<int>(fraction * kWidth);
  std::string bar(filled, '#');
  bar.resize(kWidth, '.');
  double rate = items_per_second();
  double seconds_left = rate > 0 ? (total_ - done_) / rate : 0.0;
  std::fprintf(stderr, "%s%s [%s] %lld/%lld %3.0f%% %.1f items/s", on_terminal_ ? "\r" : "",
               label_.c_str(), bar.c_str(), static_cast<long long>(done_),
               static_cast<long long>(total_), 100 * fraction, rate);
  if (final_line) {
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, " in %.1fs\n", seconds);
  } else {
    std::fprintf(stderr, " ETA %.0fs   ", seconds_left);
  }
  std::fflush(stderr);
}

}  // namespace hla::eval
