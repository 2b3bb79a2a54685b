// attention_fused.cu — causal softmax attention in O(B·NH·T) memory on the GPU: the forward streams the keys
// through an online softmax and saves only each row's log-sum-exp; the backward recomputes each probability
// from it. No (B,NH,T,T) buffer at all (cuda/attention.cu's O(T) form still passes a group's T×T block through
// device scratch). CPU reference and notation: src/layers/attention.h (attention_forward_lse / backward_lse).
//
// Per (b, h), query row i attends to keys lo_i..i (lo_i = i below the sequence's key start ks, else ks;
// cuda/attention.cu row_key_range), s_ij = scale·q_i·k_j, scale = 1/√hs:
//   forward:   m_i = max_j s_ij,  l_i = Σ_j e^{s_ij − m_i},  out_i = Σ_j e^{s_ij − m_i} v_j / l_i,  lse_i = m_i + log l_i
//              kept as running (m, l, acc) over the keys in order: a larger s rescales l and acc by e^{m_old − m_new}
//   backward:  P_ij = e^{s_ij − lse_i},  D_i = dout_i·out_i,  dS_ij = P_ij (dout_i·v_j − D_i)
//              dq_i += scale Σ_j dS_ij k_j          (one thread per query row, keys streamed)
//              dk_j += scale Σ_i dS_ij q_i,  dv_j += Σ_i P_ij dout_i   (one thread per key row, queries streamed)
//
// How it runs: a block of 64 threads owns 64 consecutive rows of one (b, h); tiles of KT rows of the other side
// (keys and values, or queries, output gradients, lse and D) are staged in shared memory and every thread walks
// them in order, so each result is one thread's sequential sum: deterministic, no atomics. Whole tiles past the
// causal boundary are never loaded (blocks of queries stop at their last row; blocks of keys start at their
// first). The per-thread row (q, acc / k, v, dk, dv) lives in local arrays sized for hs <= 128; larger heads go
// through cuda/attention.cu. Plain fp32 FMA loops, no tensor cores: a readable first version. Measured on an H200
// (2026-11-28, docs/benchmarks.md): 3.75× slower than the cuBLAS form at GPT-2 small (692.7 vs 184.6 ms per fp32
// step), so it stays off by default (ICL_FUSED_ATTENTION=1 selects it, engine/device.h); it wins only on memory.
#include "cuda/common.cuh"
#include "cuda/layers.h"

