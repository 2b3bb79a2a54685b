// tint_oracle.cpp — oracle A (the auxiliary model's forward plus TinT's approximate backward, written plainly)
// and oracle B (exact SGD through the GPT's own backward). See tint_oracle.h.
#include "models/tint/tint_oracle.h"

#include <algorithm>
#include <cmath>

#include "engine/common.h"
#include "engine/rng.h"
#include "layers/gelu.h"
#include "layers/layernorm.h"
#include "layers/matmul.h"
#include "layers/relu.h"

namespace icl {

namespace {

// The activations of one sequence through the auxiliary model: what the approximate backward reads.
template <typename real>
struct Trace {
    struct Layer {
        std::vector<real> x, xh1, u1, qkv, att, o, res2, xh2, u2, z, a;  // att (n_h,T,T)
    };
    std::vector<Layer> layers;
    std::vector<real> xL, xhf, hf, logits;
};

// One sequence with its masks (sequence b of a TinT input).
struct SeqView {
    int T = 0;
    std::vector<int> ids, pos;
    std::vector<uint8_t> train, icl, m;  // icl (T,T) or empty; m: the loss mask
};

SeqView view(const TintInput& in, int b) {
    SeqView v;
    v.T = in.T;
    const size_t o = (size_t)b * in.T;
    v.ids.assign(in.ids.begin() + o, in.ids.begin() + o + in.T);
    for (int t = 0; t < in.T; t++) v.pos.push_back(in.pos.empty() ? t : in.pos[o + t]);
    v.train.assign(in.train.begin() + o, in.train.begin() + o + in.T);
    if (!in.icl.empty()) v.icl.assign(in.icl.begin() + o * in.T, in.icl.begin() + (o + in.T) * in.T);
    v.m = in.loss_mask(b);
    return v;
}

template <typename real>
struct Params {  // named views into a registry-layout vector
    const TensorTable& t;
    std::vector<real>& p;
    real* operator()(const std::string& n) { return p.data() + t.offset(n); }
};

// x̂ = f(x) = (x − mean)/sqrt(var + 1e-5) per row: the engine's layernorm with γ = 1, β = 0 (as TinT's group norm)
template <typename real>
std::vector<real> normalize(const std::vector<real>& x, int T, int d) {
    std::vector<real> xh(x.size()), mean(T), rstd(T), ones(d, real(1)), zeros(d, real(0));
    layernorm_forward(xh.data(), mean.data(), rstd.data(), x.data(), ones.data(), zeros.data(), T, d);
    return xh;
}

template <typename real>
void activation(std::vector<real>& out, const std::vector<real>& in, ActKind a) {
    out.resize(in.size());
    if (a == ActKind::relu) relu_forward(out.data(), in.data(), in.size());
    else gelu_forward(out.data(), in.data(), in.size());
}

template <typename real>
Trace<real> forward(Params<real>& P, const TintConfig& c, const SeqView& s) {
    const int T = s.T, d = c.d, nh = c.n_h, dh = d / nh, V = c.V;
    Trace<real> tr;
    std::vector<real> x((size_t)T * d);
    const real* wte = P("wte");
    const real* wpe = P("wpe");
    for (int t = 0; t < T; t++)
        for (int j = 0; j < d; j++) x[(size_t)t * d + j] = wte[(size_t)s.ids[t] * d + j] + wpe[(size_t)s.pos[t] * d + j];
    const real scale = (real)(1.0 / std::sqrt((double)dh));
    auto affine = [&](const std::vector<real>& xh, const real* g, const real* bb) {
        std::vector<real> u(xh.size());
        for (int t = 0; t < T; t++)
            for (int j = 0; j < d; j++) u[(size_t)t * d + j] = g[j] * xh[(size_t)t * d + j] + bb[j];
        return u;
    };
    for (int l = 0; l < c.L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        typename Trace<real>::Layer Ly;
        Ly.x = x;
        // u1 = LN1(x)
        Ly.xh1 = normalize(x, T, d);
        Ly.u1 = affine(Ly.xh1, P(h + "ln1.w"), P(h + "ln1.b"));
        // [q|k|v] = u1 Wqkvᵀ + b
        Ly.qkv.resize((size_t)T * 3 * d);
        matmul_forward(Ly.qkv.data(), Ly.u1.data(), P(h + "attn.qkv.w"), P(h + "attn.qkv.b"), T, d, 3 * d);
        // causal softmax attention per head, with the ICL mask
        Ly.att.assign((size_t)nh * T * T, real(0));
        Ly.o.assign((size_t)T * d, real(0));
        for (int hh = 0; hh < nh; hh++)
            for (int t = 0; t < T; t++) {
                real* a = Ly.att.data() + ((size_t)hh * T + t) * T;
                const real* q = Ly.qkv.data() + (size_t)t * 3 * d + hh * dh;
                real mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    if (!s.icl.empty() && !s.icl[(size_t)t * T + j]) continue;
                    const real* kk = Ly.qkv.data() + (size_t)j * 3 * d + d + hh * dh;
                    real dot = 0;
                    for (int r = 0; r < dh; r++) dot += q[r] * kk[r];
                    a[j] = scale * dot;
                    mx = std::max(mx, a[j]);
                }
                real z = 0;
                for (int j = 0; j <= t; j++) {
                    if (!s.icl.empty() && !s.icl[(size_t)t * T + j]) continue;
                    a[j] = std::exp(a[j] - mx);
                    z += a[j];
                }
                real* o = Ly.o.data() + (size_t)t * d + hh * dh;
                for (int j = 0; j <= t; j++) {
                    a[j] /= z;
                    if (a[j] == real(0)) continue;
                    const real* v = Ly.qkv.data() + (size_t)j * 3 * d + 2 * d + hh * dh;
                    for (int r = 0; r < dh; r++) o[r] += a[j] * v[r];
                }
            }
        std::vector<real> y((size_t)T * d);
        matmul_forward(y.data(), Ly.o.data(), P(h + "attn.proj.w"), P(h + "attn.proj.b"), T, d, d);
        Ly.res2.resize(x.size());
        for (size_t i = 0; i < x.size(); i++) Ly.res2[i] = x[i] + y[i];
        // res3 = res2 + W2 σ(W1 LN2(res2) + b1) + b2
        Ly.xh2 = normalize(Ly.res2, T, d);
        Ly.u2 = affine(Ly.xh2, P(h + "ln2.w"), P(h + "ln2.b"));
        Ly.z.resize((size_t)T * 4 * d);
        matmul_forward(Ly.z.data(), Ly.u2.data(), P(h + "mlp.fc.w"), P(h + "mlp.fc.b"), T, d, 4 * d);
        activation(Ly.a, Ly.z, c.act);
        matmul_forward(y.data(), Ly.a.data(), P(h + "mlp.proj.w"), P(h + "mlp.proj.b"), T, 4 * d, d);
        for (size_t i = 0; i < x.size(); i++) x[i] = Ly.res2[i] + y[i];
        tr.layers.push_back(std::move(Ly));
    }
    tr.xL = x;
    tr.xhf = normalize(x, T, d);
    tr.hf = affine(tr.xhf, P("lnf.w"), P("lnf.b"));
    tr.logits.resize((size_t)T * V);
    matmul_forward(tr.logits.data(), tr.hf.data(), wte, (const real*)nullptr, T, d, V);
    return tr;
}

// TinT's LayerNorm backward (Def 2.8): (1/ε)·f(x + ε·γ⊙dy) − (1/ε)·x̂, written as the simulator computes it.
template <typename real>
std::vector<real> ln_fd(const std::vector<real>& x, const std::vector<real>& xh, const real* gamma, const std::vector<real>& dy, int T,
                        int d, double eps) {
    std::vector<real> xs(x.size());
    const real e = (real)eps, n = (real)(1 / eps);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < d; j++) xs[(size_t)t * d + j] = e * (gamma[j] * dy[(size_t)t * d + j]) + x[(size_t)t * d + j];
    std::vector<real> f = normalize(xs, T, d), out(x.size());
    for (size_t i = 0; i < x.size(); i++) out[i] = n * f[i] - n * xh[i];
    return out;
}

