// plot.cpp — line plots and scatter plots, the palette, colormaps and tick helpers of report/plot.h.
#include "report/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include "report/draw.h"

namespace icl {

using namespace draw;

// ------------------------------------------------------------------------------------------------------
// public: palette, colormaps, ticks

int palette_size() { return kPaletteN; }
void palette_color(int i, unsigned char rgb[3]) {
    RGB c = palette(i);
    rgb[0] = c.r, rgb[1] = c.g, rgb[2] = c.b;
}
void colormap_sequential(double t, unsigned char rgb[3]) {
    RGB c = interp(kSeq, t);
    rgb[0] = c.r, rgb[1] = c.g, rgb[2] = c.b;
}
void colormap_diverging(double t, unsigned char rgb[3]) {
    RGB c = interp(kDiv, t);
    rgb[0] = c.r, rgb[1] = c.g, rgb[2] = c.b;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
    if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo < hi)) fail(strfmt("nice_ticks: bad range [%g, %g]", lo, hi));
    return linear_ticks(lo, hi, std::max(1, target), nullptr);
}

std::vector<std::string> format_ticks(const std::vector<double>& ticks) {
    double step = INFINITY;
    for (size_t i = 0; i + 1 < ticks.size(); i++) {
        double d = std::fabs(ticks[i + 1] - ticks[i]);
        if (d > 0) step = std::min(step, d);
    }
    if (!std::isfinite(step)) {  // zero or one tick
        std::vector<std::string> out;
        for (double t : ticks) out.push_back(t == 0 ? "0" : format_log_label(t));
        return out;
    }
    return format_linear(ticks, step);
}

// ------------------------------------------------------------------------------------------------------
// public: line plot

// Past the palette's length colours repeat; the second round is dashed (third solid, ...) to tell apart.
static bool dashed_series(const LinePlot& p, size_t si) {
    return p.series[si].dashed != ((si / kPaletteN) % 2 == 1);
}

