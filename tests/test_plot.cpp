// test_plot.cpp — the PNG plots (src/report/plot.h): line plots (linear, log, NaN gaps, reference lines),
// heatmaps (sequential, diverging, colour bar), scatter; every refusal; the CSV log reader; the ticks and
// their labels; and the plotlog tool (found beside the test binary, tests/run_binary.h).
// Images are decoded back with stb_image and checked pixel by pixel.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/common.h"
#include "report/plot.h"
#include "file_util.h"
#include "run_binary.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

namespace {

using icl_test::slurp;
using icl_test::spit;
using icl_test::TmpDir;  // a fresh /tmp directory, removed with its contents at the end of the test

struct Image {
    int w = 0, h = 0;
    std::vector<unsigned char> px;  // RGB
    const unsigned char* at(int x, int y) const { return &px[((size_t)y * w + x) * 3]; }
    bool is(int x, int y, const unsigned char c[3]) const {
        const unsigned char* p = at(x, y);
        return p[0] == c[0] && p[1] == c[1] && p[2] == c[2];
    }
    // pixels exactly equal to c
    size_t count(const unsigned char c[3]) const {
        size_t n = 0;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) n += is(x, y, c);
        return n;
    }
    size_t non_white() const {
        size_t n = 0;
        for (size_t i = 0; i < px.size(); i += 3) n += !(px[i] == 255 && px[i + 1] == 255 && px[i + 2] == 255);
        return n;
    }
};

Image load_png(const std::string& path) {
    Image im;
    int n = 0;
    unsigned char* data = stbi_load(path.c_str(), &im.w, &im.h, &n, 3);
    REQUIRE_MESSAGE(data != nullptr, "cannot decode " << path);
    im.px.assign(data, data + (size_t)im.w * im.h * 3);
    stbi_image_free(data);
    return im;
}

bool exists(const std::string& p) { return std::filesystem::exists(p); }



icl::LinePlot loss_plot() {
    icl::LinePlot p;
    p.title = "loss curves";
    p.xlabel = "step";
    p.ylabel = "loss";
    icl::Series a, b;
    a.label = "train", b.label = "val", b.markers = true, b.dashed = true;
    for (int i = 0; i <= 500; i += 5) a.x.push_back(i), a.y.push_back(0.8 + 3 * std::exp(-i / 120.0));
    for (int i = 0; i <= 500; i += 50) b.x.push_back(i), b.y.push_back(0.9 + 3 * std::exp(-i / 130.0));
    p.series = {a, b};
    return p;
}

// Distinct saturated colours (not grey text, not white) in the image.
size_t saturated_colours(const Image& im) {
    std::set<int> s;
    for (size_t i = 0; i < im.px.size(); i += 3) {
        int r = im.px[i], g = im.px[i + 1], b = im.px[i + 2];
        if (std::max({r, g, b}) - std::min({r, g, b}) > 40) s.insert(r << 16 | g << 8 | b);
    }
    return s.size();
}