// TinT's activation backward (Def F.1): (1/ε)·σ(z + ε·dy) − (1/ε)·σ(z).
template <typename real>
std::vector<real> act_fd(const std::vector<real>& z, const std::vector<real>& a, const std::vector<real>& dy, ActKind act, double eps) {
    std::vector<real> zs(z.size()), as, out(z.size());
    const real e = (real)eps, n = (real)(1 / eps);
    for (size_t i = 0; i < z.size(); i++) zs[i] = e * dy[i] + z[i];
    activation(as, zs, act);
    for (size_t i = 0; i < z.size(); i++) out[i] = n * as[i] - n * a[i];
    return out;
}

// rows t with train[t] = 0 zeroed (the descent sums only over training tokens)
template <typename real>
std::vector<real> train_rows(const std::vector<real>& g, const std::vector<uint8_t>& train, int width) {
    std::vector<real> r = g;
    for (size_t t = 0; t < train.size(); t++)
        if (!train[t]) std::fill(r.begin() + t * width, r.begin() + (t + 1) * width, real(0));
    return r;
}

// out = inp·Wᵀ + b: ∂inp += dout·W (all tokens), dW += Σ_train dout inpᵀ, db += Σ_train dout.
template <typename real>
void linear_bwd(std::vector<real>& dinp, real* dW, real* db, const std::vector<real>& dout, const std::vector<real>& inp, const real* W,
                const std::vector<uint8_t>& train, int T, int C, int OC) {
    dinp.assign((size_t)T * C, real(0));
    matmul_backward(dinp.data(), (real*)nullptr, (real*)nullptr, dout.data(), inp.data(), W, T, C, OC);
    std::vector<real> dm = train_rows(dout, train, OC);
    matmul_backward((real*)nullptr, dW, db, dm.data(), inp.data(), W, T, C, OC);
}

