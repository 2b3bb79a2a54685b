// tint_sim.cpp — the TinT orchestrator: the auxiliary model's inputs, the §4.7 schedule of simulated forward,
// backward and descent passes, the loss head, and the parameter-count formula. Primitives: tint_primitives.cpp;
// module constructors: tint_modules.cpp. See tint_sim.h and spec/tint.md.
#include "models/tint/tint_sim.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/common.h"
#include "layers/gelu.h"
#include "layers/layernorm.h"
#include "layers/matmul.h"
#include "layers/parallel.h"
#include "layers/relu.h"

namespace icl {

// ------------------------------------------------------------------------------------------------------
// inputs

void TintInput::validate(const TintConfig& c) const {
    if (B < 1 || T < 2) fail(strfmt("TinT input: need B >= 1 and T >= 2, got B=%d T=%d", B, T));
    const size_t n = (size_t)B * T;
    if (ids.size() != n) fail("TinT input: ids must hold B·T tokens");
    if (!pos.empty() && pos.size() != n) fail("TinT input: pos must be empty or hold B·T positions");
    if (train.size() != n) fail("TinT input: train must hold B·T flags");
    if (!label.empty() && label.size() != n) fail("TinT input: label must be empty or hold B·T flags");
    if (!icl.empty() && icl.size() != n * T) fail("TinT input: icl must be empty or hold B·T·T flags");
    for (int t : ids) if (t < 0 || t >= c.V) fail(strfmt("TinT input: token %d outside the vocabulary [0,%d)", t, c.V));
    if (pos.empty() && T > c.T) fail(strfmt("TinT input: %d tokens exceed the auxiliary model's %d positions", T, c.T));
    for (int p : pos) if (p < 0 || p >= c.T) fail(strfmt("TinT input: position %d outside [0,%d)", p, c.T));
    if (!icl.empty())
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                if (!icl[((size_t)b * T + t) * T + t]) fail("TinT input: the ICL mask must let every token attend to itself");
}

std::vector<uint8_t> TintInput::loss_mask(int b) const {
    std::vector<uint8_t> m(T, 0);
    for (int t = 0; t + 1 < T; t++) {
        const size_t n = (size_t)b * T + t + 1;
        m[t] = train[n] && (label.empty() || label[n]);
    }
    return m;
}

// ------------------------------------------------------------------------------------------------------
// the orchestrator

namespace {

// The 18 prefix tensors of one auxiliary block (spec §4.6), each (K,D). Activation modules read zero prefixes.
template <typename real>
struct BlockPrefixes {
    std::vector<real> ln1, q, k, v, o, ln2;
    std::vector<std::vector<real>> fc1, fc2;  // 4 FFN chunks each
};

// The memory regions the forward modules of one block leave in the data rows, re-injected before the matching
// backward module (spec §4.6, §11.3): each (T, D − offset).
template <typename real>
struct BlockMemory {
    std::vector<real> ln1, attn, out, ln2;
    std::vector<std::vector<real>> fc1, act, fc2;
};

// Everything one sequence carries through the schedule.
template <typename real>
struct SeqRun {
    const Tint<real>& tt;
    const TintConfig& c;
    tint::Seq seq;
    int K, T, N, D, d;
    std::vector<real> X;                      // (N,D) the state: prefix rows, then data rows
    std::vector<BlockPrefixes<real>> P;       // per aux layer
    std::vector<real> lnf, zeros;             // ln_f prefix; the activation modules' all-zero prefix
    std::vector<BlockMemory<real>> M;         // per aux layer (the top k)
    std::vector<real> lnf_mem;
    int fwd_blocks = 0, bwd_blocks = 0;

