// matmul.h — GEMM and the linear layer (matmul + bias).
//
// gemm: row-major C(M,N) = alpha·op(A)·op(B) + beta·C, op(X) = X or Xᵀ, leading dimensions lda/ldb/ldc.
//   * beta == 0 never reads C (it may hold NaN); beta == 1 accumulates.
//   * float goes to gemm_f32 (src/layers/gemm.cpp): packed, cache-blocked, AVX-512 or AVX2/FMA (chosen at compile time), OpenMP — the hot path.
//   * double (the fp64 tests) uses the simple blocked loops below.
//   * Both are safe to call from inside an OpenMP parallel region (they then run on the calling thread) and
//     are deterministic: each element of C is computed by one thread, in a fixed order.
// gemm_reference: the naive triple loop, kept only as the thing the tests compare against.
#pragma once
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "engine/common.h"
#include "layers/parallel.h"

namespace icl {

// The fast fp32 GEMM (gemm.cpp).
// Which micro-kernel this build's gemm_f32 runs ("AVX-512 (12x32 micro-kernel)", "AVX2+FMA (6x16 …)", "portable …").
const char* gemm_isa();
void gemm_f32(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
              int ldb, float beta, float* C, int ldc);
// The same, then C[i, :] += bias (N) in every row, in the micro-kernel's store after the last K block instead of a
// pass over C afterwards: each element rounded as (alpha·op(A)·op(B) + beta·C) + bias[j] would be, so the same bits.
void gemm_f32_bias(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                   int ldb, float beta, float* C, int ldc, const float* bias);
// C(M,N) = alpha·Aᵀ·B + beta·C for A stored (K,M) and B (K,N), as gemm_f32(true, false, …), and a_sums[i] += Σ_k A[k,i]
// (not scaled by alpha) in the order k = 0, 1, …, K − 1: the same bits as that loop run after the product. The sums
// come from the packing of A, which reads every A[k,i] anyway; matmul_backward's dbias (Σ_n dout[n,:]) rides on its
// dW = doutᵀ·inp this way instead of a pass of its own over dout.
void gemm_f32_tn_sum(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float beta, float* C,
                     int ldc, float* a_sums);
// The tm × tn grid of rectangles (tm·tn = nt) gemm_f32 gives its nt threads for a C of M × N (the least work per
// thread, packing included; gemm.cpp). Exposed for `bench gemm` and the tests.
void gemm_thread_grid(int M, int N, int nt, int& tm, int& tn);
// A pre-packed B, for products that share one op(B) (attention multiplies one head's k and v with every block of
// its queries): pack op(B) (K × N) once into Bp (gemm_packed_b_size(K, N) floats, 64-byte aligned), then
//   gemm_f32_packed_b: C(M,N) = alpha·op(A)·op(B)[k0:k0+K, j0:j0+N] + beta·C      (Kp = the K it was packed with,
//                      k0 + K <= Kp, j0 a multiple of gemm_panel_cols(), j0 + N within the packed columns)
// The pack is the layout gemm_f32 packs B into, all K rows at once, so the result has gemm_f32's bits for the
// same operands (tests). A is not packed at all: the micro-kernel broadcasts op(A)'s elements from A where they are
// (transposed: 12 consecutive floats of A's row k at each k; untransposed: 12 rows lda apart), the same bits
// without the copy. Meant for attention's fresh blocks (q, P, Pᵀ, dSᵀ, dS: docs/benchmarks.md, 2026-12-05); not for
// A with a large power-of-two lda, whose rows share a few cache sets (gemm_f32 keeps packing). By the count of gemm_thread_grid (~0.4 cycles a packed float against 2·VL multiply-adds a
// cycle), a block of 64 queries that repacks the k of a head of size 64 spends ~20% of its product copying.
int gemm_panel_cols();                          // NR: 32 (AVX-512), 16 (AVX2, portable)
size_t gemm_packed_b_size(int K, int N);        // floats
void gemm_pack_b(bool transB, int K, int N, const float* B, int ldb, float* Bp);
void gemm_f32_packed_b(bool transA, int M, int N, int K, float alpha, const float* A, int lda, const float* Bp, int Kp,
                       int k0, int j0, float beta, float* C, int ldc);
// The same for A: gemm_pack_a packs op(A) (M × K) into gemm_packed_a_size(M, K) floats (any alignment), and
//   gemm_f32_packed_ab: C(M,N) = alpha·op(A)[i0:i0+M, k0:k0+K]·op(B)[k0:k0+K, j0:j0+N] + beta·C   (both packed; Kpa,
//                       Kpb their packed depths; i0 a multiple of gemm_panel_rows(), j0 of gemm_panel_cols())
int gemm_panel_rows();                          // MR: 12 (AVX-512), 6 (AVX2, portable)
// The depth block of a product of depth K: every gemm above sums k in blocks [0, kb), [kb, 2kb), … (kb <= KC, 384) and
// adds each block's sum into C in turn, so a caller that splits K at these bounds (beta, then 1) keeps the bits.
int gemm_depth_block(int K);
size_t gemm_packed_a_size(int M, int K);        // floats
void gemm_pack_a(bool transA, int M, int K, const float* A, int lda, float* Ap);
void gemm_f32_packed_ab(int M, int N, int K, float alpha, const float* Ap, int Kpa, int i0, const float* Bp, int Kpb, int j0,
                        int k0, float beta, float* C, int ldc);

// Naive reference: C (M,N) = alpha·op(A)·op(B) + beta·C.   A (M,K) or (K,M) if transA; B (K,N) or (N,K) if transB.
template <typename real>
void gemm_reference(bool transA, bool transB, int M, int N, int K, real alpha, const real* A, int lda, const real* B,
                    int ldb, real beta, real* C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            real acc = 0;
            for (int k = 0; k < K; k++) {
                real a = transA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                real b = transB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                acc += a * b;
            }
            C[(size_t)i * ldc + j] = alpha * acc + (beta == real(0) ? real(0) : beta * C[(size_t)i * ldc + j]);
        }
}

