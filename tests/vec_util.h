// vec_util.h — small fp64 vector helpers shared by the test suites (test_layers, test_duallens).
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/rng.h"

namespace icl_test {

using vec = std::vector<double>;

// n draws of N(mean, std²) from rng
inline vec randn(size_t n, icl::Rng& rng, double std = 1.0, double mean = 0.0) {
    vec x(n);
    icl::fill_normal(x.data(), n, rng, mean, std);
    return x;
}
inline double dot(const vec& a, const vec& b) {
    REQUIRE(a.size() == b.size());
    double s = 0.0;
    for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
    return s;
}
inline vec minus(const vec& a, const vec& b) {
    REQUIRE(a.size() == b.size());
    vec r(a.size());
    for (size_t i = 0; i < a.size(); i++) r[i] = a[i] - b[i];
    return r;
}
inline double max_abs_diff(const vec& a, const vec& b) {
    REQUIRE(a.size() == b.size());
    double m = 0.0;
    for (size_t i = 0; i < a.size(); i++) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

}  // namespace icl_test
