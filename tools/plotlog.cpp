// plotlog — plot columns of a CSV training log (out/<binary>/<run>/log.csv) as a PNG line plot.
//
//   plotlog out/train_gpt/run/log.csv                       # every *loss* column against step
//   plotlog log.csv --y lr --out lr.png                     # one column
//   plotlog log.csv --y loss,val_loss --logy --title "gpt"  # chosen columns, log-scale y
//
// Empty cells are "not measured at this row" (e.g. val_loss every 100 steps): each series joins the rows
// where it has a value, so a sparse column still draws as a line.
// Exit codes: 0 ok, 2 bad flag or column name, 1 unreadable/malformed file or nothing to plot.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/cli.h"
#include "engine/common.h"
#include "report/plot.h"

namespace {

const char* kHelp =
    "plotlog - plot columns of a CSV training log as a PNG line plot\n"
    "\n"
    "usage: plotlog LOG.csv [flags]\n"
    "\n"
    "  --x COL           x column (default: step; the row number if the log has no 'step' column)\n"
    "  --y COL1,COL2,..  y columns (default: every column whose name contains \"loss\")\n"
    "  --logy            log-scale y axis (default: off)\n"
    "  --logx            log-scale x axis (default: off)\n"
    "  --out FILE.png    output file (default: <LOG dir>/<LOG stem>_plot.png)\n"
    "  --title T         plot title (default: the log's path)\n"
    "  --width N         image width in pixels (default: 900)\n"
    "  --height N        image height in pixels (default: 560)\n"
    "  --help            print this help and exit\n"
    "\n"
    "Empty cells are missing values; each series connects the rows where it has one.\n"
    "Exit codes: 0 ok, 2 bad flag or column, 1 unreadable or malformed file.\n";

std::vector<std::string> split_commas(const std::string& s) {
    std::vector<std::string> out;
    size_t a = 0;
    for (;;) {
        size_t b = s.find(',', a);
        std::string item = s.substr(a, b == std::string::npos ? std::string::npos : b - a);
        if (!item.empty()) out.push_back(item);
        if (b == std::string::npos) break;
        a = b + 1;
    }
    return out;
}

int parse_size(const std::string& flag, const std::string& v, long min) {
    char* end = nullptr;
    long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < min || n > 10000)
        icl::fail_usage(icl::strfmt("%s: expected an integer in [%ld, 10000], got '%s'", flag.c_str(), min, v.c_str()));
    return (int)n;
}

// "dir/log.csv" -> "dir/log_plot.png"
std::string default_out(const std::string& csv) {
    size_t slash = csv.find_last_of('/');
    size_t dot = csv.find_last_of('.');
    std::string stem = (dot != std::string::npos && (slash == std::string::npos || dot > slash + 1))
                           ? csv.substr(0, dot) : csv;
    return stem + "_plot.png";
}

std::string column_list(const icl::CsvTable& t) {
    std::string s;
    for (size_t i = 0; i < t.header.size(); i++) s += (i ? ", " : "") + t.header[i];
    return s;
}

int run(int argc, char** argv) {
    std::string csv, xcol = "step", ycols, out, title;
    bool x_given = false, y_given = false, logx = false, logy = false;
    int width = 900, height = 560;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i], val;
        bool has_eq = false;
        if (a.rfind("--", 0) == 0) {
            size_t eq = a.find('=');
            if (eq != std::string::npos) val = a.substr(eq + 1), a = a.substr(0, eq), has_eq = true;
        }
        auto value = [&]() -> std::string {
            if (has_eq) return val;
            if (i + 1 >= argc) icl::fail_usage(a + ": missing value");
            return argv[++i];
        };
        if (a == "--help" || a == "-h") {
            std::fputs(kHelp, stdout);
            return 0;
        } else if (a == "--x") {
            xcol = value(), x_given = true;
        } else if (a == "--y") {
            ycols = value(), y_given = true;
        } else if (a == "--logy" || a == "--logx") {
            if (has_eq) icl::fail_usage(a + " takes no value");
            (a == "--logy" ? logy : logx) = true;
        } else if (a == "--out") {
            out = value();
        } else if (a == "--title") {
            title = value();
        } else if (a == "--width") {
            width = parse_size(a, value(), 320);
        } else if (a == "--height") {
            height = parse_size(a, value(), 240);
        } else if (a.size() > 1 && a[0] == '-') {
            icl::fail_usage("unknown flag '" + a + "' (see --help)");
        } else {
            if (!csv.empty()) icl::fail_usage("more than one log file given ('" + csv + "', '" + a + "')");
            csv = a;
        }
    }
    if (csv.empty()) icl::fail_usage("no log file given (usage: plotlog LOG.csv [flags]; see --help)");
    if (x_given && xcol.empty()) icl::fail_usage("--x: empty column name");
    if (out.empty()) out = default_out(csv);
    if (title.empty()) title = csv;

    icl::CsvTable t = icl::read_csv(csv);
    if (t.rows() == 0) icl::fail(icl::strfmt("'%s' has a header but no rows", csv.c_str()));

    // x column
    std::vector<double> xs;
    std::string xlabel = xcol;
    int xi = t.find(xcol);
    if (xi < 0 && x_given)
        icl::fail_usage(icl::strfmt("--x: no column '%s' in %s (columns: %s)", xcol.c_str(), csv.c_str(),
                                    column_list(t).c_str()));
    if (xi >= 0) {
        if (t.text_cells[xi]) icl::fail_usage(icl::strfmt("--x: column '%s' is not numeric", xcol.c_str()));
        xs = t.cols[xi];
    } else {
        xlabel = "row";
        for (size_t r = 0; r < t.rows(); r++) xs.push_back((double)r);
    }

    // y columns
    std::vector<std::string> names;
    if (y_given) {
        names = split_commas(ycols);
        if (names.empty()) icl::fail_usage("--y: no column names given");
        for (auto& n : names)
            if (t.find(n) < 0)
                icl::fail_usage(icl::strfmt("--y: no column '%s' in %s (columns: %s)", n.c_str(), csv.c_str(),
                                            column_list(t).c_str()));
    } else {
        for (auto& h : t.header)
            if (h.find("loss") != std::string::npos && h != xcol) names.push_back(h);
        if (names.empty())
            icl::fail_usage(icl::strfmt("no column name contains \"loss\" in %s; choose columns with --y (columns: %s)",
                                        csv.c_str(), column_list(t).c_str()));
    }

    icl::LinePlot p;
    p.title = title, p.xlabel = xlabel, p.logx = logx, p.logy = logy;
    bool all_loss = true;
    for (auto& n : names) all_loss = all_loss && n.find("loss") != std::string::npos;
    p.ylabel = names.size() == 1 ? names[0] : all_loss ? "loss" : "";
    for (auto& n : names) {
        int ci = t.find(n);
        if (t.text_cells[ci])
            icl::fail_usage(icl::strfmt("--y: column '%s' is not numeric (%zu text cells)", n.c_str(), t.text_cells[ci]));
        icl::Series s;
        s.label = n;
        for (size_t r = 0; r < t.rows(); r++) {
            double y = t.cols[ci][r];
            if (std::isnan(y) || std::isnan(xs[r])) continue;  // missing cell: not measured at this row
            s.x.push_back(xs[r]), s.y.push_back(y);
        }
        s.markers = s.y.size() <= 40;
        p.series.push_back(std::move(s));
    }
    icl::save_line_plot(out, p, width, height);
    std::printf("wrote %s (%zu series, %zu rows)\n", out.c_str(), p.series.size(), t.rows());
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return icl::cli_main(argc, argv, run); }
