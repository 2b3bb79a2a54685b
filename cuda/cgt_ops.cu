// cgt_ops.cu — the small layers the Contextually Guided Transformer needs beyond GPT's, forward and backward.
// CPU reference, formulas and spec sections: src/layers/cgt_ops.h.
//
//   ema_step         the streaming decode's EMA of y^ℓ: u = (1−γ)u + γy in double, y_used = u
//   concat           out = [a | b] along the last axis
//   gather_rows      out[n] = src[idx[n]]           backward: the scatter-add dsrc[idx[n]] += dout[n]
//   continuity_reg   R_C = (1/(B·Σ_{s≥1}ζ_s)) Σ_b Σ_{s≥1} ζ_s ‖n_{b,s} − n_{b,s−1}‖²   n = y / (‖y‖ + 1e-6) per row
//   decorrelation    R_D = (1/(B(B−1)·Σ_s ζ_s)) Σ_s ζ_s Σ_{α≠β} (n_s^α · n_s^β)²       ζ_s = (s+1)^zp (1 for zp = 0)
//   prior_reg        R_P = ‖μ‖²/N + ‖ΔᵀΔ/B − 𝒦⊗I‖²_F / N²   μ = batch mean of y (B, N = T·D), Δ = y − μ
//   gp_kl            VAE KL(N(μ, diag e^logv) ‖ N(0, 𝒦)) per component, / T, batch mean   (𝒦⁻¹ on the device)
//   reparam          y = μ + exp(½ logv) ⊙ ε
//
// Parallelization: concat/gather/reparam elementwise; the row normalization one warp per row; the scalar
// regularizers through the deterministic double reduce_sum (cuda/common.cuh), one term per thread; the Gram
// matrices of R_D one thread per (s, α, β); 𝒦⁻¹μ one strided-batched cuBLAS GEMM over the batch.
// gather_rows_backward adds the rows in order n = 0..N−1 with one thread per column: no atomics, and the
// same order as the CPU (these scatters are small: B·Ta rows of width d_y).
#include "cuda/common.cuh"
#include "cuda/layers.h"

namespace icl::cuda {

constexpr float NORM_EPS = 1e-6f;

// ---- the streaming EMA of y^ℓ -------------------------------------------------------------------------

// u = (1−γ)·u + γ·y in double, y_used = (float)u          one thread per element
__global__ void ema_step_kernel(double* u, float* yuse, const float* y, double gamma, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const double v = (1.0 - gamma) * u[i] + gamma * (double)y[i];
    u[i] = v;
    yuse[i] = (float)v;
}
void ema_step(double* u, float* yuse, const float* y, double gamma, int n) {
    ema_step_kernel<<<blocks(n, 256), 256>>>(u, yuse, y, gamma, n);
    launchCheck("ema_step_kernel");
}

// ---- concat ------------------------------------------------------------------------------------------

// out (N, Ca+Cb) = [a (N,Ca) | b (N,Cb)]          one thread per output element
__global__ void concat_forward_kernel(float* out, const float* a, const float* b, int N, int Ca, int Cb) {
    const int C = Ca + Cb;
    const int64_t total = (int64_t)N * C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int n = (int)(i / C), c = (int)(i % C);
        out[i] = c < Ca ? a[(size_t)n * Ca + c] : b[(size_t)n * Cb + (c - Ca)];
    }
}
void concat_forward(float* out, const float* a, const float* b, int N, int Ca, int Cb) {
    concat_forward_kernel<<<grid_for((int64_t)N * (Ca + Cb)), 256>>>(out, a, b, N, Ca, Cb);
    launchCheck("concat_forward_kernel");
}

// out = [a | b]   =>   da += dout[:, :Ca],  db += dout[:, Ca:]   (either may be nullptr)
__global__ void concat_backward_kernel(float* da, float* db, const float* dout, int N, int Ca, int Cb) {
    const int C = Ca + Cb;
    const int64_t total = (int64_t)N * C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int n = (int)(i / C), c = (int)(i % C);
        if (c < Ca) { if (da) da[(size_t)n * Ca + c] += dout[i]; }
        else if (db) db[(size_t)n * Cb + (c - Ca)] += dout[i];
    }
}
void concat_backward(float* da, float* db, const float* dout, int N, int Ca, int Cb) {
    if (!da && !db) return;
    concat_backward_kernel<<<grid_for((int64_t)N * (Ca + Cb)), 256>>>(da, db, dout, N, Ca, Cb);
    launchCheck("concat_backward_kernel");
}

// ---- gather ------------------------------------------------------------------------------------------

