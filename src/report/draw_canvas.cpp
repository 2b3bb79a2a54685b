// draw_canvas.cpp — canvas and PNG writing, text, coverage masks, axes (report/draw.h sections 1–4).
#include "report/draw.h"

#include <cstdio>
#include <cstring>
#include <limits>

#include "engine/fileio.h"

// stb headers: static definitions only (no exported symbols, so another file may include them too).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#include <stb/stb_easy_font.h>
#pragma GCC diagnostic pop

namespace icl::draw {

// =====================================================================================================
// 1. Canvas

void write_png(const std::string& path, const Canvas& c) {
    if (path.empty()) fail("plot: empty output path");
    // encode in memory, then one atomic write (engine/fileio.h)
    std::string png;
    auto append = [](void* ctx, void* data, int size) { ((std::string*)ctx)->append((const char*)data, (size_t)size); };
    if (!stbi_write_png_to_func(append, &png, c.w, c.h, 3, c.px.data(), c.w * 3))
        fail(strfmt("cannot write plot '%s': PNG encoding failed", path.c_str()));
    write_file_atomic(path, png);
}

void check_size(const char* what, int width, int height) {
    if (width < 320 || height < 240 || width > 10000 || height > 10000)
        fail(strfmt("%s: image size %dx%d out of range (320x240 .. 10000x10000)", what, width, height));
}

// =====================================================================================================
// 2. Text. stb_easy_font turns a string into axis-aligned quads in "font units" (cap height 7,
// descenders to 9); we rasterize them at `scale` with exact area coverage into an alpha mask.

std::string printable(const std::string& s) {
    std::string t = s;
    for (char& ch : t) {
        unsigned char u = (unsigned char)ch;
        if (u < 32 || u > 126) ch = (ch == '\n' || ch == '\t') ? ' ' : '?';
    }
    return t;
}

Quads text_quads(const std::string& s) {
    Quads q;
    std::string t = printable(s);
    if (t.empty()) return q;
    std::vector<char> buf(t.size() * 1280 + 64);  // 64 bytes per quad, at most ~20 quads per glyph
    int n = stb_easy_font_print(0, 0, &t[0], nullptr, buf.data(), (int)buf.size());
    q.r.reserve((size_t)n * 4);
    for (int i = 0; i < n; i++) {
        float v0[2], v2[2];
        std::memcpy(v0, buf.data() + (size_t)i * 64, sizeof v0);       // vertex 0: top-left
        std::memcpy(v2, buf.data() + (size_t)i * 64 + 32, sizeof v2);  // vertex 2: bottom-right
        q.r.insert(q.r.end(), {v0[0], v0[1], v2[0], v2[1]});
        q.width = std::max(q.width, v2[0]);
    }
    return q;
}

AlphaMask render_text(const std::string& s, double scale) {
    Quads q = text_quads(s);
    AlphaMask m;
    if (q.r.empty()) return m;
    m.w = (int)std::ceil(q.width * scale) + 1;
    m.h = (int)std::ceil(kFontBox * scale) + 1;
    m.a.assign((size_t)m.w * m.h, 0.f);
    for (size_t i = 0; i < q.r.size(); i += 4) {
        double x0 = q.r[i] * scale, y0 = q.r[i + 1] * scale, x1 = q.r[i + 2] * scale, y1 = q.r[i + 3] * scale;
        for (int y = std::max(0, (int)std::floor(y0)); y < std::min(m.h, (int)std::ceil(y1)); y++) {
            double cy = std::min(y1, y + 1.0) - std::max(y0, (double)y);
            for (int x = std::max(0, (int)std::floor(x0)); x < std::min(m.w, (int)std::ceil(x1)); x++) {
                double cx = std::min(x1, x + 1.0) - std::max(x0, (double)x);
                float& a = m.a[(size_t)y * m.w + x];
                a = std::min(1.f, a + (float)(cx * cy));
            }
        }
    }
    return m;
}

void draw_text(Canvas& c, const std::string& s, double x, double y, double scale, RGB col, HA ha, VA va,
               bool rotated) {
    AlphaMask m = render_text(s, scale);
    if (m.w == 0) return;
    if (rotated) {
        AlphaMask r;
        r.w = m.h, r.h = m.w;
        r.a.assign(m.a.size(), 0.f);
        for (int v = 0; v < m.h; v++)
            for (int u = 0; u < m.w; u++) r.a[(size_t)(m.w - 1 - u) * r.w + v] = m.a[(size_t)v * m.w + u];
        m = std::move(r);
    }
    double ox = ha == HA::Left ? 0 : ha == HA::Center ? m.w / 2.0 : m.w;
    double oy;
    if (rotated) oy = va == VA::Top ? 0 : va == VA::Middle ? m.h / 2.0 : m.h;
    else oy = va == VA::Top ? 0 : va == VA::Middle ? kFontAscent * scale / 2 : kFontBox * scale;
    int x0 = (int)std::lround(x - ox), y0 = (int)std::lround(y - oy);
    for (int v = 0; v < m.h; v++)
        for (int u = 0; u < m.w; u++) c.blend(x0 + u, y0 + v, col, m.a[(size_t)v * m.w + u]);
}

std::string fit_text(const std::string& s, double scale, double max_w) {
    if (text_width(s, scale) <= max_w) return s;
    std::string t = s;
    while (!t.empty() && text_width(t + "...", scale) > max_w) t.pop_back();
    return t + "...";
}

// =====================================================================================================
// 3. Coverage masks. A series is drawn as the max-coverage union of anti-aliased capsules (segments
// with round ends) and disks, then composited once, so joints are not darkened twice.

void stroke_run(Mask& m, const std::vector<std::pair<double, double>>& pts, double r, bool dashed) {
    const double on = 9, period = 15;
    if (pts.size() == 1) {
        m.disk(pts[0].first, pts[0].second, r + 0.6);  // a lone point stays visible
        return;
    }
    double phase = 0;  // arc length travelled, for the dash pattern
    for (size_t i = 0; i + 1 < pts.size(); i++) {
        double ax = pts[i].first, ay = pts[i].second, bx = pts[i + 1].first, by = pts[i + 1].second;
        double full = std::hypot(bx - ax, by - ay);
        double cax = ax, cay = ay, cbx = bx, cby = by;
        if (!m.clip(cax, cay, cbx, cby, r + 2)) {
            phase += full;
            continue;
        }
        if (!dashed) {
            m.capsule(cax, cay, cbx, cby, r);
            continue;
        }
        double L = std::hypot(cbx - cax, cby - cay);
        double ph = phase + std::hypot(cax - ax, cay - ay);
        double ux = L > 0 ? (cbx - cax) / L : 0, uy = L > 0 ? (cby - cay) / L : 0;
        double pos = 0;
        while (pos < L) {
            double inper = std::fmod(ph + pos, period);
            if (inper < on) {
                double e = std::min(L, pos + (on - inper));
                m.capsule(cax + ux * pos, cay + uy * pos, cax + ux * e, cay + uy * e, r);
                pos = e;
            } else {
                pos = std::min(L, pos + (period - inper));
            }
            if (pos >= L - 1e-9) break;
        }
        phase += full;
    }
}

std::vector<std::pair<double, double>> reduce_columns(const std::vector<std::pair<double, double>>& pts) {
    std::vector<std::pair<double, double>> out;
    size_t i = 0;
    while (i < pts.size()) {
        double col = std::floor(pts[i].first);
        size_t j = i, lo = i, hi = i;
        while (j < pts.size() && std::floor(pts[j].first) == col) {
            if (pts[j].second < pts[lo].second) lo = j;
            if (pts[j].second > pts[hi].second) hi = j;
            j++;
        }
        size_t keep[4] = {i, std::min(lo, hi), std::max(lo, hi), j - 1};
        for (int k = 0; k < 4; k++)
            if (k == 0 || keep[k] != keep[k - 1]) out.push_back(pts[keep[k]]);
        i = j;
    }
    return out;
}

// =====================================================================================================
// 4. Axes

double nice_step(double raw) {
    double p = std::pow(10.0, std::floor(std::log10(raw)));
    double f = raw / p;
    double m = f <= 1.0 + 1e-9 ? 1 : f <= 2.0 + 1e-9 ? 2 : f <= 5.0 + 1e-9 ? 5 : 10;
    return m * p;
}

int decimals_for(double step) {
    if (!(step > 0) || !std::isfinite(step)) return 0;
    for (int d = 0; d < 12; d++) {
        double v = step * std::pow(10.0, d);
        if (std::fabs(v - std::round(v)) <= 1e-6 * v) return d;
    }
    return 12;
}

std::string compact_sci(double v, int mant_digits) {
    std::string s = strfmt("%.*e", std::max(0, std::min(mant_digits, 6)), v);
    size_t e = s.find('e');
    std::string mant = s.substr(0, e), ex = s.substr(e + 1);
    if (mant.find('.') != std::string::npos) {
        while (mant.back() == '0') mant.pop_back();
        if (mant.back() == '.') mant.pop_back();
    }
    bool neg = ex[0] == '-';
    size_t k = (ex[0] == '-' || ex[0] == '+') ? 1 : 0;
    while (k + 1 < ex.size() && ex[k] == '0') k++;
    return mant + "e" + (neg ? "-" : "") + ex.substr(k);
}

std::string strip_zeros(std::string s) {
    if (s.find('.') == std::string::npos) return s;
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s;
}

double big_unit(double a, const char** suffix) {
    if (a < 1e6) return *suffix = "k", 1e3;
    if (a < 1e9) return *suffix = "M", 1e6;
    if (a < 1e12) return *suffix = "G", 1e9;
    return *suffix = "T", 1e12;
}

std::vector<std::string> format_linear(const std::vector<double>& ticks, double step) {
    std::vector<std::string> out;
    double maxabs = 0;
    for (double t : ticks) maxabs = std::max(maxabs, std::fabs(t));
    int dec = decimals_for(step);
    for (double t : ticks) {
        bool zero = std::fabs(t) < step * 1e-6;
        if (zero && (maxabs >= 1e4 || maxabs < 1e-3 || dec > 4)) {
            out.push_back("0");
            continue;
        }
        if (zero) {
            out.push_back(strfmt("%.*f", dec, 0.0));  // "0.0" next to "0.5", never "-0.0"
        } else if (maxabs >= 1e4 && maxabs < 1e15) {
            const char* suf;
            double unit = big_unit(maxabs, &suf);
            out.push_back(strip_zeros(strfmt("%.*f", decimals_for(step / unit), t / unit)) + suf);
        } else if (maxabs >= 1e15 || maxabs < 1e-3 || dec > 4) {
            int e = (int)std::floor(std::log10(std::fabs(t)));
            int es = (int)std::floor(std::log10(step) + 1e-9);
            out.push_back(compact_sci(t, e - es));
        } else {
            out.push_back(strfmt("%.*f", dec, t));
        }
    }
    return out;
}

std::string format_log_label(double v, bool big_sci) {
    double a = std::fabs(v);
    if (a >= 1e15 || a < 0.01 || (big_sci && a >= 1e3)) return compact_sci(v, 3);
    if (a >= 1e3) {
        const char* suf;
        double unit = big_unit(a, &suf);
        return strfmt("%.4g%s", v / unit, suf);
    }
    return strfmt("%.4g", v);
}

void auto_range(const std::vector<double>& vals, bool log, double fixlo, double fixhi, double margin,
                const char* name, double& lo, double& hi) {
    auto tf = [log](double v) { return log ? std::log10(v) : v; };
    auto inv = [log](double t) { return log ? std::pow(10.0, t) : t; };
    if (log && ((std::isfinite(fixlo) && fixlo <= 0) || (std::isfinite(fixhi) && fixhi <= 0)))
        fail(strfmt("plot: %s range must be > 0 on a log axis", name));
    if (std::isfinite(fixlo) && std::isfinite(fixhi) && !(fixlo < fixhi))
        fail(strfmt("plot: %s range is empty (%g >= %g)", name, fixlo, fixhi));
    double mn = INFINITY, mx = -INFINITY;
    for (double v : vals) mn = std::min(mn, tf(v)), mx = std::max(mx, tf(v));
    bool flo = std::isfinite(fixlo), fhi = std::isfinite(fixhi);
    if (flo) mn = tf(fixlo);
    if (fhi) mx = tf(fixhi);
    if (!(mn <= mx)) {  // a fixed end on the wrong side of all the data
        if (flo) mx = mn + (log ? 1.0 : std::max(1.0, std::fabs(mn)));
        else mn = mx - (log ? 1.0 : std::max(1.0, std::fabs(mx)));
    }
    double span = mx - mn;
    if (span <= 1e-12 * std::max(1.0, std::fabs(mx))) {  // constant data: pad around it
        double pad = log ? 0.5 : (mx != 0 ? 0.1 * std::fabs(mx) : 1.0);
        if (!flo) mn -= pad;
        if (!fhi) mx += pad;
    } else {
        if (!flo) mn -= margin * span;
        if (!fhi) mx += margin * span;
    }
    lo = flo ? fixlo : inv(mn);
    hi = fhi ? fixhi : inv(mx);
}

std::vector<double> linear_ticks(double lo, double hi, int target, double* step_out) {
    // among the 1-2-5 steps near span/target, take the one whose tick count is closest to target
    target = std::max(1, target);
    double step = nice_step((hi - lo) / target), best = INFINITY;
    const double cands[] = {step / 2.5, step / 2, step, step * 2, step * 2.5};
    for (double cnd : cands) {
        double s = nice_step(cnd * (1 - 1e-9));
        double n = std::floor(hi / s + 1e-9) - std::ceil(lo / s - 1e-9) + 1;
        double score = std::fabs(n - target) + (n > target ? 0.25 : 0);  // ties: fewer ticks
        if (n >= 2 && score < best) best = score, step = s;
    }
    std::vector<double> t;
    double k0 = std::ceil(lo / step - 1e-9), k1 = std::floor(hi / step + 1e-9);
    for (double k = k0; k <= k1 && t.size() < 1000; k++) {
        double v = k * step;
        if (std::fabs(v) < step * 1e-9) v = 0;
        t.push_back(v);
    }
    if (step_out) *step_out = step;
    return t;
}

void make_ticks(Axis& ax, int target) {
    ax.major.clear(), ax.minor.clear(), ax.labels.clear();
    target = std::max(2, target);
    if (!ax.log) {
        double step;
        ax.major = linear_ticks(ax.lo, ax.hi, target, &step);
        ax.labels = format_linear(ax.major, step);
        return;
    }
    double a = std::log10(ax.lo), b = std::log10(ax.hi);
    int k0 = (int)std::ceil(a - 1e-9), k1 = (int)std::floor(b + 1e-9);
    int ndec = k1 - k0 + 1;
    std::vector<double> t125, all19;
    for (int k = k0 - 1; k <= k1 && (b - a) < 40; k++)
        for (int m = 1; m <= 9; m++) {
            double v = m * std::pow(10.0, k);
            if (v < ax.lo * (1 - 1e-9) || v > ax.hi * (1 + 1e-9)) continue;
            (m == 1 || m == 2 || m == 5 ? t125 : all19).push_back(v);
        }
    if (ndec >= 3 || (ndec == 2 && (int)t125.size() > target + 1)) {  // powers of ten
        int step = 1;
        const int steps[] = {1, 2, 5, 10, 20, 50, 100};
        for (int s : steps) {
            step = s;
            if ((k1 - k0) / s + 1 <= target + 1) break;
        }
        for (int k = k0; k <= k1; k++) {
            if (((k % step) + step) % step == 0) ax.major.push_back(std::pow(10.0, k));
            else if (step <= 2) ax.minor.push_back(std::pow(10.0, k));
        }
        if (step == 1 && b - a <= 8) {
            for (double v : t125)
                if (std::fabs(std::log10(v) - std::round(std::log10(v))) > 1e-6) ax.minor.push_back(v);
            ax.minor.insert(ax.minor.end(), all19.begin(), all19.end());
        }
    } else if (t125.size() >= 2 && (int)t125.size() <= target + 1) {  // 1, 2, 5 x 10^k
        ax.major = t125;
        ax.minor = all19;
    } else {  // less than a decade: plain nice ticks, formatted as on a linear axis
        double step;
        ax.major = linear_ticks(ax.lo, ax.hi, target, &step);
        ax.labels = format_linear(ax.major, step);
        return;
    }
    bool big_sci = !ax.major.empty() && ax.major.back() >= 1e9;
    for (double v : ax.major) ax.labels.push_back(format_log_label(v, big_sci));
}

double max_label_width(const Axis& ax, double scale) {
    double w = 0;
    for (auto& s : ax.labels) w = std::max(w, text_width(s, scale));
    return w;
}

}  // namespace icl::draw
