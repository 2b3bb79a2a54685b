// rope.h — rotary position embedding (RoFormer, adjacent-pair convention), as used by kernel attention
// (spec/iclca.md §1.5, §7 "Rotation dimension").
//
//   R_p acts on a vector x of even length m as m/2 independent 2×2 rotations of the ADJACENT pairs
//   (x[2k], x[2k+1]) by the angle p·θ_k, θ_k = 10000^(−2k/m), k = 0..m/2−1:
//       y[2k]   = x[2k]·cos(pθ_k) − x[2k+1]·sin(pθ_k)
//       y[2k+1] = x[2k]·sin(pθ_k) + x[2k+1]·cos(pθ_k)
//   (not the NeoX "rotate-half" split). Properties: R_a R_b = R_{a+b}, R_pᵀ = R_{−p}, ‖R_p x‖ = ‖x‖.
//
// Angles are computed in double and rounded once to `real`, so fp32 and fp64 see the same rotation up to
// one rounding. A table of (cos, sin) per position is what the hot loops read: rope_table() fills
//   tab[k] = cos(pθ_k), tab[m/2 + k] = sin(pθ_k)      (m values per position).
#pragma once
#include <cmath>

namespace icl {

inline double rope_theta(int k, int m) { return std::pow(10000.0, -2.0 * k / (double)m); }

// tab (m): cos(p·θ_k) for k < m/2, then sin(p·θ_k).
template <typename real>
void rope_table(real* tab, double p, int m) {
    const int h = m / 2;
    for (int k = 0; k < h; k++) {
        const double a = p * rope_theta(k, m);
        tab[k] = (real)std::cos(a);
        tab[h + k] = (real)std::sin(a);
    }
}

// y (m) = R x (sign = +1) or Rᵀ x (sign = −1) for the rotation whose table is tab. y may alias x.
template <typename real>
inline void rope_apply(real* y, const real* x, const real* tab, int m, int sign = +1) {
    const int h = m / 2;
    for (int k = 0; k < h; k++) {
        const real c = tab[k], s = sign > 0 ? tab[h + k] : -tab[h + k];
        const real x0 = x[2 * k], x1 = x[2 * k + 1];
        y[2 * k] = x0 * c - x1 * s;
        y[2 * k + 1] = x0 * s + x1 * c;
    }
}

// Rotate every column of the row-major (m, n) matrix A in place by R_p: row pairs (2k, 2k+1) mix.
// This is spec §2.6's rope_rows(B, shift).
template <typename real>
void rope_rows(real* A, int m, int n, double p) {
    for (int k = 0; k < m / 2; k++) {
        const double a = p * rope_theta(k, m);
        const real c = (real)std::cos(a), s = (real)std::sin(a);
        real* r0 = A + (size_t)(2 * k) * n;
        real* r1 = r0 + n;
        for (int j = 0; j < n; j++) {
            const real x0 = r0[j], x1 = r1[j];
            r0[j] = x0 * c - x1 * s;
            r1[j] = x0 * s + x1 * c;
        }
    }
}

}  // namespace icl
