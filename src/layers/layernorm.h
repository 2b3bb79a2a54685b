// layernorm.h — layer normalisation over the last dimension, with a learned gain and bias.
//
//   mean = Σ_c x_c / C,   var = Σ_c (x_c − mean)² / C,   rstd = 1 / sqrt(var + 1e-5)
//   out_c = (x_c − mean) · rstd · weight_c + bias_c
//
// Forward saves mean and rstd per row (that, plus the input, is all backward needs).
//
// GRADIENT CONVENTION (whole engine): every backward ACCUMULATES (+=) into every gradient it writes, parameter
// and activation gradients alike; callers zero the gradient buffers once per step (a few can SET instead, where
// the caller says so: GradWrite, engine/common.h).
//
// Threads: the per-row work (forward, dinp) splits the N rows. dweight/dbias are sums over the N rows; rather
// than per-thread partial sums (whose combination order would depend on the thread count) each thread owns a
// slice of channels [c0,c1) and adds rows n = 0..N-1 in order, recomputing x̂ for its slice. No scratch, no
// atomics, and the result is bit-identical for any thread count.
#pragma once
#include "layers/fixed_sum.h"
#include "layers/parallel.h"
#include <cmath>
#include <cstddef>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace icl {

namespace layernorm_detail {
using par::use_threads;
using par::thread_columns;
}  // namespace layernorm_detail

template <typename real>
void layernorm_forward(real* out,           // (N,C)
                       real* mean,          // (N)   saved for backward
                       real* rstd,          // (N)   saved for backward
                       const real* inp,     // (N,C)
                       const real* weight,  // (C)
                       const real* bias,    // (C)
                       int N, int C) {
    const real eps = real(1e-5);
#pragma omp parallel for schedule(static) if (layernorm_detail::use_threads((double)N * C))
    for (int n = 0; n < N; n++) {
        const real* x = inp + (size_t)n * C;  // (C)
        real* o = out + (size_t)n * C;        // (C)
        // sums in a fixed order (fixed_sum.h): the same bits from every build
        const real m = fixed_sum<real>(C, [&](size_t c) { return x[c]; }) / C;
        // two-pass variance: no cancellation when |mean| >> std
        const real v = fixed_sum<real>(C, [&](size_t c) { const real d = x[c] - m; return d * d; }) / C;
        const real s = real(1) / std::sqrt(v + eps);
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

// Backward of layernorm_forward. ACCUMULATES into dinp, dweight, dbias; any of the three may be nullptr.
template <typename real>
void layernorm_backward(real* dinp,          // (N,C)
                        real* dweight,       // (C)
                        real* dbias,         // (C)
                        const real* dout,    // (N,C)
                        const real* inp,     // (N,C)
                        const real* weight,  // (C)
                        const real* mean,    // (N)
                        const real* rstd,    // (N)
                        int N, int C) {
#pragma omp parallel if (layernorm_detail::use_threads((double)N * C))
    {
        if (dinp) {
            // With x̂ = (x − mean)·rstd and g = dout ⊙ weight (the gradient w.r.t. x̂), differentiating
            //   o[c] = (x[c] - m) * s * weight[c] + bias[c]
            // through mean and rstd gives  dx = rstd · (g − mean_c(g) − x̂ · mean_c(g ⊙ x̂)).
#pragma omp for schedule(static) nowait
            for (int n = 0; n < N; n++) {
                const real* x = inp + (size_t)n * C;     // (C)
                const real* dy = dout + (size_t)n * C;   // (C)
                real* dx = dinp + (size_t)n * C;         // (C)
                const real m = mean[n], s = rstd[n];
                const real g_mean = fixed_sum<real>(C, [&](size_t c) { return dy[c] * weight[c]; }) / C;
                const real gx_mean = fixed_sum<real>(C, [&](size_t c) { return dy[c] * weight[c] * (x[c] - m) * s; }) / C;
#pragma omp simd
                for (int c = 0; c < C; c++) {
                    const real g = dy[c] * weight[c];
                    const real xhat = (x[c] - m) * s;
                    dx[c] += s * (g - g_mean - xhat * gx_mean);
                }
            }
        }
        if (dweight || dbias) {
            int c0, c1;
            layernorm_detail::thread_columns(C, c0, c1);
            for (int n = 0; n < N; n++) {  // in order n = 0..N-1 for every channel: deterministic
                const real* x = inp + (size_t)n * C;    // (C)
                const real* dy = dout + (size_t)n * C;  // (C)
                const real m = mean[n], s = rstd[n];
                // o[c] = (x[c] - m) * s * weight[c] + bias[c]   =>   dweight[c] += dy[c]·x̂[c],  dbias[c] += dy[c]
                if (dweight) {
#pragma omp simd
                    for (int c = c0; c < c1; c++) dweight[c] += dy[c] * ((x[c] - m) * s);
                }
                if (dbias) {
#pragma omp simd
                    for (int c = c0; c < c1; c++) dbias[c] += dy[c];
                }
            }
        }
    }
}

}  // namespace icl
