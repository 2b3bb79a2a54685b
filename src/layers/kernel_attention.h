// kernel_attention.h — causal multi-head kernel (linearized) attention with RoPE after φ and the two ICLCA
// bias terms (spec/iclca.md §1.2–1.7, §1.10), in two execution forms that agree:
//
//   qkv (B,T,3C) holds [q | k | v] (each C = NH heads × hs channels, as in attention.h). Per (b, h), with
//   m = hs feature channels (φ = elu+1 is elementwise), positions p_t = pos[b,t] (or t):
//     a_t = φ(q_t), c_t = φ(k_t)                         φ(x) = elu(x)+1 = x+1 (x>0), eˣ (x<=0)   (m)
//     â_t = R_{p_t} a_t,  ĉ_t = R_{p_t} c_t              RoPE AFTER φ, adjacent pairs (rope.h)     (m)
//     S_t = b_KV[h] + Σ_{j<=t} ĉ_j v_jᵀ                  (m,hs)   rotated numerator state
//     z_t = b_D[h]  + Σ_{j<=t} c_j                       (m)      UNROTATED denominator state
//     out_t = (â_tᵀ S_t) / (a_tᵀ z_t + eps)              (hs) → out[b, t, h·hs : h·hs+hs]
//   b_KV (NH,m,hs) and b_D (NH,m) may be nullptr (= zero: the model without bias parameters; 0 + x is
//   exact, so that model and a zero-bias model agree bit for bit — spec §6 invariant 8).
//
// Forms.
//   * kernel_attention_reference_forward/backward — the DEFINITION above written out one token at a time
//     (the first thing in this file; the tests compare the tuned forms with it).
//   * kernel_attention_forward/backward — the PARALLEL training form, chunked: the sequence is cut into
//     chunks of KA_CHUNK tokens; inside a chunk the causal part is a small masked (n×n) product, across
//     chunks a running state S (m×hs) carries the past. Cost per head O(T·(KA_CHUNK + m)·hs) = O(T·m·hs):
//     linear in T, never a T×T matrix. Forward: per (b,h), chunk by chunk, the chunk's φ/RoPE features and then
//     its products; backward: a forward and a reverse sweep over the chunks. Every product goes through one
//     register-tiled loop (mm_nn below, on the calling thread) that computes only the triangle it needs.
//   * kernel_attention_step — the RECURRENT streaming form: one token, explicit state (S, z) updated in
//     place. Started from S = b_KV, z = b_D it reproduces the parallel form (spec §6 invariants 5, 6).
//
// Saved for backward (all written by forward): a, c, â, ĉ as (B,NH,T,m) and den (B,NH,T); the layer
// output itself is read back by backward. ICLCA (src/models/iclca/iclca_convert.cpp) reads c, ĉ from these buffers.
//
// GRADIENT CONVENTION (whole engine): backward ACCUMULATES (+=) into dqkv, dbkv and dbd.
// Threads: one `omp parallel for` over the B·NH pairs; bias gradients are reduced afterwards over b in a
// fixed order, so results are bit-identical for any thread count.
// Scratch (both directions): kernel_attention_scratch_size(B,T,C,NH) elements — a RoPE (cos,sin) table per
// token, per-(b,h) bias-gradient partials, and one working slice per thread. Not re-entrant.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "engine/common.h"
#include "layers/fixed_sum.h"
#include "layers/vmath.h"
#include "layers/parallel.h"
#include "layers/rope.h"
#include "layers/tile_mm.h"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace icl {

// =====================================================================================================
// The definition, readable: what the chunked form below computes, one token at a time per (b, h), as the
// paper writes it (spec §1.6–1.7). O(T·m·hs) per head, double loops, no tiling. The tests check the tuned
// forward and backward against these two functions; read these first.

// φ(x) = elu(x) + 1 and its derivative through the φ value f: φ' = 1 (x > 0), eˣ = f (x <= 0).
template <typename real>
inline real kattn_phi(real x) { return x > real(0) ? x + real(1) : std::exp(x); }
template <typename real>
inline real kattn_dphi(real x, real f) { return x > real(0) ? real(1) : f; }

template <typename real>
void kernel_attention_reference_forward(real* out,        // (B,T,C)    SET
                                        const real* qkv,  // (B,T,3C)   [q | k | v]
                                        const int* pos,   // (B,T) or nullptr = 0..T-1
                                        const real* bkv,  // (NH,m,hs) or nullptr
                                        const real* bd,   // (NH,m) or nullptr
                                        int B, int T, int C, int NH, double eps) {
    const int hs = C / NH, m = hs;
    std::vector<real> S((size_t)m * hs), z(m), a(m), c(m), ah(m), ch(m), tab(m);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            // S_{-1} = b_KV[h], z_{-1} = b_D[h]
            for (size_t i = 0; i < S.size(); i++) S[i] = bkv ? bkv[(size_t)h * m * hs + i] : real(0);
            for (int i = 0; i < m; i++) z[i] = bd ? bd[(size_t)h * m + i] : real(0);
            for (int t = 0; t < T; t++) {
                const real* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                const real* k = q + C;
                const real* v = q + 2 * C;
                rope_table(tab.data(), pos ? (double)pos[b * T + t] : (double)t, m);
                for (int i = 0; i < m; i++) { a[i] = kattn_phi(q[i]); c[i] = kattn_phi(k[i]); }  // a = φ(q), c = φ(k)
                rope_apply(ah.data(), a.data(), tab.data(), m);                                    // â = R_p a
                rope_apply(ch.data(), c.data(), tab.data(), m);                                    // ĉ = R_p c
                for (int i = 0; i < m; i++) {
                    z[i] += c[i];                                                                  // z_t = z_{t-1} + c
                    for (int j = 0; j < hs; j++) S[(size_t)i * hs + j] += ch[i] * v[j];            // S_t = S_{t-1} + ĉ vᵀ
                }
                real den = (real)eps;
                for (int i = 0; i < m; i++) den += a[i] * z[i];                                    // a·z_t + eps
                real* o = out + ((size_t)b * T + t) * C + h * hs;
                for (int j = 0; j < hs; j++) {
                    real num = 0;
                    for (int i = 0; i < m; i++) num += ah[i] * S[(size_t)i * hs + j];              // âᵀ S_t
                    o[j] = num / den;
                }
            }
        }
}

