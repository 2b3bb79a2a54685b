// layernorm.cu — layer normalisation over the last dimension, forward and backward.
// CPU reference: src/layers/layernorm.h.
//
//   mean = Σ_c x_c / C,   var = Σ_c (x_c − mean)² / C,   rstd = 1 / sqrt(var + 1e-5)
//   out_c = (x_c − mean) · rstd · weight_c + bias_c              saved: mean (N), rstd (N)
//
// Parallelization
//   * forward and dinp: one warp per row (8 rows per 256-thread block); lane l handles channels l, l+32, …
//     and the row sums are warp shuffles. Two-pass variance as on the CPU (no cancellation).
//   * dweight, dbias: sums over the N rows. Deterministic two-step column reduction: blocks of 32 channels ×
//     8 row-lanes over a fixed number of row chunks write partial sums, then one thread per channel adds
//     the chunks in order (see cuda/reduce.cu for why not atomics).
#include "cuda/common.cuh"
#include "cuda/layers.h"

namespace icl::cuda {

constexpr int LN_ROWS_PER_BLOCK = 8;  // warps per block, one row each

// out (N,C), mean (N), rstd (N) from inp (N,C), weight (C), bias (C)
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                                         int N, int C) {
    const int n = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (n >= N) return;  // a whole warp leaves together: the shuffles below stay complete
    const float* x = inp + (size_t)n * C;
    float* o = out + (size_t)n * C;
    float m = 0.0f;
    for (int c = lane; c < C; c += WARP) m += x[c];
    m = warp_sum(m) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += WARP) {
        const float d = x[c] - m;
        v += d * d;
    }
    v = warp_sum(v) / C;
    const float s = 1.0f / sqrtf(v + 1e-5f);
    for (int c = lane; c < C; c += WARP) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = s;
    }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int N, int C) {
    layernorm_forward_kernel<<<blocks(N, LN_ROWS_PER_BLOCK), LN_ROWS_PER_BLOCK * WARP>>>(out, mean, rstd, inp, weight, bias, N, C);
    launchCheck("layernorm_forward_kernel");
}

// dinp (N,C) += rstd · (g − mean_c(g) − x̂ · mean_c(g ⊙ x̂)),  g = dout ⊙ weight, x̂ = (x − mean)·rstd
__global__ void layernorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight, const float* mean,
                                               const float* rstd, int N, int C) {
    const int n = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (n >= N) return;
    const float* x = inp + (size_t)n * C;
    const float* dy = dout + (size_t)n * C;
    float* dx = dinp + (size_t)n * C;
    const float m = mean[n], s = rstd[n];
    // o[c] = (x[c] - m) * s * weight[c] + bias[c], differentiated through mean and rstd
    float g_mean = 0.0f, gx_mean = 0.0f;
    for (int c = lane; c < C; c += WARP) {
        const float g = dy[c] * weight[c];
        g_mean += g;
        gx_mean += g * (x[c] - m) * s;
    }
    g_mean = warp_sum(g_mean) / C;
    gx_mean = warp_sum(gx_mean) / C;
    for (int c = lane; c < C; c += WARP) {
        const float g = dy[c] * weight[c];
        const float xhat = (x[c] - m) * s;
        dx[c] += s * (g - g_mean - xhat * gx_mean);
    }
}

constexpr int LN_COL_ROWS = 8, LN_COL_CHUNKS = 32;

// partial (nchunk, 2, C): per row chunk, Σ_n dout·x̂ (dweight) and Σ_n dout (dbias) for 32 channels per block
__global__ void layernorm_backward_params_partial_kernel(float* partial, const float* dout, const float* inp, const float* mean,
                                                         const float* rstd, int N, int C, int rows_per_chunk) {
    __shared__ float shw[LN_COL_ROWS][WARP + 1], shb[LN_COL_ROWS][WARP + 1];
    const int c = blockIdx.x * WARP + threadIdx.x;
    const int n0 = blockIdx.y * rows_per_chunk, n1 = min(N, n0 + rows_per_chunk);
    float sw = 0.0f, sb = 0.0f;
    if (c < C)
        for (int n = n0 + threadIdx.y; n < n1; n += LN_COL_ROWS) {
            // o[c] = (x[c] - m) * s * weight[c] + bias[c]   =>   dweight[c] += dy[c]·x̂[c],  dbias[c] += dy[c]
            const float dy = dout[(size_t)n * C + c];
            sw += dy * ((inp[(size_t)n * C + c] - mean[n]) * rstd[n]);
            sb += dy;
        }
    shw[threadIdx.y][threadIdx.x] = sw;
    shb[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int k = 0; k < LN_COL_ROWS; k++) { tw += shw[k][threadIdx.x]; tb += shb[k][threadIdx.x]; }
        partial[((size_t)blockIdx.y * 2 + 0) * C + c] = tw;
        partial[((size_t)blockIdx.y * 2 + 1) * C + c] = tb;
    }
}

// dweight[c] += Σ_chunk partial[chunk,0,c];  dbias[c] += Σ_chunk partial[chunk,1,c]   (chunks in order)
__global__ void layernorm_backward_params_finish_kernel(float* dweight, float* dbias, const float* partial, int nchunk, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float tw = 0.0f, tb = 0.0f;
    for (int k = 0; k < nchunk; k++) {
        tw += partial[((size_t)k * 2 + 0) * C + c];
        tb += partial[((size_t)k * 2 + 1) * C + c];
    }
    if (dweight) dweight[c] += tw;
    if (dbias) dbias[c] += tb;
}

// Backward of layernorm_forward. ACCUMULATES into dinp, dweight, dbias; any of the three may be nullptr.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                        const float* mean, const float* rstd, int N, int C) {
    if (dinp) {
        layernorm_backward_dinp_kernel<<<blocks(N, LN_ROWS_PER_BLOCK), LN_ROWS_PER_BLOCK * WARP>>>(dinp, dout, inp, weight, mean, rstd,
                                                                                                    N, C);
        launchCheck("layernorm_backward_dinp_kernel");
    }
    if ((dweight || dbias) && N > 0 && C > 0) {
        const int nchunk = std::min(LN_COL_CHUNKS, ceil_div(N, LN_COL_ROWS));
        const int rows_per_chunk = ceil_div(N, nchunk);
        float* partial = scratch_as<float>(Scratch::colsum, (size_t)nchunk * 2 * C);
        layernorm_backward_params_partial_kernel<<<dim3(ceil_div(C, WARP), nchunk), dim3(WARP, LN_COL_ROWS)>>>(partial, dout, inp, mean,
                                                                                                               rstd, N, C, rows_per_chunk);
        launchCheck("layernorm_backward_params_partial_kernel");
        layernorm_backward_params_finish_kernel<<<blocks(C, 256), 256>>>(dweight, dbias, partial, nchunk, C);
        launchCheck("layernorm_backward_params_finish_kernel");
    }
}

}  // namespace icl::cuda
