// matmul.cu — the linear layer  out = inp·weightᵀ + bias,  forward and backward, through cuBLAS.
// CPU reference: src/layers/matmul.h (same GEMM calls, same argument meaning).
//
//   inp (N,C), weight (OC,C), bias (OC) or nullptr  ->  out (N,OC)          out is SET
//
// The products go to cuBLAS (cuda/cuda_device.cu: fp32, or TF32 tensor cores with --tf32). The bias is a
// separate elementwise pass, added AFTER the product as on the CPU (same rounding order). Its gradient is a
// column sum over the N rows: the deterministic column_sum_accumulate of cuda/reduce.cu.
#include "cuda/common.cuh"
#include "cuda/layers.h"

namespace icl::cuda {

// out (N,OC) += bias (OC) broadcast over rows        one thread per element, grid-stride
__global__ void add_bias_kernel(float* out, const float* bias, int N, int OC) {
    const int64_t total = (int64_t)N * OC;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        out[i] += bias[i % OC];
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC) {
    gemm(false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC);  // out = inp @ weightᵀ
    if (!bias) return;
    add_bias_kernel<<<grid_for((int64_t)N * OC), 256>>>(out, bias, N, OC);
    launchCheck("add_bias_kernel");
}

// Backward of  out = inp @ weightᵀ + bias.  ACCUMULATES into dinp, dweight, dbias (each may be nullptr).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight, int N, int C,
                     int OC) {
    if (dinp) gemm(false, false, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);     // dinp += dout @ weight
    if (dweight) gemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);  // dW += doutᵀ @ inp
    if (dbias) column_sum_accumulate(dbias, 1, dout, OC, N, OC);                          // dbias[o] += Σ_n dout[n,o]
}

}  // namespace icl::cuda
