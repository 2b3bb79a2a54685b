// tint_ops.cu — the TinT simulator's layers on the GPU, batched over sequences, forward only. CPU reference, formulas
// and spec sections: src/layers/tint_ops.h.
//
//   hsplit_split_forward    one thread per output element: the CSR row of its coordinate, in order, then + b
//   hsplit_dim_forward      one thread per output element: the live chunks i = 0..H−1 in order, then + b
//   tint_add_position       one thread per (row, coordinate) of the heads whose λ is set
//   tint_attention_forward  scores: one thread per (b, h, row) — its row of a in [j0, j1), normalised in place, the
//                           same sequential loops as the CPU; outputs: one thread per (b, row, coordinate), the
//                           columns in ascending order. TinT's states are small (N = K + T rows, a few heads): the
//                           simple forms are enough, and every output is one thread's fixed-order sum (deterministic).
//   tint_gate_forward       one thread per element
//   copy_block, fill_block  one thread per element
//   tint_loss_gradient      per row: max and Σ exp in double (one thread per row), then one block per row: the
//                           probabilities in chunks through shared memory, thread j summing p_v·E[v, j] over v in
//                           order, then − E[y, j]
#include "cuda/common.cuh"
#include "cuda/layers.h"
#include "layers/tint_mask.h"  // the masks and row positions, the CPU ops' own definitions

namespace icl::cuda {

namespace {

// ---- H-split ops ---------------------------------------------------------------------------------------

__global__ void hsplit_split_kernel(float* out, const float* in, const int* rowptr, const int* col, const float* w, const float* b, int N, int D) {
    const int64_t total = (int64_t)N * D;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = e / D;
        const int o = (int)(e % D);
        const float* x = in + n * D;
        float acc = 0.f;
        for (int k = rowptr[o]; k < rowptr[o + 1]; k++) acc += w[k] * x[col[k]];
        out[e] = acc + b[o];
    }
}

__global__ void hsplit_dim_kernel(float* out, const float* in, const float* W, const uint8_t* live, const float* b, int N, int D, int H) {
    const int c = D / H;
    const int64_t total = (int64_t)N * D;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = e / D;
        const int j = (int)(e % D), o = j / c, x = j % c;
        const float* xr = in + n * D;
        float acc = 0.f;
        for (int i = 0; i < H; i++)
            if (live[o * H + i]) acc += W[((size_t)o * H + i) * c + x] * xr[(size_t)i * c + x];
        out[e] = acc + b[j];
    }
}


__global__ void add_position_kernel(float* Y, const float* P, const uint8_t* lam, const int* pos, int B, int K, int T, int D, int H, int Taux) {
    const int N = K + T, k = D / H, Ts = Taux + K;
    const int64_t total = (int64_t)B * N * D;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t bn = e / D;
        const int j = (int)(e % D), h = j / k, r = j % k;
        if (!lam[h]) continue;
        const int b = (int)(bn / N), i = (int)(bn % N);
        const int p = tint_detail::row_position(pos + (size_t)b * T, K, Taux, i);
        Y[e] += P[(size_t)r * Ts + p];
    }
}

// ---- TinT attention -------------------------------------------------------------------------------------

// one thread per (b, h, i): row i of head h's a, as the CPU loop
__global__ void tint_scores_kernel(float* a, const float* Q, const float* Kx, const uint8_t* train, const uint8_t* icl, int B, int K, int T,
                                   int D, int H, int mask, bool softmax, float scale) {
    const int N = K + T, k = D / H;
    const int64_t bhi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (bhi >= (int64_t)B * H * N) return;
    const int b = (int)(bhi / ((int64_t)H * N)), h = (int)((bhi / N) % H), i = (int)(bhi % N);
    const uint8_t* tr = train + (size_t)b * T;
    const uint8_t* ic = icl ? icl + (size_t)b * T * T : nullptr;
    int j0, j1;
    tint_detail::column_range((TintMask)mask, K, N, i, j0, j1);
    const float* qi = Q + ((size_t)b * N + i) * D + (size_t)h * k;
    float* ai = a + (size_t)bhi * N;
    float mx = -INFINITY;
    for (int j = j0; j < j1; j++) {
        if (!tint_detail::allowed((TintMask)mask, tr, ic, K, T, i, j)) { ai[j] = -INFINITY; continue; }
        const float* kj = Kx + ((size_t)b * N + j) * D + (size_t)h * k;
        float dot = 0.f;
        for (int r = 0; r < k; r++) dot += qi[r] * kj[r];
        ai[j] = softmax ? scale * dot : dot;
        mx = fmaxf(mx, ai[j]);
    }
    if (softmax && mx > -INFINITY) {
        float z = 0.f;
        for (int j = j0; j < j1; j++) {
            ai[j] = ai[j] == -INFINITY ? 0.f : expf(ai[j] - mx);
            z += ai[j];
        }
        for (int j = j0; j < j1; j++) ai[j] /= z;
    } else {
        for (int j = j0; j < j1; j++) if (ai[j] == -INFINITY) ai[j] = 0.f;
    }
}

