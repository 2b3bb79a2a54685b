// generator.cu — the CGT template low-rank weight generator T^κ (spec/cgt.md §1.5), forward and backward.
// CPU reference, notation and derivation: src/layers/generator.h. Per row n (a token), u (C), y (Dy):
//
//   c   = h(S[:, :Dy]·y + S[:, Dy])          (M)      h = tanh | softmax            saved
//   P   = [u;1]ᵀ·R_all                       (M·r)    P[m·r+k] = R^m[:,k]·[u;1]     saved
//   z_k = Σ_m c_m P[m·r+k]                   (r)                                     saved
//   G[m·r+k] = c_m z_k                       (M·r)                                   saved
//   out = u + L_all·G                        (C)
//
// Parallelization: the four large products (P, out; dG, dL, dR, du, dS, dy in backward) are cuBLAS GEMMs over
// all N rows at once. The small per-row algebra (O(M·r) per row) is one thread per (row, k) or (row, m) —
// thousands of rows make enough threads. Bias-row / bias-column gradients are deterministic column sums.
#include "cuda/common.cuh"
#include "cuda/layers.h"

namespace icl::cuda {

// c (N,M) += S[:, Dy] (the bias column), then c = tanh(c) or softmax over m        one thread per row
__global__ void generator_mix_activate_kernel(float* c, const float* S, int N, int Dy, int M, int softmax) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float* cr = c + (size_t)n * M;  // (M)
    for (int m = 0; m < M; m++) cr[m] += S[(size_t)m * (Dy + 1) + Dy];
    if (!softmax) {
        for (int m = 0; m < M; m++) cr[m] = tanhf(cr[m]);
    } else {
        float mx = cr[0];
        for (int m = 1; m < M; m++) mx = fmaxf(mx, cr[m]);
        float sum = 0.0f;
        for (int m = 0; m < M; m++) sum += (cr[m] = expf(cr[m] - mx));
        for (int m = 0; m < M; m++) cr[m] /= sum;
    }
}

// P (N,M·r) += rb (the bias row of R_all); z_k = Σ_m c_m P_{m,k};  G_{m,k} = c_m z_k       one thread per (n, k)
__global__ void generator_rows_forward_kernel(float* P, float* z, float* G, const float* c, const float* rb, int N, int M, int r) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)N * r) return;
    const int n = (int)(i / r), k = (int)(i % r), Mr = M * r;
    float* Pn = P + (size_t)n * Mr;
    const float* cn = c + (size_t)n * M;
    float zk = 0.0f;
    for (int m = 0; m < M; m++) {
        Pn[m * r + k] += rb[m * r + k];
        zk += cn[m] * Pn[m * r + k];  // z_k = Σ_m c_m P_{m,k}
    }
    z[(size_t)n * r + k] = zk;
    for (int m = 0; m < M; m++) G[(size_t)n * Mr + m * r + k] = cn[m] * zk;  // G_{m,k} = c_m z_k
}

void generator_forward(float* out, float* c, float* P, float* z, float* G, const float* u, const float* y, const float* S, const float* Lw,
                       const float* Rw, int N, int C, int Dy, int M, int r, MixFn h) {
    const int Mr = M * r;
    if (N == 0) return;
    // a = [y;1] @ Sᵀ, c = h(a)
    if (Dy > 0) gemm(false, true, N, M, Dy, 1.0f, y, Dy, S, Dy + 1, 0.0f, c, M);
    else cudaCheck(cudaMemset(c, 0, (size_t)N * M * sizeof(float)));
    generator_mix_activate_kernel<<<blocks(N, 128), 128>>>(c, S, N, Dy, M, static_cast<int>(h) == 1);
    launchCheck("generator_mix_activate_kernel");
    // P = u @ R_all[:C] + R_all[C]
    gemm(false, false, N, Mr, C, 1.0f, u, C, Rw, Mr, 0.0f, P, Mr);
    generator_rows_forward_kernel<<<blocks((int64_t)N * r, 128), 128>>>(P, z, G, c, Rw + (size_t)C * Mr, N, M, r);
    launchCheck("generator_rows_forward_kernel");
    // out = u + G @ L_allᵀ
    cudaCheck(cudaMemcpy(out, u, (size_t)N * C * sizeof(float), cudaMemcpyDeviceToDevice));
    gemm(false, true, N, C, Mr, 1.0f, G, Mr, Lw, Mr, 1.0f, out, C);
}

// G_{m,k} = c_m z_k   =>   dz_k = Σ_m dG_{m,k} c_m                                   one thread per (n, k)
__global__ void generator_dz_kernel(float* dz, const float* dG, const float* c, int N, int M, int r) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)N * r) return;
    const int n = (int)(i / r), k = (int)(i % r), Mr = M * r;
    float s = 0.0f;
    for (int m = 0; m < M; m++) s += dG[(size_t)n * Mr + m * r + k] * c[(size_t)n * M + m];
    dz[i] = s;
}

