// gemm.cpp — the fast fp32 GEMM behind icl::gemm<float> (declared in matmul.h).
//
//   C(M,N) = alpha·op(A)·op(B) + beta·C        row-major, op(X) = X or Xᵀ, leading dimensions lda/ldb/ldc
//
// The structure is the classic BLIS/Goto decomposition: five loops around a register-blocked micro-kernel.
//
//   for jc in N step NC                      B panel  (KC×NC)  packed once, streamed from L3
//     for pc in K step KC
//       pack op(B)[pc:pc+kc, jc:jc+nc]  ->  Bp : micro-panels of NR columns, each kc×NR, k-major
//       for ic in M step MC                  A block  (MC×KC)  packed, lives in L2
//         pack op(A)[ic:ic+mc, pc:pc+kc] -> Ap : micro-panels of MR rows, each kc×MR, k-major
//         for jr in nc step NR               B micro-panel (KC×NR) lives in L1
//           for ir in mc step MR
//             micro-kernel: C[ir:ir+MR, jr:jr+NR] (+)= alpha · Ap_panel · Bp_panel
//                           (AVX-512: 12×32 in 24 zmm accumulators; AVX2: 6×16 in 12 ymm; chosen at compile time;
//                            a last panel of at most NR/2 columns: the half tile, 12×16 / 6×8)
//   (AVX-512, gemm_f32: ir outer and jr inner instead, NC 512 — the A micro-panel lives in L1, the B panel in L2;
//    A_PANEL_OUTER below)
//
// Packing copies the operands into exactly the order the micro-kernel reads them, so all four transpose
// combinations cost the same after packing; panels are zero-padded to MR/NR, so the kernel never sees a
// ragged edge (edge tiles are computed into a small buffer and only the valid part is written). A last column
// panel of at most NR/2 columns goes through the half-width kernel (MR × NR/2), not the full one, and a last row
// panel of mr < MR rows through a kernel of mr rounded up to a multiple of MR/3 rows.
//
// Threads: C is cut into a tm×tn grid of rectangles (tm·tn = threads, chosen to balance the work), and
// each thread runs the five loops above on its own rectangle with its own packing buffers. No two threads
// ever write the same element of C, and every element is the same FMA chain over k (the KC split depends
// only on K), so the result is bit-identical run to run AND for any thread count. Called from inside an
// active OpenMP parallel region (e.g. attention's per-(batch, head) loop) it runs single-threaded.
//
// beta == 0 never reads C (so C may hold NaN/garbage); the first KC block applies beta, later ones add.
#include "layers/matmul.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX2__) && defined(__FMA__)
#include "layers/simd.h"
#define ICL_GEMM_AVX2 1
#endif
#if defined(ICL_GEMM_AVX2) && defined(__AVX512F__)
#define ICL_GEMM_AVX512 1  // the widest path: chosen at compile time from the target flags (-march=native on AVX-512)
#endif

