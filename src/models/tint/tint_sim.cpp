// tint_sim.cpp — the TinT orchestrator: the auxiliary model's inputs, the §4.7 schedule of simulated forward,
// backward and descent passes, the loss head, and the parameter-count formula. Primitives: tint_primitives.cpp;
// module constructors: tint_modules.cpp. See tint_sim.h and spec/tint.md.
#include "models/tint/tint_sim.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/common.h"
#include "layers/dispatch.h"

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

// The 18 prefix tensors of one auxiliary block (spec §4.6), each (B,K,D): every sequence has its own copy of the
// auxiliary weights. Activation modules read zero prefixes.
template <typename real>
struct BlockPrefixes {
    Buffer<real> ln1, q, k, v, o, ln2;
    std::vector<Buffer<real>> fc1, fc2;  // 4 FFN chunks each
};

// The memory regions the forward modules of one block leave in the data rows, re-injected before the matching
// backward module (spec §4.6, §11.3): each (B, T, D − offset).
template <typename real>
struct BlockMemory {
    Buffer<real> ln1, attn, out, ln2;
    std::vector<Buffer<real>> fc1, act, fc2;
};

// Everything B sequences carry through the schedule, on the simulator's device. Every step is an op:: call.
template <typename real>
struct BatchRun {
    const Tint<real>& tt;
    const TintConfig& c;
    Device dev;
    tint::Work<real>& w;
    int B, K, T, N, D, d;
    Buffer<real> X;                           // (B,N,D) the state: prefix rows, then data rows
    Buffer<real> Xk, Xv, Z, Y, Yd;            // (B,N,D) copies of the state the schedule runs side by side
    Buffer<real> h, acc, g, g2, y;            // (B,T,d) signals
    std::vector<BlockPrefixes<real>> P;       // per aux layer
    Buffer<real> lnf, zeros;                  // ln_f prefix; the activation modules' all-zero prefix (B,K,D)
    std::vector<BlockMemory<real>> M;         // per aux layer (the top k)
    Buffer<real> lnf_mem;
    int fwd_blocks = 0, bwd_blocks = 0;

