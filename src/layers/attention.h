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
// so attention_backward needs nothing more: every term it forms is a multiple of att (attention_backward_lse,
// which recomputes att, takes the key starts again).
//
// GRADIENT CONVENTION (whole engine): every backward ACCUMULATES (+=) into every gradient it writes, parameter
// and activation gradients alike; callers zero the gradient buffers once per step. Here: dqkv += ... (the O(T)
// backward, attention_backward_lse, can SET dqkv instead: GradWrite::set, engine/common.h).
//
// How it runs: one `omp parallel for` over the B·NH (batch, head) pairs; each pair does its products with
// gemm() (matmul.h), which runs single-threaded inside the parallel region. q, k, v, out and dout are read
// and written in place through leading dimensions (3C or C) — the GEMM packs its operands, so no gather
// into contiguous copies is needed. The T×T products are done in row blocks of ATT_BLOCK rows: block
// [i0,i1) only needs key columns 0..i1-1, which skips ~3/8 of the work at T = 4·ATT_BLOCK.
// Every output element is computed by one thread in a fixed order: bit-identical for a fixed thread count
// (and in fact for any thread count).
//
// Two forms. attention_forward/backward (below first) save att (B,NH,T,T): the reference, and what the attention
// modifications (attention_mods.h) build on. attention_forward_lse/backward_lse (after them) save only each row's
// log-sum-exp lse (B,NH,T) = max_j preatt[i,j] + log Σ_j exp(preatt[i,j] − max) and recompute the probabilities
// att[i,j] = exp(preatt[i,j] − lse[i]) block by block in the backward: memory O(B·NH·T) instead of O(B·NH·T²).
// The models' plain softmax blocks run the lse form; attention_probabilities rebuilds att from qkv and lse for
// --dump-npy and the analyses.
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
#include <cstdlib>
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

constexpr int ATT_BLOCK = 64;  // rows per causal block of the T×T products
// attention_backward_lse packs q and dout as the A of its recomputed products above this many floats of a head's
// slice (T·hs), and reads them in place up to it (see there).
constexpr size_t ATT_LSE_A_INPLACE = 65536;

