// gelu.h — GELU, tanh approximation (GPT-2's):
//
//   gelu(x) = 0.5·x·(1 + tanh(u)),   u = sqrt(2/π)·(x + 0.044715·x³)
//
// Computed in the equivalent, cheaper form  gelu(x) = x·σ(2u),  σ(z) = 1/(1 + e^(−z)),  because
// 0.5·(1 + tanh(u)) = σ(2u). Then with σ = σ(2u):
//
//   gelu'(x) = σ + x · 2σ(1 − σ) · du/dx,    du/dx = sqrt(2/π)·(1 + 3·0.044715·x²)
//
// Precision paths: double (the tests) uses std::exp. float uses, where AVX2+FMA are compiled in, the 8-wide
// vmath::exp8 below (max relative error ≈ 1e-7, i.e. ~1 ulp), because glibc's scalar tanhf/expf do not
// vectorize and made GELU the slowest non-GEMM layer (~60 ms for (8,256,1536) on 2 cores instead of ~2 ms).
// Tails shorter than 8 go through the same vector code via a padded buffer, so every element gets the same
// arithmetic wherever it sits. tests/test_layers.cpp checks the float path against the double one.
//
// This header also hosts vmath::exp_shifted_sum, the vectorized softmax exponential that attention.h and
// loss.h use (it lives here, next to its exp8, to keep the layer files one per family).
//
// GRADIENT CONVENTION (whole engine): every backward ACCUMULATES (+=) into every gradient it writes, parameter
// and activation gradients alike; callers zero the gradient buffers once per step.
#pragma once
#include "layers/parallel.h"
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>
#if defined(__AVX2__) && defined(__FMA__)
#include "layers/simd.h"
#define ICL_GELU_AVX2 1
#endif

#ifdef _OPENMP
#include <omp.h>
#endif
namespace icl {

// ---- vectorized exp (used by GELU here and by the softmaxes in attention.h and loss.h) ----
namespace vmath {
#ifdef ICL_GELU_AVX2
// e^x for 8 floats, with std::exp's edge behaviour: 0 below −87.3 (where e^x would be subnormal), +inf above
// 88.3, NaN in ⇒ NaN out. Inside: x = n·ln2 + r with |r| <= ln2/2 (Cody–Waite, ln2 split into a part exact
// in 8 bits and a correction), e^r by its Taylor series to r⁷/7! (truncation < 1.3e-7 relative), and 2^n
// written straight into the exponent field. Max relative error ≈ 1e-7 (~1 ulp).
inline __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3f), hi = _mm256_set1_ps(88.3f);
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
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
    __m256 res = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    res = _mm256_and_ps(res, _mm256_cmp_ps(x, lo, _CMP_NLT_UQ));                        // x < lo  -> 0
    res = _mm256_blendv_ps(res, _mm256_set1_ps(HUGE_VALF), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));  // x > hi  -> inf
    return _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));                 // NaN     -> NaN
}
#ifdef __AVX512F__
// exp8's 16-lane twin for AVX-512 (same steps, same constants, same results lane for lane — tested); the edge
// cases through mask registers. A twin rather than two exp8 calls on the halves: 4% faster in kernel attention's
// φ pass, its one user.
inline __m512 exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.3f), hi = _mm512_set1_ps(88.3f);
    const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
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
    __m512 res = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
    res = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), res);                  // x < lo  -> 0
    res = _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), _mm512_set1_ps(HUGE_VALF));  // x > hi  -> inf
    return _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);                // NaN     -> NaN
}
#endif
#endif

// x[j] = e^(x[j] − shift) for j < n; returns Σ_j x[j]. The softmax kernel. float with AVX2: 8 lanes at a
// time (the tail through masked loads/stores), lane sums added in a fixed order; otherwise std::exp.
template <typename real>
real exp_shifted_sum(real* x, int n, real shift) {
#ifdef ICL_GELU_AVX2
    if constexpr (std::is_same_v<real, float>) {
        const __m256 vs = _mm256_set1_ps(shift);
        __m256 acc = _mm256_setzero_ps();
        int j = 0;
        for (; j + 8 <= n; j += 8) {
            const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vs));
            _mm256_storeu_ps(x + j, e);
            acc = _mm256_add_ps(acc, e);
        }
        if (j < n) {
            const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - j), lane);
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
}  // namespace vmath