void save_line_plot(const std::string& png_path, const LinePlot& p, int width, int height) {
    check_size("line plot", width, height);
    const std::string name = p.title.empty() ? png_path : p.title;
    Axis xa, ya;
    xa.log = p.logx, ya.log = p.logy;
    // gather every drawable point, per series
    std::vector<double> xs, ys;
    if (p.yerr.size() > p.series.size()) fail(strfmt("line plot '%s': error bars for %zu series but %zu series", name.c_str(), p.yerr.size(), p.series.size()));
    static const std::vector<double> kNoErr;
    auto err_of = [&](size_t si) -> const std::vector<double>& { return si < p.yerr.size() ? p.yerr[si] : kNoErr; };
    for (size_t si = 0; si < p.series.size(); si++) {
        const Series& s = p.series[si];
        const std::vector<double>& yerr = err_of(si);
        if (!s.x.empty() && s.x.size() != s.y.size())
            fail(strfmt("line plot '%s': series '%s' has %zu x values but %zu y values", name.c_str(),
                        s.label.c_str(), s.x.size(), s.y.size()));
        if (!yerr.empty() && yerr.size() != s.y.size())
            fail(strfmt("line plot '%s': series '%s' has %zu error bars but %zu y values", name.c_str(), s.label.c_str(), yerr.size(),
                        s.y.size()));
        for (size_t i = 0; i < s.y.size(); i++) {
            double xv = s.x.empty() ? (double)i : s.x[i], yv = s.y[i];
            if (xa.valid(xv) && ya.valid(yv)) xs.push_back(xv), ys.push_back(yv);
            if (xa.valid(xv) && ya.valid(yv) && !yerr.empty() && std::isfinite(yerr[i]))  // the bar's ends in the range
                for (double e : {yv - std::fabs(yerr[i]), yv + std::fabs(yerr[i])})
                    if (ya.valid(e)) ys.push_back(e);
        }
    }
    if (xs.empty())
        fail(strfmt("line plot '%s': no finite point to plot%s", name.c_str(),
                    (p.logx || p.logy) ? " (a log axis needs values > 0)" : ""));
    for (auto& hl : p.hlines) {
        if (!ya.valid(hl.second))
            fail(strfmt("line plot '%s': reference line '%s' has bad value %g", name.c_str(), hl.first.c_str(),
                        hl.second));
        ys.push_back(hl.second);
    }
    auto_range(xs, p.logx, p.xmin, p.xmax, 0.02, "x", xa.lo, xa.hi);
    auto_range(ys, p.logy, p.ymin, p.ymax, 0.05, "y", ya.lo, ya.hi);

    std::vector<LegendEntry> legend;
    for (size_t si = 0; si < p.series.size(); si++)
        if (!p.series[si].label.empty())
            legend.push_back({p.series[si].label, palette((int)si), true, dashed_series(p, si), p.series[si].markers});
    if (legend.size() == 1 && p.series.size() == 1 && legend[0].label == p.ylabel) legend.clear();  // says nothing new

    auto render = [&](int reserve_right) -> Drawn {
        Frame f = layout_frame(width, height, p.title, p.xlabel, p.ylabel, xa, ya, reserve_right);
        if (f.R - f.L < 40 || f.B - f.T < 40)
            fail(strfmt("line plot '%s': image too small for its labels", name.c_str()));
        Drawn d{Canvas(width, height, kWhite), f, Mask(f.L, f.T, f.R - f.L, f.B - f.T)};
        Canvas& c = d.c;
        Mask& occ = d.occ;
        draw_grid(c, f);
        Mask m(f.L, f.T, f.R - f.L, f.B - f.T);
        auto merge_occ = [&]() {
            for (size_t i = 0; i < m.a.size(); i++) occ.a[i] = std::max(occ.a[i], m.a[i]);
        };
        // reference lines: thin dashed grey
        for (auto& hl : p.hlines) {
            double yp = f.y.px(hl.second);
            m.clear();
            stroke_run(m, {{(double)f.L, yp}, {(double)f.R, yp}}, 0.75, true);
            m.composite(c, kRef);
            merge_occ();
        }
        // series: one coverage mask each, runs broken at undrawable points
        for (size_t si = 0; si < p.series.size(); si++) {
            const Series& s = p.series[si];
            const std::vector<double>& yerr = err_of(si);
            m.clear();
            std::vector<std::pair<double, double>> run;
            size_t npts = 0;
            for (double v : s.y) npts += std::isfinite(v);
            double mr = npts > 300 ? 2.2 : 3.2;
            for (size_t i = 0; i <= s.y.size(); i++) {
                bool ok = false;
                double xv = 0, yv = 0;
                if (i < s.y.size()) {
                    xv = s.x.empty() ? (double)i : s.x[i], yv = s.y[i];
                    ok = xa.valid(xv) && ya.valid(yv);
                }
                if (ok) {
                    run.push_back({f.x.px(xv), f.y.px(yv)});
                    if (s.markers) m.disk(run.back().first, run.back().second, mr);
                    if (!yerr.empty() && std::isfinite(yerr[i]) && ya.valid(yv - std::fabs(yerr[i])) && ya.valid(yv + std::fabs(yerr[i]))) {
                        const double px = f.x.px(xv), lo = f.y.px(yv - std::fabs(yerr[i])), hi = f.y.px(yv + std::fabs(yerr[i]));
                        stroke_run(m, {{px, lo}, {px, hi}}, 0.9, false);  // the bar and its two caps
                        stroke_run(m, {{px - 4, lo}, {px + 4, lo}}, 0.9, false);
                        stroke_run(m, {{px - 4, hi}, {px + 4, hi}}, 0.9, false);
                    }
                } else if (!run.empty()) {
                    if (run.size() > 4 * (size_t)(f.R - f.L)) run = reduce_columns(run);
                    stroke_run(m, run, 1.1, dashed_series(p, si));
                    run.clear();
                }
            }
            m.composite(c, palette((int)si));
            merge_occ();
        }
        // reference line labels, on a light backing, where they cover the least data
        const double S = kLabelScale;
        for (auto& hl : p.hlines) {
            if (hl.first.empty()) continue;
            double yp = f.y.px(hl.second);
            std::string t = fit_text(hl.first, S, (f.R - f.L) * 0.5);
            double tw = text_width(t, S), th = kFontBox * S;
            double xr = f.R - 8 - tw, xl = f.L + 8, xc = (f.L + f.R - tw) / 2;
            double yab = yp - 5 - th, ybe = yp + 5;
            const double cand[6][2] = {{xr, yab}, {xl, yab}, {xr, ybe}, {xl, ybe}, {xc, yab}, {xc, ybe}};
            double best = INFINITY, bx = xr, by = yab;
            for (auto& k : cand) {
                double ty = std::max((double)f.T + 2, std::min(k[1], f.B - 2 - th));
                double sc = overlap(occ, (int)k[0] - 3, (int)ty - 2, (int)tw + 6, (int)th + 4);
                if (sc < best - 0.5) best = sc, bx = k[0], by = ty;
            }
            int bx0 = (int)bx - 3, by0 = (int)by - 2, bx1 = (int)(bx + tw + 3), by1 = (int)(by + th + 2);
            c.fill(bx0, by0, bx1, by1, kWhite, 0.75);
            draw_text(c, t, bx, by, S, kRef, HA::Left, VA::Top);
            for (int y = std::max(by0, occ.y0); y < std::min(by1, occ.y0 + occ.h); y++)
                for (int x = std::max(bx0, occ.x0); x < std::min(bx1, occ.x0 + occ.w); x++)
                    occ.a[(size_t)(y - occ.y0) * occ.w + (x - occ.x0)] = 1.f;
        }
        draw_frame(c, f, width, p.title, p.xlabel, p.ylabel);
        return d;
    };
    finish_with_legend(render, legend, width, png_path);
}

