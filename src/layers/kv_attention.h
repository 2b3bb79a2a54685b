// kv_attention.h — one query row of causal multi-head softmax attention against a KV cache (token-by-token
// decoding). Forward only: decoding never differentiates.
//
//   cache (n,3C) holds the [q | k | v] rows of positions 0..n-1 of one sequence, the CURRENT token last (its
//   row is the query), laid out exactly like one sequence of attention_forward's qkv (B,T,3C). For each head h:
//     s_j   = q · k_j / sqrt(hs)                 j = 0..n-1
//     a_j   = softmax_j(s)                       (the current row of attention_forward's att)
//     out_h = Σ_j a_j v_j                        → out[h·hs : h·hs+hs]
// So row n-1 of attention_forward(qkv = cache, T = n) equals kv_attention_step(cache, n) up to rounding
// (the parallel form sums through gemm() in its own order; fp64 agreement ~1e-15 relative).
//
// Cost: 4·n·C FLOPs per token. att (NH,n) is scratch (the probabilities, for inspection).
#pragma once
#include <algorithm>
#include <cmath>

#include "engine/common.h"

namespace icl {

template <typename real>
void kv_attention_step(real* out,          // (C)      attention output of the current (last) row, heads concatenated
                       real* att,          // (NH,n)   scratch: the current row's probabilities per head
                       const real* cache,  // (n,3C)   [q | k | v] rows of positions 0..n-1, current token last
                       int n, int C, int NH) {
    ICL_ASSERT(NH > 0 && C % NH == 0 && n > 0);
    const int hs = C / NH, C3 = 3 * C;
    const real scale = real(1) / std::sqrt(real(hs));
    const real* q = cache + (size_t)(n - 1) * C3;  // (C) the current row's query
    for (int h = 0; h < NH; h++) {
        real* a = att + (size_t)h * n;             // (n)
        const real* qh = q + h * hs;               // (hs)
        real maxv = -INFINITY;
        for (int j = 0; j < n; j++) {
            const real* k = cache + (size_t)j * C3 + C + h * hs;  // (hs)
            real s = 0;
            for (int i = 0; i < hs; i++) s += qh[i] * k[i];
            a[j] = scale * s;
            maxv = std::max(maxv, a[j]);
        }
        real sum = 0;
        for (int j = 0; j < n; j++) { a[j] = std::exp(a[j] - maxv); sum += a[j]; }
        const real inv = real(1) / sum;
        real* o = out + h * hs;                    // (hs)
        std::fill(o, o + hs, real(0));
        for (int j = 0; j < n; j++) {
            a[j] *= inv;
            const real* v = cache + (size_t)j * C3 + 2 * C + h * hs;  // (hs)
            for (int i = 0; i < hs; i++) o[i] += a[j] * v[i];
        }
    }
}

}  // namespace icl