// Its backward, by reverse-mode through the same recurrence. With G_t = Σ_{s>=t} ∂L/∂S_s and g_t = Σ_{s>=t} ∂L/∂z_s
// (the states are running sums, so their gradients are suffix sums):
//   out_t = (âᵀ S_t) / den_t  →  dâ = S_t d_num,  ∂L/∂S_t = â d_numᵀ,  da = z_t d_den,  ∂L/∂z_t = a d_den
//                                with d_num = dout/den, d_den = −Σ_j dout_j out_j / den
//   S_t = S_{t-1} + ĉ vᵀ      →  dĉ = G_t v,  dv = G_tᵀ ĉ          z_t = z_{t-1} + c  →  dc += g_t
//   â = R a, ĉ = R c          →  da += Rᵀ dâ, dc += Rᵀ dĉ           a = φ(q), c = φ(k) →  dq = φ'(q) da, dk = φ'(k) dc
//   S_{-1} = b_KV, z_{-1} = b_D →  db_KV += G_0, db_D += g_0
// dqkv, dbkv, dbd are ACCUMULATED (nullptr bias gradients are skipped).
template <typename real>
void kernel_attention_reference_backward(real* dqkv, real* dbkv, real* dbd, const real* dout, const real* qkv, const int* pos,
                                         const real* bkv, const real* bd, int B, int T, int C, int NH, double eps) {
    const int hs = C / NH, m = hs;
    std::vector<real> out((size_t)B * T * C);
    kernel_attention_reference_forward(out.data(), qkv, pos, bkv, bd, B, T, C, NH, eps);
    // the states S_t, z_t of every step are rebuilt forward, then walked backward
    std::vector<real> Ss((size_t)T * m * hs), zs((size_t)T * m), G((size_t)m * hs), g(m), a(m), c(m), ah(m), ch(m), tab(m), da(m), dc(m),
        dah(m), dch(m), tmp(m);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            auto row = [&](int t) { return qkv + ((size_t)b * T + t) * 3 * C + h * hs; };
            auto features = [&](int t) {
                const real* q = row(t);
                rope_table(tab.data(), pos ? (double)pos[b * T + t] : (double)t, m);
                for (int i = 0; i < m; i++) { a[i] = kattn_phi(q[i]); c[i] = kattn_phi(q[C + i]); }
                rope_apply(ah.data(), a.data(), tab.data(), m);
                rope_apply(ch.data(), c.data(), tab.data(), m);
            };
            for (int t = 0; t < T; t++) {
                features(t);
                const real* v = row(t) + 2 * C;
                for (int i = 0; i < m; i++) {
                    zs[(size_t)t * m + i] = (t ? zs[(size_t)(t - 1) * m + i] : (bd ? bd[(size_t)h * m + i] : real(0))) + c[i];
                    for (int j = 0; j < hs; j++) {
                        const size_t ij = (size_t)i * hs + j;
                        Ss[(size_t)t * m * hs + ij] = (t ? Ss[(size_t)(t - 1) * m * hs + ij] : (bkv ? bkv[(size_t)h * m * hs + ij] : real(0))) + ch[i] * v[j];
                    }
                }
            }
            std::fill(G.begin(), G.end(), real(0));
            std::fill(g.begin(), g.end(), real(0));
            for (int t = T - 1; t >= 0; t--) {
                features(t);
                const real* St = &Ss[(size_t)t * m * hs];
                const real* zt = &zs[(size_t)t * m];
                const real* v = row(t) + 2 * C;
                const real* o = out.data() + ((size_t)b * T + t) * C + h * hs;
                const real* dO = dout + ((size_t)b * T + t) * C + h * hs;
                real den = (real)eps;
                for (int i = 0; i < m; i++) den += a[i] * zt[i];
                real dden = 0;
                for (int j = 0; j < hs; j++) dden -= dO[j] * o[j] / den;
                for (int i = 0; i < m; i++) {
                    dah[i] = 0;
                    for (int j = 0; j < hs; j++) {
                        dah[i] += St[(size_t)i * hs + j] * dO[j] / den;    // dâ = S_t d_num
                        G[(size_t)i * hs + j] += ah[i] * dO[j] / den;     // ∂L/∂S_t = â d_numᵀ
                    }
                    da[i] = zt[i] * dden;                                  // da = z_t d_den
                    g[i] += a[i] * dden;                                   // ∂L/∂z_t = a d_den
                }
                real* dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
                for (int i = 0; i < m; i++) {
                    dch[i] = 0;
                    for (int j = 0; j < hs; j++) dch[i] += G[(size_t)i * hs + j] * v[j];  // dĉ = G_t v
                    dc[i] = g[i];                                                        // dc = g_t
                }
                for (int j = 0; j < hs; j++)
                    for (int i = 0; i < m; i++) dq[2 * C + j] += G[(size_t)i * hs + j] * ch[i];  // dv = G_tᵀ ĉ
                rope_apply(tmp.data(), dah.data(), tab.data(), m, -1);  // da += Rᵀ dâ
                for (int i = 0; i < m; i++) da[i] += tmp[i];
                rope_apply(tmp.data(), dch.data(), tab.data(), m, -1);  // dc += Rᵀ dĉ
                for (int i = 0; i < m; i++) dc[i] += tmp[i];
                const real* q = row(t);
                for (int i = 0; i < m; i++) {
                    dq[i] += kattn_dphi(q[i], a[i]) * da[i];          // dq = φ'(q) da
                    dq[C + i] += kattn_dphi(q[C + i], c[i]) * dc[i];  // dk = φ'(k) dc
                }
            }
            if (dbkv) for (size_t i = 0; i < G.size(); i++) dbkv[(size_t)h * m * hs + i] += G[i];
            if (dbd) for (int i = 0; i < m; i++) dbd[(size_t)h * m + i] += g[i];
        }
}

// =====================================================================================================
// The tuned forms (the chunked parallel form and the recurrent step), from here on.