// ------------------------------------------------------------------------------------------------------
// public: scatter

void save_scatter(const std::string& png_path, const Scatter& s, int width, int height) {
    check_size("scatter plot", width, height);
    const std::string name = s.title.empty() ? png_path : s.title;
    if (s.x.size() != s.y.size())
        fail(strfmt("scatter plot '%s': %zu x values but %zu y values", name.c_str(), s.x.size(), s.y.size()));
    if (!s.category.empty() && s.category.size() != s.x.size())
        fail(strfmt("scatter plot '%s': %zu categories for %zu points", name.c_str(), s.category.size(), s.x.size()));
    int ncat = 0;
    for (int k : s.category) {
        if (k < 0) fail(strfmt("scatter plot '%s': negative category %d", name.c_str(), k));
        if (!s.category_names.empty() && k >= (int)s.category_names.size())
            fail(strfmt("scatter plot '%s': category %d has no name (%zu names)", name.c_str(), k,
                        s.category_names.size()));
        ncat = std::max(ncat, k + 1);
    }
    std::vector<double> xs, ys;
    for (size_t i = 0; i < s.x.size(); i++)
        if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) xs.push_back(s.x[i]), ys.push_back(s.y[i]);
    if (xs.empty()) fail(strfmt("scatter plot '%s': no finite point to plot", name.c_str()));
    Axis xa, ya;
    auto_range(xs, false, NAN, NAN, 0.04, "x", xa.lo, xa.hi);
    auto_range(ys, false, NAN, NAN, 0.04, "y", ya.lo, ya.hi);

    std::vector<LegendEntry> legend;
    if (ncat > 1 || !s.category_names.empty())
        for (int k = 0; k < ncat; k++)
            legend.push_back({s.category_names.empty() ? std::to_string(k) : s.category_names[k], palette(k), false,
                              false, true});
    double r = xs.size() > 20000 ? 1.6 : xs.size() > 2000 ? 2.4 : 3.4;
    double alpha = xs.size() > 2000 ? 0.6 : 0.85;

    auto render = [&](int reserve_right) -> Drawn {
        Frame f = layout_frame(width, height, s.title, s.xlabel, s.ylabel, xa, ya, reserve_right);
        if (f.R - f.L < 40 || f.B - f.T < 40)
            fail(strfmt("scatter plot '%s': image too small for its labels", name.c_str()));
        Drawn d{Canvas(width, height, kWhite), f, Mask(f.L, f.T, f.R - f.L, f.B - f.T)};
        Canvas& c = d.c;
        Mask& occ = d.occ;
        draw_grid(c, f);
        Mask dot(0, 0, 1, 1);
        for (size_t i = 0; i < s.x.size(); i++) {
            if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
            double px = f.x.px(s.x[i]), py = f.y.px(s.y[i]);
            int bx = (int)std::floor(px - r - 1), by = (int)std::floor(py - r - 1), bs = (int)std::ceil(2 * r + 3);
            // clip the dot's box to the plot area, draw it, and record it for legend placement
            int x0 = std::max(bx, f.L), y0 = std::max(by, f.T), x1 = std::min(bx + bs, f.R), y1 = std::min(by + bs, f.B);
            if (x0 >= x1 || y0 >= y1) continue;
            dot = Mask(x0, y0, x1 - x0, y1 - y0);
            dot.disk(px, py, r);
            dot.composite(c, palette(s.category.empty() ? 0 : s.category[i]), alpha);
            for (int y = y0; y < y1; y++)
                for (int x = x0; x < x1; x++) {
                    float& o = occ.a[(size_t)(y - occ.y0) * occ.w + (x - occ.x0)];
                    o = std::max(o, dot.a[(size_t)(y - y0) * dot.w + (x - x0)]);
                }
        }
        draw_frame(c, f, width, s.title, s.xlabel, s.ylabel);
        return d;
    };
    finish_with_legend(render, legend, width, png_path);
}

}  // namespace icl
