// dual_model.cpp — the dual model of softmax attention: feature maps, one query's dual problem and its gradient
// step, and the two studies R2 (random features vs their count) and R6 (Theorem 3.2's trend). The checks are in
// dual_checks.cpp, the regression task and M1 in dual_regression.cpp. See dual_model.h and spec/duallens.md.
#include "models/duallens/dual_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "report/analysis.h"
#include "engine/common.h"
#include "engine/rng.h"
#include "layers/attention.h"
#include "layers/attention_mods.h"
#include "layers/dispatch.h"
#include "layers/matmul.h"
#include "layers/rope.h"
#include "models/block.h"

#include "models/duallens/dual_util.h"

namespace icl {

// =================================================================================================================
// feature maps

int64_t binomial(int n, int k) {
    if (k < 0 || k > n) return 0;
    int64_t r = 1;
    for (int i = 1; i <= k; i++) r = r * (n - k + i) / i;
    return r;
}

TaylorFeatures::TaylorFeatures(int dk_, int P_) : dk(dk_), P(P_) {
    if (dk < 1 || P < 0) fail(strfmt("Taylor features: bad dk=%d P=%d", dk, P));
    if (binomial(dk + P, P) > 2000000) fail(strfmt("Taylor features: C(%d+%d,%d) is too many features", dk, P, P));
    // every α with |α| = n, for n = 0..P (compositions of n into dk parts, lexicographic)
    std::vector<int> a(dk, 0);
    for (int n = 0; n <= P; n++) {
        std::function<void(int, int)> gen = [&](int pos, int left) {
            if (pos == dk - 1) {
                a[pos] = left;
                double fact = 1;
                for (int j = 0; j < dk; j++)
                    for (int m = 2; m <= a[j]; m++) fact *= m;
                alpha.insert(alpha.end(), a.begin(), a.end());
                coef.push_back(1.0 / std::sqrt(fact));
                return;
            }
            for (int v = left; v >= 0; v--) {
                a[pos] = v;
                gen(pos + 1, left - v);
            }
        };
        gen(0, n);
    }
}

void TaylorFeatures::phi(double* out, const double* x) const {
    // pw[j][p] = x_j^p
    std::vector<double> pw((size_t)dk * (P + 1));
    for (int j = 0; j < dk; j++) {
        pw[(size_t)j * (P + 1)] = 1;
        for (int p = 1; p <= P; p++) pw[(size_t)j * (P + 1) + p] = pw[(size_t)j * (P + 1) + p - 1] * x[j];
    }
    const int n = dim();
    for (int r = 0; r < n; r++) {
        const int* a = &alpha[(size_t)r * dk];
        double v = coef[r];
        for (int j = 0; j < dk; j++) v *= pw[(size_t)j * (P + 1) + a[j]];
        out[r] = v;
    }
}

RandomFeatures::RandomFeatures(int dk_, int dr, uint64_t seed, bool orthogonal)
    : dk(dk_), f(1, 1, dk_, dr, FeatureKind::favor, orthogonal, seed) {}

void RandomFeatures::phi(double* out, const double* x) const {
    // PerformerFeatures scales its input by dk^{-1/4}; ours is already scaled
    std::vector<double> xr(dk);
    const double up = std::pow((double)dk, 0.25);
    for (int j = 0; j < dk; j++) xr[j] = x[j] * up;
    f.log_phi(out, xr.data(), 0, 0);
    for (int r = 0; r < f.m; r++) out[r] = std::exp(out[r]);
}

// =================================================================================================================
// one dual problem

using dual::vec;
using namespace dual;

DualData dual_from_qkv(const double* qkv, int T, int C, int NH, int h, int t) {
    const int hs = C / NH;
    const double s = std::pow((double)hs, -0.25);
    DualData d;
    d.n = t + 1;
    d.dk = d.dv = hs;
    d.K.resize((size_t)d.n * hs);
    d.V.resize((size_t)d.n * hs);
    d.q.resize(hs);
    for (int i = 0; i <= t; i++)
        for (int e = 0; e < hs; e++) {
            d.K[(size_t)i * hs + e] = s * qkv[(size_t)i * 3 * C + C + h * hs + e];
            d.V[(size_t)i * hs + e] = qkv[(size_t)i * 3 * C + 2 * C + h * hs + e];
        }
    for (int e = 0; e < hs; e++) d.q[e] = s * qkv[(size_t)t * 3 * C + h * hs + e];
    (void)T;
    return d;
}

double dual_log_D(const DualData& d) {
    double mx = -INFINITY;
    vec z(d.n);
    for (int i = 0; i < d.n; i++) mx = std::max(mx, z[i] = dotp(&d.K[(size_t)i * d.dk], d.q.data(), d.dk));
    double s = 0;
    for (int i = 0; i < d.n; i++) s += std::exp(z[i] - mx);
    return mx + std::log(s);
}

std::vector<double> dual_kernel_output(const DualData& d) {
    const double logD = dual_log_D(d);
    vec y(d.dv, 0.0);
    for (int i = 0; i < d.n; i++) {
        const double a = std::exp(dotp(&d.K[(size_t)i * d.dk], d.q.data(), d.dk) - logD);
        for (int e = 0; e < d.dv; e++) y[e] += a * d.V[(size_t)i * d.dv + e];
    }
    return y;
}

std::vector<double> feature_rows(const FeatureMap& f, const std::vector<double>& X, int n) {
    const int dr = f.dim(), dk = (int)(X.size() / std::max(n, 1));
    vec Phi((size_t)n * dr);
    for (int i = 0; i < n; i++) f.phi(&Phi[(size_t)i * dr], &X[(size_t)i * dk]);
    return Phi;
}

std::vector<double> dual_gradient(const DualData& d, const std::vector<double>& PhiK, int dr, double eta, double logD) {
    // ∂L/∂W = −1/(η D) Σ_i v_i φ(k_i)ᵀ ;  1/D carried as e^{−log D}
    const double f = -std::exp(-logD) / eta;
    vec G((size_t)d.dv * dr, 0.0);
    for (int i = 0; i < d.n; i++)
        for (int e = 0; e < d.dv; e++) {
            const double ve = f * d.V[(size_t)i * d.dv + e];
            double* g = &G[(size_t)e * dr];
            const double* ph = &PhiK[(size_t)i * dr];
            for (int r = 0; r < dr; r++) g[r] += ve * ph[r];
        }
    return G;
}

double dual_loss(const DualData& d, const std::vector<double>& PhiK, int dr, const std::vector<double>& W, double eta, double logD) {
    double s = 0;
    for (int i = 0; i < d.n; i++)
        for (int e = 0; e < d.dv; e++) s += d.V[(size_t)i * d.dv + e] * dotp(&W[(size_t)e * dr], &PhiK[(size_t)i * dr], dr);
    return -std::exp(-logD) / eta * s;
}

std::vector<double> dual_predict(const std::vector<double>& W, const std::vector<double>& phi, int dv, int dr) {
    vec y(dv);
    for (int e = 0; e < dv; e++) y[e] = dotp(&W[(size_t)e * dr], phi.data(), dr);
    return y;
}

std::vector<double> dual_one_step(const DualData& d, const FeatureMap& f, double eta, const std::vector<double>& W0, std::vector<double>* W1) {
    const int dr = f.dim();
    const vec PhiK = feature_rows(f, d.K, d.n);
    vec phq(dr);
    f.phi(phq.data(), d.q.data());
    const vec G = dual_gradient(d, PhiK, dr, eta, dual_log_D(d));
    vec W = W0.empty() ? vec((size_t)d.dv * dr, 0.0) : W0;
    for (size_t i = 0; i < W.size(); i++) W[i] -= eta * G[i];  // W_1 = W_0 − η ∂L/∂W
    vec y = dual_predict(W, phq, d.dv, dr);
    if (W1) *W1 = std::move(W);
    return y;
}

double loglog_slope(const std::vector<double>& x, const std::vector<double>& y) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int n = 0;
    for (size_t i = 0; i < x.size(); i++) {
        if (!(x[i] > 0) || !(y[i] > 0)) continue;
        const double lx = std::log(x[i]), ly = std::log(y[i]);
        sx += lx; sy += ly; sxx += lx * lx; sxy += lx * ly;
        n++;
    }
    if (n < 2) return NAN;
    return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

// =================================================================================================================
// R2: positive random features vs their count

std::vector<PrfRow> prf_convergence(const std::vector<int>& drs, int seeds, uint64_t seed) {
    Rng r(seed);
    Setup s = make_setup(r, 16, 8, 4, 1);
    const int T = s.T;
    // the exact pieces: scaled keys/queries of every token, A_u (causal part), outputs
    std::vector<DualData> dd;
    for (int t = 0; t < T; t++) dd.push_back(dual_from_qkv(s.qkv.data(), T, 4, 1, 0, t));
    const DualData& last = dd.back();
    vec Au, Q((size_t)T * 4);
    for (int t = 0; t < T; t++) {
        for (int e = 0; e < 4; e++) Q[(size_t)t * 4 + e] = dd[t].q[e];
        for (int i = 0; i <= t; i++) Au.push_back(std::exp(dotp(&last.K[(size_t)i * 4], dd[t].q.data(), 4)));
    }
    const vec h = head_row(s.out, 4, 1, 0, T - 1);
    std::vector<PrfRow> rows;
    for (int dr : drs) {
        PrfRow pr;
        pr.dr = dr;
        vec eo;
        for (int sd = 0; sd < seeds; sd++) {
            RandomFeatures f(4, dr, seed * 1000003ull + (uint64_t)dr * 7919 + sd);
            const vec PK = feature_rows(f, last.K, T), PQ = feature_rows(f, Q, T);
            vec Ah;
            double e_out = 0;
            for (int t = 0; t < T; t++) {
                vec num(4, 0.0);
                double den = 0;
                for (int i = 0; i <= t; i++) {
                    const double a = dotp(&PK[(size_t)i * dr], &PQ[(size_t)t * dr], dr);
                    Ah.push_back(a);
                    den += a;
                    for (int e = 0; e < 4; e++) num[e] += a * last.V[(size_t)i * 4 + e];
                }
                for (auto& v : num) v /= den;  // Performer: the RF estimate D̂
                e_out += relerr(num, head_row(s.out, 4, 1, 0, t)) / T;
            }
            pr.err_Au += relerr(Ah, Au) / seeds;
            pr.err_out += e_out / seeds;
            eo.push_back(e_out);
            // the dual's ŷ with the exact D (the paper's constant)
            pr.err_y += relerr(dual_one_step(last, f, 1.0, {}), h) / seeds;
        }
        double v = 0;
        for (double x : eo) v += (x - pr.err_out) * (x - pr.err_out);
        pr.sd_out = std::sqrt(v / std::max(1, seeds - 1));
        rows.push_back(pr);
    }
    return rows;
}

// =================================================================================================================
// R6: Theorem 3.2

std::vector<Theorem32Row> theorem32_trend(const std::vector<int>& Ns, int reps, int M, uint64_t seed, double* gpop_exact, double* gpop_mc) {
    // fixed random W_K, W_V (d_i = 8 → d_k = d_o = 4) at a small scale; tokens x ~ N(0, I); keys k = A x with
    // A = d_k^{-1/4} W_K, values v = W_V x
    Rng r(seed);
    const int di = 8, dk = 4;
    const vec WK = randn((size_t)dk * di, r, 0.5 / std::sqrt((double)di)), WV = randn((size_t)dk * di, r, 1.0 / std::sqrt((double)di));
    const double sc = std::pow((double)dk, -0.25);
    vec A(WK);
    for (auto& a : A) a *= sc;
    // spec §6: keep the keys small. The kernel sums have finite variance only if E e^{2|k|²} < ∞, i.e. the largest
    // eigenvalue of AᵀA below 1/4; a random W_K can violate it (heavy tails, a trend lost in noise), so A is rescaled
    // to λ_max(AᵀA) = 0.15 (power iteration).
    {
        vec u(di, 1.0), w(di);
        double lam = 0;
        for (int it = 0; it < 200; it++) {
            vec k(dk, 0.0);
            for (int e = 0; e < dk; e++) k[e] = dotp(&A[(size_t)e * di], u.data(), di);
            for (int a2 = 0; a2 < di; a2++) {
                w[a2] = 0;
                for (int e = 0; e < dk; e++) w[a2] += A[(size_t)e * di + a2] * k[e];
            }
            lam = std::sqrt(dotp(w.data(), w.data(), di));
            for (int a2 = 0; a2 < di; a2++) u[a2] = w[a2] / lam;
        }
        for (auto& x : A) x *= std::sqrt(0.15 / lam);
    }
    auto tokens = [&](int n, Rng& g, vec& X, vec& K, vec& V) {
        X = randn((size_t)n * di, g);
        K.assign((size_t)n * dk, 0.0);
        V.assign((size_t)n * dk, 0.0);
        for (int i = 0; i < n; i++)
            for (int e = 0; e < dk; e++) {
                K[(size_t)i * dk + e] = dotp(&A[(size_t)e * di], &X[(size_t)i * di], di);
                V[(size_t)i * dk + e] = dotp(&WV[(size_t)e * di], &X[(size_t)i * di], di);
            }
    };
    // G_pop = E_x[v φ(k)ᵀ] in closed form (Gaussian tokens), through the kernel:
    //   ⟨v_i φ(k_i)ᵀ, G_pop⟩ = E_x[(v_iᵀW_V x) e^{(Aᵀk_i)ᵀx}] = (v_iᵀ W_V Aᵀ k_i) e^{|Aᵀk_i|²/2}
    //   |G_pop|² = E_{x,x'}[(xᵀW_VᵀW_V x') e^{xᵀAᵀA x'}] = det(I − Q)^{-1/2} tr(M (I − Q)^{-1}),
    //   Q = (AᵀA)², M = sym(W_VᵀW_V AᵀA)   (E_{x'} first, then a Gaussian integral; needs Q < I: small keys)
    auto cross_pop = [&](const vec& K, const vec& V, int n) {
        double sum = 0;
        vec b(di), c(di);
        for (int i = 0; i < n; i++) {
            for (int a = 0; a < di; a++) {
                b[a] = 0; c[a] = 0;
                for (int e = 0; e < dk; e++) { b[a] += A[(size_t)e * di + a] * K[(size_t)i * dk + e]; c[a] += WV[(size_t)e * di + a] * V[(size_t)i * dk + e]; }
            }
            sum += dotp(c.data(), b.data(), di) * std::exp(0.5 * dotp(b.data(), b.data(), di));
        }
        return sum / n;
    };
    vec AtA((size_t)di * di, 0.0), VtV((size_t)di * di, 0.0);
    for (int a = 0; a < di; a++)
        for (int b = 0; b < di; b++)
            for (int e = 0; e < dk; e++) {
                AtA[(size_t)a * di + b] += A[(size_t)e * di + a] * A[(size_t)e * di + b];
                VtV[(size_t)a * di + b] += WV[(size_t)e * di + a] * WV[(size_t)e * di + b];
            }
    vec IQ((size_t)di * di, 0.0), Ms((size_t)di * di, 0.0);
    for (int a = 0; a < di; a++)
        for (int b = 0; b < di; b++) {
            double q = 0, m1 = 0, m2 = 0;
            for (int c = 0; c < di; c++) {
                q += AtA[(size_t)a * di + c] * AtA[(size_t)c * di + b];
                m1 += VtV[(size_t)a * di + c] * AtA[(size_t)c * di + b];
                m2 += VtV[(size_t)b * di + c] * AtA[(size_t)c * di + a];
            }
            IQ[(size_t)a * di + b] = (a == b) - q;
            Ms[(size_t)a * di + b] = 0.5 * (m1 + m2);
        }
    // (I − Q)^{-1} M and log det(I − Q) from one Cholesky factorization (L left in the lower triangle of IQ)
    vec IQinvM = Ms;
    cholesky_solve(IQ, IQinvM, di, di);
    double logdet = 0, tr = 0;
    for (int j = 0; j < di; j++) {
        logdet += 2 * std::log(IQ[(size_t)j * di + j]);
        tr += IQinvM[(size_t)j * di + j];
    }
    const double gpop = std::sqrt(std::exp(-0.5 * logdet) * tr);
    if (gpop_exact) *gpop_exact = gpop;
    // the Monte Carlo estimate of the spec (M tokens; U-statistic, i != j), as a check of the closed form
    if (gpop_mc && M > 1) {
        Rng gp = r.split(1);
        vec X, K, V;
        tokens(M, gp, X, K, V);
        double s2 = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < M; j++)
                if (i != j) s2 += dotp(&V[(size_t)i * dk], &V[(size_t)j * dk], dk) * std::exp(dotp(&K[(size_t)i * dk], &K[(size_t)j * dk], dk));
        *gpop_mc = std::sqrt(s2 / ((double)M * (M - 1)));
    }
    // per N: draw S, then the ERM dual Ŵ = w G_S/|G_S| has excess loss w|G_pop|(1 − cos θ_S) over the best W
    std::vector<Theorem32Row> rows;
    Rng gs = r.split(2);
    for (int N : Ns) {
        Theorem32Row row;
        row.N = N;
        const int R = std::max(reps, reps * 256 / std::max(N, 1));  // more draws where they are cheap
        vec ex;
        for (int rep = 0; rep < R; rep++) {
            vec X, K, V;
            tokens(N, gs, X, K, V);
            double g2 = 0, trK = 0;
            for (int i = 0; i < N; i++) {
                for (int j = 0; j < N; j++)
                    g2 += dotp(&V[(size_t)i * dk], &V[(size_t)j * dk], dk) * std::exp(dotp(&K[(size_t)i * dk], &K[(size_t)j * dk], dk));
                trK += std::exp(dotp(&K[(size_t)i * dk], &K[(size_t)i * dk], dk));
            }
            const double gsn = std::sqrt(g2) / N;
            ex.push_back(gpop * (1 - cross_pop(K, V, N) / (gsn * gpop)));
            row.trK_over_N += trK / N / R;
            row.bound_term += std::sqrt(trK) / N / R;
        }
        for (double x : ex) row.excess += x / R;
        double v = 0;
        for (double x : ex) v += (x - row.excess) * (x - row.excess);
        row.excess_sd = std::sqrt(v / std::max(1, R - 1));
        rows.push_back(row);
    }
    return rows;
}

}  // namespace icl