    BatchRun(const Tint<real>& t, tint::Work<real>& wk) : tt(t), c(t.cfg), dev(t.dev), w(wk) {
        B = w.B; K = c.K(); T = w.T; N = K + T; D = c.D(); d = c.d;
        for (Buffer<real>* b : {&X, &Xk, &Xv, &Z, &Y, &Yd}) *b = Buffer<real>(dev, (size_t)B * N * D);
        for (Buffer<real>* b : {&h, &acc, &g, &g2, &y}) *b = Buffer<real>(dev, (size_t)B * T * d);
        zeros = Buffer<real>(dev, (size_t)B * K * D);
    }
    size_t state() const { return (size_t)B * N * D; }
    real* data(Buffer<real>& Yb) { return Yb.ptr + (size_t)K * D; }  // row 0 of sequence 0's data rows
    void copy(Buffer<real>& to, const Buffer<real>& from) { device_copy(dev, to.ptr, from.ptr, state() * sizeof(real), Copy::device_to_device); }
    void put_prefix(Buffer<real>& Yb, const Buffer<real>& p) {  // prefix rows of every sequence = p (B,K,D)
        op::copy_block(dev, Yb.ptr, (int64_t)N * D, 0, (const real*)p.ptr, (int64_t)K * D, 0, B, 1, K * D);
    }
    void take_prefix(Buffer<real>& p, Buffer<real>& Yb) {
        op::copy_block(dev, p.ptr, (int64_t)K * D, 0, (const real*)Yb.ptr, (int64_t)N * D, 0, B, 1, K * D);
    }
    void signal(Buffer<real>& s, Buffer<real>& Yb) {  // s (B,T,d) = data rows [0,d)
        op::copy_block(dev, s.ptr, (int64_t)T * d, d, (const real*)data(Yb), (int64_t)N * D, D, B, T, d);
    }
    void set_signal(Buffer<real>& Yb, const Buffer<real>& s) {  // data rows = [s | 0]
        op::copy_block(dev, data(Yb), (int64_t)N * D, D, (const real*)s.ptr, (int64_t)T * d, d, B, T, d);
        op::fill_block(dev, data(Yb) + d, (int64_t)N * D, D, B, T, D - d, real(0));
    }
    void store(Buffer<real>& m, Buffer<real>& Yb, int lo) {  // m (B,T,D−lo) = data rows [lo, D)
        if (m.n != (size_t)B * T * (D - lo)) m = Buffer<real>(dev, (size_t)B * T * (D - lo));
        op::copy_block(dev, m.ptr, (int64_t)T * (D - lo), D - lo, (const real*)data(Yb) + lo, (int64_t)N * D, D, B, T, D - lo);
    }
    void restore(Buffer<real>& Yb, const Buffer<real>& m, int lo) {
        op::copy_block(dev, data(Yb) + lo, (int64_t)N * D, D, (const real*)m.ptr, (int64_t)T * (D - lo), D - lo, B, T, D - lo);
    }
    void add(Buffer<real>& to, const Buffer<real>& s) { op::residual_forward(dev, to.ptr, to.ptr, s.ptr, (int64_t)B * T * d); }
    void run(const tint::Module<real>& m, Buffer<real>& Yb) { tint::module_forward(m, Yb.ptr, w); }
    // Linear_Descent_Backward: backward and descent on the same input, in parallel (backward reads the old W).
    void descent_backward(Buffer<real>& Yb, Buffer<real>& pref, const tint::Module<real>& bwd, const tint::Module<real>& desc) {
        put_prefix(Yb, pref);
        copy(Yd, Yb);
        run(bwd, Yb);
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
        signal(h, X);
        // LN1
        put_prefix(X, p.ln1);
        run(tt.ln_fwd, X);
        if (rec) store(m.ln1, X, ln_mem());
        // Q, K, V: one shared Linear Forward module applied three times in parallel (spec §4.3), then routed
        // into [q | k | v | x] (the code's concatenation of the three outputs)
        copy(Z, X); copy(Xk, X); copy(Xv, X);
        put_prefix(Z, p.q); run(tt.lin_fwd, Z);
        put_prefix(Xk, p.k); run(tt.lin_fwd, Xk);
        put_prefix(Xv, p.v); run(tt.lin_fwd, Xv);
        op::fill_block(dev, data(Z) + d, (int64_t)N * D, D, B, T, D - d, real(0));
        op::copy_block(dev, data(Z) + d, (int64_t)N * D, D, (const real*)data(Xk), (int64_t)N * D, D, B, T, d);
        op::copy_block(dev, data(Z) + 2 * d, (int64_t)N * D, D, (const real*)data(Xv), (int64_t)N * D, D, B, T, d);
        op::copy_block(dev, data(Z) + (size_t)c.S * d, (int64_t)N * D, D, (const real*)data(X), (int64_t)N * D, D, B, T, d);
        run(tt.attn_fwd, Z);
        if (rec) store(m.attn, Z, attn_mem());
        put_prefix(Z, p.o);
        run(tt.lin_fwd_mem, Z);
        if (rec) store(m.out, Z, lin_mem());
        signal(y, Z);
        add(h, y);  // residual (on [0,d) only, spec §4.6)
        set_signal(X, h);
        // LN2, then the 4 FFN chunks through one shared (fc1, act, fc2) triple (spec §4.5)
        put_prefix(X, p.ln2);
        run(tt.ln_fwd, X);
        if (rec) store(m.ln2, X, ln_mem());
        if (rec) { m.fc1.resize(nc); m.act.resize(nc); m.fc2.resize(nc); }
        device_copy(dev, acc.ptr, h.ptr, acc.bytes(), Copy::device_to_device);
        for (int kk = 0; kk < nc; kk++) {
            copy(Y, X);
            put_prefix(Y, p.fc1[kk]); run(tt.lin_fwd_mem, Y);
            if (rec) store(m.fc1[kk], Y, lin_mem());
            put_prefix(Y, zeros); run(tt.act_fwd, Y);
            if (rec) store(m.act[kk], Y, lin_mem());
            put_prefix(Y, p.fc2[kk]); run(tt.lin_fwd_mem, Y);
            if (rec) store(m.fc2[kk], Y, lin_mem());
            signal(y, Y);
            add(acc, y);
        }
        set_signal(X, acc);
        fwd_blocks++;
    }