    SeqRun(const Tint<real>& t, const tint::Seq& s) : tt(t), c(t.cfg), seq(s) {
        K = c.K(); T = s.T; N = K + T; D = c.D(); d = c.d;
        X.assign((size_t)N * D, real(0));
        zeros.assign((size_t)K * D, real(0));
    }
    real* row(std::vector<real>& Y, int t) { return Y.data() + (size_t)(K + t) * D; }
    void put_prefix(std::vector<real>& Y, const std::vector<real>& p) { std::copy(p.begin(), p.end(), Y.begin()); }
    void take_prefix(std::vector<real>& p, const std::vector<real>& Y) { std::copy(Y.begin(), Y.begin() + (size_t)K * D, p.begin()); }
    std::vector<real> signal(std::vector<real>& Y) {  // (T,d) data rows [0,d)
        std::vector<real> g((size_t)T * d);
        for (int t = 0; t < T; t++) std::copy(row(Y, t), row(Y, t) + d, g.data() + (size_t)t * d);
        return g;
    }
    void set_signal(std::vector<real>& Y, const std::vector<real>& g) {  // data rows = [g | 0]
        for (int t = 0; t < T; t++) {
            real* r = row(Y, t);
            std::copy(g.data() + (size_t)t * d, g.data() + (size_t)(t + 1) * d, r);
            std::fill(r + d, r + D, real(0));
        }
    }
    std::vector<real> store(std::vector<real>& Y, int lo) {  // data rows [lo, D)
        std::vector<real> m((size_t)T * (D - lo));
        for (int t = 0; t < T; t++) std::copy(row(Y, t) + lo, row(Y, t) + D, m.data() + (size_t)t * (D - lo));
        return m;
    }
    void restore(std::vector<real>& Y, const std::vector<real>& m, int lo) {
        for (int t = 0; t < T; t++) std::copy(m.data() + (size_t)t * (D - lo), m.data() + (size_t)(t + 1) * (D - lo), row(Y, t) + lo);
    }
    void run(const tint::Module<real>& m, std::vector<real>& Y) { tint::module_forward(m, Y.data(), seq, c); }
    // Linear_Descent_Backward: backward and descent on the same input, in parallel (backward reads the old W).
    void descent_backward(std::vector<real>& Y, std::vector<real>& pref, const tint::Module<real>& bwd, const tint::Module<real>& desc) {
        put_prefix(Y, pref);
        std::vector<real> Yd = Y;
        run(bwd, Y);
        run(desc, Yd);
        take_prefix(pref, Yd);
    }

    int ln_mem() const { return D - 2 * d; }
    int attn_mem() const { return D - 3 * d; }
    int lin_mem() const { return D - d; }

    // One auxiliary block forward (spec §4.6): X's data rows [h | 0] -> [h'' | 0]. rec: store the memory regions.
    void forward_block(int l, bool rec) {
        BlockPrefixes<real>& p = P[l];
        BlockMemory<real>& m = M[l];
        const int nc = c.ffn_chunks();
        std::vector<real> h = signal(X);
        // LN1
        put_prefix(X, p.ln1);
        run(tt.ln_fwd, X);
        if (rec) m.ln1 = store(X, ln_mem());
        // Q, K, V: one shared Linear Forward module applied three times in parallel (spec §4.3), then routed
        // into [q | k | v | x] (the code's concatenation of the three outputs)
        std::vector<real> Xq = X, Xk = X, Xv = X;
        put_prefix(Xq, p.q); run(tt.lin_fwd, Xq);
        put_prefix(Xk, p.k); run(tt.lin_fwd, Xk);
        put_prefix(Xv, p.v); run(tt.lin_fwd, Xv);
        std::vector<real> Z = Xq;
        for (int t = 0; t < T; t++) {
            real* z = row(Z, t);
            std::fill(z + d, z + D, real(0));
            std::copy(row(Xk, t), row(Xk, t) + d, z + d);
            std::copy(row(Xv, t), row(Xv, t) + d, z + 2 * d);
            std::copy(row(X, t), row(X, t) + d, z + (size_t)c.S * d);
        }
        run(tt.attn_fwd, Z);
        if (rec) m.attn = store(Z, attn_mem());
        put_prefix(Z, p.o);
        run(tt.lin_fwd_mem, Z);
        if (rec) m.out = store(Z, lin_mem());
        std::vector<real> y = signal(Z);
        for (size_t i = 0; i < h.size(); i++) h[i] += y[i];  // residual (on [0,d) only, spec §4.6)
        set_signal(X, h);
        // LN2, then the 4 FFN chunks through one shared (fc1, act, fc2) triple (spec §4.5)
        put_prefix(X, p.ln2);
        run(tt.ln_fwd, X);
        if (rec) m.ln2 = store(X, ln_mem());
        if (rec) { m.fc1.assign(nc, {}); m.act.assign(nc, {}); m.fc2.assign(nc, {}); }
        std::vector<real> acc = h;
        for (int kk = 0; kk < nc; kk++) {
            std::vector<real> Y = X;
            put_prefix(Y, p.fc1[kk]); run(tt.lin_fwd_mem, Y);
            if (rec) m.fc1[kk] = store(Y, lin_mem());
            put_prefix(Y, zeros); run(tt.act_fwd, Y);
            if (rec) m.act[kk] = store(Y, lin_mem());
            put_prefix(Y, p.fc2[kk]); run(tt.lin_fwd_mem, Y);
            if (rec) m.fc2[kk] = store(Y, lin_mem());
            std::vector<real> yk = signal(Y);
            for (size_t i = 0; i < acc.size(); i++) acc[i] += yk[i];
        }
        set_signal(X, acc);
        fwd_blocks++;
    }

