// matmul.h — GEMM and the linear layer (matmul + bias).
//
// gemm: row-major C(M,N) = alpha·op(A)·op(B) + beta·C, op(X) = X or Xᵀ, leading dimensions lda/ldb/ldc.
// REFERENCE VERSION (naive loops). To be replaced by the cache-blocked, vectorized OpenMP GEMM.
#pragma once
#include <cstddef>

namespace icl {

template <typename real>
void gemm(bool transA, bool transB, int M, int N, int K, real alpha, const real* A, int lda, const real* B,
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

// out (N,OC) = inp (N,C) @ weight(OC,C)ᵀ + bias (OC)          bias may be nullptr
template <typename real>
void matmul_forward(real* out, const real* inp, const real* weight, const real* bias, int N, int C, int OC) {
    gemm<real>(false, true, N, OC, C, real(1), inp, C, weight, C, real(0), out, OC);
    if (bias)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] += bias[o];
}

// Backward of  out = inp @ weightᵀ + bias.  ACCUMULATES into dinp, dweight, dbias (each may be nullptr).
template <typename real>
void matmul_backward(real* dinp, real* dweight, real* dbias, const real* dout, const real* inp, const real* weight,
                     int N, int C, int OC) {
    if (dinp) gemm<real>(false, false, N, C, OC, real(1), dout, OC, weight, C, real(1), dinp, C);      // dinp += dout @ weight
    if (dweight) gemm<real>(true, false, OC, C, N, real(1), dout, OC, inp, C, real(1), dweight, C);   // dW += doutᵀ @ inp
    if (dbias)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) dbias[o] += dout[(size_t)n * OC + o];
}

}  // namespace icl
