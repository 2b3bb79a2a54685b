// loss.cu — the per-row training losses, forward and backward. CPU reference: src/layers/loss.h.
//
//   crossentropy: probs[n,:] = softmax(logits[n,:]),  losses[n] = −log probs[n, targets[n]]
//                 (targets[n] < 0: an ignored row, loss 0, no gradient whatever dlosses[n] says)
//   mse:          losses[n] = (1/D) Σ_d (pred[n,d] − target[n,d])²
// The loss is Σ_n dlosses[n]·losses[n]; the caller puts the mask and the 1/Σmask into dlosses
// (src/models/gpt.cpp: the masked mean is taken on the host from the B·T per-row losses).
//
// Parallelization: crossentropy forward — one block per row (V can be 50257): the max and the sum of exponentials
// in one pass (online softmax), then the probabilities; backward — one thread per logit. MSE forward — one
// warp per row; backward — one thread per element.
#include "cuda/common.cuh"
#include "cuda/layers.h"

namespace icl::cuda {

constexpr int CE_THREADS = 256;

// Online softmax statistics of a set of logits: m = their max, s = Σ e^(z − m). Two sets combine as
//   m = max(m1, m2),  s = s1·e^(m1 − m) + s2·e^(m2 − m)          (an empty set is m = −∞, s = 0)
__device__ inline void softmax_stats_add(float& m, float& s, float m2, float s2) {
    const float mn = fmaxf(m, m2);
    if (mn == -INFINITY) { s += s2; return; }  // both empty (0), or a NaN logit seen before any finite one: kept
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}
// The statistics of the whole block's logits; every thread gets them. sm, ss: 32 floats of shared memory each.
__device__ inline void block_softmax_stats(float& m, float& s, float* sm, float* ss) {
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nwarps = blockDim.x / WARP;
    for (int o = 16; o > 0; o >>= 1) softmax_stats_add(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    m = lane < nwarps ? sm[lane] : -INFINITY;
    s = lane < nwarps ? ss[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) softmax_stats_add(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
}

// losses (N), probs (N,V) from logits (N,V), targets (N)       block n = row n
// Two passes over the row: one reads the logits for their max and Σ e^(z − max) together (online softmax: each thread
// rescales its running sum when its max grows), one writes the probabilities. (Three passes and two over probs
// before: max; exponentials stored and summed; normalized in place.)
__global__ void crossentropy_forward_kernel(float* losses, float* probs, const float* logits, const int* targets, int V) {
    __shared__ float sm[32], ss[32];
    const int n = blockIdx.x;
    const float* z = logits + (size_t)n * V;  // (V)
    float* p = probs + (size_t)n * V;         // (V)
    const int t = targets[n];
    DEVICE_ASSERT(t < V);
    float maxv = -INFINITY, s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        const float x = z[v];
        if (x > maxv) { s = s * expf(maxv - x) + 1.0f; maxv = x; }  // e^(−∞) = 0 on the first element
        else if (x != -INFINITY) s += expf(x - maxv);  // a −∞ logit adds 0; a NaN one makes the loss NaN, as on the CPU
    }
    block_softmax_stats(maxv, s, sm, ss);
    const float inv = 1.0f / s;
    for (int v = threadIdx.x; v < V; v += blockDim.x) p[v] = expf(z[v] - maxv) * inv;
    // −log p_t = log Σ_v e^(z_v − max) − (z_t − max): finite even where p_t underflows to 0
    if (threadIdx.x == 0) losses[n] = t < 0 ? 0.0f : logf(s) - (z[t] - maxv);
}

void crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets, int N, int V) {
    if (N == 0) return;
    crossentropy_forward_kernel<<<N, CE_THREADS>>>(losses, probs, logits, targets, V);
    launchCheck("crossentropy_forward_kernel");
}

// losses[n] = log Σ_v e^(z_v) − z_t   =>   dlogits[n,v] += dl·(p_v − [v == t])      one thread per logit
__global__ void crossentropy_backward_kernel(float* dlogits, const float* dlosses, const float* probs, const int* targets, int N, int V) {
    const int64_t total = (int64_t)N * V;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int n = (int)(i / V), v = (int)(i % V);
        const int t = targets[n];
        if (t < 0) continue;  // ignored row: losses[n] = 0 is a constant
        const float dl = dlosses[n];
        float g = dlogits[i] + dl * probs[i];
        if (v == t) g -= dl;  // the CPU's order: first += dl·p, then −= dl at the target
        dlogits[i] = g;
    }
}

void crossentropy_backward(float* dlogits, const float* dlosses, const float* probs, const int* targets, int N, int V) {
    crossentropy_backward_kernel<<<grid_for((int64_t)N * V), 256>>>(dlogits, dlosses, probs, targets, N, V);
    launchCheck("crossentropy_backward_kernel");
}

// losses (N) = mean_d (pred − target)²        one warp per row
__global__ void mse_forward_kernel(float* losses, const float* pred, const float* target, int N, int D) {
    const int n = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (n >= N) return;
    const float* y = pred + (size_t)n * D;
    const float* t = target + (size_t)n * D;
    float s = 0.0f;
    for (int d = lane; d < D; d += WARP) {
        const float e = y[d] - t[d];
        s += e * e;
    }
    s = warp_sum(s);
    if (lane == 0) losses[n] = s / D;
}

void mse_forward(float* losses, const float* pred, const float* target, int N, int D) {
    mse_forward_kernel<<<blocks(N, 8), 8 * WARP>>>(losses, pred, target, N, D);
    launchCheck("mse_forward_kernel");
}

// losses[n] = s / D,  s = Σ_d (y_d − t_d)²   =>   dpred[n,d] += dloss · 2·(y_d − t_d) / D      one thread per element
__global__ void mse_backward_kernel(float* dpred, const float* dlosses, const float* pred, const float* target, int N, int D) {
    const int64_t total = (int64_t)N * D;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = dlosses[i / D] * 2.0f / D;
        dpred[i] += g * (pred[i] - target[i]);
    }
}

void mse_backward(float* dpred, const float* dlosses, const float* pred, const float* target, int N, int D) {
    mse_backward_kernel<<<grid_for((int64_t)N * D), 256>>>(dpred, dlosses, pred, target, N, D);
    launchCheck("mse_backward_kernel");
}

}  // namespace icl::cuda
