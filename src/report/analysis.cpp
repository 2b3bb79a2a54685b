// analysis.cpp — see analysis.h.
#include "report/analysis.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/common.h"

namespace icl {

// ---- statistics ------------------------------------------------------------------------------------------

MeanSE mean_se(const std::vector<double>& v) {
    MeanSE m;
    double s = 0;
    for (double x : v)
        if (std::isfinite(x)) { s += x; m.n++; }
    if (m.n == 0) { m.mean = m.se = NAN; return m; }
    m.mean = s / m.n;
    if (m.n > 1) {
        double ss = 0;
        for (double x : v)
            if (std::isfinite(x)) ss += (x - m.mean) * (x - m.mean);
        m.se = std::sqrt(ss / (m.n - 1)) / std::sqrt((double)m.n);
    }
    return m;
}

double t95(int df) {
    static const double t[31] = {NAN,   12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                 2.201, 2.179,  2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080,
                                 2.074, 2.069,  2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
    if (df < 1) return NAN;
    return df <= 30 ? t[df] : 1.96 + 2.4 / df;
}

double ci95_half_width(const MeanSE& m) { return m.n > 1 ? t95(m.n - 1) * m.se : NAN; }

std::string mean_ci(const std::vector<double>& v, const char* fmt, double k) {
    const MeanSE m = mean_se(v);
    if (m.n == 0) return "–";
    std::string f = fmt;  // the half-width without a sign flag
    for (size_t p = f.find('%'); p != std::string::npos; p = f.find('%', p + 1))
        if (p + 1 < f.size() && f[p + 1] == '+') f.erase(p + 1, 1);
    return strfmt(fmt, k * m.mean) + " ± " + (m.n > 1 ? strfmt(f.c_str(), k * ci95_half_width(m)) : std::string("–"));
}

std::vector<double> paired_diff(const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> d;
    for (size_t i = 0; i < std::min(a.size(), b.size()); i++)
        if (std::isfinite(a[i]) && std::isfinite(b[i])) d.push_back(a[i] - b[i]);
    return d;
}

std::string count_positive(const std::vector<double>& v) {
    int n = 0, p = 0;
    for (double x : v)
        if (std::isfinite(x)) { n++; p += x > 0; }
    return std::to_string(p) + "/" + std::to_string(n);
}

// ---- ridge -----------------------------------------------------------------------------------------------

void cholesky_solve(std::vector<double>& A, std::vector<double>& b, int n, int K) {
    // A = L Lᵀ (L stored in the lower triangle of A)
    for (int j = 0; j < n; j++) {
        double d = A[(size_t)j * n + j];
        for (int k = 0; k < j; k++) d -= A[(size_t)j * n + k] * A[(size_t)j * n + k];
        if (!(d > 0)) fail("cholesky: the matrix is not positive definite");
        d = std::sqrt(d);
        A[(size_t)j * n + j] = d;
        for (int i = j + 1; i < n; i++) {
            double s = A[(size_t)i * n + j];
            for (int k = 0; k < j; k++) s -= A[(size_t)i * n + k] * A[(size_t)j * n + k];
            A[(size_t)i * n + j] = s / d;
        }
    }
    for (int c = 0; c < K; c++) {
        for (int i = 0; i < n; i++) {  // L z = b
            double s = b[(size_t)i * K + c];
            for (int k = 0; k < i; k++) s -= A[(size_t)i * n + k] * b[(size_t)k * K + c];
            b[(size_t)i * K + c] = s / A[(size_t)i * n + i];
        }
        for (int i = n - 1; i >= 0; i--) {  // Lᵀ x = z
            double s = b[(size_t)i * K + c];
            for (int k = i + 1; k < n; k++) s -= A[(size_t)k * n + i] * b[(size_t)k * K + c];
            b[(size_t)i * K + c] = s / A[(size_t)i * n + i];
        }
    }
}

Ridge ridge_fit(const double* X, const double* Y, int N, int F, int K, double lambda) {
    const int G = F + 1;
    std::vector<double> A((size_t)G * G, 0.0), b((size_t)G * K, 0.0);
    std::vector<double> row(G);
    for (int n = 0; n < N; n++) {
        for (int f = 0; f < F; f++) row[f] = X[(size_t)n * F + f];
        row[F] = 1.0;
        for (int i = 0; i < G; i++) {
            for (int j = 0; j < G; j++) A[(size_t)i * G + j] += row[i] * row[j];
            for (int k = 0; k < K; k++) b[(size_t)i * K + k] += row[i] * Y[(size_t)n * K + k];
        }
    }
    for (int f = 0; f < F; f++) A[(size_t)f * G + f] += lambda;
    A[(size_t)F * G + F] += 1e-12 * (N + 1);  // keeps the bias pivot positive when N = 0
    cholesky_solve(A, b, G, K);
    Ridge r;
    r.F = F;
    r.K = K;
    r.W = std::move(b);
    return r;
}

std::vector<double> Ridge::predict(const double* X, int N) const {
    std::vector<double> out((size_t)N * K);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            double s = W[(size_t)F * K + k];
            for (int f = 0; f < F; f++) s += X[(size_t)n * F + f] * W[(size_t)f * K + k];
            out[(size_t)n * K + k] = s;
        }
    return out;
}

// ---- FFT -------------------------------------------------------------------------------------------------

using cd = std::complex<double>;

static void fft_pow2(std::vector<cd>& a, bool inverse) {
    const size_t n = a.size();
    for (size_t i = 1, j = 0; i < n; i++) {  // bit reversal
        size_t bit = n >> 1;
        for (; j & bit; bit >>= 1) j ^= bit;
        j ^= bit;
        if (i < j) std::swap(a[i], a[j]);
    }
    for (size_t len = 2; len <= n; len <<= 1) {
        const double ang = 2 * M_PI / (double)len * (inverse ? 1 : -1);
        for (size_t i = 0; i < n; i += len)
            for (size_t k = 0; k < len / 2; k++) {
                const cd w = std::polar(1.0, ang * (double)k);
                const cd u = a[i + k], v = a[i + k + len / 2] * w;
                a[i + k] = u + v;
                a[i + k + len / 2] = u - v;
            }
    }
    if (inverse)
        for (auto& v : a) v /= (double)n;
}

void fft(std::vector<cd>& x) {
    const size_t n = x.size();
    if (n <= 1) return;
    if ((n & (n - 1)) == 0) { fft_pow2(x, false); return; }
    // Bluestein: kt = (k² + t² − (k−t)²)/2, so X_k = w_k Σ_t (x_t w_t) conj(w_{k−t}), w_j = e^{−πi j²/n}:
    // a convolution, done with power-of-two FFTs of length m ≥ 2n−1.
    size_t m = 1;
    while (m < 2 * n - 1) m <<= 1;
    std::vector<cd> w(n), a(m, 0.0), b(m, 0.0);
    for (size_t j = 0; j < n; j++) {
        const uint64_t j2 = ((uint64_t)j * j) % (2 * n);  // e^{−πi j²/n} has period 2n in j²
        w[j] = std::polar(1.0, -M_PI * (double)j2 / (double)n);
    }
    for (size_t t = 0; t < n; t++) a[t] = x[t] * w[t];
    b[0] = std::conj(w[0]);
    for (size_t j = 1; j < n; j++) b[j] = b[m - j] = std::conj(w[j]);
    fft_pow2(a, false);
    fft_pow2(b, false);
    for (size_t i = 0; i < m; i++) a[i] *= b[i];
    fft_pow2(a, true);
    for (size_t k = 0; k < n; k++) x[k] = w[k] * a[k];
}

std::vector<double> power_spectrum(const double* x, int n) {
    std::vector<cd> a(x, x + n);
    fft(a);
    std::vector<double> p(n / 2 + 1);
    for (int k = 0; k <= n / 2; k++) p[k] = std::norm(a[k]);
    return p;
}

// ---- t-SNE -----------------------------------------------------------------------------------------------

std::vector<double> tsne(const double* X, int N, int F, const TsneOptions& o) {
    if (N < 2) return std::vector<double>((size_t)N * 2, 0.0);
    // pairwise squared distances
    std::vector<double> D((size_t)N * N, 0.0);
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++) {
            double s = 0;
            for (int f = 0; f < F; f++) {
                const double d = X[(size_t)i * F + f] - X[(size_t)j * F + f];
                s += d * d;
            }
            D[(size_t)i * N + j] = D[(size_t)j * N + i] = s;
        }
    // P_{j|i} = exp(−β_i D_ij) / Σ, β_i by bisection so that the entropy is log(perplexity)
    const double target = std::log(std::min(o.perplexity, (N - 1) / 3.0 > 1 ? (N - 1) / 3.0 : 1.0));
    std::vector<double> P((size_t)N * N, 0.0);
    for (int i = 0; i < N; i++) {
        double dmin = INFINITY;
        for (int j = 0; j < N; j++)
            if (j != i) dmin = std::min(dmin, D[(size_t)i * N + j]);
        double beta = 1.0, lo = 0, hi = INFINITY;
        for (int it = 0; it < 100; it++) {
            double sum = 0, sdp = 0;
            for (int j = 0; j < N; j++) {
                if (j == i) continue;
                const double p = std::exp(-beta * (D[(size_t)i * N + j] - dmin));  // shifted: same normalized P
                P[(size_t)i * N + j] = p;
                sum += p;
                sdp += (D[(size_t)i * N + j] - dmin) * p;
            }
            const double H = std::log(sum) + beta * sdp / sum;  // entropy of the normalized row
            if (std::fabs(H - target) < 1e-6) break;
            if (H > target) { lo = beta; beta = std::isinf(hi) ? beta * 2 : (beta + hi) / 2; }
            else { hi = beta; beta = (lo + beta) / 2; }
        }
        double sum = 0;
        for (int j = 0; j < N; j++) sum += P[(size_t)i * N + j];
        for (int j = 0; j < N; j++) P[(size_t)i * N + j] /= sum;
    }
    // symmetrize: p_ij = (p_{j|i} + p_{i|j}) / 2N
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++) {
            const double p = std::max((P[(size_t)i * N + j] + P[(size_t)j * N + i]) / (2.0 * N), 1e-12);
            P[(size_t)i * N + j] = P[(size_t)j * N + i] = p;
        }
    // gradient descent with momentum and per-coordinate gains
    Rng rng(o.seed);
    std::vector<double> Y((size_t)N * 2), V((size_t)N * 2, 0.0), G((size_t)N * 2, 1.0), dY((size_t)N * 2), num((size_t)N * N);
    for (auto& y : Y) y = 1e-2 * rng.normal();
    for (int it = 0; it < o.iters; it++) {
        const double ex = it < o.exaggeration_iters ? o.exaggeration : 1.0;
        const double mom = it < o.exaggeration_iters ? 0.5 : 0.8;
        double Z = 0;
        for (int i = 0; i < N; i++)
            for (int j = i + 1; j < N; j++) {
                const double a = Y[2 * i] - Y[2 * j], b = Y[2 * i + 1] - Y[2 * j + 1];
                const double q = 1.0 / (1.0 + a * a + b * b);
                num[(size_t)i * N + j] = num[(size_t)j * N + i] = q;
                Z += 2 * q;
            }
        // dC/dy_i = 4 Σ_j (p_ij − q_ij) (y_i − y_j) / (1 + ‖y_i − y_j‖²)
        for (int i = 0; i < N; i++) {
            double gx = 0, gy = 0;
            for (int j = 0; j < N; j++) {
                if (j == i) continue;
                const double q = num[(size_t)i * N + j];
                const double m = (ex * P[(size_t)i * N + j] - q / Z) * q;
                gx += m * (Y[2 * i] - Y[2 * j]);
                gy += m * (Y[2 * i + 1] - Y[2 * j + 1]);
            }
            dY[2 * i] = 4 * gx;
            dY[2 * i + 1] = 4 * gy;
        }
        for (size_t k = 0; k < Y.size(); k++) {
            G[k] = (dY[k] > 0) != (V[k] > 0) ? G[k] + 0.2 : std::max(G[k] * 0.8, 0.01);
            V[k] = mom * V[k] - o.learning_rate * G[k] * dY[k];
            Y[k] += V[k];
        }
        double mx = 0, my = 0;
        for (int i = 0; i < N; i++) { mx += Y[2 * i]; my += Y[2 * i + 1]; }
        for (int i = 0; i < N; i++) { Y[2 * i] -= mx / N; Y[2 * i + 1] -= my / N; }
    }
    return Y;
}

