// A small SVG line-plot writer for reports and sweeps (score vs length, recall vs state size,
// loss curves): axes with ticks, one polyline with markers per series, a legend. No
// dependencies; the output is a complete standalone <svg> document.
#pragma once
#include <string>
#include <vector>

namespace hla::eval {

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;  // same length
};

struct PlotOptions {
  std::string title, x_label, y_label;
  bool log_x = false;  // log2 axis (sequence lengths)
  double y_min = 0, y_max = 0;  // y range; both 0: from the data
};

std::string line_plot_svg(const std::vector<PlotSeries>& series, const PlotOptions& options);

}  // namespace hla::eval
