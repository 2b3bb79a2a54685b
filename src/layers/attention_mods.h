// attention_mods.h — the attention modifications of the representation-learning lens (spec/duallens.md §4),
// as options around the engine's causal multi-head softmax attention (layers/attention.h), on the same fused
// qkv (B,T,3C) layout. Per (b, h), with P = causal softmax(q kᵀ/√hs) (P[t,i] = 0 for i > t):
//
//   regularized (α)   O_t = Σ_{i<=t} P[t,i] v_i − α v_t                       (spec §4.1: V(A − αI); the query is
//                                                                               one of the tokens, so I is its own v)
//   negative (β, N)   O_t = Σ_{i<=t} P[t,i] ṽ_i(t),   ṽ_i(t) = v_i − β/|N_t(i)| Σ_{j∈N_t(i)} v_j      (spec §4.3)
//                     N_t(i) ⊂ {0..t} \ {i}: only tokens the query t sees (A8: never a future token), so the
//                     neighbour set depends on the query. |N_t(i)| = 0 (t = 0) leaves ṽ = v. Rules:
//                       all      every other visible token, |N_t(i)| = t
//                       lowsim   the min(k, t) visible tokens j with the LOWEST similarity s(i,j) to token i:
//                                  key    s = k_i·k_j (this head's keys: the dual model's inputs)
//                                  score  s = q_i·k_j (token i's own attention score for j)
//                                  input  s = x_i·x_j (rows of sim_src (B,T,Cs), e.g. the raw tokens / LN output;
//                                         shared by the heads)
//                       random   a uniformly random min(k, t)-subset of the visible tokens: the k lowest hash
//                                priorities r(seed, b, h, i, j); `seed` is the caller's per-forward draw
//                     Ties go to the smaller j. The selection is a constant of the forward (no gradient through it).
//                     Both may be on at once (the slide's negative model carries the −αI too; A7: α = 0 default).
//   augmented (g1/g2) parallel adapters on the value / key projections (spec §4.2), qkv_adapter_* below:
//                       k_i += c·B_K ReLU(A_K x_i)  (g2),   v_i += c·B_V ReLU(A_V x_i)  (g1);  queries untouched.
//                     They change qkv BEFORE the attention; the attention itself is then the plain one.
//
// With α = 0 and β = 0 attention_mod_forward/backward ARE attention_forward/backward (called, not re-implemented):
// the reduction to plain attention is bit-exact by construction, and the corrections below are added only for
// a non-zero α or β. So is an adapter with c = 0 (not called) — and with B = 0 (adds exact zeros).
//
// Backward (spec §4.4), by linearity on top of attention_backward's base gradients:
//   regularized   dv_t −= α dO_t
//   negative      the extra term O_t −= β Σ_i P[t,i] m_i(t), m_i(t) = mean_{j∈N_t(i)} v_j, gives
//                   dP[t,i] += −β dO_t·m_i(t)    → dS = P ⊙ (dP − rowsum(P ⊙ dP)) → dq += dS k/√hs, dk += dSᵀ q/√hs
//                   dv_j    += −β P[t,i]/|N_t(i)| dO_t   for j ∈ N_t(i)
//                 the neighbour sets are recomputed in backward (deterministic; nothing T×T×k is stored).
// GRADIENT CONVENTION (whole engine): every backward ACCUMULATES (+=) into every gradient it writes (here always;
// a few other ops can SET: GradWrite, engine/common.h).
//
// Cost: regularized O(T·hs); negative/all O(T²·hs); negative/lowsim and random O(T²·(k + hs_sim)) with the
// sets rebuilt per key token i (per (b,h); one thread per (b,h) pair like attention.h). Every output element
// is written by one thread in a fixed order: bit-identical for a fixed thread count.
//
// Device: this file is the CPU (OpenMP) reference; cuda/attention_mods.cu has the CUDA kernels of the same
// functions (op::attention_mod_* / op::qkv_adapter_* in dispatch.h pick one). The neighbour choice (random hash,
// k-lowest with ties to the smaller j, double-precision similarities) is layers/attention_mods_shared.h, shared by both,
// so the two devices pick the same neighbours for the same seed.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/common.h"
#include "layers/attention.h"
#include "layers/matmul.h"
#include "layers/attention_mods_shared.h"
#include "layers/parallel.h"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace icl {