namespace icl {
namespace {

// ---------------------------------------------------------------------------------------------------------
// Blocking parameters (first tuned on a Zen 3: 32 KiB L1d, 512 KiB L2 per core). On that machine, then, KC 256 vs 384,
// MC 72..240, NC 1024 vs 3072, prefetching C or not and unrolling k by 4 were all within noise of each other
// (about 180 GFLOP/s on 2 cores, 90% of the measured FMA peak). KC alone decides the bits (where each product's sum
// over k is rounded into C), so it is the same on every ISA; MC and NC only move work between passes.
// (The ICL_GEMM_* macros exist only for tuning experiments: g++ -DICL_GEMM_KC=256 ...)
#ifndef ICL_GEMM_KC
#define ICL_GEMM_KC 384
#endif
#ifndef ICL_GEMM_MC
#ifdef ICL_GEMM_AVX512
#define ICL_GEMM_MC 120
#else
// AVX2 (and the portable kernel): 8 micro-panels of 6 rows (72 KiB of A). On a Zen 3, 2 threads, 48 against 120 measured
// 0.88-0.94 of the time of one GPT step's 75 products in 6 in-process runs (tools/gemm_ab.sh; 1 thread 0.95; 24-96 0.92-1.00), with the
// same bits: MC never changes a product's arithmetic, only which packed rows share a pass over B. docs/benchmarks.md
// 2026-12-06, evening. An Intel Emerald Rapids's AVX2 build: 120 against 48 measured 0.999-1.008 in 4 runs, no difference.
#define ICL_GEMM_MC 48
#endif
#endif
// The order of the micro-tiles within a packed block, and NC with it. AVX-512: a B micro-panel (KC × 32 floats,
// 48 KiB) fills a 48 KiB L1d, so gemm_f32 keeps the A micro-panel (KC × 12, 18 KiB) in L1 instead (rows outer,
// columns inner) while B streams past it. On an Intel Emerald Rapids (2 threads) that measured 0.955-0.987 (median
// 0.9815) of one GPT step's 75 products against columns outer with NC 3072 in 10 in-process runs, 1024³ 0.93-1.02,
// 1 thread 0.987, the same bits (tools/gemm_ab.sh). NC 512 (a 768 KiB KC × NC panel, which fits an L2 of 1 MiB or
// more) was chosen; 768-3072 with rows outer measured the same (0.956-0.984). With NC 512 a thread packs its rows
// of op(A) once per 512 of its columns, which gemm_thread_grid's cost model does not count. The packed-B entries
// (attention's small products) keep columns outer: rows outer made attention 1.01-1.05 slower at T=256. The AVX2
// build there (its 24 KiB B panel fits beside A) was 1.023-1.042 slower with rows outer, so AVX2 keeps columns
// outer and NC 3072. docs/benchmarks.md 2026-12-06, night. Not measured on a Zen 4 or Zen 5 (32 / 48 KiB L1d,
// 1 MiB L2: A block and B panel together nearly fill it). ICL_GEMM_A_OUTER=0|1 overrides the order for experiments.
#ifndef ICL_GEMM_A_OUTER
#ifdef ICL_GEMM_AVX512
#define ICL_GEMM_A_OUTER 1
#else
#define ICL_GEMM_A_OUTER 0
#endif
#endif
constexpr bool A_PANEL_OUTER = ICL_GEMM_A_OUTER;
#ifndef ICL_GEMM_NC
#ifdef ICL_GEMM_AVX512
#define ICL_GEMM_NC 512
#else
#define ICL_GEMM_NC 3072
#endif
#endif
#ifdef ICL_GEMM_AVX512
constexpr int MR = 12;                // micro-tile rows    (12 broadcasts of A per k, folded into the FMAs)
constexpr int NR = 32;                // micro-tile columns (2 zmm of B per k)   -> 12×2 = 24 of the 32 zmm registers
#else
constexpr int MR = 6;                 // micro-tile rows    (6 broadcasts of A per k)
constexpr int NR = 16;                // micro-tile columns (2 ymm of B per k)   -> 6×2 = 12 accumulators
#endif
constexpr int VL = NR / 2;            // columns of one vector register (16 / 8): the half tile is MR × VL
constexpr int KC_MAX = ICL_GEMM_KC;   // depth of one packed block: micro-panels of B KC×NR×4 B = 24 KiB (AVX2), 48 KiB (AVX-512); of A 9 / 18 KiB
constexpr int MC_MAX = ICL_GEMM_MC;   // rows of one packed A block: MC×KC×4 B = 180 KiB (AVX-512), 72 KiB (AVX2) in L2 (multiple of MR)
constexpr int NC_MAX = ICL_GEMM_NC;   // columns of one packed B panel (multiple of NR): KC×NC×4 B = 768 KiB (AVX-512) in L2, 4.5 MiB (AVX2)

static_assert(MC_MAX % MR == 0 && NC_MAX % NR == 0, "block sizes must be multiples of the micro-tile");

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Split n into ceil(n/max) nearly equal blocks, rounded up to a multiple of `unit`, so that e.g. K=400 becomes
// two blocks of 200 rather than 384+16. Depends only on n, never on the thread count (determinism).
inline int balanced_block(int n, int max, int unit) {
    int nblocks = ceil_div(n, max);
    int b = ceil_div(n, nblocks);
    return std::min(max, ceil_div(b, unit) * unit);
}

// Per-thread packing buffers, allocated once per thread on first use (64-byte aligned).
struct PackBuffers {
    float* a = nullptr;  // Ap (MC_MAX, KC_MAX) as MC_MAX/MR micro-panels of (KC_MAX, MR)
    float* b = nullptr;  // Bp (KC_MAX, NC_MAX) as NC_MAX/NR micro-panels of (KC_MAX, NR)
    PackBuffers() {
        a = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * (size_t)MC_MAX * KC_MAX));
        b = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * (size_t)KC_MAX * NC_MAX));
        ICL_ASSERT_MSG(a && b, "out of memory for GEMM packing buffers");
    }
    ~PackBuffers() { std::free(a); std::free(b); }
    PackBuffers(const PackBuffers&) = delete;
    PackBuffers& operator=(const PackBuffers&) = delete;
};
PackBuffers& thread_buffers() {
    static thread_local PackBuffers buf;
    return buf;
}

// ---------------------------------------------------------------------------------------------------------
// Packing.
//
// pack_At_sums: pack_A of a transposed A (the same panels), and rsum[r] += op(A)[i0 + r, k0 + k] for k = 0, 1, …,
//         kc − 1 in that order, for the mc rows: the copy reads those floats anyway (gemm_f32_tn_sum: a bias gradient
//         beside dW). Eight micro-panels side by side per k (8·MR consecutive floats of A's row k), so that the sums are
//         six registers' independent chains: one panel's single register waited on its add's latency every k.
void pack_At_sums(const float* A, int lda, int i0, int k0, int mc, int kc, float* Ap, float* rsum) {
    constexpr int W = 8 * MR;  // rows of op(A) per group
    for (int p = 0; p < mc; p += W) {
        const int w = std::min(W, mc - p);  // rows in this group (the last panel may be ragged: zero-padded)
        const float* src = A + (size_t)k0 * lda + i0 + p;
        float s[W];
        for (int r = 0; r < w; r++) s[r] = rsum[p + r];
        for (int k = 0; k < kc; k++) {
            const float* a = src + (size_t)k * lda;
            for (int q = 0; q < w; q += MR) {  // micro-panel (p + q) / MR, row k
                float* d = Ap + (size_t)(p + q) * kc + (size_t)k * MR;
                if (q + MR <= w) std::memcpy(d, a + q, sizeof(float) * MR);
                else for (int r = 0; r < MR; r++) d[r] = q + r < w ? a[q + r] : 0.0f;
            }
#pragma omp simd
            for (int r = 0; r < w; r++) s[r] += a[r];
        }
        for (int r = 0; r < w; r++) rsum[p + r] = s[r];
    }
}