namespace kattn_detail {
using par::use_threads;
inline int max_threads() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}
inline int thread_id() {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}
// elements of one thread's working slice.
//   backward: Q (CH×CH), X (CH×m), S, Sᵀ (m×hs), z (m), Âcᵀ, Ĉcᵀ (m×CH), Vcᵀ or Dnᵀ (hs×CH), and the whole head's
//             Dn (T×hs) and dd (T), formed in the forward sweep and read again in the reverse one
//   forward:  P (CH×CH), S (m×hs), Ct (m×CH) = Ĉcᵀ, z (m)
inline size_t slice_size(int m, int hs, int T) {
    const size_t CH = KA_CHUNK;
    const size_t bwd = CH * CH + CH * m + 2 * (size_t)m * hs + m + 2 * (size_t)m * CH + (size_t)hs * CH + (size_t)T * (hs + 1);
    const size_t fwd = CH * CH + (size_t)m * hs + (size_t)m * CH + m;
    return std::max(bwd, fwd);
}

// y (n) = φ(x) for a row; float on AVX2 runs 8 lanes through vmath::exp8_nonpos (exp8 for arguments <= 0, ≈1 ulp
// of std::exp) of min(0, x). Both forms (parallel and recurrent) use this, so they see the same φ values. The
// operand order min(0, x) carries a NaN through (minps returns its second operand when either is NaN): until
// 2026-12-02 it was min(x, 0), which made φ(NaN) = e⁰ = 1 on the vector paths, a NaN in q or k silently hidden
// (the scalar φ, and the fp64 path, gave NaN).
template <typename real>
inline void phi_row(real* y, const real* x, int n) {
    int i = 0;
#ifdef ICL_VMATH_AVX2
    if constexpr (std::is_same_v<real, float>) {
        const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
        for (; i + 8 <= n; i += 8) {
            const __m256 v = _mm256_loadu_ps(x + i);
            const __m256 e = vmath::exp8_nonpos(_mm256_min_ps(zero, v));
            _mm256_storeu_ps(y + i, _mm256_blendv_ps(e, _mm256_add_ps(v, one), _mm256_cmp_ps(v, zero, _CMP_GT_OQ)));
        }
    }
#endif
    for (; i < n; i++) y[i] = kattn_phi(x[i]);
}
#ifdef ICL_VMATH_AVX2
// φ of one register (float): exp8_nonpos / exp16_nonpos of min(0, x), x + 1 where x > 0 — phi_row's operations in its
// order (min(0, x) keeps a NaN), so the same bits.
inline __m256 phi_vec(__m256 x) {
    const __m256 zero = _mm256_setzero_ps();
    const __m256 e = vmath::exp8_nonpos(_mm256_min_ps(zero, x));
    return _mm256_blendv_ps(e, _mm256_add_ps(x, _mm256_set1_ps(1.0f)), _mm256_cmp_ps(x, zero, _CMP_GT_OQ));
}
#ifdef __AVX512F__
inline __m512 phi_vec(__m512 x) {
    const __m512 zero = _mm512_setzero_ps();
    const __m512 e = vmath::exp16_nonpos(_mm512_min_ps(zero, x));
    return _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
}
#endif
// The forward's features for lanes i..i+L−1 of one row of one head (F = F16 or F8 of simd.h, L = F::L; m a multiple
// of L from i on): a = φ(q), c = φ(k), and their rotations â = R a, ĉ = R c as a·[c,c] + swap(a)·[−s,s], with the
// row's RoPE table tb = [cos | sin] read in place (dup_half) and shared by q and k — rope_apply's x0·c − x1·s and
// x1·c + x0·s with the product by ±s rounded inside the fma, as before. q and k in one iteration give the core two
// independent exponentials; a 32-row table of [c,c] / [−s,s] pairs built with scalar stores, and q and k in separate
// passes, was 4–7% slower over the whole forward at heads of 16 (tools/kattn_ab.sh; docs/benchmarks.md 2026-12-07).
template <typename F>
inline void feature_lanes(int i, int m, const float* xq, const float* xk, const float* tb, float* fq, float* fk, float* rq, float* rk) {
    static const float kSign[16] = {-1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1};
    const typename F::V cv = F::dup_half(tb + i / 2), sv = F::mul(F::loadu(kSign), F::dup_half(tb + m / 2 + i / 2));
    const typename F::V a = phi_vec(F::loadu(xq + i)), c = phi_vec(F::loadu(xk + i));
    F::storeu(fq + i, a);
    F::storeu(fk + i, c);
    F::storeu(rq + i, F::fmadd(F::swap_pairs(a), sv, F::mul(a, cv)));
    F::storeu(rk + i, F::fmadd(F::swap_pairs(c), sv, F::mul(c, cv)));
}
#endif
// The features of rows t0..t1−1 of one (b, h): a = φ(q), c = φ(k), â = R a, ĉ = R c, written to the saved (T,m)
// arrays fq, fk, rq, rk of that (b, h). x is the head's q in row 0 of its sequence (row stride ldx, k = q + koff),
// tab that sequence's RoPE table (T,m). The forward calls it for each chunk just before the chunk's products, which
// then read the features from cache. Until 2026-12-07 the features were one pass over all rows and heads before the
// products (in blocks of 32 rows for heads of up to 32). In process on an Intel Xeon, the forward with them formed
// per chunk takes 0.90–0.92 of that one's time at heads of 64 (B=1 T=1024, 1 thread; AVX2 build ~1.00) and 0.81–0.90
// at B=8 T=256 C=384 NH=6 (2 threads; AVX2 build, 1 thread: 0.88), 0.93–0.96 at `iclca train`'s default shape B=32
// T=128 C=64 NH=4 (2 threads; AVX2 0.98), and is 1–6% slower at heads of 16 with B=1 T=1024 (`iclca bench`'s shape),
// where all the features fit in L2 (tools/kattn_ab.sh, both orders; docs/benchmarks.md 2026-12-07, afternoon).
template <typename real>
inline void features_rows(real* fq, real* fk, real* rq, real* rk, const real* x, int ldx, int koff, const real* tab, int t0, int t1, int m) {
#ifdef ICL_VMATH_AVX2
    if constexpr (std::is_same_v<real, float>) {
        if (m % 8 == 0) {  // φ and the pair rotation a whole register at a time (feature_lanes)
            for (int t = t0; t < t1; t++) {
                const float* xq = x + (size_t)t * ldx;
                const float* tb = tab + (size_t)t * m;
                const size_t o = (size_t)t * m;
                int i = 0;
#ifdef __AVX512F__
                for (; i + 16 <= m; i += 16) feature_lanes<F16>(i, m, xq, xq + koff, tb, fq + o, fk + o, rq + o, rk + o);
#endif
                for (; i < m; i += 8) feature_lanes<F8>(i, m, xq, xq + koff, tb, fq + o, fk + o, rq + o, rk + o);
            }
            return;
        }
    }
#endif
    for (int t = t0; t < t1; t++) {
        const real* xq = x + (size_t)t * ldx;
        const real* tb = tab + (size_t)t * m;
        const size_t o = (size_t)t * m;
        phi_row(fq + o, xq, m);
        phi_row(fk + o, xq + koff, m);
        rope_apply(rq + o, fq + o, tb, m);
        rope_apply(rk + o, fk + o, tb, m);
    }
}
// The denominators of one chunk of n rows: z ← z + c_i (the running UNROTATED state, advanced in place, one
// row at a time in the same order as the recurrent form), then dn_i = a_i·z + eps. On float/AVX2 the running z
// stays in registers, 8 channels at a time, and each row keeps an 8-lane partial (a per-row dot product through
// memory was a dependency chain of store → load → add per row).
template <typename real>
inline void chunk_denominators(real* dn, real* z, const real* A, const real* Cf, int n, int m, double eps) {
#ifdef ICL_VMATH_AVX2
    if constexpr (std::is_same_v<real, float>) {
        if (m % 8 == 0 && n <= KA_CHUNK) {
            alignas(32) float part[KA_CHUNK][8];
            for (int kb = 0; kb < m; kb += 8) {
                __m256 zr = _mm256_loadu_ps(z + kb);
                for (int i = 0; i < n; i++) {
                    zr = _mm256_add_ps(zr, _mm256_loadu_ps(Cf + (size_t)i * m + kb));
                    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(A + (size_t)i * m + kb), zr);
                    if (kb) p = _mm256_add_ps(p, _mm256_load_ps(part[i]));
                    _mm256_store_ps(part[i], p);
                }
                _mm256_storeu_ps(z + kb, zr);
            }
            for (int i = 0; i < n; i++) {  // horizontal sum of the row's 8 lanes
                const __m256 p = _mm256_load_ps(part[i]);
                __m128 h = _mm_add_ps(_mm256_castps256_ps128(p), _mm256_extractf128_ps(p, 1));
                h = _mm_add_ps(h, _mm_movehl_ps(h, h));
                h = _mm_add_ss(h, _mm_movehdup_ps(h));
                dn[i] = _mm_cvtss_f32(h) + (float)eps;
            }
            return;
        }
    }