// NegRule, NegSim, AttnMods: layers/attention_mods_shared.h

namespace attnmod_detail {

// mix64, random_priority, KLowest, dot_double: layers/attention_mods_shared.h (shared with the CUDA kernels)

// One (b,h) slice's views.
template <typename real>
struct Head {
    const real *q, *k, *v;   // (T,hs), row stride 3C
    const real* x;           // (T,Cs) sim_src rows of batch b, or nullptr
    int T, hs, C3, Cs;
};

// s(i,j) for the lowsim/random rules.
template <typename real>
inline double neighbour_score(const Head<real>& H, const AttnMods& m, uint64_t seed, int b, int h, int i, int j) {
    if (m.rule == NegRule::random) return random_priority(seed, b, h, i, j);
    const real *a, *c;
    int n;
    switch (m.sim) {
        case NegSim::key: a = H.k + (size_t)i * H.C3; c = H.k + (size_t)j * H.C3; n = H.hs; break;
        case NegSim::score: a = H.q + (size_t)i * H.C3; c = H.k + (size_t)j * H.C3; n = H.hs; break;
        default: a = H.x + (size_t)i * H.Cs; c = H.x + (size_t)j * H.Cs; n = H.Cs; break;
    }
    return dot_double(a, c, n);
}

// Calls visit(t, i, set) for every query t >= i and key i with a non-empty k-set N_t(i) (lowsim / random).
template <typename real, typename Visit>
void for_each_kset(const Head<real>& H, const AttnMods& m, uint64_t seed, int b, int h, Visit&& visit) {
    KLowest set;
    const int kk = std::min(m.k, KLOWEST_MAX);
    std::vector<double> score(H.T);
    for (int i = 0; i < H.T; i++) {
        set.reset(kk);
        for (int j = 0; j < H.T; j++) score[j] = j == i ? 0.0 : neighbour_score(H, m, seed, b, h, i, j);
        for (int j = 0; j < i; j++) set.insert(score[j], j);  // the visible tokens before i
        for (int t = i; t < H.T; t++) {
            if (t > i) set.insert(score[t], t);               // query t also sees token t
            if (set.n > 0) visit(t, i, set);
        }
    }
}

}  // namespace attnmod_detail

