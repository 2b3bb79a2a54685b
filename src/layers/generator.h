// generator.h — the CGT template low-rank weight generator T^κ (spec/cgt.md §1.5), in the efficient batched
// form: no per-token d_x×d_x matrix is ever built.
//
//   T(u; y) = u + δW(y)·[u;1],   δW(y) = L(y)·R(y)ᵀ  (C × (C+1), rank ≤ r)
//   L(y) = Σ_m c_m L^m (C×r),   R(y) = Σ_m c_m R^m ((C+1)×r),   c = h(S·[y;1]) ∈ R^M,  h = tanh | softmax
//
// Per row n (a token) with u (C), y (Dy):
//   a   = S[:, :Dy]·y + S[:, Dy]                      (M)        mixing pre-activation
//   c   = h(a)                                        (M)        mixing coefficients σ   — saved
//   P   = [u;1]ᵀ·R_all                                (M·r)      P[m·r+k] = R^m[:,k]·[u;1] — saved
//   z_k = Σ_m c_m P[m·r+k]                            (r)        = R(y)ᵀ[u;1]            — saved
//   G[m·r+k] = c_m z_k                                (M·r)                              — saved
//   out = u + L_all·G                                 (C)        = u + L(y) z
// with R_all = [R^1 | … | R^M] ((C+1), M·r) and L_all = [L^1 | … | L^M] (C, M·r), column m·r+k = template m,
// rank component k. The last row of R_all is the bias row r_b.
//
// Cost per row: 2·(C+1)·M·r (P) + 2·C·M·r (out) + O(M·r + M·Dy) FLOPs (generator_flops below).
//
// GRADIENT CONVENTION (whole engine): backward ACCUMULATES (+=) into du, dy, dS, dL, dR.
//
// Threads: the two big products go through gemm() (deterministic); the per-row parts split the rows; the
// bias-row/column sums walk the rows in order (deterministic for any thread count).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "engine/common.h"
#include "layers/matmul.h"
#include "layers/parallel.h"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace icl {


enum class MixFn { tanh = 0, softmax = 1 };

// FLOPs of one forward over N rows (backward ≈ 2×).
inline double generator_flops(double N, int C, int Dy, int M, int r) {
    return N * (2.0 * (C + 1) * M * r + 2.0 * C * M * r + 2.0 * M * (Dy + 1) + 3.0 * M * r);
}

// Scratch elements generator_backward needs: dG/dP (N, M·r) and da (N, M).
inline size_t generator_scratch_size(int N, int M, int r) { return (size_t)N * ((size_t)M * r + M); }

// The mixing coefficients alone: c (N,M) = h(S·[y;1]). Used by forward and by folding/analysis.
template <typename real>
void generator_mix(real* c,        // (N,M)
                   const real* y,  // (N,Dy)
                   const real* S,  // (M,Dy+1)
                   int N, int Dy, int M, MixFn h) {
    // a = [y;1] @ Sᵀ
    if (Dy > 0) gemm<real>(false, true, N, M, Dy, real(1), y, Dy, S, Dy + 1, real(0), c, M);
    else std::fill(c, c + (size_t)N * M, real(0));
#pragma omp parallel for schedule(static) if (par::use_threads((double)N * M * 4))
    for (int n = 0; n < N; n++) {
        real* cr = c + (size_t)n * M;  // (M)
        for (int m = 0; m < M; m++) cr[m] += S[(size_t)m * (Dy + 1) + Dy];
        if (h == MixFn::tanh) {
            for (int m = 0; m < M; m++) cr[m] = std::tanh(cr[m]);
        } else {
            real mx = cr[0];
            for (int m = 1; m < M; m++) mx = std::max(mx, cr[m]);
            real sum = 0;
            for (int m = 0; m < M; m++) sum += (cr[m] = std::exp(cr[m] - mx));
            for (int m = 0; m < M; m++) cr[m] /= sum;
        }
    }
}

template <typename real>
void generator_forward(real* out,       // (N,C)    T(u; y)
                       real* c,         // (N,M)    saved: σ = h(S·[y;1])
                       real* P,         // (N,M·r)  saved: [u;1]ᵀ R_all
                       real* z,         // (N,r)    saved: R(y)ᵀ[u;1]
                       real* G,         // (N,M·r)  saved: c_m z_k
                       const real* u,   // (N,C)
                       const real* y,   // (N,Dy)
                       const real* S,   // (M,Dy+1)
                       const real* Lw,  // (C,M·r)   L_all
                       const real* Rw,  // (C+1,M·r) R_all (last row = bias row)
                       int N, int C, int Dy, int M, int r, MixFn h) {
    const int Mr = M * r;
    generator_mix(c, y, S, N, Dy, M, h);
    // P = u @ R_all[:C] + R_all[C]
    gemm<real>(false, false, N, Mr, C, real(1), u, C, Rw, Mr, real(0), P, Mr);
    const real* rb = Rw + (size_t)C * Mr;  // (M·r) bias row
#pragma omp parallel for schedule(static) if (par::use_threads((double)N * Mr * 3))
    for (int n = 0; n < N; n++) {
        real* Pn = P + (size_t)n * Mr;       // (M·r)
        const real* cn = c + (size_t)n * M; // (M)
        real* zn = z + (size_t)n * r;        // (r)
        real* Gn = G + (size_t)n * Mr;       // (M·r)
        for (int j = 0; j < Mr; j++) Pn[j] += rb[j];
        for (int k = 0; k < r; k++) zn[k] = 0;
        for (int m = 0; m < M; m++)
            for (int k = 0; k < r; k++) zn[k] += cn[m] * Pn[m * r + k];   // z_k = Σ_m c_m P_{m,k}
        for (int m = 0; m < M; m++)
            for (int k = 0; k < r; k++) Gn[m * r + k] = cn[m] * zn[k];    // G_{m,k} = c_m z_k
    }
    // out = u + G @ L_allᵀ
    std::copy(u, u + (size_t)N * C, out);
    gemm<real>(false, true, N, C, Mr, real(1), G, Mr, Lw, Mr, real(1), out, C);
}