#endif
    for (int i = 0; i < n; i++) {
        const real* ci = Cf + (size_t)i * m;
        const real* ai = A + (size_t)i * m;
#pragma omp simd
        for (int k = 0; k < m; k++) z[k] += ci[k];
        dn[i] = fixed_sum<real>(m, [&](size_t k) { return ai[k] * z[k]; }) + (real)eps;
    }
}

// The backward's per-row work (both sweeps), one row t of one head, dd = dden_t, x = the row's dâ (forward
// sweep) or dĉ (reverse sweep), tb = the row's RoPE table [cos | sin]:
//   forward sweep:  z ← z + c_t;  da = Rᵀ x + z·dd;  dq_t += φ'(q_t) da
//   reverse sweep:  z ← z + a_t·dd;  dc = Rᵀ x + z;  dk_t += φ'(k_t) dc
// The plain loops are the definition; on float the same operations run 16 lanes at a time with AVX-512 (m a
// multiple of 16) or 8 with AVX2 (m a multiple of 8), one template over simd.h's F16 / F8 (Rᵀx as x·[c,c] +
// swap(x)·[s,−s]: the loops' x0·c − x1·(−s) and x0·(−s) + x1·c, bit for bit), instead of the compiler's version
// of the loops inside the backward's large body, which spilled. A throwaway program timing
// kernel_attention_backward at B = 1, T = 1024, 1 thread: AVX-512 on a Zen 5, medians of 9–15 alternating runs,
// 3.67 → 3.35 ms with heads of 64, 0.69 → 0.63 ms with heads of 16; the 8-lane form in the `-mavx2 -mfma` build on
// a Zen 4, the reference loops and it alternating call by call, medians of 3 × 101–201, heads of 16
// 1.88–2.08 → 1.71–1.88 ms, of 64 1.72–2.08 → 1.68–1.98 ms.
// The definition: the plain loops (also what double, builds without AVX2+FMA or AVX-512 and other head sizes run).
template <typename real>
inline void bwd_row_reference(bool reverse,
                              real* dgt,        // (m)  dq_t (forward sweep) or dk_t (reverse), ACCUMULATED
                              real* z,          // (m)  the running state z (forward sweep) or w (reverse), advanced in place
                              const real* x,    // (m)  dâ_t (forward sweep) or dĉ_t (reverse): the row of X
                              const real* ft,   // (m)  a_t (forward sweep) or c_t (reverse): φ's value, for φ'
                              const real* zt,   // (m)  c_t (forward sweep, added to z) or a_t (reverse, added as a_t·dd)
                              const real* gt,   // (m)  q_t (forward sweep) or k_t (reverse): φ's input, for φ'
                              const real* tb,   // (m)  the row's RoPE table [cos | sin]
                              real dd, int m) {
    real d[512];
    ICL_ASSERT(m <= 512);
    rope_apply(d, x, tb, m, -1);  // Rᵀ x
    for (int c = 0; c < m; c++) {
        if (!reverse) { z[c] += zt[c]; d[c] += z[c] * dd; }
        else { z[c] += zt[c] * dd; d[c] = d[c] + z[c]; }
    }
    for (int c = 0; c < m; c++) dgt[c] += kattn_dphi(gt[c], ft[c]) * d[c];
}
#if defined(ICL_VMATH_AVX2) || defined(__AVX512F__)
// The same, F::L lanes at a time on float (F = F16, AVX-512 zmm, or F8, AVX2 ymm, of simd.h; m a multiple of F::L;
// no fma, so F16 needs only -mavx512f; the tests compare both widths with bwd_row_reference bit for bit). The
// arguments are bwd_row_reference's.
template <typename F>
inline void bwd_row_v(bool reverse, float* dgt, float* z, const float* x, const float* ft, const float* zt,
                      const float* gt, const float* tb, float dd, int m) {
    static const float kSign[16] = {1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1};
    const int h = m / 2;
    const typename F::V sgn = F::loadu(kSign), vdd = F::set1(dd), one = F::set1(1.0f);  // sgn·s = [s, −s] pairs
    for (int i = 0; i < m; i += F::L) {  // lanes i..i+L−1 = pairs i/2..i/2+L/2−1
        const typename F::V c = F::dup_half(tb + i / 2), sn = F::mul(sgn, F::dup_half(tb + h + i / 2));
        const typename F::V xv = F::loadu(x + i);
        const typename F::V r = F::add(F::mul(xv, c), F::mul(F::swap_pairs(xv), sn));  // Rᵀ x
        typename F::V zv = F::loadu(z + i), d;
        if (!reverse) {
            zv = F::add(zv, F::loadu(zt + i));
            d = F::add(r, F::mul(zv, vdd));
        } else {
            zv = F::add(zv, F::mul(F::loadu(zt + i), vdd));
            d = F::add(r, zv);
        }
        F::storeu(z + i, zv);
        // φ'(g) = 1 where g > 0, else φ(g)
        const typename F::V dphi = F::select_gt0(F::loadu(gt + i), one, F::loadu(ft + i));
        F::storeu(dgt + i, F::add(F::loadu(dgt + i), F::mul(dphi, d)));
    }
}
#endif
// The per-row step the backward runs: the widest register the head size fills, else the plain loops.
template <typename real>
inline void bwd_row(bool reverse, real* dgt, real* z, const real* x, const real* ft, const real* zt, const real* gt,
                    const real* tb, real dd, int m) {
    if constexpr (std::is_same_v<real, float>) {
#ifdef __AVX512F__
        if (m % 16 == 0) return bwd_row_v<F16>(reverse, dgt, z, x, ft, zt, gt, tb, dd, m);
#endif
#ifdef ICL_VMATH_AVX2
        if (m % 8 == 0) return bwd_row_v<F8>(reverse, dgt, z, x, ft, zt, gt, tb, dd, m);
#endif
    }
    bwd_row_reference(reverse, dgt, z, x, ft, zt, gt, tb, dd, m);
}
// dden_t = −(g_t·out_t) / den_t for the n rows of a chunk (g = dout, o = out, both at row stride ld): g_t·out_t is
// a plain sum over c, a multiply then an add per term, c in order. The definition's loops run 8 rows side by side
// (8 independent chains; perf put ~8% of the backward on one row's chain of hs dependent adds).
template <typename real>
inline void dden_rows_reference(real* dd, const real* g, const real* o, const real* dn, int n, int hs, int ld) {
    for (int i0 = 0; i0 < n; i0 += 8) {
        const int nr = std::min(8, n - i0);
        real s[8] = {};
        for (int c = 0; c < hs; c++)
            for (int r = 0; r < nr; r++) s[r] += g[(size_t)(i0 + r) * ld + c] * o[(size_t)(i0 + r) * ld + c];
        for (int r = 0; r < nr; r++) dd[i0 + r] = -s[r] * (real(1) / dn[i0 + r]);
    }
}
// The same on float with AVX2 for whole blocks of 8 rows and hs a multiple of 8: the 8 rows in the 8 lanes of one
// register, 8×8 blocks of g and out transposed in registers (simd.h) so that column c of the block is one vector;
// s += g_c·o_c as a multiply then an add, c in order: each lane's chain is the reference's, bit for bit (tests).
// The compiler's version of the reference built each vector out of single floats: ~10% of the backward at heads
// of 16 in perf; in-process alternating timing of kernel_attention_backward (B 1, T 1024, 4 heads of 16, 1 thread,
// Zen 4): −4–7%.
template <typename real>
inline void dden_rows(real* dd, const real* g, const real* o, const real* dn, int n, int hs, int ld) {
    int i0 = 0;
#ifdef ICL_VMATH_AVX2
    if constexpr (std::is_same_v<real, float>) {
        if (hs % 8 == 0)
            for (; i0 + 8 <= n; i0 += 8) {
                alignas(32) float s[8];
                __m256 s8 = _mm256_setzero_ps();
                for (int c0 = 0; c0 < hs; c0 += 8) {
                    __m256 gc[8], oc[8];  // columns c0..c0+7 of the 8 rows: gc[j] lane r = g[i0 + r][c0 + j]
                    transpose8x8_regs(gc, g + (size_t)i0 * ld + c0, ld);
                    transpose8x8_regs(oc, o + (size_t)i0 * ld + c0, ld);
                    for (int j = 0; j < 8; j++) s8 = _mm256_add_ps(s8, _mm256_mul_ps(gc[j], oc[j]));
                }
                _mm256_store_ps(s, s8);
                for (int r = 0; r < 8; r++) dd[i0 + r] = -s[r] * (1.0f / dn[i0 + r]);
            }
    }
#endif
    if (i0 < n) dden_rows_reference(dd + i0, g + (size_t)i0 * ld, o + (size_t)i0 * ld, dn + i0, n - i0, hs, ld);
}
}  // namespace kattn_detail

