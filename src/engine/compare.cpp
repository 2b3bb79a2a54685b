// compare.cpp — see compare.h.
#include "engine/compare.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "engine/common.h"

namespace icl {

TensorDiff compare_tensor(const std::string& name, const std::string& kind, const Shape& shape, const double* ref,
                          const double* got, double atol, double rtol) {
    TensorDiff d;
    d.name = name;
    d.kind = kind;
    d.shape = shape;
    double num = 0, den = 0;
    int64_t n = numel(shape);
    for (int64_t i = 0; i < n; i++) {
        if (!std::isfinite(ref[i]) || !std::isfinite(got[i])) {
            if (d.nonfinite++ == 0) { d.worst = i; d.worst_ref = ref[i]; d.worst_got = got[i]; }
            continue;
        }
        double diff = std::fabs(got[i] - ref[i]);
        double scaled = diff / (atol + rtol * std::fabs(ref[i]));
        d.max_abs = std::max(d.max_abs, diff);
        if (scaled > d.max_scaled && d.nonfinite == 0) { d.worst = i; d.worst_ref = ref[i]; d.worst_got = got[i]; }
        d.max_scaled = std::max(d.max_scaled, scaled);
        num += diff * diff;
        den += ref[i] * ref[i];
    }
    d.rms_rel = den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
    d.pass = d.nonfinite == 0 && d.max_scaled <= 1.0;
    return d;
}

int print_diff_table(std::FILE* f, const std::string& title, const std::vector<TensorDiff>& rows, double atol, double rtol) {
    bool color = isatty(fileno(f));
    const char* green = color ? "\033[32m" : "";
    const char* red = color ? "\033[31m" : "";
    const char* dim = color ? "\033[2m" : "";
    const char* reset = color ? "\033[0m" : "";
    size_t wn = 6, ws = 5, wk = 4;
    for (auto& r : rows) {
        wn = std::max(wn, r.name.size());
        ws = std::max(ws, shape_str(r.shape).size());
        wk = std::max(wk, r.kind.size());
    }
    std::fprintf(f, "%s\n%stolerance: |a - ref| <= atol + rtol*|ref| with atol=%g, rtol=%g%s\n\n", title.c_str(), dim, atol, rtol, reset);
    std::fprintf(f, "  %-*s  %-*s  %-*s  %10s  %12s  %10s  %s\n", (int)wn, "tensor", (int)wk, "kind", (int)ws, "shape", "max |d|",
                 "max d/tol", "RMS rel", "ok");
    int failed = 0;
    double worst_scaled = 0;
    std::string worst_name;
    for (auto& r : rows) {
        failed += !r.pass;
        if (r.max_scaled >= worst_scaled) { worst_scaled = r.max_scaled; worst_name = r.name; }
        std::string ok = r.pass ? std::string(green) + "ok" + reset
                                : std::string(red) + (r.nonfinite ? strfmt("FAIL (%lld non-finite)", (long long)r.nonfinite) : "FAIL") + reset;
        std::fprintf(f, "  %-*s  %-*s  %-*s  %10.3e  %12.4g  %10.3e  %s", (int)wn, r.name.c_str(), (int)wk, r.kind.c_str(), (int)ws,
                     shape_str(r.shape).c_str(), r.max_abs, r.max_scaled, r.rms_rel, ok.c_str());
        if (!r.pass && r.worst >= 0) std::fprintf(f, "  %s[worst at flat index %lld: ref %.9g, got %.9g]%s", dim, (long long)r.worst, r.worst_ref, r.worst_got, reset);
        std::fprintf(f, "\n");
    }
    if (failed == 0)
        std::fprintf(f, "\n%sall %zu tensors within tolerance%s (worst: %s at %.3g of the tolerance)\n", green, rows.size(), reset,
                     worst_name.c_str(), worst_scaled);
    else
        std::fprintf(f, "\n%s%d of %zu tensors over tolerance%s\n", red, failed, rows.size(), reset);
    return failed;
}

}  // namespace icl
