// attention.cu — causal multi-head softmax self-attention (GPT-2's) on a fused qkv input, forward and
// backward. CPU reference and exact semantics: src/layers/attention.h.
//
//   qkv (B,T,3C) = [q | k | v], each C = NH heads × hs channels. For every (b, h):
//     preatt = q kᵀ / sqrt(hs)                      (T,T)
//     att    = softmax over j <= i of preatt[i,j]   (T,T), zeros above the diagonal     saved (B,NH,T,T)
//     out    = att v                                (T,hs) → out[b, :, h·hs : h·hs+hs]
//
// How it runs (llm.c's "materialized attention"): the three T×T products of every (b,h) pair are ONE
// batched cuBLAS call each (cublasGemmBatchedEx with per-pair pointers straight into qkv/out — no
// permutation copies), and the causal softmax and its backward are hand-written kernels with one warp per
// row. The GEMMs compute the full T×T square; the softmax zeroes the upper triangle (the skipped-work
// blocking of the CPU version is not done here).
//
// Scratch: backward needs dL/datt for every pair it processes at once: the backend's own scratch
// (attn_grad slot), G·NH·T·T floats for a group of G batch rows (G chosen so the group stays <= 1 GiB).
// The `scratch` argument (sized for CPU threads) is not used.
#include <cstdint>
#include <initializer_list>

#include "cuda/common.cuh"
#include "cuda/layers.h"
#include "engine/device.h"

