// tint_primitives.cpp — the TinT configuration and the primitives every simulated module is made of: H-split
// linear maps, chains, positional terms, gates, TinT attention; their compilation onto a device, and the module
// forward that runs them as op:: calls (src/layers/tint_ops.h), batched over sequences, on the CPU or the GPU.
// See tint_sim.h and spec/tint.md.
#include "models/tint/tint_sim.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/common.h"
#include "layers/dispatch.h"

namespace icl {

// ------------------------------------------------------------------------------------------------------
// configuration

void TintConfig::validate() const {
    if (L < 1) fail_usage(strfmt("TinT: the auxiliary model needs >= 1 block, got %d", L));
    if (S < 3) fail_usage(strfmt("--S: the memory layout needs D = d(S+1) >= 4d, i.e. S >= 3, got %d", S));
    if (d < S || d % S != 0) fail_usage(strfmt("--S: must divide the auxiliary width d = %d, got %d", d, S));
    if (n_h < 1 || d % n_h != 0) fail_usage(strfmt("TinT: the auxiliary heads %d must divide d = %d", n_h, d));
    if (H_sim < 1 || D() % H_sim != 0) fail_usage(strfmt("--H-sim: must divide D = %d, got %d", D(), H_sim));
    const int ks = D() / H_sim;
    if (d % ks != 0) fail_usage(strfmt("--H-sim: the softmax head dim D/H_sim = %d must divide d = %d", ks, d));
    const int P = d / ks;
    if (n_h % P != 0) fail_usage(strfmt("--H-sim: the auxiliary heads %d must split evenly over d/(D/H_sim) = %d partitions", n_h, P));
    if (n_h > H_sim) fail_usage(strfmt("--H-sim: need at least the auxiliary's %d heads, got %d", n_h, H_sim));
    if (!(eps > 0) || eps > 1) fail_usage(strfmt("--eps: must be in (0, 1], got %g", eps));
    if (!(gate_scale > 0)) fail_usage(strfmt("--gate-scale: must be > 0, got %g", gate_scale));
    if (!std::isfinite(eta)) fail_usage("--eta: must be finite");
    if (T < 1 || V < 1) fail_usage("TinT: the auxiliary model needs T >= 1 and V >= 1");
}

TintConfig TintConfig::from_aux(const GPTConfig& g) {
    if (g.d_in > 0 || g.d_out > 0) fail("TinT: the auxiliary model must be a token LM with the tied head (no vector input/output)");
    TintConfig c;
    c.d = g.C;
    c.n_h = g.NH;
    c.L = g.L;
    c.V = g.V;
    c.T = g.maxT;
    c.act = g.act == "relu" ? ActKind::relu : ActKind::gelu;
    return c;
}

namespace tint {

// ------------------------------------------------------------------------------------------------------
// primitives

// An all-zero H-split op: H blocks of c = D/H, W of `wsize` entries, `nlive` live flags.
template <typename real>
static HSplit<real> zero_hsplit(int D, int H, bool dimwise, size_t wsize, size_t nlive) {
    ICL_ASSERT(H > 0 && D % H == 0);
    HSplit<real> o;
    o.dimwise = dimwise;
    o.D = D; o.H = H; o.c = D / H;
    o.W.assign(wsize, real(0));
    o.b.assign(D, real(0));
    o.live.assign(nlive, 0);
    return o;
}

template <typename real>
HSplit<real> HSplit<real>::split(int D, int H) {
    const size_t c = H > 0 ? (size_t)D / H : 0;
    return zero_hsplit<real>(D, H, false, (size_t)H * c * c, (size_t)H);  // W stored (H,c,c)
}

template <typename real>
HSplit<real> HSplit<real>::dim(int D, int H) {
    const size_t c = H > 0 ? (size_t)D / H : 0;
    return zero_hsplit<real>(D, H, true, (size_t)H * H * c, (size_t)H * H);  // stored (H,H,c): W[(o·H + i)·c + x] = W_x[o][i]
}

template <typename real>
void HSplit<real>::set(int h, int o, int i, double v) {
    ICL_ASSERT(!dimwise && h >= 0 && h < H && o >= 0 && o < c && i >= 0 && i < c);
    W[((size_t)h * c + o) * c + i] = (real)v;
    live[h] = 1;
    built = false;
}

template <typename real>
void HSplit<real>::set_all(int o, int i, double v) {
    ICL_ASSERT(dimwise && o >= 0 && o < H && i >= 0 && i < H);
    for (int x = 0; x < c; x++) W[((size_t)o * H + i) * c + x] = (real)v;
    live[(size_t)o * H + i] = 1;
}

template <typename real>
void HSplit<real>::apply(real* out, const real* in, int N) const {
    if (!dimwise) {
        if (!built) prepare();
        op::hsplit_split_forward(Device::cpu, out, in, rowptr.data(), col.data(), w.data(), b.data(), N, D);
    } else {
        op::hsplit_dim_forward(Device::cpu, out, in, W.data(), live.data(), b.data(), N, D, H);
    }
}

template <typename real>
void HSplit<real>::prepare() const {
    // The constructed ops are sparse (0/±1 patterns): a split-wise op runs as the list of its non-zero entries, in
    // row order (chunk h, output o, input i), grouped by output coordinate.
    rowptr.assign(D + 1, 0);
    col.clear();
    w.clear();
    if (!dimwise)
        for (int h = 0; h < H; h++)
            for (int o = 0; o < c; o++) {
                if (live[h])
                    for (int i = 0; i < c; i++) {
                        const real v = W[((size_t)h * c + o) * c + i];
                        if (v != real(0)) { col.push_back(h * c + i); w.push_back(v); }
                    }
                rowptr[h * c + o + 1] = (int)col.size();
            }
    built = true;
}

template <typename real>
int64_t HSplit<real>::nonzeros() const {
    int64_t n = 0;
    for (real v : W) n += v != real(0);
    for (real v : b) n += v != real(0);
    return n;
}

// Parameter counts: the dense size of every constructed tensor (nz = false) or its structurally non-zero entries.
template <typename real>
static int64_t size_of(const Chain<real>& ch, bool nz) {
    int64_t n = 0;
    for (auto& o : ch.ops) n += nz ? o.nonzeros() : o.params();
    return n;
}
template <typename real>
static int64_t size_of(const PosTerm<real>& p, bool nz) {
    if (!p.used()) return 0;
    if (!nz) return (int64_t)(p.P.size() + p.lam.size());
    int64_t n = 0;
    for (real v : p.P) n += v != real(0);
    for (auto v : p.lam) n += v != 0;
    return n;
}
template <typename real>
static int64_t size_of(const Gate<real>& g, bool nz) {
    if (!nz || g.kind == GateKind::none) return g.params();
    int64_t n = (g.b_old != 0) + (g.b_new != 0);
    for (real v : g.a_old) n += v != real(0);
    for (real v : g.a_new) n += v != real(0);
    return n;
}
template <typename real>
static int64_t size_of(const TLayer<real>& l, bool nz) {
    int64_t n = size_of(l.skip, nz) + size_of(l.gate, nz);
    if (l.kind == LayerKind::attention)
        for (auto* ch : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.o}) n += size_of(*ch, nz);
    if (l.kind == LayerKind::attention)
        for (auto* pt : {&l.attn.pq, &l.attn.pk, &l.attn.pv}) n += size_of(*pt, nz);
    if (l.kind == LayerKind::mlp) n += size_of(l.fc, nz) + size_of(l.proj, nz);
    if (l.kind == LayerKind::linear) n += size_of(l.map, nz);
    if (l.kind == LayerKind::vocab_softmax) {  // E and Eᵀ, the hidden and the output weights
        int64_t e = 0;
        for (real v : l.E) e += !nz || v != real(0);
        n += 2 * e;
    }
    return n;
}
template <typename real>
static int64_t size_of(const Module<real>& m, bool nz) {
    int64_t n = 0;
    for (auto& l : m.layers) n += size_of(l, nz);
    return n;
}
template <typename real> int64_t Chain<real>::params() const { return size_of(*this, false); }
template <typename real> int64_t Chain<real>::nonzeros() const { return size_of(*this, true); }
template <typename real> int64_t TLayer<real>::params() const { return size_of(*this, false); }
template <typename real> int64_t TLayer<real>::nonzeros() const { return size_of(*this, true); }
template <typename real> int64_t Module<real>::params() const { return size_of(*this, false); }
template <typename real> int64_t Module<real>::nonzeros() const { return size_of(*this, true); }

// ------------------------------------------------------------------------------------------------------
// compilation: a module's weights flattened into three device buffers

namespace {

template <typename real>
struct Staging {  // the host side of Compiled<real>'s three buffers while they are filled
    std::vector<real> reals;
    std::vector<int> ints;
    std::vector<uint8_t> flags;
    template <typename T>
    static size_t put(std::vector<T>& to, const std::vector<T>& v) {
        const size_t o = to.size();
        to.insert(to.end(), v.begin(), v.end());
        return o;
    }
    typename Compiled<real>::Chain chain(const Chain<real>& ch) {
        typename Compiled<real>::Chain out;
        out.zero = ch.zero;
        for (const HSplit<real>& h : ch.ops) {
            typename Compiled<real>::Op o;
            o.dimwise = h.dimwise;
            o.H = h.H;
            if (!h.dimwise) {
                if (!h.built) h.prepare();
                o.rowptr = put(ints, h.rowptr);
                o.col = put(ints, h.col);
                o.w = put(reals, h.w);
            } else {
                o.w = put(reals, h.W);
                o.live = put(flags, h.live);
            }
            o.b = put(reals, h.b);
            out.ops.push_back(o);
        }
        return out;
    }
    typename Compiled<real>::Pos pos(const PosTerm<real>& p) {
        typename Compiled<real>::Pos out;
        out.used = p.used();
        if (out.used) { out.P = put(reals, p.P); out.lam = put(flags, p.lam); }
        return out;
    }
};

template <typename T>
Buffer<T> upload_vector(Device dev, const std::vector<T>& v) {
    Buffer<T> b(dev, std::max<size_t>(v.size(), 1));
    if (!v.empty()) device_copy(dev, b.ptr, v.data(), v.size() * sizeof(T), Copy::host_to_device);
    return b;
}

}  // namespace

template <typename real>
void compile(Module<real>& m, Device dev) {
    Staging<real> st;
    auto cm = std::make_shared<Compiled<real>>();
    cm->dev = dev;
    for (const TLayer<real>& l : m.layers) {
        typename Compiled<real>::Layer L;
        L.kind = l.kind;
        L.H = l.attn.H;
        L.softmax = l.attn.softmax;
        L.transpose = l.attn.transpose;
        L.scale = l.attn.scale;
        L.mask = l.attn.mask;
        if (l.kind == LayerKind::attention) {
            L.q = st.chain(l.attn.q); L.k = st.chain(l.attn.k); L.v = st.chain(l.attn.v); L.o = st.chain(l.attn.o);
            L.pq = st.pos(l.attn.pq); L.pk = st.pos(l.attn.pk); L.pv = st.pos(l.attn.pv);
        }
        if (l.kind == LayerKind::mlp) { L.fc = st.chain(l.fc); L.proj = st.chain(l.proj); }
        if (l.kind == LayerKind::linear) L.map = st.chain(l.map);
        if (l.kind == LayerKind::vocab_softmax) {
            const int V = l.V, d = (int)(l.E.size() / std::max(1, V));
            ICL_ASSERT(V > 0 && l.E.size() == (size_t)V * d);
            std::vector<real> Et(l.E.size());  // (d,V)
            for (int v = 0; v < V; v++)
                for (int j = 0; j < d; j++) Et[(size_t)j * V + v] = l.E[(size_t)v * d + j];
            L.V = V;
            L.E = Staging<real>::put(st.reals, l.E);
            L.Et = Staging<real>::put(st.reals, Et);
        }
        L.act = l.act;
        L.skip = st.chain(l.skip);
        L.gate = l.gate.kind;
        if (l.gate.kind != GateKind::none) {
            L.a_old = Staging<real>::put(st.reals, l.gate.a_old);
            L.a_new = Staging<real>::put(st.reals, l.gate.a_new);
            L.b_old = l.gate.b_old;
            L.b_new = l.gate.b_new;
            L.gate_w = l.gate.width;
        }
        cm->layers.push_back(std::move(L));
    }
    cm->reals = upload_vector(dev, st.reals);
    cm->ints = upload_vector(dev, st.ints);
    cm->flags = upload_vector(dev, st.flags);
    m.compiled = std::move(cm);
}

// ------------------------------------------------------------------------------------------------------
// one call's masks and scratch

template <typename real>
Work<real>::Work(Device d_, const TintConfig& c, int B_, int T_, const int* pos_, const uint8_t* train_, const uint8_t* icl_)
    : dev(d_), B(B_), K(c.K()), T(T_), N(c.K() + T_), D(c.D()), d(c.d), Taux(c.T) {
    const size_t bt = (size_t)B * T;
    pos = upload_vector(dev, std::vector<int>(pos_, pos_ + bt));
    train = upload_vector(dev, std::vector<uint8_t>(train_, train_ + bt));
    has_icl = icl_ != nullptr;
    if (has_icl) icl = upload_vector(dev, std::vector<uint8_t>(icl_, icl_ + bt * T));
    const size_t n = (size_t)B * N * D;
    for (Buffer<real>* b : {&Q, &Kx, &Vx, &O, &e, &u, &v, &sk, &ta, &tb}) *b = Buffer<real>(dev, n);
    att = Buffer<real>(dev, (size_t)B * std::max(c.H_lin(), c.H_sim) * N * N);
    lnin = Buffer<real>(dev, (size_t)B * N * d);
    lnout = Buffer<real>(dev, (size_t)B * N * d);
    mean = Buffer<real>(dev, (size_t)B * N);
    rstd = Buffer<real>(dev, (size_t)B * N);
    ones = upload_vector(dev, std::vector<real>(d, real(1)));
    zeros = Buffer<real>(dev, d);
}

template <typename real>
void Work<real>::vocab(int V) {
    const size_t rows = (size_t)B * N;
    if (vlogits.n == rows * V) return;
    vlogits = Buffer<real>(dev, rows * V);
    vprobs = Buffer<real>(dev, rows * V);
    vloss = Buffer<real>(dev, rows);
    vnone = upload_vector(dev, std::vector<int>(rows, -1));
}

template <typename real>
size_t Work<real>::bytes() const {
    size_t n = 0;
    for (const Buffer<real>* b : {&Q, &Kx, &Vx, &O, &e, &u, &v, &sk, &ta, &tb, &att, &lnin, &lnout, &mean, &rstd, &vlogits, &vprobs, &vloss}) n += b->bytes();
    return n + pos.bytes() + train.bytes() + icl.bytes() + vnone.bytes();
}

// ------------------------------------------------------------------------------------------------------
// the module forward, as op:: calls on X (B, N, D)

namespace {

template <typename real>
struct Runner {
    const Compiled<real>& cm;
    Work<real>& w;
    Device dev;
    const real* R;
    const int* I;
    const uint8_t* F;
    Runner(const Compiled<real>& c, Work<real>& wk) : cm(c), w(wk), dev(wk.dev), R(c.reals.ptr), I(c.ints.ptr), F(c.flags.ptr) {}
    size_t rows() const { return (size_t)w.B * w.N; }
    size_t elems() const { return rows() * w.D; }

