// kernel_attention.cu — causal multi-head kernel (linearized) attention with RoPE after φ and the two ICLCA
// bias terms (spec/iclca.md §1.2–1.7), forward, backward and the one-token streaming step.
// CPU reference, notation and derivation: src/layers/kernel_attention.h. Per (b, h), m = hs, p_t = pos[b,t]:
//
//   a_t = φ(q_t), c_t = φ(k_t)                φ(x) = elu(x)+1 = x+1 (x>0), eˣ (x<=0)        saved (B,NH,T,m)
//   â_t = R_{p_t} a_t, ĉ_t = R_{p_t} c_t      RoPE on adjacent pairs, θ_k = 10000^(−2k/m)     saved (B,NH,T,m)
//   S_t = b_KV[h] + Σ_{j<=t} ĉ_j v_jᵀ          (m,hs)
//   z_t = b_D[h]  + Σ_{j<=t} c_j               (m)
//   den_t = a_t·z_t + eps                                                                     saved (B,NH,T)
//   out_t = (â_tᵀ S_t) / den_t                 (hs) → out[b, t, h·hs : h·hs+hs]
//
// How it runs. Two forms, picked by ICL_KATTN_FORM / set_kernel_attention_form (engine/device.h):
//  * chunked (the default), like the CPU's parallel form: chunks of KC = 32 tokens. Per (pair, chunk c) with S_c, z_c
//    the state before the chunk and t, s rows of the chunk,
//      num_t = â_tᵀ S_c + Σ_{s<=t} (â_t·ĉ_s) v_s,      den_t = a_t·Z_t + eps,   Z_t = z_c + Σ_{s<=t} c_s;
//    (1) the chunks' sums ΔS_c = Σ_t ĉ_t v_tᵀ, Δz_c = Σ_t c_t, every (pair, chunk, element) at once; (2) an exclusive
//    prefix over the chunks, from the biases, gives S_c, z_c (one thread per (pair, element), chunks in order);
//    (3) one block per (pair, chunk) forms its rows from S_c, z_c and the chunk's own (KC×KC) scores. The backward is
//    the same three steps on the reversed sums U_c = Σ_{t after chunk c} â_t dnum_tᵀ, w_c = Σ_{t after c} a_t dden_t
//    (below). Every pair and chunk runs in parallel: B·NH·T/KC blocks.
//  * scan: the plainest correct mapping, the RECURRENT form — one thread block per (b, h) walks the tokens in order
//    and keeps the state. Thread j owns column j of S (m values, in a global scratch slice of the pair — coalesced
//    across j and L2-resident — or, with scan-shared, in shared memory: state_in_shared below), threads i < m own z_i;
//    â_t, ĉ_t, a_t sit in shared memory for the step. O(T·m·hs) per pair like the chunked form but sequential in T:
//    B·NH blocks. Kept as the readable reference of the chunked kernels (and for head sizes whose chunk does not fit
//    shared memory). Backward is the same scan twice:
//   forward sweep (t ascending):  dâ_t = S_t dnum_t,  da_t = R_{p_t}ᵀ dâ_t + z_t·dden_t,  dq_t += φ'(q_t) da_t
//   reverse sweep (t descending): U_t = Σ_{t'>=t} â_{t'} dnum_{t'}ᵀ,  w_t = Σ_{t'>=t} a_{t'} dden_{t'}
//                                 dĉ_t = U_t v_t,  dv_t += U_tᵀ ĉ_t,  dc_t = R_{p_t}ᵀ dĉ_t + w_t,  dk_t += φ'(k_t) dc_t
//   with dnum_t = g_t/den_t, dden_t = −(g_t·out_t)/den_t; the bias gradients are U_0 and w_0, summed over b in
//   order by a last small kernel (deterministic). Both forms are deterministic (no atomics).
// RoPE angles are computed in double and rounded once to float, as on the CPU (rope.h).
#include <algorithm>
#include <cstdio>

#include "cuda/common.cuh"
#include "cuda/layers.h"
#include "engine/device.h"

namespace icl::cuda {

__device__ inline float phi_of(float x) { return x > 0.0f ? x + 1.0f : expf(x); }              // elu(x) + 1
__device__ inline float dphi_of(float x, float f) { return x > 0.0f ? 1.0f : f; }              // φ'(x), f = φ(x)
// (cos, sin) of p·θ_k, θ_k = 10000^(−2k/m), in double, rounded to float
__device__ inline void rope_cs(int p, int k, int m, float* c, float* s) {
    const double a = (double)p * pow(10000.0, -2.0 * k / (double)m);
    double sd, cd;
    sincos(a, &sd, &cd);
    *c = (float)cd;
    *s = (float)sd;
}
// y_i of y = Rᵀ x (sign −1) for the pair containing i, reading x (m) from shared memory
__device__ inline float rope_transpose_at(const float* x, int i, int p, int m) {
    float c, s;
    rope_cs(p, i / 2, m, &c, &s);
    // R: y0 = x0 c − x1 s, y1 = x0 s + x1 c   =>   Rᵀ: y0 = x0 c + x1 s, y1 = −x0 s + x1 c
    return (i % 2 == 0) ? x[i] * c + x[i + 1] * s : -x[i - 1] * s + x[i] * c;
}

// ---- features: a = φ(q), c = φ(k), â = R a, ĉ = R c --------------------------------------------------------
// one thread per (b, t, h, pair k): both elements of the pair, for q and for k
__global__ void kattn_features_kernel(float* phiq, float* phik, float* rphiq, float* rphik, const float* qkv, const int* pos, int B, int T,
                                      int C, int NH) {
    const int hs = C / NH, m = hs, half = m / 2;
    const int64_t total = (int64_t)B * T * NH * half;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int k = (int)(i % half);
        const int h = (int)((i / half) % NH);
        const int64_t n = i / ((int64_t)half * NH);  // b·T + t
        const int b = (int)(n / T), t = (int)(n % T);
        const int p = pos ? pos[n] : t;
        float c, s;
        rope_cs(p, k, m, &c, &s);
        const size_t o = (((size_t)b * NH + h) * T + t) * m + 2 * k;
        for (int part = 0; part < 2; part++) {  // q, then k
            const float* x = qkv + (size_t)n * 3 * C + part * C + h * hs + 2 * k;
            const float a0 = phi_of(x[0]), a1 = phi_of(x[1]);
            float* f = part ? phik : phiq;
            float* rf = part ? rphik : rphiq;
            f[o] = a0;
            f[o + 1] = a1;
            rf[o] = a0 * c - a1 * s;  // y[2k]   = x[2k]·cos − x[2k+1]·sin
            rf[o + 1] = a0 * s + a1 * c;  // y[2k+1] = x[2k]·sin + x[2k+1]·cos
        }
    }
}

