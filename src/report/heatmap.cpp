// heatmap.cpp — heatmaps with a colour bar (report/plot.h).
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
// 6. Heatmap

void save_heatmap(const std::string& png_path, const Heatmap& h, int width, int height) {
    check_size("heatmap", width, height);
    const std::string name = h.title.empty() ? png_path : h.title;
    if (h.rows <= 0 || h.cols <= 0)
        fail(strfmt("heatmap '%s': bad shape (%d, %d)", name.c_str(), h.rows, h.cols));
    if ((size_t)h.rows * (size_t)h.cols != h.values.size())
        fail(strfmt("heatmap '%s': rows*cols = %d*%d = %zu but %zu values given", name.c_str(), h.rows, h.cols,
                    (size_t)h.rows * h.cols, h.values.size()));
    double dmin = INFINITY, dmax = -INFINITY;
    for (double v : h.values)
        if (std::isfinite(v)) dmin = std::min(dmin, v), dmax = std::max(dmax, v);
    if (!(dmin <= dmax)) fail(strfmt("heatmap '%s': no finite value to plot", name.c_str()));
    // colour range
    double lo, hi;
    if (h.diverging) {
        double m = std::max(std::fabs(dmin), std::fabs(dmax));
        if (m == 0) m = 1;
        lo = -m, hi = m;
    } else {
        lo = dmin, hi = dmax;
        if (hi - lo <= 1e-12 * std::max(1.0, std::fabs(hi))) {
            double pad = hi != 0 ? 0.1 * std::fabs(hi) : 0.5;
            lo -= pad, hi += pad;
        }
    }
    if (std::isfinite(h.vmin)) lo = h.vmin;
    if (std::isfinite(h.vmax)) hi = h.vmax;
    if (!(lo < hi)) fail(strfmt("heatmap '%s': colour range is empty (vmin %g >= vmax %g)", name.c_str(), lo, hi));
    auto colour = [&](double v) -> RGB {
        if (!std::isfinite(v)) return kNanCell;
        double t = (v - lo) / (hi - lo);
        return h.diverging ? interp(kDiv, t) : interp(kSeq, t);
    };

    const double S = kLabelScale;
    Canvas c(width, height, kWhite);
    // colour bar axis (ticks decide how wide the right margin must be)
    Axis cb;
    cb.lo = lo, cb.hi = hi;
    int top = h.title.empty() ? 18 : (int)(14 + kFontBox * kTitleScale + 10);
    int bottom = (int)(5 + 7 + kFontAscent * S + (h.xlabel.empty() ? 0 : 14 + kFontBox * S) + 14);
    int avail_h = height - top - bottom;
    make_ticks(cb, std::max(2, avail_h / 60));
    const int bar_gap = 18, bar_w = 22;
    int right = (int)(bar_gap + bar_w + 5 + 7 + max_label_width(cb, S) + (h.cbar_label.empty() ? 0 : 12 + kFontBox * S) + 14);
    // index axes: one tick per row/column when they fit, else nice integer steps
    auto index_axis = [&](int n, double len, bool horizontal) {
        Axis a;
        a.lo = -0.5, a.hi = n - 0.5;
        int target = std::max(1, (int)(len / (horizontal ? 70 : 40)));
        double step = n <= target + 1 ? 1 : std::max(1.0, nice_step((n - 1.0) / target));
        for (double k = 0; k <= n - 1; k += step) a.major.push_back(k);
        a.labels = format_linear(a.major, step);
        return a;
    };
    Axis ya = index_axis(h.rows, avail_h, false);
    int left = (int)(12 + (h.ylabel.empty() ? 0 : kFontBox * S + 12) + max_label_width(ya, S) + 8 + 5);
    int avail_w = width - left - right;
    if (avail_w < 40 || avail_h < 40) fail(strfmt("heatmap '%s': image too small for its labels", name.c_str()));
    // square cells when that does not waste too much room; whole pixels per cell when cells are big
    double cell_w = (double)avail_w / h.cols, cell_h = (double)avail_h / h.rows;
    double cell = std::min(cell_w, cell_h);
    int pw = avail_w, ph = avail_h;
    if (cell * h.cols >= 0.45 * avail_w && cell * h.rows >= 0.45 * avail_h) {
        pw = (int)std::floor(cell * h.cols), ph = (int)std::floor(cell * h.rows);
    }
    // whole pixels per cell (crisp edges) when that costs under 6% of the room
    if (pw / h.cols * h.cols >= 0.94 * pw) pw = pw / h.cols * h.cols;
    if (ph / h.rows * h.rows >= 0.94 * ph) ph = ph / h.rows * h.rows;
    int L = left + (avail_w - pw) / 2, T = top, R = L + pw, B = T + ph;

    // cells: sample the cell under each pixel centre
    for (int y = T; y < B; y++) {
        int r = std::min(h.rows - 1, (int)((y - T + 0.5) * h.rows / ph));
        for (int x = L; x < R; x++) {
            int q = std::min(h.cols - 1, (int)((x - L + 0.5) * h.cols / pw));
            RGB col = colour(h.values[(size_t)r * h.cols + q]);
            c.fill(x, y, x + 1, y + 1, col);
        }
    }
    c.rect(L - 1, T - 1, R + 1, B + 1, kAxis);
    // index ticks at cell centres; x labels thinned until they do not touch
    Axis xa = index_axis(h.cols, pw, true);
    auto xpx = [&](double k) { return L + (k + 0.5) * pw / h.cols; };
    auto ypx = [&](double k) { return T + (k + 0.5) * ph / h.rows; };
    for (int pass = 0; pass < 8; pass++) {
        bool ok = true;
        for (size_t i = 0; i + 1 < xa.major.size(); i++) {
            double need = (text_width(xa.labels[i], S) + text_width(xa.labels[i + 1], S)) / 2 + 12;
            if (xpx(xa.major[i + 1]) - xpx(xa.major[i]) < need) ok = false;
        }
        if (ok) break;
        double step = xa.major.size() > 1 ? xa.major[1] - xa.major[0] : 1;
        step = nice_step(step * 1.5);
        xa.major.clear();
        for (double k = 0; k <= h.cols - 1; k += step) xa.major.push_back(k);
        xa.labels = format_linear(xa.major, step);
    }
    for (size_t i = 0; i < xa.major.size(); i++) {
        int x = (int)std::floor(xpx(xa.major[i]));
        c.fill(x, B + 1, x + 1, B + 6, kAxis);
        draw_text(c, xa.labels[i], x + 0.5, B + 12, S, kText, HA::Center, VA::Top);
    }
    for (size_t i = 0; i < ya.major.size(); i++) {
        int y = (int)std::floor(ypx(ya.major[i]));
        c.fill(L - 6, y, L - 1, y + 1, kAxis);
        draw_text(c, ya.labels[i], L - 12, y + 0.5, S, kText, HA::Right, VA::Middle);
    }
    if (!h.xlabel.empty())
        draw_text(c, fit_text(h.xlabel, S, pw + 40), (L + R) / 2.0, B + 12 + kFontAscent * S + 14, S, kText,
                  HA::Center, VA::Top);
    if (!h.ylabel.empty())
        draw_text(c, fit_text(h.ylabel, S, ph), 12, (T + B) / 2.0, S, kText, HA::Left, VA::Middle, true);
    if (!h.title.empty()) {
        double sc = text_width(h.title, kTitleScale) > width - 24 ? kLabelScale : kTitleScale;
        draw_text(c, fit_text(h.title, sc, width - 24), width / 2.0, 14, sc, kText, HA::Center, VA::Top);
    }
    // colour bar: vmax at the top
    int cbx0 = R + bar_gap, cbx1 = cbx0 + bar_w;
    for (int y = T; y < B; y++) {
        double v = hi - (y - T + 0.5) / ph * (hi - lo);
        c.fill(cbx0, y, cbx1, y + 1, colour(v));
    }
    c.rect(cbx0 - 1, T - 1, cbx1 + 1, B + 1, kAxis);
    cb.p0 = B - 0.5, cb.p1 = T + 0.5;
    double maxw = 0;
    for (size_t i = 0; i < cb.major.size(); i++) {
        int y = (int)std::floor(cb.px(cb.major[i]));
        c.fill(cbx1 + 1, y, cbx1 + 6, y + 1, kAxis);
        draw_text(c, cb.labels[i], cbx1 + 10, y + 0.5, S, kText, HA::Left, VA::Middle);
        maxw = std::max(maxw, text_width(cb.labels[i], S));
    }
    if (!h.cbar_label.empty())
        draw_text(c, fit_text(h.cbar_label, S, ph), cbx1 + 10 + maxw + 12, (T + B) / 2.0, S, kText, HA::Left,
                  VA::Middle, true);
    write_png(png_path, c);
}

}  // namespace icl