    // One auxiliary block backward + descent (spec §4.6): X's data rows [g | 0] -> [∂input | 0]; prefixes updated.
    void backward_block(int l) {
        BlockPrefixes<real>& p = P[l];
        const BlockMemory<real>& m = M[l];
        const int nc = c.ffn_chunks();
        std::vector<real> g = signal(X);
        // FFN chunks: fc2 -> activation -> fc1, each from the block-output gradient; the ∂x summed
        std::vector<real> acc((size_t)T * d, real(0));
        for (int kk = 0; kk < nc; kk++) {
            std::vector<real> Y = X;
            set_signal(Y, g);
            restore(Y, m.fc2[kk], lin_mem());
            descent_backward(Y, p.fc2[kk], tt.lin_bwd, tt.lin_desc_fc2);
            put_prefix(Y, zeros);
            restore(Y, m.act[kk], lin_mem());
            run(tt.act_bwd, Y);
            restore(Y, m.fc1[kk], lin_mem());
            descent_backward(Y, p.fc1[kk], tt.lin_bwd, tt.lin_desc);
            std::vector<real> gk = signal(Y);
            for (size_t i = 0; i < acc.size(); i++) acc[i] += gk[i];
        }
        // LN2 backward (finite difference) + β2 descent
        std::vector<real> Y = X;
        set_signal(Y, acc);
        restore(Y, m.ln2, ln_mem());
        descent_backward(Y, p.ln2, tt.ln_bwd, tt.ln_desc);
        std::vector<real> g2 = signal(Y);
        for (size_t i = 0; i < g2.size(); i++) g2[i] += g[i];  // residual
        // out_proj, then the attention's value path and W_V, then LN1
        set_signal(Y, g2);
        restore(Y, m.out, lin_mem());
        descent_backward(Y, p.o, tt.lin_bwd, tt.lin_desc);
        restore(Y, m.attn, attn_mem());
        put_prefix(Y, p.q);  // the softmax module never reads prefixes; W_Q, W_K pass through unchanged
        run(tt.attn_bwd, Y);
        descent_backward(Y, p.v, tt.lin_bwd, tt.lin_desc);  // x (LN1's output) is in block S from the attention memory
        restore(Y, m.ln1, ln_mem());
        descent_backward(Y, p.ln1, tt.ln_bwd, tt.ln_desc);
        std::vector<real> g3 = signal(Y);
        for (size_t i = 0; i < g3.size(); i++) g3[i] += g2[i];  // residual
        set_signal(X, g3);
        bwd_blocks++;
    }