// Forward. out, att: as attention_forward (att = P, the softmax probabilities). sim_src: only for the lowsim rule
// with sim = input (else nullptr). seed: the random rule's draw for this call (ignored otherwise).
template <typename real>
void attention_mod_forward(real* out,        // (B,T,C)
                           real* att,        // (B,NH,T,T)  saved for backward: P, 0 above the diagonal
                           std::remove_reference_t<real>* scratch,  // as attention_forward (unused on the CPU)
                           const real* qkv,  // (B,T,3C)    [q | k | v]
                           const std::remove_reference_t<real>* sim_src,  // (B,T,Cs) or nullptr
                           const AttnMods& m, uint64_t seed, int B, int T, int C, int NH, int Cs) {
    using namespace attnmod_detail;
    // O = P V  (the plain layer, unchanged)
    attention_forward(out, att, scratch, qkv, B, T, C, NH);
    if (!m.attention_active()) return;
    ICL_ASSERT_MSG(!m.needs_sim_src() || (sim_src && Cs > 0), "attention_mod_forward: the input similarity needs sim_src");
    ICL_ASSERT_MSG(m.k >= 1 && m.k <= 64, "attention_mod_forward: k must be in [1, 64]");
    const int hs = C / NH, C3 = 3 * C;
    const real alpha = (real)m.alpha, beta = (real)m.beta;
#pragma omp parallel for schedule(static) if (par::use_threads((double)B * NH * T * T * hs))
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const Head<real> H{qkv + (size_t)b * T * C3 + h * hs, qkv + (size_t)b * T * C3 + C + h * hs,
                           qkv + (size_t)b * T * C3 + 2 * C + h * hs, sim_src ? sim_src + (size_t)b * T * Cs : nullptr, T, hs, C3, Cs};
        const real* P = att + (size_t)bh * T * T;        // (T,T)
        real* o = out + (size_t)b * T * C + h * hs;       // (T,hs), row stride C
        // O_t −= α v_t
        if (alpha != real(0))
            for (int t = 0; t < T; t++)
                for (int e = 0; e < hs; e++) o[(size_t)t * C + e] -= alpha * H.v[(size_t)t * C3 + e];
        if (beta == real(0)) continue;
        if (m.rule == NegRule::all) {
            // O_t −= β/t Σ_{i<=t} P[t,i] (S_t − v_i),  S_t = Σ_{j<=t} v_j   (t >= 1)
            std::vector<real> S(hs, real(0)), pv(hs);
            for (int e = 0; e < hs; e++) S[e] = H.v[e];
            for (int t = 1; t < T; t++) {
                for (int e = 0; e < hs; e++) S[e] += H.v[(size_t)t * C3 + e];
                const real* Pt = P + (size_t)t * T;
                real a = 0;
                std::fill(pv.begin(), pv.end(), real(0));
                for (int i = 0; i <= t; i++) {
                    a += Pt[i];
                    for (int e = 0; e < hs; e++) pv[e] += Pt[i] * H.v[(size_t)i * C3 + e];
                }
                const real f = beta / real(t);
                for (int e = 0; e < hs; e++) o[(size_t)t * C + e] -= f * (a * S[e] - pv[e]);
            }
        } else {
            // O_t −= β P[t,i]/|N| Σ_{j∈N_t(i)} v_j   for every (t, i)
            for_each_kset(H, m, seed, b, h, [&](int t, int i, const KLowest& set) {
                const real f = beta * P[(size_t)t * T + i] / real(set.n);
                real* ot = o + (size_t)t * C;
                for (int r = 0; r < set.n; r++) {
                    const real* vj = H.v + (size_t)set.j[r] * C3;
                    for (int e = 0; e < hs; e++) ot[e] -= f * vj[e];
                }
            });
        }
    }
}