// Backward of generator_forward. ACCUMULATES into du (N,C), dy (N,Dy), dS, dL, dR; dy may be nullptr
// (frozen y that needs no gradient). scratch: generator_scratch_size(N, M, r) elements.
template <typename real>
void generator_backward(real* du, real* dy, real* dS, real* dL, real* dR,
                        real* scratch,     // (N, M·r + M)
                        const real* dout,  // (N,C)
                        const real* u,     // (N,C)
                        const real* y,     // (N,Dy)
                        const real* c, const real* P, const real* z, const real* G,
                        const real* S, const real* Lw, const real* Rw,
                        int N, int C, int Dy, int M, int r, MixFn h) {
    const int Mr = M * r;
    real* dG = scratch;                      // (N,M·r), becomes dP in place
    real* da = scratch + (size_t)N * Mr;     // (N,M)
    // out = u + G @ L_allᵀ   =>   du += dout ;  dG = dout @ L_all ;  dL_all += doutᵀ @ G
    if (du) {
#pragma omp parallel for simd schedule(static) if (par::use_threads((double)N * C))
        for (size_t i = 0; i < (size_t)N * C; i++) du[i] += dout[i];
    }
    gemm<real>(false, false, N, Mr, C, real(1), dout, C, Lw, Mr, real(0), dG, Mr);
    gemm<real>(true, false, C, Mr, N, real(1), dout, C, G, Mr, real(1), dL, Mr);
#pragma omp parallel for schedule(static) if (par::use_threads((double)N * Mr * 4))
    for (int n = 0; n < N; n++) {
        real* dGn = dG + (size_t)n * Mr;     // (M·r)
        real* dan = da + (size_t)n * M;      // (M)  holds dc first, then da
        const real* cn = c + (size_t)n * M;
        const real* zn = z + (size_t)n * r;
        const real* Pn = P + (size_t)n * Mr;
        real dz[64];
        real* dzp = r <= 64 ? dz : nullptr;
        std::vector<real> dz_big;
        if (!dzp) { dz_big.assign(r, real(0)); dzp = dz_big.data(); }
        for (int k = 0; k < r; k++) dzp[k] = 0;
        // G_{m,k} = c_m z_k   =>   dz_k = Σ_m dG_{m,k} c_m ;  dc_m = Σ_k dG_{m,k} z_k
        for (int m = 0; m < M; m++) {
            real dc = 0;
            for (int k = 0; k < r; k++) {
                dzp[k] += dGn[m * r + k] * cn[m];
                dc += dGn[m * r + k] * zn[k];
            }
            dan[m] = dc;
        }
        // z_k = Σ_m c_m P_{m,k}   =>   dP_{m,k} = c_m dz_k ;  dc_m += Σ_k dz_k P_{m,k}      (dP overwrites dG)
        for (int m = 0; m < M; m++)
            for (int k = 0; k < r; k++) {
                dan[m] += dzp[k] * Pn[m * r + k];
                dGn[m * r + k] = cn[m] * dzp[k];
            }
        // c = h(a)
        if (h == MixFn::tanh) {
            for (int m = 0; m < M; m++) dan[m] *= (real(1) - cn[m] * cn[m]);          // da = dc ⊙ (1 − c²)
        } else {
            real dot = 0;
            for (int m = 0; m < M; m++) dot += cn[m] * dan[m];
            for (int m = 0; m < M; m++) dan[m] = cn[m] * (dan[m] - dot);              // da = c ⊙ (dc − Σ c·dc)
        }
    }
    const real* dP = dG;
    // P = u @ R_all[:C] + R_all[C]   =>   dR_all[:C] += uᵀ @ dP ;  dR_all[C] += Σ_n dP ;  du += dP @ R_all[:C]ᵀ
    gemm<real>(true, false, C, Mr, N, real(1), u, C, dP, Mr, real(1), dR, Mr);
    {
        real* drb = dR + (size_t)C * Mr;
        for (int n = 0; n < N; n++)
            for (int j = 0; j < Mr; j++) drb[j] += dP[(size_t)n * Mr + j];
    }
    if (du) gemm<real>(false, true, N, C, Mr, real(1), dP, Mr, Rw, Mr, real(1), du, C);
    // a = y @ S[:, :Dy]ᵀ + S[:, Dy]   =>   dS[:, :Dy] += daᵀ @ y ;  dS[:, Dy] += Σ_n da ;  dy += da @ S[:, :Dy]
    if (Dy > 0) gemm<real>(true, false, M, Dy, N, real(1), da, M, y, Dy, real(1), dS, Dy + 1);
    for (int n = 0; n < N; n++)
        for (int m = 0; m < M; m++) dS[(size_t)m * (Dy + 1) + Dy] += da[(size_t)n * M + m];
    if (dy && Dy > 0) gemm<real>(false, false, N, Dy, M, real(1), da, M, S, Dy + 1, real(1), dy, Dy);
}

}  // namespace icl