// pack_A: op(A)[i0:i0+mc, k0:k0+kc] -> Ap, micro-panel p (rows p*MR..p*MR+MR) at Ap + p*kc*MR,
//         element (r, k) of the panel at [k*MR + r]. Rows past mc are zero.
void pack_A(bool transA, const float* A, int lda, int i0, int k0, int mc, int kc, float* Ap) {
    for (int p = 0; p < mc; p += MR) {
        int mr = std::min(MR, mc - p);
        float* dst = Ap + (size_t)p * kc;  // (kc, MR)
        if (!transA) {
            // A (M,K): row i is contiguous in k. Read MR rows side by side.
            const float* rows[MR];
            for (int r = 0; r < MR; r++) rows[r] = A + (size_t)(i0 + p + std::min(r, mr - 1)) * lda + k0;
            if (mr == MR) {
                int k = 0;
#ifdef ICL_GEMM_AVX2
                // 8 k-values at a time through register transposes (simd.h): the MR rows are consecutive at
                // stride lda, 12 = 8 + 4 rows (AVX-512), 6 = 4 + 2 (AVX2). The same copy as the loop below.
                static_assert(MR == 12 || MR == 6, "A panels are packed as 8 + 4 or 4 + 2 rows");
                const float* src = rows[0];
                for (; k + 8 <= kc; k += 8) {
                    float* d = dst + (size_t)k * MR;
                    if constexpr (MR == 12) {
                        transpose8x8(d, MR, src + k, lda);
                        transpose4x8(d + 8, MR, src + (size_t)8 * lda + k, lda);
                    } else {
                        transpose4x8(d, MR, src + k, lda);
                        transpose2x8(d + 4, MR, src + (size_t)4 * lda + k, lda);
                    }
                }
#endif
                for (; k < kc; k++)
                    for (int r = 0; r < MR; r++) dst[k * MR + r] = rows[r][k];
            } else {
                for (int k = 0; k < kc; k++)
                    for (int r = 0; r < MR; r++) dst[k * MR + r] = r < mr ? rows[r][k] : 0.0f;
            }
        } else {
            // A stored (K,M): op(A)(i,k) = A[k*lda + i], so MR consecutive rows are contiguous.
            const float* src = A + (size_t)k0 * lda + i0 + p;
            if (mr == MR) {
                // one fixed-size copy of MR floats per k (GCC's vectorization of the element loop here built each
                // vector out of single floats: ~3% of `bench gemm`'s time in perf)
                for (int k = 0; k < kc; k++) std::memcpy(dst + (size_t)k * MR, src + (size_t)k * lda, sizeof(float) * MR);
            } else {
                for (int k = 0; k < kc; k++)
                    for (int r = 0; r < MR; r++) dst[k * MR + r] = r < mr ? src[(size_t)k * lda + r] : 0.0f;
            }
        }
    }
}

