// embedding.h — the input layer: token + position embeddings (GPT-2's "encoder"), and the position
// embedding added to real-valued input vectors (regression tasks, kernel-attention prompts).
//
//   encoder_forward:       out[b,t,:] = wte[inp[b,t], :] + wpe[pos[b,t], :]
//   vector_embed_forward:  out[b,t,:] = [x[b,t,0:D], 0, ..., 0] + wpe[pos[b,t], :]      (x zero-padded to C)
//
// Positions: pos (B,T) holds each token's absolute position (prefix tokens, packed or shifted sequences);
// pos == nullptr means the usual 0..T-1 in every row. Out-of-range token ids or positions are a bug in the
// caller (data generators validate their output), so they trip ICL_ASSERT rather than throwing.
//
// Sizes: V = vocabulary (rows of wte), maxT = rows of wpe. These two are not in llm.c's signature; they are
// here only so that the range checks above are possible. They default to "unknown" (INT_MAX: only the
// lower bound 0 is checked); pass them whenever you have them.
//
// GRADIENT CONVENTION (whole engine): every backward ACCUMULATES (+=) into every gradient it writes, parameter
// and activation gradients alike; callers zero the gradient buffers once per step (a few can SET instead, where
// the caller says so: GradWrite, engine/common.h).
//
// Threads: forward splits the B*T rows. Backward is a scatter-add (many rows may hit the same wte/wpe row), so
// instead of atomics it splits the CHANNELS: each thread owns the columns [c0,c1) of dwte and dwpe and walks
// all rows n = 0..N-1 in order. Every gradient element is therefore summed in the same order whatever the
// thread count: bit-identical results for 1, 2 or 64 threads.
#pragma once
#include <climits>
#include <cstddef>

#include "engine/common.h"
#include "layers/parallel.h"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace icl {

namespace embedding_detail {
using par::use_threads;
using par::thread_columns;
}  // namespace embedding_detail

// out (B,T,C) = wte[inp] + wpe[pos]
template <typename real>
void encoder_forward(real* out,         // (B,T,C)
                     const int* inp,    // (B,T) token ids in [0,V)
                     const int* pos,    // (B,T) absolute positions in [0,maxT), or nullptr = 0..T-1
                     const real* wte,   // (V,C)
                     const real* wpe,   // (maxT,C)
                     int B, int T, int C, int V = INT_MAX, int maxT = INT_MAX) {
    const int N = B * T;
    ICL_ASSERT(pos != nullptr || T <= maxT);
#pragma omp parallel for schedule(static) if (embedding_detail::use_threads((double)N * C))
    for (int n = 0; n < N; n++) {
        const int tok = inp[n];
        const int p = pos ? pos[n] : n % T;
        ICL_ASSERT(tok >= 0 && tok < V);
        ICL_ASSERT(p >= 0 && p < maxT);
        real* out_n = out + (size_t)n * C;              // (C)
        const real* wte_t = wte + (size_t)tok * C;      // (C)
        const real* wpe_p = wpe + (size_t)p * C;        // (C)
#pragma omp simd
        for (int c = 0; c < C; c++) out_n[c] = wte_t[c] + wpe_p[c];
    }
}

// Backward of encoder_forward. ACCUMULATES into dwte and dwpe (either may be nullptr, e.g. a frozen table).
template <typename real>
void encoder_backward(real* dwte,        // (V,C)
                      real* dwpe,        // (maxT,C)
                      const real* dout,  // (B,T,C)
                      const int* inp,    // (B,T)
                      const int* pos,    // (B,T) or nullptr = 0..T-1
                      int B, int T, int C, int V = INT_MAX, int maxT = INT_MAX) {
    const int N = B * T;
    ICL_ASSERT(pos != nullptr || T <= maxT);
#pragma omp parallel if (embedding_detail::use_threads((double)N * C))
    {
        int c0, c1;
        embedding_detail::thread_columns(C, c0, c1);
        for (int n = 0; n < N; n++) {  // in order: every element of dwte/dwpe is summed over n = 0..N-1
            const int tok = inp[n];
            const int p = pos ? pos[n] : n % T;
            ICL_ASSERT(tok >= 0 && tok < V);
            ICL_ASSERT(p >= 0 && p < maxT);
            const real* dout_n = dout + (size_t)n * C;  // (C)
            // out_n[c] = wte_t[c] + wpe_p[c]   =>   dwte[tok,c] += dout_n[c],  dwpe[p,c] += dout_n[c]
            if (dwte) {
                real* dwte_t = dwte + (size_t)tok * C;  // (C)
#pragma omp simd
                for (int c = c0; c < c1; c++) dwte_t[c] += dout_n[c];
            }
            if (dwpe) {
                real* dwpe_p = dwpe + (size_t)p * C;    // (C)
#pragma omp simd
                for (int c = c0; c < c1; c++) dwpe_p[c] += dout_n[c];
            }
        }
    }
}

// out (B,T,C) = [x, 0] + wpe[pos]: real input vectors of width D <= C occupy channels 0..D-1.
template <typename real>
void vector_embed_forward(real* out,        // (B,T,C)
                          const real* inp,  // (B,T,D) real vectors
                          const int* pos,   // (B,T) absolute positions in [0,maxT), or nullptr = 0..T-1
                          const real* wpe,  // (maxT,C)
                          int B, int T, int C, int D, int maxT = INT_MAX) {
    const int N = B * T;
    ICL_ASSERT(D >= 0 && D <= C);
    ICL_ASSERT(pos != nullptr || T <= maxT);
#pragma omp parallel for schedule(static) if (embedding_detail::use_threads((double)N * C))
    for (int n = 0; n < N; n++) {
        const int p = pos ? pos[n] : n % T;
        ICL_ASSERT(p >= 0 && p < maxT);
        real* out_n = out + (size_t)n * C;          // (C)
        const real* x_n = inp + (size_t)n * D;      // (D)
        const real* wpe_p = wpe + (size_t)p * C;    // (C)
#pragma omp simd
        for (int c = 0; c < D; c++) out_n[c] = x_n[c] + wpe_p[c];
#pragma omp simd
        for (int c = D; c < C; c++) out_n[c] = wpe_p[c];
    }
}

// Backward of vector_embed_forward: ACCUMULATES into dwpe only (the input vectors are data, no gradient).
template <typename real>
void vector_embed_backward(real* dwpe,        // (maxT,C)
                           const real* dout,  // (B,T,C)
                           const int* pos,    // (B,T) or nullptr = 0..T-1
                           int B, int T, int C, int maxT = INT_MAX) {
    const int N = B * T;
    ICL_ASSERT(pos != nullptr || T <= maxT);
#pragma omp parallel if (embedding_detail::use_threads((double)N * C))
    {
        int c0, c1;
        embedding_detail::thread_columns(C, c0, c1);
        for (int n = 0; n < N; n++) {
            const int p = pos ? pos[n] : n % T;
            ICL_ASSERT(p >= 0 && p < maxT);
            const real* dout_n = dout + (size_t)n * C;  // (C)
            real* dwpe_p = dwpe + (size_t)p * C;        // (C)
            // out_n[c] = x_n[c] + wpe_p[c]   =>   dwpe[p,c] += dout_n[c]
#pragma omp simd
            for (int c = c0; c < c1; c++) dwpe_p[c] += dout_n[c];
        }
    }
}

}  // namespace icl
