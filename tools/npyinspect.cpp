// npyinspect — summarise .npy files (the ones --dump-npy writes, or any NumPy wrote in <f4/<f8/<i4).
//
//   npyinspect [-n N] FILE.npy...
//
// For each file: dtype, shape, element count, min / max / mean / std over the finite values, the number
// of NaN and Inf elements, and the first N values (default 8). A file that cannot be read prints
// "error: <why>" and the exit status is 1 (the other files are still shown).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "engine/cli.h"
#include "engine/npy.h"

static void usage(std::FILE* out) {
    std::fprintf(out,
                 "usage: npyinspect [-n N] FILE.npy...\n"
                 "Print dtype, shape, min, max, mean, std (over finite values), NaN/Inf counts and the first\n"
                 "values of each NumPy .npy file (dtypes <f4, <f8, <i4).\n"
                 "  -n N       how many leading values to print (default 8)\n"
                 "  --help     this text\n");
}

static std::string python_shape(const icl::Shape& s) {  // (2, 3) / (7,) / ()
    std::string r = "(";
    for (size_t i = 0; i < s.size(); i++) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + (s.size() == 1 ? ",)" : ")");
}

static void inspect(const std::string& path, long show) {
    icl::NpyArray a = icl::npy_load(path);
    std::vector<double> v = a.to_double();
    long nan = 0, inf = 0, finite = 0;
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    for (double x : v) {
        if (std::isnan(x)) nan++;
        else if (std::isinf(x)) inf++;
        else {
            finite++;
            mn = std::fmin(mn, x);
            mx = std::fmax(mx, x);
            sum += x;
        }
    }
    std::printf("%s: %s %s, %zu elements\n", path.c_str(), a.descr.c_str(), python_shape(a.shape).c_str(), v.size());
    if (finite > 0) {
        double mean = sum / (double)finite, ss = 0;
        for (double x : v)
            if (std::isfinite(x)) ss += (x - mean) * (x - mean);
        std::printf("  min=%.6g max=%.6g mean=%.6g std=%.6g", mn, mx, mean, std::sqrt(ss / (double)finite));
    } else {
        std::printf("  min=- max=- mean=- std=-");
    }
    std::printf(" nan=%ld inf=%ld\n", nan, inf);
    if (!v.empty() && show > 0) {
        std::printf("  first:");
        for (long i = 0; i < show && i < (long)v.size(); i++) std::printf(" %.6g", v[(size_t)i]);
        std::printf("%s\n", (long)v.size() > show ? " ..." : "");
    }
}

static int run(int argc, char** argv) {
    long show = 8;
    std::vector<std::string> files;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--help" || a == "-h") {
            usage(stdout);
            return 0;
        } else if (a == "-n") {
            char* end = nullptr;
            if (i + 1 >= argc || (show = std::strtol(argv[i + 1], &end, 10), *end != '\0') || show < 0) {
                std::fprintf(stderr, "error: -n needs a non-negative integer\n");
                return 2;
            }
            i++;
        } else if (a.size() > 1 && a[0] == '-') {
            std::fprintf(stderr, "error: unknown flag '%s' (see --help)\n", a.c_str());
            return 2;
        } else {
            files.push_back(a);
        }
    }
    if (files.empty()) {
        usage(stderr);
        return 2;
    }
    int rc = 0;
    for (const std::string& f : files) {
        try {
            inspect(f, show);
        } catch (const icl::Error& e) {
            std::fflush(stdout);
            std::fprintf(stderr, "error: %s\n", e.what());
            rc = 1;
        }
    }
    return rc;
}

int main(int argc, char** argv) { return icl::cli_main(argc, argv, run); }
