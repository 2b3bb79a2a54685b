// dual_regression.cpp — the in-context regression task of R5, its reference predictors (zero, OLS, one GD step,
// hand-built smoothers) and M1, the theory-faithful one-head model. See dual_model.h.
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
#include "models/lm_io.h"

namespace icl {

using dual::vec;
using namespace dual;

namespace {

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
    s.create(dev, "duallens_head", cfg.to_json(), head_parameters(cfg), seed);
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
    s.set_activations(std::move(t.acts), std::move(t.grads));
    const size_t sc = attention_scratch_size(B, T, cfg.D, 1);
    ensure_size(scratch_, s.dev, sc);
}

template <typename real>
double OneHead<real>::forward(const Batch& bt) {
    in_.upload(s.dev, bt, batch_spec());  // the batch contract (data/batch.h), then the device copies
    layout(bt.B, bt.T);
    forwards_++;
    const Device dev = s.dev;
    const int N = B * T, D = cfg.D;
    const real* X = in_.vectors.ptr;
    const AttnMods& m = cfg.mod;
    const real* sim = nullptr;
    if (m.needs_sim_src()) {  // the input similarity reads the raw x part of each token
        std::vector<real> xs((size_t)N * cfg.sim_cols);
        for (int n = 0; n < N; n++)
            for (int e = 0; e < cfg.sim_cols; e++) xs[(size_t)n * cfg.sim_cols + e] = (real)bt.vectors[(size_t)n * D + e];
        ensure_size(d_sim_, dev, xs.size());
        s.upload(d_sim_, 0, xs.data(), xs.size());
        sim = d_sim_.ptr;
    }
    // qkv = X W_qkvᵀ
    op::matmul_forward(dev, s.act("qkv"), X, s.param("attn.qkv.w"), (const real*)nullptr, N, D, 3 * D);
    if (m.adapters_active()) {
        if (m.g2) op::qkv_adapter_forward(dev, s.act("qkv"), s.act("adk.z"), s.act("adk.u"), X, s.param("attn.adk.A"), s.param("attn.adk.B"), m.c, 1, N, D, D, m.dh);
        if (m.g1) op::qkv_adapter_forward(dev, s.act("qkv"), s.act("adv.z"), s.act("adv.u"), X, s.param("attn.adv.A"), s.param("attn.adv.B"), m.c, 2, N, D, D, m.dh);
    }
    // h' = attention(qkv) with the modifications (plain when none)
    op::attention_mod_forward(dev, s.act("atty"), s.act("att"), scratch_.ptr, s.act("qkv"), sim, m, seed_ * 0x9E3779B97F4A7C15ull + forwards_, B, T, D, 1,
                              cfg.sim_cols);
    // ŷ = last coordinate of h'
    op::matmul_forward(dev, s.act("pred"), s.act("atty"), d_readout_.ptr, (const real*)nullptr, N, D, 1);
    if (!in_.has_targets) { dloss_host_.clear(); return NAN; }
    // losses = (ŷ − y)² ; the masked mean and its gradient (models/lm_io.h)
    op::mse_forward(dev, s.act("losses"), s.act("pred"), in_.target_vecs.ptr, N, 1);
    return scale.ce * masked_mean(s, "losses", in_.weight, scale.ce, dloss_host_);
}

template <typename real>
void OneHead<real>::backward() {
    if (dloss_host_.empty()) fail("backward() needs a forward() with targets first");
    const Device dev = s.dev;
    const int N = B * T, D = cfg.D;
    const AttnMods& m = cfg.mod;
    s.zero_grad();
    ensure_size(d_dloss_, dev, N);
    s.upload(d_dloss_, 0, dloss_host_.data(), N);
    op::mse_backward(dev, s.dact("pred"), d_dloss_.ptr, s.act("pred"), in_.target_vecs.ptr, N, 1);
    // pred = atty·eᵀ
    op::matmul_backward(dev, s.dact("atty"), (real*)nullptr, (real*)nullptr, s.dact("pred"), s.act("atty"), d_readout_.ptr, N, D, 1);
    // atty = attention_mod(qkv)
    op::attention_mod_backward(dev, s.dact("qkv"), scratch_.ptr, s.dact("atty"), s.act("qkv"), s.act("att"), m.needs_sim_src() ? d_sim_.ptr : nullptr, m,
                               seed_ * 0x9E3779B97F4A7C15ull + forwards_, B, T, D, 1, cfg.sim_cols);
    // qkv[v] += c·ReLU(X A_Vᵀ) B_Vᵀ ;  qkv[k] += c·ReLU(X A_Kᵀ) B_Kᵀ   (the input X is data: no dinp)
    if (m.adapters_active()) {
        if (m.g1) op::qkv_adapter_backward(dev, (real*)nullptr, s.grad("attn.adv.A"), s.grad("attn.adv.B"), s.dact("adv.z"), s.dact("qkv"), in_.vectors.ptr, s.act("adv.z"),
                                           s.act("adv.u"), s.param("attn.adv.A"), s.param("attn.adv.B"), m.c, 2, N, D, D, m.dh);
        if (m.g2) op::qkv_adapter_backward(dev, (real*)nullptr, s.grad("attn.adk.A"), s.grad("attn.adk.B"), s.dact("adk.z"), s.dact("qkv"), in_.vectors.ptr, s.act("adk.z"),
                                           s.act("adk.u"), s.param("attn.adk.A"), s.param("attn.adk.B"), m.c, 1, N, D, D, m.dh);
    }
    // qkv = X W_qkvᵀ
    op::matmul_backward(dev, (real*)nullptr, s.grad("attn.qkv.w"), (real*)nullptr, s.dact("qkv"), in_.vectors.ptr, s.param("attn.qkv.w"), N, D, 3 * D);
}

template <typename real>
BatchSpec OneHead<real>::batch_spec() const {
    return lm_batch_spec(0, cfg.D, 1, 1 << 30, "one-head model");  // no positions: any T
}

template <typename real>
std::vector<real> OneHead<real>::outputs() {
    return s.fetch_act("pred");
}

template struct OneHead<float>;
template struct OneHead<double>;

}  // namespace icl