    void lnf_forward(bool rec) {
        put_prefix(X, lnf);
        run(tt.ln_fwd, X);
        if (rec) lnf_mem = store(X, ln_mem());
    }
    void lnf_backward() {
        std::vector<real> g = signal(X);
        set_signal(X, g);
        restore(X, lnf_mem, ln_mem());
        descent_backward(X, lnf, tt.ln_bwd, tt.ln_desc);
    }
    size_t bytes() const {
        size_t n = X.size() + lnf.size() + zeros.size() + lnf_mem.size();
        for (auto& p : P) {
            n += p.ln1.size() + p.q.size() + p.k.size() + p.v.size() + p.o.size() + p.ln2.size();
            for (auto& v : p.fc1) n += v.size();
            for (auto& v : p.fc2) n += v.size();
        }
        for (auto& m : M) {
            n += m.ln1.size() + m.attn.size() + m.out.size() + m.ln2.size();
            for (auto* vv : {&m.fc1, &m.act, &m.fc2})
                for (auto& v : *vv) n += v.size();
        }
        // the largest transient: 3 state copies (Q/K/V calls) + the attention's q, k, v, o, e and one score matrix per head
        n += 3 * X.size() + 6 * X.size() + (size_t)N * N * std::max(c.H_lin(), c.H_sim);
        return n * sizeof(real);
    }
};

template <typename real>
const real* aux_param(const GPT<real>& m, const std::string& name) {
    return m.s.params.ptr + m.s.ptable.offset(name);
}

}  // namespace

template <typename real>
Tint<real>::Tint(const TintConfig& c) : cfg(c) {
    cfg.validate();
    const int S = cfg.S;
    lin_fwd = tint::linear_forward<real>(cfg, {});
    lin_fwd.name = "Linear Forward (Q, K, V)";
    lin_fwd_mem = tint::linear_forward<real>(cfg, {{0, S}});
    lin_fwd_mem.name = "Linear Forward (out_proj, fc1, fc2; input to memory)";
    ln_fwd = tint::ln_forward<real>(cfg);
    act_fwd = tint::act_forward<real>(cfg);
    attn_fwd = tint::attn_forward<real>(cfg);
    lin_bwd = tint::linear_backward<real>(cfg);
    ln_bwd = tint::ln_backward<real>(cfg);
    act_bwd = tint::act_backward<real>(cfg);
    attn_bwd = tint::attn_backward<real>(cfg);
    lin_desc = tint::linear_descent<real>(cfg, false, 1.0);
    // fc2's bias is split as b2/4 over the 4 FFN chunks; each chunk's descent steps its quarter by η/4 so that the
    // decoded b2 takes exactly one SGD step (the official code steps every quarter by η: 4× on b2, docs/tint.md)
    lin_desc_fc2 = tint::linear_descent<real>(cfg, false, 1.0 / cfg.ffn_chunks());
    lin_desc_fc2.name = "Linear Descent (fc2: bias step η/4 per chunk)";
    ln_desc = tint::linear_descent<real>(cfg, true, 1.0);
    // build the sparse forms now, so that sequences can run in parallel on these (shared, const) modules
    for (auto* m : {&lin_fwd, &lin_fwd_mem, &ln_fwd, &act_fwd, &attn_fwd, &lin_bwd, &ln_bwd, &act_bwd, &attn_bwd, &lin_desc, &lin_desc_fc2, &ln_desc})
        for (auto& l : m->layers)
            for (auto* ch : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.o, &l.fc, &l.proj, &l.map, &l.skip})
                for (auto& op : ch->ops) op.prepare();
}