    // One auxiliary block backward + descent (spec §4.6): X's data rows [g | 0] -> [∂input | 0]; prefixes updated.
    void backward_block(int l) {
        BlockPrefixes<real>& p = P[l];
        BlockMemory<real>& m = M[l];
        const int nc = c.ffn_chunks();
        signal(g, X);
        // FFN chunks: fc2 -> activation -> fc1, each from the block-output gradient; the ∂x summed
        device_zero(dev, acc.ptr, acc.bytes());
        for (int kk = 0; kk < nc; kk++) {
            copy(Y, X);
            set_signal(Y, g);
            restore(Y, m.fc2[kk], lin_mem());
            descent_backward(Y, p.fc2[kk], tt.lin_bwd, tt.lin_desc_fc2);
            put_prefix(Y, zeros);
            restore(Y, m.act[kk], lin_mem());
            run(tt.act_bwd, Y);
            restore(Y, m.fc1[kk], lin_mem());
            descent_backward(Y, p.fc1[kk], tt.lin_bwd, tt.lin_desc);
            signal(y, Y);
            add(acc, y);
        }
        // LN2 backward (finite difference) + β2 descent
        copy(Y, X);
        set_signal(Y, acc);
        restore(Y, m.ln2, ln_mem());
        descent_backward(Y, p.ln2, tt.ln_bwd, tt.ln_desc);
        signal(g2, Y);
        add(g2, g);  // residual
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
        signal(y, Y);
        add(y, g2);  // residual
        set_signal(X, y);
        bwd_blocks++;
    }

    void lnf_forward(bool rec) {
        put_prefix(X, lnf);
        run(tt.ln_fwd, X);
        if (rec) store(lnf_mem, X, ln_mem());
    }
    void lnf_backward() {
        signal(g, X);
        set_signal(X, g);
        restore(X, lnf_mem, ln_mem());
        descent_backward(X, lnf, tt.ln_bwd, tt.ln_desc);
    }
    size_t bytes() const {  // every buffer of the run, the work space included
        size_t n = w.bytes();
        for (const Buffer<real>* b : {&X, &Xk, &Xv, &Z, &Y, &Yd, &h, &acc, &g, &g2, &y, &lnf, &zeros, &lnf_mem}) n += b->bytes();
        for (auto& p : P) {
            for (const Buffer<real>* b : {&p.ln1, &p.q, &p.k, &p.v, &p.o, &p.ln2}) n += b->bytes();
            for (auto* vv : {&p.fc1, &p.fc2})
                for (auto& b : *vv) n += b.bytes();
        }
        for (auto& m : M) {
            for (const Buffer<real>* b : {&m.ln1, &m.attn, &m.out, &m.ln2}) n += b->bytes();
            for (auto* vv : {&m.fc1, &m.act, &m.fc2})
                for (auto& b : *vv) n += b.bytes();
        }
        return n;
    }
};

// rows [lo, hi) of a (B·T, per) input array (empty stays empty)
template <typename T>
std::vector<T> rows_of(const std::vector<T>& v, size_t lo, size_t hi, size_t per) {
    if (v.empty()) return {};
    return std::vector<T>(v.begin() + lo * per, v.begin() + hi * per);
}

}  // namespace