// one thread per (b, i, coordinate): O_i = Σ_j w_ij v_j in ascending j
__global__ void tint_attend_kernel(float* O, const float* a, const float* Vx, const uint8_t* train, int B, int K, int T, int D, int H, int mask,
                                   bool transpose) {
    const int N = K + T, k = D / H;
    const int64_t total = (int64_t)B * N * D;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t bn = e / D;
        const int b = (int)(bn / N), i = (int)(bn % N), col = (int)(e % D), h = col / k;
        const uint8_t* tr = train + (size_t)b * T;
        const float* ab = a + ((size_t)b * H + h) * N * N;
        int j0, j1;
        if (!transpose) tint_detail::column_range((TintMask)mask, K, N, i, j0, j1);
        else if (i >= K) { j0 = i; j1 = N; }
        else j0 = j1 = 0;
        float acc = 0.f;
        for (int j = j0; j < j1; j++) {
            const float w = !transpose ? ab[(size_t)i * N + j] : (tr[j - K] || j == i) ? ab[(size_t)j * N + i] : 0.f;
            if (w == 0.f) continue;
            acc += w * Vx[((size_t)b * N + j) * D + col];
        }
        O[e] = acc;
    }
}

__global__ void gate_kernel(float* X, const float* e, const float* a_old, const float* a_new, float b_old, float b_new, int gw, const int* pos,
                            int B, int K, int T, int D, int Taux) {
    const int N = K + T;
    const int64_t total = (int64_t)B * N * D;
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < total; x += (int64_t)gridDim.x * blockDim.x) {
        const int64_t bn = x / D;
        const int b = (int)(bn / N), i = (int)(bn % N);
        const int p = tint_detail::row_position(pos + (size_t)b * T, K, Taux, i);
        const int64_t g = gw == 1 ? p : (int64_t)p * D + x % D;  // one gate per position, or per (position, coordinate)
        X[x] = tanhf(a_old[g] + b_old) * X[x] + tanhf(a_new[g] + b_new) * e[x];
    }
}

__global__ void copy_block_kernel(float* dst, int64_t dbs, int64_t dld, const float* src, int64_t sbs, int64_t sld, int B, int rows, int cols) {
    const int64_t total = (int64_t)B * rows * cols;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t br = e / cols, c = e % cols, b = br / rows, r = br % rows;
        dst[b * dbs + r * dld + c] = src[b * sbs + r * sld + c];
    }
}
__global__ void fill_block_kernel(float* dst, int64_t dbs, int64_t dld, int B, int rows, int cols, float v) {
    const int64_t total = (int64_t)B * rows * cols;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t br = e / cols, c = e % cols;
        dst[(br / rows) * dbs + (br % rows) * dld + c] = v;
    }
}

// ---- the loss gradient --------------------------------------------------------------------------------------

__global__ void loss_stats_kernel(double* stats, const float* logits, const uint8_t* m, int T, int V) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T || !m[t]) return;
    const float* z = logits + (size_t)t * V;
    double mx = z[0], sum = 0;
    for (int v = 1; v < V; v++) mx = fmax(mx, (double)z[v]);
    for (int v = 0; v < V; v++) sum += exp((double)z[v] - mx);
    stats[2 * t] = mx;
    stats[2 * t + 1] = sum;
}
// one block per row t: the probabilities p_v = exp(z_v − max)/Σ in chunks of LG_CHUNK through shared memory (each
// computed once per column pass), thread j summing p_v·E[v, j] over v in order, then − E[y, j]
constexpr int LG_CHUNK = 1024;
__global__ void loss_grad_kernel(float* grad, const double* stats, const float* logits, const float* E, const int* ids, const uint8_t* m, int T,
                                 int d, int V) {
    __shared__ float sp[LG_CHUNK];
    const int t = blockIdx.x;
    if (!m[t]) {  // the whole block: no barrier is skipped by some threads only
        for (int j = threadIdx.x; j < d; j += blockDim.x) grad[(size_t)t * d + j] = 0.f;
        return;
    }
    const float* z = logits + (size_t)t * V;
    const double mx = stats[2 * t], sum = stats[2 * t + 1];
    const int y = ids[t + 1];  // m_t = 0 at every sequence's last row (the host builds m so)
    for (int j0 = 0; j0 < d; j0 += blockDim.x) {
        const int j = j0 + threadIdx.x;
        float g = 0.f;
        for (int v0 = 0; v0 < V; v0 += LG_CHUNK) {
            const int n = min(LG_CHUNK, V - v0);
            __syncthreads();  // the previous chunk is no longer read
            for (int e = threadIdx.x; e < n; e += blockDim.x) sp[e] = (float)(exp((double)z[v0 + e] - mx) / sum);
            __syncthreads();
            if (j < d)
                for (int e = 0; e < n; e++) g += sp[e] * E[(size_t)(v0 + e) * d + j];
        }
        if (j < d) grad[(size_t)t * d + j] = g - E[(size_t)y * d + j];
    }
}

}  // namespace