inline size_t kernel_attention_scratch_size(int B, int T, int C, int NH, int nthreads = kattn_detail::max_threads()) {
    const int hs = C / NH, m = hs;
    const int slices = std::max(1, std::min(nthreads, B * NH));
    return (size_t)B * T * m + (size_t)B * NH * (m * hs + m) + (size_t)slices * kattn_detail::slice_size(m, hs, T);
}

namespace kattn_detail {
// RoPE table for every (b,t): tab (B,T,m) = [cos(p θ_k) | sin(p θ_k)]
// The m/2 frequencies θ_k are computed once. Rows come in blocks of 32: the first row of a block (and any
// row whose position is not the previous one + 1) gets cos/sin directly, as rope_table does; the next ones
// step the angle by θ_k with the addition formulas in double (error ≤ 32 double roundings, far below float's
// and ~1e-15 absolute in double).
template <typename real>
void fill_rope_rows(real* tab, const int* pos, int B, int T, int m) {
    const int h = m / 2, N = B * T, RB = 32;
    double theta[256], ct[256], st[256];
    for (int k = 0; k < h; k++) { theta[k] = rope_theta(k, m); ct[k] = std::cos(theta[k]); st[k] = std::sin(theta[k]); }
    auto P = [&](int n) { return pos ? (double)pos[n] : (double)(n % T); };
#pragma omp parallel for schedule(static) if (use_threads((double)N * m * 20))
    for (int n0 = 0; n0 < N; n0 += RB) {
        double c[256], sn[256];
        for (int n = n0; n < std::min(N, n0 + RB); n++) {
            real* tb = tab + (size_t)n * m;
            const double p = P(n);
            if (n == n0 || p != P(n - 1) + 1) {
                for (int k = 0; k < h; k++) { c[k] = std::cos(p * theta[k]); sn[k] = std::sin(p * theta[k]); }
            } else {
                for (int k = 0; k < h; k++) {
                    const double c1 = c[k] * ct[k] - sn[k] * st[k], s1 = sn[k] * ct[k] + c[k] * st[k];
                    c[k] = c1;
                    sn[k] = s1;
                }
            }
            for (int k = 0; k < h; k++) { tb[k] = (real)c[k]; tb[h + k] = (real)sn[k]; }
        }
    }
}
// fill_rope: with positions 0..T-1 in every sequence (pos null, training) the table is the same T rows each call:
// computed once per (T, m) in this thread (fill_rope_rows of one sequence) and copied to each of the B sequences
// (its cos/sin were ~5% of the forward at heads of 16 on a Zen 5). The same values as fill_rope_rows over all B·T
// rows whenever T is a multiple of its 32-row blocks (otherwise a block there straddles two sequences, and a row
// of b > 0 may differ in float's last bit: both within the bound above).
template <typename real>
void fill_rope(real* tab, const int* pos, int B, int T, int m) {
    if (pos || B < 1 || T < 1) return fill_rope_rows(tab, pos, B, T, m);
    struct Cache {
        std::vector<real> rows;  // (T,m)
        int T = -1, m = -1;
    };
    static thread_local Cache cache;
    if (cache.T != T || cache.m != m) {
        cache.rows.resize((size_t)T * m);
        fill_rope_rows(cache.rows.data(), nullptr, 1, T, m);
        cache.T = T;
        cache.m = m;
    }
    for (int b = 0; b < B; b++) std::copy(cache.rows.begin(), cache.rows.end(), tab + (size_t)b * T * m);
}
}  // namespace kattn_detail

