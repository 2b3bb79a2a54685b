// vmath.h — vectorized e^x for the float paths of the layers: exp8 (AVX2 + FMA, 8 lanes), exp16 (its AVX-512 twin,
// tested lane for lane identical), exp_shifted_sum, the softmax exponential, and exp_shifted_grad, the O(T) attention
// backward's row (the same exponentials with the softmax gradient in the same pass); and max_of, the softmax's row
// maximum. Used by GELU (gelu.h), the softmaxes (attention.h, loss.h, kv_attention.h) and kernel attention's φ
// (kernel_attention.h). Without AVX2 the scalar std::exp and loop serve.
#pragma once
#include <cmath>
#include <type_traits>

#if defined(__AVX2__) && defined(__FMA__)
#include "layers/simd.h"
#define ICL_VMATH_AVX2 1
#endif

namespace icl {

namespace vmath {
#ifdef ICL_VMATH_AVX2
// The 8-lane tail's mask: lanes 0 .. r−1 set (all bits), the rest clear, for the r = n − j (1..7) elements left at
// x + j — the mask _mm256_maskload_ps / _mm256_maskstore_ps take (they never touch a masked-off lane's memory).
inline __m256i tail_mask8(int r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
// exp8's core (below) for an argument already clamped to [−87.3, 88.3]: x = n·ln2 + r with |r| <= ln2/2
// (Cody–Waite, ln2 split into a part exact in 8 bits and a correction), e^r by its Taylor series to r⁷/7!
// (truncation < 1.3e-7 relative), and 2^n written straight into the exponent field. A NaN argument gives NaN.
inline __m256 exp8_reduced(__m256 xc) {
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
// e^x for 8 floats, with std::exp's edge behaviour: 0 below −87.3 (where e^x would be subnormal), +inf above
// 88.3, NaN in ⇒ NaN out: the clamp, exp8_reduced, the edge cases. Max relative error ≈ 1e-7 (~1 ulp).
inline __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3f), hi = _mm256_set1_ps(88.3f);
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 res = exp8_reduced(xc);
    res = _mm256_and_ps(res, _mm256_cmp_ps(x, lo, _CMP_NLT_UQ));                        // x < lo  -> 0
    res = _mm256_blendv_ps(res, _mm256_set1_ps(HUGE_VALF), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));  // x > hi  -> inf
    return _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));                 // NaN     -> NaN
}
// e^x for x <= 0 (or NaN), kernel attention's φ = e^x branch, whose argument is min(0, q) <= 0: exp8's steps
// without the two that cannot apply there (the clamp at 88.3 and the +inf above it) and with NaN carried through
// the steps themselves (max(lo, NaN) = NaN, so the polynomial yields NaN and the x < lo mask keeps it) instead of a
// final blend: 5 vector operations of exp8's 22 fewer, the same bits as exp8 for every x <= 0 and NaN (tested).
inline __m256 exp8_nonpos(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3f);
    const __m256 xc = _mm256_max_ps(lo, x);  // (lo > x) ? lo : x — NaN stays NaN (the second operand)
    const __m256 res = exp8_reduced(xc);
    return _mm256_and_ps(res, _mm256_cmp_ps(x, lo, _CMP_NLT_UQ));  // x < lo -> 0 (NaN: unordered, kept)
}
#ifdef __AVX512F__
// exp8_reduced's 16-lane twin.
inline __m512 exp16_reduced(__m512 xc) {
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}
// exp8's 16-lane twin for AVX-512 (same steps, same constants, same results lane for lane — tested); the edge
// cases through mask registers. A twin rather than two exp8 calls on the halves: 4% faster in kernel attention's
// φ pass, its one user then (GELU uses it too now, through expv).
inline __m512 exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.3f), hi = _mm512_set1_ps(88.3f);
    const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    __m512 res = exp16_reduced(xc);
    res = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), res);                  // x < lo  -> 0
    res = _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), _mm512_set1_ps(HUGE_VALF));  // x > hi  -> inf
    return _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);                // NaN     -> NaN
}
// exp8_nonpos's 16-lane twin (the same steps; tested lane for lane against it).
inline __m512 exp16_nonpos(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.3f);
    const __m512 xc = _mm512_max_ps(lo, x);
    const __m512 res = exp16_reduced(xc);
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), res);  // x < lo -> 0 (NaN kept)
}
#endif
// exp8 / exp16 chosen by the register type, for kernels written once for both widths (layers/simd.h's F8 / F16).
inline __m256 expv(__m256 x) { return exp8(x); }
#ifdef __AVX512F__
inline __m512 expv(__m512 x) { return exp16(x); }
#endif
#endif

// max_j x[j] over j < n (n >= 1): the softmax's shift. The same value as the scalar loop
//   m = x[0];  for j in 1..n-1:  m = m < x[j] ? x[j] : m          (std::max(m, x[j]))
// float with AVX2: 8 (AVX-512: 16) running maxima started from x[0], then the lanes in order by that rule. A max is
// exact, so only the order of the comparisons differs — a NaN x[j] is passed over as the scalar loop passes over it
// (vmaxps returns its second operand, the running maximum, when either is NaN) unless x[0] is NaN (then NaN), and of
// several zeros that are the maximum the sign may differ, which no e^(x − m) notices. The scalar loop, whose
// `omp simd reduction(max)` GCC 12 left scalar (vmaxss after vmaxss, a 4-cycle chain), held ~28% of the O(T)
// attention forward's perf samples at T = 256 on an Intel Emerald Rapids; with max_of the forward takes 0.62 of its
// time there (docs/benchmarks.md 2026-12-07, morning).
template <typename real>
real max_of(const real* x, int n) {
    real m = x[0];
#ifdef ICL_VMATH_AVX2
    if constexpr (std::is_same_v<real, float>) {
        __m256 acc = _mm256_set1_ps(m);
        int j = 1;
#ifdef __AVX512F__
        if (n >= 17) {
            __m512 acc16 = _mm512_set1_ps(m);
            for (; j + 16 <= n; j += 16) acc16 = _mm512_max_ps(_mm512_loadu_ps(x + j), acc16);
            acc = _mm256_max_ps(_mm512_castps512_ps256(acc16), acc);
            acc = _mm256_max_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc16), 1)), acc);
        }