namespace icl::cuda {

// Per-(b,h) operand pointers for the batched GEMMs, one array each (index bh = b·NH + h):
//   q, k, v: into qkv (row stride 3C);  o: into out / dout (row stride C);  a: att (T,T) slices;
//   dq, dk, dv: into dqkv;  d: datt scratch slices (index bh − bh0, the group being processed).
//   pp: probability scratch slices (the lse form; index bh − bh0).
enum { P_Q, P_K, P_V, P_O, P_A, P_DQ, P_DK, P_DV, P_D, P_P, P_COUNT };

__global__ void attention_pointers_kernel(const float** p, int BNH, int NH, int T, int C, const float* qkv, const float* o,
                                          const float* att, const float* dqkv, const float* datt, const float* prob, int bh0) {
    const int bh = blockIdx.x * blockDim.x + threadIdx.x;
    if (bh >= BNH) return;
    const int b = bh / NH, h = bh % NH, hs = C / NH;
    const size_t qoff = (size_t)b * T * 3 * C + (size_t)h * hs;
    p[P_Q * BNH + bh] = qkv + qoff;
    p[P_K * BNH + bh] = qkv + qoff + C;
    p[P_V * BNH + bh] = qkv + qoff + 2 * C;
    p[P_O * BNH + bh] = o + (size_t)b * T * C + (size_t)h * hs;
    p[P_A * BNH + bh] = att ? att + (size_t)bh * T * T : nullptr;
    p[P_DQ * BNH + bh] = dqkv ? dqkv + qoff : nullptr;
    p[P_DK * BNH + bh] = dqkv ? dqkv + qoff + C : nullptr;
    p[P_DV * BNH + bh] = dqkv ? dqkv + qoff + 2 * C : nullptr;
    p[P_D * BNH + bh] = datt && bh >= bh0 ? datt + (size_t)(bh - bh0) * T * T : nullptr;  // slices of the group from bh0
    p[P_P * BNH + bh] = prob && bh >= bh0 ? prob + (size_t)(bh - bh0) * T * T : nullptr;
}

// Row r of (rows, T) is query i = r % T of its (b,h) pair, b = r / (NH·T); it attends to keys lo <= j <= i with
// lo = 0, or with a key start (kstart non-null) kstart[b], and i itself for a row before it (layers/attention.h).
__device__ __forceinline__ void row_key_range(int64_t r, int T, int NH, const int* kstart, int& i, int& lo) {
    i = (int)(r % T);
    const int ks = kstart ? kstart[r / ((int64_t)NH * T)] : 0;
    lo = i < ks ? i : ks;
}

// In place on preatt rows (row r: query i, keys lo..i, see row_key_range):
//   att[i, j] = exp(preatt[i,j] − max_{lo<=j'<=i}) / Σ_{lo<=j'<=i} exp(...)  for lo <= j <= i,  0 elsewhere.
// With lse non-null the row's log-sum-exp max + log(sum) is saved at lse[r] (the O(T) form).
// One warp per row; lane l handles j = lo + l, lo + l + 32, …
__global__ void causal_softmax_forward_kernel(float* att, int64_t rows, int T, int NH, const int* kstart, float* lse = nullptr) {
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    const int lane = threadIdx.x % WARP;
    if (r >= rows) return;
    int i, lo;
    row_key_range(r, T, NH, kstart, i, lo);
    float* row = att + r * T;  // (T)
    float maxv = -INFINITY;
    for (int j = lo + lane; j <= i; j += WARP) maxv = fmaxf(maxv, row[j]);
    maxv = warp_max(maxv);
    float sum = 0.0f;
    for (int j = lo + lane; j <= i; j += WARP) {
        const float e = expf(row[j] - maxv);
        row[j] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    const float inv = 1.0f / sum;
    if (lse && lane == 0) lse[r] = maxv + logf(sum);
    for (int j = lo + lane; j <= i; j += WARP) row[j] *= inv;
    for (int j = lane; j < lo; j += WARP) row[j] = 0.0f;
    for (int j = i + 1 + lane; j < T; j += WARP) row[j] = 0.0f;
}

// In place on datt rows:  att[i,j] = exp(preatt[i,j] - max) / sum
//   =>  dpreatt[i,j] = att[i,j] · (datt[i,j] − Σ_k att[i,k]·datt[i,k])   (j <= i; 0 above the diagonal)
__global__ void causal_softmax_backward_kernel(float* datt, const float* att, int64_t rows, int T) {
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    const int lane = threadIdx.x % WARP;
    if (r >= rows) return;
    const int i = (int)(r % T);
    const float* arow = att + r * T;  // (T)
    float* drow = datt + r * T;       // (T)
    float dot = 0.0f;
    for (int j = lane; j <= i; j += WARP) dot += arow[j] * drow[j];
    dot = warp_sum(dot);
    for (int j = lane; j <= i; j += WARP) drow[j] = arow[j] * (drow[j] - dot);
    for (int j = i + 1 + lane; j < T; j += WARP) drow[j] = 0.0f;
}

// The lse form's backward: row r of (rows, T) holds scale·q_i·k_j; becomes P[i,j] = exp(that − lse[r]) for
// lo <= j <= i and 0 elsewhere (row_key_range). One warp per row.
__global__ void probabilities_from_lse_kernel(float* p, const float* lse, int64_t rows, int T, int NH, const int* kstart) {
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    const int lane = threadIdx.x % WARP;
    if (r >= rows) return;
    int i, lo;
    row_key_range(r, T, NH, kstart, i, lo);
    float* row = p + r * T;  // (T)
    const float l = lse[r];
    for (int j = lane; j < T; j += WARP) row[j] = j >= lo && j <= i ? expf(row[j] - l) : 0.0f;
}

static const float** fill_pointers(int B, int NH, int T, int C, const float* qkv, const float* o, const float* att, const float* dqkv,
                                   const float* datt, int bh0, const float* prob = nullptr) {
    const int BNH = B * NH;
    const float** p = scratch_as<const float*>(Scratch::attn_ptrs, (size_t)P_COUNT * BNH);
    attention_pointers_kernel<<<blocks(BNH, 128), 128>>>(p, BNH, NH, T, C, qkv, o, att, dqkv, datt, prob, bh0);
    launchCheck("attention_pointers_kernel");
    return p;
}

void attention_forward(float* out, float* att, float* scratch, const float* qkv, int B, int T, int C, int NH, const int* kstart) {
    (void)scratch;
    ICL_ASSERT(NH > 0 && C % NH == 0);
    const int hs = C / NH, BNH = B * NH;
    const float scale = 1.0f / sqrtf((float)hs);
    const float** p = fill_pointers(B, NH, T, C, qkv, out, att, nullptr, nullptr, 0);
    float* const* pa = (float* const*)(p + P_A * BNH);
    // preatt = scale · q @ kᵀ                                    (T,T) per pair
    gemm_batched(false, true, T, T, hs, scale, p + P_Q * BNH, 3 * C, p + P_K * BNH, 3 * C, 0.0f, pa, T, BNH);
    // causal, numerically stable softmax of each row over j <= i
    const int64_t rows = (int64_t)BNH * T;
    causal_softmax_forward_kernel<<<blocks(rows, 8), 8 * WARP>>>(att, rows, T, NH, kstart);
    launchCheck("causal_softmax_forward_kernel");
    // out = att @ v                                              (T,hs) per pair, into out (B,T,C)
    gemm_batched(false, false, T, hs, T, 1.0f, (const float* const*)pa, T, p + P_V * BNH, 3 * C, 0.0f, (float* const*)(p + P_O * BNH), C,
                 BNH);
}

// Backward of attention_forward. ACCUMULATES into dqkv.
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att, int B, int T, int C, int NH) {
    (void)scratch;
    ICL_ASSERT(NH > 0 && C % NH == 0);
    const int hs = C / NH, BNH = B * NH;
    const float scale = 1.0f / sqrtf((float)hs);
    // batch rows per group: the group's dL/datt (G·NH·T·T floats) stays <= 2^28 floats (1 GiB)
    const int64_t per_b = (int64_t)NH * T * T;
    const int G = (int)std::max<int64_t>(1, std::min<int64_t>(B, ((int64_t)1 << 28) / std::max<int64_t>(per_b, 1)));
    float* datt = scratch_as<float>(Scratch::attn_grad, (size_t)G * per_b);
    for (int b0 = 0; b0 < B; b0 += G) {
        const int nb = std::min(G, B - b0), bh0 = b0 * NH, cnt = nb * NH;
        const float** p = fill_pointers(B, NH, T, C, qkv, dout, att, dqkv, datt, bh0);
        auto arr = [&](int which) { return p + which * BNH + bh0; };  // this group's slice of one pointer array
        float* const* pd = (float* const*)(p + P_D * BNH + bh0);
        // out = att @ v   =>   datt = dout @ vᵀ                                  (T,T) per pair
        gemm_batched(false, true, T, T, hs, 1.0f, arr(P_O), C, arr(P_V), 3 * C, 0.0f, pd, T, cnt);
        // out = att @ v   =>   dv += attᵀ @ dout                                 (T,hs) per pair
        gemm_batched(true, false, T, hs, T, 1.0f, arr(P_A), T, arr(P_O), C, 1.0f, (float* const*)arr(P_DV), 3 * C, cnt);
        // att = softmax(preatt)   =>   dpreatt = att ⊙ (datt − rowsum(att ⊙ datt)), in place
        const int64_t rows = (int64_t)cnt * T;
        causal_softmax_backward_kernel<<<blocks(rows, 8), 8 * WARP>>>(datt, att + (size_t)bh0 * T * T, rows, T);
        launchCheck("causal_softmax_backward_kernel");
        // preatt = scale · q @ kᵀ   =>   dq += scale · dpreatt @ k ,   dk += scale · dpreattᵀ @ q
        gemm_batched(false, false, T, hs, T, scale, (const float* const*)pd, T, arr(P_K), 3 * C, 1.0f, (float* const*)arr(P_DQ), 3 * C, cnt);
        gemm_batched(true, false, T, hs, T, scale, (const float* const*)pd, T, arr(P_Q), 3 * C, 1.0f, (float* const*)arr(P_DK), 3 * C, cnt);
    }
}

// ---- the O(T)-memory form: lse saved, probabilities recomputed (CPU reference: attention_forward_lse) -----------
// Here the probabilities still pass through device scratch, a group of G batch rows at a time (G·NH·T·T floats,
// <= 1 GiB), with the same batched products and softmax as attention_forward; only lse (B,NH,T) is kept. The fused
// online-softmax kernels of attention_fused.cu, which never form the T×T block, take over when
// fused_attention_enabled() (ICL_FUSED_ATTENTION=1; off by default: 3.75× slower on an H200) and hs <= 128.
void attention_forward_lse(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, const int* kstart) {
    ICL_ASSERT(NH > 0 && C % NH == 0);
    if (icl::fused_attention_enabled() && attention_fused_fits(B, T, C, NH)) return attention_fused_forward(out, lse, qkv, B, T, C, NH, kstart);
    const int hs = C / NH, BNH = B * NH;
    const float scale = 1.0f / sqrtf((float)hs);
    const int64_t per_b = (int64_t)NH * T * T;
    const int G = (int)std::max<int64_t>(1, std::min<int64_t>(B, ((int64_t)1 << 28) / std::max<int64_t>(per_b, 1)));
    float* prob = scratch_as<float>(Scratch::attn_grad, (size_t)G * per_b);
    for (int b0 = 0; b0 < B; b0 += G) {
        const int nb = std::min(G, B - b0), bh0 = b0 * NH, cnt = nb * NH;
        const float** p = fill_pointers(B, NH, T, C, qkv, out, nullptr, nullptr, nullptr, bh0, prob);
        auto arr = [&](int which) { return p + which * BNH + bh0; };
        float* const* pp = (float* const*)arr(P_P);
        // preatt = scale · q @ kᵀ                                    (T,T) per pair of the group
        gemm_batched(false, true, T, T, hs, scale, arr(P_Q), 3 * C, arr(P_K), 3 * C, 0.0f, pp, T, cnt);
        // causal softmax of each row, its log-sum-exp saved
        const int64_t rows = (int64_t)cnt * T;
        causal_softmax_forward_kernel<<<blocks(rows, 8), 8 * WARP>>>(prob, rows, T, NH, kstart ? kstart + b0 : nullptr, lse + (size_t)bh0 * T);
        launchCheck("causal_softmax_forward_kernel (lse)");
        // out = att @ v                                              (T,hs) per pair, into out (B,T,C)
        gemm_batched(false, false, T, hs, T, 1.0f, (const float* const*)pp, T, arr(P_V), 3 * C, 0.0f, (float* const*)arr(P_O), C, cnt);
    }
}

// Backward of attention_forward_lse. ACCUMULATES into dqkv.
void attention_backward_lse(float* dqkv, const float* dout, const float* out, const float* qkv, const float* lse, int B, int T, int C, int NH,
                            const int* kstart) {
    ICL_ASSERT(NH > 0 && C % NH == 0);
    if (icl::fused_attention_enabled() && attention_fused_fits(B, T, C, NH)) return attention_fused_backward(dqkv, dout, out, qkv, lse, B, T, C, NH, kstart);
    const int hs = C / NH, BNH = B * NH;
    const float scale = 1.0f / sqrtf((float)hs);
    // batch rows per group: its P and dP (2·G·NH·T·T floats) stay <= 2^28 floats (1 GiB)
    const int64_t per_b = (int64_t)NH * T * T;
    const int G = (int)std::max<int64_t>(1, std::min<int64_t>(B, ((int64_t)1 << 27) / std::max<int64_t>(per_b, 1)));
    float* prob = scratch_as<float>(Scratch::attn_grad, (size_t)2 * G * per_b);
    float* dprob = prob + (size_t)G * per_b;
    for (int b0 = 0; b0 < B; b0 += G) {
        const int nb = std::min(G, B - b0), bh0 = b0 * NH, cnt = nb * NH;
        const float** p = fill_pointers(B, NH, T, C, qkv, dout, nullptr, dqkv, dprob, bh0, prob);
        auto arr = [&](int which) { return p + which * BNH + bh0; };
        float* const* pp = (float* const*)arr(P_P);
        float* const* pd = (float* const*)arr(P_D);
        const int64_t rows = (int64_t)cnt * T;
        // the forward's probabilities, recomputed: P = exp(scale · q @ kᵀ − lse)   (T,T) per pair
        gemm_batched(false, true, T, T, hs, scale, arr(P_Q), 3 * C, arr(P_K), 3 * C, 0.0f, pp, T, cnt);
        probabilities_from_lse_kernel<<<blocks(rows, 8), 8 * WARP>>>(prob, lse + (size_t)bh0 * T, rows, T, NH, kstart ? kstart + b0 : nullptr);
        launchCheck("probabilities_from_lse_kernel");
        // out = P @ v   =>   dP = dout @ vᵀ,   dv += Pᵀ @ dout
        gemm_batched(false, true, T, T, hs, 1.0f, arr(P_O), C, arr(P_V), 3 * C, 0.0f, pd, T, cnt);
        gemm_batched(true, false, T, hs, T, 1.0f, (const float* const*)pp, T, arr(P_O), C, 1.0f, (float* const*)arr(P_DV), 3 * C, cnt);
        // P = softmax(preatt)   =>   dS = P ⊙ (dP − rowsum(P ⊙ dP)), in place
        causal_softmax_backward_kernel<<<blocks(rows, 8), 8 * WARP>>>(dprob, prob, rows, T);
        launchCheck("causal_softmax_backward_kernel (lse)");
        // preatt = scale · q @ kᵀ   =>   dq += scale · dS @ k ,   dk += scale · dSᵀ @ q
        gemm_batched(false, false, T, hs, T, scale, (const float* const*)pd, T, arr(P_K), 3 * C, 1.0f, (float* const*)arr(P_DQ), 3 * C, cnt);
        gemm_batched(true, false, T, hs, T, scale, (const float* const*)pd, T, arr(P_Q), 3 * C, 1.0f, (float* const*)arr(P_DK), 3 * C, cnt);
    }
}

// ---- kv_attention_step: one query row against a KV cache (token-by-token decoding) -------------------------
// CPU reference: src/layers/kv_attention.h. cache (n,3C) = [q | k | v] rows of positions 0..n−1, the current
// token last. For every head h:  s_j = q·k_j/√hs,  a_j = softmax_j(s) → att (NH,n),  out_h = Σ_j a_j v_j.
// One block per head: the threads stride over j for the scores, two block reductions give max and sum, then
// each thread owns output channels i (stride blockDim) and sums a_j v_j[i] over j in order (deterministic).
__global__ void kv_attention_step_kernel(float* out, float* att, const float* cache, int n, int C, int hs, float scale) {
    __shared__ float red[32];
    const int h = blockIdx.x;
    const int64_t C3 = 3 * (int64_t)C;
    const float* q = cache + (int64_t)(n - 1) * C3 + (int64_t)h * hs;  // (hs) the current row's query
    float* a = att + (int64_t)h * n;                                    // (n)
    float maxv = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const float* k = cache + (int64_t)j * C3 + C + (int64_t)h * hs;  // (hs)
        float s = 0.0f;
        for (int i = 0; i < hs; i++) s += q[i] * k[i];
        a[j] = scale * s;
        maxv = fmaxf(maxv, a[j]);
    }
    maxv = block_max(maxv, red);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        a[j] = expf(a[j] - maxv);
        sum += a[j];
    }
    sum = block_sum(sum, red);  // its __syncthreads() also publishes every a[j] to the whole block
    const float inv = 1.0f / sum;
    for (int j = threadIdx.x; j < n; j += blockDim.x) a[j] *= inv;
    __syncthreads();
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float o = 0.0f;
        for (int j = 0; j < n; j++) o += a[j] * cache[(int64_t)j * C3 + 2 * C + (int64_t)h * hs + i];
        out[(int64_t)h * hs + i] = o;
    }
}

void kv_attention_step(float* out, float* att, const float* cache, int n, int C, int NH) {
    ICL_ASSERT(NH > 0 && C % NH == 0 && n > 0);
    const int hs = C / NH;
    kv_attention_step_kernel<<<NH, 128>>>(out, att, cache, n, C, hs, 1.0f / sqrtf((float)hs));
    launchCheck("kv_attention_step_kernel");
}

}  // namespace icl::cuda
