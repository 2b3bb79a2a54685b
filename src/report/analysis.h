// analysis.h — the numerics behind the experiment tables and analysis plots (spec/cgt.md §5–6): mean ± standard
// error over seeds, ridge least squares (linear probes), the DFT power spectrum (FFT, any length), exact
// t-SNE, the Bayes-optimal error of in-context linear regression, and a k-nearest-neighbour label accuracy
// (how well categories cluster). All in double precision on the host; inputs are small (≤ a few thousand rows).
//
//   MeanSE m = mean_se({0.77, 0.78, 0.79});          // m.mean, m.se (= sd/√n, sd with n−1)
//   mean_ci({0.77, 0.78, 0.79}, "%.1f%%", 100);      // "78.0% ± 2.5%": mean ± t95(2)·se, the 95% interval
//   Ridge r = ridge_fit(X, Y, N, F, K, 1e-3);        // Y (N,K) ≈ [X 1]·W
//   std::vector<double> p = power_spectrum(x, n);    // |DFT_k|², k = 0..n/2
//   std::vector<double> Y2 = tsne(X, N, F, {});      // (N,2)
//   double e = ridge_bayes_error(16, 10, 0.1, 2000, rng);   // ≈ 7.0 (spec §4.2 table)
#pragma once
#include <complex>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/rng.h"

namespace icl {

// ---- statistics over runs --------------------------------------------------------------------------------
struct MeanSE {
    double mean = 0, se = 0;  // se = sample standard deviation (n−1) / √n; 0 for n = 1
    int n = 0;
};
MeanSE mean_se(const std::vector<double>& v);  // NaN entries are skipped; n = 0 gives NaN mean
// The two-sided 95% quantile of Student's t with df degrees of freedom (12.71 at df = 1, 2.78 at 4, → 1.96): a 95%
// confidence interval of a mean of n replicates is mean ± t95(n−1)·se. Tabulated to df = 30, then 1.96 + 2.4/df
// (within 0.002 of the exact quantile).
double t95(int df);
// The half-width of that interval, t95(n−1)·se; NaN with fewer than 2 replicates.
double ci95_half_width(const MeanSE& m);
// A table cell "mean ± half-width of the 95% interval" with both numbers in printf format fmt after scaling by k
// (a leading '+' flag only on the mean); "mean ± –" for one value, "–" for none.
std::string mean_ci(const std::vector<double>& v, const char* fmt, double k = 1);
// Paired differences a[i] − b[i] over the replicates both have (NaN in either skips the pair): the paired
// comparison of two variants run with the same seeds. E.g. mean_ci(paired_diff(a, b), "%+.1f", 100).
std::vector<double> paired_diff(const std::vector<double>& a, const std::vector<double>& b);
// "k/n": how many of the finite values are > 0 (a sign count beside a paired interval, e.g. "3/3").
std::string count_positive(const std::vector<double>& v);

// ---- ridge least squares ---------------------------------------------------------------------------------
// W ((F+1),K) minimizing ‖[X 1]W − Y‖² + λ‖W[:F]‖² (the bias row is not penalized). X (N,F), Y (N,K), row-major.
struct Ridge {
    int F = 0, K = 0;
    std::vector<double> W;                              // ((F+1),K), last row = bias
    std::vector<double> predict(const double* X, int N) const;  // (N,K)
};
Ridge ridge_fit(const double* X, const double* Y, int N, int F, int K, double lambda);

// Solve A x = b for symmetric positive definite A (n,n) in place by Cholesky; b (n,K) becomes x. Throws
// icl::Error if A is not positive definite.
void cholesky_solve(std::vector<double>& A, std::vector<double>& b, int n, int K);

// ---- spectra ---------------------------------------------------------------------------------------------
// In-place DFT X_k = Σ_t x_t e^{−2πi kt/n} of any length n (radix-2 for powers of two, Bluestein otherwise).
void fft(std::vector<std::complex<double>>& x);
// |X_k|² for k = 0..n/2 of a real sequence x (n).
std::vector<double> power_spectrum(const double* x, int n);

// ---- t-SNE (exact, O(N²) per iteration; van der Maaten & Hinton 2008) ------------------------------------
struct TsneOptions {
    double perplexity = 30;
    int iters = 1000;
    int exaggeration_iters = 250;  // P multiplied by `exaggeration` for the first iterations
    double exaggeration = 12;
    double learning_rate = 200;
    uint64_t seed = 1;
};
// X (N,F) → Y (N,2). Deterministic for a given seed.
std::vector<double> tsne(const double* X, int N, int F, const TsneOptions& o);

// Leave-one-out k-nearest-neighbour accuracy of `labels` in the space X (N,F) (Euclidean): the fraction of
// points whose k nearest other points' majority label is their own (ties: the nearest tied label wins).
double knn_accuracy(const double* X, int N, int F, const std::vector<int>& labels, int k);

// ---- in-context linear regression ------------------------------------------------------------------------
// Bayes-optimal (posterior-mean = ridge with λ = ε² on [u;1], prior N(0,I)) expected squared error against the
// noise-free target after k examples: E_X tr((I + XᵀX/ε²)^{-1}), X (k, d_in+1) with rows [u;1], u ~ N(0,I),
// by Monte Carlo over `samples` draws (spec §4.2). k = 0 gives d_in + 1 exactly.
double ridge_bayes_error(int d_in, int k, double noise, int samples, Rng& rng);
// The same Bayes-optimal predictor applied to one given sequence: pred (N,d_out) row k = the posterior mean at
// input x_k given pairs 0..k−1 (X (N,d_in) at stride ldx, noisy targets v (N,d_out) at stride ldv; prior
// [U | b] ~ N(0, I), noise ε). Scored on a model's own evaluation sequences, it is the paired Bayes baseline.
void ridge_bayes_predictions(double* pred, const float* X, int ldx, const float* v, int ldv, int N, int d_in, int d_out, double noise);


}  // namespace icl