// out (N,D) = src[idx[n], :]          one thread per output element
__global__ void gather_rows_forward_kernel(float* out, const float* src, const int* idx, int N, int D) {
    const int64_t total = (int64_t)N * D;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = src[(size_t)idx[i / D] * D + i % D];
}
void gather_rows_forward(float* out, const float* src, const int* idx, int N, int D) {
    gather_rows_forward_kernel<<<grid_for((int64_t)N * D), 256>>>(out, src, idx, N, D);
    launchCheck("gather_rows_forward_kernel");
}

// dsrc[idx[n], c] += dout[n, c] for n = 0..N−1 in order        one thread per column c
__global__ void gather_rows_backward_kernel(float* dsrc, const float* dout, const int* idx, int N, int D) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= D) return;
    for (int n = 0; n < N; n++) dsrc[(size_t)idx[n] * D + c] += dout[(size_t)n * D + c];
}
void gather_rows_backward(float* dsrc, const float* dout, const int* idx, int N, int D) {
    gather_rows_backward_kernel<<<blocks(D, 64), 64>>>(dsrc, dout, idx, N, D);
    launchCheck("gather_rows_backward_kernel");
}

// ---- row normalization n = y / (‖y‖ + eps), shared by R_C and R_D ----------------------------------------

// nrm (N,D), rho (N) = ‖y‖ (accumulated in double, as on the CPU)          one warp per row
__global__ void normalize_rows_kernel(float* nrm, float* rho, const float* y, int N, int D) {
    const int i = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (i >= N) return;
    const float* yi = y + (size_t)i * D;
    double s = 0.0;
    for (int c = lane; c < D; c += WARP) s += (double)yi[c] * yi[c];
    s = warp_sum(s);
    const float r = (float)sqrt(s);
    const float inv = 1.0f / (r + NORM_EPS);
    for (int c = lane; c < D; c += WARP) nrm[(size_t)i * D + c] = yi[c] * inv;
    if (lane == 0) rho[i] = r;
}

// n = y/(ρ+ε)  =>  dy += (dn − y·(y·dn)/(ρ(ρ+ε))) / (ρ+ε)            one warp per row
__global__ void normalize_rows_backward_kernel(float* dy, const float* dn, const float* y, const float* rho, int N, int D) {
    const int i = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (i >= N) return;
    const float r = rho[i], re = r + NORM_EPS;
    if (r <= 0.0f) return;
    const float* g = dn + (size_t)i * D;
    const float* yi = y + (size_t)i * D;
    float ydn = 0.0f;
    for (int c = lane; c < D; c += WARP) ydn += yi[c] * g[c];
    ydn = warp_sum(ydn);
    const float k = ydn / (r * re);
    for (int c = lane; c < D; c += WARP) dy[(size_t)i * D + c] += (g[c] - yi[c] * k) / re;
}

// The normalized rows of y (B,T,D) in scratch: nrm (B·T, D), rho (B·T).
static void normalize(const float* y, int N, int D, float** nrm, float** rho) {
    *nrm = scratch_as<float>(Scratch::cgt_a, (size_t)N * D);
    *rho = scratch_as<float>(Scratch::cgt_b, (size_t)N);
    normalize_rows_kernel<<<blocks(N, 8), 8 * WARP>>>(*nrm, *rho, y, N, D);
    launchCheck("normalize_rows_kernel");
}

// ζ_s = (s+1)^p (0-based s), exactly 1 for p = 0, and Σ_{s=lo}^{T−1} ζ_s: the CPU's (src/layers/cgt_ops.h) formulas
__host__ __device__ inline double reg_zeta(int s, double p) { return p == 0 ? 1.0 : pow(s + 1.0, p); }
static double reg_zeta_sum(int lo, int T, double p) {
    double z = 0;
    for (int s = lo; s < T; s++) z += reg_zeta(s, p);
    return z;
}

// ---- R_C: continuity -------------------------------------------------------------------------------------

// term i ↔ (b, s ≥ 1, c):  ζ_s (n_{b,s,c} − n_{b,s−1,c})²  in double
struct ContinuityTerm {
    const float* n;
    int T, D;
    double zp;
    __device__ double operator()(int64_t i) const {
        const int c = (int)(i % D);
        const int64_t bs = i / D;
        const int b = (int)(bs / (T - 1)), s = (int)(bs % (T - 1)) + 1;
        const size_t i1 = ((size_t)b * T + s) * D + c;
        const double d = (double)n[i1] - (double)n[i1 - D];
        return reg_zeta(s, zp) * (d * d);
    }
};

