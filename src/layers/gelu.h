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
// vmath::exp8 of layers/vmath.h (max relative error ≈ 1e-7, i.e. ~1 ulp), because glibc's scalar tanhf/expf do not
// vectorize and made GELU the slowest non-GEMM layer (~60 ms for (8,256,1536) on 2 cores instead of ~2 ms).
// Tails shorter than 8 go through the same vector code via a padded buffer, so every element gets the same
// arithmetic wherever it sits. On AVX-512 the bulk runs 16 lanes at a time (forward16/backward16: the 8-lane
// kernels' operations in the same order on zmm registers, with vmath::exp16, exp8's lane-for-lane twin), so an
// AVX-512 build gives the AVX2 build's bits. tests/test_layers.cpp checks the float path against the double one
// and the 16 lanes against the 8 bit for bit.
//
// GRADIENT CONVENTION (whole engine): every backward ACCUMULATES (+=) into every gradient it writes, parameter
// and activation gradients alike; callers zero the gradient buffers once per step.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "layers/parallel.h"
#include "layers/vmath.h"
#if defined(__AVX2__) && defined(__FMA__)
#define ICL_GELU_AVX2 1
#endif

#ifdef _OPENMP
#include <omp.h>
#endif
namespace icl {

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

#ifdef __AVX512F__
// forward8/backward8 16 lanes at a time: every operation the same, lane for lane (so the same bits).
inline __m512 sigma2u16(__m512 x, __m512* dudx) {
    const __m512 s = _mm512_set1_ps((float)kS), a = _mm512_set1_ps((float)kA);
    const __m512 x2 = _mm512_mul_ps(x, x);
    const __m512 u = _mm512_mul_ps(s, _mm512_fmadd_ps(_mm512_mul_ps(a, x2), x, x));  // s·(x + a·x³)
    if (dudx) *dudx = _mm512_mul_ps(s, _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(3.0f), a), x2, _mm512_set1_ps(1.0f)));
    const __m512 e = vmath::exp16(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u));
    return _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}
inline void forward16(float* out, const float* inp) {
    const __m512 x = _mm512_loadu_ps(inp);
    _mm512_storeu_ps(out, _mm512_mul_ps(x, sigma2u16(x, nullptr)));
}
inline void backward16(float* dinp, const float* inp, const float* dout) {
    const __m512 x = _mm512_loadu_ps(inp);
    __m512 dudx;
    const __m512 sg = sigma2u16(x, &dudx);
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 two_s_1ms = _mm512_mul_ps(_mm512_add_ps(sg, sg), _mm512_sub_ps(one, sg));
    const __m512 local = _mm512_fmadd_ps(_mm512_mul_ps(x, two_s_1ms), dudx, sg);
    _mm512_storeu_ps(dinp, _mm512_fmadd_ps(local, _mm512_loadu_ps(dout), _mm512_loadu_ps(dinp)));
}
#endif

// The tail [i, i1) of fewer than 8 elements through the same 8-wide kernel k(dst, a, b) on zero-padded copies
// (dst's old values are copied in too: the backward accumulates), so every element gets the same arithmetic.
template <typename K>
inline void padded8(size_t i, size_t i1, float* dst, const float* a, const float* b, K k) {
    if (i >= i1) return;
    float d[8] = {0}, x[8] = {0}, y[8] = {0};
    for (size_t j = i; j < i1; j++) { d[j - i] = dst[j]; x[j - i] = a[j]; y[j - i] = b ? b[j] : 0.0f; }
    k(d, x, y);
    for (size_t j = i; j < i1; j++) dst[j] = d[j - i];
}
#endif

// f(i0, i1) over [0, n) in chunks of kChunk elements, the chunks spread over the threads.
template <typename F>
void for_chunks(size_t n, F f) {
    const long long nchunks = ((long long)n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (use_threads((double)n))
    for (long long ch = 0; ch < nchunks; ch++) f((size_t)(ch * kChunk), std::min(n, (size_t)((ch + 1) * kChunk)));
}
}  // namespace gelu_detail

// out (n) = gelu(inp (n)), elementwise; any shape flattened to n elements.
template <typename real>
void gelu_forward(real* out, const real* inp, size_t n) {
    using namespace gelu_detail;
    for_chunks(n, [&](size_t i0, size_t i1) {
#ifdef ICL_GELU_AVX2
        if constexpr (std::is_same_v<real, float>) {
            size_t i = i0;
#ifdef __AVX512F__
            for (; i + 16 <= i1; i += 16) forward16(out + i, inp + i);
#endif
            for (; i + 8 <= i1; i += 8) forward8(out + i, inp + i);
            padded8(i, i1, out, inp, nullptr, [](float* o, const float* x, const float*) { forward8(o, x); });
            return;
        }
#endif
        for (size_t i = i0; i < i1; i++) {
            const real x = inp[i];
            const real u = real(kS) * (x + real(kA) * x * x * x);
            out[i] = x / (real(1) + std::exp(real(-2) * u));  // out = x·σ(2u) = 0.5·x·(1 + tanh(u))
        }
    });
}

// Backward of gelu_forward. ACCUMULATES: dinp (n) += gelu'(inp) ⊙ dout (n).
template <typename real>
void gelu_backward(real* dinp, const real* inp, const real* dout, size_t n) {
    using namespace gelu_detail;
    for_chunks(n, [&](size_t i0, size_t i1) {
#ifdef ICL_GELU_AVX2
        if constexpr (std::is_same_v<real, float>) {
            size_t i = i0;
#ifdef __AVX512F__
            for (; i + 16 <= i1; i += 16) backward16(dinp + i, inp + i, dout + i);
#endif
            for (; i + 8 <= i1; i += 8) backward8(dinp + i, inp + i, dout + i);
            padded8(i, i1, dinp, inp, dout, [](float* d, const float* x, const float* g) { backward8(d, x, g); });
            return;
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
    });
}

}  // namespace icl
