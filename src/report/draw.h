// draw.h — the drawing machinery behind report/plot.h (not for use outside src/report/): an RGB canvas and PNG
// writing, text from stb_easy_font quads, anti-aliased coverage masks, axes with nice ticks, the plot frame and
// its legend. Implemented in draw_canvas.cpp (sections 1–4) and draw_frame.cpp (section 5).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/common.h"

namespace icl::draw {

// =====================================================================================================
// 1. Canvas

struct RGB {
    uint8_t r, g, b;
};

inline const RGB kWhite{255, 255, 255};

inline const RGB kText{30, 30, 30};

inline const RGB kAxis{70, 70, 70};

inline const RGB kGrid{228, 228, 228};

inline const RGB kGridMinor{242, 242, 242};

inline const RGB kRef{90, 90, 90};

inline const RGB kNanCell{150, 150, 150};

struct Canvas {
    int w, h;
    std::vector<uint8_t> px;  // (h, w, 3)
    Canvas(int w_, int h_, RGB bg) : w(w_), h(h_), px((size_t)w_ * h_ * 3) {
        for (size_t i = 0; i < (size_t)w * h; i++) {
            px[3 * i] = bg.r, px[3 * i + 1] = bg.g, px[3 * i + 2] = bg.b;
        }
    }
    // Alpha-blend colour c over pixel (x, y) with opacity a in [0,1].
    void blend(int x, int y, RGB c, double a) {
        if (x < 0 || y < 0 || x >= w || y >= h || !(a > 0)) return;
        if (a > 1) a = 1;
        uint8_t* p = &px[((size_t)y * w + x) * 3];
        const uint8_t src[3] = {c.r, c.g, c.b};
        for (int k = 0; k < 3; k++) p[k] = (uint8_t)std::lround(p[k] + (src[k] - p[k]) * a);
    }
    // Fill [x0,x1) x [y0,y1).
    void fill(int x0, int y0, int x1, int y1, RGB c, double a = 1.0) {
        x0 = std::max(x0, 0), y0 = std::max(y0, 0), x1 = std::min(x1, w), y1 = std::min(y1, h);
        for (int y = y0; y < y1; y++)
            for (int x = x0; x < x1; x++) blend(x, y, c, a);
    }
    // 1-px outline of [x0,x1) x [y0,y1).
    void rect(int x0, int y0, int x1, int y1, RGB c) {
        fill(x0, y0, x1, y0 + 1, c), fill(x0, y1 - 1, x1, y1, c);
        fill(x0, y0, x0 + 1, y1, c), fill(x1 - 1, y0, x1, y1, c);
    }
};

void write_png(const std::string& path, const Canvas& c);

void check_size(const char* what, int width, int height);

// =====================================================================================================
// 2. Text. stb_easy_font turns a string into axis-aligned quads in "font units" (cap height 7,
// descenders to 9); we rasterize them at `scale` with exact area coverage into an alpha mask.

inline const double kFontAscent = 7.0;  // cap height in font units

inline const double kFontBox = 9.0;     // cap top to descender bottom

inline const double kLabelScale = 2.0;  // tick labels, axis labels, legend

inline const double kTitleScale = 3.0;

std::string printable(const std::string& s);

struct Quads {
    std::vector<float> r;  // x0,y0,x1,y1 per quad (font units)
    float width = 0;       // right edge of the ink
};

Quads text_quads(const std::string& s);

inline double text_width(const std::string& s, double scale) { return std::ceil(text_quads(s).width * scale); }

struct AlphaMask {
    int w = 0, h = 0;
    std::vector<float> a;  // (h, w)
};

AlphaMask render_text(const std::string& s, double scale);

enum class HA { Left, Center, Right };

enum class VA { Top, Middle, Bottom };  // unrotated: cap top / cap middle / descender bottom

// Draw text anchored at (x, y). `rotated` turns it 90 degrees counter-clockwise (reads bottom to top);
// then the anchor refers to the rotated box (Middle = box centre).
void draw_text(Canvas& c, const std::string& s, double x, double y, double scale, RGB col, HA ha, VA va, bool rotated = false);

// Shorten s with "..." until it fits in max_w pixels at this scale.
std::string fit_text(const std::string& s, double scale, double max_w);

// =====================================================================================================
// 3. Coverage masks. A series is drawn as the max-coverage union of anti-aliased capsules (segments
// with round ends) and disks, then composited once, so joints are not darkened twice.

struct Mask {
    int x0, y0, w, h;      // covers canvas pixels [x0, x0+w) x [y0, y0+h)
    std::vector<float> a;  // (h, w)
    Mask(int x0_, int y0_, int w_, int h_) : x0(x0_), y0(y0_), w(w_), h(h_), a((size_t)w_ * h_, 0.f) {}
    void clear() { std::fill(a.begin(), a.end(), 0.f); }
    void put(int x, int y, double cov) {
        x -= x0, y -= y0;
        if (x < 0 || y < 0 || x >= w || y >= h || !(cov > 0)) return;
        float& v = a[(size_t)y * w + x];
        v = std::max(v, (float)std::min(cov, 1.0));
    }
    void disk(double cx, double cy, double r) {
        int ya = std::max(y0, (int)std::floor(cy - r - 1)), yb = std::min(y0 + h, (int)std::ceil(cy + r + 1));
        int xa = std::max(x0, (int)std::floor(cx - r - 1)), xb = std::min(x0 + w, (int)std::ceil(cx + r + 1));
        for (int y = ya; y < yb; y++)
            for (int x = xa; x < xb; x++) put(x, y, r + 0.5 - std::hypot(x + 0.5 - cx, y + 0.5 - cy));
    }
    // Clip segment a-b to this mask's rectangle grown by `pad` (Liang-Barsky); false if nothing is left.
    bool clip(double& ax, double& ay, double& bx, double& by, double pad) const {
        double t0 = 0, t1 = 1, dx = bx - ax, dy = by - ay;
        const double p[4] = {-dx, dx, -dy, dy};
        const double q[4] = {ax - (x0 - pad), (x0 + w + pad) - ax, ay - (y0 - pad), (y0 + h + pad) - ay};
        for (int i = 0; i < 4; i++) {
            if (p[i] == 0) {
                if (q[i] < 0) return false;
                continue;
            }
            double t = q[i] / p[i];
            if (p[i] < 0) t0 = std::max(t0, t);
            else t1 = std::min(t1, t);
            if (t0 > t1) return false;
        }
        double nax = ax + t0 * dx, nay = ay + t0 * dy;
        bx = ax + t1 * dx, by = ay + t1 * dy, ax = nax, ay = nay;
        return true;
    }
    // Anti-aliased capsule of radius r around segment a-b (assumed already clipped near the mask).
    void capsule(double ax, double ay, double bx, double by, double r) {
        double dx = bx - ax, dy = by - ay, len2 = dx * dx + dy * dy;
        bool xmajor = std::fabs(dx) >= std::fabs(dy);
        // walk the major axis; on each line scan the minor axis around the segment
        double ma = xmajor ? ax : ay, mb = xmajor ? bx : by, na = xmajor ? ay : ax, nb = xmajor ? by : bx;
        int mlo = (int)std::floor(std::min(ma, mb) - r - 1), mhi = (int)std::ceil(std::max(ma, mb) + r + 1);
        int mmin = xmajor ? x0 : y0, mmax = xmajor ? x0 + w : y0 + h;
        int nmin = xmajor ? y0 : x0, nmax = xmajor ? y0 + h : x0 + w;
        mlo = std::max(mlo, mmin), mhi = std::min(mhi, mmax);
        for (int m = mlo; m < mhi; m++) {
            double cm = m + 0.5;
            double t = mb != ma ? (cm - ma) / (mb - ma) : 0.0;
            t = std::min(1.0, std::max(0.0, t));
            double cn = na + t * (nb - na);
            int nlo = std::max(nmin, (int)std::floor(cn - 2 * r - 2)), nhi = std::min(nmax, (int)std::ceil(cn + 2 * r + 2));
            for (int n = nlo; n < nhi; n++) {
                double px = xmajor ? cm : n + 0.5, py = xmajor ? n + 0.5 : cm;
                double s = len2 > 0 ? ((px - ax) * dx + (py - ay) * dy) / len2 : 0.0;
                s = std::min(1.0, std::max(0.0, s));
                double d = std::hypot(px - (ax + s * dx), py - (ay + s * dy));
                put(xmajor ? m : n, xmajor ? n : m, r + 0.5 - d);
            }
        }
    }
    void composite(Canvas& c, RGB col, double alpha = 1.0) const {
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                float v = a[(size_t)y * w + x];
                if (v > 0) c.blend(x0 + x, y0 + y, col, v * alpha);
            }
    }
};