double continuity_reg_forward(const float* y, int B, int T, int D, double zp) {
    if (T < 2 || B < 1) return 0.0;
    float *nrm, *rho;
    normalize(y, B * T, D, &nrm, &rho);
    const double sum = reduce_sum(ContinuityTerm{nrm, T, D, zp}, (int64_t)B * (T - 1) * D);
    return sum / ((double)B * reg_zeta_sum(1, T, zp));
}

// sum += ζ_s (n_s − n_{s−1})²  =>  dn_s += k_s(n_s − n_{s−1}),  dn_{s−1} −= the same   (k_s = 2wζ_s/(B Σζ))
// Element (b,s,c) collects +g_s (from pair s) then −g_{s+1} (from pair s+1): the CPU's order.
__global__ void continuity_dn_kernel(float* dn, const float* n, double c2, double zp, int B, int T, int D) {
    const int64_t total = (int64_t)B * T * D;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int s = (int)((i / D) % T);
        float v = 0.0f;
        if (s >= 1) v += (float)(c2 * reg_zeta(s, zp)) * (n[i] - n[i - D]);
        if (s + 1 < T) v -= (float)(c2 * reg_zeta(s + 1, zp)) * (n[i + D] - n[i]);
        dn[i] = v;
    }
}

void continuity_reg_backward(float* dy, const float* y, double w, int B, int T, int D, double zp) {
    if (T < 2 || B < 1) return;
    const int N = B * T;
    float *nrm, *rho;
    normalize(y, N, D, &nrm, &rho);
    float* dn = scratch_as<float>(Scratch::cgt_c, (size_t)N * D);
    const double c2 = 2.0 * w / ((double)B * reg_zeta_sum(1, T, zp));
    continuity_dn_kernel<<<grid_for((int64_t)N * D), 256>>>(dn, nrm, c2, zp, B, T, D);
    launchCheck("continuity_dn_kernel");
    normalize_rows_backward_kernel<<<blocks(N, 8), 8 * WARP>>>(dy, dn, y, rho, N, D);
    launchCheck("normalize_rows_backward_kernel");
}

// ---- R_D: decorrelation ----------------------------------------------------------------------------------

// gram (T,B,B): gram[s,α,β] = n_{α,s} · n_{β,s}, diagonal set to 0        one thread per (s, α, β)
__global__ void decorrelation_gram_kernel(float* gram, const float* n, int B, int T, int D) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)T * B * B) return;
    const int s = (int)(i / ((int64_t)B * B)), a = (int)((i / B) % B), b = (int)(i % B);
    float g = 0.0f;
    if (a != b) {
        const float* na = n + ((size_t)a * T + s) * D;
        const float* nb = n + ((size_t)b * T + s) * D;
        for (int c = 0; c < D; c++) g += na[c] * nb[c];
    }
    gram[i] = g;
}

// term i ↔ (s, α, β): ζ_s gram² (0 on the diagonal)
struct SquaredGramTerm {
    const float* gram;
    int B;
    double zp;
    __device__ double operator()(int64_t i) const {
        return reg_zeta((int)(i / ((int64_t)B * B)), zp) * ((double)gram[i] * (double)gram[i]);
    }
};

double decorrelation_reg_forward(const float* y, int B, int T, int D, double zp) {
    if (B < 2) return 0.0;
    float *nrm, *rho;
    normalize(y, B * T, D, &nrm, &rho);
    float* gram = scratch_as<float>(Scratch::cgt_c, (size_t)T * B * B);
    decorrelation_gram_kernel<<<blocks((int64_t)T * B * B, 128), 128>>>(gram, nrm, B, T, D);
    launchCheck("decorrelation_gram_kernel");
    const double sum = reduce_sum(SquaredGramTerm{gram, B, zp}, (int64_t)T * B * B);
    return sum / ((double)B * (B - 1) * reg_zeta_sum(0, T, zp));
}

// sum += ζ_s Σ_{α≠β} (n_α·n_β)²   =>   dN_s = k_s · E_s N_s   (E_s = gram with zero diagonal, k_s = 4wζ_s/(B(B−1)Σζ))
// dn (B,T,D): one thread per (α, s, c)
__global__ void decorrelation_dn_kernel(float* dn, const float* gram, const float* n, double c4, double zp, int B, int T, int D) {
    const int64_t total = (int64_t)B * T * D;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % D), s = (int)((i / D) % T), a = (int)(i / ((int64_t)T * D));
        const float* ga = gram + ((size_t)s * B + a) * B;  // (B) row α of E_s
        float v = 0.0f;
        for (int b = 0; b < B; b++) v += ga[b] * n[((size_t)b * T + s) * D + c];
        dn[i] = (float)(c4 * reg_zeta(s, zp)) * v;
    }
}