template <typename real>
Tint<real>::Tint(const TintConfig& c, Device d) : cfg(c), dev(d) {
    cfg.validate();
    require_device(dev);
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
    ln_desc = tint::ln_descent<real>(cfg);
    // the simulator's parameters onto its device, once: runs on many threads then share these const modules
    for (auto* m : {&lin_fwd, &lin_fwd_mem, &ln_fwd, &act_fwd, &attn_fwd, &lin_bwd, &ln_bwd, &act_bwd, &attn_bwd, &lin_desc, &lin_desc_fc2, &ln_desc})
        tint::compile(*m, dev);
}

template <typename real>
TintOutput<real> Tint<real>::run(const GPT<real>& aux, const TintInput& in, int k, int s) const {
    in.validate(cfg);
    // the simulator's memory per sequence (reals): its prefix tensors (14 per block + ln_f), ~16 state-sized buffers,
    // one head's attention scores per head, and the stored memory of k blocks (~16 regions of T·D)
    const double K = cfg.K(), D = cfg.D(), N = K + in.T;
    double per_seq = (14.0 * cfg.L + 1) * K * D + 16 * N * D + std::max(cfg.H_lin(), cfg.H_sim) * N * N + 16.0 * k * in.T * D;
    // --loss-layers: the loss head's own Work (~12 state-sized buffers and its scores) and its two (N, V) vocabulary buffers
    if (cfg.loss_layers) per_seq += 12 * N * D + std::max(cfg.H_lin(), cfg.H_sim) * N * N + 2.0 * N * cfg.V;
    const int nchunk = chunk > 0 ? chunk : (int)std::max(1.0, std::min(1e9, std::floor((double)(1 << 28) / per_seq)));
    if (in.B <= nchunk) return run_batch(aux, in, k, s);
    TintOutput<real> out;
    for (int b0 = 0; b0 < in.B; b0 += nchunk) {
        const int nb = std::min(nchunk, in.B - b0);
        const size_t bt = (size_t)in.T, lo = (size_t)b0 * bt, hi = lo + (size_t)nb * bt;
        TintInput part;
        part.B = nb;
        part.T = in.T;
        part.ids = rows_of(in.ids, lo, hi, 1);
        part.pos = rows_of(in.pos, lo, hi, 1);
        part.train = rows_of(in.train, lo, hi, 1);
        part.label = rows_of(in.label, lo, hi, 1);
        part.icl = rows_of(in.icl, lo, hi, bt);
        TintOutput<real> o = run_batch(aux, part, k, s);
        out.logits0.insert(out.logits0.end(), o.logits0.begin(), o.logits0.end());
        out.logits1.insert(out.logits1.end(), o.logits1.begin(), o.logits1.end());
        for (auto& p : o.params) out.params.push_back(std::move(p));
        out.state_bytes = std::max(out.state_bytes, o.state_bytes);
        out.fwd_blocks = o.fwd_blocks;
        out.bwd_blocks = o.bwd_blocks;
    }
    return out;
}