template <typename real>
TintOutput<real> Tint<real>::run(const GPT<real>& aux, const TintInput& in, int k, int s) const {
    const TintConfig& c = cfg;
    const GPTConfig& g = aux.cfg;
    if (g.C != c.d || g.NH != c.n_h || g.L != c.L || g.V != c.V || g.maxT != c.T || (g.act == "relu") != (c.act == ActKind::relu))
        fail("TinT: the auxiliary model's shape differs from the simulator's configuration");
    if (k < 0 || k > c.L) fail_usage(strfmt("--k: the number of simulated layers must be in [0, L=%d], got %d", c.L, k));
    if (s < 0) fail_usage(strfmt("--s: the number of steps must be >= 0, got %d", s));
    in.validate(c);
    ICL_ASSERT(aux.s.dev == Device::cpu);
    const int B = in.B, T = in.T, d = c.d, V = c.V, L = c.L, K = c.K(), nc = c.ffn_chunks();
    TintOutput<real> out;
    out.logits0.assign((size_t)B * T * V, real(0));
    out.logits1.assign((size_t)B * T * V, real(0));
    out.params.assign(B, {});
    const real* wte = aux_param(aux, "wte");
    const real* wpe = aux_param(aux, "wpe");
    std::vector<size_t> bytes(B);
    std::vector<int> fb(B), bb(B);
#pragma omp parallel for schedule(dynamic) if (B > 1 && !omp_in_parallel())
    for (int b = 0; b < B; b++) {
        std::vector<int> pos(T);
        for (int t = 0; t < T; t++) pos[t] = in.pos.empty() ? t : in.pos[(size_t)b * T + t];
        tint::Seq sq;
        sq.K = K; sq.T = T; sq.pos = pos.data();
        sq.train = in.train.data() + (size_t)b * T;
        sq.icl = in.icl.empty() ? nullptr : in.icl.data() + (size_t)b * T * T;
        const int* ids = in.ids.data() + (size_t)b * T;
        std::vector<uint8_t> lmask = in.loss_mask(b);
        SeqRun<real> r(*this, sq);
        // the auxiliary weights as prefix tensors (spec §1, §4.6)
        r.P.resize(L);
        r.M.resize(L);
        auto diag = [&](const std::string& w, const std::string& bias) {
            std::vector<real> Wd((size_t)d * d, real(0));
            const real* gw = aux_param(aux, w);
            for (int i = 0; i < d; i++) Wd[(size_t)i * d + i] = gw[i];
            return tint::encode_linear<real>(c, Wd.data(), d, aux_param(aux, bias));
        };
        for (int l = 0; l < L; l++) {
            const std::string h = "h." + std::to_string(l) + ".";
            BlockPrefixes<real>& p = r.P[l];
            const real* qkv = aux_param(aux, h + "attn.qkv.w");
            const real* qkvb = aux_param(aux, h + "attn.qkv.b");
            p.ln1 = diag(h + "ln1.w", h + "ln1.b");
            p.q = tint::encode_linear<real>(c, qkv, d, qkvb);
            p.k = tint::encode_linear<real>(c, qkv + (size_t)d * d, d, qkvb + d);
            p.v = tint::encode_linear<real>(c, qkv + (size_t)2 * d * d, d, qkvb + 2 * d);
            p.o = tint::encode_linear<real>(c, aux_param(aux, h + "attn.proj.w"), d, aux_param(aux, h + "attn.proj.b"));
            p.ln2 = diag(h + "ln2.w", h + "ln2.b");
            const real* fc = aux_param(aux, h + "mlp.fc.w");
            const real* fcb = aux_param(aux, h + "mlp.fc.b");
            const real* pr = aux_param(aux, h + "mlp.proj.w");  // (d, 4d): chunk kk = columns [kk·d, (kk+1)·d)
            const real* prb = aux_param(aux, h + "mlp.proj.b");
            for (int kk = 0; kk < nc; kk++) {
                p.fc1.push_back(tint::encode_linear<real>(c, fc + (size_t)kk * d * d, d, fcb + (size_t)kk * d));
                p.fc2.push_back(tint::encode_linear<real>(c, pr + (size_t)kk * d, nc * d, prb, 1.0 / nc));
            }
        }
        r.lnf = diag("lnf.w", "lnf.b");
        // data tokens: [wte(x_t) + wpe(p_t), 0, …]
        for (int t = 0; t < T; t++) {
            real* x = r.row(r.X, t);
            for (int j = 0; j < d; j++) x[j] = wte[(size_t)ids[t] * d + j] + wpe[(size_t)pos[t] * d + j];
        }
        // forward of all L layers, recording the memory of the top k; keep the input of layer L−k
        std::vector<real> x_keep;
        for (int l = 0; l < L; l++) {
            if (l == L - k) x_keep = r.signal(r.X);
            r.forward_block(l, l >= L - k);
        }
        if (k == 0) x_keep = r.signal(r.X);
        r.lnf_forward(true);
        std::vector<real> logits((size_t)T * V), grad((size_t)T * d);
        std::vector<real> hf = r.signal(r.X);
        matmul_forward(logits.data(), hf.data(), wte, (const real*)nullptr, T, d, V);
        std::copy(logits.begin(), logits.end(), out.logits0.begin() + (size_t)b * T * V);
        for (int step = 0; step < s; step++) {
            // the loss gradient at the output (a non-transformer module, as in the code; spec §4.4)
            tint_loss_gradient(grad.data(), logits.data(), wte, ids, lmask.data(), T, d, V);
            r.set_signal(r.X, grad);
            r.lnf_backward();
            for (int l = L - 1; l >= L - k; l--) r.backward_block(l);
            // re-forward the updated top k layers from the kept input, then ln_f with the updated β_f
            r.set_signal(r.X, x_keep);
            for (int l = L - k; l < L; l++) r.forward_block(l, true);
            r.lnf_forward(true);
            hf = r.signal(r.X);
            matmul_forward(logits.data(), hf.data(), wte, (const real*)nullptr, T, d, V);
        }
        std::copy(logits.begin(), logits.end(), out.logits1.begin() + (size_t)b * T * V);
        // decode the prefixes back into the auxiliary registry
        std::vector<real> params(aux.s.params.ptr, aux.s.params.ptr + aux.s.ptable.total);
        auto P = [&](const std::string& n) { return params.data() + aux.s.ptable.offset(n); };
        auto undiag = [&](const std::vector<real>& pref, const std::string& w, const std::string& bias) {
            std::vector<real> Wd((size_t)d * d);
            tint::decode_linear<real>(c, pref.data(), Wd.data(), d, P(bias));
            for (int i = 0; i < d; i++) P(w)[i] = Wd[(size_t)i * d + i];
        };
        for (int l = 0; l < L; l++) {
            const std::string h = "h." + std::to_string(l) + ".";
            const BlockPrefixes<real>& p = r.P[l];
            undiag(p.ln1, h + "ln1.w", h + "ln1.b");
            real* qkv = P(h + "attn.qkv.w");
            real* qkvb = P(h + "attn.qkv.b");
            tint::decode_linear<real>(c, p.q.data(), qkv, d, qkvb);
            tint::decode_linear<real>(c, p.k.data(), qkv + (size_t)d * d, d, qkvb + d);
            tint::decode_linear<real>(c, p.v.data(), qkv + (size_t)2 * d * d, d, qkvb + 2 * d);
            tint::decode_linear<real>(c, p.o.data(), P(h + "attn.proj.w"), d, P(h + "attn.proj.b"));
            undiag(p.ln2, h + "ln2.w", h + "ln2.b");
            real* prb = P(h + "mlp.proj.b");
            std::fill(prb, prb + d, real(0));
            std::vector<real> bq(d);
            for (int kk = 0; kk < nc; kk++) {
                tint::decode_linear<real>(c, p.fc1[kk].data(), P(h + "mlp.fc.w") + (size_t)kk * d * d, d, P(h + "mlp.fc.b") + (size_t)kk * d);
                tint::decode_linear<real>(c, p.fc2[kk].data(), P(h + "mlp.proj.w") + (size_t)kk * d, nc * d, bq.data());
                for (int j = 0; j < d; j++) prb[j] += bq[j];  // b2 = Σ of the four quarters
            }
        }
        undiag(r.lnf, "lnf.w", "lnf.b");
        out.params[b] = std::move(params);
        bytes[b] = r.bytes();
        fb[b] = r.fwd_blocks;
        bb[b] = r.bwd_blocks;
    }
    out.state_bytes = *std::max_element(bytes.begin(), bytes.end());
    out.fwd_blocks = fb[0];
    out.bwd_blocks = bb[0];
    return out;
}