// The approximate gradient of Σ m_t CE_t (TinT's backward) for the top k layers, into g (registry layout).
template <typename real>
void approx_gradient(std::vector<real>& g, Params<real>& P, Params<real>& G, const Trace<real>& tr, const TintConfig& c, const SeqView& s,
                     int k) {
    const int T = s.T, d = c.d, nh = c.n_h, dh = d / nh, V = c.V, L = c.L;
    std::fill(g.begin(), g.end(), real(0));
    // loss gradient at the output, then ln_f: β_f descent and the FD backward
    std::vector<real> gh((size_t)T * d);
    tint_loss_gradient(gh.data(), tr.logits.data(), P("wte"), s.ids.data(), s.m.data(), T, d, V);
    // the LayerNorm descent: β −= η Σ_train ∂y; with c.ln_gamma also γ −= η Σ_train ∂y⊙x̂ (docs/tint.md)
    auto ln_descent = [&](const std::string& w, const std::string& b, const std::vector<real>& dy, const std::vector<real>& xh) {
        std::vector<real> dm = train_rows(dy, s.train, d);
        real* db = G(b);
        real* dg = G(w);
        for (int t = 0; t < T; t++)
            for (int j = 0; j < d; j++) {
                db[j] += dm[(size_t)t * d + j];
                if (c.ln_gamma) dg[j] += dm[(size_t)t * d + j] * xh[(size_t)t * d + j];
            }
    };
    ln_descent("lnf.w", "lnf.b", gh, tr.xhf);
    std::vector<real> dx = ln_fd(tr.xL, tr.xhf, P("lnf.w"), gh, T, d, c.eps);
    for (int l = L - 1; l >= L - k; l--) {
        const std::string h = "h." + std::to_string(l) + ".";
        const auto& Ly = tr.layers[l];
        const std::vector<real> gout = dx;
        // res3 = res2 + a·W2ᵀ + b2 ; a = σ(z) ; z = u2·W1ᵀ + b1
        std::vector<real> da, du2;
        linear_bwd(da, G(h + "mlp.proj.w"), G(h + "mlp.proj.b"), gout, Ly.a, P(h + "mlp.proj.w"), s.train, T, 4 * d, d);
        std::vector<real> dz = act_fd(Ly.z, Ly.a, da, c.act, c.eps);
        linear_bwd(du2, G(h + "mlp.fc.w"), G(h + "mlp.fc.b"), dz, Ly.u2, P(h + "mlp.fc.w"), s.train, T, d, 4 * d);
        // u2 = γ2⊙f(res2) + β2: β2 descent (γ2 frozen unless c.ln_gamma) and the FD backward
        ln_descent(h + "ln2.w", h + "ln2.b", du2, Ly.xh2);
        std::vector<real> g2 = ln_fd(Ly.res2, Ly.xh2, P(h + "ln2.w"), du2, T, d, c.eps);
        for (size_t i = 0; i < g2.size(); i++) g2[i] += gout[i];
        // res2 = x + o·W_Oᵀ + b_O
        std::vector<real> dout;
        linear_bwd(dout, G(h + "attn.proj.w"), G(h + "attn.proj.b"), g2, Ly.o, P(h + "attn.proj.w"), s.train, T, d, d);
        // value path only (Def 2.12): dv_t = Σ_j a_{j,t} do_j over j that train or j = t, per head
        std::vector<real> dv((size_t)T * d, real(0));
        for (int hh = 0; hh < nh; hh++)
            for (int t = 0; t < T; t++) {
                real* v = dv.data() + (size_t)t * d + hh * dh;
                for (int j = 0; j < T; j++) {
                    if (!(s.train[j] || j == t)) continue;
                    const real a = Ly.att[((size_t)hh * T + j) * T + t];
                    if (a == real(0)) continue;
                    const real* o = dout.data() + (size_t)j * d + hh * dh;
                    for (int r = 0; r < dh; r++) v[r] += a * o[r];
                }
            }
        // v = u1·W_Vᵀ + b_V (rows 2d..3d of attn.qkv; W_Q, W_K frozen)
        std::vector<real> du1;
        linear_bwd(du1, G(h + "attn.qkv.w") + (size_t)2 * d * d, G(h + "attn.qkv.b") + 2 * d, dv, Ly.u1, P(h + "attn.qkv.w") + (size_t)2 * d * d,
                   s.train, T, d, d);
        ln_descent(h + "ln1.w", h + "ln1.b", du1, Ly.xh1);
        std::vector<real> g1 = ln_fd(Ly.x, Ly.xh1, P(h + "ln1.w"), du1, T, d, c.eps);
        for (size_t i = 0; i < g1.size(); i++) g1[i] += g2[i];
        dx = g1;
    }
}

