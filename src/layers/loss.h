// loss.h — the training losses, per row; the caller reduces them (mean over unmasked rows, weights, ...).
//
//   crossentropy: fused softmax + cross-entropy over V classes, for token targets
//     probs[n,:] = softmax(logits[n,:]),   losses[n] = −log probs[n, targets[n]]
//   mse: squared error for vector targets
//     losses[n] = (1/D) Σ_d (pred[n,d] − target[n,d])²
//
// The loss is Σ_n dlosses[n]·losses[n]: backward takes dlosses (N), the weight of each row's loss. For a mean
// over the rows that count, the caller writes dlosses[n] = mask[n] / (number of unmasked rows), i.e. 0 for rows
// that do not count. A negative target (e.g. −1) marks an "ignore" row in cross-entropy: its loss is 0 and
// backward leaves its gradient untouched whatever dlosses[n] says.
//
// GRADIENT CONVENTION (whole engine): every backward ACCUMULATES (+=) into every gradient it writes, parameter
// and activation gradients alike; callers zero the gradient buffers once per step (a few can SET instead, where
// the caller says so: GradWrite, engine/common.h).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "engine/common.h"
#include "layers/parallel.h"
#include "layers/vmath.h"

#ifdef _OPENMP
#include <omp.h>
#endif
namespace icl {

namespace loss_detail {
using par::use_threads;
}  // namespace loss_detail

template <typename real>
void crossentropy_forward(real* losses,        // (N)
                          real* probs,         // (N,V)  saved for backward
                          const real* logits,  // (N,V)
                          const int* targets,  // (N) class in [0,V), or < 0 = ignore this row
                          int N, int V) {
#pragma omp parallel for schedule(static) if (loss_detail::use_threads((double)N * V))
    for (int n = 0; n < N; n++) {
        const real* z = logits + (size_t)n * V;  // (V)
        real* p = probs + (size_t)n * V;         // (V)
        const int t = targets[n];
        ICL_ASSERT(t < V);
        const real maxv = vmath::max_of(z, V);
        std::copy(z, z + V, p);
        const real sum = vmath::exp_shifted_sum(p, V, maxv);  // p[v] = exp(z[v] - maxv)
        const real inv = real(1) / sum;
#pragma omp simd
        for (int v = 0; v < V; v++) p[v] *= inv;
        // −log p_t = log Σ_v e^(z_v − max) − (z_t − max): finite even where p_t underflows to 0
        losses[n] = t < 0 ? real(0) : std::log(sum) - (z[t] - maxv);
    }
}

// Backward of crossentropy_forward (through the softmax). ACCUMULATES: for rows with a target,
//   dlogits[n,v] += dlosses[n] · (probs[n,v] − [v == targets[n]]).
template <typename real>
void crossentropy_backward(real* dlogits,        // (N,V)
                           const real* dlosses,  // (N) weight of each row's loss (0 = masked)
                           const real* probs,    // (N,V)
                           const int* targets,   // (N)
                           int N, int V) {
#pragma omp parallel for schedule(static) if (loss_detail::use_threads((double)N * V))
    for (int n = 0; n < N; n++) {
        const int t = targets[n];
        if (t < 0) continue;  // ignored row: losses[n] = 0 is a constant
        ICL_ASSERT(t < V);
        const real dl = dlosses[n];
        const real* p = probs + (size_t)n * V;  // (V)
        real* dz = dlogits + (size_t)n * V;     // (V)
        // losses[n] = log Σ_v e^(z_v) − z_t   =>   dz_v += dl·(p_v − [v == t])
#pragma omp simd
        for (int v = 0; v < V; v++) dz[v] += dl * p[v];
        dz[t] -= dl;
    }
}

template <typename real>
void mse_forward(real* losses,        // (N)
                 const real* pred,    // (N,D)
                 const real* target,  // (N,D)
                 int N, int D) {
#pragma omp parallel for schedule(static) if (loss_detail::use_threads((double)N * D))
    for (int n = 0; n < N; n++) {
        const real* y = pred + (size_t)n * D;     // (D)
        const real* t = target + (size_t)n * D;   // (D)
        real s = 0;
        for (int d = 0; d < D; d++) {
            const real e = y[d] - t[d];
            s += e * e;
        }
        losses[n] = s / D;
    }
}

// Backward of mse_forward w.r.t. pred only (targets are data). ACCUMULATES:
//   dpred[n,d] += dlosses[n] · 2·(pred[n,d] − target[n,d]) / D.
template <typename real>
void mse_backward(real* dpred,          // (N,D)
                  const real* dlosses,  // (N)
                  const real* pred,     // (N,D)
                  const real* target,   // (N,D)
                  int N, int D) {
#pragma omp parallel for schedule(static) if (loss_detail::use_threads((double)N * D))
    for (int n = 0; n < N; n++) {
        const real* y = pred + (size_t)n * D;     // (D)
        const real* t = target + (size_t)n * D;   // (D)
        real* dy = dpred + (size_t)n * D;         // (D)
        const real g = dlosses[n] * real(2) / D;
        // losses[n] = s / D,  s = Σ_d (y_d − t_d)²   =>   dy_d += dloss · 2·(y_d − t_d) / D
#pragma omp simd
        for (int d = 0; d < D; d++) dy[d] += g * (y[d] - t[d]);
    }
}

}  // namespace icl