template <typename real>
void kernel_attention_forward(real* out,         // (B,T,C)      SET
                              real* phiq,        // (B,NH,T,m)   saved: a = φ(q)
                              real* phik,        // (B,NH,T,m)   saved: c = φ(k)
                              real* rphiq,       // (B,NH,T,m)   saved: â = R_p a
                              real* rphik,       // (B,NH,T,m)   saved: ĉ = R_p c
                              real* den,         // (B,NH,T)     saved: a·z_t + eps
                              real* scratch,     // kernel_attention_scratch_size(B,T,C,NH)
                              const real* qkv,   // (B,T,3C)     [q | k | v]
                              const int* pos,    // (B,T)        positions, or nullptr = 0..T-1
                              const real* bkv,   // (NH,m,hs)    or nullptr (= 0)
                              const real* bd,    // (NH,m)       or nullptr (= 0)
                              int B, int T, int C, int NH, double eps) {
    using namespace kattn_detail;
    ICL_ASSERT(NH > 0 && C % NH == 0 && (C / NH) % 2 == 0 && C / NH <= 512);  // fill_rope_rows' tables of m/2 <= 256 frequencies
    const int hs = C / NH, m = hs, C3 = 3 * C, CH = KA_CHUNK;
    real* tab = scratch;                                               // (B,T,m)
    real* slices = scratch + (size_t)B * T * m + (size_t)B * NH * (m * hs + m);
    fill_rope(tab, pos, B, T, m);
#pragma omp parallel for schedule(static) if (use_threads((double)B * NH * T * m * hs * 4))
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        real* sl = slices + (size_t)thread_id() * slice_size(m, hs, T);
        real* P = sl;                            // (CH,CH)  this chunk's tril(Â Ĉᵀ)
        real* S = P + (size_t)CH * CH;           // (m,hs)   the running numerator state
        real* Ct = S + (size_t)m * hs;           // (m,CH)   Ĉcᵀ
        real* z = Ct + (size_t)m * CH;           // (m)
        const real* v = qkv + (size_t)b * T * C3 + 2 * C + h * hs;  // (T,hs) row stride 3C
        const real* A = phiq + (size_t)bh * T * m;          // (T,m)
        const real* Cf = phik + (size_t)bh * T * m;
        const real* Ah = rphiq + (size_t)bh * T * m;
        const real* Chh = rphik + (size_t)bh * T * m;
        real* dn = den + (size_t)bh * T;                    // (T)
        real* o = out + (size_t)b * T * C + h * hs;         // (T,hs) row stride C
        // states start at the biases (the bias is the state before the first token)
        for (int i = 0; i < m * hs; i++) S[i] = bkv ? bkv[(size_t)h * m * hs + i] : real(0);
        for (int i = 0; i < m; i++) z[i] = bd ? bd[(size_t)h * m + i] : real(0);
        for (int t0 = 0; t0 < T; t0 += CH) {
            const int n = std::min(CH, T - t0);
            const real* Ahc = Ah + (size_t)t0 * m;   // (n,m)
            const real* Chc = Chh + (size_t)t0 * m;  // (n,m)
            const real* vc = v + (size_t)t0 * C3;    // (n,hs) stride 3C, read in place
            real* oc = o + (size_t)t0 * C;           // (n,hs) stride C
            // this chunk's features, formed here so that the products below read them from cache
            features_rows(phiq + (size_t)bh * T * m, phik + (size_t)bh * T * m, rphiq + (size_t)bh * T * m, rphik + (size_t)bh * T * m,
                          qkv + (size_t)b * T * C3 + h * hs, C3, C, tab + (size_t)b * T * m, t0, t0 + n, m);
            transpose(Ct, CH, Chc, m, n, m);  // the one operand that needs a copy: Ĉcᵀ
            // numerator: Âc S_prev (inter-chunk) + tril(Âc Ĉcᵀ) Vc (intra-chunk, causal: j <= i)
            mm_nn<real>(n, hs, m, Ahc, m, S, hs, oc, C, false);
            tri_chain(n, m, hs, Ahc, m, Ct, CH, P, vc, C3, oc, C, true, true);
            // denominator (unrotated, running z) and the division
            chunk_denominators(dn + t0, z, A + (size_t)t0 * m, Cf + (size_t)t0 * m, n, m, eps);
            for (int i = 0; i < n; i++) {
                const real inv = real(1) / dn[t0 + i];
                real* oi = oc + (size_t)i * C;
#pragma omp simd
                for (int k = 0; k < hs; k++) oi[k] *= inv;
            }
            // S += Ĉcᵀ Vc
            mm_nn<real>(m, hs, n, Ct, CH, vc, C3, S, hs, true);
        }
    }
}

