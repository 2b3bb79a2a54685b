// attention.h — causal multi-head softmax self-attention (GPT-2's), on a fused qkv input.
//
//   qkv (B,T,3C) holds [q | k | v] along the last axis, each C = NH heads × hs channels (head h owns channels
//   h·hs .. h·hs+hs-1 of each). For every (b, h):
//     preatt = q kᵀ / sqrt(hs)                     (T,T)
//     att    = softmax over j <= i of preatt[i,j]  (T,T), row i zero for j > i (causal)
//     out    = att v                               (T,hs), written to out[b, :, h·hs : h·hs+hs]
//
// Forward saves att (B,NH,T,T): all of it is written, with zeros above the diagonal.
//
// Key start (optional, kstart (B) non-null): sequence b's row i attends to j in [kstart[b], i] only — the CGT's
// masked full-length auxiliary pass (spec/cgt.md §2.3). A row i < kstart[b] has no key left; it attends to
// itself alone (j = i: a finite row, never the NaN of a softmax over nothing). att is 0 outside each row's range,
// so the backward needs nothing more: every term it forms is a multiple of att.
//
// GRADIENT CONVENTION (whole engine): every backward ACCUMULATES (+=) into every gradient it writes, parameter
// and activation gradients alike; callers zero the gradient buffers once per step. Here: dqkv += ...
//
// How it runs: one `omp parallel for` over the B·NH (batch, head) pairs; each pair does its products with
// gemm() (matmul.h), which runs single-threaded inside the parallel region. q, k, v, out and dout are read
// and written in place through leading dimensions (3C or C) — the GEMM packs its operands, so no gather
// into contiguous copies is needed. The T×T products are done in row blocks of ATT_BLOCK rows: block
// [i0,i1) only needs key columns 0..i1-1, which skips ~3/8 of the work at T = 4·ATT_BLOCK.
// Every output element is computed by one thread in a fixed order: bit-identical for a fixed thread count
// (and in fact for any thread count).
//
// Scratch: backward needs one T×T buffer per thread (dL/datt, then dL/dpreatt in place). Allocate
//   attention_scratch_size(B, T, C, NH, nthreads)  elements
// with nthreads >= the OpenMP thread count in force when attention_backward runs (the default argument
// reads it, so call it after setting --threads). attention_backward must not be called from inside a
// parallel region (all callers would share slice 0). Forward takes a scratch pointer for symmetry with
// the CUDA version but does not use it on the CPU (pass nullptr or the same buffer).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "engine/common.h"
#include "layers/fixed_sum.h"
#include "layers/parallel.h"
#include "layers/vmath.h"
#include "layers/matmul.h"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace icl {

namespace attention_detail {
using par::use_threads;
}  // namespace attention_detail

constexpr int ATT_BLOCK = 64;  // rows per causal block of the T×T products

inline int attention_max_threads() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

// Elements of scratch attention_backward needs: one T×T slice per thread (at most one per (b,h) pair).
inline size_t attention_scratch_size(int B, int T, int C, int NH, int nthreads = attention_max_threads()) {
    (void)C;
    const int slices = std::max(1, std::min(nthreads, B * NH));
    return (size_t)slices * T * T;
}

template <typename real>
void attention_forward(real* out,        // (B,T,C)
                       real* att,        // (B,NH,T,T)  saved for backward: softmax probabilities, 0 above diagonal
                       std::remove_reference_t<real>* scratch,  // = real*; unused on the CPU (nullptr is fine:
                                                                 // the spelling keeps real deduced from the others)
                       const real* qkv,  // (B,T,3C)    [q | k | v]
                       int B, int T, int C, int NH,
                       const int* kstart = nullptr) {  // (B) first key of each sequence, or null: 0 (plain causal)
    (void)scratch;
    ICL_ASSERT(NH > 0 && C % NH == 0);
    const int hs = C / NH, C3 = 3 * C;
    const real scale = real(1) / std::sqrt(real(hs));
#pragma omp parallel for schedule(static) if (attention_detail::use_threads((double)B * NH * T * T * hs))
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const real* q = qkv + (size_t)b * T * C3 + h * hs;  // (T,hs), row stride 3C
        const real* k = q + C;                              // (T,hs), row stride 3C
        const real* v = q + 2 * C;                          // (T,hs), row stride 3C
        real* a = att + (size_t)bh * T * T;                 // (T,T)
        real* o = out + (size_t)b * T * C + h * hs;         // (T,hs), row stride C
        for (int i0 = 0; i0 < T; i0 += ATT_BLOCK) {
            const int i1 = std::min(T, i0 + ATT_BLOCK), ib = i1 - i0;
            // preatt[i0:i1, 0:i1] = scale · q[i0:i1] @ k[0:i1]ᵀ
            gemm<real>(false, true, ib, i1, hs, scale, q + (size_t)i0 * C3, C3, k, C3, real(0), a + (size_t)i0 * T, T);
            // causal, numerically stable softmax of each row over lo <= j <= i (lo = 0 without a key start)
            for (int i = i0; i < i1; i++) {
                real* row = a + (size_t)i * T;  // (T)
                const int lo = !kstart ? 0 : i < kstart[b] ? i : kstart[b];
                real maxv = row[lo];
#pragma omp simd reduction(max : maxv)
                for (int j = lo; j <= i; j++) maxv = std::max(maxv, row[j]);
                const real sum = vmath::exp_shifted_sum(row + lo, i + 1 - lo, maxv);  // row[j] = exp(row[j] - maxv)
                const real inv = real(1) / sum;
#pragma omp simd
                for (int j = lo; j <= i; j++) row[j] *= inv;
                std::fill(row, row + lo, real(0));
                std::fill(row + i + 1, row + T, real(0));
            }
            // out[i0:i1] = att[i0:i1, 0:i1] @ v[0:i1]      (att is 0 beyond the diagonal)
            gemm<real>(false, false, ib, hs, i1, real(1), a + (size_t)i0 * T, T, v, C3, real(0), o + (size_t)i0 * C, C);
        }
    }
}