// A connected run of points (pixel coordinates), solid or dashed (9 px on, 6 px off).
void stroke_run(Mask& m, const std::vector<std::pair<double, double>>& pts, double r, bool dashed);

// Many points per pixel column (long runs): keep, per column, the first, lowest, highest and last
// point in their original order. The drawn line is the same; the work drops to ~4 points per column.
std::vector<std::pair<double, double>> reduce_columns(const std::vector<std::pair<double, double>>& pts);

// =====================================================================================================
// 4. Axes

inline const RGB kPalette[] = {
    {38, 100, 180},  // blue
    {236, 125, 22},  // orange
    {46, 150, 72},   // green
    {204, 44, 52},   // red
    {128, 82, 176},  // purple
    {140, 92, 62},   // brown
    {222, 100, 172}, // pink
    {108, 108, 108}, // grey
    {168, 170, 36},  // olive
    {28, 170, 196},  // cyan
};

inline const int kPaletteN = (int)(sizeof(kPalette) / sizeof(kPalette[0]));

inline RGB palette(int i) { return kPalette[((i % kPaletteN) + kPaletteN) % kPaletteN]; }

struct Anchor {
    double t;
    uint8_t r, g, b;
};

// Sequential: dark violet -> blue -> teal -> green -> yellow; lightness rises monotonically.
inline const Anchor kSeq[] = {{0.000, 66, 4, 86},    {0.125, 71, 40, 122}, {0.250, 60, 80, 140},
                       {0.375, 46, 112, 142}, {0.500, 34, 144, 140}, {0.625, 38, 174, 124},
                       {0.750, 90, 200, 98},  {0.875, 168, 220, 52}, {1.000, 250, 230, 36}};
