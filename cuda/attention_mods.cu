// attention_mods.cu — the attention modifications of the representation-learning lens (spec/duallens.md §4) on
// the GPU: regularized (−α v_t), negative-sample (values minus β × the mean of neighbour values; rules all /
// lowsim / random) and the augmented model's parallel adapters on the keys / values. CPU reference and exact
// semantics: src/layers/attention_mods.h (read its header comment first); the neighbour choice itself (random
// hash, k-lowest with ties to the smaller j, double-precision similarities) is layers/attention_mods_shared.h,
// compiled into both, so both devices pick the same neighbours for the same seed.
//
// Both attention ops start from the plain layer (attention.cu) and add the corrections, as on the CPU:
//
//   regularized   O_t −= α v_t                          dv_t −= α dO_t
//   negative      O_t −= β Σ_j W[t,j] v_j,  W[t,j] = Σ_{i<=t: j∈N_t(i)} P[t,i] / |N_t(i)|        (B,NH,T,T)
//                   all:  W[t,j] = (Σ_{i<=t} P[t,i] − P[t,j]) / t   (t >= 1; row 0 is zero)
//                 backward, with D[t,j] = dO_t·v_j:
//                   dP[t,i] = −β/|N_t(i)| Σ_{j∈N_t(i)} D[t,j]   → dS = P ⊙ (dP − rowsum(P ⊙ dP))
//                   dq_t += dS[t,:] k /√hs,   dk_i += dS[:,i]ᵀ q /√hs,   dv_j −= β Σ_t W[t,j] dO_t
//
// W is the negative term written as one T×T matrix per (b,h): the same sum the CPU does per (t,i) pair, in a
// different order (fp32 results agree to rounding). How it runs — simple kernels, no tiling:
//   scores   one thread per (b,h,i,j): the lowsim similarity (double) or the random priority      (B,NH,T,T) double
//   weights  one thread per query row (b,h,t): for every key i <= t the k-lowest set N_t(i) by scanning
//            j = 0..t (j ≠ i) in increasing order — the same candidates, order and ties as the CPU's
//            incremental for_each_kset — then W[t,:] (and, in backward, dP[t,:]) in a fixed order
//   apply    one thread per output element; every element written by exactly one thread, fixed sum orders:
//            deterministic, no atomics.
// Work per (b,h) is O(T²·hs) plus, for lowsim/random, O(T³·k) in the weights kernel (the CPU's is O(T²·k)).
// The T×T buffers come from the backend's grow-only scratch, for a group of batch rows at a time (the group's
// buffers stay <= 2^26 elements each). The `scratch` argument (sized for CPU threads) is not used.
//
// Adapters: z = inp·Aᵀ, u = ReLU(z), qkv[:, slot] += c·u·Bᵀ — cuBLAS GEMMs (gemm() of common.cuh, the same
// calls as the CPU's) and one elementwise kernel each way.
#include "cuda/common.cuh"
#include "cuda/layers.h"
#include "layers/attention_mods_shared.h"

