// plot.cpp — line plots, heatmaps and scatter plots rendered by hand into an RGB buffer, written as PNG.
// See plot.h for the API. Layout of this file:
//   1. canvas + PNG writing           4. axes: ranges, nice ticks, compact labels
//   2. text (stb_easy_font quads)      5. line plot / scatter (shared frame), legend
//   3. coverage masks: lines, dots     6. heatmap + colour bar                    7. CSV reader
#include "engine/plot.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>

#include "engine/common.h"
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

namespace icl {
namespace {

// =====================================================================================================
// 1. Canvas

struct RGB {
    uint8_t r, g, b;
};

const RGB kWhite{255, 255, 255};
const RGB kText{30, 30, 30};
const RGB kAxis{70, 70, 70};
const RGB kGrid{228, 228, 228};
const RGB kGridMinor{242, 242, 242};
const RGB kRef{90, 90, 90};
const RGB kNanCell{150, 150, 150};

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

const double kFontAscent = 7.0;  // cap height in font units
const double kFontBox = 9.0;     // cap top to descender bottom
const double kLabelScale = 2.0;  // tick labels, axis labels, legend
const double kTitleScale = 3.0;

std::string printable(const std::string& s) {
    std::string t = s;
    for (char& ch : t) {
        unsigned char u = (unsigned char)ch;
        if (u < 32 || u > 126) ch = (ch == '\n' || ch == '\t') ? ' ' : '?';
    }
    return t;
}

struct Quads {
    std::vector<float> r;  // x0,y0,x1,y1 per quad (font units)
    float width = 0;       // right edge of the ink
};

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

double text_width(const std::string& s, double scale) { return std::ceil(text_quads(s).width * scale); }

struct AlphaMask {
    int w = 0, h = 0;
    std::vector<float> a;  // (h, w)
};

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

enum class HA { Left, Center, Right };
enum class VA { Top, Middle, Bottom };  // unrotated: cap top / cap middle / descender bottom

// Draw text anchored at (x, y). `rotated` turns it 90 degrees counter-clockwise (reads bottom to top);
// then the anchor refers to the rotated box (Middle = box centre).
void draw_text(Canvas& c, const std::string& s, double x, double y, double scale, RGB col, HA ha, VA va,
               bool rotated = false) {
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

// Shorten s with "..." until it fits in max_w pixels at this scale.
std::string fit_text(const std::string& s, double scale, double max_w) {
    if (text_width(s, scale) <= max_w) return s;
    std::string t = s;
    while (!t.empty() && text_width(t + "...", scale) > max_w) t.pop_back();
    return t + "...";
}

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

// Many points per pixel column (long runs): keep, per column, the first, lowest, highest and last
// point in their original order. The drawn line is the same; the work drops to ~4 points per column.
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

const RGB kPalette[] = {
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
const int kPaletteN = (int)(sizeof(kPalette) / sizeof(kPalette[0]));
RGB palette(int i) { return kPalette[((i % kPaletteN) + kPaletteN) % kPaletteN]; }

struct Anchor {
    double t;
    uint8_t r, g, b;
};
// Sequential: dark violet -> blue -> teal -> green -> yellow; lightness rises monotonically.
const Anchor kSeq[] = {{0.000, 66, 4, 86},    {0.125, 71, 40, 122}, {0.250, 60, 80, 140},
                       {0.375, 46, 112, 142}, {0.500, 34, 144, 140}, {0.625, 38, 174, 124},
                       {0.750, 90, 200, 98},  {0.875, 168, 220, 52}, {1.000, 250, 230, 36}};
// Diverging: blue -> near-white -> red.
const Anchor kDiv[] = {{0.00, 34, 74, 150},   {0.25, 118, 160, 212}, {0.50, 246, 246, 246},
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
double nice_step(double raw) {
    double p = std::pow(10.0, std::floor(std::log10(raw)));
    double f = raw / p;
    double m = f <= 1.0 + 1e-9 ? 1 : f <= 2.0 + 1e-9 ? 2 : f <= 5.0 + 1e-9 ? 5 : 10;
    return m * p;
}

// Digits after the decimal point that show multiples of `step` exactly (0.5 -> 1, 2.5 -> 1, 0.25 -> 2).
int decimals_for(double step) {
    if (!(step > 0) || !std::isfinite(step)) return 0;
    for (int d = 0; d < 12; d++) {
        double v = step * std::pow(10.0, d);
        if (std::fabs(v - std::round(v)) <= 1e-6 * v) return d;
    }
    return 12;
}

// "2.50e-05" -> "2.5e-5"
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

// Suffix unit for big numbers: k, M, G, T.
double big_unit(double a, const char** suffix) {
    if (a < 1e6) return *suffix = "k", 1e3;
    if (a < 1e9) return *suffix = "M", 1e6;
    if (a < 1e12) return *suffix = "G", 1e9;
    return *suffix = "T", 1e12;
}

// Labels for evenly spaced ticks: one format for the whole axis.
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

// One label on a log axis (each tick on its own: 1e-3, 0.01, 0.5, 20, 1k, 2M).
// With big_sci (an axis reaching 1e9) every label >= 1000 is 1e3-style too, so one axis never mixes
// "10M" with "1e12".
std::string format_log_label(double v, bool big_sci = false) {
    double a = std::fabs(v);
    if (a >= 1e15 || a < 0.01 || (big_sci && a >= 1e3)) return compact_sci(v, 3);
    if (a >= 1e3) {
        const char* suf;
        double unit = big_unit(a, &suf);
        return strfmt("%.4g%s", v / unit, suf);
    }
    return strfmt("%.4g", v);
}

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

// Ticks of a linear axis [lo,hi] with about `target` ticks.
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

// Ticks + labels for an axis with about `target` major ticks.
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

// =====================================================================================================
// 5. Line plot and scatter: a shared frame (title, axes, grid, ticks, labels) and a corner legend.

struct Frame {
    int L, T, R, B;  // plot area [L,R) x [T,B) in pixels
    Axis x, y;
};

// Lay out the plot area for a W x H image, choosing tick counts so labels never overlap.
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
const int kLegPad = 8, kLegSample = 30, kLegGap = 8;
int legend_row() { return (int)(kFontBox * kLabelScale + 5); }

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

// Sum of data coverage under a box.
double overlap(const Mask& occ, int x0, int y0, int w, int h) {
    double s = 0;
    for (int y = std::max(y0, occ.y0); y < std::min(y0 + h, occ.y0 + occ.h); y++)
        for (int x = std::max(x0, occ.x0); x < std::min(x0 + w, occ.x0 + occ.w); x++)
            s += occ.a[(size_t)(y - occ.y0) * occ.w + (x - occ.x0)];
    return s;
}

// The corner (or edge centre) of the plot area where the legend covers the least data.
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

// A drawn plot without its legend: the image, the frame, and where data was drawn.
struct Drawn {
    Canvas c;
    Frame f;
    Mask occ;
};

// Legend placement: inside the plot area in the emptiest corner; if every corner covers data (or not
// all entries fit), draw the plot again narrower and put the legend to the right of it.
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

}  // namespace

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
    for (const Series& s : p.series) {
        if (!s.x.empty() && s.x.size() != s.y.size())
            fail(strfmt("line plot '%s': series '%s' has %zu x values but %zu y values", name.c_str(),
                        s.label.c_str(), s.x.size(), s.y.size()));
        for (size_t i = 0; i < s.y.size(); i++) {
            double xv = s.x.empty() ? (double)i : s.x[i], yv = s.y[i];
            if (xa.valid(xv) && ya.valid(yv)) xs.push_back(xv), ys.push_back(yv);
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

// ------------------------------------------------------------------------------------------------------
// 7. CSV

int CsvTable::find(const std::string& name) const {
    for (size_t i = 0; i < header.size(); i++)
        if (header[i] == name) return (int)i;
    return -1;
}

const std::vector<double>& CsvTable::col(const std::string& name) const {
    int i = find(name);
    if (i < 0) fail(strfmt("CSV has no column '%s'", name.c_str()));
    return cols[(size_t)i];
}

namespace {

std::string trim(const std::string& s) {
    size_t a = 0, b = s.size();
    while (a < b && (s[a] == ' ' || s[a] == '\t')) a++;
    while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) b--;
    return s.substr(a, b - a);
}

// Split one CSV line; fields may be "quoted" with "" for a literal quote.
std::vector<std::string> split_csv_line(const std::string& line, const std::string& where) {
    std::vector<std::string> out;
    std::string cur;
    size_t i = 0;
    for (;;) {
        cur.clear();
        while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) i++;
        if (i < line.size() && line[i] == '"') {
            i++;
            for (;;) {
                if (i >= line.size()) fail(where + ": unterminated quoted field");
                if (line[i] == '"') {
                    if (i + 1 < line.size() && line[i + 1] == '"') cur += '"', i += 2;
                    else {
                        i++;
                        break;
                    }
                } else {
                    cur += line[i++];
                }
            }
            while (i < line.size() && line[i] != ',') {
                if (line[i] != ' ' && line[i] != '\t') fail(where + ": text after a closing quote");
                i++;
            }
            out.push_back(cur);
        } else {
            while (i < line.size() && line[i] != ',') cur += line[i++];
            out.push_back(trim(cur));
        }
        if (i >= line.size()) break;
        i++;  // the comma
    }
    return out;
}

}  // namespace

CsvTable read_csv(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(strfmt("cannot open CSV file '%s'", path.c_str()));
    CsvTable t;
    std::string line;
    size_t lineno = 0;
    bool have_header = false;
    while (std::getline(in, line)) {
        lineno++;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (lineno == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);  // UTF-8 BOM
        if (trim(line).empty()) continue;
        const std::string where = strfmt("%s:%zu", path.c_str(), lineno);
        std::vector<std::string> cells = split_csv_line(line, where);
        if (!have_header) {
            for (size_t c = 0; c < cells.size(); c++) {
                if (cells[c].empty()) fail(strfmt("%s: empty column name (column %zu)", where.c_str(), c + 1));
                for (size_t d = 0; d < c; d++)
                    if (cells[d] == cells[c]) fail(strfmt("%s: duplicate column name '%s'", where.c_str(), cells[c].c_str()));
            }
            t.header = cells;
            t.cols.assign(cells.size(), {});
            t.text_cells.assign(cells.size(), 0);
            have_header = true;
            continue;
        }
        if (cells.size() != t.header.size())
            fail(strfmt("%s: row has %zu cells but the header has %zu columns", where.c_str(), cells.size(),
                        t.header.size()));
        for (size_t c = 0; c < cells.size(); c++) {
            const std::string& s = cells[c];
            double v = NAN;
            if (!s.empty()) {
                char* end = nullptr;
                double d = std::strtod(s.c_str(), &end);
                if (end == s.c_str() + s.size()) v = d;
                else t.text_cells[c]++;
            }
            t.cols[c].push_back(v);
        }
    }
    if (in.bad()) fail(strfmt("error reading CSV file '%s'", path.c_str()));
    if (!have_header) fail(strfmt("CSV file '%s' is empty (no header row)", path.c_str()));
    return t;
}

}  // namespace icl