double knn_accuracy(const double* X, int N, int F, const std::vector<int>& labels, int k) {
    if ((int)labels.size() != N) fail("knn_accuracy: one label per point");
    if (N < 2) return NAN;
    k = std::min(k, N - 1);
    int hit = 0;
    std::vector<std::pair<double, int>> d(N);
    for (int i = 0; i < N; i++) {
        d.clear();
        for (int j = 0; j < N; j++) {
            if (j == i) continue;
            double s = 0;
            for (int f = 0; f < F; f++) {
                const double a = X[(size_t)i * F + f] - X[(size_t)j * F + f];
                s += a * a;
            }
            d.push_back({s, j});
        }
        std::partial_sort(d.begin(), d.begin() + k, d.end());
        std::map<int, int> votes;
        int best = labels[d[0].second], bestc = 0;
        for (int q = 0; q < k; q++) votes[labels[d[q].second]]++;
        for (int q = 0; q < k; q++) {  // ties: the label met first (nearest) wins
            const int l = labels[d[q].second];
            if (votes[l] > bestc) { bestc = votes[l]; best = l; }
        }
        hit += best == labels[i];
    }
    return (double)hit / N;
}

// ---- linear regression -----------------------------------------------------------------------------------

void ridge_bayes_predictions(double* pred, const float* X, int ldx, const float* v, int ldv, int N, int d_in, int d_out, double noise) {
    const int G = d_in + 1;
    const double e2 = noise * noise;
    std::vector<double> XtX((size_t)G * G, 0.0), Xtv((size_t)G * d_out, 0.0), A, W, x(G);
    for (int k = 0; k < N; k++) {
        for (int i = 0; i < d_in; i++) x[i] = X[(size_t)k * ldx + i];
        x[d_in] = 1.0;
        // w = (ε² I + XᵀX)⁻¹ Xᵀv over pairs 0..k−1 (the posterior mean under w ~ N(0, I), noise ε), predicted at x_k
        A = XtX;
        for (int i = 0; i < G; i++) A[(size_t)i * G + i] += e2;
        W = Xtv;
        cholesky_solve(A, W, G, d_out);
        for (int o = 0; o < d_out; o++) {
            double p = 0;
            for (int i = 0; i < G; i++) p += x[i] * W[(size_t)i * d_out + o];
            pred[(size_t)k * d_out + o] = p;
        }
        // then pair k joins the data
        for (int i = 0; i < G; i++) {
            for (int j = 0; j < G; j++) XtX[(size_t)i * G + j] += x[i] * x[j];
            for (int o = 0; o < d_out; o++) Xtv[(size_t)i * d_out + o] += x[i] * v[(size_t)k * ldv + o];
        }
    }
}

double ridge_bayes_error(int d_in, int k, double noise, int samples, Rng& rng) {
    const int G = d_in + 1;
    if (k == 0) return G;
    const double inv = 1.0 / (noise * noise);
    double acc = 0;
    std::vector<double> A((size_t)G * G), I((size_t)G * G), row(G);
    for (int s = 0; s < samples; s++) {
        // A = I + XᵀX/ε²
        std::fill(A.begin(), A.end(), 0.0);
        for (int i = 0; i < G; i++) A[(size_t)i * G + i] = 1.0;
        for (int r = 0; r < k; r++) {
            for (int i = 0; i < d_in; i++) row[i] = rng.normal();
            row[d_in] = 1.0;
            for (int i = 0; i < G; i++)
                for (int j = 0; j < G; j++) A[(size_t)i * G + j] += row[i] * row[j] * inv;
        }
        // tr(A⁻¹) = Σ_i (A⁻¹)_ii
        std::fill(I.begin(), I.end(), 0.0);
        for (int i = 0; i < G; i++) I[(size_t)i * G + i] = 1.0;
        cholesky_solve(A, I, G, G);
        for (int i = 0; i < G; i++) acc += I[(size_t)i * G + i];
    }
    return acc / samples;
}

}  // namespace icl
