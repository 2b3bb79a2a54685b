// duallens.cpp — the dual model, its checks, the PRF / Theorem 3.2 studies, the regression task and M1.
// See duallens.h and spec/duallens.md.
#include "models/duallens/dual_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "engine/analysis.h"
#include "engine/common.h"
#include "engine/rng.h"
#include "layers/attention.h"
#include "layers/attention_mods.h"
#include "layers/dispatch.h"
#include "layers/matmul.h"
#include "layers/rope.h"
#include "models/block.h"

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

namespace {

using vec = std::vector<double>;

double dotp(const double* a, const double* b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
double norm2(const vec& a) { return std::sqrt(dotp(a.data(), a.data(), (int)a.size())); }
double relerr(const vec& a, const vec& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}
vec randn(size_t n, Rng& r, double std = 1.0) {
    vec x(n);
    fill_normal(x.data(), n, r, 0.0, std);
    return x;
}
vec row(const vec& M, int i, int cols) { return vec(M.begin() + (size_t)i * cols, M.begin() + (size_t)(i + 1) * cols); }
size_t count_bit_differences(const vec& a, const vec& b) {
    size_t n = 0;
    for (size_t i = 0; i < a.size(); i++) n += std::memcmp(&a[i], &b[i], sizeof(double)) != 0;
    return n + (a.size() != b.size());
}

}  // namespace

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
// the checks

namespace {

// One random attention instance: tokens X (T,di) ~ N(0, I), W_qkv (3C,di) ~ N(0, (wstd/√di)²) (spec R1: 0.5/√d_i,
// so that |kᵀq| stays ≲ 2), the engine's qkv and causal attention output.
struct Setup {
    int T = 0, di = 0, C = 0, NH = 0;
    vec X, W, qkv, out, att;
};
Setup make_setup(Rng& r, int T, int di, int C, int NH, double wstd = 0.5) {
    Setup s;
    s.T = T; s.di = di; s.C = C; s.NH = NH;
    s.X = randn((size_t)T * di, r);
    s.W = randn((size_t)3 * C * di, r, wstd / std::sqrt((double)di));
    s.qkv.resize((size_t)T * 3 * C);
    matmul_forward<double>(s.qkv.data(), s.X.data(), s.W.data(), nullptr, T, di, 3 * C);
    s.out.resize((size_t)T * C);
    s.att.resize((size_t)NH * T * T);
    attention_forward<double>(s.out.data(), s.att.data(), nullptr, s.qkv.data(), 1, T, C, NH);
    return s;
}
// Engine attention on a given qkv (T,3C) → out (T,C).
vec engine_attention(const vec& qkv, int T, int C, int NH) {
    vec out((size_t)T * C), att((size_t)NH * T * T);
    attention_forward<double>(out.data(), att.data(), nullptr, qkv.data(), 1, T, C, NH);
    return out;
}
// Head h's slice of row t of a (T,C) output.
vec head_row(const vec& out, int C, int NH, int h, int t) {
    const int hs = C / NH;
    return vec(out.begin() + (size_t)t * C + h * hs, out.begin() + (size_t)t * C + (h + 1) * hs);
}

// The largest |k_iᵀq_t| and |k_iᵀk_j| (scaled, every head, every causal pair) of an engine qkv (T,3C).
double qkv_zmax(const vec& qkv, int T, int C, int NH) {
    const int hs = C / NH;
    const double s2 = 1.0 / std::sqrt((double)hs);
    double z = 0;
    for (int h = 0; h < NH; h++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < T; i++) {
                const double* k = &qkv[(size_t)i * 3 * C + C + h * hs];
                if (i <= t) z = std::max(z, std::fabs(s2 * dotp(k, &qkv[(size_t)t * 3 * C + h * hs], hs)));
                z = std::max(z, std::fabs(s2 * dotp(k, &qkv[(size_t)t * 3 * C + C + h * hs], hs)));
            }
    return z;
}
// Spec §2.5b: |e^z − Σ_{n<=P} z^n/n!| <= e^{|z|}|z|^{P+1}/(P+1)!. The smallest P that makes this at most 1e-10·e^{−|z|}
// (a relative error of 1e-10 for every kernel entry up to |z| = zmax), at most 24.
int taylor_order(double zmax) {
    for (int P = 1; P < 24; P++) {
        double t = std::exp(2 * zmax);
        for (int n = 1; n <= P + 1; n++) t *= zmax / n;
        if (t <= 1e-10) return P;
    }
    return 24;
}

CheckResult make(const std::string& id, const std::string& what, double err, double tol) {
    CheckResult c;
    c.id = id; c.what = what; c.err = err; c.tol = tol;
    c.pass = std::isfinite(err) && err <= tol;
    return c;
}
CheckResult make_range(const std::string& id, const std::string& what, double v, double lo, double hi) {
    CheckResult c;
    c.id = id; c.what = what; c.err = v; c.tol = lo; c.tol2 = hi; c.cmp = "in";
    c.pass = std::isfinite(v) && v >= lo && v <= hi;
    return c;
}

// The negative model's neighbour sets at the LAST query (every token visible), written independently of the layer:
// sort the candidates j != i by (score, j) and keep min(k, n−1); rule all keeps every one.
std::vector<std::vector<int>> last_query_neighbours(const Setup& s, NegRule rule, int k, uint64_t seed) {
    const int T = s.T, C = s.C;
    std::vector<std::vector<int>> N(T);
    for (int i = 0; i < T; i++) {
        std::vector<int> cand;
        for (int j = 0; j < T; j++) if (j != i) cand.push_back(j);
        if (rule != NegRule::all) {
            auto score = [&](int j) {
                if (rule == NegRule::random) return attnmod_detail::random_priority(seed, 0, 0, i, j);
                return dotp(&s.qkv[(size_t)i * 3 * C + C], &s.qkv[(size_t)j * 3 * C + C], C);  // key similarity
            };
            std::stable_sort(cand.begin(), cand.end(), [&](int a, int b) { return score(a) < score(b); });
            cand.resize(std::min<size_t>(cand.size(), (size_t)k));
        }
        N[i] = cand;
    }
    return N;
}

// Regression prompts' pieces (fp64) from a Batch of regression_prompts.
struct Prompt {
    int N = 0, d = 0;
    vec X, y, xq;  // X (N,d), y (N), xq (d)
    double yq = 0;
};
Prompt prompt_of(const Batch& bt, int b, int d) {
    Prompt p;
    p.N = bt.T - 1;
    p.d = d;
    const int D = bt.D;
    for (int i = 0; i < p.N; i++) {
        const float* tok = &bt.vectors[((size_t)b * bt.T + i) * D];
        for (int e = 0; e < d; e++) p.X.push_back(tok[e]);
        p.y.push_back(tok[d]);
    }
    const float* q = &bt.vectors[((size_t)b * bt.T + p.N) * D];
    for (int e = 0; e < d; e++) p.xq.push_back(q[e]);
    p.yq = bt.target_vecs[(size_t)b * bt.T + p.N];
    return p;
}

}  // namespace

R1Tensors r1_tensors(uint64_t seed) {
    // spec R1: d_i = 8, d_k = d_o = 4, N = 16 (15 context tokens + the query), Taylor (4, 12): d_r = 1820
    Rng r(seed);
    Setup s = make_setup(r, 16, 8, 4, 1);
    const int t = s.T - 1;
    DualData d = dual_from_qkv(s.qkv.data(), s.T, s.C, s.NH, 0, t);
    TaylorFeatures f(4, 12);
    R1Tensors o;
    o.N = d.n; o.dv = d.dv; o.dr = f.dim();
    o.A = vec(s.att.begin() + (size_t)t * s.T, s.att.begin() + (size_t)(t + 1) * s.T);
    o.D = std::exp(dual_log_D(d));
    o.y = dual_one_step(d, f, 1.0, {}, &o.W1);
    o.h = head_row(s.out, s.C, 1, 0, t);
    o.relerr_taylor = relerr(o.y, o.h);
    o.relerr_kernel = relerr(dual_kernel_output(d), o.h);
    return o;
}

void kstep_curve(uint64_t seed, int K, std::vector<double>& measured, std::vector<double>& theory, const FeatureMap* fmap) {
    Rng r(seed);
    Setup s = make_setup(r, 16, 8, 4, 1);
    DualData d = dual_from_qkv(s.qkv.data(), s.T, s.C, s.NH, 0, s.T - 1);
    const TaylorFeatures taylor(4, taylor_order(qkv_zmax(s.qkv, s.T, 4, 1)));
    const FeatureMap& f = fmap ? *fmap : taylor;
    const int dr = f.dim();
    const vec h = head_row(s.out, s.C, 1, 0, s.T - 1), PhiK = feature_rows(f, d.K, d.n);
    vec phq(dr);
    f.phi(phq.data(), d.q.data());
    const double eta = 1.0, hh = dotp(h.data(), h.data(), d.dv);
    const vec G = dual_gradient(d, PhiK, dr, eta, dual_log_D(d));
    vec W((size_t)d.dv * dr, 0.0);
    measured.clear();
    theory.clear();
    for (int t = 0; t <= K; t++) {
        const vec y = dual_predict(W, phq, d.dv, dr);
        double e = 0;
        for (int i = 0; i < d.dv; i++) e += (y[i] - h[i]) * (y[i] - h[i]);
        measured.push_back(e);
        theory.push_back((1.0 - (double)t / K) * (1.0 - (double)t / K) * hh);
        for (size_t i = 0; i < W.size(); i++) W[i] -= eta / K * G[i];  // one step at learning rate η/K
    }
}

std::vector<CheckResult> duallens_exact_checks(uint64_t seed) {
    std::vector<CheckResult> res;
    auto rng_for = [&](int salt) { return Rng(seed * 1000003ull + (uint64_t)salt); };

    // ---- I1: softmax attention = the kernel form, naive and log-sum-exp (every query) --------------------------
    {
        Rng r = rng_for(1);
        Setup s = make_setup(r, 16, 8, 4, 1);
        double e_naive = 0, e_lse = 0;
        for (int t = 0; t < s.T; t++) {
            DualData d = dual_from_qkv(s.qkv.data(), s.T, s.C, 1, 0, t);
            vec num(d.dv, 0.0);
            double D = 0;
            for (int i = 0; i < d.n; i++) {
                const double a = std::exp(dotp(&d.K[(size_t)i * 4], d.q.data(), 4));  // no max shift
                D += a;
                for (int e = 0; e < d.dv; e++) num[e] += a * d.V[(size_t)i * 4 + e];
            }
            for (auto& v : num) v /= D;
            const vec h = head_row(s.out, s.C, 1, 0, t);
            e_naive = std::max(e_naive, relerr(num, h));
            e_lse = std::max(e_lse, relerr(dual_kernel_output(d), num));
        }
        res.push_back(make("I1", "engine softmax attention = sum_i e^{z_i} v_i / D (naive exp), every query", e_naive, 1e-12));
        res.push_back(make("I1", "log-sum-exp kernel form = naive kernel form, every query", e_lse, 1e-12));
    }
    // ---- R1 / I3: Theorem 3.1, one step from W0 = 0 -----------------------------------------------------------
    {
        R1Tensors o = r1_tensors(seed);
        res.push_back(make("R1", "Thm 3.1 kernel trick: y_test = h' (d_i=8, d_k=d_o=4, N=16)", o.relerr_kernel, 1e-12));
        res.push_back(make("I3", "Thm 3.1 one GD step on W (Taylor features d_k=4 P=12, d_r=1820): y_test = h'", o.relerr_taylor, 1e-8));
        Rng r = rng_for(3);
        Setup s = make_setup(r, 16, 8, 4, 1);
        const TaylorFeatures tp(4, taylor_order(qkv_zmax(s.qkv, s.T, 4, 1)));  // P by the truncation bound (§2.5b)
        double e = 0;
        for (int t = 0; t < s.T; t++)
            e = std::max(e, relerr(dual_one_step(dual_from_qkv(s.qkv.data(), s.T, s.C, 1, 0, t), tp, 1.0, {}), head_row(s.out, 4, 1, 0, t)));
        res.push_back(make("I3", strfmt("one GD step (Taylor P=%d), every query t with its causal training set 0..t", tp.P), e, 1e-8));
    }
    // ---- I2: the dual gradient, by central differences at two random W (L is linear in W) ------------------------
    {
        Rng r = rng_for(2);
        Setup s = make_setup(r, 11, 7, 3, 1);
        DualData d = dual_from_qkv(s.qkv.data(), s.T, s.C, 1, 0, s.T - 1);
        const TaylorFeatures f(3, 6);
        const int dr = f.dim();
        const vec PhiK = feature_rows(f, d.K, d.n);
        const double eta = 0.37, logD = dual_log_D(d);
        const vec G = dual_gradient(d, PhiK, dr, eta, logD);
        double gmax = 0, e = 0;
        for (double g : G) gmax = std::max(gmax, std::fabs(g));
        for (int rep = 0; rep < 2; rep++) {
            vec W = randn(G.size(), r, 1.0 + 2 * rep);
            for (size_t i = 0; i < W.size(); i++) {
                const double w0 = W[i], hstep = 1e-3;
                W[i] = w0 + hstep;
                const double lp = dual_loss(d, PhiK, dr, W, eta, logD);
                W[i] = w0 - hstep;
                const double lm = dual_loss(d, PhiK, dr, W, eta, logD);
                W[i] = w0;
                e = std::max(e, std::fabs((lp - lm) / (2 * hstep) - G[i]) / gmax);
            }
        }
        res.push_back(make("I2", "dL/dW = -1/(eta D) V^T Phi_K: central differences at two random W (max |diff| / max |G|)", e, 1e-9));
    }
    // ---- I4, I5: eta-invariance and W0-additivity ---------------------------------------------------------------
    {
        Rng r = rng_for(4);
        Setup s = make_setup(r, 16, 8, 4, 1);
        const TaylorFeatures tp(4, taylor_order(qkv_zmax(s.qkv, s.T, 4, 1)));  // P by the truncation bound (§2.5b)
        DualData d = dual_from_qkv(s.qkv.data(), s.T, s.C, 1, 0, s.T - 1);
        const vec y1 = dual_one_step(d, tp, 1.0, {});
        double e = 0;
        for (double eta : {1e-3, 1e3}) e = std::max(e, relerr(dual_one_step(d, tp, eta, {}), y1));
        res.push_back(make("I4", "eta-invariance: y_test identical for eta = 1e-3, 1, 1e3", e, 1e-12));
        const vec W0 = randn((size_t)d.dv * tp.dim(), r, 0.1);
        vec phq(tp.dim());
        tp.phi(phq.data(), d.q.data());
        const vec yW = dual_one_step(d, tp, 1.0, W0), w0phi = dual_predict(W0, phq, d.dv, tp.dim());
        vec diff(d.dv);
        for (int i = 0; i < d.dv; i++) diff[i] = yW[i] - y1[i];
        res.push_back(make("I5", "W0-additivity: y(W0) - y(0) = W0 phi(q)", relerr(diff, w0phi), 1e-12));
    }
    // ---- I6 / R3: the K-step schedule ----------------------------------------------------------------------------
    {
        vec m, th;
        kstep_curve(seed * 7 + 6, 15, m, th);
        double e = 0;
        for (size_t t = 0; t < m.size(); t++) e = std::max(e, std::fabs(m[t] - th[t]) / th[0]);
        res.push_back(make("I6", "K=15 steps at eta/15: |y_t - h'|^2 = (1-t/15)^2 |h'|^2 (max error / |h'|^2)", e, 1e-8));
    }
    // ---- I7: the loss drop ----------------------------------------------------------------------------------------
    {
        Rng r = rng_for(7);
        Setup s = make_setup(r, 16, 8, 4, 1);
        DualData d = dual_from_qkv(s.qkv.data(), s.T, s.C, 1, 0, s.T - 1);
        const TaylorFeatures tk(4, taylor_order(qkv_zmax(s.qkv, s.T, 4, 1)));  // the loss drop has e^{k_iᵀk_j}: P by the bound
        const int dr = tk.dim();
        const double eta = 0.7, logD = dual_log_D(d);
        const vec PhiK = feature_rows(tk, d.K, d.n);
        vec W1;
        dual_one_step(d, tk, eta, {}, &W1);
        const double drop = dual_loss(d, PhiK, dr, W1, eta, logD) - dual_loss(d, PhiK, dr, vec(W1.size(), 0.0), eta, logD);
        double kern = 0;  // Σ_ij v_iᵀv_j e^{k_iᵀk_j}
        for (int i = 0; i < d.n; i++)
            for (int j = 0; j < d.n; j++)
                kern += dotp(&d.V[(size_t)i * 4], &d.V[(size_t)j * 4], 4) * std::exp(dotp(&d.K[(size_t)i * 4], &d.K[(size_t)j * 4], 4));
        const double theory = -kern * std::exp(-2 * logD) / eta;
        res.push_back(make("I7", strfmt("loss drop L(W1) - L(0) = -1/(eta D^2) sum_ij v_i.v_j e^{k_i.k_j} (explicit, Taylor P=%d, vs kernel trick)", tk.P),
                           std::fabs(drop - theory) / std::fabs(theory), 1e-8));
    }
    // ---- I8: the linear-attention link, every query ------------------------------------------------------------
    {
        Rng r = rng_for(8);
        Setup s = make_setup(r, 16, 8, 4, 1);
        const TaylorFeatures tp(4, taylor_order(qkv_zmax(s.qkv, s.T, 4, 1)));  // P by the truncation bound (§2.5b)
        const int dr = tp.dim();
        vec S((size_t)4 * dr, 0.0), z(dr, 0.0), ph(dr), phq(dr);
        double e_out = 0, e_D = 0;
        for (int t = 0; t < s.T; t++) {
            DualData d = dual_from_qkv(s.qkv.data(), s.T, s.C, 1, 0, t);
            tp.phi(ph.data(), &d.K[(size_t)t * 4]);  // running sums: add token t
            for (int e = 0; e < 4; e++)
                for (int k = 0; k < dr; k++) S[(size_t)e * dr + k] += d.V[(size_t)t * 4 + e] * ph[k];
            for (int k = 0; k < dr; k++) z[k] += ph[k];
            tp.phi(phq.data(), d.q.data());
            const double den = dotp(z.data(), phq.data(), dr);
            vec y = dual_predict(S, phq, 4, dr);
            for (auto& v : y) v /= den;
            e_out = std::max(e_out, relerr(y, head_row(s.out, 4, 1, 0, t)));
            e_D = std::max(e_D, std::fabs(den - std::exp(dual_log_D(d))) / std::exp(dual_log_D(d)));
        }
        res.push_back(make("I8", "linear-attention state: S_t phi(q_t) / z_t.phi(q_t) = h'_t, every query", e_out, 1e-8));
        res.push_back(make("I8", "z_t.phi(q_t) = D_t, every query", e_D, 1e-8));
    }
    // ---- I10: regularized ------------------------------------------------------------------------------------------
    {
        Rng r = rng_for(10);
        Setup s = make_setup(r, 16, 8, 4, 1);
        const TaylorFeatures tp(4, taylor_order(qkv_zmax(s.qkv, s.T, 4, 1)));  // P by the truncation bound (§2.5b)
        AttnMods m;
        m.alpha = 0.3;
        vec out((size_t)s.T * 4), att((size_t)s.T * s.T);
        attention_mod_forward<double>(out.data(), att.data(), nullptr, s.qkv.data(), nullptr, m, 0, 1, s.T, 4, 1, 0);
        vec ref = s.out;
        for (int t = 0; t < s.T; t++)
            for (int e = 0; e < 4; e++) ref[(size_t)t * 4 + e] -= 0.3 * s.qkv[(size_t)t * 12 + 8 + e];
        res.push_back(make("I10", "regularized layer: h_alpha = h_0 - alpha v_q, every query (alpha=0.3)", relerr(out, ref), 1e-12));
        attention_mod_forward<double>(out.data(), att.data(), nullptr, s.qkv.data(), nullptr, AttnMods(), 0, 1, s.T, 4, 1, 0);
        res.push_back(make("I10", "alpha = 0: bit-exact to the plain layer (differing elements)", (double)count_bit_differences(out, s.out), 0));
        // A6: a literal GD step on L + alpha |W|_F^2 gives y = (1 − 2 eta alpha) W0 phi(q) + h' (alpha-independent at W0 = 0)
        DualData d = dual_from_qkv(s.qkv.data(), s.T, s.C, 1, 0, s.T - 1);
        const int dr = tp.dim();
        const double eta = 0.5, alpha = 0.3;
        const vec W0 = randn((size_t)4 * dr, r, 0.05), PhiK = feature_rows(tp, d.K, d.n);
        vec phq(dr);
        tp.phi(phq.data(), d.q.data());
        vec G = dual_gradient(d, PhiK, dr, eta, dual_log_D(d)), W1 = W0;
        for (size_t i = 0; i < W1.size(); i++) W1[i] -= eta * (G[i] + 2 * alpha * W0[i]);
        const vec y = dual_predict(W1, phq, 4, dr), w0phi = dual_predict(W0, phq, 4, dr), h = head_row(s.out, 4, 1, 0, s.T - 1);
        vec expect(4);
        for (int e = 0; e < 4; e++) expect[e] = (1 - 2 * eta * alpha) * w0phi[e] + h[e];
        res.push_back(make("I10", "A6: one GD step on L + alpha|W|^2 = (1-2 eta alpha) W0 phi(q) + h' (no -alpha v_q)", relerr(y, expect), 1e-8));
    }
    // ---- I11: negative samples ---------------------------------------------------------------------------------------
    {
        Rng r = rng_for(11);
        Setup s = make_setup(r, 16, 8, 4, 1);
        const TaylorFeatures tp(4, taylor_order(qkv_zmax(s.qkv, s.T, 4, 1)));  // P by the truncation bound (§2.5b)
        const int t = s.T - 1;
        DualData d = dual_from_qkv(s.qkv.data(), s.T, s.C, 1, 0, t);
        double e_dual = 0, e_aff = 0;
        size_t bits = 0;
        for (NegRule rule : {NegRule::lowsim, NegRule::all, NegRule::random}) {
            AttnMods m;
            m.beta = 0.6;
            m.rule = rule;
            m.k = 3;
            m.sim = NegSim::key;
            auto layer = [&](double beta) {
                AttnMods mm = m;
                mm.beta = beta;
                vec out((size_t)s.T * 4), att((size_t)s.T * s.T);
                attention_mod_forward<double>(out.data(), att.data(), nullptr, s.qkv.data(), nullptr, mm, 4242, 1, s.T, 4, 1, 0);
                return out;
            };
            // the dual: one step on L_neg = −1/(ηD) Σ_i [v_i − β/|N(i)| Σ_{j∈N(i)} v_j]ᵀ W φ(k_i) = the plain dual on views ṽ_i
            const auto N = last_query_neighbours(s, rule, m.k, 4242);
            DualData dn = d;
            for (int i = 0; i < d.n; i++)
                for (int e = 0; e < 4; e++) {
                    double sum = 0;
                    for (int j : N[i]) sum += d.V[(size_t)j * 4 + e];
                    dn.V[(size_t)i * 4 + e] = d.V[(size_t)i * 4 + e] - m.beta * sum / N[i].size();
                }
            const vec yb = layer(m.beta);
            e_dual = std::max(e_dual, relerr(dual_one_step(dn, tp, 1.0, {}), row(yb, t, 4)));
            bits += count_bit_differences(layer(0.0), s.out);
            const vec y2 = layer(2 * m.beta);
            vec lin(y2.size()), twice(y2.size());
            for (size_t i = 0; i < y2.size(); i++) { lin[i] = y2[i] - s.out[i]; twice[i] = 2 * (yb[i] - s.out[i]); }
            e_aff = std::max(e_aff, relerr(lin, twice));
        }
        res.push_back(make("I11", "negative layer (lowsim-3 key, all, random-3; beta=0.6) = one GD step on L_neg (Taylor), last query", e_dual, 1e-8));
        res.push_back(make("I11", "beta = 0: bit-exact to the plain layer, 3 rules (differing elements)", (double)bits, 0));
        res.push_back(make("I11", "h_beta affine in beta: h(2b) - h(0) = 2 (h(b) - h(0))", e_aff, 1e-12));
    }
    // ---- I12: augmented (parallel adapters g1 on values, g2 on keys) ----------------------------------------------
    {
        Rng r = rng_for(12);
        Setup s = make_setup(r, 16, 8, 4, 1);
        const int dh = 5, di = 8, T = s.T;
        const double c = 0.8;
        const vec AK = randn((size_t)dh * di, r, 0.5 / std::sqrt(8.0)), BK = randn((size_t)4 * dh, r, 0.3), AV = randn((size_t)dh * di, r, 0.3),
                  BV = randn((size_t)4 * dh, r, 0.3);
        // the layer path: adapters into qkv, then the plain attention
        vec qkv = s.qkv, z((size_t)T * dh), u((size_t)T * dh);
        qkv_adapter_forward<double>(qkv.data(), z.data(), u.data(), s.X.data(), AK.data(), BK.data(), c, 1, T, di, 4, dh);
        qkv_adapter_forward<double>(qkv.data(), z.data(), u.data(), s.X.data(), AV.data(), BV.data(), c, 2, T, di, 4, dh);
        const vec out = engine_attention(qkv, T, 4, 1);
        // the dual with views g2(W_K x) = W_K x + c B_K ReLU(A_K x), g1(W_V x) = W_V x + c B_V ReLU(A_V x), written here
        vec views = s.qkv;
        for (int i = 0; i < T; i++) {
            const double* x = &s.X[(size_t)i * di];
            for (int part = 1; part <= 2; part++) {
                const vec& A = part == 1 ? AK : AV;
                const vec& Bm = part == 1 ? BK : BV;
                vec hdn(dh);
                for (int a = 0; a < dh; a++) hdn[a] = std::max(0.0, dotp(&A[(size_t)a * di], x, di));
                for (int e = 0; e < 4; e++) views[(size_t)i * 12 + part * 4 + e] += c * dotp(&Bm[(size_t)e * dh], hdn.data(), dh);
            }
        }
        const TaylorFeatures tp(4, taylor_order(qkv_zmax(views, T, 4, 1)));
        double e = 0;
        for (int t = 0; t < T; t++) e = std::max(e, relerr(dual_one_step(dual_from_qkv(views.data(), T, 4, 1, 0, t), tp, 1.0, {}), row(out, t, 4)));
        res.push_back(make("I12", "augmented g1+g2 (c=0.8): the dual with views g1(v), g2(k) reproduces the layer, every query", e, 1e-8));
        vec q0 = s.qkv;
        const vec zeroB((size_t)4 * dh, 0.0);
        qkv_adapter_forward<double>(q0.data(), z.data(), u.data(), s.X.data(), AK.data(), zeroB.data(), c, 1, T, di, 4, dh);
        qkv_adapter_forward<double>(q0.data(), z.data(), u.data(), s.X.data(), AV.data(), zeroB.data(), c, 2, T, di, 4, dh);
        double nd = 0;
        for (size_t i = 0; i < q0.size(); i++) nd += q0[i] != s.qkv[i];
        res.push_back(make("I12", "B = 0: adapters leave qkv unchanged (differing values; c = 0 skips them)", nd, 0));
    }
    // ---- I13: stacked layers: L sequential single GD steps on L dual models ----------------------------------------
    {
        Rng r = rng_for(13);
        const int T = 16, d = 4, L = 3;
        vec H = randn((size_t)T * d, r), Hd = H;  // engine stream and dual stream
        double e = 0;
        int Pmax = 0;
        for (int l = 0; l < L; l++) {
            const vec W = randn((size_t)3 * d * d, r, 0.5 / std::sqrt((double)d));
            vec qkv((size_t)T * 3 * d), qkvd((size_t)T * 3 * d);
            matmul_forward<double>(qkv.data(), H.data(), W.data(), nullptr, T, d, 3 * d);
            matmul_forward<double>(qkvd.data(), Hd.data(), W.data(), nullptr, T, d, 3 * d);
            H = engine_attention(qkv, T, d, 1);
            // layer l's dual models train on the previous DUAL layer's test outputs; P by the truncation bound
            const TaylorFeatures tl(d, taylor_order(qkv_zmax(qkvd, T, d, 1)));
            Pmax = std::max(Pmax, tl.P);
            vec next((size_t)T * d);
            for (int t = 0; t < T; t++) {
                const vec y = dual_one_step(dual_from_qkv(qkvd.data(), T, d, 1, 0, t), tl, 1.0, {});
                std::copy(y.begin(), y.end(), next.begin() + (size_t)t * d);
            }
            Hd = next;
            e = std::max(e, relerr(Hd, H));
        }
        res.push_back(make("I13", strfmt("3 stacked attention layers = 3 sequential dual GD steps (Taylor P<=%d), every layer and token", Pmax), e, 1e-8));
    }
    // ---- I14: multi-head ----------------------------------------------------------------------------------------------
    {
        Rng r = rng_for(14);
        const int T = 16, dm = 8, C = 12, NH = 3, hs = 4;
        Setup s = make_setup(r, T, dm, C, NH);
        const TaylorFeatures tp(hs, taylor_order(qkv_zmax(s.qkv, T, C, NH)));  // P by the truncation bound (§2.5b)
        const vec WO = randn((size_t)dm * C, r, 1.0 / std::sqrt((double)C));
        vec mha((size_t)T * dm);
        matmul_forward<double>(mha.data(), s.out.data(), WO.data(), nullptr, T, C, dm);
        double e = 0;
        for (int t = 0; t < T; t++) {
            vec y(dm, 0.0);
            for (int h = 0; h < NH; h++) {
                const vec yh = dual_one_step(dual_from_qkv(s.qkv.data(), T, C, NH, h, t), tp, 1.0, {});
                for (int o = 0; o < dm; o++) y[o] += dotp(&WO[(size_t)o * C + h * hs], yh.data(), hs);  // W_O^(h) ŷ^(h)
            }
            e = std::max(e, relerr(y, row(mha, t, dm)));
        }
        res.push_back(make("I14", "multi-head (H=3): sum_h W_O^(h) y^(h) = MHA output, every query", e, 1e-8));
    }
    // ---- I15: attention + ReLU FFN, mask-folded dual --------------------------------------------------------------
    {
        Rng r = rng_for(15);
        Setup s = make_setup(r, 16, 8, 4, 1);
        const TaylorFeatures tp(4, taylor_order(qkv_zmax(s.qkv, s.T, 4, 1)));  // P by the truncation bound (§2.5b)
        const int T = 16, F = 16;
        const vec W1 = randn((size_t)F * 4, r, 0.5), b1 = randn(F, r, 0.1), W2 = randn((size_t)4 * F, r, 0.5), b2 = randn(4, r, 0.1);
        // the engine: h = W2 ReLU(W1 h' + b1) + b2
        vec pre((size_t)T * F), act((size_t)T * F), ffn((size_t)T * 4);
        matmul_forward<double>(pre.data(), s.out.data(), W1.data(), b1.data(), T, 4, F);
        for (size_t i = 0; i < pre.size(); i++) act[i] = std::max(0.0, pre[i]);
        matmul_forward<double>(ffn.data(), act.data(), W2.data(), b2.data(), T, F, 4);
        double e = 0;
        for (int t = 0; t < T; t++) {
            DualData d = dual_from_qkv(s.qkv.data(), T, 4, 1, 0, t);
            // the mask M_t of the query, fixed a posteriori from the dual's own attention output
            const vec hp = dual_one_step(d, tp, 1.0, {});
            std::vector<int> mask(F);
            for (int f = 0; f < F; f++) mask[f] = dotp(&W1[(size_t)f * 4], hp.data(), 4) + b1[f] > 0;
            // folded value view W2 M_t W1 v_i, and the offset W2 M_t b1 + b2 outside the dual
            DualData df = d;
            for (int i = 0; i < d.n; i++)
                for (int o = 0; o < 4; o++) {
                    double v = 0;
                    for (int f = 0; f < F; f++)
                        if (mask[f]) v += W2[(size_t)o * F + f] * dotp(&W1[(size_t)f * 4], &d.V[(size_t)i * 4], 4);
                    df.V[(size_t)i * 4 + o] = v;
                }
            vec y = dual_one_step(df, tp, 1.0, {});
            for (int o = 0; o < 4; o++) {
                double off = b2[o];
                for (int f = 0; f < F; f++) if (mask[f]) off += W2[(size_t)o * F + f] * b1[f];
                y[o] += off;
            }
            e = std::max(e, relerr(y, row(ffn, t, 4)));
        }
        res.push_back(make("I15", "attention + ReLU FFN = mask-folded dual (value view W2 M_t W1 v_i), every query", e, 1e-8));
    }
    // ---- I16: RoPE ----------------------------------------------------------------------------------------------------
    {
        Rng r = rng_for(16);
        Setup s = make_setup(r, 16, 8, 4, 1);
        const int T = 16;
        vec rq = s.qkv, tab(4);
        for (int t = 0; t < T; t++) {
            rope_table(tab.data(), (double)t, 4);
            rope_apply(&rq[(size_t)t * 12], &rq[(size_t)t * 12], tab.data(), 4);      // q_t = R_t W_Q x_t
            rope_apply(&rq[(size_t)t * 12 + 4], &rq[(size_t)t * 12 + 4], tab.data(), 4);  // k_t = R_t W_K x_t
        }
        const vec out = engine_attention(rq, T, 4, 1);
        const TaylorFeatures tr(4, taylor_order(qkv_zmax(rq, T, 4, 1)));  // rotated pairs can have larger |kᵀq|: P by the bound
        double e = 0;
        for (int t = 0; t < T; t++) e = std::max(e, relerr(dual_one_step(dual_from_qkv(rq.data(), T, 4, 1, 0, t), tr, 1.0, {}), row(out, t, 4)));
        res.push_back(make("I16", strfmt("RoPE attention = the dual with position-rotated key/query views (Taylor P=%d), every query", tr.P), e, 1e-8));
        vec x0 = row(s.qkv, 0, 12), x1 = x0;
        rope_table(tab.data(), 0.0, 4);
        rope_apply(&x1[0], &x1[0], tab.data(), 4);
        rope_apply(&x1[4], &x1[4], tab.data(), 4);
        res.push_back(make("I16", "RoPE at p = 0 is the identity (differing elements)", (double)count_bit_differences(x0, x1), 0));
    }
    // ---- I17: ERM scaling (Theorem 3.2's empirical minimizer) -------------------------------------------------------
    {
        Rng r = rng_for(17);
        Setup s = make_setup(r, 16, 8, 4, 1);
        DualData d = dual_from_qkv(s.qkv.data(), s.T, s.C, 1, 0, s.T - 1);
        const TaylorFeatures tk(4, taylor_order(qkv_zmax(s.qkv, s.T, 4, 1)));  // |G|² and Tr K have e^{k_iᵀk_j}: P by the bound
        const int N = d.n, dr = tk.dim();
        const vec PhiK = feature_rows(tk, d.K, N);
        vec G((size_t)4 * dr, 0.0);  // G_S = (1/N) Σ_i v_i φ(k_i)ᵀ
        for (int i = 0; i < N; i++)
            for (int e = 0; e < 4; e++)
                for (int k = 0; k < dr; k++) G[(size_t)e * dr + k] += d.V[(size_t)i * 4 + e] * PhiK[(size_t)i * dr + k] / N;
        const double gx = norm2(G);
        double g2 = 0, trK = 0, trPhi = 0;
        for (int i = 0; i < N; i++) {
            for (int j = 0; j < N; j++)
                g2 += dotp(&d.V[(size_t)i * 4], &d.V[(size_t)j * 4], 4) * std::exp(dotp(&d.K[(size_t)i * 4], &d.K[(size_t)j * 4], 4));
            trK += std::exp(dotp(&d.K[(size_t)i * 4], &d.K[(size_t)i * 4], 4));
            trPhi += dotp(&PhiK[(size_t)i * dr], &PhiK[(size_t)i * dr], dr);
        }
        const double gk = std::sqrt(g2) / N;
        res.push_back(make("I17", "|G_S|_F: kernel trick = explicit features", std::fabs(gk - gx) / gk, 1e-6));
        vec phq(dr);
        tk.phi(phq.data(), d.q.data());
        vec ferm = dual_predict(G, phq, 4, dr);
        for (auto& v : ferm) v /= gx;  // f_ERM(q) = w G φ(q) / |G|, w = 1
        vec h = head_row(s.out, 4, 1, 0, s.T - 1);
        const double scale = std::exp(dual_log_D(d)) / (N * gk);
        for (auto& v : h) v *= scale;
        res.push_back(make("I17", "ERM: f_ERM(q) = w D / (N |G_S|) h'(q)", relerr(ferm, h), 1e-6));
        res.push_back(make("I17", "Tr K_S = sum_i e^{|k_i|^2} = sum_i phi(k_i).phi(k_i)", std::fabs(trK - trPhi) / trK, 1e-6));
    }
    return res;
}

std::vector<CheckResult> duallens_statistical_checks(uint64_t seed) {
    std::vector<CheckResult> res;
    auto rng_for = [&](int salt) { return Rng(seed * 1000003ull + (uint64_t)salt); };
    // ---- I9: positive random features: unbiased, error ~ d_r^{-1/2} --------------------------------------------
    {
        Rng r = rng_for(9);
        Setup s = make_setup(r, 16, 8, 4, 1);
        DualData d = dual_from_qkv(s.qkv.data(), s.T, s.C, 1, 0, s.T - 1);
        const vec k0 = row(d.K, 0, 4);
        const double kq = dotp(k0.data(), d.q.data(), 4);
        vec kpq(4);
        for (int e = 0; e < 4; e++) kpq[e] = k0[e] + d.q[e];
        const int R = 2000, dr = 64;
        const double sigma = std::exp(kq) * std::sqrt((std::exp(dotp(kpq.data(), kpq.data(), 4)) - 1) / dr);
        double mean = 0;
        vec a(dr), b(dr);
        for (int rep = 0; rep < R; rep++) {
            RandomFeatures f(4, dr, seed * 7919 + rep);
            f.phi(a.data(), k0.data());
            f.phi(b.data(), d.q.data());
            mean += dotp(a.data(), b.data(), dr) / R;
        }
        res.push_back(make("I9", "PRF unbiased: |mean phi(k).phi(q) - e^{k.q}| over 2000 draws (d_r=64), in standard errors",
                           std::fabs(mean - std::exp(kq)) / (sigma / std::sqrt((double)R)), 4.0));
        std::vector<PrfRow> rows = prf_convergence({1024, 16384}, 30, seed * 31 + 9);
        res.push_back(make_range("I9", "PRF error ratio d_r=1024 vs 16x (mean rel. error of the attention output, 30 draws)",
                                 rows[0].err_out / rows[1].err_out, 2.5, 6.0));
    }
    // ---- R6: Theorem 3.2's trend in N --------------------------------------------------------------------------------
    {
        double gx = 0, gmc = 0;
        std::vector<Theorem32Row> rows = theorem32_trend({4, 8, 16, 32, 64, 128, 256, 512, 1024}, 20, 2048, seed * 13 + 6, &gx, &gmc);
        res.push_back(make("R6", "|G_pop|_F: closed form (Gaussian tokens) = Monte Carlo over 2048 tokens (relative difference; MC noise)",
                           std::fabs(gmc - gx) / gx, 0.1));
        vec Ns, ex;
        int ups = 0;
        for (size_t i = 0; i < rows.size(); i++) {
            if (rows[i].N >= 32) { Ns.push_back(rows[i].N); ex.push_back(rows[i].excess); }
            if (i > 0 && rows[i].excess >= rows[i - 1].excess) ups++;
        }
        res.push_back(make("R6", "Thm 3.2: the excess representation loss decreases with N = 4..1024 (increases seen)", ups, 0));
        res.push_back(make_range("R6", "Thm 3.2: its log-log slope for N >= 32 (about -1 expected; the bound allows -1/2)", loglog_slope(Ns, ex), -1.4,
                                 -0.6));
    }
    // ---- I20: the regression task ------------------------------------------------------------------------------------
    {
        RegTask task;
        Rng r = rng_for(20);
        Batch bt = regression_prompts(task, 10000, r);
        double y2 = 0;
        for (int b = 0; b < bt.B; b++) y2 += bt.target_vecs[(size_t)b * bt.T + task.N] * bt.target_vecs[(size_t)b * bt.T + task.N] / bt.B;
        res.push_back(make("I20", "task: E[y^2] = d (10k query targets; |mean/d - 1|)", std::fabs(y2 / task.d - 1), 0.08));
        RegReference ref = regression_references(task, bt);
        res.push_back(make("I20", "OLS on the prompt: normalized MSE ~ 0 (noiseless, N >= d)", ref.ols, 1e-6));
        res.push_back(make("I20", "one GD step at eta* = N/(N+d+1): |nMSE - (d+1)/(N+d+1)| (10k prompts)", std::fabs(ref.gd - ref.gd_theory), 0.01));
    }
    return res;
}

std::vector<CheckResult> duallens_checks(uint64_t seed) {
    std::vector<CheckResult> res = duallens_exact_checks(seed), st = duallens_statistical_checks(seed);
    res.insert(res.end(), st.begin(), st.end());
    return res;
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

// =================================================================================================================
// the regression task and its reference predictors

Batch regression_prompts(const RegTask& task, int B, Rng& rng) {
    Batch bt;
    const int d = task.d, D = d + 1, T = task.T();
    bt.B = B;
    bt.T = T;
    bt.D = D;
    bt.Dout = 1;
    bt.vectors.assign((size_t)B * T * D, 0.0f);
    bt.target_vecs.assign((size_t)B * T, 0.0f);
    bt.mask.assign((size_t)B * T, 0.0f);
    vec w(d), x(d);
    for (int b = 0; b < B; b++) {
        fill_normal(w.data(), d, rng);  // a fresh task per prompt: w ~ N(0, I_d)
        for (int i = 0; i < T; i++) {
            fill_normal(x.data(), d, rng);
            const double y = dotp(w.data(), x.data(), d) + task.noise * rng.normal();
            float* tok = &bt.vectors[((size_t)b * T + i) * D];
            for (int e = 0; e < d; e++) tok[e] = (float)x[e];
            if (i < task.N) tok[d] = (float)y;  // the query's label slot stays 0
            else bt.target_vecs[(size_t)b * T + i] = (float)y;
        }
        bt.mask[(size_t)b * T + T - 1] = 1.0f;
    }
    return bt;
}

namespace {

// The hand-built head of spec R5 over the tokens the model's query sees: the N context tokens and the query itself
// (value 0: its label slot is empty), ŷ = Σ_i softmax_i(b x_iᵀx_q) ṽ_i, ṽ_i = y_i − β mean_{j∈N(i)} y_j with the
// neighbours among all other tokens (the query included), as the negative layer at the last query has them. This
// is the reading that reproduces the spec's numbers (0.554 plain; all: 0.482 / 0.385 / 0.245 at β = 0.2 / 0.5 / 1).
// ṽ per prompt (N+1 values, the query's last).
std::vector<vec> smoother_values(const std::vector<Prompt>& ps, double beta, NegRule rule, int k, uint64_t seed) {
    std::vector<vec> out;
    for (size_t pi = 0; pi < ps.size(); pi++) {
        const Prompt& p = ps[pi];
        const int n = p.N + 1, d = p.d;
        vec X = p.X, y = p.y;
        X.insert(X.end(), p.xq.begin(), p.xq.end());
        y.push_back(0.0);
        vec vt = y;
        if (beta != 0)
            for (int i = 0; i < n; i++) {
                std::vector<std::pair<double, int>> cand;  // (score, j): sorted by score, ties by j
                for (int j = 0; j < n; j++)
                    if (j != i)
                        cand.push_back({rule == NegRule::random ? attnmod_detail::random_priority(seed, (int)pi, 0, i, j)
                                                                : rule == NegRule::lowsim ? dotp(&X[(size_t)i * d], &X[(size_t)j * d], d) : 0.0,
                                        j});
                if (rule != NegRule::all) {
                    std::stable_sort(cand.begin(), cand.end());
                    cand.resize(std::min<size_t>(cand.size(), (size_t)k));
                }
                double s = 0;
                for (auto& c : cand) s += y[c.second];
                vt[i] = y[i] - beta * s / cand.size();
            }
        out.push_back(vt);
    }
    return out;
}
// ŷ = Σ_i softmax_i(b x_iᵀx_q) ṽ_i over the N context tokens and the query.
vec smoother_raw(const std::vector<Prompt>& ps, const std::vector<vec>& vt, double bscale) {
    vec out;
    for (size_t pi = 0; pi < ps.size(); pi++) {
        const Prompt& p = ps[pi];
        const int n = p.N + 1, d = p.d;
        vec z(n);
        double mx = -INFINITY;
        for (int i = 0; i < n; i++) mx = std::max(mx, z[i] = bscale * dotp(i < p.N ? &p.X[(size_t)i * d] : p.xq.data(), p.xq.data(), d));
        double den = 0, num = 0;
        for (int i = 0; i < n; i++) {
            const double a = std::exp(z[i] - mx);
            den += a;
            num += a * vt[pi][i];
        }
        out.push_back(num / den);
    }
    return out;
}

// Best c (least squares) for a raw prediction; returns the normalized MSE and sets c.
double best_scale(const vec& raw, const std::vector<Prompt>& ps, int d, double& c) {
    double sy = 0, ss = 0;
    for (size_t i = 0; i < ps.size(); i++) { sy += raw[i] * ps[i].yq; ss += raw[i] * raw[i]; }
    c = ss > 0 ? sy / ss : 0;
    double mse = 0;
    for (size_t i = 0; i < ps.size(); i++) mse += (c * raw[i] - ps[i].yq) * (c * raw[i] - ps[i].yq);
    return mse / ps.size() / d;
}

double best_smoother(const RegTask& task, const std::vector<Prompt>& ps, double beta, NegRule rule, int k, uint64_t seed, double* bbest,
                     double* cbest) {
    double best = INFINITY;
    const std::vector<vec> vt = smoother_values(ps, beta, rule, k, seed);
    for (double b = 0.025; b <= 1.501; b += 0.025) {
        double c;
        const double m = best_scale(smoother_raw(ps, vt, b), ps, task.d, c);
        if (m < best) {
            best = m;
            if (bbest) *bbest = b;
            if (cbest) *cbest = c;
        }
    }
    return best;
}

}  // namespace

RegReference regression_references(const RegTask& task, const Batch& bt) {
    const int d = task.d;
    std::vector<Prompt> ps;
    for (int b = 0; b < bt.B; b++) ps.push_back(prompt_of(bt, b, d));
    RegReference ref;
    double z = 0, ols = 0, gd = 0;
    const double eta = (double)task.N / (task.N + d + 1);
    for (const Prompt& p : ps) {
        z += p.yq * p.yq;
        // OLS: (XᵀX) w = Xᵀy
        vec A((size_t)d * d, 0.0), rhs(d, 0.0), g(d, 0.0);
        for (int i = 0; i < p.N; i++)
            for (int a = 0; a < d; a++) {
                rhs[a] += p.X[(size_t)i * d + a] * p.y[i];
                for (int b = 0; b < d; b++) A[(size_t)a * d + b] += p.X[(size_t)i * d + a] * p.X[(size_t)i * d + b];
            }
        vec w = rhs;
        cholesky_solve(A, w, d, 1);
        const double yo = dotp(w.data(), p.xq.data(), d);
        ols += (yo - p.yq) * (yo - p.yq);
        // one GD step from 0 on (1/2N) Σ (wᵀx_i − y_i)²: w = η/N Σ y_i x_i
        const double yg = eta / p.N * dotp(rhs.data(), p.xq.data(), d);
        gd += (yg - p.yq) * (yg - p.yq);
    }
    const double n = (double)ps.size() * d;
    ref.zero = z / n;
    ref.ols = ols / n;
    ref.gd = gd / n;
    ref.gd_theory = (double)(d + 1) / (task.N + d + 1);
    ref.smoother = best_smoother(task, ps, 0, NegRule::all, 0, 0, &ref.smoother_b, &ref.smoother_c);
    return ref;
}

double negative_smoother(const RegTask& task, const Batch& bt, double beta, NegRule rule, int k, uint64_t seed) {
    std::vector<Prompt> ps;
    for (int b = 0; b < bt.B; b++) ps.push_back(prompt_of(bt, b, task.d));
    return best_smoother(task, ps, beta, rule, k, seed, nullptr, nullptr);
}

// =================================================================================================================
// M1: one softmax head on raw tokens

nlohmann::json HeadConfig::to_json() const {
    nlohmann::json j = {{"D", D}, {"sim_cols", sim_cols}, {"init_std", init_std}};
    j["attn_mod"] = {{"alpha", mod.alpha}, {"beta", mod.beta}, {"neighbors", neg_rule_name(mod.rule)}, {"k", mod.k},
                     {"sim", neg_sim_name(mod.sim)}, {"g1", mod.g1}, {"g2", mod.g2}, {"c", mod.c}, {"dh", mod.dh}};
    return j;
}

TensorTable head_parameters(const HeadConfig& c) {
    TensorTable t;
    const int64_t D = c.D, dh = c.mod.dh;
    t.add({"attn.qkv.w", {3 * D, D}, Init::normal, c.init_std, "[W_Q; W_K; W_V] on raw tokens (3D,D), no bias", true});
    if (c.mod.g2) {
        t.add({"attn.adk.A", {dh, D}, Init::normal, c.init_std, "key adapter A_K (d_h,D)", true});
        t.add({"attn.adk.B", {D, dh}, Init::zeros, 0, "key adapter B_K (D,d_h); 0 at init", true});
    }
    if (c.mod.g1) {
        t.add({"attn.adv.A", {dh, D}, Init::normal, c.init_std, "value adapter A_V (d_h,D)", true});
        t.add({"attn.adv.B", {D, dh}, Init::zeros, 0, "value adapter B_V (D,d_h); 0 at init", true});
    }
    return t;
}

int64_t HeadConfig::num_params() const { return head_parameters(*this).count(); }

template <typename real>
OneHead<real>::OneHead(const HeadConfig& c, Device dev, uint64_t seed) : cfg(c) {
    if (cfg.D < 2 || cfg.sim_cols < 1 || cfg.sim_cols > cfg.D) fail(strfmt("one-head model: bad D=%d sim_cols=%d", cfg.D, cfg.sim_cols));
    s.dev = dev;
    s.kind = "duallens_head";
    s.config = cfg.to_json();
    s.ptable = head_parameters(cfg);
    s.alloc_params();
    s.init_params(seed);
    seed_ = seed;
    // the read-out: ŷ = the last coordinate of h' (a fixed (1,D) row, not a parameter)
    std::vector<real> e(cfg.D, real(0));
    e[cfg.D - 1] = real(1);
    d_readout_ = Buffer<real>(dev, cfg.D);
    s.upload(d_readout_, 0, e.data(), cfg.D);
}

template <typename real>
void OneHead<real>::layout(int B_, int T_) {
    if (B_ == B && T_ == T) return;
    B = B_;
    T = T_;
    const int64_t Bl = B, Tl = T, D = cfg.D, dh = cfg.mod.dh;
    ActTable t;
    t.add("qkv", {Bl, Tl, 3 * D}, "[q|k|v] = X W_qkvᵀ (+ adapters)", true);
    if (cfg.mod.g2) { t.add("adk.z", {Bl, Tl, dh}, "key adapter pre-activation", true); t.add("adk.u", {Bl, Tl, dh}, "key adapter hidden", false); }
    if (cfg.mod.g1) { t.add("adv.z", {Bl, Tl, dh}, "value adapter pre-activation", true); t.add("adv.u", {Bl, Tl, dh}, "value adapter hidden", false); }
    t.add("att", {Bl, 1, Tl, Tl}, "attention probabilities", false);
    t.add("atty", {Bl, Tl, D}, "attention output h'", true);
    t.add("pred", {Bl, Tl, 1}, "last coordinate of h'", true);
    t.add("losses", {Bl, Tl}, "squared error per position", false);
    s.atable = std::move(t.acts);
    s.gtable = std::move(t.grads);
    s.alloc_acts();
    const size_t sc = attention_scratch_size(B, T, cfg.D, 1);
    if (scratch_.n < sc) scratch_ = Buffer<real>(s.dev, sc);
}

template <typename real>
double OneHead<real>::forward(const Batch& bt) {
    if (bt.D != cfg.D) fail(strfmt("one-head model: tokens of width %d, the model takes %d", bt.D, cfg.D));
    layout(bt.B, bt.T);
    forwards_++;
    const Device dev = s.dev;
    const int N = B * T, D = cfg.D;
    std::vector<real> x(bt.vectors.begin(), bt.vectors.end());
    if (d_x_.n < x.size()) d_x_ = Buffer<real>(dev, x.size());
    s.upload(d_x_, 0, x.data(), x.size());
    const AttnMods& m = cfg.mod;
    const real* sim = nullptr;
    if (m.needs_sim_src()) {  // the input similarity reads the raw x part of each token
        std::vector<real> xs((size_t)N * cfg.sim_cols);
        for (int n = 0; n < N; n++)
            for (int e = 0; e < cfg.sim_cols; e++) xs[(size_t)n * cfg.sim_cols + e] = x[(size_t)n * D + e];
        if (d_sim_.n < xs.size()) d_sim_ = Buffer<real>(dev, xs.size());
        s.upload(d_sim_, 0, xs.data(), xs.size());
        sim = d_sim_.ptr;
    }
    // qkv = X W_qkvᵀ
    op::matmul_forward(dev, s.act("qkv"), d_x_.ptr, s.param("attn.qkv.w"), (const real*)nullptr, N, D, 3 * D);
    if (m.adapters_active()) {
        if (m.g2) op::qkv_adapter_forward(dev, s.act("qkv"), s.act("adk.z"), s.act("adk.u"), d_x_.ptr, s.param("attn.adk.A"), s.param("attn.adk.B"), m.c, 1, N, D, D, m.dh);
        if (m.g1) op::qkv_adapter_forward(dev, s.act("qkv"), s.act("adv.z"), s.act("adv.u"), d_x_.ptr, s.param("attn.adv.A"), s.param("attn.adv.B"), m.c, 2, N, D, D, m.dh);
    }
    // h' = attention(qkv) with the modifications (plain when none)
    op::attention_mod_forward(dev, s.act("atty"), s.act("att"), scratch_.ptr, s.act("qkv"), sim, m, seed_ * 0x9E3779B97F4A7C15ull + forwards_, B, T, D, 1,
                              cfg.sim_cols);
    // ŷ = last coordinate of h'
    op::matmul_forward(dev, s.act("pred"), s.act("atty"), d_readout_.ptr, (const real*)nullptr, N, D, 1);
    if (bt.target_vecs.empty()) { dloss_host_.clear(); return NAN; }
    std::vector<real> tv(bt.target_vecs.begin(), bt.target_vecs.end());
    if (d_target_.n < tv.size()) d_target_ = Buffer<real>(dev, tv.size());
    s.upload(d_target_, 0, tv.data(), tv.size());
    op::mse_forward(dev, s.act("losses"), s.act("pred"), d_target_.ptr, N, 1);
    std::vector<real> losses = s.fetch_act("losses");
    double wsum = 0, lsum = 0;
    for (int i = 0; i < N; i++) { wsum += bt.mask[i]; lsum += (double)bt.mask[i] * (double)losses[i]; }
    if (wsum <= 0) fail("batch mask is all zero: no position is scored");
    dloss_host_.resize(N);
    for (int i = 0; i < N; i++) dloss_host_[i] = (real)(bt.mask[i] / wsum);
    return lsum / wsum;
}

template <typename real>
void OneHead<real>::backward() {
    if (dloss_host_.empty()) fail("backward() needs a forward() with targets first");
    const Device dev = s.dev;
    const int N = B * T, D = cfg.D;
    const AttnMods& m = cfg.mod;
    s.zero_grad();
    if (d_dloss_.n < (size_t)N) d_dloss_ = Buffer<real>(dev, N);
    s.upload(d_dloss_, 0, dloss_host_.data(), N);
    op::mse_backward(dev, s.dact("pred"), d_dloss_.ptr, s.act("pred"), d_target_.ptr, N, 1);
    // pred = atty·eᵀ
    op::matmul_backward(dev, s.dact("atty"), (real*)nullptr, (real*)nullptr, s.dact("pred"), s.act("atty"), d_readout_.ptr, N, D, 1);
    // atty = attention_mod(qkv)
    op::attention_mod_backward(dev, s.dact("qkv"), scratch_.ptr, s.dact("atty"), s.act("qkv"), s.act("att"), m.needs_sim_src() ? d_sim_.ptr : nullptr, m,
                               seed_ * 0x9E3779B97F4A7C15ull + forwards_, B, T, D, 1, cfg.sim_cols);
    // qkv[v] += c·ReLU(X A_Vᵀ) B_Vᵀ ;  qkv[k] += c·ReLU(X A_Kᵀ) B_Kᵀ   (the input X is data: no dinp)
    if (m.adapters_active()) {
        Buffer<real> dx(dev, (size_t)N * D);  // dL/dX, discarded
        if (m.g1) op::qkv_adapter_backward(dev, dx.ptr, s.grad("attn.adv.A"), s.grad("attn.adv.B"), s.dact("adv.z"), s.dact("qkv"), d_x_.ptr, s.act("adv.z"),
                                           s.act("adv.u"), s.param("attn.adv.A"), s.param("attn.adv.B"), m.c, 2, N, D, D, m.dh);
        if (m.g2) op::qkv_adapter_backward(dev, dx.ptr, s.grad("attn.adk.A"), s.grad("attn.adk.B"), s.dact("adk.z"), s.dact("qkv"), d_x_.ptr, s.act("adk.z"),
                                           s.act("adk.u"), s.param("attn.adk.A"), s.param("attn.adk.B"), m.c, 1, N, D, D, m.dh);
    }
    // qkv = X W_qkvᵀ
    op::matmul_backward(dev, (real*)nullptr, s.grad("attn.qkv.w"), (real*)nullptr, s.dact("qkv"), d_x_.ptr, s.param("attn.qkv.w"), N, D, 3 * D);
}

template <typename real>
std::vector<real> OneHead<real>::outputs() {
    return s.fetch_act("pred");
}

template struct OneHead<float>;
template struct OneHead<double>;

}  // namespace icl
