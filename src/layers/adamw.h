// adamw.h — the optimizer step and its helpers: AdamW, global gradient norm + clipping, learning-rate schedule.
//
// AdamW (Loshchilov & Hutter), with the weight decay decoupled from the gradient statistics:
//   m = β1·m + (1−β1)·g          v = β2·v + (1−β2)·g²
//   m̂ = m / (1−β1^t)             v̂ = v / (1−β2^t)                  t = 1, 2, ... (1-based step count)
//   p = p − lr·( m̂ / (sqrt(v̂) + eps) + wd·p )
// Tensors that should not decay (biases, LayerNorm gains, ...) are updated by a separate call with wd = 0
// (TensorSpec::decay says which).
//
// Clipping by global norm:   norm = sqrt(grad_norm_squared(grads, n));   scale(grads, n, clip_factor(norm, max_norm))
//
// Determinism: grad_norm_squared cuts the vector into a FIXED number of chunks (not one per thread), sums each in
// double, then adds the chunk sums in order: the same bits for any thread count. The rest is elementwise.
#pragma once
#include "layers/fixed_sum.h"
#include "layers/parallel.h"
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>
#if defined(__AVX2__) && defined(__FMA__)
#include "layers/simd.h"
#define ICL_ADAMW_AVX2 1
#endif

#ifdef _OPENMP
#include <omp.h>
#endif
namespace icl {

namespace adamw_detail {
using par::use_threads;
}  // namespace adamw_detail

template <typename real>
void adamw_update(real* params,       // (n)
                  const real* grads,  // (n)
                  real* m,            // (n) first-moment state, zero before step 1
                  real* v,            // (n) second-moment state, zero before step 1
                  size_t n, double lr, double beta1, double beta2, double eps, double weight_decay,
                  int t) {            // 1-based step number (bias correction)
    const real b1 = (real)beta1, b2 = (real)beta2;
    const real c1 = (real)(1.0 / (1.0 - std::pow(beta1, t)));  // 1 / (1 − β1^t)
    const real c2 = (real)(1.0 / (1.0 - std::pow(beta2, t)));  // 1 / (1 − β2^t)
    const real lr_ = (real)lr, eps_ = (real)eps, wd = (real)weight_decay;
    auto one = [&](size_t i) {
        const real g = grads[i];
        const real mi = b1 * m[i] + (real(1) - b1) * g;
        const real vi = b2 * v[i] + (real(1) - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        params[i] -= lr_ * ((mi * c1) / (std::sqrt(vi * c2) + eps_) + wd * params[i]);
    };
#ifdef ICL_ADAMW_AVX2
    // float: 8 lanes with AVX2 (std::sqrt keeps errno semantics, which stops GCC from vectorizing the plain loop)
    if constexpr (std::is_same_v<real, float>) {
        const size_t n8 = n / 8 * 8;
#pragma omp parallel for schedule(static) if (adamw_detail::use_threads((double)n))
        for (long long i8 = 0; i8 < (long long)(n8 / 8); i8++) {
            const size_t i = (size_t)i8 * 8;
            const __m256 g = _mm256_loadu_ps(grads + i), p = _mm256_loadu_ps(params + i);
            const __m256 mi = _mm256_fmadd_ps(_mm256_set1_ps(b1), _mm256_loadu_ps(m + i), _mm256_mul_ps(_mm256_set1_ps(1.0f - b1), g));
            const __m256 vi = _mm256_fmadd_ps(_mm256_set1_ps(b2), _mm256_loadu_ps(v + i),
                                              _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(1.0f - b2), g), g));
            _mm256_storeu_ps(m + i, mi);
            _mm256_storeu_ps(v + i, vi);
            const __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, _mm256_set1_ps(c2))), _mm256_set1_ps(eps_));
            const __m256 upd = _mm256_fmadd_ps(_mm256_set1_ps(wd), p, _mm256_div_ps(_mm256_mul_ps(mi, _mm256_set1_ps(c1)), den));
            _mm256_storeu_ps(params + i, _mm256_fnmadd_ps(_mm256_set1_ps(lr_), upd, p));
        }
        for (size_t i = n8; i < n; i++) one(i);
        return;
    }
#endif
#pragma omp parallel for schedule(static) if (adamw_detail::use_threads((double)n))
    for (long long i = 0; i < (long long)n; i++) one((size_t)i);
}

// Σ grads², accumulated in double. Deterministic and independent of the thread count (see top of file).
template <typename real>
double grad_norm_squared(const real* grads, size_t n) {
    constexpr int NCHUNK = 64;
    double partial[NCHUNK];
#pragma omp parallel for schedule(static) if (adamw_detail::use_threads((double)n))
    for (int ch = 0; ch < NCHUNK; ch++) {
        const size_t i0 = n * ch / NCHUNK, i1 = n * (ch + 1) / NCHUNK;
        partial[ch] = fixed_sum<double>(i1 - i0, [&](size_t i) { return (double)grads[i0 + i] * (double)grads[i0 + i]; });
    }
    double total = 0.0;
    for (int ch = 0; ch < NCHUNK; ch++) total += partial[ch];
    return total;
}

// grads (n) *= factor
template <typename real>
void scale(real* grads, size_t n, double factor) {
    const real f = (real)factor;
#pragma omp parallel for simd schedule(static) if (adamw_detail::use_threads((double)n))
    for (size_t i = 0; i < n; i++) grads[i] *= f;
}

// The factor that brings a gradient of global norm `norm` down to `max_norm`: max_norm / norm when
// norm > max_norm, else 1. max_norm <= 0 disables clipping (returns 1). A non-finite norm also returns 1:
// a NaN/Inf gradient is the caller's to detect and report, not to be hidden by scaling.
inline double clip_factor(double norm, double max_norm) {
    if (max_norm <= 0.0 || !std::isfinite(norm) || norm <= max_norm) return 1.0;
    return max_norm / norm;
}

// Learning rate for 0-based `step` (the step about to be taken):
//   warm-up   step < warmup_steps:  max_lr · (step+1) / warmup_steps   (linear; never 0, so no step is wasted;
//                                   reaches max_lr at step warmup_steps−1)
//   decay     warmup_steps <= step < total_steps: cosine from max_lr (at step = warmup_steps) towards
//             min_lr = min_lr_fraction·max_lr, which it reaches at step = total_steps
//   after     step >= total_steps: min_lr
inline double lr_schedule(long step, double max_lr, long warmup_steps, long total_steps, double min_lr_fraction) {
    const double min_lr = min_lr_fraction * max_lr;
    if (step < warmup_steps) return max_lr * (double)(step + 1) / (double)warmup_steps;
    if (step >= total_steps) return min_lr;
    const double progress = (double)(step - warmup_steps) / (double)(total_steps - warmup_steps);  // [0,1)
    const double coeff = 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));             // 1 -> 0
    return min_lr + coeff * (max_lr - min_lr);
}

}  // namespace icl