    void apply(const typename Compiled<real>::Op& o, real* out, const real* in) {
        if (!o.dimwise) op::hsplit_split_forward(dev, out, in, I + o.rowptr, I + o.col, R + o.w, R + o.b, (int)rows(), w.D);
        else op::hsplit_dim_forward(dev, out, in, R + o.w, F + o.live, R + o.b, (int)rows(), w.D, o.H);
    }
    // out = chain(in); zero: 0; no ops: a copy. out != in; the intermediate values in w.ta / w.tb
    void chain(const typename Compiled<real>::Chain& ch, real* out, const real* in) {
        if (ch.zero) { device_zero(dev, out, elems() * sizeof(real)); return; }
        if (ch.ops.empty()) { device_copy(dev, out, in, elems() * sizeof(real), Copy::device_to_device); return; }
        if (ch.ops.size() == 1) { apply(ch.ops[0], out, in); return; }
        real *a = w.ta.ptr, *b = w.tb.ptr;
        apply(ch.ops[0], a, in);
        for (size_t i = 1; i + 1 < ch.ops.size(); i++) {
            apply(ch.ops[i], b, a);
            std::swap(a, b);
        }
        apply(ch.ops.back(), out, a);
    }
    void position(const typename Compiled<real>::Pos& p, real* Y, int H) {
        if (p.used) op::tint_add_position(dev, Y, R + p.P, F + p.lam, w.pos.ptr, w.B, w.K, w.T, w.D, H, w.Taux);
    }