// Backward of attention_mod_forward. ACCUMULATES into dqkv. scratch: attention_scratch_size(B,T,C,NH) elements
// (the same buffer attention_backward takes). Must not be called from inside a parallel region.
template <typename real>
void attention_mod_backward(real* dqkv,        // (B,T,3C)
                            real* scratch,     // (nthreads,T,T)  see attention_scratch_size
                            const real* dout,  // (B,T,C)
                            const real* qkv,   // (B,T,3C)
                            const real* att,   // (B,NH,T,T)
                            const std::remove_reference_t<real>* sim_src,  // (B,T,Cs) or nullptr (as in forward)
                            const AttnMods& m, uint64_t seed, int B, int T, int C, int NH, int Cs) {
    using namespace attnmod_detail;
    // O = P V: the plain layer's gradients
    attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    if (!m.attention_active()) return;
    const int hs = C / NH, C3 = 3 * C;
    const real alpha = (real)m.alpha, beta = (real)m.beta;
    const real scale = real(1) / std::sqrt(real(hs));
    const int nthreads = std::max(1, std::min(attention_max_threads(), B * NH));
#pragma omp parallel num_threads(nthreads) if (par::use_threads((double)B * NH * T * T * hs))
    {
#ifdef _OPENMP
        real* dP = scratch + (size_t)omp_get_thread_num() * T * T;  // (T,T) this thread's slice
#else
        real* dP = scratch;
#endif
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            const Head<real> H{qkv + (size_t)b * T * C3 + h * hs, qkv + (size_t)b * T * C3 + C + h * hs,
                               qkv + (size_t)b * T * C3 + 2 * C + h * hs, sim_src ? sim_src + (size_t)b * T * Cs : nullptr, T, hs, C3, Cs};
            const real* P = att + (size_t)bh * T * T;          // (T,T)
            const real* dO = dout + (size_t)b * T * C + h * hs; // (T,hs), row stride C
            real* dq = dqkv + (size_t)b * T * C3 + h * hs;      // (T,hs), row stride 3C
            real* dk = dq + C;
            real* dv = dq + 2 * C;
            // O_t −= α v_t   =>   dv_t −= α dO_t
            if (alpha != real(0))
                for (int t = 0; t < T; t++)
                    for (int e = 0; e < hs; e++) dv[(size_t)t * C3 + e] -= alpha * dO[(size_t)t * C + e];
            if (beta == real(0)) continue;
            std::fill(dP, dP + (size_t)T * T, real(0));
            if (m.rule == NegRule::all) {
                // O_t −= β/t (a_t S_t − pv_t),  a_t = Σ_{i<=t} P[t,i],  pv_t = Σ_{i<=t} P[t,i] v_i,  S_t = Σ_{j<=t} v_j
                //   => dP[t,i] = −β/t (dO_t·S_t − dO_t·v_i);  dv_i += β/t P[t,i] dO_t;  dv_j −= β/t a_t dO_t (j <= t)
                std::vector<real> S(hs), G(hs, real(0));  // G = Σ_{t>=j} β/t a_t dO_t, built from the end
                for (int e = 0; e < hs; e++) S[e] = H.v[e];
                for (int t = 1; t < T; t++) {
                    for (int e = 0; e < hs; e++) S[e] += H.v[(size_t)t * C3 + e];
                    const real* Pt = P + (size_t)t * T;
                    const real* dOt = dO + (size_t)t * C;
                    const real f = beta / real(t);
                    real dS_ = 0;
                    for (int e = 0; e < hs; e++) dS_ += dOt[e] * S[e];
                    for (int i = 0; i <= t; i++) {
                        const real* vi = H.v + (size_t)i * C3;
                        real dv_ = 0;
                        for (int e = 0; e < hs; e++) dv_ += dOt[e] * vi[e];
                        dP[(size_t)t * T + i] = -f * (dS_ - dv_);
                        real* dvi = dv + (size_t)i * C3;
                        for (int e = 0; e < hs; e++) dvi[e] += f * Pt[i] * dOt[e];
                    }
                }
                for (int j = T - 1; j >= 0; j--) {
                    const int t = j;  // add query t = j's term, then every j' <= t gets it
                    if (t >= 1) {
                        const real* Pt = P + (size_t)t * T;
                        real a = 0;
                        for (int i = 0; i <= t; i++) a += Pt[i];
                        const real f = beta / real(t);
                        for (int e = 0; e < hs; e++) G[e] += f * a * dO[(size_t)t * C + e];
                    }
                    for (int e = 0; e < hs; e++) dv[(size_t)j * C3 + e] -= G[e];
                }
            } else {
                // O_t −= β P[t,i] m_i(t),  m_i(t) = mean_{j∈N_t(i)} v_j
                //   => dP[t,i] = −β dO_t·m_i(t);  dv_j −= β P[t,i]/|N| dO_t  (j ∈ N_t(i))
                for_each_kset(H, m, seed, b, h, [&](int t, int i, const KLowest& set) {
                    const real* dOt = dO + (size_t)t * C;
                    const real inv = real(1) / real(set.n);
                    const real f = beta * P[(size_t)t * T + i] * inv;
                    real d = 0;
                    for (int r = 0; r < set.n; r++) {
                        const real* vj = H.v + (size_t)set.j[r] * C3;
                        real* dvj = dv + (size_t)set.j[r] * C3;
                        for (int e = 0; e < hs; e++) {
                            d += dOt[e] * vj[e];
                            dvj[e] -= f * dOt[e];
                        }
                    }
                    dP[(size_t)t * T + i] = -beta * d * inv;
                });
            }
            // P[t,:] = softmax(S[t,:])   =>   dS[t,i] = P[t,i] (dP[t,i] − Σ_l P[t,l] dP[t,l])   (in place)
            for (int t = 0; t < T; t++) {
                const real* Pt = P + (size_t)t * T;
                real* d = dP + (size_t)t * T;
                real dot = 0;
                for (int i = 0; i <= t; i++) dot += Pt[i] * d[i];
                for (int i = 0; i <= t; i++) d[i] = Pt[i] * (d[i] - dot);
            }
            // S = scale · q kᵀ   =>   dq += scale · dS k,   dk += scale · dSᵀ q
            gemm<real>(false, false, T, hs, T, scale, dP, T, H.k, C3, real(1), dq, C3);
            gemm<real>(true, false, T, hs, T, scale, dP, T, H.q, C3, real(1), dk, C3);
        }
    }
}

