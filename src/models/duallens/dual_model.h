// duallens.h — softmax attention through the representation-learning lens (Ren & Liu, NeurIPS 2024;
// spec/duallens.md): the dual model f(x) = W·φ(x), its loss (9) and gradient step (Theorem 3.1), the feature maps,
// the extensions (multi-head, stacked layers, FFN, RoPE), the ERM form of Theorem 3.2, and the modified attentions'
// duals — all in fp64 against the engine's own attention layers (layers/attention.h, attention_mods.h). Plus M1,
// the theory-faithful one-head model of the in-context regression experiment (R5).
//
// Conventions (spec §1, A3): per head, raw projections q̃, k̃, v come from the engine's fused qkv (T,3C); the dual
// uses the SCALED keys/queries k = hs^{-1/4} k̃, q = hs^{-1/4} q̃, so exp(kᵀq) = exp(q̃·k̃/√hs) is exactly the
// engine's unnormalized attention. Query t's dual problem (causal, §3.1): training set {(k_i, v_i)}_{i<=t}, test
// input q_t, constant D_t = Σ_{i<=t} exp(k_iᵀq_t):
//   L(W) = −1/(η D_t) Σ_i v_iᵀ W φ(k_i)        ∂L/∂W = −1/(η D_t) Σ_i v_i φ(k_i)ᵀ   (W-independent: L is linear)
//   W_1 = W_0 − η ∂L/∂W,    ŷ = W_1 φ(q_t) = W_0 φ(q_t) + Σ_i e^{k_iᵀq_t}/D_t v_i = W_0 φ(q_t) + h'_t.
// Feature maps: exact-in-the-limit Taylor monomials φ_P (§2.5b; a finite W that a real gradient step trains) and
// positive random features (FAVOR+, §2.1; statistical, the paper's figures), through one FeatureMap interface.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/batch.h"
#include "engine/device.h"
#include "layers/attention_mods.h"
#include "models/iclca/iclaa.h"
#include "models/lm_io.h"
#include "models/state.h"