// pack_B: op(B)[k0:k0+kc, j0:j0+nc] -> Bp, micro-panel q (cols q*NR..q*NR+NR) at Bp + q*kc*NR,
//         element (k, c) of the panel at [k*NR + c]. Columns past nc are zero.
void pack_B(bool transB, const float* B, int ldb, int k0, int j0, int kc, int nc, float* Bp) {
    for (int q = 0; q < nc; q += NR) {
        int nr = std::min(NR, nc - q);
        float* dst = Bp + (size_t)q * kc;  // (kc, NR)
        if (!transB) {
            // B (K,N): row k is contiguous in j: copy NR floats per k.
            const float* src = B + (size_t)k0 * ldb + j0 + q;
            if (nr == NR) {
                for (int k = 0; k < kc; k++) {
#ifdef ICL_GEMM_AVX2
                    for (int h = 0; h < NR; h += 8) _mm256_store_ps(dst + k * NR + h, _mm256_loadu_ps(src + (size_t)k * ldb + h));
#else
                    std::memcpy(dst + k * NR, src + (size_t)k * ldb, sizeof(float) * NR);
#endif
                }
            } else {
                for (int k = 0; k < kc; k++)
                    for (int c = 0; c < NR; c++) dst[k * NR + c] = c < nr ? src[(size_t)k * ldb + c] : 0.0f;
            }
        } else {
            // B stored (N,K): op(B)(k,j) = B[j*ldb + k]: column j of op(B) is contiguous in k.
            const float* src = B + (size_t)(j0 + q) * ldb + k0;
            int k = 0;
#ifdef ICL_GEMM_AVX2
            if (nr == NR) {
                // 8×8 register transposes: 8 k-values of 8 columns -> 8 rows of the panel (two halves of NR).
                for (; k + 8 <= kc; k += 8)
                    for (int h = 0; h < NR / 8; h++)  // rows k..k+7 of the panel, columns h*8..h*8+7
                        transpose8x8(dst + (size_t)k * NR + h * 8, NR, src + (size_t)(h * 8) * ldb + k, ldb);
            }
#endif
            for (; k < kc; k++)
                for (int c = 0; c < NR; c++) dst[k * NR + c] = c < nr ? src[(size_t)c * ldb + k] : 0.0f;
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Micro-kernel: C (R, NV·VL) at stride ldc  <-  alpha · Ap (kc,MR)ᵀ-panel · Bp (kc, NV·VL) (+ beta · C), where
// Ap is a packed panel of row stride MR (R = MR: the full tile; R < MR, for a ragged last row panel, reads its first
// R rows) and Bp one of row stride NR (NV·VL = NR: the full tile; NV·VL = NR/2: the half tile reads its first half).
// beta_mode: 0 -> C = alpha·acc (C not read), 1 -> C = alpha·acc + C, 2 -> C = alpha·acc + beta·C.
enum BetaMode { BETA_ZERO = 0, BETA_ONE = 1, BETA_ANY = 2 };

#if defined(ICL_GEMM_AVX2)
// The vector micro-kernel, one template for both ISAs: F16 (AVX-512, zmm) or F8 (AVX2, ymm) of layers/simd.h, a
// tile of R rows (MR, or fewer for a ragged last row panel) × NV·VL columns in R·NV accumulators. NV = 2 is the
// full micro-tile (AVX-512: 12×32 in 24 zmm; AVX2: 6×16 in 12 ymm); NV = 1 the half tile, for a last column panel
// of at most VL columns (attention's P·V, dS·K, dSᵀ·Q at head size 16 on AVX-512), which the full kernel would
// compute at twice the cost, half of it on the panel's zero padding. Per k: NV loads of the B panel row, then for
// each of the R rows one FMA per vector with A's element broadcast from memory. Every C element is the same FMA
// chain over k whatever the ISA, NV and R, and the same final alpha·acc (+ C), so every tile gives the same bits:
// only which elements share a register changes.
#if defined(ICL_GEMM_AVX512)
using FV = F16;
#else
using FV = F8;
#endif
static_assert(FV::L == VL, "a vector register holds VL floats");

// c = alpha·acc (+ beta·c), then with BIAS + bias: rounded after the product, as a separate pass over C would.
template <bool BIAS>
inline void store_vec(float* c, FV::V acc, FV::V valpha, FV::V vbeta, int beta_mode, const float* bias) {
    FV::V t;
    if (beta_mode == BETA_ZERO) t = FV::mul(valpha, acc);
    else if (beta_mode == BETA_ONE) t = FV::fmadd(valpha, acc, FV::loadu(c));
    else t = FV::fmadd(valpha, acc, FV::mul(vbeta, FV::loadu(c)));
    if constexpr (BIAS) t = FV::add(t, FV::loadu(bias));
    FV::storeu(c, t);
}

// A's element (row r, depth k) is at Ap[k·as + r] (a packed panel: as = MR; a transposed A read in place: as = lda)
// or, with ROWS, at Ap[k + r·rs] (an untransposed A read in place: as = 1, rs = lda).
// Software prefetch inside the k loop, PF_A k-steps ahead in the A panel (packed, or a transposed A read in place;
// one prefetch a k-step, of the line holding that k-step's first A element) and PF_B ahead in the B micro-panel (the
// first of the two lines of that k-step's 32 floats). AVX-512 only: on an Intel Emerald Rapids (2 threads) 32/8
// measured 0.984-1.000 (median 0.989) of one GPT step's 75 products against none in 11 in-process runs, the same bits
// (tools/gemm_ab.sh); A alone (16 ahead) 0.995-1.016, B alone 0.988-1.010; the AVX2 build on the same machine
// 0.991-1.023, so it has none. An untransposed A read in place (ROWS: 12 rows lda apart) is not prefetched: a line
// of each row every 16 k-steps slowed attention's products 1.00-1.05. docs/benchmarks.md 2026-12-06, night. Not
// measured on a Zen 4 or Zen 5.
#ifdef ICL_GEMM_AVX512
constexpr int PF_A = 32, PF_B = 8;
#else
constexpr int PF_A = 0, PF_B = 0;
#endif
template <int NV, int R = MR, bool ROWS = false, bool BIAS = false>
void micro_kernel(int kc, const float* __restrict Ap, int as, int rs, const float* __restrict Bp, float* C, int ldc,
                  float alpha, float beta, int beta_mode, const float* bias) {
    static_assert(R >= 1 && R <= MR, "a tile has at most MR rows");
    FV::V c[R][NV];  // row r: columns v·VL … v·VL + VL − 1 in c[r][v]
#pragma GCC unroll 12
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) c[r][v] = FV::zero();
    for (int r = 0; r < R; r++) {  // the C tile is needed only after the k loop: start fetching it now
        _mm_prefetch((const char*)(C + (size_t)r * ldc), _MM_HINT_T0);
        _mm_prefetch((const char*)(C + (size_t)r * ldc + NV * VL - 1), _MM_HINT_T0);
    }
    for (int k = 0; k < kc; k++) {
        FV::V b[NV];
        if constexpr (!ROWS && PF_A > 0) _mm_prefetch((const char*)(Ap + (size_t)PF_A * as), _MM_HINT_T0);
        if constexpr (PF_B > 0) _mm_prefetch((const char*)(Bp + PF_B * NR), _MM_HINT_T0);
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) b[v] = FV::load(Bp + v * VL);
#pragma GCC unroll 12
        for (int r = 0; r < R; r++) {  // the first R rows of the MR-row panel
            const FV::V a = FV::set1(ROWS ? Ap[(size_t)r * rs] : Ap[r]);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) c[r][v] = FV::fmadd(a, b[v], c[r][v]);
        }
        Ap += as;  // the next k: MR further in a packed panel (whatever R), lda in a transposed A read in place, 1 with ROWS
        Bp += NR;  // the panel's row stride is NR whatever NV: the half tile reads the first VL columns of it
    }
    const FV::V va = FV::set1(alpha), vb = FV::set1(beta);
#pragma GCC unroll 12
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) store_vec<BIAS>(C + (size_t)r * ldc + v * VL, c[r][v], va, vb, beta_mode, BIAS ? bias + v * VL : nullptr);
}
#else
// Portable micro-kernel: the same arithmetic in plain loops (the compiler vectorizes what it can), NV·VL columns.
template <int NV, int R = MR, bool ROWS = false, bool BIAS = false>
void micro_kernel(int kc, const float* __restrict Ap, int as, int rs, const float* __restrict Bp, float* C, int ldc,
                  float alpha, float beta, int beta_mode, const float* bias) {
    constexpr int W = NV * VL;
    if (!ROWS) rs = 1;
    // One row of the tile at a time, so its W accumulators fit in registers even with 16 narrow SIMD registers.
    // GCC/Clang vector types make the accumulators registers (SSE2 on any x86-64) without intrinsics.
    float acc[R][W];
#if defined(__GNUC__)
    typedef float v4 __attribute__((vector_size(16)));
    static_assert(W % 4 == 0, "whole 4-float vectors");
    for (int r = 0; r < R; r++) {
        v4 s[W / 4] = {};  // columns 0-3, 4-7, …
        for (int k = 0; k < kc; k++) {
            const float a = Ap[(size_t)k * as + (size_t)r * rs];
            for (int q = 0; q < W / 4; q++) {
                v4 bq;
                std::memcpy(&bq, Bp + k * NR + 4 * q, 16);
                s[q] += a * bq;
            }
        }
        for (int q = 0; q < W / 4; q++) std::memcpy(&acc[r][4 * q], &s[q], 16);
    }
#else
    for (int r = 0; r < R; r++)
        for (int c = 0; c < W; c++) {
            float sum = 0;
            for (int k = 0; k < kc; k++) sum += Ap[(size_t)k * as + (size_t)r * rs] * Bp[k * NR + c];
            acc[r][c] = sum;
        }
#endif
    for (int r = 0; r < R; r++) {
        float* crow = C + (size_t)r * ldc;
        for (int c = 0; c < W; c++) {
            float t;
            if (beta_mode == BETA_ZERO) t = alpha * acc[r][c];
            else if (beta_mode == BETA_ONE) t = alpha * acc[r][c] + crow[c];
            else t = alpha * acc[r][c] + beta * crow[c];
            crow[c] = BIAS ? t + bias[c] : t;
        }
    }
}
#endif

