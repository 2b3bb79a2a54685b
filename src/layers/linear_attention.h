// linear_attention.h — the linear attention of ICLCA's Theorem 4.1 (spec/iclca.md §2.2): the kernel attention
// of kernel_attention.h with φ = I, no denominator (D = 1), no RoPE and NO mask — every token reads every token:
//
//   qkv (B,T,3C) holds [q | k | v] (C = NH heads × hs channels, as in attention.h). Per (b, h):
//     S      = b_KV[h] + Σ_{j<T} k_j v_jᵀ              (hs,hs)  one state for the whole sequence
//     out_t  = Sᵀ q_t,  i.e. out_t[e] = Σ_x q_t[x] S[x][e]   (hs)  → out[b, t, h·hs : h·hs+hs]
//
// Theorem 4.1: running [X'; X] (prompt X' of M rows, then the input X) equals running X alone with the bias
// b'_KV = b_KV + Σ_{j<M} k'_j v'_jᵀ (= W_Kᵀ X'ᵀ X' W_V for k = X W_K, v = X W_V) at the rows of X, for ONE layer:
// the prompt rows' own outputs depend on X (no mask), so a second layer would need them — the theorem does not
// extend to depth (the test shows both). linear_attention_fold (models/iclca/iclca_convert.h) computes b'_KV.
//
// A teaching op for the theorem, written plainly in double loops (O(T·hs²) per head, sums in double). The kernel LM
// runs it as a model option (KernelLMConfig::attn = "linear", `iclca e1 --attention linear`; models/block.h, through
// op::linear_attention_* in layers/dispatch.h); CPU only — no CUDA kernel, and the model refuses the GPU.
// GRADIENT CONVENTION (whole engine): backward ACCUMULATES (+=) into dqkv and dbkv.
#pragma once
#include <cstddef>
#include <vector>

namespace icl {

// S (hs,hs) = b_KV[h] + Σ_j k_j v_jᵀ of sequence b, head h
template <typename real>
void linear_attention_state(std::vector<double>& S, const real* qkv, const real* bkv, int b, int h, int T, int C, int NH) {
    const int hs = C / NH;
    S.assign((size_t)hs * hs, 0.0);
    if (bkv)
        for (size_t i = 0; i < S.size(); i++) S[i] = (double)bkv[(size_t)h * hs * hs + i];
    for (int j = 0; j < T; j++) {
        const real* k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;  // (hs)
        const real* v = k + C;                                           // (hs)
        for (int x = 0; x < hs; x++)
            for (int e = 0; e < hs; e++) S[(size_t)x * hs + e] += (double)k[x] * (double)v[e];
    }
}

template <typename real>
void linear_attention_forward(real* out,        // (B,T,C)   SET
                              const real* qkv,  // (B,T,3C)  [q | k | v]
                              const real* bkv,  // (NH,hs,hs) or nullptr (= zero)
                              int B, int T, int C, int NH) {
    const int hs = C / NH;
    std::vector<double> S;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            linear_attention_state(S, qkv, bkv, b, h, T, C, NH);  // S = b_KV + Σ_j k_j v_jᵀ
            for (int t = 0; t < T; t++) {
                const real* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                real* o = out + ((size_t)b * T + t) * C + h * hs;
                for (int e = 0; e < hs; e++) {
                    double acc = 0;  // out_t[e] = Σ_x q_t[x] S[x][e]
                    for (int x = 0; x < hs; x++) acc += (double)q[x] * S[(size_t)x * hs + e];
                    o[e] = (real)acc;
                }
            }
        }
}

template <typename real>
void linear_attention_backward(real* dqkv,        // (B,T,3C)   ACCUMULATED
                               real* dbkv,        // (NH,hs,hs) ACCUMULATED, or nullptr
                               const real* dout,  // (B,T,C)
                               const real* qkv, const real* bkv, int B, int T, int C, int NH) {
    const int hs = C / NH;
    std::vector<double> S, dS((size_t)hs * hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            linear_attention_state(S, qkv, bkv, b, h, T, C, NH);
            std::fill(dS.begin(), dS.end(), 0.0);
            // out_t[e] = Σ_x q_t[x] S[x][e]  →  dq_t[x] += Σ_e S[x][e] dout_t[e],  dS[x][e] += q_t[x] dout_t[e]
            for (int t = 0; t < T; t++) {
                const real* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                const real* g = dout + ((size_t)b * T + t) * C + h * hs;
                real* dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
                for (int x = 0; x < hs; x++) {
                    double acc = 0;
                    for (int e = 0; e < hs; e++) {
                        acc += S[(size_t)x * hs + e] * (double)g[e];
                        dS[(size_t)x * hs + e] += (double)q[x] * (double)g[e];
                    }
                    dq[x] += (real)acc;
                }
            }
            // S = b_KV + Σ_j k_j v_jᵀ  →  dk_j[x] += Σ_e dS[x][e] v_j[e],  dv_j[e] += Σ_x k_j[x] dS[x][e],  db_KV += dS
            for (int j = 0; j < T; j++) {
                const real* k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                const real* v = k + C;
                real* dk = dqkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                real* dv = dk + C;
                for (int x = 0; x < hs; x++) {
                    double acc = 0;
                    for (int e = 0; e < hs; e++) acc += dS[(size_t)x * hs + e] * (double)v[e];
                    dk[x] += (real)acc;
                }
                for (int e = 0; e < hs; e++) {
                    double acc = 0;
                    for (int x = 0; x < hs; x++) acc += (double)k[x] * dS[(size_t)x * hs + e];
                    dv[e] += (real)acc;
                }
            }
            if (dbkv)
                for (size_t i = 0; i < dS.size(); i++) dbkv[(size_t)h * hs * hs + i] += (real)dS[i];
        }
}

}  // namespace icl
