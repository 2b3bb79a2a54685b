// plot.h — PNG plots for training runs and analyses: line plots, heatmaps, scatter plots; plus a small
// CSV reader for the log.csv files that runs write (used by tools/plotlog and anything else that wants
// to read a log back).
//
// Everything is drawn by hand into an RGB buffer: anti-aliased thick lines (a distance-to-segment
// coverage mask per series), text from stb_easy_font's quads (rasterized here, scaled 2x, rotated for
// the y label), encoded with stb_image_write and written by the one atomic writer (engine/fileio.h), so a reader
// never sees a half-written PNG and a failed write keeps the previous one. Implementation: plot.cpp (line, scatter),
// heatmap.cpp, csv.cpp, and the drawing machinery in draw.h.
//
// Bad input throws icl::Error with one line naming the problem: mismatched x/y lengths, no finite point
// to plot, rows*cols != values.size(), an unwritable path, an image size outside 320x240..10000x10000.
//
// Legends go in the plot area's emptiest corner, or beside the plot when every corner covers data.
// Series colours come from a 10-colour palette; series 10-19 repeat it dashed (dashed XOR Series::dashed).
//
// Example:
//   icl::LinePlot p;
//   p.title = "train_gpt"; p.xlabel = "step"; p.ylabel = "loss"; p.logy = true;
//   p.series.push_back({"train", steps, train_loss});
//   p.series.push_back({"val", steps, val_loss, /*markers=*/true});
//   p.hlines.push_back({"Bayes optimal", 1.23});
//   icl::save_line_plot("out/train_gpt/run/loss.png", p);
#pragma once
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace icl {

// ---------------------------------------------------------------------------------------------------
// Line plots

struct Series {
    std::string label;        // legend text; an empty label leaves the series out of the legend
    std::vector<double> x;    // x values; EMPTY means 0, 1, 2, ... (the index of each y)
    std::vector<double> y;    // y values; NaN/Inf (and <= 0 on a log axis) are skipped and break the line
    bool markers = false;     // a dot at every point
    bool dashed = false;      // dashed line instead of solid
};

struct LinePlot {
    std::string title, xlabel, ylabel;
    bool logx = false, logy = false;
    std::vector<Series> series;                        // colours come from a fixed palette, in order
    std::vector<std::pair<std::string, double>> hlines;  // horizontal reference lines: (label, y)
    double ymin = NAN, ymax = NAN;                     // fixed y range; NaN = automatic (each side alone)
    double xmin = NAN, xmax = NAN;                     // fixed x range; NaN = automatic
    // error bars: yerr[si] (empty, or one half-width per y of series si) draws y ± yerr[si][i] as a bar with caps
    std::vector<std::vector<double>> yerr;
};

void save_line_plot(const std::string& png_path, const LinePlot& p, int width = 900, int height = 560);
// A line plot with its title and axes set; the series are added after.
inline LinePlot make_line_plot(std::string title, std::string xlabel, std::string ylabel, bool logx = false, bool logy = false) {
    LinePlot p;
    p.title = std::move(title);
    p.xlabel = std::move(xlabel);
    p.ylabel = std::move(ylabel);
    p.logx = logx;
    p.logy = logy;
    return p;
}

// ---------------------------------------------------------------------------------------------------
// Heatmaps (row 0 at the top, like a printed matrix) with a colour bar

struct Heatmap {
    std::string title, xlabel, ylabel, cbar_label;
    int rows = 0, cols = 0;
    std::vector<double> values;  // (rows, cols) row-major; NaN/Inf cells are drawn grey
    bool diverging = false;      // blue-white-red map centred at 0 (range symmetric unless vmin/vmax set)
    double vmin = NAN, vmax = NAN;  // colour range; NaN = from the data
};

void save_heatmap(const std::string& png_path, const Heatmap& h, int width = 760, int height = 640);

// ---------------------------------------------------------------------------------------------------
// Scatter plots with a colour per category (e.g. 2-D embeddings coloured by class)

struct Scatter {
    std::string title, xlabel, ylabel;
    std::vector<double> x, y;                 // same length; non-finite points are skipped
    std::vector<int> category;                // empty (one colour) or one per point, each >= 0
    std::vector<std::string> category_names;  // legend text per category id; empty = "0", "1", ...
};

void save_scatter(const std::string& png_path, const Scatter& s, int width = 760, int height = 640);

// ---------------------------------------------------------------------------------------------------
// Pieces exposed for tools and tests

// The fixed palette used for series and categories (cycles after palette_size()).
int palette_size();
void palette_color(int i, unsigned char rgb[3]);
// Colormaps: t in [0,1] -> RGB. Sequential (viridis-like) and diverging (blue-white-red).
void colormap_sequential(double t, unsigned char rgb[3]);
void colormap_diverging(double t, unsigned char rgb[3]);

// "Nice" ticks (1-2-5 steps) covering [lo, hi] with about `target` ticks, and their labels in a compact
// format (0.5, 1e-3, 12k). Exposed so tests can check them.
std::vector<double> nice_ticks(double lo, double hi, int target);
std::vector<std::string> format_ticks(const std::vector<double>& ticks);

// ---------------------------------------------------------------------------------------------------
// CSV logs

// A CSV file with a header row, read into columns of doubles. Empty cells (and cells that are not
// numbers) become NaN; text_cells counts the non-empty, non-numeric cells per column so a caller can
// refuse to plot a text column. Rows with a different number of cells than the header are refused.
// Quoted fields ("a,b") are understood; blank lines are skipped; '\r' is ignored.
struct CsvTable {
    std::vector<std::string> header;
    std::vector<std::vector<double>> cols;  // cols[c][row]
    std::vector<size_t> text_cells;         // per column
    size_t rows() const { return cols.empty() ? 0 : cols[0].size(); }
    int find(const std::string& name) const;                     // column index or -1
    const std::vector<double>& col(const std::string& name) const;  // throws icl::Error if absent
};

CsvTable read_csv(const std::string& path);

}  // namespace icl