template <typename real>
TintCount Tint<real>::count(int k) const {
    // Per forward block: LN1, LN2 (LayerNorm Forward), the Q/K/V Linear Forward, the softmax attention, out_proj /
    // fc1 / fc2 (three Linear Forward instances, one per role as in the code) and the activation. Per backward block:
    // 4 Linear Backward (fc2, fc1, out_proj, W_V), the activation backward, 2 LayerNorm Backward, the attention
    // backward; per descent block: 4 Linear Descent and 2 LayerNorm (β) Descent. Plus ln_f forward/backward/descent.
    TintCount n;
    const int64_t L = cfg.L;
    auto P = [](const tint::Module<real>& m) { return m.params(); };
    auto Z = [](const tint::Module<real>& m) { return m.nonzeros(); };
    n.fwd = L * (2 * P(ln_fwd) + P(lin_fwd) + P(attn_fwd) + 3 * P(lin_fwd_mem) + P(act_fwd)) + P(ln_fwd);
    n.fwd_nz = L * (2 * Z(ln_fwd) + Z(lin_fwd) + Z(attn_fwd) + 3 * Z(lin_fwd_mem) + Z(act_fwd)) + Z(ln_fwd);
    n.bwd = k * (4 * P(lin_bwd) + P(act_bwd) + 2 * P(ln_bwd) + P(attn_bwd)) + P(ln_bwd);
    n.bwd_nz = k * (4 * Z(lin_bwd) + Z(act_bwd) + 2 * Z(ln_bwd) + Z(attn_bwd)) + Z(ln_bwd);
    n.desc = k * (3 * P(lin_desc) + P(lin_desc_fc2) + 2 * P(ln_desc)) + P(ln_desc);
    n.desc_nz = k * (3 * Z(lin_desc) + Z(lin_desc_fc2) + 2 * Z(ln_desc)) + Z(ln_desc);
    return n;
}

