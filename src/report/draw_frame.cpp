// draw_frame.cpp — the frame shared by line plots and scatter plots (title, axes, grid, ticks, labels) and the
// corner legend (report/draw.h section 5).
#include "report/draw.h"

#include <limits>

namespace icl::draw {

// =====================================================================================================
// 5. Line plot and scatter: a shared frame (title, axes, grid, ticks, labels) and a corner legend.

Frame layout_frame(int W, int H, const std::string& title, const std::string& xlabel, const std::string& ylabel,
                   Axis xa, Axis ya, int reserve_right) {
    const double S = kLabelScale;
    Frame f;
    f.T = title.empty() ? 18 : (int)(14 + kFontBox * kTitleScale + 10);
    int bottom = (int)(5 + 7 + kFontAscent * S + (xlabel.empty() ? 0 : 14 + kFontBox * S) + 14);
    f.B = H - bottom;
    f.y = ya;
    f.y.p0 = f.B - 0.5, f.y.p1 = f.T + 0.5;
    // y ticks: ~one per 55 px, fewer if labels would touch vertically (they never do at this spacing)
    for (int target = (int)((f.B - f.T) / 55.0);; target--) {
        make_ticks(f.y, target);
        bool ok = true;  // labels (14 px tall) at least 8 px apart
        for (size_t i = 0; i + 1 < f.y.major.size(); i++)
            if (std::fabs(f.y.px(f.y.major[i + 1]) - f.y.px(f.y.major[i])) < kFontAscent * S + 8) ok = false;
        if (ok || target <= 2) break;
    }
    int left = (int)(12 + (ylabel.empty() ? 0 : kFontBox * S + 12) + max_label_width(f.y, S) + 8 + 5);
    f.L = left;
    int right = 24 + reserve_right;  // reserve_right: room for a legend beside the plot
    f.x = xa;
    for (int pass = 0; pass < 2; pass++) {
        f.R = W - right;
        f.x.p0 = f.L + 0.5, f.x.p1 = f.R - 0.5;
        double len = f.R - f.L;
        int target = std::max(2, (int)(len / 90));
        for (;; target--) {
            make_ticks(f.x, target);
            // labels must be at least 16 px apart
            bool ok = true;
            for (size_t i = 0; i + 1 < f.x.major.size(); i++) {
                double gap = f.x.px(f.x.major[i + 1]) - f.x.px(f.x.major[i]);
                double need = (text_width(f.x.labels[i], S) + text_width(f.x.labels[i + 1], S)) / 2 + 16;
                if (gap < need) ok = false;
            }
            if (ok || target <= 2) break;
        }
        // room for the half of the last label that sticks out on the right
        if (f.x.major.empty()) break;
        double over = f.x.px(f.x.major.back()) + text_width(f.x.labels.back(), S) / 2 + 8 - (W - 4);
        if (over <= 0) break;
        right += (int)std::ceil(over);
    }
    return f;
}

void draw_grid(Canvas& c, const Frame& f) {
    auto vline = [&](double xp, RGB col) {
        int x = (int)std::floor(xp);
        if (x > f.L && x < f.R - 1) c.fill(x, f.T, x + 1, f.B, col);
    };
    auto hline = [&](double yp, RGB col) {
        int y = (int)std::floor(yp);
        if (y > f.T && y < f.B - 1) c.fill(f.L, y, f.R, y + 1, col);
    };
    for (double v : f.x.minor) vline(f.x.px(v), kGridMinor);
    for (double v : f.y.minor) hline(f.y.px(v), kGridMinor);
    for (double v : f.x.major) vline(f.x.px(v), kGrid);
    for (double v : f.y.major) hline(f.y.px(v), kGrid);
}

void draw_frame(Canvas& c, const Frame& f, int W, const std::string& title, const std::string& xlabel,
                const std::string& ylabel) {
    const double S = kLabelScale;
    c.rect(f.L - 1, f.T - 1, f.R + 1, f.B + 1, kAxis);
    for (size_t i = 0; i < f.x.major.size(); i++) {
        int x = (int)std::floor(f.x.px(f.x.major[i]));
        c.fill(x, f.B + 1, x + 1, f.B + 6, kAxis);
        draw_text(c, f.x.labels[i], x + 0.5, f.B + 12, S, kText, HA::Center, VA::Top);
    }
    for (size_t i = 0; i < f.y.major.size(); i++) {
        int y = (int)std::floor(f.y.px(f.y.major[i]));
        c.fill(f.L - 6, y, f.L - 1, y + 1, kAxis);
        draw_text(c, f.y.labels[i], f.L - 12, y + 0.5, S, kText, HA::Right, VA::Middle);
    }
    for (double v : f.x.minor) {
        int x = (int)std::floor(f.x.px(v));
        c.fill(x, f.B + 1, x + 1, f.B + 4, kAxis);
    }
    for (double v : f.y.minor) {
        int y = (int)std::floor(f.y.px(v));
        c.fill(f.L - 4, y, f.L - 1, y + 1, kAxis);
    }
    if (!xlabel.empty()) {
        std::string t = fit_text(xlabel, S, f.R - f.L);
        draw_text(c, t, (f.L + f.R) / 2.0, f.B + 12 + kFontAscent * S + 14, S, kText, HA::Center, VA::Top);
    }
    if (!ylabel.empty()) {
        std::string t = fit_text(ylabel, S, f.B - f.T);
        draw_text(c, t, 12, (f.T + f.B) / 2.0, S, kText, HA::Left, VA::Middle, /*rotated=*/true);
    }
    if (!title.empty()) {
        double sc = kTitleScale;
        if (text_width(title, sc) > W - 24) sc = kLabelScale;
        std::string t = fit_text(title, sc, W - 24);
        draw_text(c, t, W / 2.0, 14, sc, kText, HA::Center, VA::Top);
    }
}

Legend build_legend(const std::vector<LegendEntry>& all, double max_label_w, int max_h) {
    Legend L;
    if (all.empty()) return L;
    const double S = kLabelScale;
    size_t fit = (size_t)std::max(1, (max_h - 2 * kLegPad + 5) / legend_row());
    if (all.size() > fit) {
        L.entries.assign(all.begin(), all.begin() + (fit - 1));
        L.entries.push_back({strfmt("(+%zu more)", all.size() - (fit - 1)), kWhite, false, false, false});
    } else {
        L.entries = all;
    }
    double maxw = 0;
    for (auto& e : L.entries) {
        L.labels.push_back(fit_text(e.label, S, std::max(40.0, max_label_w)));
        maxw = std::max(maxw, text_width(L.labels.back(), S));
    }
    L.w = (int)(kLegPad + kLegSample + kLegGap + maxw + kLegPad);
    L.h = (int)(kLegPad + L.entries.size() * legend_row() - 5 + kLegPad);
    return L;
}

double overlap(const Mask& occ, int x0, int y0, int w, int h) {
    double s = 0;
    for (int y = std::max(y0, occ.y0); y < std::min(y0 + h, occ.y0 + occ.h); y++)
        for (int x = std::max(x0, occ.x0); x < std::min(x0 + w, occ.x0 + occ.w); x++)
            s += occ.a[(size_t)(y - occ.y0) * occ.w + (x - occ.x0)];
    return s;
}

double best_corner(const Frame& f, const Legend& L, const Mask& occ, int* bx, int* by) {
    const int inset = 10, pw = f.R - f.L;
    const int cands[6][2] = {{f.R - inset - L.w, f.T + inset},     {f.L + inset, f.T + inset},
                             {f.R - inset - L.w, f.B - inset - L.h}, {f.L + inset, f.B - inset - L.h},
                             {f.L + (pw - L.w) / 2, f.T + inset},    {f.L + (pw - L.w) / 2, f.B - inset - L.h}};
    double best = INFINITY;
    for (auto& k : cands) {
        double s = overlap(occ, k[0], k[1], L.w, L.h);
        if (s < best - 0.5) best = s, *bx = k[0], *by = k[1];
    }
    return best;
}

void paint_legend(Canvas& c, const Legend& L, int x0, int y0) {
    if (L.entries.empty()) return;
    const double S = kLabelScale;
    c.fill(x0, y0, x0 + L.w, y0 + L.h, kWhite, 0.9);
    c.rect(x0, y0, x0 + L.w, y0 + L.h, RGB{190, 190, 190});
    Mask m(x0, y0, L.w, L.h);
    for (size_t i = 0; i < L.entries.size(); i++) {
        const LegendEntry& e = L.entries[i];
        double cy = y0 + kLegPad + i * legend_row() + kFontAscent * S / 2;
        double sx0 = x0 + kLegPad, sx1 = sx0 + kLegSample;
        m.clear();
        if (e.line) stroke_run(m, {{sx0, cy}, {sx1, cy}}, 1.1, e.dashed);
        if (e.marker) m.disk((sx0 + sx1) / 2, cy, e.line ? 3.2 : 4.0);
        m.composite(c, e.color);
        draw_text(c, L.labels[i], e.line || e.marker ? sx1 + kLegGap : sx0, cy, S, kText, HA::Left, VA::Middle);
    }
}

void finish_with_legend(const std::function<Drawn(int)>& render, const std::vector<LegendEntry>& entries,
                        int width, const std::string& png_path) {
    Drawn d = render(0);
    if (!entries.empty()) {
        const double fixed = kLegPad * 2 + kLegSample + kLegGap;
        int pw = d.f.R - d.f.L, ph = d.f.B - d.f.T;
        Legend in = build_legend(entries, pw * 0.55 - fixed, ph - 20);
        int x = 0, y = 0;
        double ov = best_corner(d.f, in, d.occ, &x, &y);
        bool crowded = ov > 0.005 * in.w * in.h || in.entries.size() < entries.size();
        Legend out = build_legend(entries, width * 0.3 - fixed, ph);
        int reserve = out.w + 14;
        if (crowded && pw - reserve >= 0.45 * width) {
            d = render(reserve);
            paint_legend(d.c, out, d.f.R + 14, d.f.T);
        } else {
            paint_legend(d.c, in, x, y);
        }
    }
    write_png(png_path, d.c);
}

}  // namespace icl::draw