// Simple blocked GEMM for any scalar type (used for double). First C = beta·C, then the product is added
// tile by tile; rows of C are split across threads (each row belongs to one thread ⇒ deterministic).
template <typename real>
void gemm_blocked(bool transA, bool transB, int M, int N, int K, real alpha, const real* A, int lda, const real* B,
                  int ldb, real beta, real* C, int ldc) {
    constexpr int TI = 32, TJ = 64, TK = 64;
    auto opA = [&](int i, int k) { return transA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]; };
    auto opB = [&](int k, int j) { return transB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]; };
#pragma omp parallel for schedule(static) if (par::use_threads((double)M * N * K))
    for (int i0 = 0; i0 < M; i0 += TI) {
        const int i1 = std::min(M, i0 + TI);
        for (int i = i0; i < i1; i++)
            for (int j = 0; j < N; j++) {
                real& c = C[(size_t)i * ldc + j];
                c = beta == real(0) ? real(0) : beta * c;
            }
        if (K == 0 || alpha == real(0)) continue;
        for (int k0 = 0; k0 < K; k0 += TK) {
            const int k1 = std::min(K, k0 + TK);
            for (int j0 = 0; j0 < N; j0 += TJ) {
                const int j1 = std::min(N, j0 + TJ);
                for (int i = i0; i < i1; i++) {
                    real* crow = C + (size_t)i * ldc;  // row i of C (N)
                    for (int k = k0; k < k1; k++) {
                        const real a = alpha * opA(i, k);
                        for (int j = j0; j < j1; j++) crow[j] += a * opB(k, j);
                    }
                }
            }
        }
    }
}

template <typename real>
void gemm(bool transA, bool transB, int M, int N, int K, real alpha, const real* A, int lda, const real* B, int ldb,
          real beta, real* C, int ldc) {
    if constexpr (std::is_same_v<real, float>)
        gemm_f32(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        gemm_blocked<real>(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// out (N,OC) = inp (N,C) @ weight(OC,C)ᵀ + bias (OC)          bias may be nullptr.  out is SET.
// float: the bias is added in the GEMM's store (gemm_f32_bias), the same bits as the loop below, one pass over out
// fewer.
template <typename real>
void matmul_forward(real* out, const real* inp, const real* weight, const real* bias, int N, int C, int OC) {
    if constexpr (std::is_same_v<real, float>) {
        gemm_f32_bias(false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC, bias);  // out = inp @ weightᵀ + bias
        return;
    }
    gemm<real>(false, true, N, OC, C, real(1), inp, C, weight, C, real(0), out, OC);  // out = inp @ weightᵀ
    if (!bias) return;
#pragma omp parallel for schedule(static) if (par::use_threads((double)N * OC))
    for (int n = 0; n < N; n++) {
        real* row = out + (size_t)n * OC;  // (OC)
#pragma omp simd
        for (int o = 0; o < OC; o++) row[o] += bias[o];
    }
}

// Backward of  out = inp @ weightᵀ + bias.  ACCUMULATES into dinp, dweight, dbias (each may be nullptr); with
// dinp_write = set, dinp is SET instead (engine/common.h: GradWrite).
//   dout (N,OC), inp (N,C), weight (OC,C)  ->  dinp (N,C), dweight (OC,C), dbias (OC)
template <typename real>
void matmul_backward(real* dinp, real* dweight, real* dbias, const real* dout, const real* inp, const real* weight,
                     int N, int C, int OC, GradWrite dinp_write = GradWrite::add) {
    const real beta = dinp_write == GradWrite::set ? real(0) : real(1);
    if (dinp) gemm<real>(false, false, N, C, OC, real(1), dout, OC, weight, C, beta, dinp, C);         // dinp (+)= dout @ weight
    if constexpr (std::is_same_v<real, float>) {
        if (dweight && dbias) {  // dW += doutᵀ @ inp, and dbias += Σ_n dout[n,:] (n in order) from the packing of doutᵀ
            gemm_f32_tn_sum(OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C, dbias);
            return;
        }
    }
    if (dweight) gemm<real>(true, false, OC, C, N, real(1), dout, OC, inp, C, real(1), dweight, C);   // dW += doutᵀ @ inp
    if (dbias) {
        // dbias[o] += Σ_n dout[n,o]: each thread owns a slice of columns and adds the rows in order n = 0..N-1
        // (bit-identical for any thread count); the inner loop over columns is contiguous and vectorizes.
#pragma omp parallel if (par::use_threads((double)N * OC))
        {
            int o0, o1;
            par::thread_columns(OC, o0, o1);
            for (int n = 0; n < N; n++) {
                const real* row = dout + (size_t)n * OC;  // (OC)
#pragma omp simd
                for (int o = o0; o < o1; o++) dbias[o] += row[o];
            }
        }
    }
}

}  // namespace icl