// ---- forward scan: one block per (b,h), thread j = column j of S, threads i < m own z_i -------------------
// state (B·NH, m·hs + m): the pair's S (z stays in registers). shared: â, ĉ, a (m each) + 32 for block_sum.
__global__ void kattn_forward_scan_kernel(float* out, float* den, float* state, const float* phiq, const float* phik, const float* rphiq,
                                          const float* rphik, const float* qkv, const float* bkv, const float* bd, int T, int C, int NH,
                                          float eps, bool shared_state) {
    extern __shared__ float sh[];
    const int hs = C / NH, m = hs, bh = blockIdx.x, b = bh / NH, h = bh % NH, j = threadIdx.x;
    float* ah = sh;           // (m) â_t
    float* ch = ah + m;       // (m) ĉ_t
    float* a = ch + m;        // (m) a_t
    float* red = a + m;       // (32)
    // S (m,hs), column j owned by thread j: in shared memory (rows padded to hs+1) or the pair's global slice
    const int ld = shared_state ? hs + 1 : hs;
    float* S = shared_state ? red + 32 : state + (size_t)bh * ((size_t)m * hs + m);
    // the states start at the biases (the bias is the state before the first token)
    if (j < hs)
        for (int i = 0; i < m; i++) S[(size_t)i * ld + j] = bkv ? bkv[((size_t)h * m + i) * hs + j] : 0.0f;
    float z = (j < m && bd) ? bd[(size_t)h * m + j] : 0.0f;  // z_j (thread j < m)
    const size_t fo = (size_t)bh * T * m;
    for (int t = 0; t < T; t++) {
        float cj = 0.0f;
        if (j < m) {
            ah[j] = rphiq[fo + (size_t)t * m + j];
            ch[j] = rphik[fo + (size_t)t * m + j];
            a[j] = phiq[fo + (size_t)t * m + j];
            cj = phik[fo + (size_t)t * m + j];
        }
        __syncthreads();
        // z_t = z_{t−1} + c_t ;  den_t = a_t·z_t + eps
        float part = 0.0f;
        if (j < m) {
            z += cj;
            part = a[j] * z;
        }
        const float d = block_sum(part, red) + eps;
        const float inv = 1.0f / d;
        // S_t = S_{t−1} + ĉ_t v_tᵀ  (column j) ;  out_t[j] = Σ_i â_t[i] S_t[i,j] / den_t
        if (j < hs) {
            const float vj = qkv[((size_t)b * T + t) * 3 * C + 2 * C + h * hs + j];
            float acc = 0.0f;
            for (int i = 0; i < m; i++) {
                const float sij = S[(size_t)i * ld + j] + ch[i] * vj;
                S[(size_t)i * ld + j] = sij;
                acc += ah[i] * sij;
            }
            out[((size_t)b * T + t) * C + h * hs + j] = acc * inv;
        }
        if (j == 0) den[(size_t)bh * T + t] = d;
        __syncthreads();  // ah/ch/a are rewritten by the next token
    }
}

static int scan_threads(int hs) { return std::max(WARP, ceil_div(hs, WARP) * WARP); }

// Whether a scan keeps its (m,hs) state in shared memory (rows padded to hs+1 floats: the row reads of the backward
// sweeps then hit 32 different banks) rather than in the pair's global scratch slice: when
// the form is scan-shared (ICL_KATTN_FORM=scan-shared) and it fits the device's opt-in limit. Adds the state to `shmem` and raises the kernel's dynamic shared-memory limit past 48 KiB if needed.
static bool state_in_shared(const void* kernel, size_t& shmem, int m, int hs) {
    if (icl::kernel_attention_form() != icl::KattnForm::scan_shared) return false;
    const size_t total = shmem + (size_t)m * (hs + 1) * sizeof(float);
    const int optin = shared_memory_optin();
    if (total > (size_t)optin) return false;
    if (total > 48 * 1024) cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)total));
    shmem = total;
    return true;
}

// ---- the chunked form ------------------------------------------------------------------------------------------
constexpr int KC = 32;  // tokens per chunk