#endif
        for (; j + 8 <= n; j += 8) acc = _mm256_max_ps(_mm256_loadu_ps(x + j), acc);
        if (j < n) {  // the tail: lanes past n hold x[0], which changes no maximum
            const __m256i mask = tail_mask8(n - j);
            const __m256 t = _mm256_blendv_ps(_mm256_set1_ps(m), _mm256_maskload_ps(x + j, mask), _mm256_castsi256_ps(mask));
            acc = _mm256_max_ps(t, acc);
        }
        alignas(32) float l[8];
        _mm256_store_ps(l, acc);
        for (int i = 0; i < 8; i++) m = m < l[i] ? l[i] : m;
        return m;
    }
#endif
    for (int j = 1; j < n; j++) m = m < x[j] ? x[j] : m;
    return m;
}

// x[j] = e^(x[j] − shift) for j < n; returns Σ_j x[j]. The softmax kernel. float with AVX2: 8 lanes at a
// time (the tail through masked loads/stores), lane sums added in a fixed order; with AVX-512 the exponentials 16
// at a time, the sums in the same order (the same bits); otherwise std::exp.
template <typename real>
real exp_shifted_sum(real* x, int n, real shift) {
#ifdef ICL_VMATH_AVX2
    if constexpr (std::is_same_v<real, float>) {
        const __m256 vs = _mm256_set1_ps(shift);
        __m256 acc = _mm256_setzero_ps();
        int j = 0;
#ifdef __AVX512F__
        // 16 at a time through exp16 (exp8 lane for lane), the two halves added to the 8-lane sum one after the
        // other, as two turns of the loop below would: the same bits as the AVX2 build, half the exp instructions
        const __m512 vs16 = _mm512_set1_ps(shift);
        for (; j + 16 <= n; j += 16) {
            const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), vs16));
            _mm512_storeu_ps(x + j, e);
            acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
            acc = _mm256_add_ps(acc, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
        }
#endif
        for (; j + 8 <= n; j += 8) {
            const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vs));
            _mm256_storeu_ps(x + j, e);
            acc = _mm256_add_ps(acc, e);
        }
        if (j < n) {
            const __m256i mask = tail_mask8(n - j);
            const __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(x + j, mask), vs));
            _mm256_maskstore_ps(x + j, mask, e);
            acc = _mm256_add_ps(acc, _mm256_and_ps(e, _mm256_castsi256_ps(mask)));
        }
        alignas(32) float l[8];
        _mm256_store_ps(l, acc);
        return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    }
#endif
    real sum = 0;
    for (int j = 0; j < n; j++) {
        x[j] = std::exp(x[j] - shift);
        sum += x[j];
    }
    return sum;
}

// The softmax backward's row from recomputed probabilities, in one pass (attention_backward_lse):
//   p[j] = e^(p[j] − shift),   d[j] = p[j]·(d[j] − c)        for j < n
// The exponentials are exp_shifted_sum's, lane for lane (exp16 / exp8 / the masked 8-lane tail / std::exp), and
// d is the same product of the same two roundings as the scalar loop, so the bits equal exp_shifted_sum followed
// by that loop (tested); one load and store of p and one call fewer per row.
template <typename real>
void exp_shifted_grad(real* p, real* d, int n, real shift, real c) {
#ifdef ICL_VMATH_AVX2
    if constexpr (std::is_same_v<real, float>) {
        int j = 0;
#ifdef __AVX512F__
        const __m512 vs16 = _mm512_set1_ps(shift), vc16 = _mm512_set1_ps(c);
        for (; j + 16 <= n; j += 16) {
            const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p + j), vs16));
            _mm512_storeu_ps(p + j, e);
            _mm512_storeu_ps(d + j, _mm512_mul_ps(e, _mm512_sub_ps(_mm512_loadu_ps(d + j), vc16)));
        }
#endif
        const __m256 vs = _mm256_set1_ps(shift), vc = _mm256_set1_ps(c);
        for (; j + 8 <= n; j += 8) {
            const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p + j), vs));
            _mm256_storeu_ps(p + j, e);
            _mm256_storeu_ps(d + j, _mm256_mul_ps(e, _mm256_sub_ps(_mm256_loadu_ps(d + j), vc)));
        }
        if (j < n) {
            const __m256i mask = tail_mask8(n - j);
            const __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(p + j, mask), vs));
            _mm256_maskstore_ps(p + j, mask, e);
            _mm256_maskstore_ps(d + j, mask, _mm256_mul_ps(e, _mm256_sub_ps(_mm256_maskload_ps(d + j, mask), vc)));
        }
        return;
    }
#endif
    for (int j = 0; j < n; j++) {
        p[j] = std::exp(p[j] - shift);
        d[j] = p[j] * (d[j] - c);
    }
}
}  // namespace vmath

}  // namespace icl
