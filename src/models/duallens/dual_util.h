// dual_util.h — fp64 helpers shared by the dual-model files: small vector operations and one random attention
// instance through the engine's own layers, (dual_model.cpp, dual_checks.cpp,
// dual_regression.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/rng.h"
#include "layers/attention.h"
#include "layers/matmul.h"

namespace icl::dual {

using vec = std::vector<double>;

inline double dotp(const double* a, const double* b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
inline double norm2(const vec& a) { return std::sqrt(dotp(a.data(), a.data(), (int)a.size())); }
inline double relerr(const vec& a, const vec& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}
inline vec randn(size_t n, Rng& r, double std = 1.0) {
    vec x(n);
    fill_normal(x.data(), n, r, 0.0, std);
    return x;
}
inline vec row(const vec& M, int i, int cols) { return vec(M.begin() + (size_t)i * cols, M.begin() + (size_t)(i + 1) * cols); }
inline size_t count_bit_differences(const vec& a, const vec& b) {
    size_t n = 0;
    for (size_t i = 0; i < a.size(); i++) n += std::memcmp(&a[i], &b[i], sizeof(double)) != 0;
    return n + (a.size() != b.size());
}

// One random attention instance: tokens X (T,di) ~ N(0, I), W_qkv (3C,di) ~ N(0, (wstd/√di)²) (spec R1: 0.5/√d_i,
// so that |kᵀq| stays ≲ 2), the engine's qkv and causal attention output.
struct Setup {
    int T = 0, di = 0, C = 0, NH = 0;
    vec X, W, qkv, out, att;
};
inline Setup make_setup(Rng& r, int T, int di, int C, int NH, double wstd = 0.5) {
    Setup s;
    s.T = T; s.di = di; s.C = C; s.NH = NH;
    s.X = randn((size_t)T * di, r);
    s.W = randn((size_t)3 * C * di, r, wstd / std::sqrt((double)di));
    s.qkv.resize((size_t)T * 3 * C);
    matmul_forward<double>(s.qkv.data(), s.X.data(), s.W.data(), nullptr, T, di, 3 * C);
    s.out.resize((size_t)T * C);
    s.att.resize((size_t)NH * T * T);
    attention_forward<double>(s.out.data(), s.att.data(), nullptr, s.qkv.data(), 1, T, C, NH);
    return s;
}
// Engine attention on a given qkv (T,3C) → out (T,C).
inline vec engine_attention(const vec& qkv, int T, int C, int NH) {
    vec out((size_t)T * C), att((size_t)NH * T * T);
    attention_forward<double>(out.data(), att.data(), nullptr, qkv.data(), 1, T, C, NH);
    return out;
}
// Head h's slice of row t of a (T,C) output.
inline vec head_row(const vec& out, int C, int NH, int h, int t) {
    const int hs = C / NH;
    return vec(out.begin() + (size_t)t * C + h * hs, out.begin() + (size_t)t * C + (h + 1) * hs);
}

// The largest |k_iᵀq_t| and |k_iᵀk_j| (scaled, every head, every causal pair) of an engine qkv (T,3C).
inline double qkv_zmax(const vec& qkv, int T, int C, int NH) {
    const int hs = C / NH;
    const double s2 = 1.0 / std::sqrt((double)hs);
    double z = 0;
    for (int h = 0; h < NH; h++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < T; i++) {
                const double* k = &qkv[(size_t)i * 3 * C + C + h * hs];
                if (i <= t) z = std::max(z, std::fabs(s2 * dotp(k, &qkv[(size_t)t * 3 * C + h * hs], hs)));
                z = std::max(z, std::fabs(s2 * dotp(k, &qkv[(size_t)t * 3 * C + C + h * hs], hs)));
            }
    return z;
}
// Spec §2.5b: |e^z − Σ_{n<=P} z^n/n!| <= e^{|z|}|z|^{P+1}/(P+1)!. The smallest P that makes this at most 1e-10·e^{−|z|}
// (a relative error of 1e-10 for every kernel entry up to |z| = zmax), at most 24.
inline int taylor_order(double zmax) {
    for (int P = 1; P < 24; P++) {
        double t = std::exp(2 * zmax);
        for (int n = 1; n <= P + 1; n++) t *= zmax / n;
        if (t <= 1e-10) return P;
    }
    return 24;
}

}  // namespace icl::dual