template <typename real>
TintOutput<real> Tint<real>::run_batch(const GPT<real>& aux, const TintInput& in, int k, int s) const {
    const TintConfig& c = cfg;
    const GPTConfig& g = aux.cfg;
    if (g.C != c.d || g.NH != c.n_h || g.L != c.L || g.V != c.V || g.maxT != c.T || (g.act == "relu") != (c.act == ActKind::relu))
        fail("TinT: the auxiliary model's shape differs from the simulator's configuration");
    if (k < 0 || k > c.L) fail_usage(strfmt("--k: the number of simulated layers must be in [0, L=%d], got %d", c.L, k));
    if (s < 0) fail_usage(strfmt("--s: the number of steps must be >= 0, got %d", s));
    in.validate(c);
    const int B = in.B, T = in.T, d = c.d, V = c.V, L = c.L, K = c.K(), D = c.D(), nc = c.ffn_chunks();
    // the inputs of the B sequences: positions, flags, ids and the loss mask m_t (0 at every sequence's last row)
    std::vector<int> pos((size_t)B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) pos[(size_t)b * T + t] = in.pos.empty() ? t : in.pos[(size_t)b * T + t];
    std::vector<uint8_t> lmask;
    for (int b = 0; b < B; b++) {
        std::vector<uint8_t> mb = in.loss_mask(b);
        lmask.insert(lmask.end(), mb.begin(), mb.end());
    }
    tint::Work<real> w(dev, c, B, T, pos.data(), in.train.data(), in.icl.empty() ? nullptr : in.icl.data());
    auto upload = [&](const void* host, size_t bytes) {
        Buffer<uint8_t> buf(dev, std::max<size_t>(bytes, 1));
        device_copy(dev, buf.ptr, host, bytes, Copy::host_to_device);
        return buf;
    };
    Buffer<uint8_t> ids_dev = upload(in.ids.data(), in.ids.size() * sizeof(int));
    Buffer<uint8_t> lmask_dev = upload(lmask.data(), lmask.size());
    const int* ids = (const int*)ids_dev.ptr;
    // the auxiliary weights: read on the host once (prefix encoding), used in place on the device (wte, wpe)
    const std::vector<real> aux_params = aux.s.to_host(aux.s.params, 0, aux.s.ptable.total);
    auto host_param = [&](const std::string& n) { return aux_params.data() + aux.s.ptable.offset(n); };
    // wte (the embedding and the tied head) and wpe on the simulator's device: in place, or a copy when the
    // auxiliary model lives elsewhere (a CPU model driving a GPU simulator)
    Buffer<real> emb_copy;
    const real* wte = aux.s.params.ptr + aux.s.ptable.offset("wte");
    const real* wpe = aux.s.params.ptr + aux.s.ptable.offset("wpe");
    if (aux.s.dev != dev) {
        const size_t nte = (size_t)V * d, npe = (size_t)c.T * d;
        emb_copy = Buffer<real>(dev, nte + npe);
        device_copy(dev, emb_copy.ptr, host_param("wte"), nte * sizeof(real), Copy::host_to_device);
        device_copy(dev, emb_copy.ptr + nte, host_param("wpe"), npe * sizeof(real), Copy::host_to_device);
        wte = emb_copy.ptr;
        wpe = emb_copy.ptr + nte;
    }

    BatchRun<real> r(*this, w);
    // the auxiliary weights as prefix tensors (spec §1, §4.6), one copy per sequence
    auto prefix = [&](const std::vector<real>& p1) {  // (K,D) -> (B,K,D) on the device
        Buffer<real> buf(dev, (size_t)B * K * D);
        for (int b = 0; b < B; b++) device_copy(dev, buf.ptr + (size_t)b * K * D, p1.data(), p1.size() * sizeof(real), Copy::host_to_device);
        return buf;
    };
    auto diag = [&](const std::string& wn, const std::string& bias) {
        std::vector<real> Wd((size_t)d * d, real(0));
        const real* gw = host_param(wn);
        for (int i = 0; i < d; i++) Wd[(size_t)i * d + i] = gw[i];
        return prefix(tint::encode_linear<real>(c, Wd.data(), d, host_param(bias)));
    };
    r.P.resize(L);
    r.M.resize(L);
    for (int l = 0; l < L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        BlockPrefixes<real>& p = r.P[l];
        const real* qkv = host_param(h + "attn.qkv.w");
        const real* qkvb = host_param(h + "attn.qkv.b");
        p.ln1 = diag(h + "ln1.w", h + "ln1.b");
        p.q = prefix(tint::encode_linear<real>(c, qkv, d, qkvb));
        p.k = prefix(tint::encode_linear<real>(c, qkv + (size_t)d * d, d, qkvb + d));
        p.v = prefix(tint::encode_linear<real>(c, qkv + (size_t)2 * d * d, d, qkvb + 2 * d));
        p.o = prefix(tint::encode_linear<real>(c, host_param(h + "attn.proj.w"), d, host_param(h + "attn.proj.b")));
        p.ln2 = diag(h + "ln2.w", h + "ln2.b");
        const real* fc = host_param(h + "mlp.fc.w");
        const real* fcb = host_param(h + "mlp.fc.b");
        const real* pr = host_param(h + "mlp.proj.w");  // (d, 4d): chunk kk = columns [kk·d, (kk+1)·d)
        const real* prb = host_param(h + "mlp.proj.b");
        for (int kk = 0; kk < nc; kk++) {
            p.fc1.push_back(prefix(tint::encode_linear<real>(c, fc + (size_t)kk * d * d, d, fcb + (size_t)kk * d)));
            p.fc2.push_back(prefix(tint::encode_linear<real>(c, pr + (size_t)kk * d, nc * d, prb, 1.0 / nc)));
        }
    }
    r.lnf = diag("lnf.w", "lnf.b");
    // data tokens: [wte(x_t) + wpe(p_t), 0, …]
    op::encoder_forward(dev, r.h.ptr, ids, w.pos.ptr, wte, wpe, B, T, d, V, c.T);
    r.set_signal(r.X, r.h);
    // forward of all L layers, recording the memory of the top k; keep the input of layer L−k
    Buffer<real> x_keep(dev, (size_t)B * T * d);
    for (int l = 0; l < L; l++) {
        if (l == L - k) r.signal(x_keep, r.X);
        r.forward_block(l, l >= L - k);
    }
    if (k == 0) r.signal(x_keep, r.X);
    r.lnf_forward(true);
    Buffer<real> logits(dev, (size_t)B * T * V), grad(dev, (size_t)B * T * d), hf(dev, (size_t)B * T * d);
    // --loss-layers: App. G's loss head as TinT layers (tint::loss_head) on a state of its own, whose data rows hold
    // [h_t | e_{x_t}] and whose `train` flags are the loss weights m_t; E is this auxiliary model's wte
    tint::Module<real> lhead;
    std::unique_ptr<tint::Work<real>> lwork;
    Buffer<real> Yl, ex;
    if (c.loss_layers) {
        lhead = tint::loss_head<real>(c, host_param("wte"));
        tint::compile(lhead, dev);
        lwork = std::make_unique<tint::Work<real>>(dev, c, B, T, pos.data(), lmask.data(), nullptr);
        Yl = Buffer<real>(dev, r.state());
        ex = Buffer<real>(dev, (size_t)B * T * d);
        Buffer<real> no_pos(dev, (size_t)c.T * d);  // e_{x_t} = wte[x_t]: the encoder with a zero position table
        no_pos.zero();
        op::encoder_forward(dev, ex.ptr, ids, (const int*)w.pos.ptr, wte, (const real*)no_pos.ptr, B, T, d, V, c.T);
    }
    auto loss_gradient = [&]() {  // grad (B,T,d) from logits / hf
        if (!c.loss_layers) {  // the direct module, as the official code (spec §4.4)
            op::tint_loss_gradient(dev, grad.ptr, logits.ptr, wte, ids, lmask_dev.ptr, B * T, d, V);
            return;
        }
        Yl.zero();
        const int64_t nd = (int64_t)r.N * D, td = (int64_t)T * d;
        op::copy_block(dev, Yl.ptr + (size_t)K * D, nd, D, (const real*)hf.ptr, td, d, B, T, d);      // block 0 <- h_t
        op::copy_block(dev, Yl.ptr + (size_t)K * D + d, nd, D, (const real*)ex.ptr, td, d, B, T, d);  // block 1 <- e_{x_t}
        tint::module_forward(lhead, Yl.ptr, *lwork);
        op::copy_block(dev, grad.ptr, td, d, (const real*)Yl.ptr + (size_t)K * D, nd, D, B, T, d);
    };
    auto head = [&]() {  // logits = ln_f output · wteᵀ, one sequence at a time (its rows' bits independent of B)
        r.signal(hf, r.X);
        for (int b = 0; b < B; b++)
            op::matmul_forward(dev, logits.ptr + (size_t)b * T * V, hf.ptr + (size_t)b * T * d, wte, (const real*)nullptr, T, d, V);
    };
    head();
    TintOutput<real> out;
    out.logits0.resize((size_t)B * T * V);
    device_copy(dev, out.logits0.data(), logits.ptr, logits.bytes(), Copy::device_to_host);
    for (int step = 0; step < s; step++) {
        // the loss gradient at the output: the direct module of the official code, or App. G's layers (spec §4.4)
        loss_gradient();
        r.set_signal(r.X, grad);
        r.lnf_backward();
        for (int l = L - 1; l >= L - k; l--) r.backward_block(l);
        // re-forward the updated top k layers from the kept input, then ln_f with the updated β_f
        r.set_signal(r.X, x_keep);
        for (int l = L - k; l < L; l++) r.forward_block(l, true);
        r.lnf_forward(true);
        head();
    }
    out.logits1.resize((size_t)B * T * V);
    device_copy(dev, out.logits1.data(), logits.ptr, logits.bytes(), Copy::device_to_host);
    // decode the prefixes back into each sequence's copy of the auxiliary registry
    out.params.assign(B, aux_params);
    std::vector<real> pref((size_t)K * D);
    for (int b = 0; b < B; b++) {
        auto fetch = [&](const Buffer<real>& buf) {  // sequence b's (K,D) slice of a prefix tensor
            device_copy(dev, pref.data(), buf.ptr + (size_t)b * K * D, pref.size() * sizeof(real), Copy::device_to_host);
        };
        std::vector<real>& params = out.params[b];
        const real* pb = pref.data();  // the last fetch
        auto P = [&](const std::string& n) { return params.data() + aux.s.ptable.offset(n); };
        auto undiag = [&](const Buffer<real>& buf, const std::string& wn, const std::string& bias) {
            fetch(buf);
            std::vector<real> Wd((size_t)d * d);
            tint::decode_linear<real>(c, pb, Wd.data(), d, P(bias));
            for (int i = 0; i < d; i++) P(wn)[i] = Wd[(size_t)i * d + i];
        };
        auto undo = [&](const Buffer<real>& buf, real* W, int ldw, real* bias) {
            fetch(buf);
            tint::decode_linear<real>(c, pb, W, ldw, bias);
        };
        for (int l = 0; l < L; l++) {
            const std::string h = "h." + std::to_string(l) + ".";
            const BlockPrefixes<real>& p = r.P[l];
            undiag(p.ln1, h + "ln1.w", h + "ln1.b");
            real* qkv = P(h + "attn.qkv.w");
            real* qkvb = P(h + "attn.qkv.b");
            undo(p.q, qkv, d, qkvb);
            undo(p.k, qkv + (size_t)d * d, d, qkvb + d);
            undo(p.v, qkv + (size_t)2 * d * d, d, qkvb + 2 * d);
            undo(p.o, P(h + "attn.proj.w"), d, P(h + "attn.proj.b"));
            undiag(p.ln2, h + "ln2.w", h + "ln2.b");
            real* prb = P(h + "mlp.proj.b");
            std::fill(prb, prb + d, real(0));
            std::vector<real> bq(d);
            for (int kk = 0; kk < nc; kk++) {
                undo(p.fc1[kk], P(h + "mlp.fc.w") + (size_t)kk * d * d, d, P(h + "mlp.fc.b") + (size_t)kk * d);
                undo(p.fc2[kk], P(h + "mlp.proj.w") + (size_t)kk * d, nc * d, bq.data());
                for (int j = 0; j < d; j++) prb[j] += bq[j];  // b2 = Σ of the four quarters
            }
        }
        undiag(r.lnf, "lnf.w", "lnf.b");
    }
    out.state_bytes = r.bytes() / B;
    out.fwd_blocks = r.fwd_blocks;
    out.bwd_blocks = r.bwd_blocks;
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
    template double tint_loss(const real*, const int*, const uint8_t*, int, int);
ICL_TINT_INSTANTIATE(float)
ICL_TINT_INSTANTIATE(double)

}  // namespace icl