namespace icl::cuda {

using attnmod_detail::dot_double;
using attnmod_detail::KLowest;
using attnmod_detail::KLOWEST_MAX;
using attnmod_detail::random_priority;

// ---- elementwise helpers ----------------------------------------------------------------------------------

// dst[r·ldd + c] −= a · src[r·lds + c]   for r < rows, c < cols         one thread per element, grid-stride
__global__ void sub_scaled_kernel(float* dst, int ldd, const float* src, int lds, int rows, int cols, float a) {
    const int64_t total = (int64_t)rows * cols;
    for (int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; n < total; n += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = n / cols, c = n % cols;
        dst[r * ldd + c] -= a * src[r * lds + c];
    }
}
static void sub_scaled(float* dst, int ldd, const float* src, int lds, int rows, int cols, float a) {
    sub_scaled_kernel<<<grid_for((int64_t)rows * cols), 256>>>(dst, ldd, src, lds, rows, cols, a);
    launchCheck("sub_scaled_kernel");
}

// ---- negative-sample attention ----------------------------------------------------------------------------

// One group of batch rows [b0, b0 + nb): local pair index lbh = (b − b0)·NH + h indexes the T×T buffers.
struct NegGroup {
    int b0, nb, T, C, NH, hs;
    __device__ int b(int lbh) const { return b0 + lbh / NH; }
    __device__ int h(int lbh) const { return lbh % NH; }
    // row n of this pair's q / k / v (hs floats) inside qkv (B,T,3C)
    __device__ const float* q(const float* qkv, int lbh, int n) const {
        return qkv + ((int64_t)b(lbh) * T + n) * 3 * C + (int64_t)h(lbh) * hs;
    }
    __device__ const float* k(const float* qkv, int lbh, int n) const { return q(qkv, lbh, n) + C; }
    __device__ const float* v(const float* qkv, int lbh, int n) const { return q(qkv, lbh, n) + 2 * C; }
    // this pair's (T,T) slice of the saved probabilities att (B,NH,T,T), and of a group buffer
    __device__ const float* att_row(const float* att, int lbh, int t) const {
        return att + (((int64_t)b0 * NH + lbh) * T + t) * T;
    }
};

// score[lbh, i, j]: the lowsim similarity s(i,j) of the pair (key: k_i·k_j, score: q_i·k_j, input: x_i·x_j of
// sim_src) or the random rule's priority; 0 on the diagonal (never a candidate). Exactly neighbour_score() of the
// CPU: the same double sums in the same order.
__global__ void neg_scores_kernel(double* score, NegGroup g, const float* qkv, const float* sim_src, int Cs, NegRule rule, NegSim sim,
                                  uint64_t seed) {
    const int64_t TT = (int64_t)g.T * g.T, total = (int64_t)g.nb * g.NH * TT;
    for (int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; n < total; n += (int64_t)gridDim.x * blockDim.x) {
        const int lbh = (int)(n / TT), i = (int)(n / g.T % g.T), j = (int)(n % g.T);
        double s = 0.0;
        if (i != j) {
            if (rule == NegRule::random) s = random_priority(seed, g.b(lbh), g.h(lbh), i, j);
            else if (sim == NegSim::key) s = dot_double(g.k(qkv, lbh, i), g.k(qkv, lbh, j), g.hs);
            else if (sim == NegSim::score) s = dot_double(g.q(qkv, lbh, i), g.k(qkv, lbh, j), g.hs);
            else {
                const float* x = sim_src + (int64_t)g.b(lbh) * g.T * Cs;  // (T,Cs) rows of batch b
                s = dot_double(x + (int64_t)i * Cs, x + (int64_t)j * Cs, Cs);
            }
        }
        score[n] = s;
    }
}

// One query row (lbh, t) per thread:
//   W[t, :]  = Σ_{i<=t} P[t,i]/|N_t(i)| · 1[j ∈ N_t(i)]             (SET for every j < T; 0 for j > t)
//   dP[t, :] = −β/|N_t(i)| Σ_{j∈N_t(i)} D[t,j]   if dP != nullptr     (SET for every i < T; 0 for i > t)
// D (group, T,T) = dO_t·v_j (backward only). score: neg_scores_kernel's (lowsim / random only).
__global__ void neg_weights_kernel(float* W, float* dP, NegGroup g, const float* att, const float* D, const double* score, NegRule rule, int k,
                                   float beta) {
    const int64_t rows = (int64_t)g.nb * g.NH * g.T;
    const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const int lbh = (int)(row / g.T), t = (int)(row % g.T), T = g.T;
    const float* P = g.att_row(att, lbh, t);  // (T)
    float* w = W + row * T;                   // (T)
    float* dp = dP ? dP + row * T : nullptr;  // (T)
    const float* d = D ? D + row * T : nullptr;
    for (int j = 0; j < T; j++) w[j] = 0.0f;
    if (dp)
        for (int i = 0; i < T; i++) dp[i] = 0.0f;
    if (t == 0) return;  // |N_0(0)| = 0: ṽ = v
    if (rule == NegRule::all) {
        // N_t(i) = {0..t} \ {i}:  W[t,j] = (a_t − P[t,j]) / t,   dP[t,i] = −β/t (Σ_j D[t,j] − D[t,i])
        float a = 0.0f, sd = 0.0f;
        for (int i = 0; i <= t; i++) a += P[i];
        for (int j = 0; j <= t; j++) w[j] = (a - P[j]) / (float)t;
        if (dp) {
            for (int j = 0; j <= t; j++) sd += d[j];
            for (int i = 0; i <= t; i++) dp[i] = -beta * (sd - d[i]) / (float)t;
        }
        return;
    }
    // lowsim / random: N_t(i) = the k lowest scores among j ∈ {0..t} \ {i}, candidates in increasing j
    const double* S = score + (int64_t)lbh * T * T;  // (T,T)
    const int kk = k < KLOWEST_MAX ? k : KLOWEST_MAX;
    KLowest set;
    for (int i = 0; i <= t; i++) {
        set.reset(kk);
        for (int j = 0; j <= t; j++)
            if (j != i) set.insert(S[(int64_t)i * T + j], j);
        if (set.n == 0) continue;
        const float inv = 1.0f / (float)set.n, f = P[i] * inv;
        float acc = 0.0f;
        for (int r = 0; r < set.n; r++) {
            w[set.j[r]] += f;
            if (dp) acc += d[set.j[r]];
        }
        if (dp) dp[i] = -beta * acc * inv;
    }
}

// out[b,t,h·hs+e] −= β Σ_{j<=t} W[t,j] v_j[e]          one thread per element of the group's rows
__global__ void neg_apply_forward_kernel(float* out, NegGroup g, const float* qkv, const float* W, float beta) {
    const int64_t total = (int64_t)g.nb * g.T * g.C;
    for (int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; n < total; n += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(n % g.C), t = (int)(n / g.C % g.T), lb = (int)(n / ((int64_t)g.C * g.T));
        const int h = c / g.hs, e = c % g.hs, lbh = lb * g.NH + h;
        const float* w = W + ((int64_t)lbh * g.T + t) * g.T;  // (T)
        float s = 0.0f;
        for (int j = 0; j <= t; j++) s += w[j] * g.v(qkv, lbh, j)[e];
        out[((int64_t)(g.b0 + lb) * g.T + t) * g.C + c] -= beta * s;
    }
}

// D[lbh, t, j] = dO_t·v_j for j <= t, 0 above the diagonal            one thread per element
__global__ void neg_dov_kernel(float* D, NegGroup g, const float* dout, const float* qkv) {
    const int64_t TT = (int64_t)g.T * g.T, total = (int64_t)g.nb * g.NH * TT;
    for (int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; n < total; n += (int64_t)gridDim.x * blockDim.x) {
        const int lbh = (int)(n / TT), t = (int)(n / g.T % g.T), j = (int)(n % g.T);
        float s = 0.0f;
        if (j <= t) {
            const float* dO = dout + ((int64_t)g.b(lbh) * g.T + t) * g.C + (int64_t)g.h(lbh) * g.hs;  // (hs)
            const float* v = g.v(qkv, lbh, j);
            for (int e = 0; e < g.hs; e++) s += dO[e] * v[e];
        }
        D[n] = s;
    }
}

// In place on dP rows:  P[t,:] = softmax(S[t,:])  =>  dS[t,i] = P[t,i] (dP[t,i] − Σ_l P[t,l] dP[t,l])   (i <= t)
// One thread per row (dP is already 0 above the diagonal).
__global__ void neg_softmax_backward_kernel(float* dP, NegGroup g, const float* att) {
    const int64_t rows = (int64_t)g.nb * g.NH * g.T;
    const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const int lbh = (int)(row / g.T), t = (int)(row % g.T);
    const float* P = g.att_row(att, lbh, t);
    float* d = dP + row * g.T;
    float dot = 0.0f;
    for (int i = 0; i <= t; i++) dot += P[i] * d[i];
    for (int i = 0; i <= t; i++) d[i] = P[i] * (d[i] - dot);
}

// For every row n of every pair and channel e (one thread each; each writes its own dq, dk, dv element):
//   S = scale · q kᵀ   =>   dq_n += scale Σ_{i<=n} dS[n,i] k_i,    dk_n += scale Σ_{t>=n} dS[t,n] q_t
//   O −= β W V         =>   dv_n −= β Σ_{t>=n} W[t,n] dO_t
__global__ void neg_grads_kernel(float* dqkv, NegGroup g, const float* qkv, const float* dout, const float* dS, const float* W, float scale,
                                 float beta) {
    const int64_t total = (int64_t)g.nb * g.T * g.C;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(idx % g.C), n = (int)(idx / g.C % g.T), lb = (int)(idx / ((int64_t)g.C * g.T));
        const int h = c / g.hs, e = c % g.hs, lbh = lb * g.NH + h, T = g.T;
        const float* dSp = dS + (int64_t)lbh * T * T;  // (T,T)
        const float* Wp = W + (int64_t)lbh * T * T;    // (T,T)
        float sq = 0.0f, sk = 0.0f, sv = 0.0f;
        for (int i = 0; i <= n; i++) sq += dSp[(int64_t)n * T + i] * g.k(qkv, lbh, i)[e];
        for (int t = n; t < T; t++) {
            sk += dSp[(int64_t)t * T + n] * g.q(qkv, lbh, t)[e];
            sv += Wp[(int64_t)t * T + n] * dout[((int64_t)g.b(lbh) * T + t) * g.C + c];
        }
        float* dq = dqkv + ((int64_t)(g.b0 + lb) * T + n) * 3 * g.C + c;
        dq[0] += scale * sq;
        dq[g.C] += scale * sk;
        dq[2 * g.C] -= beta * sv;
    }
}