// (1) Per (pair bh, chunk c): st[(bh·nC + c)·P + e], P = m·hs + m, with t over the chunk's rows
//       e = i·hs + j < m·hs:  Σ_t X_t[i] · Y_t[j]          Y_t[j] = y[(b·T + t)·ldy + h·hs + j] / (ydiv ? ydiv[bh·T + t] : 1)
//       e = m·hs + i:         Σ_t F_t[i] · (w ? w[bh·T + t] : 1)
//     forward: X = ĉ, y = v, F = c (ΔS_c, Δz_c);  backward: X = â, y = g with ydiv = den (dnum), F = a, w = dden (ΔU_c, Δw_c).
//     grid (ceil(P/256), nC, B·NH); t in order.
__global__ void kattn_chunk_sums_kernel(float* st, const float* X, const float* y, int ldy, const float* ydiv, const float* F, const float* w,
                                        int T, int NH, int m, int hs, int nC) {
    const int P = m * hs + m, e = blockIdx.x * blockDim.x + threadIdx.x, c = blockIdx.y, bh = blockIdx.z, b = bh / NH, h = bh % NH;
    if (e >= P) return;
    const int t0 = c * KC, t1 = min(T, t0 + KC);
    const size_t fo = (size_t)bh * T * m;
    float acc = 0.0f;
    if (e < m * hs) {
        const int i = e / hs, j = e % hs;
        for (int t = t0; t < t1; t++) {
            const float yv = y[((size_t)b * T + t) * ldy + (size_t)h * hs + j];
            acc += X[fo + (size_t)t * m + i] * (ydiv ? yv / ydiv[(size_t)bh * T + t] : yv);
        }
    } else {
        const int i = e - m * hs;
        for (int t = t0; t < t1; t++) acc += F[fo + (size_t)t * m + i] * (w ? w[(size_t)bh * T + t] : 1.0f);
    }
    st[((size_t)bh * nC + c) * P + e] = acc;
}

// (2) forward: st[c] <- (b_KV, b_D)[h] + Σ_{c'<c} st[c']   (the state before chunk c)
//     reverse: st[c] <- Σ_{c'>c} st[c'] (the sums after chunk c),  total[bh] <- Σ_c st[c] (U_0, w_0: the bias gradients)
//     one thread per (pair, element), chunks in order; grid (ceil(P/256), B·NH)
__global__ void kattn_chunk_scan_kernel(float* st, float* total, const float* bkv, const float* bd, int NH, int m, int hs, int nC, bool reverse) {
    const int P = m * hs + m, e = blockIdx.x * blockDim.x + threadIdx.x, bh = blockIdx.y, h = bh % NH;
    if (e >= P) return;
    float run = 0.0f;
    if (!reverse) run = e < m * hs ? (bkv ? bkv[(size_t)h * m * hs + e] : 0.0f) : (bd ? bd[(size_t)h * m + (e - m * hs)] : 0.0f);
    for (int k = 0; k < nC; k++) {
        const int c = reverse ? nC - 1 - k : k;
        float* x = st + ((size_t)bh * nC + c) * P + e;
        const float d = *x;
        *x = run;
        run += d;
    }
    if (total) total[(size_t)bh * P + e] = run;
}

// Shared-memory floats of the chunk kernels (feature rows padded to m+1, and the backward's v rows to hs+1: the score
// loops read column i (j) of KC rows).
static size_t chunk_forward_floats(int m, int hs) { return 4 * (size_t)KC * (m + 1) + (size_t)KC * hs + (size_t)KC * KC + KC; }
static size_t chunk_backward_floats(int m, int hs) { return 6 * (size_t)KC * (m + 1) + (size_t)KC * (hs + 1) + (size_t)KC * hs + 2 * (size_t)KC * KC + KC; }

// The chunk's rows of the four feature arrays (B·NH, T, m) into shared (KC, m+1) tiles: â, ĉ, a, c.
__device__ inline void load_chunk_features(float* ah, float* ch, float* a, float* c, const float* rphiq, const float* rphik, const float* phiq,
                                           const float* phik, size_t fo, int n, int m, int ld) {
    for (int k = threadIdx.x; k < n * m; k += blockDim.x) {
        const int t = k / m, i = k % m;
        ah[t * ld + i] = rphiq[fo + k];
        ch[t * ld + i] = rphik[fo + k];
        a[t * ld + i] = phiq[fo + k];
        c[t * ld + i] = phik[fo + k];
    }
}

// Z_t = z_c + Σ_{s<=t} c_s in place over the chunk's c tile (one thread per feature i)
__device__ inline void chunk_prefix_z(float* Z, const float* zc, int n, int m, int ld) {
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        float z = zc[i];
        for (int t = 0; t < n; t++) { z += Z[t * ld + i]; Z[t * ld + i] = z; }
    }
}

