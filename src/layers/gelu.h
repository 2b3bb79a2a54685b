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
// arithmetic wherever it sits. On AVX-512 the bulk runs 16 lanes at a time (the same kernel templates on zmm
// registers, with vmath::exp16, exp8's lane-for-lane twin), so an AVX-512 build gives the AVX2 build's bits.
// tests/test_layers.cpp checks the float path against the double one and the 16 lanes against the 8 bit for bit.
//
// GRADIENT CONVENTION (whole engine): every backward ACCUMULATES (+=) into every gradient it writes, parameter
// and activation gradients alike; callers zero the gradient buffers once per step. gelu_backward can SET dinp
// instead (GradWrite::set, engine/common.h) when it is that buffer's only writer.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "engine/common.h"
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
// The vector kernels, written once for one register of floats: F = F8 (ymm, AVX2) or F16 (zmm, AVX-512) of
// layers/simd.h. Every operation is lane-wise and the same for both widths, with vmath::expv = exp8 or exp16
// (lane-for-lane twins), so a lane gets the same bits at either width.
// σ(2u) for one register, plus du/dx when wanted.
template <class F>
inline typename F::V sigma2u(typename F::V x, typename F::V* dudx) {
    using V = typename F::V;
    const V s = F::set1((float)kS), a = F::set1((float)kA), one = F::set1(1.0f);
    const V x2 = F::mul(x, x);
    const V u = F::mul(s, F::fmadd(F::mul(a, x2), x, x));  // s·(x + a·x³)
    if (dudx) *dudx = F::mul(s, F::fmadd(F::mul(F::set1(3.0f), a), x2, one));  // s·(1 + 3a·x²)
    const V e = vmath::expv(F::mul(F::set1(-2.0f), u));
    return F::div(one, F::add(one, e));
}
// out (F::L) = x·σ(2u)
template <class F>
inline void forward_v(float* out, const float* inp) {
    const typename F::V x = F::loadu(inp);
    F::storeu(out, F::mul(x, sigma2u<F>(x, nullptr)));
}
// dinp (F::L) += (σ + x · 2σ(1−σ) · du/dx) · dout        (SET: dinp = …)
template <class F, bool SET>
inline void backward_v(float* dinp, const float* inp, const float* dout) {
    using V = typename F::V;
    const V x = F::loadu(inp);
    V dudx;
    const V sg = sigma2u<F>(x, &dudx);
    const V two_s_1ms = F::mul(F::add(sg, sg), F::sub(F::set1(1.0f), sg));
    const V local = F::fmadd(F::mul(x, two_s_1ms), dudx, sg);
    if constexpr (SET) F::storeu(dinp, F::mul(local, F::loadu(dout)));
    else F::storeu(dinp, F::fmadd(local, F::loadu(dout), F::loadu(dinp)));
}

// The tail [i, i1) of fewer than 8 elements through the same 8-wide kernel k(dst, a, b) on zero-padded copies
// (dst's old values are copied in too, for the backward that accumulates), so every element gets the same arithmetic.
template <typename K>
inline void padded8(size_t i, size_t i1, float* dst, const float* a, const float* b, K k) {
    if (i >= i1) return;
    float d[8] = {0}, x[8] = {0}, y[8] = {0};
    for (size_t j = i; j < i1; j++) { d[j - i] = dst[j]; x[j - i] = a[j]; y[j - i] = b ? b[j] : 0.0f; }
    k(d, x, y);
    for (size_t j = i; j < i1; j++) dst[j] = d[j - i];
}

// The backward over [i0, i1): 16 lanes where built for AVX-512, then 8, then the tail through the 8-wide kernel.
template <bool SET>
inline void backward_run(float* dinp, const float* inp, const float* dout, size_t i0, size_t i1) {
    size_t i = i0;
#ifdef __AVX512F__
    for (; i + 16 <= i1; i += 16) backward_v<F16, SET>(dinp + i, inp + i, dout + i);
#endif
    for (; i + 8 <= i1; i += 8) backward_v<F8, SET>(dinp + i, inp + i, dout + i);
    padded8(i, i1, dinp, inp, dout, [](float* d, const float* x, const float* g) { backward_v<F8, SET>(d, x, g); });
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
            for (; i + 16 <= i1; i += 16) forward_v<F16>(out + i, inp + i);
#endif
            for (; i + 8 <= i1; i += 8) forward_v<F8>(out + i, inp + i);
            padded8(i, i1, out, inp, nullptr, [](float* o, const float* x, const float*) { forward_v<F8>(o, x); });
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

// Backward of gelu_forward. ACCUMULATES: dinp (n) += gelu'(inp) ⊙ dout (n); with write = set, dinp = … (GradWrite).
template <typename real>
void gelu_backward(real* dinp, const real* inp, const real* dout, size_t n, GradWrite write = GradWrite::add) {
    using namespace gelu_detail;
    const bool set = write == GradWrite::set;
    for_chunks(n, [&](size_t i0, size_t i1) {
#ifdef ICL_GELU_AVX2
        if constexpr (std::is_same_v<real, float>) {
            if (set) backward_run<true>(dinp, inp, dout, i0, i1);
            else backward_run<false>(dinp, inp, dout, i0, i1);
            return;
        }
#endif
        for (size_t i = i0; i < i1; i++) {
            const real x = inp[i];
            const real u = real(kS) * (x + real(kA) * x * x * x);
            const real dudx = real(kS) * (real(1) + real(3 * kA) * x * x);
            const real sg = real(1) / (real(1) + std::exp(real(-2) * u));
            // out = x * σ(2u)   =>   d out/dx = σ + x · σ'(2u)·2·du/dx = σ + x · 2σ(1−σ) · du/dx
            const real g = (sg + x * real(2) * sg * (real(1) - sg) * dudx) * dout[i];
            dinp[i] = set ? g : dinp[i] + g;
        }
    });
}

}  // namespace icl