// A ragged tile (mr < MR or nr < NV·VL): run a kernel of R = mr rounded up to a multiple of MR/3 rows (a
// last row panel of 4 rows on AVX-512, e.g. M = 256 = 21·12 + 4, costs 4 rows of work, not 12) on a private
// R×(NV·VL) buffer (after copying the valid part of C in, unless beta == 0), then write back only the valid part.
// Same arithmetic as a whole tile: each element's FMA chain over k does not depend on R.
constexpr int MR3 = MR / 3;  // 4 (AVX-512) or 2 (AVX2 / portable)
static_assert(MR % 3 == 0, "ragged row panels round up to thirds of MR");
template <int NV, int R, bool ROWS, bool BIAS>
void edge_rows(int kc, const float* Ap, int as, int rs, const float* Bp, float* C, int ldc, int mr, int nr, float alpha,
               float beta, int beta_mode, const float* bias) {
    constexpr int W = NV * VL;
    alignas(64) float tile[R * W] = {};  // (R, W)
    alignas(64) float bt[BIAS ? W : 1];  // with BIAS: the bias of the valid columns, zero-padded
    if (beta_mode != BETA_ZERO)
        for (int r = 0; r < mr; r++)
            for (int c = 0; c < nr; c++) tile[r * W + c] = C[(size_t)r * ldc + c];
    if constexpr (BIAS) {
        std::fill(bt, bt + W, 0.0f);
        std::copy(bias, bias + nr, bt);
    }
    micro_kernel<NV, R, ROWS, BIAS>(kc, Ap, as, rs, Bp, tile, W, alpha, beta, beta_mode, BIAS ? bt : nullptr);
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < nr; c++) C[(size_t)r * ldc + c] = tile[r * W + c];
}
template <int NV, bool ROWS, bool BIAS>
void edge_kernel(int kc, const float* Ap, int as, int rs, const float* Bp, float* C, int ldc, int mr, int nr, float alpha,
                 float beta, int beta_mode, const float* bias) {
    if (mr <= MR3) edge_rows<NV, MR3, ROWS, BIAS>(kc, Ap, as, rs, Bp, C, ldc, mr, nr, alpha, beta, beta_mode, bias);
    else if (mr <= 2 * MR3) edge_rows<NV, 2 * MR3, ROWS, BIAS>(kc, Ap, as, rs, Bp, C, ldc, mr, nr, alpha, beta, beta_mode, bias);
    else edge_rows<NV, MR, ROWS, BIAS>(kc, Ap, as, rs, Bp, C, ldc, mr, nr, alpha, beta, beta_mode, bias);
}
// One tile of C (mr ≤ MR rows, nr ≤ NR columns): the full micro-kernel, its half tile (nr ≤ VL), or their edges.
// BIAS: bias holds the tile's nr columns of a bias added to every row after the product (the last K block's tile).
// A template argument, so that the products without one run the kernel they ran before, unchanged.
template <bool ROWS, bool BIAS>
void tile_kernel(int kc, const float* Ap, int as, int rs, const float* Bp, float* C, int ldc, int mr, int nr, float alpha,
                 float beta, int beta_mode, const float* bias) {
    if (nr > VL) {  // the full tile
        if (mr == MR && nr == NR) micro_kernel<2, MR, ROWS, BIAS>(kc, Ap, as, rs, Bp, C, ldc, alpha, beta, beta_mode, bias);
        else edge_kernel<2, ROWS, BIAS>(kc, Ap, as, rs, Bp, C, ldc, mr, nr, alpha, beta, beta_mode, bias);
    } else {  // a last panel of at most VL columns: the half tile
        if (mr == MR && nr == VL) micro_kernel<1, MR, ROWS, BIAS>(kc, Ap, as, rs, Bp, C, ldc, alpha, beta, beta_mode, bias);
        else edge_kernel<1, ROWS, BIAS>(kc, Ap, as, rs, Bp, C, ldc, mr, nr, alpha, beta, beta_mode, bias);
    }
}