void decorrelation_reg_backward(float* dy, const float* y, double w, int B, int T, int D, double zp) {
    if (B < 2) return;
    const int N = B * T;
    float *nrm, *rho;
    normalize(y, N, D, &nrm, &rho);
    // gram and dn share one slot: gram (T·B·B) first, dn (N·D) after it
    float* gram = scratch_as<float>(Scratch::cgt_c, (size_t)T * B * B + (size_t)N * D);
    float* dn = gram + (size_t)T * B * B;
    decorrelation_gram_kernel<<<blocks((int64_t)T * B * B, 128), 128>>>(gram, nrm, B, T, D);
    launchCheck("decorrelation_gram_kernel");
    const double c4 = 4.0 * w / ((double)B * (B - 1) * reg_zeta_sum(0, T, zp));
    decorrelation_dn_kernel<<<grid_for((int64_t)N * D), 256>>>(dn, gram, nrm, c4, zp, B, T, D);
    launchCheck("decorrelation_dn_kernel");
    normalize_rows_backward_kernel<<<blocks(N, 8), 8 * WARP>>>(dy, dn, y, rho, N, D);
    launchCheck("normalize_rows_backward_kernel");
}

// ---- R_P: distribution matching with batch statistics (App. A.2) ----------------------------------------------

// μ (N) = Σ_α y_α / B (in order, in double), Δ (B,N) = y − μ          one thread per n
__global__ void prior_center_kernel(float* delta, float* mu, const float* y, int B, int N) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    double m = 0.0;
    for (int a = 0; a < B; a++) m += (double)y[(size_t)a * N + n];
    m /= B;
    mu[n] = (float)m;
    for (int a = 0; a < B; a++) delta[(size_t)a * N + n] = (float)((double)y[(size_t)a * N + n] - m);
}

// E (N,N) −= G:  E[(s,i),(t,i)] −= 𝒦[s,t]                            one thread per (s, t, i)
__global__ void prior_sub_kernel(float* E, const float* K, int T, int D) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)T * T * D) return;
    const int c = (int)(i % D), t = (int)((i / D) % T), s = (int)(i / ((int64_t)T * D));
    const int64_t N = (int64_t)T * D;
    E[((int64_t)s * D + c) * N + (int64_t)t * D + c] -= K[(size_t)s * T + t];
}

struct SquareTerm {  // term i: v[i]² in double
    const float* v;
    __device__ double operator()(int64_t i) const { return (double)v[i] * (double)v[i]; }
};

// Δ, μ and E = ΔᵀΔ/B − G in scratch (cgt_a, cgt_b, cgt_c)
static void prior_stats(const float* y, const float* K, int B, int T, int D, float** delta, float** mu, float** E) {
    const int N = T * D;
    *delta = scratch_as<float>(Scratch::cgt_a, (size_t)B * N);
    *mu = scratch_as<float>(Scratch::cgt_b, (size_t)N);
    *E = scratch_as<float>(Scratch::cgt_c, (size_t)N * N);
    prior_center_kernel<<<blocks(N, 128), 128>>>(*delta, *mu, y, B, N);
    launchCheck("prior_center_kernel");
    gemm(true, false, N, N, B, 1.0f / (float)B, *delta, N, *delta, N, 0.0f, *E, N);
    prior_sub_kernel<<<blocks((int64_t)T * T * D, 256), 256>>>(*E, K, T, D);
    launchCheck("prior_sub_kernel");
}

double prior_reg_forward(const float* y, const float* K, int B, int T, int D) {
    if (B < 1 || T < 1) return 0.0;
    float *delta, *mu, *E;
    prior_stats(y, K, B, T, D, &delta, &mu, &E);
    const double N = (double)T * D;
    const double mu2 = reduce_sum(SquareTerm{mu}, (int64_t)N), e2 = reduce_sum(SquareTerm{E}, (int64_t)N * (int64_t)N);
    return mu2 / N + e2 / (N * N);
}

// dy_α += c·μ  (the ‖μ‖²/N term: c = 2w/(B N))                       one thread per element
__global__ void prior_mean_grad_kernel(float* dy, const float* mu, float c, int B, int N) {
    const int64_t total = (int64_t)B * N;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        dy[i] += c * mu[i % N];
}