namespace icl::cuda {

namespace {

constexpr int FA_ROWS = 64;  // rows (threads) per block

// rows per shared-memory tile: two (KT, hs) tiles and two (KT) vectors within the default 48 KiB (8·KT·(hs+1) bytes)
int fused_tile(int hs) { return std::max(1, std::min(64, 6000 / hs)); }

// the first key any row of [i0, i1] attends to (row_key_range: lo_i = i for i < ks, else ks)
__device__ __forceinline__ int first_key(int i0, int i1, int ks) { return i1 >= ks ? min(ks, i0) : i0; }

// This thread's query row in a block of FA_ROWS rows of one (b, h) — grid (row blocks, B·NH); row i's keys are lo..i —
// and the block's two shared (KT,hs) tiles.
struct QueryRows {
    int hs, bh, b, h, i0, i1, i, ks, lo;
    bool active;        // i < T (the last block's spare threads still stage tiles)
    float scale;        // 1/√hs
    const float* base;  // this sequence's qkv rows (T,3C)
    float *sk, *sv;     // shared tiles: keys, values
};
__device__ __forceinline__ QueryRows query_rows(const float* qkv, float* sh, int KT, int T, int C, int NH, const int* kstart) {
    QueryRows r;
    r.hs = C / NH;
    r.bh = blockIdx.y;
    r.b = r.bh / NH;
    r.h = r.bh % NH;
    r.i0 = blockIdx.x * FA_ROWS;
    r.i1 = min(T - 1, r.i0 + FA_ROWS - 1);
    r.i = r.i0 + threadIdx.x;
    r.active = r.i < T;
    r.ks = kstart ? kstart[r.b] : 0;
    r.lo = r.i < r.ks ? r.i : r.ks;
    r.scale = 1.0f / sqrtf((float)r.hs);
    r.base = qkv + (size_t)r.b * T * 3 * C;
    r.sk = sh;
    r.sv = sh + (size_t)KT * r.hs;
    return r;
}

// The whole block stages keys and values j0..j0+KT−1 of head h (zeros past `last`) into sk, sv (KT,hs).
__device__ __forceinline__ void load_kv_tile(float* sk, float* sv, const float* base, int j0, int last, int KT, int hs, int C, int h) {
    for (int e = threadIdx.x; e < KT * hs; e += blockDim.x) {
        const int j = j0 + e / hs, c = e % hs;
        sk[e] = j <= last ? base[(size_t)j * 3 * C + C + h * hs + c] : 0.0f;
        sv[e] = j <= last ? base[(size_t)j * 3 * C + 2 * C + h * hs + c] : 0.0f;
    }
}

// Every key query row R.i attends to, in order, staged tile by tile by the whole block: f(k_j, v_j) on the active
// threads (every thread takes part in the staging and its barriers).
template <typename F>
__device__ __forceinline__ void for_each_key(const QueryRows& R, int KT, int C, F&& f) {
    for (int j0 = first_key(R.i0, R.i1, R.ks); j0 <= R.i1; j0 += KT) {
        __syncthreads();  // the previous tile is no longer read
        load_kv_tile(R.sk, R.sv, R.base, j0, R.i1, KT, R.hs, C, R.h);
        __syncthreads();
        if (!R.active) continue;
        const int jend = min(j0 + KT - 1, R.i);
        for (int j = max(j0, R.lo); j <= jend; j++) f(R.sk + (size_t)(j - j0) * R.hs, R.sv + (size_t)(j - j0) * R.hs);
    }
}

template <int HSM>
__global__ void attn_fused_forward_kernel(float* out, float* lse, const float* qkv, int T, int C, int NH, const int* kstart, int KT) {
    extern __shared__ float sh[];  // K tile (KT,hs) | V tile (KT,hs)
    const QueryRows R = query_rows(qkv, sh, KT, T, C, NH, kstart);
    const int hs = R.hs;
    float q[HSM], acc[HSM];
    for (int c = 0; c < hs; c++) {
        q[c] = R.active ? R.base[(size_t)R.i * 3 * C + R.h * hs + c] : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for_each_key(R, KT, C, [&](const float* kj, const float* vj) {
        float s = 0.0f;
        for (int c = 0; c < hs; c++) s += q[c] * kj[c];
        s *= R.scale;
        if (s > m) {  // a new maximum: rescale what was summed under the old one (e^{−∞} = 0 at the first key)
            const float corr = expf(m - s);
            l *= corr;
            for (int c = 0; c < hs; c++) acc[c] *= corr;
            m = s;
        }
        const float p = expf(s - m);
        l += p;
        for (int c = 0; c < hs; c++) acc[c] += p * vj[c];
    });
    if (!R.active) return;
    float* o = out + ((size_t)R.b * T + R.i) * C + R.h * hs;
    for (int c = 0; c < hs; c++) o[c] = acc[c] / l;
    lse[(size_t)R.bh * T + R.i] = m + logf(l);
}

// D[bh·T + i] = dout_i · out_i    one warp per (b, h, i)
__global__ void attn_fused_d_kernel(float* D, const float* dout, const float* out, int B, int T, int C, int NH) {
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;  // r = bh·T + i
    const int lane = threadIdx.x % WARP;
    if (r >= (int64_t)B * NH * T) return;
    const int hs = C / NH, i = (int)(r % T), bh = (int)(r / T), b = bh / NH, h = bh % NH;
    const size_t at = ((size_t)b * T + i) * C + (size_t)h * hs;
    float s = 0.0f;
    for (int c = lane; c < hs; c += WARP) s += dout[at + c] * out[at + c];
    s = warp_sum(s);
    if (lane == 0) D[r] = s;
}

// dq_i += scale Σ_j dS_ij k_j: one thread per query row, keys and values streamed through shared memory
template <int HSM>
__global__ void attn_fused_dq_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D, int T, int C, int NH,
                                     const int* kstart, int KT) {
    extern __shared__ float sh[];  // K tile (KT,hs) | V tile (KT,hs)
    const QueryRows R = query_rows(qkv, sh, KT, T, C, NH, kstart);
    const int hs = R.hs;
    float q[HSM], g[HSM], dq[HSM];
    for (int c = 0; c < hs; c++) {
        q[c] = R.active ? R.base[(size_t)R.i * 3 * C + R.h * hs + c] : 0.0f;
        g[c] = R.active ? dout[((size_t)R.b * T + R.i) * C + R.h * hs + c] : 0.0f;
        dq[c] = 0.0f;
    }
    const float li = R.active ? lse[(size_t)R.bh * T + R.i] : 0.0f, Di = R.active ? D[(size_t)R.bh * T + R.i] : 0.0f;
    for_each_key(R, KT, C, [&](const float* kj, const float* vj) {
        float s = 0.0f, dp = 0.0f;
        for (int c = 0; c < hs; c++) { s += q[c] * kj[c]; dp += g[c] * vj[c]; }
        const float ds = expf(s * R.scale - li) * (dp - Di);  // dS_ij = P_ij (dP_ij − D_i)
        for (int c = 0; c < hs; c++) dq[c] += ds * kj[c];
    });
    if (!R.active) return;
    float* o = dqkv + ((size_t)R.b * T + R.i) * 3 * C + R.h * hs;
    for (int c = 0; c < hs; c++) o[c] += R.scale * dq[c];
}

// dk_j += scale Σ_i dS_ij q_i, dv_j += Σ_i P_ij dout_i: one thread per key row, the queries that see it streamed
template <int HSM>
__global__ void attn_fused_dkv_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D, int T, int C, int NH,
                                      const int* kstart, int KT) {
    extern __shared__ float sh[];  // Q tile (KT,hs) | dout tile (KT,hs) | lse (KT) | D (KT)
    const int hs = C / NH, bh = blockIdx.y, b = bh / NH, h = bh % NH;
    float* sq = sh;
    float* sg = sh + (size_t)KT * hs;
    float* sl = sg + (size_t)KT * hs;
    float* sd = sl + KT;
    const int j0b = blockIdx.x * FA_ROWS, j = j0b + threadIdx.x;
    const bool active = j < T;
    const int ks = kstart ? kstart[b] : 0;
    const float scale = 1.0f / sqrtf((float)hs);
    const float* base = qkv + (size_t)b * T * 3 * C;
    float k[HSM], v[HSM], dk[HSM], dv[HSM];
    for (int c = 0; c < hs; c++) {
        k[c] = active ? base[(size_t)j * 3 * C + C + h * hs + c] : 0.0f;
        v[c] = active ? base[(size_t)j * 3 * C + 2 * C + h * hs + c] : 0.0f;
        dk[c] = dv[c] = 0.0f;
    }
    // queries before the block's first key never see it; a key below the sequence's first key (kstart) is seen only
    // by its own query, so a block of such keys stops at its own last row
    const int qend = j0b + FA_ROWS <= ks ? min(T, j0b + FA_ROWS) : T;
    for (int q0 = j0b; q0 < qend; q0 += KT) {
        __syncthreads();
        for (int e = threadIdx.x; e < KT * hs; e += blockDim.x) {
            const int i = q0 + e / hs, c = e % hs;
            sq[e] = i < T ? base[(size_t)i * 3 * C + h * hs + c] : 0.0f;
            sg[e] = i < T ? dout[((size_t)b * T + i) * C + h * hs + c] : 0.0f;
        }
        for (int e = threadIdx.x; e < KT; e += blockDim.x) {
            const int i = q0 + e;
            sl[e] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
            sd[e] = i < T ? D[(size_t)bh * T + i] : 0.0f;
        }
        __syncthreads();
        if (!active) continue;
        const int iend = min(q0 + KT, T);
        for (int i = max(q0, j); i < iend; i++) {
            if (j < (i < ks ? i : ks)) continue;  // row i's keys are lo_i..i
            const float* qi = sq + (size_t)(i - q0) * hs;
            const float* gi = sg + (size_t)(i - q0) * hs;
            float s = 0.0f, dp = 0.0f;
            for (int c = 0; c < hs; c++) { s += qi[c] * k[c]; dp += gi[c] * v[c]; }
            const float p = expf(s * scale - sl[i - q0]);
            const float ds = p * (dp - sd[i - q0]);
            for (int c = 0; c < hs; c++) {
                dv[c] += p * gi[c];
                dk[c] += ds * qi[c];
            }
        }
    }
    if (!active) return;
    float* o = dqkv + ((size_t)b * T + j) * 3 * C + h * hs;
    for (int c = 0; c < hs; c++) {
        o[C + c] += scale * dk[c];
        o[2 * C + c] += dv[c];
    }
}

template <int HSM>
void fused_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, const int* kstart) {
    const int hs = C / NH, KT = fused_tile(hs);
    const dim3 grid(blocks(T, FA_ROWS), B * NH);
    attn_fused_forward_kernel<HSM><<<grid, FA_ROWS, 2 * (size_t)KT * hs * sizeof(float)>>>(out, lse, qkv, T, C, NH, kstart, KT);
    launchCheck("attn_fused_forward_kernel");
}

