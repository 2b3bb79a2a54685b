// tint.cpp — the TinT primitives, the module constructors and the orchestrator. See tint.h and spec/tint.md.
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

template <typename real>
HSplit<real> HSplit<real>::split(int D, int H) {
    ICL_ASSERT(H > 0 && D % H == 0);
    HSplit o;
    o.dimwise = false;
    o.D = D; o.H = H; o.c = D / H;
    o.W.assign((size_t)H * o.c * o.c, real(0));
    o.b.assign(D, real(0));
    o.live.assign(H, 0);
    return o;
}

template <typename real>
HSplit<real> HSplit<real>::dim(int D, int H) {
    ICL_ASSERT(H > 0 && D % H == 0);
    HSplit o;
    o.dimwise = true;
    o.D = D; o.H = H; o.c = D / H;
    o.W.assign((size_t)H * H * o.c, real(0));  // stored (H,H,c): W[(o·H + i)·c + x] = W_x[o][i]
    o.b.assign(D, real(0));
    o.live.assign((size_t)H * H, 0);
    return o;
}

template <typename real>
void HSplit<real>::set(int h, int o, int i, double v) {
    ICL_ASSERT(!dimwise && h >= 0 && h < H && o >= 0 && o < c && i >= 0 && i < c);
    W[((size_t)h * c + o) * c + i] = (real)v;
    live[h] = 1;
    built_ = false;
}

template <typename real>
void HSplit<real>::set_all(int o, int i, double v) {
    ICL_ASSERT(dimwise && o >= 0 && o < H && i >= 0 && i < H);
    for (int x = 0; x < c; x++) W[((size_t)o * H + i) * c + x] = (real)v;
    live[(size_t)o * H + i] = 1;
}

template <typename real>
void HSplit<real>::apply(real* out, const real* in, int N) const {
    // The constructed ops are sparse (0/±1 patterns): split-wise blocks are applied as lists of their non-zero
    // entries, dimension-wise ops only over the chunk pairs (o,i) that are non-zero somewhere. Serial: the
    // simulator parallelises over sequences (Tint::run), and these ops are far too small for a parallel region.
    if (!dimwise && !built_) prepare();
    for (int n = 0; n < N; n++) {
        const real* x = in + (size_t)n * D;  // (D)
        real* y = out + (size_t)n * D;       // (D)
        for (int j = 0; j < D; j++) y[j] = 0;
        if (!dimwise) {
            // M'[h,:] = W_h M[h,:] + b_h, as Σ over the non-zero W_h[o][i]
            for (const Entry& e : nz_) y[e.o] += e.w * x[e.i];
        } else {
            // M'[:,x] = W_x M[:,x] + b_x
            for (int o = 0; o < H; o++)
                for (int i = 0; i < H; i++) {
                    if (!live[(size_t)o * H + i]) continue;
                    const real* w = W.data() + ((size_t)o * H + i) * c;
                    const real* xi = x + (size_t)i * c;
                    real* yo = y + (size_t)o * c;
                    for (int k = 0; k < c; k++) yo[k] += w[k] * xi[k];
                }
        }
        for (int j = 0; j < D; j++) y[j] += b[j];
    }
}

template <typename real>
void HSplit<real>::prepare() const {
    nz_.clear();
    if (!dimwise)
        for (int h = 0; h < H; h++)
            if (live[h])
                for (int o = 0; o < c; o++)
                    for (int i = 0; i < c; i++) {
                        const real w = W[((size_t)h * c + o) * c + i];
                        if (w != real(0)) nz_.push_back({h * c + o, h * c + i, w});
                    }
    built_ = true;
}

template <typename real>
int64_t HSplit<real>::nonzeros() const {
    int64_t n = 0;
    for (real v : W) n += v != real(0);
    for (real v : b) n += v != real(0);
    return n;
}

