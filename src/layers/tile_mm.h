// tile_mm.h — the register-tiled small matrix products behind kernel attention's chunked form
// (layers/kernel_attention.h): mm_nn with the triangular shapes the causal chunks need, tri_chain (a masked
// product C += tri(A·B)·D), and a transpose. Every C element is a chain c = tile_madd(a, b, c) in k order (a fused
// multiply-add on every build with FMA or AVX-512 instructions), so the results are the definition's numerics up to
// the order of the terms.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>

#ifdef __AVX2__
#include "layers/simd.h"
#endif

namespace icl {

constexpr int KA_CHUNK = 64;  // tokens per chunk of kernel attention's parallel form (the row stride of tri_chain's Q)

namespace kattn_detail {

// The chunked form's small products: C (M,N) = [C +] A (M,K) · B (K,N), all row-major, on the calling thread.
// gemm_f32 packs its operands for large matrices; these products are tiny (64×64×16, 64×16×64, …) and packing
// dominated. Here an MM_RB×CB tile of C (CB = 16 floats / 8 doubles = 64 bytes: one AVX-512 or two AVX2 registers
// per row) stays in registers while k runs; A is read in place (one broadcast per row and k), B rows in place
// (ldb may be a stride, e.g. v inside qkv). With AVX-512 a tile is two such column blocks wide (MM_WIDE = 2)
// wherever both are wanted: 16 accumulators instead of 8, and one broadcast of A feeds two multiply-adds instead of
// one (wide tiles plus the vector-register tiles below: with a throwaway program timing
// kernel_attention_forward/backward at B = 1, T = 1024, 4 heads of 64, 1 thread, Zen 5, medians of 15 alternating
// runs, forward 1.52 → 1.29 ms, backward 4.19 → 3.67 ms; heads of 16, whose k = 16 products stay narrow: within
// noise; `iclca bench` numbers in docs/benchmarks.md). Every C element is the same chain c = fma(a_k, b_k, c), k in
// order, whatever the tile width and ISA: fma rounds the exact a·b + c once, in a zmm lane, a ymm lane or std::fma
// alike, so every ISA gives the same bits. (A build without FMA instructions, `make ARCH_FLAGS=`, would reach
// std::fma through a libm call per term, so there tile_madd is a multiply and an add: other last digits than the
// vector builds — that build's exp and RoPE differ from theirs anyway — at the speed of plain vector code.)
//
// Triangular shapes (row block [i0, i0+MM_RB) of C; only what the chunked form needs is computed):
//   lower_cols  only column tiles reaching j <= i            (e.g. P = Â Ĉᵀ, wanted on and below the diagonal)
//   upper_cols  only column tiles reaching j >= i            (e.g. Pᵀ = Ĉ Âᵀ, wanted on and above it)
//   lower_k     k < i0 + MM_RB: A is lower triangular        (e.g. tril(P)·V; A must be 0 above the diagonal
//   upper_k     k >= i0:        A is upper triangular         inside the row block — see zero_tri_block)
// Rows of a block share one k range and one set of column tiles, so a few entries on the wrong side of the
// diagonal, inside the row block, are computed (for *_cols) or read (for *_k): zero_tri_block clears them.
#ifdef __AVX512F__
constexpr int MM_RB = 8;    // 8 rows × 1 zmm (a narrow tile) or × 2 (a wide one: 16 accumulators): AVX-512 has 32
constexpr int MM_WIDE = 2;  // vector registers.
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int MM_RB = 6;    // AVX2 has 16: 6 rows × 2 ymm = 12 accumulators, + 2 rows of B + 1 broadcast of A.
constexpr int MM_WIDE = 1;  // (4 rows, 8 accumulators, had exactly the 2 pipes × 4 cycles of fma latency in flight.)
#else
constexpr int MM_RB = 4;
constexpr int MM_WIDE = 1;
#endif
// A row block of fewer than MM_RB rows (the last of a chunk, 64 = 10·6 + 4 on AVX2, or of a shorter chunk) runs the
// same tile with R = its row count (mm_tile_rows below): the same chain per C element, so the same bits.
enum class Tri { full, lower_cols, upper_cols, lower_k, upper_k };
// c + a·b for the tiles: one fma where the build has fused multiply-add instructions, else a multiply and an add (see
// above). AVX-512F has its own (EVEX) fma instructions, so g++ inlines std::fma under -mavx512f even without -mfma,
// where it defines no __FMA__: the AVX-512 vector tiles use fma there too, and every tile width must agree.
template <typename real>
inline real tile_madd(real a, real b, real c) {
#if defined(__FMA__) || defined(__AVX512F__)
    return std::fma(a, b, c);
#else
    return c + a * b;
#endif
}
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define ICL_TILE_VEC 1
#ifdef __AVX512F__
using TileF = F16;  // one zmm per 16 columns (AVX-512F's own fma: also under -mavx512f without -mfma)
#else
using TileF = F8;   // one ymm per 8 columns
#endif
// mm_tile's tiles (below) for float in vector registers, one template for both ISAs over simd.h's F16 / F8: the same
// operations (c = fma(a, b, c), k in order, so the same bits as the loops' tile_madd, an fma there), but the
// R × NV accumulators pinned in registers — g++ kept part of the generic loops' tile on the stack (AVX2 too:
// perf of a throwaway forward + backward timer, heads of 16, put ~10% of all samples, ~18% of those outside its
// cache-flushing memset, on the generic tile's loads, stores and selects).
// (Until commit 034dcdf the AVX-512 tiles were a multiply then an add, which the build's -ffp-contract=off keeps
// apart: one FMA instead of two instructions per term made the kernel-LM's heads of 64 faster — numbers in
// docs/benchmarks.md.)
template <int NV, int R>
inline void mm_tile_vec(int i0, int j0, int kbeg, int kend, const float* A, int lda, const float* B, int ldb, float* C,
                        int ldc, bool accumulate) {
    using F = TileF;
    typename F::V c[R][NV];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            c[r][v] = accumulate ? F::loadu(C + (size_t)(i0 + r) * ldc + j0 + F::L * v) : F::zero();
    const float* a = A + (size_t)i0 * lda;
    for (int k = kbeg; k < kend; k++) {
        const float* b = B + (size_t)k * ldb + j0;
        typename F::V bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = F::loadu(b + F::L * v);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const typename F::V ar = F::set1(a[(size_t)r * lda + k]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) c[r][v] = F::fmadd(ar, bv[v], c[r][v]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) F::storeu(C + (size_t)(i0 + r) * ldc + j0 + F::L * v, c[r][v]);
}
#endif
// One full R×W tile of C (R = MM_RB rows or fewer, W = CB or MM_WIDE·CB columns) over k in [kbeg, kend): fixed trip
// counts, so the compiler keeps c in registers.
template <int W, int R, typename real>
inline void mm_tile(int i0, int j0, int kbeg, int kend, const real* A, int lda, const real* B, int ldb, real* C, int ldc,
                    bool accumulate) {
#ifdef ICL_TILE_VEC
    if constexpr (std::is_same_v<real, float> && W % TileF::L == 0) {  // the vector tile above, same bits
        mm_tile_vec<W / TileF::L, R>(i0, j0, kbeg, kend, A, lda, B, ldb, C, ldc, accumulate);
        return;
    }
#endif
    constexpr int RB = R;
    real c[RB][W];
    for (int r = 0; r < RB; r++)
#pragma omp simd
        for (int j = 0; j < W; j++) c[r][j] = accumulate ? C[(size_t)(i0 + r) * ldc + j0 + j] : real(0);
    for (int k = kbeg; k < kend; k++) {
        const real* b = B + (size_t)k * ldb + j0;
        for (int r = 0; r < RB; r++) {
            const real a = A[(size_t)(i0 + r) * lda + k];
#pragma omp simd
            for (int j = 0; j < W; j++) c[r][j] = tile_madd(a, b[j], c[r][j]);
        }
    }
    for (int r = 0; r < RB; r++)
#pragma omp simd
        for (int j = 0; j < W; j++) C[(size_t)(i0 + r) * ldc + j0 + j] = c[r][j];
}
// mm_tile for a row block of ni (1 <= ni <= R) rows: the tile instantiated with R = ni.
template <int W, int R, typename real>
inline void mm_tile_rows(int ni, int i0, int j0, int kbeg, int kend, const real* A, int lda, const real* B, int ldb,
                         real* C, int ldc, bool accumulate) {
    if constexpr (R > 1)
        if (ni < R) return mm_tile_rows<W, R - 1>(ni, i0, j0, kbeg, kend, A, lda, B, ldb, C, ldc, accumulate);
    mm_tile<W, R>(i0, j0, kbeg, kend, A, lda, B, ldb, C, ldc, accumulate);
}
template <typename real>
inline void mm_nn(int M, int N, int K, const real* A, int lda, const real* B, int ldb, real* C, int ldc, bool accumulate,
                  Tri tri = Tri::full) {
    constexpr int RB = MM_RB, CB = 64 / (int)sizeof(real), WB = MM_WIDE * CB;
    for (int i0 = 0; i0 < M; i0 += RB) {
        const int ni = std::min(RB, M - i0);
        const int kbeg = tri == Tri::upper_k ? i0 : 0;
        const int kend = tri == Tri::lower_k ? std::min(K, i0 + ni) : K;
        const int jbeg = tri == Tri::upper_cols ? i0 / CB * CB : 0;
        const int jend = tri == Tri::lower_cols ? std::min(N, i0 + ni) : N;
        for (int j0 = jbeg; j0 < jend;) {
            const int nj = std::min(CB, N - j0);
            // a wide tile where its last block is wanted and k runs long enough to pay for 16 accumulators (at
            // k = 16, the head size 16 model's Â Ĉᵀ, wide tiles measured 7% slower in the backward)
            if (WB > CB && kend - kbeg >= 32 && ni == RB && j0 + WB <= N && j0 + WB - CB < jend) {
                mm_tile<WB, RB>(i0, j0, kbeg, kend, A, lda, B, ldb, C, ldc, accumulate);
                j0 += WB;
                continue;
            }
            if (nj == CB) {
                mm_tile_rows<CB, RB>(ni, i0, j0, kbeg, kend, A, lda, B, ldb, C, ldc, accumulate);
            } else {  // edge tile (fewer than CB columns)
                real c[RB][CB];
                for (int r = 0; r < ni; r++)
                    for (int j = 0; j < nj; j++) c[r][j] = accumulate ? C[(size_t)(i0 + r) * ldc + j0 + j] : real(0);
                for (int k = kbeg; k < kend; k++) {
                    const real* b = B + (size_t)k * ldb + j0;
                    for (int r = 0; r < ni; r++) {
                        const real a = A[(size_t)(i0 + r) * lda + k];
                        for (int j = 0; j < nj; j++) c[r][j] = tile_madd(a, b[j], c[r][j]);
                    }
                }
                for (int r = 0; r < ni; r++)
                    for (int j = 0; j < nj; j++) C[(size_t)(i0 + r) * ldc + j0 + j] = c[r][j];
            }
            j0 += CB;
        }
    }
}
// After X (n,n) = … with Tri::lower_cols (upper_cols): zero the entries above (below) the diagonal that share a
// row block with it — the only ones a following Tri::lower_k (upper_k) product reads.
// One row block of NB rows with NB a compile-time constant, fully unrolled: each store's condition is known when
// it is compiled. (Written as loops over a run-time nb, g++ turned each row's few stores into a memset call —
// also in the form with the test inside the loop: ~2–3% of the forward at heads of 16 in perf, Zen 3.)
template <int NB, typename real>
inline void zero_tri_rows(real* X, int ld, bool lower) {
#pragma GCC unroll 8
    for (int r = 0; r < NB; r++)
#pragma GCC unroll 8
        for (int j = 0; j < NB; j++)
            if (lower ? j > r : j < r) X[(size_t)r * ld + j] = real(0);
}
template <int NB, typename real>
inline void zero_tri_rows_n(int nb, real* X, int ld, bool lower) {  // NB = nb, for 1 <= nb <= NB
    if constexpr (NB > 1)
        if (nb < NB) return zero_tri_rows_n<NB - 1>(nb, X, ld, lower);
    zero_tri_rows<NB>(X, ld, lower);
}
template <typename real>
inline void zero_tri_block(real* X, int ld, int n, bool lower) {
    for (int b0 = 0; b0 < n; b0 += MM_RB)
        zero_tri_rows_n<MM_RB>(std::min(MM_RB, n - b0), X + (size_t)b0 * ld + b0, ld, lower);
}
// The chunked form's masked product: C (n,N) [+]= tri(A B) · D with A (n,K), B (K,n), D (n,N), where tri keeps the
// lower (j <= i) or upper (j >= i) triangle of the n×n matrix A·B, formed in Q (row stride KA_CHUNK).
template <typename real>
inline void tri_chain(int n, int K, int N, const real* A, int lda, const real* B, int ldb, real* Q, const real* D, int ldd, real* C,
                      int ldc, bool accumulate, bool lower) {
    mm_nn<real>(n, n, K, A, lda, B, ldb, Q, KA_CHUNK, false, lower ? Tri::lower_cols : Tri::upper_cols);
    zero_tri_block(Q, KA_CHUNK, n, lower);
    mm_nn<real>(n, N, n, Q, KA_CHUNK, D, ldd, C, ldc, accumulate, lower ? Tri::lower_k : Tri::upper_k);
}
// dst (cols, rows) = srcᵀ for src (rows, cols) with row stride lds; dst row stride ldd. On float with AVX2 the
// full 8×8 blocks go through registers (the element loop stores at stride ldd one float at a time: ~15% of the
// forward's time with heads of 64); the rest, and double, element by element.
template <typename real>
inline void transpose(real* dst, int ldd, const real* src, int lds, int rows, int cols) {
    int j0 = 0;
#ifdef __AVX2__
    if constexpr (std::is_same_v<real, float>) {
        for (; j0 + 8 <= rows; j0 += 8) {
            int k0 = 0;
            for (; k0 + 8 <= cols; k0 += 8) transpose8x8(dst + (size_t)k0 * ldd + j0, ldd, src + (size_t)j0 * lds + k0, lds);
            for (int j = j0; j < j0 + 8; j++)
                for (int k = k0; k < cols; k++) dst[(size_t)k * ldd + j] = src[(size_t)j * lds + k];
        }
    }
#endif
    for (int j = j0; j < rows; j++)
        for (int k = 0; k < cols; k++) dst[(size_t)k * ldd + j] = src[(size_t)j * lds + k];
}

}  // namespace kattn_detail
}  // namespace icl