template <int HSM>
void fused_backward(float* dqkv, const float* dout, const float* out, const float* qkv, const float* lse, int B, int T, int C, int NH,
                    const int* kstart) {
    const int hs = C / NH, KT = fused_tile(hs);
    float* D = scratch_as<float>(Scratch::attn_fused_d, (size_t)B * NH * T);
    attn_fused_d_kernel<<<blocks((int64_t)B * NH * T, 8), 8 * WARP>>>(D, dout, out, B, T, C, NH);
    launchCheck("attn_fused_d_kernel");
    const dim3 grid(blocks(T, FA_ROWS), B * NH);
    attn_fused_dq_kernel<HSM><<<grid, FA_ROWS, 2 * (size_t)KT * hs * sizeof(float)>>>(dqkv, dout, qkv, lse, D, T, C, NH, kstart, KT);
    launchCheck("attn_fused_dq_kernel");
    attn_fused_dkv_kernel<HSM><<<grid, FA_ROWS, (2 * (size_t)KT * hs + 2 * KT) * sizeof(float)>>>(dqkv, dout, qkv, lse, D, T, C, NH, kstart, KT);
    launchCheck("attn_fused_dkv_kernel");
}

}  // namespace

bool attention_fused_fits(int B, int T, int C, int NH) {
    return NH > 0 && C % NH == 0 && C / NH <= 128 && (int64_t)B * NH <= 65535 && T <= 65535LL * FA_ROWS;  // head size, grid
}

void attention_fused_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, const int* kstart) {
    ICL_ASSERT(attention_fused_fits(B, T, C, NH));
    const int hs = C / NH;
    if (hs <= 32) fused_forward<32>(out, lse, qkv, B, T, C, NH, kstart);
    else if (hs <= 64) fused_forward<64>(out, lse, qkv, B, T, C, NH, kstart);
    else fused_forward<128>(out, lse, qkv, B, T, C, NH, kstart);
}

void attention_fused_backward(float* dqkv, const float* dout, const float* out, const float* qkv, const float* lse, int B, int T, int C, int NH,
                              const int* kstart) {
    ICL_ASSERT(attention_fused_fits(B, T, C, NH));
    const int hs = C / NH;
    if (hs <= 32) fused_backward<32>(dqkv, dout, out, qkv, lse, B, T, C, NH, kstart);
    else if (hs <= 64) fused_backward<64>(dqkv, dout, out, qkv, lse, B, T, C, NH, kstart);
    else fused_backward<128>(dqkv, dout, out, qkv, lse, B, T, C, NH, kstart);
}

}  // namespace icl::cuda