template <typename real>
std::vector<real> host_params(const GPT<real>& aux) {
    return std::vector<real>(aux.s.params.ptr, aux.s.params.ptr + aux.s.ptable.total);
}

}  // namespace

std::vector<std::pair<size_t, size_t>> tint_trainable(const TensorTable& t, const GPTConfig& g, int k, bool gamma) {
    std::vector<std::pair<size_t, size_t>> r;
    const size_t d = g.C;
    auto whole = [&](const std::string& n) { r.push_back({t.offset(n), t.offset(n) + (size_t)t.spec(n).numel()}); };
    for (int l = g.L - k; l < g.L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        whole(h + "ln1.b");
        if (gamma) { whole(h + "ln1.w"); whole(h + "ln2.w"); }
        r.push_back({t.offset(h + "attn.qkv.w") + 2 * d * d, t.offset(h + "attn.qkv.w") + 3 * d * d});
        r.push_back({t.offset(h + "attn.qkv.b") + 2 * d, t.offset(h + "attn.qkv.b") + 3 * d});
        for (const char* n : {"attn.proj.w", "attn.proj.b", "ln2.b", "mlp.fc.w", "mlp.fc.b", "mlp.proj.w", "mlp.proj.b"}) whole(h + n);
    }
    whole("lnf.b");
    if (gamma) whole("lnf.w");
    return r;
}

Batch tint_batch(const TintInput& in, int b) {
    Batch bt;
    bt.B = 1;
    bt.T = in.T;
    const size_t o = (size_t)b * in.T;
    bt.tokens.assign(in.ids.begin() + o, in.ids.begin() + o + in.T);
    std::vector<uint8_t> m = in.loss_mask(b);
    if (std::count(m.begin(), m.end(), 1) > 0)  // else a forward-only batch (no targets)
        for (int t = 0; t < in.T; t++) {
            bt.targets.push_back(t + 1 < in.T ? in.ids[o + t + 1] : 0);
            bt.mask.push_back((float)m[t]);
        }
    if (!in.pos.empty()) bt.pos.assign(in.pos.begin() + o, in.pos.begin() + o + in.T);
    return bt;
}