// ---------------------------------------------------------------------------------------------------------
// One thread's share: C[m0:m1, n0:n1] = alpha·op(A)[m0:m1,:]·op(B)[:, n0:n1] + beta·C[m0:m1, n0:n1].
// Bpk non-null: op(B) is already packed (gemm_pack_b, all bk of its rows at once; n0 a multiple of NR): its micro-panel
// for columns j.. and the KC block at pc is at Bpk + (j/NR)·bk·NR + pc·NR, the same floats pack_B would write.
// Apk likewise for op(A) (gemm_pack_a, ka deep; m0 a multiple of MR, as every thread's share is).
// a_in_place (Apk null): the micro-kernel broadcasts op(A)'s elements from A itself instead of from a packed copy:
// a transposed A's MR rows at one k are MR consecutive floats of its row k (k stride lda), an untransposed A's are
// MR rows lda apart (k stride 1). The same FMA chains, so the same bits, without the copy. Only a ragged last panel
// (mr < MR, whose rounded-up tile would read past op(A)'s last row) is packed, once per block.
// rsum (a transposed A packed here; null: none): rsum[i] += Σ_k op(A)[i, k] for this share's rows, k in order — fed
// by the packing of the first column block (the K blocks come in order), so each sum has a plain loop's bits.
void gemm_rect(bool transA, bool transB, int m0, int m1, int n0, int n1, int K, float alpha, const float* A, int lda,
               const float* Apk, int ka, bool a_in_place, const float* B, int ldb, const float* Bpk, int bk, float beta,
               float* C, int ldc, const float* bias, float* rsum) {
    if (m1 <= m0 || n1 <= n0) return;
    ICL_ASSERT(!rsum || (transA && !Apk && !a_in_place));
    PackBuffers& buf = thread_buffers();
    const int kc_blk = balanced_block(K, KC_MAX, 1);
    const int mc_blk = balanced_block(m1 - m0, MC_MAX, MR);
    const int nc_blk = balanced_block(n1 - n0, NC_MAX, NR);
    const int beta_mode0 = beta == 0.0f ? BETA_ZERO : beta == 1.0f ? BETA_ONE : BETA_ANY;

    for (int jc = n0; jc < n1; jc += nc_blk) {
        const int nc = std::min(nc_blk, n1 - jc);
        for (int pc = 0; pc < K; pc += kc_blk) {
            const int kc = std::min(kc_blk, K - pc);
            const int beta_mode = pc == 0 ? beta_mode0 : BETA_ONE;  // later K blocks accumulate
            if (!Bpk) pack_B(transB, B, ldb, pc, jc, kc, nc, buf.b);
            for (int ic = m0; ic < m1; ic += mc_blk) {
                const int mc = std::min(mc_blk, m1 - ic);
                const int ragged = mc % MR ? mc / MR * MR : -1;  // a_in_place: the ragged last panel, packed
                if (a_in_place && ragged >= 0) pack_A(transA, A, lda, ic + ragged, pc, mc - ragged, kc, buf.a);
                else if (rsum && jc == n0) pack_At_sums(A, lda, ic, pc, mc, kc, buf.a, rsum + ic);
                else if (!Apk && !a_in_place) pack_A(transA, A, lda, ic, pc, mc, kc, buf.a);
                // One micro-tile: rows ir.. of the packed A block against columns jr.. of the B panel.
                auto tile = [&](int ir, int jr) {
                    const int mr = std::min(MR, mc - ir), nr = std::min(NR, nc - jr);
                    const float* Bp = Bpk ? Bpk + (size_t)(jc + jr) / NR * bk * NR + (size_t)pc * NR  // micro-panel (kc, NR)
                                          : buf.b + (size_t)jr * kc;
                    const float* Ap = Apk ? Apk + (size_t)(ic + ir) / MR * ka * MR + (size_t)pc * MR  // micro-panel (kc, MR)
                                    : !a_in_place ? buf.a + (size_t)ir * kc
                                    : ir == ragged ? buf.a
                                    : transA ? A + (size_t)pc * lda + ic + ir      // op(A)[i, k] = A[k·lda + i]
                                             : A + (size_t)(ic + ir) * lda + pc;    // op(A)[i, k] = A[i·lda + k]
                    const bool in_place = a_in_place && ir != ragged;
                    float* Ct = C + (size_t)(ic + ir) * ldc + jc + jr;
                    if (bias && pc + kc == K) {  // after the last K block: + the bias of these columns
                        const float* bt = bias + jc + jr;
                        if (in_place && !transA) tile_kernel<true, true>(kc, Ap, 1, lda, Bp, Ct, ldc, mr, nr, alpha, beta, beta_mode, bt);
                        else tile_kernel<false, true>(kc, Ap, in_place ? lda : MR, 1, Bp, Ct, ldc, mr, nr, alpha, beta, beta_mode, bt);
                    } else if (in_place && !transA) {
                        tile_kernel<true, false>(kc, Ap, 1, lda, Bp, Ct, ldc, mr, nr, alpha, beta, beta_mode, nullptr);
                    } else {
                        tile_kernel<false, false>(kc, Ap, in_place ? lda : MR, 1, Bp, Ct, ldc, mr, nr, alpha, beta, beta_mode, nullptr);
                    }
                };
                if (A_PANEL_OUTER && !Bpk) {  // gemm_f32 on AVX-512: an A micro-panel stays in L1, the B panel streams past
                    for (int ir = 0; ir < mc; ir += MR)
                        for (int jr = 0; jr < nc; jr += NR) tile(ir, jr);
                } else {  // a B micro-panel stays in L1 while the A block streams past it
                    for (int jr = 0; jr < nc; jr += NR)
                        for (int ir = 0; ir < mc; ir += MR) tile(ir, jr);
                }
            }
        }
    }
}