// (3) forward, one block per (chunk c, pair bh):
//   Z_t = z_c + Σ_{s<=t} c_s;   den_t = a_t·Z_t + eps;   A[t][s] = â_t·ĉ_s (s <= t);
//   out_t = (â_tᵀ S_c + Σ_{s<=t} A[t][s] v_s) / den_t          (S_c, z_c: st after step 2)
__global__ void kattn_chunk_forward_kernel(float* out, float* den, const float* st, const float* phiq, const float* phik, const float* rphiq,
                                           const float* rphik, const float* qkv, int T, int C, int NH, int nC, float eps) {
    extern __shared__ float sh[];
    const int hs = C / NH, m = hs, c = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, ld = m + 1;
    const int t0 = c * KC, n = min(KC, T - t0), tid = threadIdx.x, nt = blockDim.x;
    float* ah = sh;              // (KC, m+1) â
    float* ch = ah + KC * ld;    // (KC, m+1) ĉ
    float* a = ch + KC * ld;     // (KC, m+1) a
    float* Z = a + KC * ld;      // (KC, m+1) c, then Z
    float* v = Z + KC * ld;      // (KC, hs)
    float* A = v + KC * hs;      // (KC, KC)  scores
    float* dn = A + KC * KC;     // (KC)      den
    const float* S = st + ((size_t)bh * nC + c) * ((size_t)m * hs + m);  // (m,hs) S_c, then (m) z_c
    const size_t fo = ((size_t)bh * T + t0) * m;
    load_chunk_features(ah, ch, a, Z, rphiq, rphik, phiq, phik, fo, n, m, ld);
    for (int k = tid; k < n * hs; k += nt) {
        const int t = k / hs, j = k % hs;
        v[k] = qkv[((size_t)b * T + t0 + t) * 3 * C + 2 * C + (size_t)h * hs + j];
    }
    __syncthreads();
    chunk_prefix_z(Z, S + (size_t)m * hs, n, m, ld);
    for (int k = tid; k < n * n; k += nt) {
        const int t = k / n, s2 = k % n;
        float x = 0.0f;
        if (s2 <= t)
            for (int i = 0; i < m; i++) x += ah[t * ld + i] * ch[s2 * ld + i];
        A[t * KC + s2] = x;
    }
    __syncthreads();
    for (int t = tid / WARP; t < n; t += nt / WARP) {  // den_t = a_t·Z_t + eps, one warp per row
        float x = 0.0f;
        for (int i = tid % WARP; i < m; i += WARP) x += a[t * ld + i] * Z[t * ld + i];
        x = warp_sum(x) + eps;
        if (tid % WARP == 0) {
            dn[t] = x;
            den[(size_t)bh * T + t0 + t] = x;
        }
    }
    __syncthreads();
    for (int k = tid; k < n * hs; k += nt) {  // out_t[j] = (Σ_i â_t[i] S_c[i,j] + Σ_{s<=t} A[t][s] v_s[j]) / den_t
        const int t = k / hs, j = k % hs;
        float x = 0.0f;
        for (int i = 0; i < m; i++) x += ah[t * ld + i] * S[(size_t)i * hs + j];
        for (int s2 = 0; s2 <= t; s2++) x += A[t * KC + s2] * v[s2 * hs + j];
        out[((size_t)b * T + t0 + t) * C + (size_t)h * hs + j] = x / dn[t];
    }
}

// (3) backward, one block per (chunk c, pair bh), with S_c, z_c (forward step 2) and U_c, w_c (the sums after the chunk,
// reverse step 2); dnum_t = g_t / den_t, G[t][s] = v_s·dnum_t, A[t][s] = â_t·ĉ_s (s <= t):
//   num_t = â_tᵀ S_c + Σ_{s<=t} A[t][s] v_s  =>  dâ_t = S_c dnum_t + Σ_{s<=t} G[t][s] ĉ_s
//                                                dĉ_s = Σ_{t>=s} G[t][s] â_t + U_c v_s,    dv_s += Σ_{t>=s} A[t][s] dnum_t + U_cᵀ ĉ_s
//   den_t = a_t·Z_t + eps                    =>  da_t = Z_t dden_t,   dc_s = Σ_{t>=s} a_t dden_t + w_c
//   â = R a, ĉ = R c, a = φ(q), c = φ(k)     =>  dq += φ'(q) (Rᵀ dâ + da),   dk += φ'(k) (Rᵀ dĉ + dc)
__global__ void kattn_chunk_backward_kernel(float* dqkv, const float* stS, const float* stU, const float* dout, const float* phiq,
                                            const float* phik, const float* rphiq, const float* rphik, const float* den, const float* dd,
                                            const float* qkv, const int* pos, int T, int C, int NH, int nC) {
    extern __shared__ float sh[];
    const int hs = C / NH, m = hs, c = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, ld = m + 1;
    const int t0 = c * KC, n = min(KC, T - t0), tid = threadIdx.x, nt = blockDim.x;
    float* ah = sh;              // (KC, m+1) â
    float* ch = ah + KC * ld;    // (KC, m+1) ĉ
    float* W = ch + KC * ld;     // (KC, m+1) a, then Σ_{t'>=t} a_t' dden_t' + w_c
    float* Z = W + KC * ld;      // (KC, m+1) c, then Z
    float* X = Z + KC * ld;      // (KC, m+1) dâ
    float* Y = X + KC * ld;      // (KC, m+1) dĉ
    float* v = Y + KC * ld;      // (KC, hs+1)
    float* dnum = v + KC * (hs + 1);  // (KC, hs)
    float* A = dnum + KC * hs;   // (KC, KC)
    float* G = A + KC * KC;      // (KC, KC)
    float* ddv = G + KC * KC;    // (KC) dden
    const size_t P = (size_t)m * hs + m;
    const float* S = stS + ((size_t)bh * nC + c) * P;  // S_c (m,hs), z_c (m)
    const float* U = stU + ((size_t)bh * nC + c) * P;  // U_c (m,hs), w_c (m)
    const size_t fo = ((size_t)bh * T + t0) * m;
    load_chunk_features(ah, ch, W, Z, rphiq, rphik, phiq, phik, fo, n, m, ld);
    for (int k = tid; k < n * hs; k += nt) {
        const int t = k / hs, j = k % hs;
        const size_t row = (size_t)b * T + t0 + t;
        v[t * (hs + 1) + j] = qkv[row * 3 * C + 2 * C + (size_t)h * hs + j];
        dnum[k] = dout[row * C + (size_t)h * hs + j] / den[(size_t)bh * T + t0 + t];
    }
    for (int t = tid; t < n; t += nt) ddv[t] = dd[(size_t)bh * T + t0 + t];
    __syncthreads();
    chunk_prefix_z(Z, S + (size_t)m * hs, n, m, ld);  // Z_t = z_c + Σ_{s<=t} c_s
    for (int i = tid; i < m; i += nt) {
        float w = U[(size_t)m * hs + i];  // w_c + Σ_{t'>=t} a_t' dden_t'
        for (int t = n - 1; t >= 0; t--) { w += W[t * ld + i] * ddv[t]; W[t * ld + i] = w; }
    }
    for (int k = tid; k < n * n; k += nt) {
        const int t = k / n, s2 = k % n;
        float x = 0.0f, g = 0.0f;
        if (s2 <= t) {
            for (int i = 0; i < m; i++) x += ah[t * ld + i] * ch[s2 * ld + i];
            for (int j = 0; j < hs; j++) g += v[s2 * (hs + 1) + j] * dnum[t * hs + j];
        }
        A[t * KC + s2] = x;
        G[t * KC + s2] = g;
    }
    __syncthreads();
    for (int k = tid; k < n * m; k += nt) {
        const int t = k / m, i = k % m;
        float x = 0.0f, y = 0.0f;
        for (int j = 0; j < hs; j++) {
            x += S[(size_t)i * hs + j] * dnum[t * hs + j];  // dâ_t = S_c dnum_t + ...
            y += U[(size_t)i * hs + j] * v[t * (hs + 1) + j];  // dĉ_t = U_c v_t + ...
        }
        for (int s2 = 0; s2 <= t; s2++) x += G[t * KC + s2] * ch[s2 * ld + i];
        for (int t2 = t; t2 < n; t2++) y += G[t2 * KC + t] * ah[t2 * ld + i];
        X[t * ld + i] = x;
        Y[t * ld + i] = y;
    }
    for (int k = tid; k < n * hs; k += nt) {  // dv_s += Σ_{t>=s} A[t][s] dnum_t + U_cᵀ ĉ_s
        const int s2 = k / hs, j = k % hs;
        float x = 0.0f;
        for (int t = s2; t < n; t++) x += A[t * KC + s2] * dnum[t * hs + j];
        for (int i = 0; i < m; i++) x += U[(size_t)i * hs + j] * ch[s2 * ld + i];
        dqkv[((size_t)b * T + t0 + s2) * 3 * C + 2 * C + (size_t)h * hs + j] += x;
    }
    __syncthreads();
    for (int k = tid; k < n * m; k += nt) {
        const int t = k / m, i = k % m;
        const size_t row = (size_t)b * T + t0 + t;
        const int p = pos ? pos[row] : t0 + t;
        const float da = rope_transpose_at(X + t * ld, i, p, m) + Z[t * ld + i] * ddv[t];  // â = R a; den_t = a_t·Z_t + eps
        const float dc = rope_transpose_at(Y + t * ld, i, p, m) + W[t * ld + i];           // ĉ = R c; Z_t sums c_s
        const float qv = qkv[row * 3 * C + (size_t)h * hs + i], kv = qkv[row * 3 * C + C + (size_t)h * hs + i];
        dqkv[row * 3 * C + (size_t)h * hs + i] += dphi_of(qv, phiq[fo + k]) * da;      // a = φ(q)
        dqkv[row * 3 * C + C + (size_t)h * hs + i] += dphi_of(kv, phik[fo + k]) * dc;  // c = φ(k)
    }
}