void hsplit_split_forward(float* out, const float* in, const int* rowptr, const int* col, const float* w, const float* b, int N, int D) {
    hsplit_split_kernel<<<grid_for((int64_t)N * D), 256>>>(out, in, rowptr, col, w, b, N, D);
    launchCheck("hsplit_split_kernel");
}
void hsplit_dim_forward(float* out, const float* in, const float* W, const uint8_t* live, const float* b, int N, int D, int H) {
    hsplit_dim_kernel<<<grid_for((int64_t)N * D), 256>>>(out, in, W, live, b, N, D, H);
    launchCheck("hsplit_dim_kernel");
}
void tint_add_position(float* Y, const float* P, const uint8_t* lam, const int* pos, int B, int K, int T, int D, int H, int Taux) {
    add_position_kernel<<<grid_for((int64_t)B * (K + T) * D), 256>>>(Y, P, lam, pos, B, K, T, D, H, Taux);
    launchCheck("add_position_kernel");
}
void tint_attention_forward(float* O, float* a, const float* Q, const float* Kx, const float* Vx, const uint8_t* train, const uint8_t* icl,
                            int B, int K, int T, int D, int H, int mask, bool softmax, float scale, bool transpose) {
    const int64_t rows = (int64_t)B * H * (K + T);
    tint_scores_kernel<<<blocks(rows, 128), 128>>>(a, Q, Kx, train, icl, B, K, T, D, H, mask, softmax, scale);
    launchCheck("tint_scores_kernel");
    tint_attend_kernel<<<grid_for((int64_t)B * (K + T) * D), 256>>>(O, a, Vx, train, B, K, T, D, H, mask, transpose);
    launchCheck("tint_attend_kernel");
}
void tint_gate_forward(float* X, const float* e, const float* a_old, const float* a_new, float b_old, float b_new, int gw, const int* pos, int B,
                       int K, int T, int D, int Taux) {
    gate_kernel<<<grid_for((int64_t)B * (K + T) * D), 256>>>(X, e, a_old, a_new, b_old, b_new, gw, pos, B, K, T, D, Taux);
    launchCheck("gate_kernel");
}
void copy_block(float* dst, int64_t dbs, int64_t dld, const float* src, int64_t sbs, int64_t sld, int B, int rows, int cols) {
    if ((int64_t)B * rows * cols == 0) return;
    copy_block_kernel<<<grid_for((int64_t)B * rows * cols), 256>>>(dst, dbs, dld, src, sbs, sld, B, rows, cols);
    launchCheck("copy_block_kernel");
}
void fill_block(float* dst, int64_t dbs, int64_t dld, int B, int rows, int cols, float v) {
    if ((int64_t)B * rows * cols == 0) return;
    fill_block_kernel<<<grid_for((int64_t)B * rows * cols), 256>>>(dst, dbs, dld, B, rows, cols, v);
    launchCheck("fill_block_kernel");
}
void tint_loss_gradient(float* grad, const float* logits, const float* E, const int* ids, const uint8_t* m, int T, int d, int V) {
    if (T == 0) return;
    double* stats = scratch_as<double>(Scratch::tint_loss, 2 * (size_t)T);  // (T, 2): max, Σ exp
    loss_stats_kernel<<<blocks(T, 128), 128>>>(stats, logits, m, T, V);
    launchCheck("loss_stats_kernel");
    loss_grad_kernel<<<T, 256>>>(grad, stats, logits, E, ids, m, T, d, V);
    launchCheck("loss_grad_kernel");
}

}  // namespace icl::cuda
