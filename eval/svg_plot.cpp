// SVG line plots (see svg_plot.h).
#include "eval/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "tensor/error.h"

namespace hla::eval {

namespace {

constexpr double kWidth = 640, kHeight = 400;
constexpr double kLeft = 70, kRight = 170, kTop = 40, kBottom = 50;  // margins; legend on the right
const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                               "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

std::string number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

struct Axis {
  double lo, hi;
  bool log;
  double to_unit(double v) const {  // 0..1 along the axis
    double a = log ? std::log2(v) : v, l = log ? std::log2(lo) : lo, h = log ? std::log2(hi) : hi;
    return h > l ? (a - l) / (h - l) : 0.5;
  }
  std::vector<double> ticks() const {
    std::vector<double> t;
    if (log) {
      for (double v = std::exp2(std::floor(std::log2(lo))); v <= hi * 1.0001; v *= 2)
        if (v >= lo * 0.9999) t.push_back(v);
    } else {
      for (int i = 0; i <= 5; i++) t.push_back(lo + (hi - lo) * i / 5);
    }
    return t;
  }
};

}  // namespace

std::string line_plot_svg(const std::vector<PlotSeries>& series, const PlotOptions& options) {
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const PlotSeries& s : series) {
    HLA_CHECK(s.x.size() == s.y.size(), "plot series ", s.name, " has ", s.x.size(), " x and ",
              s.y.size(), " y values");
    for (size_t i = 0; i < s.x.size(); i++) {
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]);
      y_hi = std::max(y_hi, s.y[i]);
    }
  }
  HLA_CHECK(std::isfinite(x_lo), "a plot needs at least one point");
  if (options.y_min != 0 || options.y_max != 0) {
    y_lo = options.y_min;
    y_hi = options.y_max;
  }
  const Axis x_axis{x_lo, x_hi, options.log_x}, y_axis{y_lo, y_hi, false};
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + x_axis.to_unit(x) * plot_w; };
  auto py = [&](double y) { return kTop + (1 - y_axis.to_unit(y)) * plot_h; };

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\""
      << kHeight << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << kLeft + plot_w / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
      << escape(options.title) << "</text>\n"
      << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << plot_w << "\" height=\""
      << plot_h << "\" fill=\"none\" stroke=\"black\"/>\n";
  for (double t : x_axis.ticks())
    svg << "<text x=\"" << px(t) << "\" y=\"" << kTop + plot_h + 16
        << "\" text-anchor=\"middle\">" << number(t) << "</text>\n";
  for (double t : y_axis.ticks())
    svg << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + plot_w << "\" y1=\"" << py(t)
        << "\" y2=\"" << py(t) << "\" stroke=\"#ddd\"/>\n<text x=\"" << kLeft - 6 << "\" y=\""
        << py(t) + 4 << "\" text-anchor=\"end\">" << number(t) << "</text>\n";
  svg << "<text x=\"" << kLeft + plot_w / 2 << "\" y=\"" << kHeight - 10
      << "\" text-anchor=\"middle\">" << escape(options.x_label) << "</text>\n"
      << "<text transform=\"translate(18," << kTop + plot_h / 2
      << ") rotate(-90)\" text-anchor=\"middle\">" << escape(options.y_label) << "</text>\n";
  for (size_t s = 0; s < series.size(); s++) {
    const char* color = kColors[s % 10];
    svg << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
    for (size_t i = 0; i < series[s].x.size(); i++)
      svg << px(series[s].x[i]) << "," << py(series[s].y[i]) << " ";
    svg << "\"/>\n";
    for (size_t i = 0; i < series[s].x.size(); i++)
      svg << "<circle cx=\"" << px(series[s].x[i]) << "\" cy=\"" << py(series[s].y[i])
          << "\" r=\"3\" fill=\"" << color << "\"/>\n";
    const double legend_y = kTop + 10 + 18 * s;
    svg << "<line x1=\"" << kWidth - kRight + 12 << "\" x2=\"" << kWidth - kRight + 32
        << "\" y1=\"" << legend_y << "\" y2=\"" << legend_y << "\" stroke=\"" << color
        << "\" stroke-width=\"2\"/>\n<text x=\"" << kWidth - kRight + 38 << "\" y=\""
        << legend_y + 4 << "\">" << escape(series[s].name) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace hla::eval