// G_{m,k} = c_m z_k        =>  dc_m  = Σ_k dG_{m,k} z_k
// z_k = Σ_m c_m P_{m,k}    =>  dc_m += Σ_k dz_k P_{m,k} ;   dP_{m,k} = c_m dz_k  (overwrites dG row m)
// one thread per (n, m): it reads only row m of dG before overwriting it
__global__ void generator_dc_kernel(float* da, float* dG, const float* dz, const float* c, const float* z, const float* P, int N, int M,
                                    int r) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)N * M) return;
    const int n = (int)(i / M), m = (int)(i % M), Mr = M * r;
    float* dGm = dG + (size_t)n * Mr + m * r;       // (r)  row m of dG, then of dP
    const float* Pm = P + (size_t)n * Mr + m * r;   // (r)
    const float* zn = z + (size_t)n * r;
    const float* dzn = dz + (size_t)n * r;
    float dc = 0.0f;
    for (int k = 0; k < r; k++) dc += dGm[k] * zn[k];
    for (int k = 0; k < r; k++) dc += dzn[k] * Pm[k];
    const float cm = c[i];
    for (int k = 0; k < r; k++) dGm[k] = cm * dzn[k];
    da[i] = dc;
}

// c = h(a):  tanh  =>  da = dc ⊙ (1 − c²);   softmax  =>  da = c ⊙ (dc − Σ c·dc)         one thread per row
__global__ void generator_dmix_kernel(float* da, const float* c, int N, int M, int softmax) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float* d = da + (size_t)n * M;
    const float* cn = c + (size_t)n * M;
    if (!softmax) {
        for (int m = 0; m < M; m++) d[m] *= (1.0f - cn[m] * cn[m]);
    } else {
        float dot = 0.0f;
        for (int m = 0; m < M; m++) dot += cn[m] * d[m];
        for (int m = 0; m < M; m++) d[m] = cn[m] * (d[m] - dot);
    }
}

// Backward of generator_forward. ACCUMULATES into du (N,C), dy (N,Dy), dS, dL, dR; du and dy may be nullptr.
// scratch: the caller's generator_scratch_size(N, M, r) elements ON THE DEVICE: dG/dP (N,M·r) and da (N,M).
void generator_backward(float* du, float* dy, float* dS, float* dL, float* dR, float* scratch, const float* dout, const float* u,
                        const float* y, const float* c, const float* P, const float* z, const float* G, const float* S, const float* Lw,
                        const float* Rw, int N, int C, int Dy, int M, int r, MixFn h) {
    const int Mr = M * r;
    if (N == 0) return;
    float* dG = scratch;                   // (N,M·r), becomes dP in place
    float* da = scratch + (size_t)N * Mr;  // (N,M)   dc, then da
    float* dz = scratch_as<float>(Scratch::gen_dz, (size_t)N * r);
    // out = u + G @ L_allᵀ   =>   du += dout ;  dG = dout @ L_all ;  dL_all += doutᵀ @ G
    if (du) residual_backward(du, nullptr, dout, (int64_t)N * C);
    gemm(false, false, N, Mr, C, 1.0f, dout, C, Lw, Mr, 0.0f, dG, Mr);
    gemm(true, false, C, Mr, N, 1.0f, dout, C, G, Mr, 1.0f, dL, Mr);
    generator_dz_kernel<<<blocks((int64_t)N * r, 128), 128>>>(dz, dG, c, N, M, r);
    launchCheck("generator_dz_kernel");
    generator_dc_kernel<<<blocks((int64_t)N * M, 128), 128>>>(da, dG, dz, c, z, P, N, M, r);
    launchCheck("generator_dc_kernel");
    generator_dmix_kernel<<<blocks(N, 128), 128>>>(da, c, N, M, static_cast<int>(h) == 1);
    launchCheck("generator_dmix_kernel");
    const float* dP = dG;
    // P = u @ R_all[:C] + R_all[C]   =>   dR_all[:C] += uᵀ @ dP ;  dR_all[C] += Σ_n dP ;  du += dP @ R_all[:C]ᵀ
    gemm(true, false, C, Mr, N, 1.0f, u, C, dP, Mr, 1.0f, dR, Mr);
    column_sum_accumulate(dR + (size_t)C * Mr, 1, dP, Mr, N, Mr);
    if (du) gemm(false, true, N, C, Mr, 1.0f, dP, Mr, Rw, Mr, 1.0f, du, C);
    // a = y @ S[:, :Dy]ᵀ + S[:, Dy]   =>   dS[:, :Dy] += daᵀ @ y ;  dS[:, Dy] += Σ_n da ;  dy += da @ S[:, :Dy]
    if (Dy > 0) gemm(true, false, M, Dy, N, 1.0f, da, M, y, Dy, 1.0f, dS, Dy + 1);
    column_sum_accumulate(dS + Dy, Dy + 1, da, M, N, M);
    if (dy && Dy > 0) gemm(false, false, N, Dy, M, 1.0f, da, M, S, Dy + 1, 1.0f, dy, Dy);
}

}  // namespace icl::cuda