// C[m0:m1, n0:n1] *= beta (beta == 0: set to zero without reading), then += bias[n0:n1] in every row when given. Used
// when K == 0 or alpha == 0.
void scale_rect(int m0, int m1, int n0, int n1, float beta, float* C, int ldc, const float* bias) {
    for (int i = m0; i < m1; i++) {
        float* c = C + (size_t)i * ldc;
        if (beta == 0.0f) for (int j = n0; j < n1; j++) c[j] = 0.0f;
        else if (beta != 1.0f) for (int j = n0; j < n1; j++) c[j] *= beta;
        if (bias) for (int j = n0; j < n1; j++) c[j] += bias[j];
    }
}

}  // namespace

const char* gemm_isa() {
#if defined(ICL_GEMM_AVX512)
    return "AVX-512 (12x32 micro-kernel)";
#elif defined(ICL_GEMM_AVX2)
    return "AVX2+FMA (6x16 micro-kernel)";
#else
    return "portable (6x16, compiler-vectorized)";
#endif
}

// The thread grid of gemm_f32 (declared in matmul.h): the split of C with the least work per thread, counted as its
// rectangle (rounded up to whole micro-tiles) plus its packing: each thread packs its rows of op(A) and its columns of
// op(B), K deep (on AVX-512 its rows once per NC = 512 of its columns, which this model leaves out). Per k, the
// micro-kernels do rows·cols multiply-adds at 2·VL a cycle (two FMA pipes) and packing copies rows + cols floats at
// about 0.4 cycles each (0.28-0.67 by kind of panel, timed alone on a Zen 5), so a packed row or column weighs about
// 0.8·VL elements of C. That splits the larger of M and N: M = 2048 activation rows over N = 384 output columns goes by
// rows (each thread packs all of the small B and half of A), although 2048 = 170.7 row tiles rounds up 0.8% more than
// the column split would, which has each thread pack all of A (those products 5-18% faster on a 2-core Zen 5, operands
// from memory; docs/benchmarks.md); a weight gradient's N = C over M = OC < C goes by columns. On a tie, rows. The
// split never changes the bits (see the top of the file), only the time.
void gemm_thread_grid(int M, int N, int nt, int& tm, int& tn) {
    const int row_units = ceil_div(M, MR), col_units = ceil_div(N, NR);
    constexpr double PACK_WEIGHT = 0.8 * VL;
    tm = nt; tn = 1;
    double best = -1;
    for (int cand = nt; cand >= 1; cand--) {
        if (nt % cand) continue;
        int ctn = nt / cand;
        const double rows = (double)ceil_div(row_units, cand) * MR, cols = (double)ceil_div(col_units, ctn) * NR;
        const double cost = rows * cols + PACK_WEIGHT * (rows + cols);
        if (best < 0 || cost < best * 0.999) {
            best = cost; tm = cand; tn = ctn;
        }
    }
}