// Batch rows per group: each group buffer (G·NH·T·T elements) stays <= 2^26 elements.
static int group_rows(int B, int T, int NH) {
    const int64_t per_b = std::max<int64_t>((int64_t)NH * T * T, 1);
    return (int)std::max<int64_t>(1, std::min<int64_t>(B, ((int64_t)1 << 26) / per_b));
}

static void check_mods(const AttnMods& m, const float* sim_src, int Cs, int C, int NH) {
    ICL_ASSERT(NH > 0 && C % NH == 0);
    ICL_ASSERT_MSG(!m.needs_sim_src() || (sim_src && Cs > 0), "attention_mod_forward: the input similarity needs sim_src");
    ICL_ASSERT_MSG(m.k >= 1 && m.k <= KLOWEST_MAX, "attention_mod_forward: k must be in [1, 64]");
}

// The group's similarity / priority matrix (lowsim, random), or nullptr (all).
static const double* neg_scores(const NegGroup& g, const float* qkv, const float* sim_src, int Cs, const AttnMods& m, uint64_t seed) {
    if (m.rule == NegRule::all) return nullptr;
    double* score = scratch_as<double>(Scratch::amod_score, (size_t)g.nb * g.NH * g.T * g.T);
    const int64_t n = (int64_t)g.nb * g.NH * g.T * g.T;
    neg_scores_kernel<<<grid_for(n), 256>>>(score, g, qkv, sim_src, Cs, m.rule, m.sim, seed);
    launchCheck("neg_scores_kernel");
    return score;
}