namespace attention_detail {
using par::use_threads;

// Row i's key range [lo, i]: lo = 0, or with a key start ks the row attends from ks (a row before ks: itself).
inline int first_key(const int* kstart, int b, int i) { return !kstart ? 0 : i < kstart[b] ? i : kstart[b]; }

// One thread's buffer for a head's packed operands (gemm_pack_a / gemm_pack_b), 64-byte aligned, grown on demand and kept for the
// thread's life, like the GEMM's own packing buffers: attention_pack_floats(T, hs) floats at most.
inline float* head_pack_buffer(size_t floats) {
    struct Buf {
        float* p = nullptr;
        size_t n = 0;
        ~Buf() { std::free(p); }
    };
    static thread_local Buf buf;
    if (buf.n < floats) {
        std::free(buf.p);
        buf.n = (floats + 15) / 16 * 16;  // aligned_alloc wants a multiple of the alignment
        buf.p = static_cast<float*>(std::aligned_alloc(64, buf.n * sizeof(float)));
        ICL_ASSERT_MSG(buf.p, "out of memory for attention's packed operands");
    }
    return buf.p;
}

// The most a thread's head_pack_buffer holds on float (the O(T) backward's five packs, seven when it packs q and dout
// as A too; the forward's two are less).
inline size_t attention_pack_floats(int T, int hs) {
    const size_t a = (size_t)T * hs > ATT_LSE_A_INPLACE ? 2 * gemm_packed_a_size(T, hs) : 0;
    return 2 * gemm_packed_b_size(hs, T) + 3 * gemm_packed_b_size(T, hs) + a;
}

// The forward of one (b,h) pair, one block of query rows [i0,i1) at a time — shared by both forms, so their out
// is the same to the bit. Block i0's probabilities go to P + i0·p_step (leading dimension ldp): the saved
// (T,T) att (p_step = T, ldp = T, rows zeroed to T) or one reused ATT_BLOCK × T panel (p_step = 0, rows zeroed
// to i1, all the next product reads). lse, if not null, gets each row's log-sum-exp.
template <typename real>
void forward_pair(real* o,        // (T,hs), row stride C
                  real* P,        // see above
                  size_t p_step, int ldp,
                  real* lse,      // (T) or null
                  const real* q,  // (T,hs), row stride 3C; k = q + C, v = q + 2C
                  int T, int C, int hs, real scale, const int* kstart, int b) {
    const int C3 = 3 * C;
    const real* k = q + C;
    const real* v = q + 2 * C;
    // float: kᵀ (hs × T) and v (T × hs) packed once for all the blocks (gemm_pack_b), instead of by every block's
    // products again, and the A operands (the block's q rows, its P) read in place by gemm_f32_packed_b (the same
    // bits; on a Zen 5: see docs/benchmarks.md 2026-12-04 and 2026-12-05)
    float* kp = nullptr;
    float* vp = nullptr;
    if constexpr (std::is_same_v<real, float>) {
        const size_t nk = gemm_packed_b_size(hs, T);
        kp = head_pack_buffer(nk + gemm_packed_b_size(T, hs));
        vp = kp + nk;  // nk is a whole number of panels (hs·NR floats each): still 64-byte aligned
        gemm_pack_b(true, hs, T, k, C3, kp);
        gemm_pack_b(false, T, hs, v, C3, vp);
    }
    for (int i0 = 0; i0 < T; i0 += ATT_BLOCK) {
        const int i1 = std::min(T, i0 + ATT_BLOCK), ib = i1 - i0;
        real* a = P + (size_t)i0 * p_step;  // (ib, ldp) block i0's rows
        const int zero_to = p_step ? T : i1;
        // preatt[i0:i1, 0:i1] = scale · q[i0:i1] @ k[0:i1]ᵀ
        // (float: keys i0+h.. only against rows i0+h.. (h = ATT_BLOCK/2, whole packed panels): rows i0..i0+h-1 see
        // no key past i0+h-1, and their entries there, not computed, are zeroed by the softmax loop below)
        if constexpr (std::is_same_v<real, float>) {
            const int h = ATT_BLOCK / 2;
            if (ib > h) {
                gemm_f32_packed_b(false, ib, i0 + h, hs, scale, q + (size_t)i0 * C3, C3, kp, hs, 0, 0, 0.0f, a, ldp);
                gemm_f32_packed_b(false, ib - h, ib - h, hs, scale, q + (size_t)(i0 + h) * C3, C3, kp, hs, 0, i0 + h, 0.0f,
                                  a + (size_t)h * ldp + i0 + h, ldp);
            } else {
                gemm_f32_packed_b(false, ib, i1, hs, scale, q + (size_t)i0 * C3, C3, kp, hs, 0, 0, 0.0f, a, ldp);
            }
        } else
            gemm<real>(false, true, ib, i1, hs, scale, q + (size_t)i0 * C3, C3, k, C3, real(0), a, ldp);
        // causal, numerically stable softmax of each row over lo <= j <= i (lo = 0 without a key start)
        for (int i = i0; i < i1; i++) {
            real* row = a + (size_t)(i - i0) * ldp;
            const int lo = first_key(kstart, b, i);
            const real maxv = vmath::max_of(row + lo, i + 1 - lo);
            const real sum = vmath::exp_shifted_sum(row + lo, i + 1 - lo, maxv);  // row[j] = exp(row[j] − maxv)
            const real inv = real(1) / sum;
#pragma omp simd
            for (int j = lo; j <= i; j++) row[j] *= inv;
            std::fill(row, row + lo, real(0));
            std::fill(row + i + 1, row + zero_to, real(0));
            if (lse) lse[i] = maxv + std::log(sum);
        }
        // out[i0:i1] = att[i0:i1, 0:i1] @ v[0:i1]      (att is 0 beyond the diagonal)
        if constexpr (std::is_same_v<real, float>)
            gemm_f32_packed_b(false, ib, hs, i1, 1.0f, a, ldp, vp, T, 0, 0, 0.0f, o + (size_t)i0 * C, C);
        else
            gemm<real>(false, false, ib, hs, i1, real(1), a, ldp, v, C3, real(0), o + (size_t)i0 * C, C);
    }
}
}  // namespace attention_detail

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
        attention_detail::forward_pair(out + (size_t)b * T * C + h * hs, att + (size_t)bh * T * T, (size_t)T, T, (real*)nullptr,
                                       qkv + (size_t)b * T * C3 + h * hs, T, C, hs, scale, kstart, b);
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