// Whether the chunked form runs: asked for (the default), B·NH within a grid's y dimension, and its kernels' shared
// memory within the device's opt-in limit (raised past 48 KiB where needed): head sizes up to 128 fit sm_80 and sm_90
// (A100, H100/H200: 163 KiB and more; the backward at 128 needs 137 KiB), up to 64 also the 99 KiB of sm_86/sm_89.
// Otherwise the scan runs, and says so once on stderr.
static bool chunked_fits(int m, int hs, int BNH) {
    if (icl::kernel_attention_form() != icl::KattnForm::chunked) return false;
    const int optin = shared_memory_optin();
    const size_t f = chunk_forward_floats(m, hs) * sizeof(float), bw = chunk_backward_floats(m, hs) * sizeof(float);
    if (bw > (size_t)optin || f > (size_t)optin || BNH > 65535) {
        static bool said = false;
        if (!said)
            std::fprintf(stderr, "[icl] kernel attention: the chunked form does not fit here (head size %d, B·NH %d, %zu of %d bytes of shared "
                                 "memory): running the scan\n", hs, BNH, std::max(f, bw), optin);
        said = true;
        return false;
    }
    static size_t f_set = 48 * 1024, bw_set = 48 * 1024;  // the kernels' dynamic shared-memory limits, raised as needed
    if (f > f_set) {
        cudaCheck(cudaFuncSetAttribute((const void*)kattn_chunk_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)f));
        f_set = f;
    }
    if (bw > bw_set) {
        cudaCheck(cudaFuncSetAttribute((const void*)kattn_chunk_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bw));
        bw_set = bw;
    }
    return true;
}

// Steps (1) and (2) of the forward: the state before every chunk, st (B·NH, nC, P)
static float* chunk_states(const float* phik, const float* rphik, const float* qkv, const float* bkv, const float* bd, int B, int T, int C,
                           int NH, int nC) {
    const int hs = C / NH, m = hs, P = m * hs + m;
    float* st = scratch_as<float>(Scratch::kattn_red, (size_t)B * NH * nC * P);
    kattn_chunk_sums_kernel<<<dim3(ceil_div(P, 256), nC, B * NH), 256>>>(st, rphik, qkv + 2 * C, 3 * C, nullptr, phik, nullptr, T, NH, m, hs,
                                                                          nC);
    launchCheck("kattn_chunk_sums_kernel");
    kattn_chunk_scan_kernel<<<dim3(ceil_div(P, 256), B * NH), 256>>>(st, nullptr, bkv, bd, NH, m, hs, nC, false);
    launchCheck("kattn_chunk_scan_kernel");
    return st;
}