template <typename real>
void tint_loss_gradient(real* grad, const real* logits, const real* E, const int* ids, const uint8_t* m, int T, int d, int V) {
    std::vector<double> p(V);
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

template <typename real>
double tint_loss(const real* logits, const int* ids, const uint8_t* m, int T, int V) {
    double loss = 0;
    for (int t = 0; t + 1 < T; t++) {
        if (!m[t]) continue;
        const real* z = logits + (size_t)t * V;
        double mx = z[0], sum = 0;
        for (int v = 1; v < V; v++) mx = std::max(mx, (double)z[v]);
        for (int v = 0; v < V; v++) sum += std::exp((double)z[v] - mx);
        loss += mx + std::log(sum) - (double)z[ids[t + 1]];
    }
    return loss;
}

TintFormula tint_formula(int d, int L, int T, int H) {
    // spec §6 [recon]: Q_split = D²/H + DH, Q = 4·Q_split + 3·T_sim·D/H, D = 4d, T_sim = T + d/4;
    // per block: Forward 7Q + Q_split, Backward 7Q + 6DH, Descent 7Q.
    const double D = 4.0 * d, Ts = T + d / 4.0;
    const double Qs = D * D / H + D * H, Q = 4 * Qs + 3 * Ts * D / H;
    TintFormula f;
    f.fwd = L * (7 * Q + Qs);
    f.bwd = L * (7 * Q + 6 * D * H);
    f.desc = L * 7 * Q;
    f.total = f.fwd + f.bwd + f.desc;
    return f;
}

#define ICL_TINT_INSTANTIATE(real)                                                                                       \
    template struct Tint<real>;                                                                                          \
    template void tint_loss_gradient(real*, const real*, const real*, const int*, const uint8_t*, int, int, int);       \
    template double tint_loss(const real*, const int*, const uint8_t*, int, int);
ICL_TINT_INSTANTIATE(float)
ICL_TINT_INSTANTIATE(double)

}  // namespace icl