template <typename real>
void Chain<real>::apply(real* out, const real* in, int N, int D) const {
    if (zero) { std::fill(out, out + (size_t)N * D, real(0)); return; }
    if (ops.empty()) { std::copy(in, in + (size_t)N * D, out); return; }
    if (ops.size() == 1) { ops[0].apply(out, in, N); return; }
    std::vector<real> a((size_t)N * D), b((size_t)N * D);
    ops[0].apply(a.data(), in, N);
    for (size_t i = 1; i + 1 < ops.size(); i++) {
        ops[i].apply(b.data(), a.data(), N);
        a.swap(b);
    }
    ops.back().apply(out, a.data(), N);
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

// The one-hot position of state row i: data token t = i − K at pos[t]; prefix j at T_aux + j.
static inline int row_position(const Seq& s, const TintConfig& c, int i) { return i < s.K ? c.T + i : s.pos[i - s.K]; }

// May row i read column j (before any transpose)?
static inline bool allowed(MaskKind m, const Seq& s, int i, int j) {
    const int K = s.K;
    switch (m) {
        case MaskKind::data_to_prefix: return i >= K && j < K;
        case MaskKind::prefix_to_train: return i < K && j >= K && s.train[j - K];
        case MaskKind::causal_data:
            return i >= K && j >= K && j <= i && (!s.icl || s.icl[(size_t)(i - K) * s.T + (j - K)]);
    }
    return false;
}

// q/k/v rows (N,D) += lam[h]·P[:, position] in head h's coordinates.
template <typename real>
static void add_position(real* Y, const PosTerm<real>& pt, const Seq& s, const TintConfig& c, int H, int N) {
    if (!pt.used()) return;
    const int D = c.D(), k = D / H, Ts = c.T_sim();
    for (int i = 0; i < N; i++) {
        const int p = row_position(s, c, i);
        for (int h = 0; h < H; h++) {
            if (!pt.lam[h]) continue;
            real* y = Y + (size_t)i * D + (size_t)h * k;
            for (int r = 0; r < k; r++) y[r] += pt.P[(size_t)r * Ts + p];
        }
    }
}

// e_new (N,D) = o( concat_h Σ_j a^h[i][j] v^h_j ), TinT attention with position terms (spec §2.1).
template <typename real>
static void attention(const TAttn<real>& A, real* out, const real* X, const Seq& s, const TintConfig& c) {
    const int N = s.K + s.T, D = c.D(), H = A.H, k = D / H;
    std::vector<real> Q((size_t)N * D), Kx((size_t)N * D), Vx((size_t)N * D), O((size_t)N * D, real(0));
    A.q.apply(Q.data(), X, N, D);
    A.k.apply(Kx.data(), X, N, D);
    A.v.apply(Vx.data(), X, N, D);
    add_position(Q.data(), A.pq, s, c, H, N);
    add_position(Kx.data(), A.pk, s, c, H, N);
    add_position(Vx.data(), A.pv, s, c, H, N);
    // the columns row i may read lie in [j0(i), j1(i)); inside, allowed() has the last word (train flags, ICL mask)
    auto range = [&](int i, int& j0, int& j1) {
        j0 = j1 = 0;
        if (A.mask == MaskKind::data_to_prefix && i >= s.K) { j0 = 0; j1 = s.K; }
        if (A.mask == MaskKind::prefix_to_train && i < s.K) { j0 = s.K; j1 = N; }
        if (A.mask == MaskKind::causal_data && i >= s.K) { j0 = s.K; j1 = i + 1; }
    };
    std::vector<real> a((size_t)N * N);  // a[i][j]: row i's weight on column j (valid inside row i's range)
    for (int h = 0; h < H; h++) {
        for (int i = 0; i < N; i++) {
            int j0, j1;
            range(i, j0, j1);
            const real* qi = Q.data() + (size_t)i * D + (size_t)h * k;
            real* ai = a.data() + (size_t)i * N;
            real mx = -INFINITY;
            for (int j = j0; j < j1; j++) {
                if (!allowed(A.mask, s, i, j)) { ai[j] = -INFINITY; continue; }
                const real* kj = Kx.data() + (size_t)j * D + (size_t)h * k;
                real dot = 0;
                for (int r = 0; r < k; r++) dot += qi[r] * kj[r];
                ai[j] = A.softmax ? (real)A.scale * dot : dot;
                mx = std::max(mx, ai[j]);
            }
            if (A.softmax && mx > -INFINITY) {
                // softmax over the allowed columns (−∞ elsewhere); a row with none is all 0
                real z = 0;
                for (int j = j0; j < j1; j++) {
                    ai[j] = ai[j] == -INFINITY ? real(0) : std::exp(ai[j] - mx);
                    z += ai[j];
                }
                for (int j = j0; j < j1; j++) ai[j] /= z;
            } else {
                for (int j = j0; j < j1; j++) if (ai[j] == -INFINITY) ai[j] = 0;
            }
        }
        for (int i = 0; i < N; i++) {
            real* oi = O.data() + (size_t)i * D + (size_t)h * k;
            int j0, j1;
            if (!A.transpose) range(i, j0, j1);
            else if (i >= s.K) { j0 = i; j1 = N; }  // backward: token i collects a[j][i] from itself and later tokens
            else j0 = j1 = 0;
            for (int j = j0; j < j1; j++) {
                real w;
                if (!A.transpose) {
                    w = a[(size_t)i * N + j];
                } else {
                    // ... that train, or j = i (a[j][i] lies in row j's causal range since j >= i)
                    w = (s.train[j - s.K] || j == i) ? a[(size_t)j * N + i] : real(0);
                }
                if (w == real(0)) continue;
                const real* vj = Vx.data() + (size_t)j * D + (size_t)h * k;
                for (int r = 0; r < k; r++) oi[r] += w * vj[r];
            }
        }
    }
    A.o.apply(out, O.data(), N, D);
}

template <typename real>
void layer_forward(const TLayer<real>& l, real* X, const Seq& s, const TintConfig& c) {
    const int N = s.K + s.T, D = c.D(), d = c.d;
    std::vector<real> e((size_t)N * D);
    switch (l.kind) {
        case LayerKind::attention: attention(l.attn, e.data(), X, s, c); break;
        case LayerKind::mlp: {
            std::vector<real> u((size_t)N * D);
            l.fc.apply(u.data(), X, N, D);
            std::vector<real> v((size_t)N * D);
            if (l.act == ActKind::relu) relu_forward(v.data(), u.data(), u.size());
            else gelu_forward(v.data(), u.data(), u.size());
            l.proj.apply(e.data(), v.data(), N, D);
            break;
        }
        case LayerKind::norm: {
            // group norm of the signal [0,d): f(x) = (x − mean)/sqrt(var + 1e-5), the engine's layernorm with γ=1, β=0
            std::fill(e.begin(), e.end(), real(0));
            std::vector<real> ones(d, real(1)), zeros(d, real(0));
            for (int i = 0; i < N; i++) {
                real mean, rstd;
                layernorm_forward(e.data() + (size_t)i * D, &mean, &rstd, X + (size_t)i * D, ones.data(), zeros.data(), 1, d);
            }
            break;
        }
        case LayerKind::linear: l.map.apply(e.data(), X, N, D); break;
    }
    if (!l.skip.zero) {
        std::vector<real> sk((size_t)N * D);
        l.skip.apply(sk.data(), X, N, D);
        for (size_t i = 0; i < e.size(); i++) e[i] += sk[i];
    }
    if (l.gate.kind == GateKind::none) {
        std::copy(e.begin(), e.end(), X);
        return;
    }
    for (int i = 0; i < N; i++) {
        const int p = row_position(s, c, i);
        const real co = std::tanh(l.gate.a_old[p] + (real)l.gate.b_old), cn = std::tanh(l.gate.a_new[p] + (real)l.gate.b_new);
        real* x = X + (size_t)i * D;
        const real* en = e.data() + (size_t)i * D;
        for (int j = 0; j < D; j++) x[j] = co * x[j] + cn * en[j];
    }
}

template <typename real>
void module_forward(const Module<real>& m, real* X, const Seq& s, const TintConfig& c) {
    for (auto& l : m.layers) layer_forward(l, X, s, c);
}

// ------------------------------------------------------------------------------------------------------
// module constructors. Names: d-blocks b = 0..S of the width D; in the linear modules H = H_lin heads of
// dim K, head s·a + c (a = d/K = S shards) = (weight row slot s, shard c), bias heads S·a + c.

template <typename real>
static Gate<real> make_gate(const TintConfig& c, GateKind kind) {
    Gate<real> g;
    g.kind = kind;
    if (kind == GateKind::none) return g;
    const int Ts = c.T_sim();
    const double gs = c.gate_scale;
    g.a_old.assign(Ts, real(0));
    g.a_new.assign(Ts, real(0));
    for (int p = c.T; p < Ts; p++) g.a_old[p] = (real)gs;  // prefix rows keep their input
    if (kind == GateKind::replace_data) {
        for (int p = c.T; p < Ts; p++) g.a_new[p] = (real)-gs;  // ... and drop the new value
    }
    g.b_new = gs;  // data rows take the new value
    return g;
}

// A position term on the heads in [h0,h1): P (k, T_sim) filled by fill(P).
template <typename real, typename F>
static PosTerm<real> make_pos(const TintConfig& c, int H, int h0, int h1, F fill) {
    PosTerm<real> p;
    const int k = c.D() / H;
    p.P.assign((size_t)k * c.T_sim(), real(0));
    p.lam.assign(H, 0);
    for (int h = h0; h < h1; h++) p.lam[h] = 1;
    fill(p.P, k, c.T_sim());
    return p;
}

// A dimension-wise op over d-blocks copying block src -> dst for each pair (the memory routing).
template <typename real>
static Chain<real> block_copy(const TintConfig& c, const std::vector<std::pair<int, int>>& pairs) {
    if (pairs.empty()) return Chain<real>::none();
    auto op = HSplit<real>::dim(c.D(), c.S + 1);
    for (auto& pr : pairs) op.set_all(pr.second, pr.first, 1);
    return Chain<real>::of({op});
}
static std::vector<std::pair<int, int>> keep_memory(const TintConfig& c) {  // blocks 1..S unchanged
    std::vector<std::pair<int, int>> k;
    for (int b = 1; b <= c.S; b++) k.push_back({b, b});
    return k;
}

// A module of one layer.
template <typename real>
static Module<real> one_layer(const std::string& name, TLayer<real> l) {
    Module<real> m;
    m.name = name;
    m.layers.push_back(std::move(l));
    return m;
}
// A token-wise layer applying one H-split op (replace-data gate).
template <typename real>
static TLayer<real> map_layer(const TintConfig& c, HSplit<real> op) {
    TLayer<real> l;
    l.kind = LayerKind::linear;
    l.map = Chain<real>::of({std::move(op)});
    l.gate = make_gate<real>(c, GateKind::replace_data);
    return l;
}
// A token-wise MLP layer fc -> aux activation -> proj.
template <typename real>
static TLayer<real> mlp_layer(const TintConfig& c, HSplit<real> fc, HSplit<real> proj) {
    TLayer<real> l;
    l.kind = LayerKind::mlp;
    l.act = c.act;
    l.fc = Chain<real>::of({std::move(fc)});
    l.proj = Chain<real>::of({std::move(proj)});
    return l;
}

// Linear Forward (spec §3.1): data rows [0,d) = W x + b from the prefix rows; prefixes unchanged.
template <typename real>
Module<real> linear_forward(const TintConfig& c, const std::vector<std::pair<int, int>>& keep) {
    const int d = c.d, S = c.S, K = c.K(), D = c.D(), H = c.H_lin(), a = d / K, ws = S * a, T = c.T;
    TLayer<real> l;
    l.kind = LayerKind::attention;
    TAttn<real>& A = l.attn;
    A.H = H;
    A.mask = MaskKind::data_to_prefix;
    // query: head s·a+c <- shard c of the signal x; bias heads: e_0 from the data positions
    auto q = HSplit<real>::dim(D, H);
    for (int s = 0; s < S; s++)
        for (int cc = 0; cc < a; cc++) q.set_all(s * a + cc, cc, 1);
    A.q = Chain<real>::of({q});
    A.pq = make_pos<real>(c, H, ws, ws + a, [&](std::vector<real>& P, int, int Ts) { for (int p = 0; p < T; p++) P[p] = 1; });
    // key: the prefix's own chunk s·a+c = shard c of row jS+s; bias heads: e_j from prefix j's position
    auto k = HSplit<real>::dim(D, H);
    for (int h = 0; h < ws; h++) k.set_all(h, h, 1);
    A.k = Chain<real>::of({k});
    auto prefix_onehot = [&](std::vector<real>& P, int, int Ts) { for (int j = 0; j < K; j++) P[(size_t)j * Ts + T + j] = 1; };
    A.pk = make_pos<real>(c, H, ws, ws + a, prefix_onehot);
    // value: bias heads carry the bias chunks; weight heads e_j from the position (so head s·a+c's output is the
    // K-vector [<x^(c), w^(c)_{jS+s}>]_j)
    auto v = HSplit<real>::dim(D, H);
    for (int h = ws; h < ws + a; h++) v.set_all(h, h, 1);
    A.v = Chain<real>::of({v});
    A.pv = make_pos<real>(c, H, 0, ws, prefix_onehot);
    // output: (i) chunk s <- Σ_c head(s·a+c) (full dot products), chunk S+c' <- bias head c';
    // (ii) block 0 permuted so that coordinate i = jS+s <- position s·K+j, block 1 kept; (iii) block 0 += block 1
    auto o1 = HSplit<real>::dim(D, H);
    for (int s = 0; s < S; s++)
        for (int cc = 0; cc < a; cc++) o1.set_all(s, s * a + cc, 1);
    for (int cc = 0; cc < a; cc++) o1.set_all(S + cc, ws + cc, 1);
    auto o2 = HSplit<real>::split(D, S + 1);
    for (int i = 0; i < d; i++) o2.set(0, i, (i % S) * K + i / S, 1);
    for (int i = 0; i < d; i++) o2.set(1, i, i, 1);
    auto o3 = HSplit<real>::dim(D, S + 1);
    o3.set_all(0, 0, 1);
    o3.set_all(0, 1, 1);
    A.o = Chain<real>::of({o1, o2, o3});
    l.skip = block_copy<real>(c, keep);
    l.gate = make_gate<real>(c, GateKind::replace_data);
    return one_layer<real>("Linear Forward", std::move(l));
}

// Query of Linear Backward = key of Linear Descent: head s·a+c gets the K-vector [g_{jS+s}]_j of the signal g.
template <typename real>
static Chain<real> gradient_rows(const TintConfig& c) {
    const int d = c.d, S = c.S, K = c.K(), D = c.D(), H = c.H_lin(), a = d / K;
    auto g1 = HSplit<real>::split(D, S + 1);  // block 0: position s·K + j <- coordinate jS+s
    for (int s = 0; s < S; s++)
        for (int j = 0; j < K; j++) g1.set(0, s * K + j, j * S + s, 1);
    auto g2 = HSplit<real>::dim(D, H);  // chunk s -> heads s·a + c for every shard c
    for (int s = 0; s < S; s++)
        for (int cc = 0; cc < a; cc++) g2.set_all(s * a + cc, s, 1);
    return Chain<real>::of({g1, g2});
}

// Linear Backward (spec §3.2): data rows [0,d) = Wᵀ g, memory blocks 1..S kept; prefixes unchanged.
template <typename real>
Module<real> linear_backward(const TintConfig& c) {
    const int d = c.d, S = c.S, K = c.K(), D = c.D(), H = c.H_lin(), a = d / K, ws = S * a, T = c.T;
    TLayer<real> l;
    l.kind = LayerKind::attention;
    TAttn<real>& A = l.attn;
    A.H = H;
    A.mask = MaskKind::data_to_prefix;
    A.q = gradient_rows<real>(c);
    A.k = Chain<real>::none();  // key = e_j from prefix j's position, on the weight heads
    A.pk = make_pos<real>(c, H, 0, ws, [&](std::vector<real>& P, int, int Ts) { for (int j = 0; j < K; j++) P[(size_t)j * Ts + T + j] = 1; });
    auto v = HSplit<real>::dim(D, H);  // value = the prefix's own chunk s·a+c = shard c of row jS+s
    for (int h = 0; h < ws; h++) v.set_all(h, h, 1);
    A.v = Chain<real>::of({v});
    auto o = HSplit<real>::dim(D, H);  // chunk c <- Σ_s head(s·a+c) = (Wᵀ g)^(c)
    for (int cc = 0; cc < a; cc++)
        for (int s = 0; s < S; s++) o.set_all(cc, s * a + cc, 1);
    A.o = Chain<real>::of({o});
    l.skip = block_copy<real>(c, keep_memory(c));
    l.gate = make_gate<real>(c, GateKind::replace_data);
    return one_layer<real>("Linear Backward", std::move(l));
}

// Linear Descent (spec §3.3): prefix rows += −η Σ_{t∈train} g_t x_tᵀ (x from block S), prefix 0's bias slot
// += −η·bias_scale Σ_train g_t. Prefix queries attend to the training data tokens; prefix-residual gate.
template <typename real>
Module<real> linear_descent(const TintConfig& c, bool bias_only, double bias_scale) {
    const int d = c.d, S = c.S, K = c.K(), D = c.D(), H = c.H_lin(), a = d / K, ws = S * a, T = c.T;
    TLayer<real> l;
    l.kind = LayerKind::attention;
    TAttn<real>& A = l.attn;
    A.H = H;
    A.mask = MaskKind::prefix_to_train;
    A.q = Chain<real>::none();  // prefix j's query = e_j (position), on every head that updates something
    A.pq = make_pos<real>(c, H, bias_only ? ws : 0, ws + a,
                          [&](std::vector<real>& P, int, int Ts) { for (int j = 0; j < K; j++) P[(size_t)j * Ts + T + j] = 1; });
    A.k = bias_only ? Chain<real>::none() : gradient_rows<real>(c);  // data key on head s·a+c: [g_{j'S+s}]_j'
    A.pk = make_pos<real>(c, H, ws, ws + a, [&](std::vector<real>& P, int, int) { for (int p = 0; p < T; p++) P[p] = 1; });  // e_0
    auto v = HSplit<real>::dim(D, H);
    if (!bias_only)
        for (int s = 0; s < S; s++)
            for (int cc = 0; cc < a; cc++) v.set_all(s * a + cc, S * a + cc, -c.eta);  // −η x^(c), x in block S
    for (int cc = 0; cc < a; cc++) v.set_all(ws + cc, cc, -c.eta * bias_scale);       // −η g^(c)
    A.v = Chain<real>::of({v});
    A.o = Chain<real>::identity();  // head h's output lands on chunk h of the prefix row: its own weights
    l.gate = make_gate<real>(c, GateKind::prefix_residual);
    return one_layer<real>(bias_only ? "LayerNorm Descent (β only)" : "Linear Descent", std::move(l));
}

// LayerNorm Forward (spec §4.1): group-norm x̂ = f(x) (x kept in block S), then Linear Forward with diag(γ), β,
// which also stores x̂ in block S−1: data rows = [γ⊙x̂+β | … | x̂ | x].
template <typename real>
Module<real> ln_forward(const TintConfig& c) {
    const int S = c.S;
    TLayer<real> n;
    n.kind = LayerKind::norm;
    n.skip = block_copy<real>(c, {{0, S}});
    n.gate = make_gate<real>(c, GateKind::replace_data);
    Module<real> m = linear_forward<real>(c, {{0, S - 1}, {S, S}});
    m.layers.insert(m.layers.begin(), std::move(n));
    m.name = "LayerNorm Forward";
    return m;
}

// LayerNorm Backward (spec §4.1, Def 2.8): g = γ⊙∂y (Linear Backward with diag γ), then
// [0,d) <- x + ε g; group norm; [0,d) <- (1/ε)·f(x + εg) − (1/ε)·x̂.
template <typename real>
Module<real> ln_backward(const TintConfig& c) {
    const int S = c.S, D = c.D();
    Module<real> m = linear_backward<real>(c);
    m.name = "LayerNorm Backward";
    auto shift = HSplit<real>::dim(D, S + 1);
    shift.set_all(0, 0, c.eps);
    shift.set_all(0, S, 1);
    for (int b = 1; b <= S; b++) shift.set_all(b, b, 1);
    TLayer<real> l1 = map_layer<real>(c, shift);
    TLayer<real> l2;
    l2.kind = LayerKind::norm;
    l2.skip = block_copy<real>(c, keep_memory(c));
    l2.gate = make_gate<real>(c, GateKind::replace_data);
    auto diff = HSplit<real>::dim(D, S + 1);
    diff.set_all(0, 0, 1 / c.eps);
    diff.set_all(0, S - 1, -1 / c.eps);
    for (int b = 1; b <= S; b++) diff.set_all(b, b, 1);
    TLayer<real> l3 = map_layer<real>(c, diff);
    m.layers.push_back(std::move(l1));
    m.layers.push_back(std::move(l2));
    m.layers.push_back(std::move(l3));
    return m;
}

// Activation Forward (spec §4.2): [0,d) <- σ(x), x kept in block S.
template <typename real>
Module<real> act_forward(const TintConfig& c) {
    const int S = c.S, D = c.D();
    auto fc = HSplit<real>::dim(D, S + 1);
    fc.set_all(0, 0, 1);
    auto pr = HSplit<real>::dim(D, S + 1);
    pr.set_all(0, 0, 1);
    TLayer<real> l = mlp_layer<real>(c, fc, pr);
    l.skip = block_copy<real>(c, {{0, S}});
    l.gate = make_gate<real>(c, GateKind::replace_data);
    return one_layer<real>("Activation Forward", std::move(l));
}

// Activation Backward (spec §4.2, Def F.1): fc: [0,d) <- x + ε ∂y, block S keeps x; σ; proj: [0,d) <-
// (1/ε)σ(x+ε∂y) − (1/ε)σ(x). No gate (the prefixes of activation modules are zero).
template <typename real>
Module<real> act_backward(const TintConfig& c) {
    const int S = c.S, D = c.D();
    auto fc = HSplit<real>::dim(D, S + 1);
    fc.set_all(0, 0, c.eps);
    fc.set_all(0, S, 1);
    fc.set_all(S, S, 1);
    auto pr = HSplit<real>::dim(D, S + 1);
    pr.set_all(0, 0, 1 / c.eps);
    pr.set_all(0, S, -1 / c.eps);
    TLayer<real> l = mlp_layer<real>(c, fc, pr);
    return one_layer<real>("Activation Backward", std::move(l));
}

// The softmax attention heads that simulate the auxiliary heads: head i reads aux head i's d_h coordinates of
// the block `blk` (q, k or v), moved to slot (i mod hpp) of the head; `to_front` puts them at the head's start.
template <typename real>
static Chain<real> head_select(const TintConfig& c, int blk, bool to_front) {
    const int D = c.D(), H = c.H_sim, ks = D / H, P = c.d / ks, hpp = c.n_h / P, dh = c.d / c.n_h;
    auto sel = HSplit<real>::dim(D, H);  // head i <- the partition chunk holding aux head i
    for (int i = 0; i < c.n_h; i++) sel.set_all(i, blk * P + i / hpp, 1);
    auto mv = HSplit<real>::split(D, H);  // keep only aux head i's slot
    for (int i = 0; i < c.n_h; i++)
        for (int r = 0; r < dh; r++) mv.set(i, to_front ? r : (i % hpp) * dh + r, (i % hpp) * dh + r, 1);
    return Chain<real>::of({sel, mv});
}
template <typename real>
static TAttn<real> aux_heads(const TintConfig& c, int qblk, int kblk, int vblk) {
    const int D = c.D(), H = c.H_sim, ks = D / H, P = c.d / ks, hpp = c.n_h / P, dh = c.d / c.n_h;
    TAttn<real> A;
    A.H = H;
    A.softmax = true;
    A.scale = 1.0 / std::sqrt((double)dh);  // the auxiliary's scaling 1/√d_h
    A.mask = MaskKind::causal_data;
    A.q = head_select<real>(c, qblk, true);
    A.k = head_select<real>(c, kblk, true);
    A.v = head_select<real>(c, vblk, false);
    auto o = HSplit<real>::dim(D, H);  // partition chunk p <- Σ of its heads (distinct slots: a concatenation)
    for (int i = 0; i < c.n_h; i++) o.set_all(i / hpp, i, 1);
    A.o = Chain<real>::of({o});
    return A;
}

// Self-attention forward, the softmax part (spec §4.3): input data rows [q | k | v | x] (blocks 0, 1, 2, S) from
// the three Linear Forward calls; output [concat_h o^h | … | q | k | x] with [q|k|x] in blocks S−2..S.
template <typename real>
Module<real> attn_forward(const TintConfig& c) {
    const int S = c.S;
    TLayer<real> l;
    l.kind = LayerKind::attention;
    l.attn = aux_heads<real>(c, 0, 1, 2);
    l.skip = block_copy<real>(c, {{0, S - 2}, {1, S - 1}, {S, S}});
    l.gate = make_gate<real>(c, GateKind::replace_data);
    return one_layer<real>("Attention Forward (softmax)", std::move(l));
}

// Self-attention backward (spec §4.3): the scores recomputed from the stored [q|k], transposed and masked:
// [0,d) <- ∂v_t = Σ_{j>=t, j trains or j=t} a_{j,t} ∂o_j per head; memory kept.
template <typename real>
Module<real> attn_backward(const TintConfig& c) {
    const int S = c.S;
    TLayer<real> l;
    l.kind = LayerKind::attention;
    l.attn = aux_heads<real>(c, S - 2, S - 1, 0);
    l.attn.transpose = true;
    l.skip = block_copy<real>(c, keep_memory(c));
    l.gate = make_gate<real>(c, GateKind::replace_data);
    return one_layer<real>("Attention Backward (value path)", std::move(l));
}

// ------------------------------------------------------------------------------------------------------
// prefixes

template <typename real>
std::vector<real> encode_linear(const TintConfig& c, const real* W, int ldw, const real* b, double bias_scale) {
    const int d = c.d, S = c.S, K = c.K(), D = c.D();
    std::vector<real> P((size_t)K * D, real(0));
    for (int j = 0; j < K; j++) {
        real* row = P.data() + (size_t)j * D;
        for (int s = 0; s < S; s++) std::copy(W + (size_t)(j * S + s) * ldw, W + (size_t)(j * S + s) * ldw + d, row + (size_t)s * d);
        for (int r = 0; r < d; r++) row[(size_t)S * d + r] = (real)(b[r] * bias_scale);
    }
    return P;
}

template <typename real>
void decode_linear(const TintConfig& c, const real* prefix, real* W, int ldw, real* b) {
    const int d = c.d, S = c.S, D = c.D();
    for (int i = 0; i < d; i++) std::copy(prefix + (size_t)(i / S) * D + (size_t)(i % S) * d, prefix + (size_t)(i / S) * D + (size_t)(i % S) * d + d,
                                          W + (size_t)i * ldw);
    if (b) std::copy(prefix + (size_t)S * d, prefix + (size_t)S * d + d, b);
}

}  // namespace tint

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
    template struct tint::HSplit<real>;                                                                                  \
    template struct tint::Chain<real>;                                                                                   \
    template struct tint::TLayer<real>;                                                                                  \
    template struct tint::Module<real>;                                                                                  \
    template void tint::layer_forward(const tint::TLayer<real>&, real*, const tint::Seq&, const TintConfig&);          \
    template void tint::module_forward(const tint::Module<real>&, real*, const tint::Seq&, const TintConfig&);         \
    template tint::Module<real> tint::linear_forward<real>(const TintConfig&, const std::vector<std::pair<int, int>>&); \
    template tint::Module<real> tint::linear_backward<real>(const TintConfig&);                                         \
    template tint::Module<real> tint::linear_descent<real>(const TintConfig&, bool, double);                            \
    template tint::Module<real> tint::ln_forward<real>(const TintConfig&);                                              \
    template tint::Module<real> tint::ln_backward<real>(const TintConfig&);                                             \
    template tint::Module<real> tint::act_forward<real>(const TintConfig&);                                             \
    template tint::Module<real> tint::act_backward<real>(const TintConfig&);                                            \
    template tint::Module<real> tint::attn_forward<real>(const TintConfig&);                                            \
    template tint::Module<real> tint::attn_backward<real>(const TintConfig&);                                           \
    template std::vector<real> tint::encode_linear(const TintConfig&, const real*, int, const real*, double);           \
    template void tint::decode_linear(const TintConfig&, const real*, real*, int, real*);                               \
    template struct Tint<real>;                                                                                          \
    template void tint_loss_gradient(real*, const real*, const real*, const int*, const uint8_t*, int, int, int);       \
    template double tint_loss(const real*, const int*, const uint8_t*, int, int);
ICL_TINT_INSTANTIATE(float)
ICL_TINT_INSTANTIATE(double)

}  // namespace icl