void attention_mod_forward(float* out, float* att, float* scratch, const float* qkv, const float* sim_src, const AttnMods& m, uint64_t seed,
                           int B, int T, int C, int NH, int Cs) {
    // O = P V  (the plain layer, unchanged)
    attention_forward(out, att, scratch, qkv, B, T, C, NH);
    if (!m.attention_active()) return;
    check_mods(m, sim_src, Cs, C, NH);
    const int hs = C / NH;
    // O_t −= α v_t
    if (m.alpha != 0) sub_scaled(out, C, qkv + 2 * C, 3 * C, B * T, C, (float)m.alpha);
    if (m.beta == 0) return;
    // O_t −= β Σ_j W[t,j] v_j
    const int G = group_rows(B, T, NH);
    for (int b0 = 0; b0 < B; b0 += G) {
        const NegGroup g{b0, std::min(G, B - b0), T, C, NH, hs};
        const int64_t rows = (int64_t)g.nb * NH * T;
        float* W = scratch_as<float>(Scratch::amod_w, (size_t)rows * T);
        const double* score = neg_scores(g, qkv, sim_src, Cs, m, seed);
        neg_weights_kernel<<<blocks(rows, 64), 64>>>(W, nullptr, g, att, nullptr, score, m.rule, m.k, (float)m.beta);
        launchCheck("neg_weights_kernel");
        neg_apply_forward_kernel<<<grid_for((int64_t)g.nb * T * C), 256>>>(out, g, qkv, W, (float)m.beta);
        launchCheck("neg_apply_forward_kernel");
    }
}