void kernel_attention_forward(float* out, float* phiq, float* phik, float* rphiq, float* rphik, float* den, float* scratch, const float* qkv,
                              const int* pos, const float* bkv, const float* bd, int B, int T, int C, int NH, double eps) {
    (void)scratch;
    ICL_ASSERT(NH > 0 && C % NH == 0 && (C / NH) % 2 == 0 && C / NH <= 1024);
    const int hs = C / NH, m = hs;
    if (B * T == 0) return;
    kattn_features_kernel<<<grid_for((int64_t)B * T * NH * (m / 2)), 256>>>(phiq, phik, rphiq, rphik, qkv, pos, B, T, C, NH);
    launchCheck("kattn_features_kernel");
    if (chunked_fits(m, hs, B * NH)) {
        const int nC = ceil_div(T, KC);
        const float* st = chunk_states(phik, rphik, qkv, bkv, bd, B, T, C, NH, nC);
        kattn_chunk_forward_kernel<<<dim3(nC, B * NH), 256, chunk_forward_floats(m, hs) * sizeof(float)>>>(out, den, st, phiq, phik, rphiq,
                                                                                                          rphik, qkv, T, C, NH, nC, (float)eps);
        launchCheck("kattn_chunk_forward_kernel");
        return;
    }
    float* state = scratch_as<float>(Scratch::kattn_red, (size_t)B * NH * ((size_t)m * hs + m));
    size_t shmem = (3 * (size_t)m + 32) * sizeof(float);
    const bool sh = state_in_shared((const void*)kattn_forward_scan_kernel, shmem, m, hs);
    kattn_forward_scan_kernel<<<B * NH, scan_threads(hs), shmem>>>(out, den, state, phiq, phik, rphiq, rphik, qkv, bkv, bd, T, C, NH,
                                                                    (float)eps, sh);
    launchCheck("kattn_forward_scan_kernel");
}

// ---- backward ------------------------------------------------------------------------------------------

// out_t = num_t / den_t  =>  dden_t = −(g_t·out_t) / den_t          dd (B,NH,T): one warp per (b,h,t)
__global__ void kattn_dden_kernel(float* dd, const float* dout, const float* out, const float* den, int B, int T, int C, int NH) {
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    const int lane = threadIdx.x % WARP, hs = C / NH;
    if (r >= (int64_t)B * NH * T) return;
    const int t = (int)(r % T), h = (int)((r / T) % NH), b = (int)(r / ((int64_t)T * NH));
    const size_t o = ((size_t)b * T + t) * C + (size_t)h * hs;
    float s = 0.0f;
    for (int j = lane; j < hs; j += WARP) s += dout[o + j] * out[o + j];
    s = warp_sum(s);
    if (lane == 0) dd[r] = -s / den[r];
}

// Forward sweep: dâ_t = S_t dnum_t ;  â = R a  =>  da = Rᵀ dâ ;  den_t = a_t·z_t + eps  =>  da += z_t dden_t ;
// a = φ(q)  =>  dq += φ'(q) da.        One block per (b,h); shared: ĉ (m), dnum (hs), dâ (m), 32.
__global__ void kattn_backward_forward_sweep_kernel(float* dqkv, float* state, const float* dout, const float* phiq, const float* phik,
                                                    const float* rphik, const float* den, const float* dd, const float* qkv, const int* pos,
                                                    const float* bkv, const float* bd, int T, int C, int NH, bool shared_state) {
    extern __shared__ float sh[];
    const int hs = C / NH, m = hs, bh = blockIdx.x, b = bh / NH, h = bh % NH, j = threadIdx.x;
    float* ch = sh;           // (m)  ĉ_t
    float* dnum = ch + m;     // (hs) dnum_t = g_t / den_t
    float* X = dnum + hs;     // (m)  dâ_t
    const int ld = shared_state ? hs + 1 : hs;  // S (m,hs): shared (padded rows) or the pair's global slice
    float* S = shared_state ? X + m : state + (size_t)bh * ((size_t)m * hs + m);
    if (j < hs)
        for (int i = 0; i < m; i++) S[(size_t)i * ld + j] = bkv ? bkv[((size_t)h * m + i) * hs + j] : 0.0f;
    float z = (j < m && bd) ? bd[(size_t)h * m + j] : 0.0f;
    const size_t fo = (size_t)bh * T * m;
    for (int t = 0; t < T; t++) {
        const size_t row = (size_t)b * T + t;
        const float dn_t = den[(size_t)bh * T + t], dd_t = dd[(size_t)bh * T + t];
        if (j < m) ch[j] = rphik[fo + (size_t)t * m + j];
        if (j < hs) dnum[j] = dout[row * C + (size_t)h * hs + j] / dn_t;
        __syncthreads();
        // S_t = S_{t−1} + ĉ_t v_tᵀ  (column j)
        if (j < hs) {
            const float vj = qkv[row * 3 * C + 2 * C + (size_t)h * hs + j];
            for (int i = 0; i < m; i++) S[(size_t)i * ld + j] += ch[i] * vj;
        }
        __syncthreads();  // row i of S_t is read by thread i below
        // num_t = â_tᵀ S_t  =>  dâ_t[i] = Σ_j S_t[i,j] dnum_t[j]
        if (j < m) {
            float x = 0.0f;
            for (int jj = 0; jj < hs; jj++) x += S[(size_t)j * ld + jj] * dnum[jj];
            X[j] = x;
        }
        __syncthreads();
        if (j < m) {
            const int p = pos ? pos[row] : t;
            float da = rope_transpose_at(X, j, p, m);  // â = R a  =>  da = Rᵀ dâ
            z += phik[fo + (size_t)t * m + j];         // z_t = z_{t−1} + c_t
            da += z * dd_t;                            // den_t = a_t·z_t + eps  =>  da += z_t dden_t
            const float qv = qkv[row * 3 * C + (size_t)h * hs + j];
            dqkv[row * 3 * C + (size_t)h * hs + j] += dphi_of(qv, phiq[fo + (size_t)t * m + j]) * da;  // a = φ(q)
        }
        __syncthreads();  // shared arrays are rewritten by the next token
    }
}