// Backward of kernel_attention_forward. ACCUMULATES into dqkv, dbkv, dbd (the latter two may be nullptr).
template <typename real>
void kernel_attention_backward(real* dqkv,         // (B,T,3C)
                               real* dbkv,         // (NH,m,hs) or nullptr
                               real* dbd,          // (NH,m)    or nullptr
                               real* scratch,      // kernel_attention_scratch_size(B,T,C,NH)
                               const real* dout,   // (B,T,C)
                               const real* out,    // (B,T,C)    forward output
                               const real* phiq, const real* phik, const real* rphiq, const real* rphik,  // (B,NH,T,m)
                               const real* den,    // (B,NH,T)
                               const real* qkv,    // (B,T,3C)
                               const int* pos,     // (B,T) or nullptr
                               const real* bkv,    // (NH,m,hs) or nullptr
                               const real* bd,     // (NH,m)    or nullptr
                               int B, int T, int C, int NH) {
    using namespace kattn_detail;
    const int hs = C / NH, m = hs, C3 = 3 * C, CH = KA_CHUNK;
    real* tab = scratch;                                      // (B,T,m)
    real* red = scratch + (size_t)B * T * m;                  // (B,NH, m·hs + m): per-(b,h) dbkv | dbd
    real* slices = red + (size_t)B * NH * (m * hs + m);
    fill_rope(tab, pos, B, T, m);
#pragma omp parallel for schedule(static) if (use_threads((double)B * NH * T * m * hs * 8))
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        real* sl = slices + (size_t)thread_id() * slice_size(m, hs, T);
        real* Q = sl;                    // (CH,CH)  a chunk's tril(Dn Vᵀ), triu(V Dnᵀ) or triu(Ĉ Âᵀ)
        real* X = Q + CH * CH;           // (CH,m)   dâ (forward sweep), dĉ (reverse sweep)
        real* S = X + CH * m;            // (m,hs)   S_prev (forward sweep), U (reverse sweep)
        real* St = S + m * hs;           // (hs,m)   its transpose
        real* z = St + m * hs;           // (m)      z (forward sweep), w (reverse sweep)
        real* At = z + m;                // (m,CH)   Âcᵀ
        real* Ct = At + m * CH;          // (m,CH)   Ĉcᵀ
        real* Vt = Ct + m * CH;          // (hs,CH)  Vcᵀ, then Dnᵀ
        real* DnT = Vt + hs * CH;        // (T,hs)   dnum rows of the whole head
        real* ddT = DnT + (size_t)T * hs; // (T)     dden of the whole head
        const real* q = qkv + (size_t)b * T * C3 + h * hs;
        const real* k = q + C;
        const real* v = q + 2 * C;
        real* dq = dqkv + (size_t)b * T * C3 + h * hs;      // (T,hs) stride 3C
        real* dk = dq + C;
        real* dv = dq + 2 * C;
        const real* A = phiq + (size_t)bh * T * m;
        const real* Cf = phik + (size_t)bh * T * m;
        const real* Ah = rphiq + (size_t)bh * T * m;
        const real* Chh = rphik + (size_t)bh * T * m;
        const real* dn = den + (size_t)bh * T;
        const real* g = dout + (size_t)b * T * C + h * hs;  // (T,hs) stride C
        const real* o = out + (size_t)b * T * C + h * hs;
        // out_t = num_t / den_t  =>  dnum_t = g_t / den_t,  dden_t = −(g_t·out_t) / den_t: formed chunk by chunk in the
        // forward sweep, kept for the whole head (DnT, ddT) and read again by the reverse sweep (forming them in each
        // sweep, the dden rows' transposes twice, was ~4% of the backward at heads of 16)
        auto chunk_dnum = [&](int t0, int n) {
            dden_rows(ddT + t0, g + (size_t)t0 * C, o + (size_t)t0 * C, dn + t0, n, hs, C);
            for (int i = 0; i < n; i++) {
                const real* gi = g + (size_t)(t0 + i) * C;
                const real inv = real(1) / dn[t0 + i];
                real* Di = DnT + (size_t)(t0 + i) * hs;
                for (int c = 0; c < hs; c++) Di[c] = gi[c] * inv;
            }
        };
        // ---- forward sweep: dâ_t and da_t (needs S_prev and z_t in forward order) ----
        for (int i = 0; i < m * hs; i++) S[i] = bkv ? bkv[(size_t)h * m * hs + i] : real(0);
        for (int i = 0; i < m; i++) z[i] = bd ? bd[(size_t)h * m + i] : real(0);
        for (int t0 = 0; t0 < T; t0 += CH) {
            const int n = std::min(CH, T - t0);
            const real* Chc = Chh + (size_t)t0 * m;
            const real* vc = v + (size_t)t0 * C3;
            chunk_dnum(t0, n);
            const real* Dn = DnT + (size_t)t0 * hs;  // (n,hs)
            const real* dd = ddT + t0;               // (n)
            // num_t = â_tᵀ S_t, S_t = S_prev + Σ_{j<=t in chunk} ĉ_j v_jᵀ
            //   => dâ_t = S_prev dnum_t + Σ_{j<=t} (dnum_t·v_j) ĉ_j       X = Dn S_prevᵀ + tril(Dn Vᵀ) Ĉc
            transpose(St, m, S, hs, m, hs);
            mm_nn<real>(n, m, hs, Dn, hs, St, m, X, m, false);
            transpose(Vt, CH, vc, C3, n, hs);
            tri_chain(n, hs, m, Dn, hs, Vt, CH, Q, Chc, m, X, m, true, true);
            for (int i = 0; i < n; i++) {
                const int t = t0 + i;
                const real* ai = A + (size_t)t * m;
                const real* ci = Cf + (size_t)t * m;
                const real* tb = tab + ((size_t)b * T + t) * m;
                // â = R a  =>  da = Rᵀ dâ ;   den_t = a_t·z_t + eps  =>  da += z_t dden_t ;   a = φ(q)  =>  dq += φ'(q) da
                bwd_row(false, dq + (size_t)t * C3, z, X + (size_t)i * m, ai, ci, q + (size_t)t * C3, tb, dd[i], m);
            }
            transpose(Ct, CH, Chc, m, n, m);
            mm_nn<real>(m, hs, n, Ct, CH, vc, C3, S, hs, true);  // S += Ĉcᵀ Vc
        }
        // ---- reverse sweep: U = Σ_{t>=j} â_t dnum_tᵀ, w = Σ_{t>=j} a_t dden_t  → dĉ, dv, dc, dbkv, dbd ----
        std::fill(S, S + m * hs, real(0));
        std::fill(z, z + m, real(0));
        const int nchunks = (T + CH - 1) / CH;
        for (int ck = nchunks - 1; ck >= 0; ck--) {
            const int t0 = ck * CH, n = std::min(CH, T - t0);
            const real* Ahc = Ah + (size_t)t0 * m;
            const real* Chc = Chh + (size_t)t0 * m;
            const real* vc = v + (size_t)t0 * C3;
            real* dvc = dv + (size_t)t0 * C3;
            const real* Dn = DnT + (size_t)t0 * hs;  // (n,hs), from the forward sweep
            const real* dd = ddT + t0;               // (n)
            // S_t = b + Σ_{j<=t} ĉ_j v_jᵀ  =>  dĉ_j = Σ_{t>=j} (dnum_t·v_j) â_t = U_next v_j + Σ_{t>=j in chunk} (v_j·dnum_t) â_t
            //                                   X = triu(Vc Dnᵀ) Âc + Vc U_nextᵀ
            transpose(Vt, CH, Dn, hs, n, hs);  // Dnᵀ
            tri_chain(n, hs, m, vc, C3, Vt, CH, Q, Ahc, m, X, m, false, false);
            transpose(St, m, S, hs, m, hs);
            mm_nn<real>(n, m, hs, vc, C3, St, m, X, m, true);
            //                               dv_j = Σ_{t>=j} (â_t·ĉ_j) dnum_t = U_nextᵀ ĉ_j + Σ_{t>=j in chunk} (ĉ_j·â_t) dnum_t
            //                                   dVc += triu(Ĉc Âcᵀ) Dn + Ĉc U_next
            transpose(At, CH, Ahc, m, n, m);
            tri_chain(n, m, hs, Chc, m, At, CH, Q, Dn, hs, dvc, C3, true, false);
            mm_nn<real>(n, hs, m, Chc, m, S, hs, dvc, C3, true);
            mm_nn<real>(m, hs, n, At, CH, Dn, hs, S, hs, true);  // U += Âcᵀ Dn
            for (int i = n - 1; i >= 0; i--) {
                const int t = t0 + i;
                const real* ai = A + (size_t)t * m;
                const real* ci = Cf + (size_t)t * m;
                const real* tb = tab + ((size_t)b * T + t) * m;
                // z_t = b_D + Σ_{j<=t} c_j  =>  dc_j += Σ_{t>=j} a_t dden_t = w_j ;   ĉ = R c  =>  dc += Rᵀ dĉ ;
                // c = φ(k)  =>  dk += φ'(k) dc
                bwd_row(true, dk + (size_t)t * C3, z, X + (size_t)i * m, ci, ai, k + (size_t)t * C3, tb, dd[i], m);
            }
        }
        // S_t starts at b_KV, z_t at b_D  =>  dbkv[h] += Σ_t â_t dnum_tᵀ = U,  dbd[h] += Σ_t a_t dden_t = w
        real* r = red + (size_t)bh * (m * hs + m);
        std::copy(S, S + m * hs, r);
        std::copy(z, z + m, r + m * hs);
    }
    for (int h = 0; h < NH; h++)
        for (int b = 0; b < B; b++) {  // fixed order over b: deterministic
            const real* r = red + ((size_t)b * NH + h) * (m * hs + m);
            if (dbkv) for (int i = 0; i < m * hs; i++) dbkv[(size_t)h * m * hs + i] += r[i];
            if (dbd) for (int i = 0; i < m; i++) dbd[(size_t)h * m + i] += r[m * hs + i];
        }
}

