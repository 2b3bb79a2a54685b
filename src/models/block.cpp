// block.cpp — the pre-LN block's activation table, forward and backward. See block.h.
#include "models/block.h"

#include <algorithm>
#include <cmath>

#include "engine/common.h"
#include "layers/dispatch.h"

namespace icl {

void ActTable::add(const std::string& name, Shape shape, const std::string& doc, bool grad) {
    acts.add({name, shape, Init::none, 0, doc, false});
    if (grad) grads.add({name, shape, Init::none, 0, doc, false});
}

void block_parameters(TensorTable& t, const std::string& p, const BlockShape& k, int L, bool kernel_bias) {
    const float s = 0.02f, sres = 0.02f / std::sqrt(2.0f * L);
    auto W = [&](std::string n, Shape sh, float std, std::string doc) { t.add({p + n, sh, Init::normal, std, doc, true}); };
    auto Z = [&](std::string n, Shape sh, std::string doc) { t.add({p + n, sh, Init::zeros, 0, doc, false}); };
    auto O = [&](std::string n, Shape sh, std::string doc) { t.add({p + n, sh, Init::ones, 0, doc, false}); };
    const int64_t C = k.C, NH = k.NH, hs = k.C / k.NH;
    O("ln1.w", {C}, "attention layer-norm gain");
    Z("ln1.b", {C}, "attention layer-norm bias");
    W("attn.qkv.w", {3 * C, C}, s, "query/key/value projection (3C,C)");
    Z("attn.qkv.b", {3 * C}, "query/key/value bias");
    if (kernel_bias) {
        Z("attn.bkv", {NH, hs, hs}, "ICLCA key-value bias b_KV (NH,m,hs): initial numerator state (kernel attention: in the rotated frame of position 0)");
        if (k.attn != AttnKind::linear)  // linear attention has no denominator (D = 1)
            Z("attn.bd", {NH, hs}, "ICLCA denominator bias b_D (NH,m): initial denominator state, unrotated");
    }
    // attention mods, augmented: parallel adapters g(Wx) = Wx + c·B ReLU(A x) on the keys (g2) and values (g1);
    // B = 0 at init, so training starts at plain attention (spec/duallens.md §4.2, A9)
    const int64_t Cu = k.in_width(), dh = k.mod.dh;
    if (k.mod.g2) {
        W("attn.adk.A", {dh, Cu}, s, "key adapter down projection A_K (d_h,C_in)");
        t.add({p + "attn.adk.B", {C, dh}, Init::zeros, 0, "key adapter up projection B_K (C,d_h); 0 at init", true});
    }
    if (k.mod.g1) {
        W("attn.adv.A", {dh, Cu}, s, "value adapter down projection A_V (d_h,C_in)");
        t.add({p + "attn.adv.B", {C, dh}, Init::zeros, 0, "value adapter up projection B_V (C,d_h); 0 at init", true});
    }
    W("attn.proj.w", {C, C}, sres, "attention output projection (C,C)");
    Z("attn.proj.b", {C}, "attention output bias");
    O("ln2.w", {C}, "MLP layer-norm gain");
    Z("ln2.b", {C}, "MLP layer-norm bias");
    W("mlp.fc.w", {4 * C, C}, s, "MLP up projection (4C,C)");
    Z("mlp.fc.b", {4 * C}, "MLP up bias");
    W("mlp.proj.w", {C, 4 * C}, sres, "MLP down projection (C,4C)");
    Z("mlp.proj.b", {C}, "MLP down bias");
}

// The names of the mix at each site: "att" (after LN1, before QKV) and "mlp" (after LN2, before FC).
static std::string mix_out(const BlockShape& k, int site) {
    switch (k.mix) {
        case MixKind::generator: return site == 1 ? "gen.att.out" : "gen.mlp.out";
        case MixKind::concat: return site == 1 ? "cat1" : "cat2";
        default: return site == 1 ? "ln1" : "ln2";
    }
}

// Docs name the stream: "LN1(x)", "[q|k|v]" in the x stream; "LN1y(y)", "y [q|k|v]" in the y stream.
namespace {
struct StreamDocs {
    std::string s, ln, pre;  // the stream's letter; its suffix on "LN1"/"LN2"; its prefix on the other docs
    explicit StreamDocs(char c) : s(1, c), ln(c == 'x' ? "" : s), pre(c == 'x' ? "" : s + " ") {}
};
}  // namespace

// The mix's own entries at one site (after that site's LN entries).
static void mix_activations(ActTable& t, const std::string& h, int64_t B, int64_t T, const BlockShape& k, int site) {
    const std::string n = std::to_string(site);
    const StreamDocs d(k.stream);
    if (k.mix == MixKind::generator) {
        const std::string gn = h + (site == 1 ? "gen.att." : "gen.mlp.");
        t.add(gn + "out", {B, T, k.C}, "T^κ(u; y): generator output fed to the projection", true);
        t.add(gn + "c", {B, T, k.M}, "generator mixing coefficients σ^κ = h(S[y;1])", false);
        t.add(gn + "P", {B, T, (int64_t)k.M * k.r}, "[u;1]ᵀR_all", false);
        t.add(gn + "z", {B, T, k.r}, "R(y)ᵀ[u;1]", false);
        t.add(gn + "G", {B, T, (int64_t)k.M * k.r}, "c_m z_k", false);
    } else if (k.mix == MixKind::concat) {
        t.add(h + "cat" + n, {B, T, (int64_t)k.Cx + k.C}, "[LN" + n + "x(x), LN" + n + d.ln + "(" + d.s + ")]", true);
    }
}

void block_activations(ActTable& t, const std::string& h, int64_t B, int64_t T, const BlockShape& k) {
    const int64_t C = k.C, NH = k.NH, m = k.C / k.NH;
    const StreamDocs d(k.stream);
    const std::string ln1 = "LN1" + d.ln, ln2 = "LN2" + d.ln;
    t.add(h + "ln1", {B, T, C}, ln1 + "(" + d.s + ")", true);
    t.add(h + "ln1.mean", {B, T}, ln1 + " mean", false);
    t.add(h + "ln1.rstd", {B, T}, ln1 + " 1/std", false);
    mix_activations(t, h, B, T, k, 1);
    t.add(h + "qkv", {B, T, 3 * C}, d.pre + "[q|k|v]", true);
    for (const char* g : {"adk", "adv"})
        if (g[2] == 'k' ? k.mod.g2 : k.mod.g1) {
            const std::string w = g[2] == 'k' ? "key" : "value";
            t.add(h + g + ".z", {B, T, (int64_t)k.mod.dh}, w + " adapter pre-activation u·Aᵀ", true);
            t.add(h + g + ".u", {B, T, (int64_t)k.mod.dh}, w + " adapter hidden ReLU(u·Aᵀ)", false);
        }
    if (k.attn == AttnKind::softmax) {
        if (k.mod.attention_active())  // the modifications work on the whole probability matrix (layers/attention_mods.h)
            t.add(h + "att", {B, NH, T, T}, d.pre + "attention probabilities (causal part valid)", false);
        else  // plain softmax: the O(T) form (layers/attention.h); --dump-npy rebuilds <h>att from it (attention_probability_dumps)
            t.add(h + "lse", {B, NH, T}, d.pre + "attention row log-sum-exp (the probabilities are recomputed from it)", false);
        t.add(h + "atty", {B, T, C}, d.pre + "attention output, heads concatenated", true);
    } else if (k.attn == AttnKind::linear) {
        t.add(h + "atty", {B, T, C}, "linear attention output (every token reads every token), heads concatenated", true);
    } else {
        t.add(h + "phiq", {B, NH, T, m}, "a = phi(q) = elu(q)+1", false);
        t.add(h + "phik", {B, NH, T, m}, "c = phi(k) = elu(k)+1", false);
        t.add(h + "rphiq", {B, NH, T, m}, "R_pos phi(q) (RoPE after phi)", false);
        t.add(h + "rphik", {B, NH, T, m}, "R_pos phi(k) (RoPE after phi)", false);
        t.add(h + "den", {B, NH, T}, "denominator phi(q).(sum phi(k) + b_D) + eps", false);
        t.add(h + "atty", {B, T, C}, "kernel attention output, heads concatenated", true);
    }
    t.add(h + "attproj", {B, T, C}, d.pre + "attention output projection", true);
    t.add(h + "res2", {B, T, C}, d.pre + "residual after attention", true);
    t.add(h + "ln2", {B, T, C}, ln2 + "(" + d.s + ")", true);
    t.add(h + "ln2.mean", {B, T}, ln2 + " mean", false);
    t.add(h + "ln2.rstd", {B, T}, ln2 + " 1/std", false);
    mix_activations(t, h, B, T, k, 2);
    t.add(h + "fch", {B, T, 4 * C}, d.pre + "MLP pre-activation", true);
    t.add(h + "fch_gelu", {B, T, 4 * C}, d.pre + (k.act == ActKind::relu ? "ReLU" : "GELU") + "(MLP pre-activation)", true);
    t.add(h + "fcproj", {B, T, C}, d.pre + "MLP output", true);
    t.add(h + "res3", {B, T, C}, d.pre + "residual after MLP (block output)", true);
}

// u = LN(x) at site 1 (attention) or 2 (MLP) → what the projection reads.
template <typename real>
static const real* mix_forward(ModelState<real>& s, const std::string& h, const std::string& p, int site, const BlockRun<real>& b) {
    const BlockShape& k = b.k;
    const int N = b.B * b.T;
    auto A = [&](const std::string& n) { return s.act(h + n); };
    const std::string ln = site == 1 ? "ln1" : "ln2";
    if (k.mix == MixKind::generator) {
        const std::string g = site == 1 ? "gen.att." : "gen.mlp.";
        op::generator_forward(s.dev, A(g + "out"), A(g + "c"), A(g + "P"), A(g + "z"), A(g + "G"), A(ln), b.y, s.param(p + g + "S"),
                              s.param(p + g + "L"), s.param(p + g + "R"), N, k.C, k.Dy, k.M, k.r, k.h);
    } else if (k.mix == MixKind::concat) {
        op::concat_forward(s.dev, A(mix_out(k, site)), site == 1 ? b.ux1 : b.ux2, A(ln), N, k.Cx, k.C);
    }
    return A(mix_out(k, site));
}

// Backward of mix_forward: d(mix output) → d LN output (and dy / the x stream's dLN).
template <typename real>
static void mix_backward(ModelState<real>& s, const std::string& h, const std::string& p, int site, const BlockRun<real>& b) {
    const BlockShape& k = b.k;
    const int N = b.B * b.T;
    auto A = [&](const std::string& n) { return s.act(h + n); };
    auto D = [&](const std::string& n) { return s.dact(h + n); };
    const std::string ln = site == 1 ? "ln1" : "ln2";
    if (k.mix == MixKind::generator) {
        const std::string g = site == 1 ? "gen.att." : "gen.mlp.";
        // gen.<site>.out = T^κ(ln; y)
        op::generator_backward(s.dev, D(ln), b.dy, s.grad(p + g + "S"), s.grad(p + g + "L"), s.grad(p + g + "R"), b.gscratch, D(g + "out"),
                               A(ln), b.y, A(g + "c"), A(g + "P"), A(g + "z"), A(g + "G"), s.param(p + g + "S"), s.param(p + g + "L"),
                               s.param(p + g + "R"), N, k.C, k.Dy, k.M, k.r, k.h);
    } else if (k.mix == MixKind::concat) {
        // cat = [ux, ln]: the x part goes into the x stream's LN output gradient
        op::concat_backward(s.dev, site == 1 ? b.dux1 : b.dux2, D(ln), D(mix_out(k, site)), N, k.Cx, k.C);
    }
}

template <typename real>
real* block_forward(ModelState<real>& s, const std::string& h, const std::string& p, const real* x, const BlockRun<real>& b) {
    const Device dev = s.dev;
    const BlockShape& k = b.k;
    const int N = b.B * b.T, C = k.C, Cu = k.in_width();
    auto A = [&](const std::string& n) { return s.act(h + n); };
    auto P = [&](const std::string& n) { return s.param(p + n); };
    // x_mid = x + attn(mix(LN1(x)))·Woᵀ + bo
    op::layernorm_forward(dev, A("ln1"), A("ln1.mean"), A("ln1.rstd"), x, P("ln1.w"), P("ln1.b"), N, C);
    const real* u = mix_forward(s, h, p, 1, b);
    op::matmul_forward(dev, A("qkv"), u, P("attn.qkv.w"), P("attn.qkv.b"), N, Cu, 3 * C);
    ICL_ASSERT_MSG(k.attn == AttnKind::softmax || !k.mod.any(), "attention mods need softmax attention");
    // augmented: k += c·ReLU(u·A_Kᵀ)·B_Kᵀ (g2), v += c·ReLU(u·A_Vᵀ)·B_Vᵀ (g1)
    if (k.mod.adapters_active()) {
        if (k.mod.g2) op::qkv_adapter_forward(dev, A("qkv"), A("adk.z"), A("adk.u"), u, P("attn.adk.A"), P("attn.adk.B"), k.mod.c, 1, N, Cu, C, k.mod.dh);
        if (k.mod.g1) op::qkv_adapter_forward(dev, A("qkv"), A("adv.z"), A("adv.u"), u, P("attn.adv.A"), P("attn.adv.B"), k.mod.c, 2, N, Cu, C, k.mod.dh);
    }
    ICL_ASSERT_MSG(!b.kstart || (k.attn == AttnKind::softmax && !k.mod.attention_active()), "a key start needs plain softmax attention");
    if (b.attention) {
        // atty = the caller's attention of qkv (inference only)
        ICL_ASSERT_MSG(k.attn == AttnKind::softmax && !k.mod.any() && !b.kstart, "an attention override replaces plain softmax attention");
        b.attention(h, A("qkv"), A("atty"));
    } else if (k.attn == AttnKind::softmax && k.mod.attention_active()) {
        // regularized / negative attention; the lowsim rule's input similarity reads u
        op::attention_mod_forward(dev, A("atty"), A("att"), b.scratch, A("qkv"), k.mod.needs_sim_src() ? u : nullptr, k.mod, b.mod_seed, b.B,
                                  b.T, C, k.NH, Cu);
    } else if (k.attn == AttnKind::softmax) {
        op::attention_forward_lse(dev, A("atty"), A("lse"), b.scratch, A("qkv"), b.B, b.T, C, k.NH, b.kstart);
    } else if (k.attn == AttnKind::linear) {
        // atty_t = (b_KV + Σ_j k_j v_jᵀ)ᵀ q_t over the whole sequence (no mask, no positions)
        op::linear_attention_forward(dev, A("atty"), A("qkv"), b.bias ? P("attn.bkv") : (const real*)nullptr, b.B, b.T, C, k.NH);
    } else {
        const real* bkv = b.bias ? P("attn.bkv") : nullptr;
        const real* bd = b.bias ? P("attn.bd") : nullptr;
        op::kernel_attention_forward(dev, A("atty"), A("phiq"), A("phik"), A("rphiq"), A("rphik"), A("den"), b.scratch, A("qkv"), b.pos,
                                     bkv, bd, b.B, b.T, C, k.NH, b.eps);
    }
    op::matmul_forward(dev, A("attproj"), A("atty"), P("attn.proj.w"), P("attn.proj.b"), N, C, C);
    op::residual_forward(dev, A("res2"), x, A("attproj"), (int64_t)N * C);
    // x_out = x_mid + GELU(mix(LN2(x_mid))·W1ᵀ + b1)·W2ᵀ + b2
    op::layernorm_forward(dev, A("ln2"), A("ln2.mean"), A("ln2.rstd"), A("res2"), P("ln2.w"), P("ln2.b"), N, C);
    u = mix_forward(s, h, p, 2, b);
    op::matmul_forward(dev, A("fch"), u, P("mlp.fc.w"), P("mlp.fc.b"), N, Cu, 4 * C);
    if (k.act == ActKind::relu) op::relu_forward(dev, A("fch_gelu"), A("fch"), (int64_t)N * 4 * C);
    else op::gelu_forward(dev, A("fch_gelu"), A("fch"), (int64_t)N * 4 * C);
    op::matmul_forward(dev, A("fcproj"), A("fch_gelu"), P("mlp.proj.w"), P("mlp.proj.b"), N, 4 * C, C);
    op::residual_forward(dev, A("res3"), A("res2"), A("fcproj"), (int64_t)N * C);
    return A("res3");
}

template <typename real>
void block_backward(ModelState<real>& s, const std::string& h, const std::string& p, const real* x, real* dx, const BlockRun<real>& b) {
    const Device dev = s.dev;
    const BlockShape& k = b.k;
    const int N = b.B * b.T, C = k.C, Cu = k.in_width();
    auto A = [&](const std::string& n) { return s.act(h + n); };
    auto D = [&](const std::string& n) { return s.dact(h + n); };
    auto P = [&](const std::string& n) { return s.param(p + n); };
    auto G = [&](const std::string& n) { return s.grad(p + n); };
    ICL_ASSERT_MSG(!b.attention, "block_backward: the forward's attention was overridden (inference only)");
    const std::string u2 = mix_out(k, 2), u1 = mix_out(k, 1);
    // The shared layout (b.shared_grads, share_block_gradients): this block's own gradients still hold the previous
    // block's values. In a block whose own gradients each have one writer (block_sets_own_gradients) that writer
    // SETS them; otherwise blocks_backward has zeroed them and every op adds.
    const GradWrite first = b.shared_grads && block_sets_own_gradients(k) ? GradWrite::set : GradWrite::add;
    // A residual's d(input) that is d(out)'s own buffer (the shared layout's residual stream) already holds it.
    auto residual_backward = [&](real* dinp1, real* dinp2, const real* dout) {
        if (dinp1 == dout) dinp1 = nullptr;
        if (dinp2 == dout) dinp2 = nullptr;
        if (dinp1 || dinp2) op::residual_backward(dev, dinp1, dinp2, dout, (int64_t)N * C);
    };
    // res3 = res2 + fcproj
    residual_backward(D("res2"), D("fcproj"), D("res3"));
    // fcproj = fch_gelu·W2ᵀ + b2
    op::matmul_backward(dev, D("fch_gelu"), G("mlp.proj.w"), G("mlp.proj.b"), D("fcproj"), A("fch_gelu"), P("mlp.proj.w"), N, 4 * C, C, first);
    // fch_gelu = GELU(fch)   (or ReLU(fch))
    if (k.act == ActKind::relu) op::relu_backward(dev, D("fch"), A("fch"), D("fch_gelu"), (int64_t)N * 4 * C, first);
    else op::gelu_backward(dev, D("fch"), A("fch"), D("fch_gelu"), (int64_t)N * 4 * C, first);
    // fch = mix(ln2)·W1ᵀ + b1
    op::matmul_backward(dev, D(u2), G("mlp.fc.w"), G("mlp.fc.b"), D("fch"), A(u2), P("mlp.fc.w"), N, Cu, 4 * C, first);
    mix_backward(s, h, p, 2, b);
    // ln2 = LN2(res2)
    op::layernorm_backward(dev, D("res2"), G("ln2.w"), G("ln2.b"), D("ln2"), A("res2"), P("ln2.w"), A("ln2.mean"), A("ln2.rstd"), N, C);
    // res2 = x + attproj
    residual_backward(dx, D("attproj"), D("res2"));
    // attproj = atty·Woᵀ + bo
    op::matmul_backward(dev, D("atty"), G("attn.proj.w"), G("attn.proj.b"), D("attproj"), A("atty"), P("attn.proj.w"), N, C, C, first);
    if (k.attn == AttnKind::softmax && k.mod.attention_active()) {
        // atty = attention_mod(qkv)
        op::attention_mod_backward(dev, D("qkv"), b.scratch, D("atty"), A("qkv"), A("att"), k.mod.needs_sim_src() ? A(u1) : nullptr, k.mod,
                                   b.mod_seed, b.B, b.T, C, k.NH, Cu);
    } else if (k.attn == AttnKind::softmax) {
        // atty = attention(qkv)
        op::attention_backward_lse(dev, D("qkv"), b.scratch, D("atty"), A("atty"), A("qkv"), A("lse"), b.B, b.T, C, k.NH, b.kstart, first);
    } else if (k.attn == AttnKind::linear) {
        // atty = linattn(qkv; b_KV)
        op::linear_attention_backward(dev, D("qkv"), b.bias ? G("attn.bkv") : (real*)nullptr, D("atty"), A("qkv"),
                                      b.bias ? P("attn.bkv") : (const real*)nullptr, b.B, b.T, C, k.NH);
    } else {
        // atty = kattn(qkv; b_KV, b_D)
        op::kernel_attention_backward(dev, D("qkv"), b.bias ? G("attn.bkv") : (real*)nullptr, b.bias ? G("attn.bd") : (real*)nullptr,
                                      b.scratch, D("atty"), A("atty"), A("phiq"), A("phik"), A("rphiq"), A("rphik"), A("den"), A("qkv"),
                                      b.pos, b.bias ? P("attn.bkv") : (const real*)nullptr, b.bias ? P("attn.bd") : (const real*)nullptr,
                                      b.B, b.T, C, k.NH);
    }
    // qkv[v] += c·ReLU(u·A_Vᵀ)·B_Vᵀ ;  qkv[k] += c·ReLU(u·A_Kᵀ)·B_Kᵀ
    if (k.mod.adapters_active()) {
        if (k.mod.g1)
            op::qkv_adapter_backward(dev, D(u1), G("attn.adv.A"), G("attn.adv.B"), D("adv.z"), D("qkv"), A(u1), A("adv.z"), A("adv.u"),
                                     P("attn.adv.A"), P("attn.adv.B"), k.mod.c, 2, N, Cu, C, k.mod.dh);
        if (k.mod.g2)
            op::qkv_adapter_backward(dev, D(u1), G("attn.adk.A"), G("attn.adk.B"), D("adk.z"), D("qkv"), A(u1), A("adk.z"), A("adk.u"),
                                     P("attn.adk.A"), P("attn.adk.B"), k.mod.c, 1, N, Cu, C, k.mod.dh);
    }
    // qkv = mix(ln1)·Wqkvᵀ + bqkv
    op::matmul_backward(dev, D(u1), G("attn.qkv.w"), G("attn.qkv.b"), D("qkv"), A(u1), P("attn.qkv.w"), N, Cu, 3 * C, first);
    mix_backward(s, h, p, 1, b);
    // ln1 = LN1(x)
    op::layernorm_backward(dev, dx, G("ln1.w"), G("ln1.b"), D("ln1"), x, P("ln1.w"), A("ln1.mean"), A("ln1.rstd"), N, C);
}

std::string blocks_output(int L, const std::string& x0) { return L > 0 ? "h." + std::to_string(L - 1) + ".res3" : x0; }

template <typename real>
real* blocks_forward(ModelState<real>& s, int L, real* x, const BlockRun<real>& b) {
    for (int l = 0; l < L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        // x = x + attn(LN1(x)) ;  x = x + mlp(LN2(x))
        x = block_forward(s, h, h, x, b);
    }
    return x;
}

template <typename real>
void blocks_backward(ModelState<real>& s, int L, const std::string& x0, const BlockRun<real>& b) {
    for (int l = L - 1; l >= 0; l--) {
        const std::string h = "h." + std::to_string(l) + ".";
        const std::string in = l == 0 ? x0 : "h." + std::to_string(l - 1) + ".res3";
        // Block l's own views still hold block l+1's gradients (share_block_gradients): zeroed, unless the block sets
        // each of them (block_backward). The residual stream's buffer is live: never zeroed here.
        if (b.shared_grads && l < L - 1 && !block_sets_own_gradients(b.k)) {
            const size_t stream = s.gtable.offset(x0);
            for (size_t i = 0; i < s.gtable.size(); i++) {
                const std::string& n = s.gtable.specs[i].name;
                if (n.compare(0, h.size(), h) == 0 && s.gtable.offsets[i] != stream)
                    device_zero(s.dev, s.dacts.ptr + s.gtable.offsets[i], (size_t)s.gtable.specs[i].numel() * sizeof(real));
            }
        }
        // x = x + attn(LN1(x)) ;  x = x + mlp(LN2(x))
        block_backward(s, h, h, s.act(in), s.dact(in), b);
    }
}

bool block_sets_own_gradients(const BlockShape& k) {
    // (adapters declared with c = 0 keep their gradient tensors, which then have no writer: not plain either)
    return k.attn == AttnKind::softmax && k.mix == MixKind::none && !k.mod.any() && !k.mod.g1 && !k.mod.g2;
}

TensorTable share_block_gradients(const TensorTable& grads, int L, const std::string& x0) {
    ICL_ASSERT(L >= 2);
    static const char* const stream[] = {"res2", "attproj", "fcproj", "res3"};  // d of each is d(x0)'s buffer
    TensorTable out;
    for (const TensorSpec& t : grads.specs) {
        int l = -1;
        size_t rest = 0;  // where the name after "h.<l>." starts
        if (t.name.compare(0, 2, "h.") == 0) {
            const size_t dot = t.name.find('.', 2);
            if (dot != std::string::npos && dot > 2 && t.name.find_first_not_of("0123456789", 2) == dot) {
                l = std::stoi(t.name.substr(2, dot - 2));
                rest = dot + 1;
            }
        }
        const std::string own = l < 0 ? "" : t.name.substr(rest);
        if (l >= 0 && std::find(std::begin(stream), std::end(stream), own) != std::end(stream)) out.alias(t, x0);
        else if (l <= 0) out.add(t);   // outside the blocks; block 0's own
        else out.alias(t, "h.0." + own);
    }
    return out;
}

template float* blocks_forward(ModelState<float>&, int, float*, const BlockRun<float>&);
template double* blocks_forward(ModelState<double>&, int, double*, const BlockRun<double>&);
template void blocks_backward(ModelState<float>&, int, const std::string&, const BlockRun<float>&);
template void blocks_backward(ModelState<double>&, int, const std::string&, const BlockRun<double>&);

template float* block_forward<float>(ModelState<float>&, const std::string&, const std::string&, const float*, const BlockRun<float>&);
template double* block_forward<double>(ModelState<double>&, const std::string&, const std::string&, const double*, const BlockRun<double>&);
template void block_backward<float>(ModelState<float>&, const std::string&, const std::string&, const float*, float*, const BlockRun<float>&);
template void block_backward<double>(ModelState<double>&, const std::string&, const std::string&, const double*, double*, const BlockRun<double>&);

size_t block_scratch_size(const BlockShape& k, int B, int T, int nthreads, Device dev) {
    if (dev != Device::cpu) return 0;
    if (k.attn == AttnKind::kernel) return kernel_attention_scratch_size(B, T, k.C, k.NH, nthreads);
    if (k.attn == AttnKind::linear) return 0;  // the op keeps its (hs,hs) state in its own vectors
    if (k.mod.attention_active()) return attention_scratch_size(B, T, k.C, k.NH, nthreads);
    return attention_lse_scratch_size(B, T, k.NH, nthreads);
}

template <typename real>
std::vector<real> attention_probabilities_of(ModelState<real>& s, const std::string& h, const int* kstart) {
    const Shape sh = s.atable.spec(h + "lse").shape;  // (B,NH,T)
    const int B = (int)sh[0], NH = (int)sh[1], T = (int)sh[2], C = (int)(s.atable.spec(h + "qkv").shape[2] / 3);
    const std::vector<real> qkv = s.fetch_act(h + "qkv"), lse = s.fetch_act(h + "lse");
    std::vector<real> att((size_t)B * NH * T * T);
    attention_probabilities(att.data(), qkv.data(), lse.data(), B, T, C, NH, kstart);
    return att;
}

template <typename real>
std::vector<typename ModelState<real>::RealArray> attention_probability_dumps(ModelState<real>& s,
                                                                              const std::function<const int*(const std::string&)>& kstart_of) {
    std::vector<typename ModelState<real>::RealArray> out;
    for (const TensorSpec& t : s.atable.specs) {
        const std::string& n = t.name;
        if (n.size() < 3 || n.compare(n.size() - 3, 3, "lse") != 0) continue;
        const std::string h = n.substr(0, n.size() - 3);  // "h.0.", "aux.h.1.y." …
        const Shape sh = t.shape;
        out.push_back({h + "att", "attention probabilities (B,NH,T,T), recomputed from " + h + "qkv and " + h + "lse for the dump",
                       {sh[0], sh[1], sh[2], sh[2]}, [&s, h, kstart_of] { return attention_probabilities_of(s, h, kstart_of ? kstart_of(h) : nullptr); }});
    }
    return out;
}

template std::vector<float> attention_probabilities_of<float>(ModelState<float>&, const std::string&, const int*);
template std::vector<double> attention_probabilities_of<double>(ModelState<double>&, const std::string&, const int*);
template std::vector<ModelState<float>::RealArray> attention_probability_dumps<float>(ModelState<float>&,
                                                                                     const std::function<const int*(const std::string&)>&);
template std::vector<ModelState<double>::RealArray> attention_probability_dumps<double>(ModelState<double>&,
                                                                                       const std::function<const int*(const std::string&)>&);

}  // namespace icl