// dy_α += 4w/(B N²)·Δ_α (C − G) + 2w μ/(B N)   (Σ_α Δ_α = 0: the centering adds nothing)
void prior_reg_backward(float* dy, const float* y, const float* K, double w, int B, int T, int D) {
    if (B < 1 || T < 1) return;
    const int N = T * D;
    float *delta, *mu, *E;
    prior_stats(y, K, B, T, D, &delta, &mu, &E);
    gemm(false, false, B, N, N, (float)(4.0 * w / ((double)B * N * N)), delta, N, E, N, 1.0f, dy, N);
    prior_mean_grad_kernel<<<grid_for((int64_t)B * N), 256>>>(dy, mu, (float)(2.0 * w / ((double)B * N)), B, N);
    launchCheck("prior_mean_grad_kernel");
}

// ---- VAE: GP-prior KL and reparameterization -----------------------------------------------------------------

// term i ↔ (b, s, c): ½(𝒦⁻¹_ss·e^{logv} + μ·(𝒦⁻¹μ) − logv − 1)  in double
struct KLTerm {
    const float *mu, *logv, *KM, *Kinv;
    int T, D;
    __device__ double operator()(int64_t i) const {
        const int s = (int)((i / D) % T);
        const double lv = logv[i];
        return 0.5 * ((double)Kinv[(size_t)s * T + s] * exp(lv) + (double)mu[i] * (double)KM[i] - lv - 1.0);
    }
};

double gp_kl_forward(const float* mu, const float* logv, const float* Kinv, double logdetK, int B, int T, int D) {
    float* KM = scratch_as<float>(Scratch::cgt_a, (size_t)B * T * D);
    // KM[b] (T,D) = 𝒦⁻¹ (T,T) @ μ[b] (T,D)       (𝒦⁻¹ shared: stride 0)
    gemm_strided(false, false, T, D, T, 1.0f, Kinv, T, 0, mu, D, (int64_t)T * D, 0.0f, KM, D, (int64_t)T * D, B);
    double sum = reduce_sum(KLTerm{mu, logv, KM, Kinv, T, D}, (int64_t)B * T * D);
    sum += 0.5 * D * logdetK * B;
    return sum / ((double)B * T);
}

// ½(𝒦⁻¹_ss e^{lv} − lv)   =>   dlogv += k·½(𝒦⁻¹_ss v − 1)          one thread per element
__global__ void gp_kl_dlogv_kernel(float* dlogv, const float* logv, const float* Kinv, float k, int B, int T, int D) {
    const int64_t total = (int64_t)B * T * D;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int s = (int)((i / D) % T);
        dlogv[i] += k * 0.5f * (Kinv[(size_t)s * T + s] * expf(logv[i]) - 1.0f);
    }
}

// Backward scaled by w: dμ += w/(BT)·𝒦⁻¹μ ;  dlogv += w/(BT)·½(𝒦⁻¹_ss·v − 1).  ACCUMULATES.
void gp_kl_backward(float* dmu, float* dlogv, const float* mu, const float* logv, const float* Kinv, double w, int B, int T, int D) {
    const float k = (float)(w / ((double)B * T));
    // ½ μᵀ𝒦⁻¹μ   =>   dμ = 𝒦⁻¹ μ   (𝒦⁻¹ symmetric)
    gemm_strided(false, false, T, D, T, k, Kinv, T, 0, mu, D, (int64_t)T * D, 1.0f, dmu, D, (int64_t)T * D, B);
    gp_kl_dlogv_kernel<<<grid_for((int64_t)B * T * D), 256>>>(dlogv, logv, Kinv, k, B, T, D);
    launchCheck("gp_kl_dlogv_kernel");
}

// y = μ + exp(½ logv) ⊙ ε
__global__ void reparam_forward_kernel(float* y, const float* mu, const float* logv, const float* eps, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = mu[i] + expf(0.5f * logv[i]) * eps[i];
}
void reparam_forward(float* y, const float* mu, const float* logv, const float* eps, int64_t n) {
    reparam_forward_kernel<<<grid_for(n), 256>>>(y, mu, logv, eps, n);
    launchCheck("reparam_forward_kernel");
}

// y = μ + e^{½ logv} ε   =>   dμ += dy ;  dlogv += dy ⊙ ½ e^{½ logv} ⊙ ε
__global__ void reparam_backward_kernel(float* dmu, float* dlogv, const float* dy, const float* logv, const float* eps, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        dmu[i] += dy[i];
        dlogv[i] += dy[i] * 0.5f * expf(0.5f * logv[i]) * eps[i];
    }
}
void reparam_backward(float* dmu, float* dlogv, const float* dy, const float* logv, const float* eps, int64_t n) {
    reparam_backward_kernel<<<grid_for(n), 256>>>(dmu, dlogv, dy, logv, eps, n);
    launchCheck("reparam_backward_kernel");
}

}  // namespace icl::cuda