// The recurrent streaming form: one token of one sequence. Updates the state in place, then reads out:
//   S_h += ĉ vᵀ,  z_h += c,  out_h = (âᵀ S_h) / (aᵀ z_h + eps)
// Start a sequence from S = b_KV, z = b_D (or zeros for a model without biases).
template <typename real>
void kernel_attention_step(real* out,         // (C)
                           real* S,           // (NH,m,hs)  state, updated
                           real* z,           // (NH,m)     state, updated
                           const real* qkv,   // (3C)       this token's [q | k | v]
                           int pos,           // this token's position
                           int C, int NH, double eps) {
        const int hs = C / NH, m = hs;
    real tab[512], a[512], c[512], ah[512], ch[512];
    ICL_ASSERT(m <= 512 && m % 2 == 0);
    rope_table(tab, (double)pos, m);
    for (int h = 0; h < NH; h++) {
        const real* q = qkv + h * hs;
        const real* k = q + C;
        const real* v = q + 2 * C;
        real* Sh = S + (size_t)h * m * hs;
        real* zh = z + (size_t)h * m;
        kattn_detail::phi_row(a, q, m);
        kattn_detail::phi_row(c, k, m);
        rope_apply(ah, a, tab, m);
        rope_apply(ch, c, tab, m);
        real d = 0;
        for (int i = 0; i < m; i++) {
            zh[i] += c[i];
            d += a[i] * zh[i];
            for (int j = 0; j < hs; j++) Sh[(size_t)i * hs + j] += ch[i] * v[j];
        }
        d += (real)eps;
        real* o = out + h * hs;
        for (int j = 0; j < hs; j++) o[j] = 0;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < hs; j++) o[j] += ah[i] * Sh[(size_t)i * hs + j];
        for (int j = 0; j < hs; j++) o[j] /= d;
    }
}

}  // namespace icl