int run_cmd(const std::string& cmd) {
    int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace

TEST_SUITE("plot") {

TEST_CASE("line plot: linear y, size, series colours in the plot area, no temp file left") {
    TmpDir dir;
    icl::LinePlot p = loss_plot();
    icl::save_line_plot(dir / "loss.png", p, 640, 420);
    CHECK_FALSE(exists(dir / "loss.png.tmp.png"));
    Image im = load_png(dir / "loss.png");
    CHECK(im.w == 640);
    CHECK(im.h == 420);
    CHECK(im.non_white() > 3000);
    unsigned char c0[3], c1[3];
    icl::palette_color(0, c0);
    icl::palette_color(1, c1);
    CHECK(im.count(c0) > 300);  // a 2-px line across the plot
    CHECK(im.count(c1) > 50);   // dashed + markers
    // the series colour lies inside the plot area, not in the margins
    size_t inside = 0, outside = 0;
    for (int y = 0; y < im.h; y++)
        for (int x = 0; x < im.w; x++)
            if (im.is(x, y, c0)) (x > 60 && x < im.w - 10 && y > 30 && y < im.h - 40 ? inside : outside)++;
    CHECK(inside > 300);
    CHECK(outside < 120);  // the legend's sample line only
}

TEST_CASE("line plot: log y with NaN gaps, a reference line and an all-NaN series") {
    TmpDir dir;
    icl::LinePlot p = loss_plot();
    p.logy = true;
    p.series[0].y[10] = NAN;
    p.series[0].y[11] = INFINITY;
    p.series[0].y[20] = -1;  // not drawable on a log axis: skipped
    icl::Series empty;
    empty.label = "diverged";
    empty.y = {NAN, NAN, NAN};
    p.series.push_back(empty);
    p.hlines.push_back({"Bayes optimal", 0.7});
    icl::save_line_plot(dir / "log.png", p);
    Image im = load_png(dir / "log.png");
    CHECK(im.w == 900);
    CHECK(im.h == 560);
    unsigned char c0[3];
    icl::palette_color(0, c0);
    CHECK(im.count(c0) > 300);
    // the reference line: a long dashed run of the reference grey on one row
    const unsigned char ref[3] = {90, 90, 90};
    int best_row = 0;
    for (int y = 0; y < im.h; y++) {
        int n = 0;
        for (int x = 0; x < im.w; x++) n += im.is(x, y, ref);
        best_row = std::max(best_row, n);
    }
    CHECK(best_row > 300);
}

TEST_CASE("line plot: x omitted, constant series, fixed y range, log x") {
    TmpDir dir;
    icl::LinePlot p;
    icl::Series s;
    s.label = "flat";
    s.y = {2, 2, 2, 2};
    p.series = {s};
    icl::save_line_plot(dir / "flat.png", p);
    CHECK(load_png(dir / "flat.png").non_white() > 1000);
    p.ymin = 0, p.ymax = 1;  // the data is outside: plot is empty but well defined
    icl::save_line_plot(dir / "clip.png", p);
    CHECK(exists(dir / "clip.png"));
    icl::LinePlot q;
    q.logx = q.logy = true;
    icl::Series t;
    for (int i = 1; i <= 100; i++) t.x.push_back(i * 100.0), t.y.push_back(1e-3 / i);
    q.series = {t};
    icl::save_line_plot(dir / "loglog.png", q);
    CHECK(load_png(dir / "loglog.png").non_white() > 1000);
    // a single point
    icl::LinePlot one;
    one.series = {icl::Series{"one", {3}, {4}}};
    icl::save_line_plot(dir / "one.png", one);
    unsigned char c0[3];
    icl::palette_color(0, c0);
    CHECK(load_png(dir / "one.png").count(c0) > 5);
}

TEST_CASE("line plot: error bars are drawn in the series colour, stretch the y range, and a size mismatch is refused") {
    TmpDir dir;
    icl::LinePlot p = icl::make_line_plot("bars", "x", "y");
    icl::Series s;
    s.label = "mean";
    s.markers = true;
    s.x = {1, 2, 3};
    s.y = {1.0, 1.1, 1.2};
    p.series = {s};
    p.ymin = 0, p.ymax = 2;  // the same axes with and without bars
    icl::save_line_plot(dir / "plain.png", p, 480, 320);
    p.yerr = {{0.5, NAN, 0.5}};  // a NaN half-width: no bar at that point
    icl::save_line_plot(dir / "bars.png", p, 480, 320);
    unsigned char c0[3];
    icl::palette_color(0, c0);
    const Image a = load_png(dir / "plain.png"), b = load_png(dir / "bars.png");
    // two bars of 2·0.5/2 of the plot height (~130 px each, antialiased) and their caps
    CHECK(b.non_white() > a.non_white() + 150);
    // without a fixed range the bars' ends are inside it: y from 0.5 to 1.7 at least
    p.ymin = NAN, p.ymax = NAN;
    icl::save_line_plot(dir / "auto.png", p, 480, 320);
    const Image c = load_png(dir / "auto.png");
    CHECK(c.non_white() > a.non_white());
    p.yerr = {{0.1, 0.1}};
    CHECK_THROWS_WITH_AS(icl::save_line_plot(dir / "bad.png", p), doctest::Contains("has 2 error bars but 3 y values"), icl::Error);
    p.yerr = {{}, {}};
    CHECK_THROWS_WITH_AS(icl::save_line_plot(dir / "bad.png", p), doctest::Contains("error bars for 2 series but 1 series"), icl::Error);
}

TEST_CASE("line plot: errors name the problem") {
    TmpDir dir;
    icl::LinePlot p = loss_plot();
    p.series[1].x.pop_back();
    CHECK_THROWS_WITH_AS(icl::save_line_plot(dir / "a.png", p), doctest::Contains("x values"), icl::Error);
    icl::LinePlot nan;
    nan.series = {icl::Series{"n", {1, 2}, {NAN, NAN}}};
    CHECK_THROWS_WITH_AS(icl::save_line_plot(dir / "b.png", nan), doctest::Contains("no finite point"), icl::Error);
    icl::LinePlot none;
    CHECK_THROWS_AS(icl::save_line_plot(dir / "c.png", none), icl::Error);
    icl::LinePlot neg;
    neg.logy = true;
    neg.series = {icl::Series{"n", {1, 2}, {-1, 0}}};
    CHECK_THROWS_WITH_AS(icl::save_line_plot(dir / "d.png", neg), doctest::Contains("log"), icl::Error);
    icl::LinePlot ok = loss_plot();
    CHECK_THROWS_WITH_AS(icl::save_line_plot(dir / "no_such_dir/e.png", ok), doctest::Contains("cannot write"),
                         icl::Error);
    CHECK_FALSE(exists(dir / "no_such_dir"));
    ok.ymin = 2, ok.ymax = 1;
    CHECK_THROWS_AS(icl::save_line_plot(dir / "f.png", ok), icl::Error);
    ok = loss_plot();
    ok.hlines.push_back({"bad", NAN});
    CHECK_THROWS_AS(icl::save_line_plot(dir / "g.png", ok), icl::Error);
    CHECK_THROWS_AS(icl::save_line_plot(dir / "h.png", loss_plot(), 10, 10), icl::Error);
    for (const char* f : {"a", "b", "c", "d", "f", "g", "h"}) CHECK_FALSE(exists(dir / (std::string(f) + ".png")));
}

TEST_CASE("heatmap: sequential, colour bar gradient, NaN cells grey") {
    TmpDir dir;
    icl::Heatmap h;
    h.title = "checkerboard";
    h.xlabel = "key";
    h.ylabel = "query";
    h.cbar_label = "weight";
    h.rows = 9, h.cols = 13;
    for (int r = 0; r < h.rows; r++)
        for (int c = 0; c < h.cols; c++) h.values.push_back((r + c) % 2 ? 1.0 : 0.0);
    h.values[0] = NAN;
    icl::save_heatmap(dir / "heat.png", h, 700, 560);
    Image im = load_png(dir / "heat.png");
    CHECK(im.w == 700);
    CHECK(im.h == 560);
    unsigned char lo[3], hi[3];
    icl::colormap_sequential(0.0, lo);
    icl::colormap_sequential(1.0, hi);
    CHECK(im.count(lo) > 2000);  // the cells
    CHECK(im.count(hi) > 2000);
    // the data has two colours; the colour bar adds a smooth gradient of many more
    CHECK(saturated_colours(im) > 60);
    const unsigned char grey[3] = {150, 150, 150};
    CHECK(im.count(grey) > 400);  // the NaN cell
    // a vertical gradient: some column holds > 150 distinct saturated colours from top to bottom
    size_t best = 0;
    for (int x = 0; x < im.w; x++) {
        std::set<int> s;
        for (int y = 0; y < im.h; y++) {
            const unsigned char* p = im.at(x, y);
            s.insert(p[0] << 16 | p[1] << 8 | p[2]);
        }
        best = std::max(best, s.size());
    }
    CHECK(best > 100);
}

TEST_CASE("heatmap: diverging map centred at 0, large matrix, fixed range") {
    TmpDir dir;
    icl::Heatmap h;
    h.title = "signed";
    h.diverging = true;
    h.rows = 64, h.cols = 301;
    for (int r = 0; r < h.rows; r++)
        for (int c = 0; c < h.cols; c++) h.values.push_back(std::sin(r / 7.0) * std::cos(c / 23.0) - 0.2);
    icl::save_heatmap(dir / "div.png", h);
    Image im = load_png(dir / "div.png");
    CHECK(im.w == 760);
    CHECK(im.h == 640);
    size_t blue = 0, red = 0, pale = 0;
    for (size_t i = 0; i < im.px.size(); i += 3) {
        int r = im.px[i], g = im.px[i + 1], b = im.px[i + 2];
        blue += b > r + 60;
        red += r > b + 60;
        pale += r > 225 && g > 225 && b > 225 && !(r == 255 && g == 255 && b == 255);
    }
    CHECK(blue > 2000);
    CHECK(red > 2000);
    CHECK(pale > 200);
    unsigned char mid[3];
    icl::colormap_diverging(0.5, mid);
    CHECK(mid[0] > 230);
    CHECK(mid[1] > 230);
    CHECK(mid[2] > 230);
    h.vmin = -0.5, h.vmax = 0.5;
    icl::save_heatmap(dir / "div2.png", h);
    CHECK(exists(dir / "div2.png"));
    // a constant matrix still plots
    icl::Heatmap k;
    k.rows = 2, k.cols = 3, k.values.assign(6, 0.25);
    icl::save_heatmap(dir / "const.png", k);
    CHECK(exists(dir / "const.png"));
}

TEST_CASE("heatmap: errors") {
    TmpDir dir;
    icl::Heatmap h;
    h.rows = 3, h.cols = 4;
    h.values.assign(11, 1.0);
    CHECK_THROWS_WITH_AS(icl::save_heatmap(dir / "a.png", h), doctest::Contains("rows*cols"), icl::Error);
    h.values.assign(12, NAN);
    CHECK_THROWS_WITH_AS(icl::save_heatmap(dir / "b.png", h), doctest::Contains("no finite"), icl::Error);
    h.values.assign(12, 1.0);
    h.vmin = 2, h.vmax = 1;
    CHECK_THROWS_AS(icl::save_heatmap(dir / "c.png", h), icl::Error);
    h.vmin = h.vmax = NAN;
    h.rows = 0;
    CHECK_THROWS_AS(icl::save_heatmap(dir / "d.png", h), icl::Error);
    h.rows = 3;
    CHECK_THROWS_AS(icl::save_heatmap(dir / "missing/e.png", h), icl::Error);
    for (const char* f : {"a", "b", "c", "d"}) CHECK_FALSE(exists(dir / (std::string(f) + ".png")));
}

TEST_CASE("scatter: category colours and legend; errors") {
    TmpDir dir;
    icl::Scatter s;
    s.title = "embedding";
    s.category_names = {"a", "b", "c"};
    for (int i = 0; i < 300; i++) {
        int k = i % 3;
        s.x.push_back(k * 3 + std::sin(i * 1.7)), s.y.push_back(k + std::cos(i * 2.3));
        s.category.push_back(k);
    }
    s.x[5] = NAN;  // skipped
    icl::save_scatter(dir / "sc.png", s);
    Image im = load_png(dir / "sc.png");
    CHECK(im.w == 760);
    CHECK(im.h == 640);
    for (int k = 0; k < 3; k++) {
        unsigned char c[3];
        icl::palette_color(k, c);
        CHECK(im.count(c) > 5);  // at least the legend dot and some point centres
    }
    CHECK(saturated_colours(im) > 30);
    icl::Scatter bad = s;
    bad.y.pop_back();
    CHECK_THROWS_AS(icl::save_scatter(dir / "b1.png", bad), icl::Error);
    bad = s;
    bad.category[3] = 7;
    CHECK_THROWS_WITH_AS(icl::save_scatter(dir / "b2.png", bad), doctest::Contains("no name"), icl::Error);
    bad = s;
    bad.category[3] = -1;
    CHECK_THROWS_AS(icl::save_scatter(dir / "b3.png", bad), icl::Error);
    bad = s;
    bad.category.pop_back();
    CHECK_THROWS_AS(icl::save_scatter(dir / "b4.png", bad), icl::Error);
    icl::Scatter none;
    CHECK_THROWS_AS(icl::save_scatter(dir / "b5.png", none), icl::Error);
    // no categories: one colour, no legend
    icl::Scatter plain;
    plain.x = {1, 2, 3}, plain.y = {3, 1, 2};
    icl::save_scatter(dir / "plain.png", plain);
    CHECK(exists(dir / "plain.png"));
}

TEST_CASE("ticks: 1-2-5 steps and compact labels") {
    auto t = icl::nice_ticks(0, 1, 5);
    REQUIRE(t.size() == 6);
    CHECK(t[1] == doctest::Approx(0.2));
    CHECK(t[5] == doctest::Approx(1.0));
    t = icl::nice_ticks(-3.7, 12.2, 6);  // step 2: -2, 0, ..., 12
    REQUIRE(t.size() >= 3);
    CHECK(t.size() <= 9);
    CHECK(t.front() >= -3.7);
    CHECK(t.back() <= 12.2);
    double step = t[1] - t[0];
    for (size_t i = 1; i < t.size(); i++) CHECK(t[i] - t[i - 1] == doctest::Approx(step));
    double mant = step / std::pow(10.0, std::floor(std::log10(step)));
    CHECK((mant == doctest::Approx(1) || mant == doctest::Approx(2) || mant == doctest::Approx(5)));
    t = icl::nice_ticks(0.0013, 0.0041, 5);
    CHECK(t.size() >= 3);
    CHECK_THROWS_AS(icl::nice_ticks(1, 1, 5), icl::Error);
    using V = std::vector<std::string>;
    CHECK(icl::format_ticks({0, 0.5, 1.0}) == V{"0.0", "0.5", "1.0"});
    CHECK(icl::format_ticks({0, 10000, 20000}) == V{"0", "10k", "20k"});
    CHECK(icl::format_ticks({10000, 12500, 15000}) == V{"10k", "12.5k", "15k"});
    CHECK(icl::format_ticks({1e-4, 2e-4, 3e-4}) == V{"1e-4", "2e-4", "3e-4"});
    CHECK(icl::format_ticks({-2, 0, 2}) == V{"-2", "0", "2"});
    CHECK(icl::format_ticks({2e6, 4e6}) == V{"2M", "4M"});
    CHECK(icl::format_ticks({0.001}) == V{"1e-3"});
}

TEST_CASE("csv: header, missing cells, quotes, CRLF; refusals") {
    TmpDir dir;
    spit(dir / "log.csv",
         "step,loss,val_loss,\"note, quoted\"\r\n"
         "0,4.5,4.6,start\r\n"
         "1,4.1,,\r\n"
         "\r\n"
         "2, 3.9 ,3.95,\"a \"\"b\"\"\"\r\n");
    icl::CsvTable t = icl::read_csv(dir / "log.csv");
    REQUIRE(t.header.size() == 4);
    CHECK(t.header[3] == "note, quoted");
    CHECK(t.rows() == 3);
    CHECK(t.find("val_loss") == 2);
    CHECK(t.find("nope") == -1);
    CHECK(t.col("loss")[2] == doctest::Approx(3.9));
    CHECK(std::isnan(t.col("val_loss")[1]));
    CHECK(t.col("val_loss")[2] == doctest::Approx(3.95));
    CHECK(t.text_cells[3] == 2);
    CHECK(t.text_cells[1] == 0);
    CHECK_THROWS_AS(t.col("nope"), icl::Error);

    spit(dir / "ragged.csv", "step,loss\n0,1\n1,2,3\n2,3\n");
    CHECK_THROWS_WITH_AS(icl::read_csv(dir / "ragged.csv"), doctest::Contains("ragged.csv:3"), icl::Error);
    spit(dir / "short.csv", "step,loss\n0\n");
    CHECK_THROWS_AS(icl::read_csv(dir / "short.csv"), icl::Error);
    spit(dir / "empty.csv", "");
    CHECK_THROWS_WITH_AS(icl::read_csv(dir / "empty.csv"), doctest::Contains("empty"), icl::Error);
    spit(dir / "dup.csv", "a,a\n1,2\n");
    CHECK_THROWS_WITH_AS(icl::read_csv(dir / "dup.csv"), doctest::Contains("duplicate"), icl::Error);
    spit(dir / "quote.csv", "a,b\n1,\"2\n");
    CHECK_THROWS_AS(icl::read_csv(dir / "quote.csv"), icl::Error);
    CHECK_THROWS_WITH_AS(icl::read_csv(dir / "missing.csv"), doctest::Contains("cannot open"), icl::Error);
    spit(dir / "header_only.csv", "step,loss\n");
    CHECK(icl::read_csv(dir / "header_only.csv").rows() == 0);
}

TEST_CASE("plotlog tool") {
    const std::string exe = icl_test::bin_dir() + "/plotlog";
    TmpDir dir;
    std::string csv = "step,loss,val_loss,lr,ms_per_step\n";
    for (int i = 0; i <= 200; i++)
        csv += icl::strfmt("%d,%g,%s,%g,%g\n", i, 3 * std::exp(-i / 50.0) + 1,
                           i % 20 == 0 ? icl::strfmt("%g", 3 * std::exp(-i / 55.0) + 1.1).c_str() : "",
                           1e-3 * (1 - i / 200.0), 12.5);
    spit(dir / "log.csv", csv);
    std::string out = dir / "out.txt";
    CHECK(run_cmd(exe + " " + (dir / "log.csv") + " > " + out + " 2>&1") == 0);
    Image im = load_png(dir / "log_plot.png");
    CHECK(im.w == 900);
    unsigned char c1[3];
    icl::palette_color(1, c1);
    CHECK(im.count(c1) > 100);  // val_loss: sparse rows joined into a line
    CHECK(run_cmd(exe + " " + (dir / "log.csv") + " --y lr --logy --out " + (dir / "lr.png") + " --title LR > " +
                  out + " 2>&1") == 0);
    CHECK(exists(dir / "lr.png"));
    CHECK(run_cmd(exe + " --help > " + out + " 2>&1") == 0);
    std::string help = slurp(out);
    for (const char* flag : {"--x", "--y", "--logy", "--out", "--title", "default"})
        CHECK(help.find(flag) != std::string::npos);
    CHECK(run_cmd(exe + " " + (dir / "log.csv") + " --bogus > " + out + " 2>&1") == 2);
    CHECK(slurp(out).rfind("error: ", 0) == 0);
    CHECK(run_cmd(exe + " " + (dir / "log.csv") + " --y nope > " + out + " 2>&1") == 2);
    CHECK(slurp(out).find("nope") != std::string::npos);
    CHECK(run_cmd(exe + " " + (dir / "missing.csv") + " > " + out + " 2>&1") == 1);
    spit(dir / "ragged.csv", "step,loss\n0,1\n1\n");
    CHECK(run_cmd(exe + " " + (dir / "ragged.csv") + " > " + out + " 2>&1") == 1);
    CHECK(slurp(out).rfind("error: ", 0) == 0);
}

}  // TEST_SUITE