    void layer(const typename Compiled<real>::Layer& l, real* X) {
        real* e = w.e.ptr;  // (B,N,D) the layer's new value
        switch (l.kind) {
            case LayerKind::attention:
                // e = o( concat_h Σ_j a^h[i][j] v^h_j ), TinT attention with position terms (spec §2.1)
                chain(l.q, w.Q.ptr, X);
                chain(l.k, w.Kx.ptr, X);
                chain(l.v, w.Vx.ptr, X);
                position(l.pq, w.Q.ptr, l.H);
                position(l.pk, w.Kx.ptr, l.H);
                position(l.pv, w.Vx.ptr, l.H);
                op::tint_attention_forward(dev, w.O.ptr, w.att.ptr, w.Q.ptr, w.Kx.ptr, w.Vx.ptr, w.train.ptr, w.has_icl ? w.icl.ptr : nullptr, w.B,
                                           w.K, w.T, w.D, l.H, l.mask, l.softmax, (real)l.scale, l.transpose);
                chain(l.o, e, w.O.ptr);
                break;
            case LayerKind::mlp:
                // e = proj(σ(fc(X)))
                chain(l.fc, w.u.ptr, X);
                if (l.act == ActKind::relu) op::relu_forward(dev, w.v.ptr, w.u.ptr, (int64_t)elems());
                else op::gelu_forward(dev, w.v.ptr, w.u.ptr, (int64_t)elems());
                chain(l.proj, e, w.v.ptr);
                break;
            case LayerKind::norm:
                // group norm of the signal [0,d): f(x) = (x − mean)/sqrt(var + 1e-5), the engine's layernorm with γ=1,
                // β=0; the other coordinates 0
                op::copy_block(dev, w.lnin.ptr, 0, (int64_t)w.d, (const real*)X, 0, (int64_t)w.D, 1, (int)rows(), w.d);
                op::layernorm_forward(dev, w.lnout.ptr, w.mean.ptr, w.rstd.ptr, w.lnin.ptr, w.ones.ptr, w.zeros.ptr, (int)rows(), w.d);
                device_zero(dev, e, elems() * sizeof(real));
                op::copy_block(dev, e, 0, (int64_t)w.D, (const real*)w.lnout.ptr, 0, (int64_t)w.d, 1, (int)rows(), w.d);
                break;
            case LayerKind::linear: chain(l.map, e, X); break;
            case LayerKind::vocab_softmax:
                // e[0,d) = Eᵀ softmax(E x[0,d)): App. G's feed-forward layer, its V hidden units the vocabulary, the
                // softmax over them (the cross-entropy op's probabilities; its targets −1 ask for no loss)
                w.vocab(l.V);
                op::copy_block(dev, w.lnin.ptr, 0, (int64_t)w.d, (const real*)X, 0, (int64_t)w.D, 1, (int)rows(), w.d);
                op::matmul_forward(dev, w.vlogits.ptr, (const real*)w.lnin.ptr, R + l.E, (const real*)nullptr, (int)rows(), w.d, l.V);
                op::crossentropy_forward(dev, w.vloss.ptr, w.vprobs.ptr, (const real*)w.vlogits.ptr, (const int*)w.vnone.ptr, (int)rows(), l.V);
                op::matmul_forward(dev, w.lnout.ptr, (const real*)w.vprobs.ptr, R + l.Et, (const real*)nullptr, (int)rows(), l.V, w.d);
                device_zero(dev, e, elems() * sizeof(real));
                op::copy_block(dev, e, 0, (int64_t)w.D, (const real*)w.lnout.ptr, 0, (int64_t)w.d, 1, (int)rows(), w.d);
                break;
        }
        if (!l.skip.zero) {  // e += skip(X): the memory routing
            chain(l.skip, w.sk.ptr, X);
            op::residual_forward(dev, e, e, w.sk.ptr, (int64_t)elems());
        }
        if (l.gate == GateKind::none) device_copy(dev, X, e, elems() * sizeof(real), Copy::device_to_device);
        else op::tint_gate_forward(dev, X, e, R + l.a_old, R + l.a_new, (real)l.b_old, (real)l.b_new, l.gate_w, w.pos.ptr, w.B, w.K, w.T, w.D,
                                       w.Taux);
    }
};

}  // namespace

template <typename real>
void module_forward(const Module<real>& m, real* X, Work<real>& w) {
    ICL_ASSERT_MSG(m.compiled && m.compiled->dev == w.dev, "TinT: a module run on a device it was not compiled for");
#pragma omp atomic
    m.runs += w.B;
    Runner<real> r(*m.compiled, w);
    for (const auto& l : m.compiled->layers) r.layer(l, X);
}

template <typename real>
void module_forward(const Module<real>& m, real* X, const Seq& s, const TintConfig& c) {
    ICL_ASSERT(s.K == c.K());
    Work<real> w(Device::cpu, c, 1, s.T, s.pos, s.train, s.icl);
    if (m.compiled && m.compiled->dev == Device::cpu) {
        module_forward(m, X, w);
        return;
    }
    Module<real> local = m;  // the module tests build modules on the fly: compile a copy (the counter is the caller's)
    compile(local, Device::cpu);
    module_forward(local, X, w);
#pragma omp atomic
    m.runs += 1;
}

}  // namespace tint

#define ICL_TINT_INSTANTIATE(real)                                                                                       \
    template struct tint::HSplit<real>;                                                                                  \
    template struct tint::Chain<real>;                                                                                   \
    template struct tint::TLayer<real>;                                                                                  \
    template struct tint::Module<real>;                                                                                  \
    template struct tint::Work<real>;                                                                                    \
    template void tint::compile(tint::Module<real>&, Device);                                                            \
    template void tint::module_forward(const tint::Module<real>&, real*, tint::Work<real>&);                             \
    template void tint::module_forward(const tint::Module<real>&, real*, const tint::Seq&, const TintConfig&);
ICL_TINT_INSTANTIATE(float)
ICL_TINT_INSTANTIATE(double)

}  // namespace icl
