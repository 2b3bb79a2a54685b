// tint_ops.h — the forward-only layers the TinT simulator (spec/tint.md, src/models/tint/) is made of, batched over
// B sequences whose state rows are X (B, N, D): N = K prefix rows, then T data rows (spec §1).
//
//   hsplit_split_forward   one split-wise H-split linear op (spec §2.2) as a sparse map, CSR by output coordinate:
//                          y[n,o] = (Σ_{k ∈ row o} w[k]·x[n, col[k]]) + b[o]       (block-diagonal W, H blocks)
//   hsplit_dim_forward     one dimension-wise H-split op: view a row as M (H,c); M'[o,x] = Σ_{i live} W[o,i,x]·M[i,x] + b
//   tint_add_position      q/k/v rows += λ_h·P[:, p] in head h's coordinates, p the row's one-hot position:
//                          prefix row j at Taux + j, data row t at pos[b,t]  (P (D/H, Taux + K), shared by the heads)
//   tint_attention_forward TinT attention (spec §2.1) on given q, k, v: a = <q,k> (linear) or softmax(scale·<q,k>) over
//                          the mask's columns; O = Σ_j a[i][j] v_j, or with `transpose` Σ_{j ≥ i} a[j][i] v_j kept only
//                          where token j trains or j = i (the backward's a_{j,t}, spec §4.3)
//   tint_gate_forward      X = tanh(a_old[p] + b_old)·X + tanh(a_new[p] + b_new)·e   (spec §2.3); with gw = D the tables
//                          hold one gate per (position, coordinate) (the exact γ descent, docs/tint.md)
//   copy_block, fill_block strided 2-D blocks of B batches (dst[b·bs + r·ld + c]): the simulator's routing of
//                          coordinate blocks between its state, prefixes and stored memory
//   tint_loss_gradient     grad_t = (Eᵀ softmax(logits_t) − E[ids_{t+1}])·m_t   (spec §4.4), rows independent
//
// Every op is deterministic: each output element is one thread's sum in a fixed order (the CUDA twins in
// cuda/tint_ops.cu sum in the same order). The loops keep the order of the original per-sequence simulator, so the
// refactor onto these ops changed no bit of its fp64 results. Nothing here trains: TinT's "backward" is itself a
// forward pass of the simulator (spec §3, §4).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/common.h"
#include "layers/parallel.h"
#include "layers/tint_mask.h"  // TintMask, tint_detail::row_position / allowed / column_range (shared with CUDA)

