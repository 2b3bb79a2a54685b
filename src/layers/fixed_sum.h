// fixed_sum.h — sums whose rounding does not depend on the compiler's vector width.
//
// `#pragma omp simd reduction(+ : s)` lets the compiler split a sum into as many lanes as its vectors hold (8 with
// 256-bit vectors, 16 with 512-bit ones) and add the lanes in an order of its choosing. GCC picks the width from
// -march/-mtune, so two native builds of one commit (say Zen 4, tuned as znver3 with 512-bit vectors, and a
// Sapphire Rapids Xeon, tuned for 256-bit) rounded a layer norm's mean differently and trained different
// numbers (README, "Which numbers depend on the machine"). fixed_sum spells the order out: 8 running sums, term i
// going into sum i mod 8, then a fixed tree. Without -ffast-math the compiler may not reassociate it, and the 8
// independent sums still vectorize (one 256-bit register), so every build rounds it the same way.
//
//   real m = fixed_sum<real>(C, [&](size_t c) { return x[c]; });   // Σ_c x[c]
#pragma once
#include <cstddef>

namespace icl {

template <typename real, typename F>
inline real fixed_sum(size_t n, F term) {
    real s[8] = {real(0), real(0), real(0), real(0), real(0), real(0), real(0), real(0)};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        // The 8 sums are independent, so `omp simd` over j only says "one register": it changes no sum's order. Without
        // it GCC 12 at -O3 vectorised the i loop instead and added the lanes back one scalar at a time (vextract,
        // vaddss): layer norm's forward took 2.5x as long (docs/benchmarks.md, 2026-12-07, evening).
#pragma omp simd
        for (size_t j = 0; j < 8; j++) s[j] += term(i + j);
    }
    for (size_t j = 0; i < n; i++, j++) s[j] += term(i);  // the tail continues the i mod 8 pattern
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

}  // namespace icl
