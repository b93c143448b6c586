//===- Plot.h - log-log line plots as SVG and PNG ---------------*- C++ -*-===//
#ifndef KILN_TOOLS_KILN_PLOT_H
#define KILN_TOOLS_KILN_PLOT_H

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cli {

struct Series {
  std::string label;
  std::vector<double> x, y; ///< positive values (log axes)
  uint32_t rgb = 0;
  bool dashed = false;
};

struct Plot {
  std::string title, xLabel, yLabel;
  std::vector<Series> series;
};

/// Both axes logarithmic, decades ticked. The PNG is rasterised here (no
/// library but zlib) with a built-in 5x7 font that prints text in capitals.
void writeSvg(const Plot &plot, const std::string &path);
void writePng(const Plot &plot, const std::string &path);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_PLOT_H