namespace icl {

// out (N,D) = split-wise H-split op of in (N,D); W as CSR by output coordinate: rowptr (D+1), col/w (nnz); b (D).
// out != in.
template <typename real>
void hsplit_split_forward(real* out, const real* in, const int* rowptr, const int* col, const real* w, const real* b, int N, int D) {
#pragma omp parallel for schedule(static) if (par::use_threads((double)N * D))
    for (int n = 0; n < N; n++) {
        const real* x = in + (size_t)n * D;  // (D)
        real* y = out + (size_t)n * D;       // (D)
        for (int o = 0; o < D; o++) {
            real acc = 0;
            for (int k = rowptr[o]; k < rowptr[o + 1]; k++) acc += w[k] * x[col[k]];
            y[o] = acc + b[o];
        }
    }
}

// out (N,D) = dimension-wise H-split op of in (N,D): chunk o, coordinate x: Σ_{i: live[o,i]} W[(o·H + i)·c + x]·in[i·c + x]
// + b[o·c + x]; W (H,H,c), live (H,H), b (D), c = D/H. out != in.
template <typename real>
void hsplit_dim_forward(real* out, const real* in, const real* W, const uint8_t* live, const real* b, int N, int D, int H) {
    const int c = D / H;
#pragma omp parallel for schedule(static) if (par::use_threads((double)N * D * H))
    for (int n = 0; n < N; n++) {
        const real* x = in + (size_t)n * D;  // (D)
        real* y = out + (size_t)n * D;       // (D)
        for (int o = 0; o < H; o++) {
            real* yo = y + (size_t)o * c;
            for (int k = 0; k < c; k++) yo[k] = 0;
            for (int i = 0; i < H; i++) {
                if (!live[(size_t)o * H + i]) continue;
                const real* wi = W + ((size_t)o * H + i) * c;
                const real* xi = x + (size_t)i * c;
                for (int k = 0; k < c; k++) yo[k] += wi[k] * xi[k];
            }
            for (int k = 0; k < c; k++) yo[k] += b[(size_t)o * c + k];
        }
    }
}

// Y (B,N,D) += lam[h]·P[:, position(row)] in head h's coordinates [h·k, (h+1)·k), k = D/H; P (k, Taux + K), lam (H),
// pos (B,T) the data rows' positions (N = K + T).
template <typename real>
void tint_add_position(real* Y, const real* P, const uint8_t* lam, const int* pos, int B, int K, int T, int D, int H, int Taux) {
    const int N = K + T, k = D / H, Ts = Taux + K;
#pragma omp parallel for schedule(static) if (par::use_threads((double)B * N * D))
    for (int bn = 0; bn < B * N; bn++) {
        const int b = bn / N, i = bn % N;
        const int p = tint_detail::row_position(pos + (size_t)b * T, K, Taux, i);
        for (int h = 0; h < H; h++) {
            if (!lam[h]) continue;
            real* y = Y + (size_t)bn * D + (size_t)h * k;
            for (int r = 0; r < k; r++) y[r] += P[(size_t)r * Ts + p];
        }
    }
}

// TinT attention (spec §2.1) over B sequences of N = K + T rows, H heads of k = D/H:
//   a^h[i][j] = <q_i, k_j>_h on the mask (linear), or softmax_j(scale·<q_i, k_j>_h) over the mask (a row with no
//   allowed column is all 0);  O_i = Σ_j a^h[i][j] v_j  (transpose: Σ_{j ≥ i, train[j] or j = i} a^h[j][i] v_j,
//   data rows only).
// O (B,N,D) set; a (B,H,N,N) scratch (only each row's column range is written); Q, Kx, Vx (B,N,D);
// train (B,T); icl (B,T,T) 1 = may attend, or null = plain causal.
template <typename real>
void tint_attention_forward(real* O, real* a, const real* Q, const real* Kx, const real* Vx, const uint8_t* train, const uint8_t* icl,
                            int B, int K, int T, int D, int H, TintMask mask, bool softmax, real scale, bool transpose) {
    using namespace tint_detail;
    const int N = K + T, k = D / H;
    // scores and normalisation, one row (b, h, i) at a time
#pragma omp parallel for schedule(static) if (par::use_threads((double)B * H * N * N * k))
    for (int bhi = 0; bhi < B * H * N; bhi++) {
        const int b = bhi / (H * N), h = (bhi / N) % H, i = bhi % N;
        const uint8_t* tr = train + (size_t)b * T;
        const uint8_t* ic = icl ? icl + (size_t)b * T * T : nullptr;
        int j0, j1;
        column_range(mask, K, N, i, j0, j1);
        const real* qi = Q + ((size_t)b * N + i) * D + (size_t)h * k;
        real* ai = a + (size_t)bhi * N;
        real mx = -INFINITY;
        for (int j = j0; j < j1; j++) {
            if (!allowed(mask, tr, ic, K, T, i, j)) { ai[j] = -INFINITY; continue; }
            const real* kj = Kx + ((size_t)b * N + j) * D + (size_t)h * k;
            real dot = 0;
            for (int r = 0; r < k; r++) dot += qi[r] * kj[r];
            ai[j] = softmax ? scale * dot : dot;
            mx = std::max(mx, ai[j]);
        }
        if (softmax && mx > -INFINITY) {
            real z = 0;
            for (int j = j0; j < j1; j++) {
                ai[j] = ai[j] == -INFINITY ? real(0) : std::exp(ai[j] - mx);
                z += ai[j];
            }
            for (int j = j0; j < j1; j++) ai[j] /= z;
        } else {
            for (int j = j0; j < j1; j++) if (ai[j] == -INFINITY) ai[j] = 0;
        }
    }
    // outputs, one (b, i, h) slice at a time, the columns in ascending order
#pragma omp parallel for schedule(static) if (par::use_threads((double)B * H * N * N * k))
    for (int bih = 0; bih < B * N * H; bih++) {
        const int b = bih / (N * H), i = (bih / H) % N, h = bih % H;
        const uint8_t* tr = train + (size_t)b * T;
        const real* ab = a + ((size_t)b * H + h) * N * N;  // (N,N) of head h
        real* oi = O + ((size_t)b * N + i) * D + (size_t)h * k;
        for (int r = 0; r < k; r++) oi[r] = 0;
        int j0, j1;
        if (!transpose) column_range(mask, K, N, i, j0, j1);
        else if (i >= K) { j0 = i; j1 = N; }  // token i collects a[j][i] from itself and later tokens ...
        else j0 = j1 = 0;
        for (int j = j0; j < j1; j++) {
            // ... that train, or j = i (a[j][i] lies in row j's causal range since j >= i)
            const real w = !transpose ? ab[(size_t)i * N + j] : (tr[j - K] || j == i) ? ab[(size_t)j * N + i] : real(0);
            if (w == real(0)) continue;
            const real* vj = Vx + ((size_t)b * N + j) * D + (size_t)h * k;
            for (int r = 0; r < k; r++) oi[r] += w * vj[r];
        }
    }
}

// X (B,N,D) = tanh(a_old[p] + b_old)·X + tanh(a_new[p] + b_new)·e, p = the row's one-hot position. The tables are
// (Taux+K, gw): gw = 1, one gate per position; gw = D, one per (position, coordinate): a[p·D + j].
template <typename real>
void tint_gate_forward(real* X, const real* e, const real* a_old, const real* a_new, real b_old, real b_new, int gw, const int* pos, int B,
                       int K, int T, int D, int Taux) {
    const int N = K + T;
#pragma omp parallel for schedule(static) if (par::use_threads((double)B * N * D))
    for (int bn = 0; bn < B * N; bn++) {
        const int b = bn / N, i = bn % N;
        const int p = tint_detail::row_position(pos + (size_t)b * T, K, Taux, i);
        real* x = X + (size_t)bn * D;
        const real* en = e + (size_t)bn * D;
        if (gw == 1) {
            const real co = std::tanh(a_old[p] + b_old), cn = std::tanh(a_new[p] + b_new);
            for (int j = 0; j < D; j++) x[j] = co * x[j] + cn * en[j];
        } else {
            const real* ao = a_old + (size_t)p * D;
            const real* an = a_new + (size_t)p * D;
            for (int j = 0; j < D; j++) x[j] = std::tanh(ao[j] + b_old) * x[j] + std::tanh(an[j] + b_new) * en[j];
        }
    }
}

// dst[b·dbs + r·dld + c] = src[b·sbs + r·sld + c]   for b < B, r < rows, c < cols (blocks must not overlap)
template <typename real>
void copy_block(real* dst, int64_t dbs, int64_t dld, const real* src, int64_t sbs, int64_t sld, int B, int rows, int cols) {
#pragma omp parallel for schedule(static) if (par::use_threads((double)B * rows * cols))
    for (int br = 0; br < B * rows; br++) {
        const int b = br / rows, r = br % rows;
        const real* s = src + b * sbs + r * sld;
        std::copy(s, s + cols, dst + b * dbs + r * dld);
    }
}
// dst[b·dbs + r·dld + c] = v
template <typename real>
void fill_block(real* dst, int64_t dbs, int64_t dld, int B, int rows, int cols, real v) {
#pragma omp parallel for schedule(static) if (par::use_threads((double)B * rows * cols))
    for (int br = 0; br < B * rows; br++) {
        real* d = dst + (br / rows) * dbs + (br % rows) * dld;
        std::fill(d, d + cols, v);
    }
}

// The loss gradient at the output (spec §4.4):  grad_t = (Eᵀ softmax(logits_t) − E[ids_{t+1}])·m_t, the gradient
// w.r.t. h_t of the SUMMED cross-entropy Σ_t m_t CE_t, logits_t = E h_t (E = wte, the tied head). Rows are
// independent, so B sequences go in as T = B·T_seq rows whenever m is 0 at each sequence's last row.
// grad (T,d) set; logits (T,V); E (V,d); ids (T); m (T). The softmax in double.
template <typename real>
void tint_loss_gradient(real* grad, const real* logits, const real* E, const int* ids, const uint8_t* m, int T, int d, int V) {
#pragma omp parallel if (par::use_threads((double)T * V * d))
    {
        std::vector<double> p(V);  // one row's exp(z − max), once per thread
#pragma omp for schedule(static)
        for (int t = 0; t < T; t++) {
            real* g = grad + (size_t)t * d;
            std::fill(g, g + d, real(0));
            if (!m[t]) continue;
            ICL_ASSERT(t + 1 < T);
            const real* z = logits + (size_t)t * V;
            double mx = z[0], sum = 0;
            for (int v = 1; v < V; v++) mx = std::max(mx, (double)z[v]);
            for (int v = 0; v < V; v++) sum += p[v] = std::exp((double)z[v] - mx);
            // ∂(−log softmax(E h)[y])/∂h = Eᵀ softmax(E h) − E[y]
            for (int v = 0; v < V; v++) {
                const real pv = (real)(p[v] / sum);
                const real* e = E + (size_t)v * d;
                for (int j = 0; j < d; j++) g[j] += pv * e[j];
            }
            const real* ey = E + (size_t)ids[t + 1] * d;
            for (int j = 0; j < d; j++) g[j] -= ey[j];
        }
    }
}

}  // namespace icl
