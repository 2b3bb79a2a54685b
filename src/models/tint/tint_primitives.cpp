// tint_primitives.cpp — the TinT configuration and the primitives every simulated module is made of: H-split
// linear maps, chains, positional terms, gates, TinT attention, and the layer/module forward that runs them.
// See tint_sim.h and spec/tint.md.
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
#pragma omp atomic
    m.runs++;
    for (auto& l : m.layers) layer_forward(l, X, s, c);
}


}  // namespace tint

#define ICL_TINT_INSTANTIATE(real)                                                                                       \
    template struct tint::HSplit<real>;                                                                                  \
    template struct tint::Chain<real>;                                                                                   \
    template struct tint::TLayer<real>;                                                                                  \
    template struct tint::Module<real>;                                                                                  \
    template void tint::layer_forward(const tint::TLayer<real>&, real*, const tint::Seq&, const TintConfig&);          \
    template void tint::module_forward(const tint::Module<real>&, real*, const tint::Seq&, const TintConfig&);
ICL_TINT_INSTANTIATE(float)
ICL_TINT_INSTANTIATE(double)

}  // namespace icl