// Diverging: blue -> near-white -> red.
inline const Anchor kDiv[] = {{0.00, 34, 74, 150},   {0.25, 118, 160, 212}, {0.50, 246, 246, 246},
                       {0.75, 226, 136, 108}, {1.00, 168, 24, 40}};

template <size_t N>
RGB interp(const Anchor (&an)[N], double t) {
    if (!(t >= 0)) t = 0;  // also catches NaN
    if (t > 1) t = 1;
    size_t i = 0;
    while (i + 2 < N && t > an[i + 1].t) i++;
    double f = (t - an[i].t) / (an[i + 1].t - an[i].t);
    f = std::min(1.0, std::max(0.0, f));
    auto mix = [f](uint8_t a, uint8_t b) { return (uint8_t)std::lround(a + (b - a) * f); };
    return {mix(an[i].r, an[i + 1].r), mix(an[i].g, an[i + 1].g), mix(an[i].b, an[i + 1].b)};
}

// 1-2-5 step >= raw.
double nice_step(double raw);

// Digits after the decimal point that show multiples of `step` exactly (0.5 -> 1, 2.5 -> 1, 0.25 -> 2).
int decimals_for(double step);

// "2.50e-05" -> "2.5e-5"
std::string compact_sci(double v, int mant_digits);

std::string strip_zeros(std::string s);