namespace icl {

// ---- feature maps φ: R^dk → R^dr ------------------------------------------------------------------------------

struct FeatureMap {
    virtual ~FeatureMap() = default;
    virtual int dim() const = 0;
    virtual void phi(double* out, const double* x) const = 0;  // out (dim), x (dk)
};

// φ_P(x)_α = x^α / sqrt(α!) for every multi-index |α| <= P:  φ_P(x)ᵀφ_P(y) = Σ_{n<=P} (xᵀy)^n / n!  (multinomial
// theorem). dim = C(dk+P, P).
struct TaylorFeatures : FeatureMap {
    int dk = 0, P = 0;
    std::vector<int> alpha;     // (dim, dk) the multi-indices, by total degree
    std::vector<double> coef;   // (dim) 1/sqrt(α!)
    TaylorFeatures(int dk, int P);
    int dim() const override { return (int)coef.size(); }
    void phi(double* out, const double* x) const override;
};

// Positive random features with i.i.d. ω ~ N(0, I) (spec §2.1):  φ(x) = d_r^{-1/2} e^{-|x|²/2} [e^{ω_rᵀx}]_r, so
// E φ(x)ᵀφ(y) = e^{xᵀy} for SCALED x, y. The ω come from models/iclca/iclaa.h's PerformerFeatures (orthogonal = ORF).
struct RandomFeatures : FeatureMap {
    int dk = 0;
    PerformerFeatures f;
    RandomFeatures(int dk, int dr, uint64_t seed, bool orthogonal = false);
    int dim() const override { return f.m; }
    void phi(double* out, const double* x) const override;
};

int64_t binomial(int n, int k);

// ---- one dual problem -------------------------------------------------------------------------------------------

struct DualData {
    int n = 0, dk = 0, dv = 0;
    std::vector<double> K;  // (n,dk) scaled keys k_i (the dual's training inputs)
    std::vector<double> V;  // (n,dv) values v_i (its targets)
    std::vector<double> q;  // (dk)   scaled query (its test input)
};

// Query t of head h from an engine qkv (T,3C): training set = tokens 0..t (causal), scaled by hs^{-1/4}.
DualData dual_from_qkv(const double* qkv, int T, int C, int NH, int h, int t);

double dual_log_D(const DualData& d);                       // log D = log Σ_i exp(k_iᵀq)
std::vector<double> dual_kernel_output(const DualData& d);  // (dv) Σ_i e^{k_iᵀq − log D} v_i   (W_0 = 0, kernel trick)
std::vector<double> feature_rows(const FeatureMap& f, const std::vector<double>& X, int n);  // (n,dr) φ of every row
// ∂L/∂W = −1/(η D) Vᵀ Φ_K   (dv,dr)
std::vector<double> dual_gradient(const DualData& d, const std::vector<double>& PhiK, int dr, double eta, double logD);
// L(W) = −1/(η D) Σ_i v_iᵀ W φ(k_i)
double dual_loss(const DualData& d, const std::vector<double>& PhiK, int dr, const std::vector<double>& W, double eta, double logD);
// y = W φ  (dv)
std::vector<double> dual_predict(const std::vector<double>& W, const std::vector<double>& phi, int dv, int dr);
// One gradient step of (9) from W0 (empty = 0) with learning rate eta; returns ŷ = W_1 φ(q). W1 (optional) receives W_1.
std::vector<double> dual_one_step(const DualData& d, const FeatureMap& f, double eta, const std::vector<double>& W0,
                                  std::vector<double>* W1 = nullptr);

// ---- the checks (spec §7 R1–R4, R6; §8 I1–I17, I20) ------------------------------------------------------------

struct CheckResult {
    std::string id;    // "I3", "R1", ...
    std::string what;  // one line
    double err = 0;    // measured (relative unless the line says otherwise)
    double tol = 0;
    bool pass = false;
    std::string cmp = "<=";  // how err is compared with tol ("<=", or "in" for a range check, tol2 = upper)
    double tol2 = 0;
};

// Every check, each with its own fresh random instance from `seed`. Seconds on one core. The exact ones (fp64
// identities: I1–I8, I10–I17) and the statistical ones (I9 random features, R6 Theorem 3.2's trend, I20 the task).
std::vector<CheckResult> duallens_exact_checks(uint64_t seed);
std::vector<CheckResult> duallens_statistical_checks(uint64_t seed);
std::vector<CheckResult> duallens_checks(uint64_t seed);  // both

// R1's tensors for --dump-npy: A (N) attention of the last query, D, W1 (dv,dr), y (dv), h (dv).
struct R1Tensors {
    int N = 0, dv = 0, dr = 0;
    std::vector<double> A, W1, y, h;
    double D = 0, relerr_taylor = 0, relerr_kernel = 0;
};
R1Tensors r1_tensors(uint64_t seed);

// R3: ‖ŷ_t − h'‖² for t = 0..K (K steps at learning rate η/K from 0) with Taylor features, and the theory (1−t/K)²‖h'‖².
void kstep_curve(uint64_t seed, int K, std::vector<double>& measured, std::vector<double>& theory, const FeatureMap* f = nullptr);

// R2: mean relative errors of the PRF approximation over `seeds` draws of ω, per feature count d_r.
struct PrfRow {
    int dr = 0;
    double err_Au = 0;     // ‖Â_u − A_u‖_F / ‖A_u‖_F over the all-token (causal) unnormalized attention matrix
    double err_out = 0;    // Performer output (D̂ from the features) vs the attention output, relative, all queries
    double err_y = 0;      // the dual's ŷ (exact D, the paper's constant) vs h' at the last query
    double sd_out = 0;     // std over seeds of err_out
};
std::vector<PrfRow> prf_convergence(const std::vector<int>& drs, int seeds, uint64_t seed);
double loglog_slope(const std::vector<double>& x, const std::vector<double>& y);  // least squares on log-log axes

// R6: Theorem 3.2's excess representation loss w‖G_pop‖(1 − cos θ_S) (w = 1) per demonstration count N.
struct Theorem32Row {
    int N = 0;
    double excess = 0, excess_sd = 0;  // mean and std over reps
    double trK_over_N = 0;             // Tr(K_S)/N, K_S the keys' Gram matrix e^{k_iᵀk_j}
    double bound_term = 0;             // sqrt(Tr K_S)/N (the bound's first term without constants)
};
// G_pop = E[v φ(k)ᵀ] enters through kernel sums in closed form (Gaussian tokens; spec §6 suggests a Monte Carlo
// estimate, whose O(M^{-1/2}) direction error would put a floor under the trend); gpop_exact / gpop_mc (optional)
// receive |G_pop|_F in closed form and by the spec's Monte Carlo over M tokens (M > 1), for comparison.
// At least `reps` draws of S per N (more for small N).
std::vector<Theorem32Row> theorem32_trend(const std::vector<int>& Ns, int reps, int M, uint64_t seed, double* gpop_exact = nullptr,
                                          double* gpop_mc = nullptr);

// ---- the in-context regression task of R5 (tokens [x; y], query [x_q; 0]) and its reference predictors -----------

struct RegTask {
    int d = 5, N = 20;
    double noise = 0;
    int T() const { return N + 1; }
};
// B prompts: vectors (B, N+1, d+1); the target y_q (noisy if noise > 0) at the last position, mask 1 there only.
Batch regression_prompts(const RegTask& task, int B, Rng& rng);

// Normalized MSE (MSE / d) of the reference predictors on a batch of prompts:
struct RegReference {
    double zero = 0;           // ŷ = 0
    double ols = 0;            // least squares on the context
    double gd = 0;             // one GD step from 0 with the optimal η* = N/(N+d+1)
    double gd_theory = 0;      // (d+1)/(N+d+1) (noiseless)
    double smoother = 0;       // best hand-built head ŷ = c Σ_i softmax_i(b x_iᵀx_q) y_i over the context AND the query
                               // (its y slot 0), as a causal head at the query sees them (b on a grid, c least squares)
    double smoother_b = 0, smoother_c = 0;
};
RegReference regression_references(const RegTask& task, const Batch& prompts);
// The hand-built smoother with negative samples (spec §7 R5 predictions): values y_i − β·mean_{N(i)} y_j with the
// neighbour rule (lowsim by raw x similarity, random, all) among the context and the query, best b and c.
double negative_smoother(const RegTask& task, const Batch& prompts, double beta, NegRule rule, int k, uint64_t seed);

// ---- M1: the theory-faithful one-head model (spec §7 R5) --------------------------------------------------------
//   qkv = X·W_qkvᵀ (no bias; W_Q, W_K, W_V ∈ R^{D×D}, D = d+1), [augmented adapters], one softmax head (causal:
//   the query, last, sees every token) with the modifications, ŷ = the last coordinate of h' at each position,
//   MSE at the query. 3D² = 108 parameters at d = 5 (+ the adapters).
struct HeadConfig {
    int D = 6;          // token width d+1
    int sim_cols = 5;   // negative lowsim (input similarity): the first sim_cols coordinates of each token (raw x)
    AttnMods mod;
    float init_std = 0.3f;
    nlohmann::json to_json() const;
    int64_t num_params() const;
};
TensorTable head_parameters(const HeadConfig& c);

template <typename real>
struct OneHead {
    HeadConfig cfg;
    ModelState<real> s;
    int B = 0, T = 0;
    OneHead(const HeadConfig& cfg, Device dev, uint64_t seed);
    double forward(const Batch& batch);   // masked mean of the squared error, times scale.ce (models/lm_io.h)
    LossScale scale;                      // gradient accumulation's share of this micro-batch (1 otherwise)
    void skip_forward(const Batch&) { forwards_++; }  // another process's micro-batch: the random-neighbour count moves
    void backward();
    std::vector<real> outputs();          // (B,T) predictions
    BatchSpec batch_spec() const;         // what forward accepts (data/batch.h): vectors of width D, one target each
private:
    void layout(int B, int T);
    DeviceBatch<real> in_;                // the last forward's batch on the device (models/lm_io.h)
    Buffer<real> d_sim_, d_dloss_, d_readout_, scratch_;
    std::vector<real> dloss_host_;
    uint64_t seed_ = 0, forwards_ = 0;
};

}  // namespace icl
