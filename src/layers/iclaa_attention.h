// iclaa_attention.h — the hybrid causal attention of ICLAA (spec/iclca.md §3, Eq. 17; models/iclca/iclaa.h): the
// exact softmax among the input tokens plus the approximate prompt term read from bias terms through random
// features. Forward only (ICLAA converts trained models; nothing trains through it). Everything is computed in
// double from the (T,3C) [q|k|v] rows; the CUDA twin (cuda/iclaa_attention.cu) does the same arithmetic.
//
// Features φ (spec §3.3), per head, m of them, kept in log space:
//   FAVOR+ (omega given): log φ_r(x) = ω_r·x' − ‖x'‖²/2 − ½ log m,   x' = x / hs^{1/4}     (E[φ(q)ᵀφ(k)] = e^{q·k/√hs})
//   elu+1  (omega null):  log φ_r(x) = log(elu(x_r) + 1), m = hs                           (an exact finite kernel)
//
// Per head h and query i (bias terms b_KV = e^κ kv, b_D = e^κ d):
//   s_ij = q_i·k_j/√hs (softmax)   or   log Σ_r φ_r(q_i) φ_r(k_j)  (kernel: the approximated model itself)
//   μ_i  = max( max_{j<=i} s_ij , κ + max_r log φ_r(q_i) )                    one shift for both terms
//   out_i = [Σ_{j<=i} e^{s_ij−μ} v_j + Σ_r e^{log φ_r(q_i)+κ−μ} kv_r] / [Σ_{j<=i} e^{s_ij−μ} + Σ_r e^{log φ_r(q_i)+κ−μ} d_r]
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "layers/parallel.h"

namespace icl {

// log φ (m) of one raw query/key x (hs). omega: this head's (m,hs) FAVOR+ directions, or nullptr for elu+1 (m = hs).
inline void iclaa_log_phi(double* lphi, const double* x, const double* omega, int hs, int m) {
    if (!omega) {  // log(elu(x)+1): log(1+x) for x > 0, x otherwise
        for (int r = 0; r < m; r++) lphi[r] = x[r] > 0 ? std::log1p(x[r]) : x[r];
        return;
    }
    const double sc = std::pow((double)hs, -0.25);
    double n2 = 0;
    for (int k = 0; k < hs; k++) n2 += (x[k] * sc) * (x[k] * sc);
    const double base = -0.5 * n2 - 0.5 * std::log((double)m);
    for (int r = 0; r < m; r++) {
        double dot = 0;
        for (int k = 0; k < hs; k++) dot += omega[(size_t)r * hs + k] * x[k];
        lphi[r] = dot * sc + base;
    }
}

// Scratch (doubles) the hybrid attention needs: log φ(q) (NH,T,m), and log φ(k) after it for the kernel similarity.
inline size_t iclaa_attention_scratch_size(int T, int NH, int m, int kernel_sim) { return (size_t)(kernel_sim ? 2 : 1) * NH * T * m; }

template <typename real>
void iclaa_attention_forward(real* out,             // (T,C)        SET
                             double* lphi,          // (1|2,NH,T,m) scratch: log φ(q) [| log φ(k) with kernel_sim]
                             const real* qkv,       // (T,3C)       [q|k|v] rows of one sequence
                             const double* omega,   // (NH,m,hs)    this layer's FAVOR+ directions; nullptr: elu+1 (m = hs)
                             const double* bkv,     // (NH,m,hs)    prompt term kv; nullptr: no prompt (bd, kappa unread)
                             const double* bd,      // (NH,m)
                             const double* kappa,   // (NH)         log scale of the prompt terms
                             int kernel_sim,        // 1: s_ij from the features (the approximated model); 0: exact softmax
                             int T, int C, int NH, int m) {
    const int hs = C / NH;
    const double ninf = -std::numeric_limits<double>::infinity();
    const bool use_bias = bkv != nullptr, need_phi = use_bias || kernel_sim;
#pragma omp parallel for schedule(static) if (par::use_threads((double)NH * T * T * (need_phi ? m : hs)))
    for (int h = 0; h < NH; h++) {
        double* lq = lphi + (size_t)h * T * m;
        double* lk = kernel_sim ? lphi + ((size_t)NH + h) * T * m : nullptr;
        const double* om = omega ? omega + (size_t)h * m * hs : nullptr;
        std::vector<double> q((size_t)T * hs), k((size_t)T * hs), v((size_t)T * hs), s(T), num(hs);
        for (int t = 0; t < T; t++)
            for (int c = 0; c < hs; c++) {
                q[(size_t)t * hs + c] = (double)qkv[(size_t)t * 3 * C + h * hs + c];
                k[(size_t)t * hs + c] = (double)qkv[(size_t)t * 3 * C + C + h * hs + c];
                v[(size_t)t * hs + c] = (double)qkv[(size_t)t * 3 * C + 2 * C + h * hs + c];
            }
        if (need_phi)
            for (int t = 0; t < T; t++) iclaa_log_phi(&lq[(size_t)t * m], &q[(size_t)t * hs], om, hs, m);
        if (kernel_sim)
            for (int t = 0; t < T; t++) iclaa_log_phi(&lk[(size_t)t * m], &k[(size_t)t * hs], om, hs, m);
        const double scale = 1.0 / std::sqrt((double)hs);
        const double kap = use_bias ? kappa[h] : ninf;
        const double* hkv = use_bias ? bkv + (size_t)h * m * hs : nullptr;
        const double* hd = use_bias ? bd + (size_t)h * m : nullptr;
        for (int i = 0; i < T; i++) {
            const double* qi = &q[(size_t)i * hs];
            double mu = ninf;
            for (int j = 0; j <= i; j++) {
                double sij;
                if (!kernel_sim) {
                    sij = 0;
                    for (int c = 0; c < hs; c++) sij += qi[c] * k[(size_t)j * hs + c];
                    sij *= scale;
                } else {  // log Σ_r exp(lq_r + lk_r)
                    const double* a = &lq[(size_t)i * m];
                    const double* b = &lk[(size_t)j * m];
                    double mx = ninf;
                    for (int r = 0; r < m; r++) mx = std::max(mx, a[r] + b[r]);
                    double acc = 0;
                    for (int r = 0; r < m; r++) acc += std::exp(a[r] + b[r] - mx);
                    sij = mx + std::log(acc);
                }
                s[j] = sij;
                mu = std::max(mu, sij);
            }
            const double* lqi = need_phi ? &lq[(size_t)i * m] : nullptr;
            if (use_bias) {
                double mx = ninf;
                for (int r = 0; r < m; r++) mx = std::max(mx, lqi[r]);
                mu = std::max(mu, mx + kap);
            }
            std::fill(num.begin(), num.end(), 0.0);
            double den = 0;
            for (int j = 0; j <= i; j++) {
                const double w = std::exp(s[j] - mu);
                den += w;
                for (int c = 0; c < hs; c++) num[c] += w * v[(size_t)j * hs + c];
            }
            if (use_bias)
                for (int r = 0; r < m; r++) {
                    const double w = std::exp(lqi[r] + kap - mu);
                    den += w * hd[r];
                    for (int c = 0; c < hs; c++) num[c] += w * hkv[(size_t)r * hs + c];
                }
            for (int c = 0; c < hs; c++) out[(size_t)i * C + h * hs + c] = (real)(num[c] / den);
        }
    }
}

}  // namespace icl
