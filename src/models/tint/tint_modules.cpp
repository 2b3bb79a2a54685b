// tint_modules.cpp — the constructors of the simulated modules (spec/tint.md §3–4: linear forward, backward and
// descent, layer norm forward and backward, activations, attention forward and backward) and the prefix layout of
// the auxiliary model's linear weights. See tint_sim.h.
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
namespace tint {

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
Module<real> linear_descent(const TintConfig& c, bool bias_only, double bias_scale, int x_block) {
    const int d = c.d, S = c.S, K = c.K(), D = c.D(), H = c.H_lin(), a = d / K, ws = S * a, T = c.T;
    const int xb = x_block < 0 ? S : x_block;  // the block the input x is read from
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
            for (int cc = 0; cc < a; cc++) v.set_all(s * a + cc, xb * a + cc, -c.eta);  // −η x^(c), x in block xb (S)
    for (int cc = 0; cc < a; cc++) v.set_all(ws + cc, cc, -c.eta * bias_scale);       // −η g^(c)
    A.v = Chain<real>::of({v});
    A.o = Chain<real>::identity();  // head h's output lands on chunk h of the prefix row: its own weights
    l.gate = make_gate<real>(c, GateKind::prefix_residual);
    return one_layer<real>(bias_only ? "LayerNorm Descent (β only)" : "Linear Descent", std::move(l));
}

// LayerNorm Descent (spec §4.1, Def E.2): β ← β − η Σ_train ∂y; with c.ln_gamma also the gain, γ ← γ − η Σ_train ∂y⊙x̂.
// The paper and the official code update β only (a Linear Descent would fill the zeros off diag(γ) with −η Σ ∂y x̂ᵀ,
// "very noisy" in the code's words). The exact diagonal update: Linear Descent with x̂ (block S−1 of the LN memory)
// as its input, and a gate with one entry per (position, coordinate) that lets the update through only at each
// prefix row's diagonal entry (row i = jS+s sits in prefix j, block s: coordinate s·d + i) and at the bias block S.
template <typename real>
Module<real> ln_descent(const TintConfig& c) {
    if (!c.ln_gamma) return linear_descent<real>(c, true, 1.0);
    const int d = c.d, S = c.S, K = c.K(), D = c.D(), T = c.T, Ts = c.T_sim();
    const real gs = (real)c.gate_scale;
    Module<real> m = linear_descent<real>(c, false, 1.0, S - 1);
    Gate<real>& g = m.layers[0].gate;  // the prefix-residual gate, spread over the coordinates
    g.width = D;
    g.a_old.assign((size_t)Ts * D, real(0));
    g.a_new.assign((size_t)Ts * D, real(0));  // data rows: tanh(0 + b_new)·e_new, as the per-position gate
    for (int j = 0; j < K; j++) {
        real* ao = g.a_old.data() + (size_t)(T + j) * D;
        real* an = g.a_new.data() + (size_t)(T + j) * D;
        for (int x = 0; x < D; x++) { ao[x] = gs; an[x] = -gs; }  // keep the prefix, drop the update (tanh(−gs + gs) = 0) ...
        for (int s = 0; s < S; s++) an[s * d + j * S + s] = 0;    // ... except on the diagonal γ_{jS+s}
        for (int x = S * d; x < D; x++) an[x] = 0;                // ... and on β (block S)
    }
    m.name = "LayerNorm Descent (γ diagonal and β)";
    return m;
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

// The loss head of App. G (spec §4.4: the paper's module; the official code and op::tint_loss_gradient compute the
// same gradient directly). State: data rows [h_t | e_{x_t} | 0 …] (block 0 the output of ln_f, block 1 the token's
// embedding — the paper copies it from the input layer through the residual stream; the simulator writes it here),
// prefix rows 0; `train` = the loss weights m_t. Out: block 0 = m_t (Eᵀ softmax(E h_t) − e_{x_{t+1}}).
//   1. the feed-forward layer with a softmax activation, hidden weights E and output weights Eᵀ:
//      [h_t | e_{x_t}] -> [Eᵀ p_t | e_{x_t}],  p_t = softmax(E h_t) over the V vocabulary units
//   2. the "self" head, linear attention of score <q_t, k_t> = 1 on the pair (t, t) where m_t = 1, 0 elsewhere;
//      value Eᵀ p_t:  -> [m_t Eᵀ p_t | e_{x_t}]
//   3. the "shift-by-one" head, score 1 on (t, t+1) where m_t = 1; value e_{x_{t+1}}, output −1 times it, plus the
//      residual:  -> [m_t Eᵀ p_t − m_t e_{x_{t+1}} | 0]
// The paper's two heads with their two masks and the linear layer combining them are layers 2 and 3 here (one
// mask per TinT attention layer in this engine); the sum is the same. The scores are exact ones: q and k are the
// same one-hot position term e_0 on every data row, so <q, k> = 1 and the mask picks the pair. No gates (the tanh
// gates would scale the result by tanh(gate_scale) ≠ 1); prefix rows are read by no mask and end at 0.
template <typename real>
Module<real> loss_head(const TintConfig& c, const real* E) {
    const int S = c.S, D = c.D(), H = S + 1, T = c.T;  // one head per d-block
    Module<real> m;
    m.name = "Loss head (App. G)";
    {
        TLayer<real> l;
        l.kind = LayerKind::vocab_softmax;
        l.V = c.V;
        l.E.assign(E, E + (size_t)c.V * c.d);
        l.skip = block_copy<real>(c, {{1, 1}});
        m.layers.push_back(std::move(l));
    }
    auto head = [&](MaskKind mask, const std::vector<std::pair<int, int>>& value, double out_sign, const std::vector<std::pair<int, int>>& keep) {
        TLayer<real> l;
        l.kind = LayerKind::attention;
        TAttn<real>& A = l.attn;
        A.H = H;
        A.mask = mask;
        auto data_e0 = [&](std::vector<real>& P, int, int Ts) { for (int p = 0; p < T; p++) P[p] = 1; };  // row 0 of P
        A.pq = make_pos<real>(c, H, 0, H, data_e0);
        A.pk = make_pos<real>(c, H, 0, H, data_e0);
        A.v = block_copy<real>(c, value);
        auto o = HSplit<real>::dim(D, H);
        o.set_all(0, 0, out_sign);
        A.o = Chain<real>::of({o});
        l.skip = block_copy<real>(c, keep);
        return l;
    };
    m.layers.push_back(head(MaskKind::loss_self, {{0, 0}}, 1, {{1, 1}}));
    m.layers.push_back(head(MaskKind::loss_next, {{1, 0}}, -1, {{0, 0}}));
    return m;
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


#define ICL_TINT_INSTANTIATE(real)                                                                                       \
    template Module<real> linear_forward<real>(const TintConfig&, const std::vector<std::pair<int, int>>&);             \
    template Module<real> linear_backward<real>(const TintConfig&);                                                     \
    template Module<real> linear_descent<real>(const TintConfig&, bool, double, int);                                   \
    template Module<real> ln_descent<real>(const TintConfig&);                                                          \
    template Module<real> ln_forward<real>(const TintConfig&);                                                          \
    template Module<real> ln_backward<real>(const TintConfig&);                                                         \
    template Module<real> act_forward<real>(const TintConfig&);                                                         \
    template Module<real> act_backward<real>(const TintConfig&);                                                        \
    template Module<real> attn_forward<real>(const TintConfig&);                                                        \
    template Module<real> attn_backward<real>(const TintConfig&);                                                       \
    template Module<real> loss_head<real>(const TintConfig&, const real*);                                              \
    template std::vector<real> encode_linear(const TintConfig&, const real*, int, const real*, double);                 \
    template void decode_linear(const TintConfig&, const real*, real*, int, real*);
ICL_TINT_INSTANTIATE(float)
ICL_TINT_INSTANTIATE(double)

}  // namespace tint
}  // namespace icl
