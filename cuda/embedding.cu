// embedding.cu — token + position embeddings (GPT-2's "encoder") and the position embedding added to real
// input vectors, forward and backward. CPU reference and exact semantics: src/layers/embedding.h.
//
//   encoder_forward:       out[b,t,:] = wte[inp[b,t], :] + wpe[pos[b,t], :]          (pos == nullptr: t)
//   vector_embed_forward:  out[b,t,:] = [x[b,t,0:D], 0, ..., 0] + wpe[pos[b,t], :]
//
// Parallelization: forward is elementwise over the N·C outputs (N = B·T), one thread per element,
// consecutive threads on consecutive channels (coalesced rows of wte/wpe/out).
// Backward is a scatter-add: many rows n may hit the same table row. Two cases:
//   * positions 0..T−1 (pos == nullptr): row t of dwpe receives exactly the rows n = b·T + t, so it is a
//     gather instead — one thread per (t, c) adds b = 0..B−1 in order (deterministic, no atomics);
//   * token ids (dwte) or explicit positions: one thread per (n, c) does atomicAdd into the table row. Float
//     atomics make the summation order (and so the last bits) vary between runs; the CPU sums in order n.
// Out-of-range ids/positions are engine bugs (the models validate batches): DEVICE_ASSERT traps.
#include "cuda/common.cuh"
#include "cuda/layers.h"

namespace icl::cuda {

// out (B,T,C) = wte[inp] + wpe[pos]      one thread per output element, grid-stride over N·C
__global__ void encoder_forward_kernel(float* out, const int* inp, const int* pos, const float* wte, const float* wpe, int N, int T,
                                       int C, int V, int maxT) {
    const int64_t total = (int64_t)N * C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int n = (int)(i / C), c = (int)(i % C);
        const int tok = inp[n];
        const int p = pos ? pos[n] : n % T;
        DEVICE_ASSERT(tok >= 0 && tok < V && p >= 0 && p < maxT);
        out[i] = wte[(size_t)tok * C + c] + wpe[(size_t)p * C + c];
    }
}

// dwte[inp[n], c] += dout[n, c]  and (explicit positions) dwpe[pos[n], c] += dout[n, c]      atomics
__global__ void encoder_backward_scatter_kernel(float* dwte, float* dwpe_explicit, const float* dout, const int* inp, const int* pos, int N,
                                                int C, int V, int maxT) {
    const int64_t total = (int64_t)N * C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int n = (int)(i / C), c = (int)(i % C);
        const float g = dout[i];
        // out_n[c] = wte_t[c] + wpe_p[c]   =>   dwte[tok,c] += dout_n[c],  dwpe[p,c] += dout_n[c]
        if (dwte) {
            const int tok = inp[n];
            DEVICE_ASSERT(tok >= 0 && tok < V);
            atomicAdd(&dwte[(size_t)tok * C + c], g);
        }
        if (dwpe_explicit) {
            const int p = pos[n];
            DEVICE_ASSERT(p >= 0 && p < maxT);
            atomicAdd(&dwpe_explicit[(size_t)p * C + c], g);
        }
    }
}

// dwpe[t, c] += Σ_b dout[b·T + t, c]      positions 0..T−1: a gather, one thread per (t, c), b in order
__global__ void position_backward_gather_kernel(float* dwpe, const float* dout, int B, int T, int C) {
    const int64_t total = (int64_t)T * C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        float s = dwpe[i];
        for (int b = 0; b < B; b++) s += dout[(size_t)b * T * C + i];
        dwpe[i] = s;
    }
}

void encoder_forward(float* out, const int* inp, const int* pos, const float* wte, const float* wpe, int B, int T, int C, int V, int maxT) {
    ICL_ASSERT(pos != nullptr || T <= maxT);
    const int N = B * T;
    encoder_forward_kernel<<<grid_for((int64_t)N * C), 256>>>(out, inp, pos, wte, wpe, N, T, C, V, maxT);
    launchCheck("encoder_forward_kernel");
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, const int* pos, int B, int T, int C, int V, int maxT) {
    ICL_ASSERT(pos != nullptr || T <= maxT);
    const int N = B * T;
    float* dwpe_scatter = pos ? dwpe : nullptr;
    if (dwte || dwpe_scatter) {
        encoder_backward_scatter_kernel<<<grid_for((int64_t)N * C), 256>>>(dwte, dwpe_scatter, dout, inp, pos, N, C, V, maxT);
        launchCheck("encoder_backward_scatter_kernel");
    }
    if (dwpe && !pos) {
        position_backward_gather_kernel<<<grid_for((int64_t)T * C), 256>>>(dwpe, dout, B, T, C);
        launchCheck("position_backward_gather_kernel");
    }
}

// out (B,T,C) = [x (B,T,D), 0] + wpe[pos]      one thread per output element
__global__ void vector_embed_forward_kernel(float* out, const float* inp, const int* pos, const float* wpe, int N, int T, int C, int D,
                                            int maxT) {
    const int64_t total = (int64_t)N * C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int n = (int)(i / C), c = (int)(i % C);
        const int p = pos ? pos[n] : n % T;
        DEVICE_ASSERT(p >= 0 && p < maxT);
        const float x = c < D ? inp[(size_t)n * D + c] : 0.0f;
        out[i] = c < D ? x + wpe[(size_t)p * C + c] : wpe[(size_t)p * C + c];
    }
}

void vector_embed_forward(float* out, const float* inp, const int* pos, const float* wpe, int B, int T, int C, int D, int maxT) {
    ICL_ASSERT(D >= 0 && D <= C);
    ICL_ASSERT(pos != nullptr || T <= maxT);
    const int N = B * T;
    vector_embed_forward_kernel<<<grid_for((int64_t)N * C), 256>>>(out, inp, pos, wpe, N, T, C, D, maxT);
    launchCheck("vector_embed_forward_kernel");
}

// out_n[c] = x_n[c] + wpe_p[c]   =>   dwpe[p,c] += dout_n[c]   (the input vectors are data: no gradient)
void vector_embed_backward(float* dwpe, const float* dout, const int* pos, int B, int T, int C, int maxT) {
    ICL_ASSERT(pos != nullptr || T <= maxT);
    const int N = B * T;
    if (pos) {
        encoder_backward_scatter_kernel<<<grid_for((int64_t)N * C), 256>>>(nullptr, dwpe, dout, nullptr, pos, N, C, 0, maxT);
        launchCheck("encoder_backward_scatter_kernel");
    } else {
        position_backward_gather_kernel<<<grid_for((int64_t)T * C), 256>>>(dwpe, dout, B, T, C);
        launchCheck("position_backward_gather_kernel");
    }
}

}  // namespace icl::cuda