namespace {
// gemm_f32 and the packed entries: op(A) is A (Apk null) or its pack Apk (ka deep), op(B) is B (Bpk null) or its
// pack Bpk (bk deep); a_in_place: A read where it is (gemm_rect).
// rsum: gemm_rect's row sums of op(A), formed by the threads whose rectangles hold C's column 0 (the others pack the
// same rows again and leave them).
void gemm_run(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* Apk, int ka,
              bool a_in_place, const float* B, int ldb, const float* Bpk, int bk, float beta, float* C, int ldc,
              const float* bias = nullptr, float* rsum = nullptr) {
    const bool no_product = K == 0 || alpha == 0.0f;

    // Thread count: 1 inside an active parallel region; otherwise the OpenMP default, reduced for small
    // products (a thread should get at least ~2^18 multiply-adds to pay for waking it).
    int nt = 1;
#ifdef _OPENMP
    if (!omp_in_parallel()) {
        double work = (double)M * N * (no_product ? 1 : K);
        nt = (int)std::max(1.0, std::min((double)omp_get_max_threads(), work / (1 << 18)));
    }
#endif

    int tm, tn;
    gemm_thread_grid(M, N, nt, tm, tn);
    const int row_units = ceil_div(M, MR), col_units = ceil_div(N, NR);

    auto run = [&](int t) {
        int ti = t / tn, tj = t % tn;
        // Balanced split in whole micro-tiles: thread ti gets row units [ti*U/tm, (ti+1)*U/tm).
        int m0 = std::min(M, (int)((long)ti * row_units / tm) * MR), m1 = std::min(M, (int)((long)(ti + 1) * row_units / tm) * MR);
        int n0 = std::min(N, (int)((long)tj * col_units / tn) * NR), n1 = std::min(N, (int)((long)(tj + 1) * col_units / tn) * NR);
        if (no_product) scale_rect(m0, m1, n0, n1, beta, C, ldc, bias);
        else gemm_rect(transA, transB, m0, m1, n0, n1, K, alpha, A, lda, Apk, ka, a_in_place, B, ldb, Bpk, bk, beta, C, ldc, bias,
                       n0 == 0 && n1 > n0 ? rsum : nullptr);
    };

    if (nt == 1) {
        run(0);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
    {
        // If the runtime gives fewer threads than asked, the ones we have take the remaining rectangles.
        for (int t = omp_get_thread_num(); t < nt; t += omp_get_num_threads()) run(t);
    }
#endif
}

}  // namespace

void gemm_f32(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
              int ldb, float beta, float* C, int ldc) {
    gemm_f32_bias(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
}

void gemm_f32_bias(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                   int ldb, float beta, float* C, int ldc, const float* bias) {
    ICL_ASSERT(M >= 0 && N >= 0 && K >= 0);
    if (M == 0 || N == 0) return;
    ICL_ASSERT(ldc >= N);
    if (K > 0 && alpha != 0.0f) {
        ICL_ASSERT_MSG(lda >= (transA ? M : K), strfmt("gemm: lda=%d too small", lda));
        ICL_ASSERT_MSG(ldb >= (transB ? K : N), strfmt("gemm: ldb=%d too small", ldb));
    }
    gemm_run(transA, transB, M, N, K, alpha, A, lda, nullptr, 0, false, B, ldb, nullptr, 0, beta, C, ldc, bias);
}

void gemm_f32_tn_sum(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float beta, float* C,
                     int ldc, float* a_sums) {
    ICL_ASSERT(M >= 0 && N >= 0 && K >= 0);
    if (M == 0) return;
    if (N > 0) ICL_ASSERT(ldc >= N);
    if (K > 0) ICL_ASSERT_MSG(lda >= M && (N == 0 || ldb >= N), strfmt("gemm_f32_tn_sum: lda=%d or ldb=%d too small", lda, ldb));
    if (N == 0 || K == 0 || alpha == 0.0f) {  // no packing of A to ride on: the sums alone, then C
        for (int k = 0; k < K; k++)
            for (int i = 0; i < M; i++) a_sums[i] += A[(size_t)k * lda + i];
        if (N > 0) gemm_run(true, false, M, N, K, alpha, A, lda, nullptr, 0, false, B, ldb, nullptr, 0, beta, C, ldc);
        return;
    }
    gemm_run(true, false, M, N, K, alpha, A, lda, nullptr, 0, false, B, ldb, nullptr, 0, beta, C, ldc, nullptr, a_sums);
}

// ---------------------------------------------------------------------------------------------------------
// A pre-packed op(B) (matmul.h): pack_B over all K rows at once, so its micro-panel q (columns q·NR …) is K × NR
// at Bp + q·K·NR, and the KC block at pc of it starts pc·NR further on — exactly what gemm_rect packs per block.
int gemm_panel_cols() { return NR; }
size_t gemm_packed_b_size(int K, int N) { return (size_t)K * ceil_div(N, NR) * NR; }
void gemm_pack_b(bool transB, int K, int N, const float* B, int ldb, float* Bp) {
    ICL_ASSERT(K >= 0 && N >= 0 && ldb >= (transB ? K : N));
    ICL_ASSERT_MSG(reinterpret_cast<uintptr_t>(Bp) % 64 == 0, "gemm_pack_b: the pack must be 64-byte aligned");
    if (K > 0 && N > 0) pack_B(transB, B, ldb, 0, 0, K, N, Bp);
}
void gemm_f32_packed_b(bool transA, int M, int N, int K, float alpha, const float* A, int lda, const float* Bp, int Kp,
                       int k0, int j0, float beta, float* C, int ldc) {
    ICL_ASSERT(M >= 0 && N >= 0 && K >= 0 && k0 >= 0 && j0 >= 0);
    if (M == 0 || N == 0) return;
    ICL_ASSERT(ldc >= N);
    ICL_ASSERT_MSG(k0 + K <= Kp && j0 % NR == 0, strfmt("gemm_f32_packed_b: rows %d..%d of a pack of %d, column %d", k0, k0 + K, Kp, j0));
    if (K > 0 && alpha != 0.0f) ICL_ASSERT_MSG(lda >= (transA ? M : K), strfmt("gemm: lda=%d too small", lda));
    // A (attention's fresh blocks: q, P; Pᵀ, dSᵀ, dS) is read in place, not packed
    gemm_run(transA, false, M, N, K, alpha, A, lda, nullptr, 0, true, nullptr, 0, Bp + (size_t)j0 / NR * Kp * NR + (size_t)k0 * NR, Kp,
             beta, C, ldc);
}
// The same for op(A): pack_A over all K columns at once, micro-panel p (rows p·MR …) K × MR at Ap + p·K·MR.
int gemm_panel_rows() { return MR; }
int gemm_depth_block(int K) { return balanced_block(K, KC_MAX, 1); }
size_t gemm_packed_a_size(int M, int K) { return (size_t)ceil_div(M, MR) * MR * K; }
void gemm_pack_a(bool transA, int M, int K, const float* A, int lda, float* Ap) {
    ICL_ASSERT(M >= 0 && K >= 0 && lda >= (transA ? M : K));
    if (K > 0 && M > 0) pack_A(transA, A, lda, 0, 0, M, K, Ap);
}
void gemm_f32_packed_ab(int M, int N, int K, float alpha, const float* Ap, int Kpa, int i0, const float* Bp, int Kpb, int j0,
                        int k0, float beta, float* C, int ldc) {
    ICL_ASSERT(M >= 0 && N >= 0 && K >= 0 && k0 >= 0 && i0 >= 0 && j0 >= 0);
    if (M == 0 || N == 0) return;
    ICL_ASSERT(ldc >= N);
    ICL_ASSERT_MSG(k0 + K <= Kpa && k0 + K <= Kpb && i0 % MR == 0 && j0 % NR == 0,
                   strfmt("gemm_f32_packed_ab: depth %d..%d of packs of %d and %d, row %d, column %d", k0, k0 + K, Kpa, Kpb, i0, j0));
    gemm_run(false, false, M, N, K, alpha, nullptr, 0, Ap + (size_t)i0 / MR * Kpa * MR + (size_t)k0 * MR, Kpa, false, nullptr, 0,
             Bp + (size_t)j0 / NR * Kpb * NR + (size_t)k0 * NR, Kpb, beta, C, ldc);
}

}  // namespace icl