template <typename real>
std::vector<real> oracle_a_gradient(const GPT<real>& aux, const TintConfig& c, const TintInput& in, int b, int k) {
    in.validate(c);
    SeqView s = view(in, b);
    std::vector<real> p = host_params(aux), g(p.size(), real(0));
    Params<real> P{aux.s.ptable, p}, G{aux.s.ptable, g};
    Trace<real> tr = forward(P, c, s);
    approx_gradient(g, P, G, tr, c, s, k);
    return g;
}

template <typename real>
OracleOutput<real> oracle_a(const GPT<real>& aux, const TintConfig& c, const TintInput& in, int b, int k, int s) {
    in.validate(c);
    if (k < 0 || k > c.L) fail_usage(strfmt("--k: must be in [0, %d], got %d", c.L, k));
    SeqView sv = view(in, b);
    OracleOutput<real> out;
    out.params = host_params(aux);
    std::vector<real> g(out.params.size(), real(0));
    Params<real> P{aux.s.ptable, out.params}, G{aux.s.ptable, g};
    Trace<real> tr = forward(P, c, sv);
    out.logits0 = tr.logits;
    out.loss0 = tint_loss(tr.logits.data(), sv.ids.data(), sv.m.data(), sv.T, c.V);
    for (int step = 0; step < s; step++) {
        approx_gradient(g, P, G, tr, c, sv, k);
        const real eta = (real)c.eta;
        for (size_t i = 0; i < g.size(); i++)
            if (g[i] != real(0)) out.params[i] -= eta * g[i];
        tr = forward(P, c, sv);
    }
    out.logits1 = tr.logits;
    out.loss1 = tint_loss(tr.logits.data(), sv.ids.data(), sv.m.data(), sv.T, c.V);
    return out;
}

template <typename real>
void tint_random_aux(GPT<real>& m, uint64_t seed, double std) { m.s.randomize_params(seed, std); }

template <typename real>
OracleOutput<real> oracle_b(GPT<real>& aux, const Batch& batch, double eta, int k, int s, bool all, bool gamma) {
    OracleOutput<real> out;
    const std::vector<real> orig = host_params(aux);
    std::vector<real> p = orig;
    double wsum = 0;
    for (float w : batch.mask) wsum += w;
    if (wsum <= 0) fail("oracle B: the batch has no scored position");
    std::vector<std::pair<size_t, size_t>> ranges;
    if (all) ranges.push_back({0, p.size()});
    else ranges = tint_trainable(aux.s.ptable, aux.cfg, k, gamma);
    aux.forward(batch);
    out.logits0 = aux.outputs();
    for (int step = 0; step < s; step++) {
        aux.forward(batch);
        aux.backward();  // the gradient of the masked MEAN: × Σ mask gives the summed loss's
        std::vector<real> g = aux.s.to_host(aux.s.grads, 0, aux.s.ptable.total);
        for (auto& r : ranges)
            for (size_t i = r.first; i < r.second; i++) p[i] -= (real)(eta * wsum) * g[i];
        aux.s.upload(aux.s.params, 0, p.data(), p.size());
    }
    aux.forward(batch);
    out.logits1 = aux.outputs();
    out.params = p;
    aux.s.upload(aux.s.params, 0, orig.data(), orig.size());
    return out;
}

#define ICL_ORACLE_INSTANTIATE(real)                                                                                   \
    template OracleOutput<real> oracle_a(const GPT<real>&, const TintConfig&, const TintInput&, int, int, int);       \
    template std::vector<real> oracle_a_gradient(const GPT<real>&, const TintConfig&, const TintInput&, int, int);    \
    template OracleOutput<real> oracle_b(GPT<real>&, const Batch&, double, int, int, bool, bool);                    \
    template void tint_random_aux(GPT<real>&, uint64_t, double);
ICL_ORACLE_INSTANTIATE(float)
ICL_ORACLE_INSTANTIATE(double)

}  // namespace icl