// ---- the O(T) form: the saved row log-sum-exp, the probabilities recomputed ----------------------------------
//
// Both directions work on one (b,h) pair at a time, in two panels of ATT_BLOCK × T per thread (P, the
// probabilities, and dP, their gradient) and a T-vector.
//   forward:  one block of query rows [i0,i1) at a time: P = scale·q[i0:i1] k[0:i1]ᵀ → row softmax (lse saved) → out[i0:i1] = P v[0:i1]
//             (the same products and softmax as attention_forward, so out is the same to the bit)
//   backward: one block of keys [j0,j1) at a time against the rows i >= j0 that see it (a T × ATT_BLOCK panel):
//             P = exp(scale·q kᵀ − lse) (recomputed), dP = dout vᵀ, dS = P ⊙ (dP − D) with D_i = dout_i·out_i
//             (= Σ_j P[i,j]·dP[i,j]), dv[j0:j1] += Pᵀ dout[j0:T], dk[j0:j1] += scale·dSᵀ q[j0:T],
//             dq[j0:T] += scale·dS k[j0:j1]  (float: the products skip the diagonal block's masked side, a staircase of
//             whole tiles where P and dS are 0, keeping every bit — so a block's dv, dk, dq take up to four products each)
// Every (b,h) pair is one thread's, its blocks in a fixed order: bit-identical for any thread count.

// Elements of scratch attention_forward_lse / attention_backward_lse need: two (T + ATT_LSE_PAD) × ATT_BLOCK panels
// and a T-row vector per thread (the forward's P panel is ATT_BLOCK rows at stride T; the backward's products start
// at a whole GEMM row panel, up to gemm_panel_rows() − 1 <= 11 rows before the block: the pad's rows).
constexpr int ATT_LSE_PAD = 16;
inline size_t attention_lse_slice(int T) { return 2 * (size_t)ATT_BLOCK * (T + ATT_LSE_PAD) + T; }
inline size_t attention_lse_scratch_size(int B, int T, int NH, int nthreads = attention_max_threads()) {
    const int slices = std::max(1, std::min(nthreads, B * NH));
    return (size_t)slices * attention_lse_slice(T);
}

template <typename real>
void attention_forward_lse(real* out,        // (B,T,C)
                           real* lse,        // (B,NH,T)    saved for backward: log Σ_j exp(preatt[i,j]) per row
                           real* scratch,    // attention_lse_scratch_size(B,T,NH) elements
                           const real* qkv,  // (B,T,3C)    [q | k | v]
                           int B, int T, int C, int NH,
                           const int* kstart = nullptr) {  // (B) first key of each sequence, or null
    ICL_ASSERT(NH > 0 && C % NH == 0);
    const int hs = C / NH, C3 = 3 * C;
    const real scale = real(1) / std::sqrt(real(hs));
    const int nthreads = std::max(1, std::min(attention_max_threads(), B * NH));
#pragma omp parallel num_threads(nthreads) if (attention_detail::use_threads((double)B * NH * T * T * hs))
    {
#ifdef _OPENMP
        // this thread's P panel (ATT_BLOCK, T) at row stride T, the materialising form's. A padded stride (T + 16,
        // meant to keep the rows of T = 1024 out of one L1 set) measured slower on a Zen 3 (AVX2): the forward without
        // it 0.86-0.91 of the forward with it at T = 256, 512, 1024, 2048 (tools/attention_ab.sh, in process, the same
        // bits; pads of 8, 32, 64 floats slower still; docs/benchmarks.md 2026-12-06, evening). On a Zen 5 the pad had
        // measured within noise (0.90-0.98 of the materialising forward at T = 1024 with it, 0.92-1.08 without).
        real* a = scratch + (size_t)omp_get_thread_num() * attention_lse_slice(T);
#else
        real* a = scratch;
#endif
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            attention_detail::forward_pair(out + (size_t)b * T * C + h * hs, a, 0, T, lse + (size_t)bh * T,
                                           qkv + (size_t)b * T * C3 + h * hs, T, C, hs, scale, kstart, b);
        }
    }
}