// Suffix unit for big numbers: k, M, G, T.
double big_unit(double a, const char** suffix);

// Labels for evenly spaced ticks: one format for the whole axis.
std::vector<std::string> format_linear(const std::vector<double>& ticks, double step);

// One label on a log axis (each tick on its own: 1e-3, 0.01, 0.5, 20, 1k, 2M).
// With big_sci (an axis reaching 1e9) every label >= 1000 is 1e3-style too, so one axis never mixes
// "10M" with "1e12".
std::string format_log_label(double v, bool big_sci = false);

struct Axis {
    double lo = 0, hi = 1;  // data range
    bool log = false;
    double p0 = 0, p1 = 1;  // pixel position of lo and hi
    std::vector<double> major, minor;
    std::vector<std::string> labels;

    double tf(double v) const { return log ? std::log10(v) : v; }
    bool valid(double v) const { return std::isfinite(v) && (!log || v > 0); }
    double px(double v) const {
        double a = tf(lo), b = tf(hi);
        double p = p0 + (tf(v) - a) / (b - a) * (p1 - p0);
        return std::max(-1e7, std::min(1e7, p));  // far-off points: clamp (direction error << 1 px)
    }
};

// Data range -> axis range with a margin (fraction of the span, in transformed space); fixed ends kept.
void auto_range(const std::vector<double>& vals, bool log, double fixlo, double fixhi, double margin, const char* name, double& lo, double& hi);

// Ticks of a linear axis [lo,hi] with about `target` ticks.
std::vector<double> linear_ticks(double lo, double hi, int target, double* step_out);

// Ticks + labels for an axis with about `target` major ticks.
void make_ticks(Axis& ax, int target);

double max_label_width(const Axis& ax, double scale);

// =====================================================================================================
// 5. Line plot and scatter: a shared frame (title, axes, grid, ticks, labels) and a corner legend.

struct Frame {
    int L, T, R, B;  // plot area [L,R) x [T,B) in pixels
    Axis x, y;
};

// Lay out the plot area for a W x H image, choosing tick counts so labels never overlap.
Frame layout_frame(int W, int H, const std::string& title, const std::string& xlabel, const std::string& ylabel, Axis xa, Axis ya, int reserve_right);

void draw_grid(Canvas& c, const Frame& f);

void draw_frame(Canvas& c, const Frame& f, int W, const std::string& title, const std::string& xlabel, const std::string& ylabel);

struct LegendEntry {
    std::string label;
    RGB color;
    bool line, dashed, marker;
};

// A legend box: entries (capped to what fits, with "(+N more)"), their fitted labels, and its size.
struct Legend {
    std::vector<LegendEntry> entries;
    std::vector<std::string> labels;
    int w = 0, h = 0;
};

inline const int kLegPad = 8, kLegSample = 30, kLegGap = 8;

inline int legend_row() { return (int)(kFontBox * kLabelScale + 5); }

Legend build_legend(const std::vector<LegendEntry>& all, double max_label_w, int max_h);

// Sum of data coverage under a box.
double overlap(const Mask& occ, int x0, int y0, int w, int h);

// The corner (or edge centre) of the plot area where the legend covers the least data.
double best_corner(const Frame& f, const Legend& L, const Mask& occ, int* bx, int* by);

void paint_legend(Canvas& c, const Legend& L, int x0, int y0);

// A drawn plot without its legend: the image, the frame, and where data was drawn.
struct Drawn {
    Canvas c;
    Frame f;
    Mask occ;
};

// Legend placement: inside the plot area in the emptiest corner; if every corner covers data (or not
// all entries fit), draw the plot again narrower and put the legend to the right of it.
void finish_with_legend(const std::function<Drawn(int)>& render, const std::vector<LegendEntry>& entries, int width, const std::string& png_path);

}  // namespace icl::draw
