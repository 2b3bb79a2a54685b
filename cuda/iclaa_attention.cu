// iclaa_attention.cu — ICLAA's hybrid causal attention (spec/iclca.md §3, Eq. 17): the exact softmax among the
// input tokens plus the prompt's random-feature term. CPU reference, notation and formulas:
// src/layers/iclaa_attention.h. Forward only, all arithmetic in double like the CPU (the H100/H200 run fp64 at
// half the fp32 rate; this op is a research path, not a training hot spot).
//
// How it runs, in two launches per layer:
//   1. iclaa_log_phi_kernel: one block per (t, h, q|k) row, threads over the m features: log φ into the
//      (NH,T,m) scratch (k's after q's, for the kernel similarity) (‖x'‖² is one block reduction, so its last bit may differ from the CPU's loop).
//   2. iclaa_attention_kernel: one block per (query i, head h). The scores s_ij (j <= i) go to shared memory,
//      μ is a block max (with κ + max_r log φ_r(q_i) when there is a prompt term), the scores become weights
//      e^{s_ij − μ} in place, the denominator is a block sum, and thread c accumulates output column c over the
//      keys in order, then over the features. Per block: (T + 32) doubles of shared memory.
#include "cuda/common.cuh"
#include "cuda/layers.h"

namespace icl::cuda {

namespace {

__device__ inline double block_max_double(double v, double* shared) {
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nwarps = blockDim.x / WARP;
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    double r = lane < nwarps ? shared[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) r = fmax(r, __shfl_xor_sync(0xffffffffu, r, o));
    return r;
}

// lphi[which][h][t][:] = log φ(x), x = row t's q (which = 0) or k (which = 1) of head h. omega: (NH,m,hs) or null (elu+1).
__global__ void iclaa_log_phi_kernel(double* lphi, const float* qkv, const double* omega, int which0, int T, int C, int NH, int m) {
    __shared__ double red[32];
    const int t = blockIdx.x, h = blockIdx.y, which = which0 + (int)blockIdx.z, hs = C / NH;
    const float* x = qkv + (size_t)t * 3 * C + (size_t)which * C + (size_t)h * hs;
    double* out = lphi + (((size_t)which * NH + h) * T + t) * m;
    if (!omega) {  // log(elu(x)+1)
        for (int r = threadIdx.x; r < m; r += blockDim.x) {
            const double xr = (double)x[r];
            out[r] = xr > 0 ? log1p(xr) : xr;
        }
        return;
    }
    // log φ_r(x) = ω_r·x · hs^{−1/4} − ‖x'‖²/2 − ½ log m
    const double sc = pow((double)hs, -0.25);
    double part = 0;
    for (int k = threadIdx.x; k < hs; k += blockDim.x) {
        const double xk = (double)x[k] * sc;
        part += xk * xk;
    }
    const double n2 = block_sum(part, red);
    const double base = -0.5 * n2 - 0.5 * log((double)m);
    const double* W = omega + (size_t)h * m * hs;
    for (int r = threadIdx.x; r < m; r += blockDim.x) {
        double dot = 0;
        for (int k = 0; k < hs; k++) dot += W[(size_t)r * hs + k] * (double)x[k];
        out[r] = dot * sc + base;
    }
}

__global__ void iclaa_attention_kernel(float* out, const double* lphi, const float* qkv, const double* bkv, const double* bd,
                                       const double* kappa, int kernel_sim, int T, int C, int NH, int m) {
    extern __shared__ double sh[];  // w (T) | reduction (32)
    double* w = sh;
    double* red = sh + T;
    const int i = blockIdx.x, h = blockIdx.y, hs = C / NH;
    const float* qi = qkv + (size_t)i * 3 * C + (size_t)h * hs;
    const double* lqi = lphi + ((size_t)h * T + i) * m;
    const double* lk = kernel_sim ? lphi + ((size_t)NH + h) * T * m : nullptr;
    const double scale = 1.0 / sqrt((double)hs);
    // s_ij for j <= i, and their max
    double mu = -INFINITY;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) {
        double sij;
        if (!kernel_sim) {
            const float* kj = qkv + (size_t)j * 3 * C + C + (size_t)h * hs;
            sij = 0;
            for (int c = 0; c < hs; c++) sij += (double)qi[c] * (double)kj[c];
            sij *= scale;
        } else {  // log Σ_r exp(lq_r + lk_r)
            const double* b = lk + (size_t)j * m;
            double mx = -INFINITY;
            for (int r = 0; r < m; r++) mx = fmax(mx, lqi[r] + b[r]);
            double acc = 0;
            for (int r = 0; r < m; r++) acc += exp(lqi[r] + b[r] - mx);
            sij = mx + log(acc);
        }
        w[j] = sij;
        mu = fmax(mu, sij);
    }
    mu = block_max_double(mu, red);
    const double kap = bkv ? kappa[h] : -INFINITY;
    if (bkv) {
        double mx = -INFINITY;
        for (int r = threadIdx.x; r < m; r += blockDim.x) mx = fmax(mx, lqi[r]);
        mu = fmax(mu, block_max_double(mx, red) + kap);
    }
    // weights in place, and the denominator
    double part = 0;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) {
        w[j] = exp(w[j] - mu);
        part += w[j];
    }
    if (bkv)
        for (int r = threadIdx.x; r < m; r += blockDim.x) part += exp(lqi[r] + kap - mu) * bd[(size_t)h * m + r];
    const double den = block_sum(part, red);  // (its __syncthreads also publishes w)
    for (int c = threadIdx.x; c < hs; c += blockDim.x) {
        double acc = 0;
        for (int j = 0; j <= i; j++) acc += w[j] * (double)qkv[(size_t)j * 3 * C + 2 * C + (size_t)h * hs + c];
        if (bkv)
            for (int r = 0; r < m; r++) acc += exp(lqi[r] + kap - mu) * bkv[((size_t)h * m + r) * hs + c];
        out[(size_t)i * C + (size_t)h * hs + c] = (float)(acc / den);
    }
}

}  // namespace

void iclaa_attention_forward(float* out, double* lphi, const float* qkv, const double* omega, const double* bkv, const double* bd,
                             const double* kappa, int kernel_sim, int T, int C, int NH, int m) {
    ICL_ASSERT(T >= 1 && NH >= 1 && C % NH == 0 && m >= 1 && T <= 65535 && NH <= 65535);
    const bool need_phi = bkv != nullptr || kernel_sim;
    if (need_phi) {
        iclaa_log_phi_kernel<<<dim3(T, NH, kernel_sim ? 2 : 1), 128>>>(lphi, qkv, omega, 0, T, C, NH, m);
        launchCheck("iclaa_log_phi_kernel");
    }
    const size_t shmem = ((size_t)T + 32) * sizeof(double);
    if (shmem > 48 * 1024) {  // beyond the default: opt in, up to the device's limit (~227 KiB on an H100/H200: T ≈ 29k)
        const int optin = shared_memory_optin();
        if (shmem > (size_t)optin)
            fail(strfmt("ICLAA on the GPU: a sequence of %d tokens needs %zu bytes of shared memory per block, this GPU allows %d", T, shmem, optin));
        cudaCheck(cudaFuncSetAttribute(iclaa_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem));
    }
    iclaa_attention_kernel<<<dim3(T, NH), 128, shmem>>>(out, lphi, qkv, bkv, bd, kappa, kernel_sim, T, C, NH, m);
    launchCheck("iclaa_attention_kernel");
}

}  // namespace icl::cuda