// Reverse sweep: U_t = U_{t+1} + â_t dnum_tᵀ, w_t = w_{t+1} + a_t dden_t;  dv_t += U_tᵀ ĉ_t;  dĉ_t = U_t v_t;
// dc_t = Rᵀ dĉ_t + w_t;  dk_t += φ'(k_t) dc_t.  Leaves U_0 (m,hs) and w_0 (m) in the pair's state slice.
// One block per (b,h); shared: â (m), ĉ (m), dnum (hs), v (hs), dĉ (m).
__global__ void kattn_backward_reverse_sweep_kernel(float* dqkv, float* state, const float* dout, const float* phiq, const float* phik,
                                                    const float* rphiq, const float* rphik, const float* den, const float* dd,
                                                    const float* qkv, const int* pos, int T, int C, int NH, bool shared_state) {
    extern __shared__ float sh[];
    const int hs = C / NH, m = hs, bh = blockIdx.x, b = bh / NH, h = bh % NH, j = threadIdx.x;
    float* ah = sh;           // (m)
    float* ch = ah + m;       // (m)
    float* dnum = ch + m;     // (hs)
    float* v = dnum + hs;     // (hs)
    float* X = v + hs;        // (m)  dĉ_t
    float* Ug = state + (size_t)bh * ((size_t)m * hs + m);  // (m,hs) the pair's slice: U_0 at the end
    float* wout = Ug + (size_t)m * hs;                       // (m)
    const int ld = shared_state ? hs + 1 : hs;              // U: shared (padded rows) or the slice itself
    float* U = shared_state ? X + m : Ug;
    if (j < hs)
        for (int i = 0; i < m; i++) U[(size_t)i * ld + j] = 0.0f;
    float w = 0.0f;
    const size_t fo = (size_t)bh * T * m;
    for (int t = T - 1; t >= 0; t--) {
        const size_t row = (size_t)b * T + t;
        const float dn_t = den[(size_t)bh * T + t], dd_t = dd[(size_t)bh * T + t];
        if (j < m) {
            ah[j] = rphiq[fo + (size_t)t * m + j];
            ch[j] = rphik[fo + (size_t)t * m + j];
        }
        if (j < hs) {
            dnum[j] = dout[row * C + (size_t)h * hs + j] / dn_t;
            v[j] = qkv[row * 3 * C + 2 * C + (size_t)h * hs + j];
        }
        __syncthreads();
        // U_t = U_{t+1} + â_t dnum_tᵀ (column j);  S_t = b + Σ_{j'<=t} ĉ_j' v_j'ᵀ  =>  dv_t = U_tᵀ ĉ_t
        if (j < hs) {
            float acc = 0.0f;
            for (int i = 0; i < m; i++) {
                const float u = U[(size_t)i * ld + j] + ah[i] * dnum[j];
                U[(size_t)i * ld + j] = u;
                acc += u * ch[i];
            }
            dqkv[row * 3 * C + 2 * C + (size_t)h * hs + j] += acc;
        }
        __syncthreads();
        // dĉ_t[i] = Σ_j U_t[i,j] v_t[j]
        if (j < m) {
            float x = 0.0f;
            for (int jj = 0; jj < hs; jj++) x += U[(size_t)j * ld + jj] * v[jj];
            X[j] = x;
        }
        __syncthreads();
        if (j < m) {
            const int p = pos ? pos[row] : t;
            w += phiq[fo + (size_t)t * m + j] * dd_t;  // z_t = b_D + Σ_{j'<=t} c_j'  =>  dc_t += Σ_{t'>=t} a_t' dden_t' = w_t
            const float dc = rope_transpose_at(X, j, p, m) + w;  // ĉ = R c  =>  dc += Rᵀ dĉ
            const float kv = qkv[row * 3 * C + C + (size_t)h * hs + j];
            dqkv[row * 3 * C + C + (size_t)h * hs + j] += dphi_of(kv, phik[fo + (size_t)t * m + j]) * dc;  // c = φ(k)
        }
        __syncthreads();
    }
    if (j < m) wout[j] = w;
    if (shared_state && j < hs)  // U_0 (column j, written by this thread only) for the bias gradients
        for (int i = 0; i < m; i++) Ug[(size_t)i * hs + j] = U[(size_t)i * ld + j];
}

// S_t starts at b_KV, z_t at b_D  =>  dbkv[h] += Σ_b U_0[b,h],  dbd[h] += Σ_b w_0[b,h]   (b in order)
// one thread per element of (NH, m·hs + m)
__global__ void kattn_bias_grad_kernel(float* dbkv, float* dbd, const float* state, int B, int NH, int m, int hs) {
    const int per = m * hs + m;
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (int64_t)NH * per) return;
    const int h = (int)(e / per), k = (int)(e % per);
    float s = 0.0f;
    for (int b = 0; b < B; b++) s += state[((size_t)b * NH + h) * per + k];
    if (k < m * hs) { if (dbkv) dbkv[(size_t)h * m * hs + k] += s; }
    else if (dbd) dbd[(size_t)h * m + (k - m * hs)] += s;
}