namespace gelu_detail {
using par::use_threads;
constexpr double kS = 0.7978845608028654;  // sqrt(2/π)
constexpr double kA = 0.044715;
constexpr long long kChunk = 8192;  // elements per parallel work item (a multiple of 8)

#ifdef ICL_GELU_AVX2
using vmath::exp8;

// σ(2u) for 8 floats, plus du/dx when wanted.
inline __m256 sigma2u8(__m256 x, __m256* dudx) {
    const __m256 s = _mm256_set1_ps((float)kS), a = _mm256_set1_ps((float)kA);
    const __m256 x2 = _mm256_mul_ps(x, x);
    const __m256 u = _mm256_mul_ps(s, _mm256_fmadd_ps(_mm256_mul_ps(a, x2), x, x));  // s·(x + a·x³)
    if (dudx) *dudx = _mm256_mul_ps(s, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(3.0f), a), x2, _mm256_set1_ps(1.0f)));
    const __m256 e = exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
    return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

inline void forward8(float* out, const float* inp) {
    const __m256 x = _mm256_loadu_ps(inp);
    _mm256_storeu_ps(out, _mm256_mul_ps(x, sigma2u8(x, nullptr)));
}
inline void backward8(float* dinp, const float* inp, const float* dout) {
    const __m256 x = _mm256_loadu_ps(inp);
    __m256 dudx;
    const __m256 sg = sigma2u8(x, &dudx);
    const __m256 one = _mm256_set1_ps(1.0f);
    // local = σ + x · 2σ(1−σ) · du/dx
    const __m256 two_s_1ms = _mm256_mul_ps(_mm256_add_ps(sg, sg), _mm256_sub_ps(one, sg));
    const __m256 local = _mm256_fmadd_ps(_mm256_mul_ps(x, two_s_1ms), dudx, sg);
    _mm256_storeu_ps(dinp, _mm256_fmadd_ps(local, _mm256_loadu_ps(dout), _mm256_loadu_ps(dinp)));
}
#endif
}  // namespace gelu_detail

// out (n) = gelu(inp (n)), elementwise; any shape flattened to n elements.
template <typename real>
void gelu_forward(real* out, const real* inp, size_t n) {
    using namespace gelu_detail;
    const long long nchunks = ((long long)n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (gelu_detail::use_threads((double)n))
    for (long long ch = 0; ch < nchunks; ch++) {
        const size_t i0 = (size_t)(ch * kChunk), i1 = std::min(n, (size_t)((ch + 1) * kChunk));
#ifdef ICL_GELU_AVX2
        if constexpr (std::is_same_v<real, float>) {
            size_t i = i0;
            for (; i + 8 <= i1; i += 8) forward8(out + i, inp + i);
            if (i < i1) {  // tail: same vector arithmetic on a zero-padded copy
                float xin[8] = {0}, xout[8];
                for (size_t k = i; k < i1; k++) xin[k - i] = inp[k];
                forward8(xout, xin);
                for (size_t k = i; k < i1; k++) out[k] = xout[k - i];
            }
            continue;
        }
#endif
        for (size_t i = i0; i < i1; i++) {
            const real x = inp[i];
            const real u = real(kS) * (x + real(kA) * x * x * x);
            out[i] = x / (real(1) + std::exp(real(-2) * u));  // out = x·σ(2u) = 0.5·x·(1 + tanh(u))
        }
    }
}

// Backward of gelu_forward. ACCUMULATES: dinp (n) += gelu'(inp) ⊙ dout (n).
template <typename real>
void gelu_backward(real* dinp, const real* inp, const real* dout, size_t n) {
    using namespace gelu_detail;
    const long long nchunks = ((long long)n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (gelu_detail::use_threads((double)n))
    for (long long ch = 0; ch < nchunks; ch++) {
        const size_t i0 = (size_t)(ch * kChunk), i1 = std::min(n, (size_t)((ch + 1) * kChunk));
#ifdef ICL_GELU_AVX2
        if constexpr (std::is_same_v<real, float>) {
            size_t i = i0;
            for (; i + 8 <= i1; i += 8) backward8(dinp + i, inp + i, dout + i);
            if (i < i1) {
                float xin[8] = {0}, gin[8] = {0}, gacc[8] = {0};
                for (size_t k = i; k < i1; k++) { xin[k - i] = inp[k]; gin[k - i] = dout[k]; gacc[k - i] = dinp[k]; }
                backward8(gacc, xin, gin);
                for (size_t k = i; k < i1; k++) dinp[k] = gacc[k - i];
            }
            continue;
        }
#endif
        for (size_t i = i0; i < i1; i++) {
            const real x = inp[i];
            const real u = real(kS) * (x + real(kA) * x * x * x);
            const real dudx = real(kS) * (real(1) + real(3 * kA) * x * x);
            const real sg = real(1) / (real(1) + std::exp(real(-2) * u));
            // out = x * σ(2u)   =>   d out/dx = σ + x · σ'(2u)·2·du/dx = σ + x · 2σ(1−σ) · du/dx
            dinp[i] += (sg + x * real(2) * sg * (real(1) - sg) * dudx) * dout[i];
        }
    }
}

}  // namespace icl
