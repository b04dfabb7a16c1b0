// SVG line plots (see svg_plot.h).
#include "eval/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "tensor/error.h"

namespace hla::eval {

namespace {

constexpr double kPlotWidth = 400, kPlotHeight = 310;  // the frame; margins grow with the labels
constexpr double kTop = 40, kBottom = 50, kCharWidth = 7.2;    // 12 px sans-serif: ~7 px a character
constexpr double kLegendRow = 18;
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

struct Axis {
  double lo, hi;
  bool log;
  double step = 0;  // linear axes: the tick spacing, 1, 2, 2.5 or 5 times a power of ten

  // A linear axis over [lo, hi] widened to whole ticks (about five), unless `fixed`; a log2
  // axis keeps the data's range. An empty range, or one only rounding wide (the mean of three
  // equal numbers can differ from them in the last bit), is padded so that it has a width.
  static Axis make(double lo, double hi, bool log, bool fixed) {
    if (!(hi - lo > 1e-9 * std::max(std::abs(lo), std::abs(hi)))) {
      const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
      if (log) return {lo / 2, hi * 2, true};
      lo -= pad, hi += pad;
    }
    if (log) return {lo, hi, true};
    const double raw = (hi - lo) / 5, power = std::pow(10, std::floor(std::log10(raw)));
    double step = 10 * power;
    for (double m : {1.0, 2.0, 2.5, 5.0})
      if (m * power >= raw * (1 - 1e-9)) {
        step = m * power;
        break;
      }
    if (fixed) return {lo, hi, false, step};
    return {std::floor(lo / step + 1e-9) * step, std::ceil(hi / step - 1e-9) * step, false, step};
  }
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
      const double first = std::ceil(lo / step - 1e-9), last = std::floor(hi / step + 1e-9);
      for (double i = first; i <= last; i++) t.push_back(i * step);
    }
    return t;
  }
  // A tick's text with the digits its spacing needs (0.25 -> 2 decimals), never "-0".
  std::string label(double v) const {
    int decimals = 0;
    if (!log) {
      decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
      if (std::abs(step / std::pow(10, -decimals) - 2.5) < 1e-6) decimals++;
    }
    if (std::abs(v) < (log ? 0 : step * 1e-9)) v = 0;
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", decimals, v);
    return text;
  }
};

double text_width(const std::string& s) { return kCharWidth * static_cast<double>(s.size()); }

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
  HLA_CHECK(!options.log_x || x_lo > 0, "plot '", options.title, "': a log x axis needs positive x, got ", x_lo);
  const bool fixed_y = options.y_min != 0 || options.y_max != 0;
  if (fixed_y) {
    y_lo = options.y_min;
    y_hi = options.y_max;
  }
  const Axis x_axis = Axis::make(x_lo, x_hi, options.log_x, false), y_axis = Axis::make(y_lo, y_hi, false, fixed_y);
  const std::vector<double> x_ticks = x_axis.ticks(), y_ticks = y_axis.ticks();
  double widest_tick = 0, widest_name = 0;
  for (double t : y_ticks) widest_tick = std::max(widest_tick, text_width(y_axis.label(t)));
  for (const PlotSeries& s : series) widest_name = std::max(widest_name, text_width(s.name));
  const double left = 40 + widest_tick, right = 50 + widest_name;  // y title + tick labels; legend
  const double width = left + kPlotWidth + right;
  const double height = std::max(kTop + kPlotHeight + kBottom, kTop + 20 + kLegendRow * series.size());
  auto px = [&](double x) { return left + x_axis.to_unit(x) * kPlotWidth; };
  auto py = [&](double y) { return kTop + (1 - y_axis.to_unit(y)) * kPlotHeight; };

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << left + kPlotWidth / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
      << escape(options.title) << "</text>\n";
  for (double t : y_ticks)
    svg << "<line x1=\"" << left << "\" x2=\"" << left + kPlotWidth << "\" y1=\"" << py(t) << "\" y2=\""
        << py(t) << "\" stroke=\"#ddd\"/>\n<text x=\"" << left - 6 << "\" y=\"" << py(t) + 4
        << "\" text-anchor=\"end\">" << y_axis.label(t) << "</text>\n";
  for (double t : x_ticks)
    svg << "<text x=\"" << px(t) << "\" y=\"" << kTop + kPlotHeight + 16 << "\" text-anchor=\"middle\">"
        << x_axis.label(t) << "</text>\n";
  svg << "<rect x=\"" << left << "\" y=\"" << kTop << "\" width=\"" << kPlotWidth << "\" height=\""
      << kPlotHeight << "\" fill=\"none\" stroke=\"black\"/>\n"
      << "<text x=\"" << left + kPlotWidth / 2 << "\" y=\"" << kTop + kPlotHeight + 40
      << "\" text-anchor=\"middle\">" << escape(options.x_label) << "</text>\n"
      << "<text transform=\"translate(18," << kTop + kPlotHeight / 2
      << ") rotate(-90)\" text-anchor=\"middle\">" << escape(options.y_label) << "</text>\n";
  for (size_t s = 0; s < series.size(); s++) {
    const char* color = kColors[s % 10];
    const char* dash = s >= 10 ? "\" stroke-dasharray=\"6,3" : "";  // colours repeat after ten series
    svg << "<polyline fill=\"none\" stroke=\"" << color << dash << "\" stroke-width=\"2\" points=\"";
    for (size_t i = 0; i < series[s].x.size(); i++)
      svg << px(series[s].x[i]) << "," << py(series[s].y[i]) << " ";
    svg << "\"/>\n";
    for (size_t i = 0; i < series[s].x.size(); i++)
      svg << "<circle cx=\"" << px(series[s].x[i]) << "\" cy=\"" << py(series[s].y[i])
          << "\" r=\"3\" fill=\"" << color << "\"/>\n";
    const double legend_x = left + kPlotWidth, legend_y = kTop + 10 + kLegendRow * s;
    svg << "<line x1=\"" << legend_x + 12 << "\" x2=\"" << legend_x + 32 << "\" y1=\"" << legend_y
        << "\" y2=\"" << legend_y << "\" stroke=\"" << color << dash << "\" stroke-width=\"2\"/>\n<text x=\"" << legend_x + 38 << "\" y=\""
        << legend_y + 4 << "\">" << escape(series[s].name) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace hla::eval