void kernel_attention_backward(float* dqkv, float* dbkv, float* dbd, float* scratch, const float* dout, const float* out, const float* phiq,
                               const float* phik, const float* rphiq, const float* rphik, const float* den, const float* qkv, const int* pos,
                               const float* bkv, const float* bd, int B, int T, int C, int NH) {
    (void)scratch;
    ICL_ASSERT(NH > 0 && C % NH == 0 && (C / NH) % 2 == 0 && C / NH <= 1024);
    const int hs = C / NH, m = hs;
    if (B * T == 0) return;
    float* dd = scratch_as<float>(Scratch::kattn_dd, (size_t)B * NH * T);
    const int64_t rows = (int64_t)B * NH * T;
    kattn_dden_kernel<<<blocks(rows, 8), 8 * WARP>>>(dd, dout, out, den, B, T, C, NH);
    launchCheck("kattn_dden_kernel");
    if (chunked_fits(m, hs, B * NH)) {
        const int nC = ceil_div(T, KC), P = m * hs + m;
        const float* stS = chunk_states(phik, rphik, qkv, bkv, bd, B, T, C, NH, nC);
        float* stU = scratch_as<float>(Scratch::kattn_u, (size_t)B * NH * nC * P);
        float* total = scratch_as<float>(Scratch::kattn_tot, (size_t)B * NH * P);
        kattn_chunk_sums_kernel<<<dim3(ceil_div(P, 256), nC, B * NH), 256>>>(stU, rphiq, dout, C, den, phiq, dd, T, NH, m, hs, nC);
        launchCheck("kattn_chunk_sums_kernel");
        kattn_chunk_scan_kernel<<<dim3(ceil_div(P, 256), B * NH), 256>>>(stU, total, nullptr, nullptr, NH, m, hs, nC, true);
        launchCheck("kattn_chunk_scan_kernel");
        kattn_chunk_backward_kernel<<<dim3(nC, B * NH), 256, chunk_backward_floats(m, hs) * sizeof(float)>>>(
            dqkv, stS, stU, dout, phiq, phik, rphiq, rphik, den, dd, qkv, pos, T, C, NH, nC);
        launchCheck("kattn_chunk_backward_kernel");
        if (dbkv || dbd) {
            kattn_bias_grad_kernel<<<blocks((int64_t)NH * P, 256), 256>>>(dbkv, dbd, total, B, NH, m, hs);
            launchCheck("kattn_bias_grad_kernel");
        }
        return;
    }
    float* state = scratch_as<float>(Scratch::kattn_red, (size_t)B * NH * ((size_t)m * hs + m));
    size_t sh1 = (2 * (size_t)m + hs) * sizeof(float), sh2 = (3 * (size_t)m + 2 * hs) * sizeof(float);
    const bool s1 = state_in_shared((const void*)kattn_backward_forward_sweep_kernel, sh1, m, hs);
    kattn_backward_forward_sweep_kernel<<<B * NH, scan_threads(hs), sh1>>>(dqkv, state, dout, phiq, phik, rphik, den, dd, qkv, pos, bkv, bd, T,
                                                                           C, NH, s1);
    launchCheck("kattn_backward_forward_sweep_kernel");
    const bool s2 = state_in_shared((const void*)kattn_backward_reverse_sweep_kernel, sh2, m, hs);
    kattn_backward_reverse_sweep_kernel<<<B * NH, scan_threads(hs), sh2>>>(dqkv, state, dout, phiq, phik, rphiq, rphik, den, dd, qkv, pos, T, C,
                                                                           NH, s2);
    launchCheck("kattn_backward_reverse_sweep_kernel");
    if (dbkv || dbd) {
        kattn_bias_grad_kernel<<<blocks((int64_t)NH * (m * hs + m), 256), 256>>>(dbkv, dbd, state, B, NH, m, hs);
        launchCheck("kattn_bias_grad_kernel");
    }
}

// ---- streaming step: one token, explicit state (S, z) updated in place ---------------------------------------
//   S_h += ĉ vᵀ,  z_h += c,  out_h = (âᵀ S_h) / (aᵀ z_h + eps)          one block per head, thread j = column j
__global__ void kattn_step_kernel(float* out, float* S, float* z, const float* qkv, int pos, int C, int NH, float eps) {
    extern __shared__ float sh[];
    const int hs = C / NH, m = hs, h = blockIdx.x, j = threadIdx.x;
    float* f = sh;          // (m) φ(q), then φ(k) pair partner reads
    float* g = f + m;       // (m) φ(k)
    float* ah = g + m;      // (m)
    float* ch = ah + m;     // (m)
    float* red = ch + m;    // (32)
    const float* q = qkv + (size_t)h * hs;
    if (j < m) {
        f[j] = phi_of(q[j]);
        g[j] = phi_of(q[C + j]);
    }
    __syncthreads();
    if (j < m) {
        float c, s;
        rope_cs(pos, j / 2, m, &c, &s);
        ah[j] = (j % 2 == 0) ? f[j] * c - f[j + 1] * s : f[j - 1] * s + f[j] * c;
        ch[j] = (j % 2 == 0) ? g[j] * c - g[j + 1] * s : g[j - 1] * s + g[j] * c;
    }
    float part = 0.0f;
    if (j < m) {
        const float zj = z[(size_t)h * m + j] + g[j];
        z[(size_t)h * m + j] = zj;
        part = f[j] * zj;
    }
    const float d = block_sum(part, red) + eps;  // (its __syncthreads also publishes ah/ch)
    if (j < hs) {
        const float vj = q[2 * C + j];
        float* Sh = S + (size_t)h * m * hs;
        float acc = 0.0f;
        for (int i = 0; i < m; i++) {
            const float sij = Sh[(size_t)i * hs + j] + ch[i] * vj;
            Sh[(size_t)i * hs + j] = sij;
            acc += ah[i] * sij;
        }
        out[(size_t)h * hs + j] = acc / d;
    }
}

void kernel_attention_step(float* out, float* S, float* z, const float* qkv, int pos, int C, int NH, double eps) {
    ICL_ASSERT(NH > 0 && C % NH == 0 && (C / NH) % 2 == 0 && C / NH <= 1024);
    const int m = C / NH;
    kattn_step_kernel<<<NH, scan_threads(m), (4 * (size_t)m + 32) * sizeof(float)>>>(out, S, z, qkv, pos, C, NH, (float)eps);
    launchCheck("kattn_step_kernel");
}

}  // namespace icl::cuda