// Backward of attention_mod_forward. ACCUMULATES into dqkv.
void attention_mod_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att, const float* sim_src,
                            const AttnMods& m, uint64_t seed, int B, int T, int C, int NH, int Cs) {
    // O = P V: the plain layer's gradients
    attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    if (!m.attention_active()) return;
    check_mods(m, sim_src, Cs, C, NH);
    const int hs = C / NH;
    // O_t −= α v_t   =>   dv_t −= α dO_t
    if (m.alpha != 0) sub_scaled(dqkv + 2 * C, 3 * C, dout, C, B * T, C, (float)m.alpha);
    if (m.beta == 0) return;
    const float scale = 1.0f / sqrtf((float)hs), beta = (float)m.beta;
    const int G = group_rows(B, T, NH);
    for (int b0 = 0; b0 < B; b0 += G) {
        const NegGroup g{b0, std::min(G, B - b0), T, C, NH, hs};
        const int64_t rows = (int64_t)g.nb * NH * T;
        float* W = scratch_as<float>(Scratch::amod_w, (size_t)rows * T);
        float* dP = scratch_as<float>(Scratch::amod_dp, (size_t)rows * T);
        float* D = scratch_as<float>(Scratch::amod_d, (size_t)rows * T);
        const double* score = neg_scores(g, qkv, sim_src, Cs, m, seed);
        // D[t,j] = dO_t·v_j
        neg_dov_kernel<<<grid_for(rows * T), 256>>>(D, g, dout, qkv);
        launchCheck("neg_dov_kernel");
        // O_t −= β Σ_i P[t,i] mean_{j∈N_t(i)} v_j   =>   dP[t,i] = −β mean_{j∈N_t(i)} D[t,j]   (and W for dv)
        neg_weights_kernel<<<blocks(rows, 64), 64>>>(W, dP, g, att, D, score, m.rule, m.k, beta);
        launchCheck("neg_weights_kernel");
        // P = softmax(S)   =>   dS = P ⊙ (dP − rowsum(P ⊙ dP)), in place
        neg_softmax_backward_kernel<<<blocks(rows, 128), 128>>>(dP, g, att);
        launchCheck("neg_softmax_backward_kernel");
        // dq += scale·dS k,  dk += scale·dSᵀ q,  dv −= β Wᵀ dO
        neg_grads_kernel<<<grid_for((int64_t)g.nb * T * C), 256>>>(dqkv, g, qkv, dout, dP, W, scale, beta);
        launchCheck("neg_grads_kernel");
    }
}

// ---- augmented: the parallel adapter on the key (slot 1) or value (slot 2) third of qkv -----------------------

// u = ReLU(z)                                                        one thread per element, grid-stride
__global__ void adapter_relu_kernel(float* u, const float* z, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        u[i] = z[i] > 0.0f ? z[i] : 0.0f;
}
// dz = dz ⊙ 1[z > 0]
__global__ void adapter_mask_kernel(float* dz, const float* z, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        if (!(z[i] > 0.0f)) dz[i] = 0.0f;
}

void qkv_adapter_forward(float* qkv, float* z, float* u, const float* inp, const float* A, const float* Bw, double c, int slot, int N,
                         int Cin, int C, int dh) {
    ICL_ASSERT(slot == 1 || slot == 2);
    // z = inp·Aᵀ
    gemm(false, true, N, dh, Cin, 1.0f, inp, Cin, A, Cin, 0.0f, z, dh);
    // u = ReLU(z)
    adapter_relu_kernel<<<grid_for((int64_t)N * dh), 256>>>(u, z, (int64_t)N * dh);
    launchCheck("adapter_relu_kernel");
    // qkv[:, slot] += c · u·Bᵀ
    gemm(false, true, N, C, dh, (float)c, u, dh, Bw, dh, 1.0f, qkv + (size_t)slot * C, 3 * C);
}

// Backward of qkv_adapter_forward. ACCUMULATES into dinp (or null), dA, dB; dz as on the CPU (zero on entry, dL/dz on return).
void qkv_adapter_backward(float* dinp, float* dA, float* dB, float* dz, const float* dqkv, const float* inp, const float* z, const float* u,
                          const float* A, const float* Bw, double c, int slot, int N, int Cin, int C, int dh) {
    ICL_ASSERT(slot == 1 || slot == 2);
    const float* dK = dqkv + (size_t)slot * C;  // (N,C), row stride 3C
    // qkv[:, slot] += c · u·Bᵀ   =>   dB += c · dKᵀ u,   du = c · dK B  (into dz)
    gemm(true, false, C, dh, N, (float)c, dK, 3 * C, u, dh, 1.0f, dB, dh);
    gemm(false, false, N, dh, C, (float)c, dK, 3 * C, Bw, dh, 1.0f, dz, dh);
    // u = ReLU(z)   =>   dz = du ⊙ 1[z > 0]
    adapter_mask_kernel<<<grid_for((int64_t)N * dh), 256>>>(dz, z, (int64_t)N * dh);
    launchCheck("adapter_mask_kernel");
    // z = inp·Aᵀ   =>   dA += dzᵀ inp,   dinp += dz A
    gemm(true, false, dh, Cin, N, 1.0f, dz, dh, inp, Cin, 1.0f, dA, Cin);
    if (dinp) gemm(false, false, N, Cin, dh, 1.0f, dz, dh, A, Cin, 1.0f, dinp, Cin);
}

}  // namespace icl::cuda
