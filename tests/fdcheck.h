// fdcheck.h — fp64 finite-difference gradient checking, for single layers and whole models.
//
// Usage (one tensor at a time):
//
//   std::vector<double> w = ...;                       // the tensor to check, read by the loss
//   auto loss = [&] { forward(...uses w...); return dot(out, R); };   // ANY scalar function of w, recomputed
//   std::vector<double> g = analytic_gradient_of_loss_wrt_w;
//   check_gradient("w", loss, w.data(), w.size(), g.data());           // doctest CHECK, prints the worst element
//
// fd_check() perturbs x[i] in place (restoring it exactly afterwards), calls loss() a few times per element
// and compares the numerical derivative with analytic[i].
//
// Choice of formula and step. A loss evaluated in double carries an absolute rounding error δ of roughly
// 1e-15 (1e-16 per operation, summed over the output). The classic central difference
// (f(x+h) − f(x−h)) / 2h has truncation error h²·f'''/6 and rounding error ≈ δ/h; the best h is ~1e-5 and
// leaves ~1e-10 of absolute error. The default here is the fourth-order five-point stencil
//   f'(x) ≈ [8·(f(x+h) − f(x−h)) − (f(x+2h) − f(x−2h))] / 12h
// whose truncation error is h⁴·f⁽⁵⁾/30 (≈ 3e-18·f⁽⁵⁾ at h = 1e-4) and whose rounding error is ≈ 1.5·δ/h
// (≈ 1.5e-11): about ten times more accurate than the best central difference, for twice the evaluations.
// Smooth layers (everything in src/layers) have modest fifth derivatives at O(1) inputs, so h = 1e-4 is
// safe. For functions with kinks (ReLU, max, clipping) use a smaller h (or order 2 with h ~ 1e-6) so that
// the stencil, which spans ±2h, rarely straddles one.
//
// Error measure. Per element  rel = |a − n| / max(|a| + |n|, floor),  with
//   floor = max(floor_abs, floor_rel · max_i |a_i|).
// A pure relative error would judge an element whose true gradient is, say, 1e-9 of the tensor's largest by
// the finite-difference noise alone (1e-11 / 1e-9 = 1e-2) and fail correct code. With floor_rel = 1e-3 such
// elements are judged by their absolute error against a thousandth of the tensor's gradient scale, which at
// tol = 1e-6 still means |a − n| <= 1e-9·max|a| — far below any real bug's signature. A tensor whose
// gradient is identically zero is judged by floor_abs alone.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>

namespace icl {

struct FdOptions {
    double h = 1e-4;          // step
    int order = 4;            // 4: five-point stencil (default); 2: central difference
    double floor_rel = 1e-3;  // denominator floor, relative to the largest |analytic| in the tensor
    double floor_abs = 1e-12; // absolute denominator floor
    size_t max_elems = 0;     // 0: check every element; else this many, evenly spaced (first and last included)
};

struct FdResult {
    double max_rel_err = 0.0;  // the worst rel over the checked elements
    size_t worst = 0;          // index of that element
    double analytic = 0.0;     // its analytic gradient
    double numeric = 0.0;      // its finite-difference gradient
    double floor = 0.0;        // the denominator floor used
    size_t checked = 0;        // elements checked
};

// Numerical derivative of loss() w.r.t. x[i]; x[i] is restored bit-exactly.
inline double fd_derivative(const std::function<double()>& loss, double* x, size_t i, const FdOptions& opt) {
    const double x0 = x[i], h = opt.h;
    auto f_at = [&](double xi) {
        x[i] = xi;
        return loss();
    };
    double d;
    if (opt.order == 2) {
        d = (f_at(x0 + h) - f_at(x0 - h)) / (2.0 * h);
    } else {
        const double d1 = f_at(x0 + h) - f_at(x0 - h);
        const double d2 = f_at(x0 + 2.0 * h) - f_at(x0 - 2.0 * h);
        d = (8.0 * d1 - d2) / (12.0 * h);
    }
    x[i] = x0;
    return d;
}

// Compare analytic (n) with finite differences of loss() w.r.t. x (n). See the top of the file.
inline FdResult fd_check(const std::function<double()>& loss, double* x, size_t n, const double* analytic,
                         const FdOptions& opt = FdOptions()) {
    FdResult r;
    double amax = 0.0;
    for (size_t i = 0; i < n; i++) amax = std::max(amax, std::fabs(analytic[i]));
    r.floor = std::max(opt.floor_abs, opt.floor_rel * amax);
    const size_t count = (opt.max_elems == 0 || opt.max_elems >= n) ? n : opt.max_elems;
    for (size_t k = 0; k < count; k++) {
        const size_t i = (count == n || count == 1) ? k : k * (n - 1) / (count - 1);
        const double num = fd_derivative(loss, x, i, opt);
        const double a = analytic[i];
        double rel = std::fabs(a - num) / std::max(std::fabs(a) + std::fabs(num), r.floor);
        if (std::isnan(rel)) rel = INFINITY;  // a NaN on either side is a failure, never a pass
        if (k == 0 || rel > r.max_rel_err) {
            r.max_rel_err = rel;
            r.worst = i;
            r.analytic = a;
            r.numeric = num;
        }
        r.checked++;
    }
    return r;
}

// doctest: CHECK that the worst relative error is <= tol; on failure (and in -s mode) print the worst element.
inline FdResult check_gradient(const std::string& name, const std::function<double()>& loss, double* x, size_t n,
                               const double* analytic, double tol = 1e-6, const FdOptions& opt = FdOptions()) {
    const FdResult r = fd_check(loss, x, n, analytic, opt);
    INFO("gradient check of " << name << ": max rel err " << r.max_rel_err << " at index " << r.worst
                              << " (analytic " << r.analytic << ", numeric " << r.numeric << ", floor " << r.floor
                              << ", " << r.checked << " of " << n << " elements checked)");
    CHECK(r.max_rel_err <= tol);
    return r;
}

}  // namespace icl