// Backward of attention_forward_lse. ACCUMULATES into dqkv; with write = set, SETS it (GradWrite: each key block's
// products write their dv, dk rows once, and the first block's dq product covers every query row). Same scratch and
// kstart as the forward; out is the forward's output (it gives each row's Σ_j P[i,j]·dP[i,j] = dout_i · out_i
// without a pass over the row).
template <typename real>
void attention_backward_lse(real* dqkv,        // (B,T,3C)
                            real* scratch,     // attention_lse_scratch_size(B,T,NH) elements
                            const real* dout,  // (B,T,C)
                            const real* out,   // (B,T,C)   the forward's output
                            const real* qkv,   // (B,T,3C)
                            const real* lse,   // (B,NH,T)
                            int B, int T, int C, int NH,
                            const int* kstart = nullptr, GradWrite write = GradWrite::add) {
    ICL_ASSERT(NH > 0 && C % NH == 0);
    const int hs = C / NH, C3 = 3 * C, JB = ATT_BLOCK;
    const real scale = real(1) / std::sqrt(real(hs));
    const real beta_kv = write == GradWrite::set ? real(0) : real(1);  // dv, dk: one block writes each row
    const int nthreads = std::max(1, std::min(attention_max_threads(), B * NH));
#pragma omp parallel num_threads(nthreads) if (attention_detail::use_threads((double)B * NH * T * T * hs))
    {
#ifdef _OPENMP
        real* a0 = scratch + (size_t)omp_get_thread_num() * attention_lse_slice(T);  // (T+PAD,JB) P of a key block, …
#else
        real* a0 = scratch;
#endif
        real* da0 = a0 + (size_t)JB * (T + ATT_LSE_PAD);  // (T+PAD,JB) … dP, then dS in place
        real* D = da0 + (size_t)JB * (T + ATT_LSE_PAD);   // (T) Σ_j P[i,j]·dP[i,j] per row
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            const real* q = qkv + (size_t)b * T * C3 + h * hs;  // (T,hs), row stride 3C
            const real* k = q + C;
            const real* v = q + 2 * C;
            real* dq = dqkv + (size_t)b * T * C3 + h * hs;      // (T,hs), row stride 3C
            real* dk = dq + C;
            real* dv = dq + 2 * C;
            const real* dO = dout + (size_t)b * T * C + h * hs; // (T,hs), row stride C
            const real* O = out + (size_t)b * T * C + h * hs;   // (T,hs), row stride C
            const real* l = lse + (size_t)bh * T;               // (T)
            // float: every operand the key blocks share, packed once per head (gemm_pack_a / gemm_pack_b) instead of
            // again by each block's products: kᵀ, vᵀ (hs × T) as the B of P and dP, and dout, q, k (T × hs) as the B
            // of dv, dk and dq; and at long T (a_packed) q, dout as the A of P and dP (all their rows: a block then
            // starts at a whole row panel, r0 <= j0, and its rows before j0 are computed and not used). At short T
            // gemm_f32_packed_b reads q and dout where they are (rows 3C or C floats apart), as it reads the A of
            // dv, dk and dq (the block's Pᵀ, dSᵀ and dS) at every T. The same bits either way, and as packing per
            // product. Why the switch (a Zen 5, in place / packed, tools/attention_ab.sh, docs/benchmarks.md
            // 2026-12-05 afternoon): the backward 0.95-0.96 at T = 256, 0.99-1.00 at 1024, 1.04 at 2048 and 4096 —
            // a head's q and dout slices, 2·T·hs floats, stay in L2 while short (512 KB at T = 1024, hs = 64), and
            // the block products reuse each row about T / (2·JB) times.
            const bool a_packed = (size_t)T * hs > ATT_LSE_A_INPLACE;
            float *ktp = nullptr, *vtp = nullptr, *dop = nullptr, *qp = nullptr, *kp = nullptr, *qap = nullptr, *doap = nullptr;
            if constexpr (std::is_same_v<real, float>) {
                // the B packs first: whole panels of NR floats a row keep each of them 64-byte aligned
                const size_t nt = gemm_packed_b_size(hs, T), np = gemm_packed_b_size(T, hs), na = gemm_packed_a_size(T, hs);
                ktp = attention_detail::head_pack_buffer(attention_detail::attention_pack_floats(T, hs));
                vtp = ktp + nt;
                dop = vtp + nt;
                qp = dop + np;
                kp = qp + np;
                qap = kp + np;
                doap = qap + na;
                gemm_pack_b(true, hs, T, k, C3, ktp);
                gemm_pack_b(true, hs, T, v, C3, vtp);
                gemm_pack_b(false, T, hs, dO, C, dop);
                gemm_pack_b(false, T, hs, q, C3, qp);
                gemm_pack_b(false, T, hs, k, C3, kp);
                if (a_packed) {
                    gemm_pack_a(false, T, hs, q, C3, qap);
                    gemm_pack_a(false, T, hs, dO, C, doap);
                }
            }
            // Σ_j P[i,j]·dP[i,j] = Σ_j P[i,j]·(dout_i·v_j) = dout_i · out_i
            // (rows C floats apart, the first touch of this head's slices: fetched 8 rows ahead, which measured this
            // loop from ~5% of the backward at T = 256 to ~1% on a Zen 5)
            for (int i = 0; i < T; i++) {
                if (i + 16 < T)
                    for (int c = 0; c < hs; c += 64 / (int)sizeof(real)) {
                        __builtin_prefetch(dO + (size_t)(i + 16) * C + c);
                        __builtin_prefetch(O + (size_t)(i + 16) * C + c);
                    }
                D[i] = fixed_sum<real>((size_t)hs, [&](size_t c) { return dO[(size_t)i * C + c] * O[(size_t)i * C + c]; });
            }
            // one block of keys [j0,j1) at a time, against the query rows that see it (i >= j0)
            for (int j0 = 0; j0 < T; j0 += JB) {
                const int j1 = std::min(T, j0 + JB), jb = j1 - j0, n = T - j0;
                real* a = a0;    // (n,JB) P[j0:T, j0:j1]
                real* da = da0;  // (n,JB) dP[j0:T, j0:j1]
                // float: the diagonal block's staircase. Key panel c (keys j0 + c·NR … j0 + c·NR + NR − 1, NR =
                // gemm_panel_cols()) is seen by no query row before j0 + c·NR, so each product below skips the rows (or
                // the keys) on the masked side of that panel, at whole row panels (MR = gemm_panel_rows()) counted from
                // j0: cut(c) = c·NR rounded down to a whole row panel, the first row (from j0) a panel-c product computes
                // in place (packed, the row panels count from row 0 instead). The skipped P and dS entries are those the
                // elementwise pass below sets to +0 anyway.
                const int MRr = gemm_panel_rows(), NRc = gemm_panel_cols(), npan = (jb + NRc - 1) / NRc;
                auto cut = [&](int c) { return c * NRc / MRr * MRr; };
                // the forward's P[j0:T, j0:j1], recomputed: exp(scale · q_i·k_j − lse[i]) for lo(i) <= j <= i, else 0
                // out = P @ v   =>   dP[j0:T, j0:j1] = dout[j0:T] @ v[j0:j1]ᵀ
                // (float: the diagonal block's rows panel by panel of keys, from row j0 + cut(c) (in place) or from the
                // row panel holding j0 + c·NR (packed); the rows below it, from rd, against every key at once)
                if constexpr (std::is_same_v<real, float>) {
                    // the scratch's row 0 holds query row rb: j0 in place, the row panel holding j0 when packed (its rows
                    // rb..j0-1 are computed and not used)
                    // (rows rb..rd-1, the diagonal block's rows rounded up to whole row panels, go panel by panel)
                    const int rb = a_packed ? j0 / MRr * MRr : j0,
                              rd = std::min(T, a_packed ? (j0 + JB + MRr - 1) / MRr * MRr : j0 + (JB + MRr - 1) / MRr * MRr);
                    // P, dP[r:r1, j0+kj : j0+kj+nk] into the scratch's rows r-rb.., columns kj..
                    auto p_dp = [&](int r, int r1, int kj, int nk) {
                        float* pa = a0 + (size_t)(r - rb) * JB + kj;
                        float* pd = da0 + (size_t)(r - rb) * JB + kj;
                        if (a_packed) {
                            gemm_f32_packed_ab(r1 - r, nk, hs, scale, qap, hs, r, ktp, hs, j0 + kj, 0, 0.0f, pa, JB);
                            gemm_f32_packed_ab(r1 - r, nk, hs, 1.0f, doap, hs, r, vtp, hs, j0 + kj, 0, 0.0f, pd, JB);
                        } else {
                            gemm_f32_packed_b(false, r1 - r, nk, hs, scale, q + (size_t)r * C3, C3, ktp, hs, 0, j0 + kj, 0.0f, pa, JB);
                            gemm_f32_packed_b(false, r1 - r, nk, hs, 1.0f, dO + (size_t)r * C, C, vtp, hs, 0, j0 + kj, 0.0f, pd, JB);
                        }
                    };
                    for (int c = 0; c < npan; c++)
                        p_dp(a_packed ? (j0 + c * NRc) / MRr * MRr : j0 + cut(c), rd, c * NRc, std::min(NRc, jb - c * NRc));
                    if (rd < T) p_dp(rd, T, 0, jb);
                    a = a0 + (size_t)(j0 - rb) * JB;
                    da = da0 + (size_t)(j0 - rb) * JB;
                } else {
                    gemm<real>(false, true, n, jb, hs, scale, q + (size_t)j0 * C3, C3, k + (size_t)j0 * C3, C3, real(0), a, JB);
                    gemm<real>(false, true, n, jb, hs, real(1), dO + (size_t)j0 * C, C, v + (size_t)j0 * C3, C3, real(0), da, JB);
                }
                for (int i = j0; i < T; i++) {
                    real* prow = a + (size_t)(i - j0) * JB;   // (jb)
                    real* drow = da + (size_t)(i - j0) * JB;  // (jb)
                    const int lo = std::max(attention_detail::first_key(kstart, b, i), j0) - j0, hi = std::min(i, j1 - 1) - j0;
                    if (hi < lo) {  // no key of this block in row i's range
                        std::fill(prow, prow + jb, real(0));
                        std::fill(drow, drow + jb, real(0));
                        continue;
                    }
                    // P[i,j] = exp(preatt[i,j] − lse[i])   =>   dS[i,j] = P[i,j] · (dP[i,j] − D[i])   (in place, both in one
                    // pass over the row's keys lo..hi; outside them P and dS are +0, set rather than formed: those dP may
                    // not have been computed. A zero term leaves the products' sums below as they were, except perhaps
                    // the sign of a sum that is itself zero (0 · (dP − D) could be −0); tools/attention_ab.sh found the
                    // same bytes. The attention tests run this with a scratch of NaN.)
                    vmath::exp_shifted_grad(prow + lo, drow + lo, hi + 1 - lo, l[i], D[i]);
                    std::fill(prow, prow + lo, real(0));
                    std::fill(prow + hi + 1, prow + jb, real(0));
                    std::fill(drow, drow + lo, real(0));
                    std::fill(drow + hi + 1, drow + jb, real(0));
                }
                // out = P @ v                =>   dv[j0:j1] += P[j0:T, j0:j1]ᵀ @ dout[j0:T]
                // preatt = scale · q @ kᵀ   =>   dk[j0:j1] += scale · dSᵀ @ q[j0:T],   dq[j0:T] += scale · dS @ k[j0:j1]
                // (set: dv, dk rows [j0,j1) written here only; dq's rows first written by block 0, which has them all)
                const real beta_q = j0 == 0 ? beta_kv : real(1);
                if constexpr (std::is_same_v<real, float>) {
                    // dv, dk: P and dS of the keys from cut(c) on are 0 in the query rows before j0 + cut(c) (i < j), so
                    // where the product is one depth block (gemm_depth_block: n <= 384) the keys cut(c)..cut(c+1)-1 (whole
                    // row panels of dv, dk) take the rows from there: each sum is the same chain without its leading zero
                    // terms (a sum that starts at +0 and adds 0·x is +0)
                    const int kv_groups = gemm_depth_block(n) == n ? npan : 1;
                    auto dkv = [&](float alpha, const float* A, const float* Bp, float* Cb) {  // Cb[0:jb] (+)= alpha·Aᵀ·Bp[j0:T]
                        for (int c = 0; c < kv_groups; c++) {
                            const int k0 = cut(c), k1 = c + 1 < kv_groups ? cut(c + 1) : jb;  // keys k0..k1-1, rows from k0
                            gemm_f32_packed_b(true, k1 - k0, hs, n - k0, alpha, A + (size_t)k0 * JB + k0, JB, Bp, T, j0 + k0, 0,
                                              beta_kv, Cb + (size_t)k0 * C3, C3);
                        }
                    };
                    dkv(1.0f, a, dop, dv + (size_t)j0 * C3);
                    dkv(scale, da, qp, dk + (size_t)j0 * C3);
                    // dq: the rows cut(c)..cut(c+1)-1 see no key past c·NR + NR − 1: their product stops there (dS is 0
                    // beyond; the last rows take every key)
                    for (int c = 0; c < npan; c++) {
                        const int r0 = cut(c), r1 = c + 1 < npan ? cut(c + 1) : n, nk = c + 1 < npan ? (c + 1) * NRc : jb;
                        gemm_f32_packed_b(false, r1 - r0, hs, nk, scale, da + (size_t)r0 * JB, JB, kp, T, j0, 0, beta_q,
                                          dq + (size_t)(j0 + r0) * C3, C3);
                    }
                } else {
                    gemm<real>(true, false, jb, hs, n, real(1), a, JB, dO + (size_t)j0 * C, C, beta_kv, dv + (size_t)j0 * C3, C3);
                    gemm<real>(true, false, jb, hs, n, scale, da, JB, q + (size_t)j0 * C3, C3, beta_kv, dk + (size_t)j0 * C3, C3);
                    gemm<real>(false, false, n, hs, jb, scale, da, JB, k + (size_t)j0 * C3, C3, beta_q, dq + (size_t)j0 * C3, C3);
                }
            }
        }
    }
}

// att (B,NH,T,T) from qkv and the saved lse: what attention_forward saves, rebuilt for dumps and analyses (host,
// single pass; zeros outside each row's key range).
template <typename real>
void attention_probabilities(real* att, const real* qkv, const real* lse, int B, int T, int C, int NH, const int* kstart = nullptr) {
    ICL_ASSERT(NH > 0 && C % NH == 0);
    const int hs = C / NH, C3 = 3 * C;
    const real scale = real(1) / std::sqrt(real(hs));
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const real* q = qkv + (size_t)b * T * C3 + h * hs;
        real* a = att + (size_t)bh * T * T;  // (T,T)
        gemm<real>(false, true, T, T, hs, scale, q, C3, q + C, C3, real(0), a, T);
        for (int i = 0; i < T; i++) {
            real* row = a + (size_t)i * T;
            const int lo = attention_detail::first_key(kstart, b, i);
            for (int j = lo; j <= i; j++) row[j] = std::exp(row[j] - lse[(size_t)bh * T + i]);
            std::fill(row, row + lo, real(0));
            std::fill(row + i + 1, row + T, real(0));
        }
    }
}

}  // namespace icl