// ---- augmented: the parallel adapter g(Wx) = Wx + c·B ReLU(A x) on the key (slot 1) or value (slot 2) third ----

// qkv[:, slot·C : (slot+1)·C] += c · ReLU(inp·Aᵀ)·Bᵀ.  Saves z = inp·Aᵀ and u = ReLU(z).
template <typename real>
void qkv_adapter_forward(real* qkv,         // (N,3C)   the slot's third updated in place
                         real* z,           // (N,dh)   saved: inp·Aᵀ
                         real* u,           // (N,dh)   saved: ReLU(z)
                         const real* inp,   // (N,Cin)  what the qkv projection reads
                         const real* A,     // (dh,Cin)
                         const real* Bw,    // (C,dh)
                         double c, int slot, int N, int Cin, int C, int dh) {
    ICL_ASSERT(slot == 1 || slot == 2);
    // z = inp·Aᵀ
    gemm<real>(false, true, N, dh, Cin, real(1), inp, Cin, A, Cin, real(0), z, dh);
    // u = ReLU(z)
#pragma omp parallel for schedule(static) if (par::use_threads((double)N * dh))
    for (int64_t i = 0; i < (int64_t)N * dh; i++) u[i] = z[i] > real(0) ? z[i] : real(0);
    // qkv[:, slot] += c · u·Bᵀ
    gemm<real>(false, true, N, C, dh, (real)c, u, dh, Bw, dh, real(1), qkv + (size_t)slot * C, 3 * C);
}

// Backward of qkv_adapter_forward. ACCUMULATES into dinp (null: not wanted, e.g. the input is data), dA, dB. dz: the gradient of the pre-activation z; z is
// read by nothing else, so pass it ZEROED (the model's zeroed activation gradient): it is accumulated
// (dz += (c·dK B) ⊙ 1[z > 0]) and then read back for dA and dinp.
template <typename real>
void qkv_adapter_backward(real* dinp,        // (N,Cin) or null
                          real* dA,          // (dh,Cin)
                          real* dB,          // (C,dh)
                          real* dz,          // (N,dh)  zero on entry; dL/dz on return
                          const real* dqkv,  // (N,3C)  the slot's third is read
                          const real* inp,   // (N,Cin)
                          const real* z,     // (N,dh)
                          const real* u,     // (N,dh)
                          const real* A,     // (dh,Cin)
                          const real* Bw,    // (C,dh)
                          double c, int slot, int N, int Cin, int C, int dh) {
    ICL_ASSERT(slot == 1 || slot == 2);
    const real* dK = dqkv + (size_t)slot * C;  // (N,C), row stride 3C
    // qkv[:, slot] += c · u·Bᵀ   =>   dB += c · dKᵀ u,   du = c · dK B  (into dz)
    gemm<real>(true, false, C, dh, N, (real)c, dK, 3 * C, u, dh, real(1), dB, dh);
    gemm<real>(false, false, N, dh, C, (real)c, dK, 3 * C, Bw, dh, real(1), dz, dh);
    // u = ReLU(z)   =>   dz = du ⊙ 1[z > 0]
#pragma omp parallel for schedule(static) if (par::use_threads((double)N * dh))
    for (int64_t i = 0; i < (int64_t)N * dh; i++)
        if (!(z[i] > real(0))) dz[i] = real(0);
    // z = inp·Aᵀ   =>   dA += dzᵀ inp,   dinp += dz A
    gemm<real>(true, false, dh, Cin, N, real(1), dz, dh, inp, Cin, real(1), dA, Cin);
    if (dinp) gemm<real>(false, false, N, Cin, dh, real(1), dz, dh, A, Cin, real(1), dinp, Cin);
}

}  // namespace icl