// Backward of attention_forward. ACCUMULATES into dqkv. scratch: attention_scratch_size(B,T,C,NH) elements.
template <typename real>
void attention_backward(real* dqkv,        // (B,T,3C)
                        real* scratch,     // (nthreads,T,T)  see attention_scratch_size
                        const real* dout,  // (B,T,C)
                        const real* qkv,   // (B,T,3C)
                        const real* att,   // (B,NH,T,T)
                        int B, int T, int C, int NH) {
    ICL_ASSERT(NH > 0 && C % NH == 0);
    const int hs = C / NH, C3 = 3 * C;
    const real scale = real(1) / std::sqrt(real(hs));
    const int nthreads = std::max(1, std::min(attention_max_threads(), B * NH));
#pragma omp parallel num_threads(nthreads) if (attention_detail::use_threads((double)B * NH * T * T * hs))
    {
#ifdef _OPENMP
        real* datt = scratch + (size_t)omp_get_thread_num() * T * T;  // (T,T) this thread's slice
#else
        real* datt = scratch;
#endif
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            const real* q = qkv + (size_t)b * T * C3 + h * hs;  // (T,hs), row stride 3C
            const real* k = q + C;
            const real* v = q + 2 * C;
            real* dq = dqkv + (size_t)b * T * C3 + h * hs;      // (T,hs), row stride 3C
            real* dk = dq + C;
            real* dv = dq + 2 * C;
            const real* a = att + (size_t)bh * T * T;           // (T,T)
            const real* dO = dout + (size_t)b * T * C + h * hs; // (T,hs), row stride C

            for (int i0 = 0; i0 < T; i0 += ATT_BLOCK) {
                const int i1 = std::min(T, i0 + ATT_BLOCK), ib = i1 - i0;
                // out = att @ v   =>   datt[i0:i1, 0:i1] = dout[i0:i1] @ v[0:i1]ᵀ
                gemm<real>(false, true, ib, i1, hs, real(1), dO + (size_t)i0 * C, C, v, C3, real(0),
                           datt + (size_t)i0 * T, T);
                // out = att @ v   =>   dv[j0:j1] += att[j0:T, j0:j1]ᵀ @ dout[j0:T]   (att[i,j] = 0 for i < j);
                // the key block [j0,j1) is the same range as the query block [i0,i1)
                const int j0 = i0, jb = ib;
                gemm<real>(true, false, jb, hs, T - j0, real(1), a + (size_t)j0 * T + j0, T, dO + (size_t)j0 * C, C,
                           real(1), dv + (size_t)j0 * C3, C3);
                // att[i,j] = exp(preatt[i,j] - max) / sum   =>   dpreatt[i,j] = att[i,j] · (datt[i,j] − Σ_k att[i,k]·datt[i,k])
                // (in place; zeroed for i < j < i1 so the block products below can read whole blocks)
                for (int i = i0; i < i1; i++) {
                    const real* arow = a + (size_t)i * T;  // (T)
                    real* drow = datt + (size_t)i * T;     // (T)
                    const real dot = fixed_sum<real>((size_t)i + 1, [&](size_t j) { return arow[j] * drow[j]; });
#pragma omp simd
                    for (int j = 0; j <= i; j++) drow[j] = arow[j] * (drow[j] - dot);
                    for (int j = i + 1; j < i1; j++) drow[j] = real(0);
                }
                // preatt = scale · q @ kᵀ   =>   dq[i0:i1] += scale · dpreatt[i0:i1, 0:i1] @ k[0:i1]
                gemm<real>(false, false, ib, hs, i1, scale, datt + (size_t)i0 * T, T, k, C3, real(1),
                           dq + (size_t)i0 * C3, C3);
            }
            // preatt = scale · q @ kᵀ   =>   dk[j0:j1] += scale · dpreatt[j0:T, j0:j1]ᵀ @ q[j0:T]
            // (needs the dpreatt rows of every later block, hence a second pass)
            for (int j0 = 0; j0 < T; j0 += ATT_BLOCK) {
                const int j1 = std::min(T, j0 + ATT_BLOCK), jb = j1 - j0;
                gemm<real>(true, false, jb, hs, T - j0, scale, datt + (size_t)j0 * T + j0, T, q + (size_t)j0 * C3, C3,
                           real(1), dk + (size_t)j0 * C3, C3);
            }
        }
    }
}

}  // namespace icl
