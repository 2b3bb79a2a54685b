// cgt.cpp — the Contextually Guided Transformer: registry, forward/backward (main + aux pass), regularizers,
// VAE, inference modes, folding. See cgt.h and spec/cgt.md;
// the token-by-token streaming decode is in cgt_stream.cpp.
#include "models/cgt/cgt.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "engine/checkpoint.h"
#include "engine/common.h"
#include "layers/dispatch.h"
#include "models/attn_mod.h"
#include "models/block.h"
#include "models/lm_io.h"

namespace icl {

namespace {
// pass_kstart_ set for the length of one pass (the masked aux pass's key starts), and null again when it ends —
// by return or by exception, so a failed pass cannot leave the next one masked
struct KeyStartScope {
    const int*& slot;
    KeyStartScope(const int*& s, const int* v) : slot(s) { slot = v; }
    ~KeyStartScope() { slot = nullptr; }
    KeyStartScope(const KeyStartScope&) = delete;
    KeyStartScope& operator=(const KeyStartScope&) = delete;
};
}  // namespace

// ------------------------------------------------------------------------------------------------------
// config

GPTConfig CGTConfig::x_config() const {
    GPTConfig g;
    g.L = L; g.C = dx; g.NH = NHx; g.V = V; g.maxT = maxT; g.d_in = d_in; g.d_out = d_out;
    g.mod = mod;
    return g;
}

nlohmann::json CGTConfig::to_json() const {
    nlohmann::json j = {{"L", L}, {"ell", ell}, {"dx", dx}, {"dy", dy}, {"NHx", NHx}, {"NHy", NHy}, {"r", r}, {"M", M},
                        {"h", h == MixFn::tanh ? "tanh" : "softmax"}, {"V", V}, {"maxT", maxT}, {"d_in", d_in}, {"d_out", d_out}, {"vae", vae}};
    if (attn_mods_configured(mod)) j["attn_mod"] = attn_mods_to_json(mod);  // only then: plain configs keep their exact JSON
    if (ln_gen) j["ln_gen"] = true;                                        // likewise
    return j;
}

CGTConfig CGTConfig::from_json(const nlohmann::json& j) {
    CGTConfig c;
    // hard limits before anything is sized from these numbers (engine/checkpoint.h)
    const struct { const char* key; int* dst; int lo, hi; } fields[] = {
        {"L", &c.L, 1, 1 << 12},     {"ell", &c.ell, 0, 1 << 12},  {"dx", &c.dx, 1, 1 << 16},      {"dy", &c.dy, 0, 1 << 16},
        {"NHx", &c.NHx, 1, 1 << 12}, {"NHy", &c.NHy, 1, 1 << 12},  {"r", &c.r, 1, 1 << 12},        {"M", &c.M, 1, 1 << 12},
        {"V", &c.V, 0, 1 << 24},     {"maxT", &c.maxT, 1, 1 << 24}, {"d_in", &c.d_in, 0, 1 << 16}, {"d_out", &c.d_out, 0, 1 << 16}};
    for (const auto& f : fields) *f.dst = config_int(j, f.key, "CGT", f.lo, f.hi);
    if (!j.contains("h") || !j["h"].is_string() || (j["h"] != "tanh" && j["h"] != "softmax")) fail("CGT config: 'h' must be tanh|softmax");
    c.h = j["h"] == "tanh" ? MixFn::tanh : MixFn::softmax;
    if (!j.contains("vae") || !j["vae"].is_boolean()) fail("CGT config: missing 'vae'");
    c.vae = j["vae"].get<bool>();
    if (j.contains("attn_mod")) c.mod = attn_mods_from_json(j["attn_mod"]);
    if (j.contains("ln_gen")) {
        if (!j["ln_gen"].is_boolean()) fail("CGT config: 'ln_gen' must be true or false");
        c.ln_gen = j["ln_gen"].get<bool>();
    }
    validate_file_config(c, "CGT");
    return c;
}

void CGTConfig::validate() const {
    x_config().validate();
    if (ell < 0 || ell > L) fail_usage(strfmt("--ell: must be in [0, L=%d], got %d", L, ell));
    if (dy < 0) fail_usage(strfmt("--dy: must be >= 0, got %d", dy));
    if (has_y()) {
        if (NHy < 1 || dy % NHy != 0) fail_usage(strfmt("--heads-y: must divide d_y=%d, got %d", dy, NHy));
        if (r < 1) fail_usage(strfmt("--rank: must be >= 1, got %d", r));
        if (M < 1) fail_usage(strfmt("--templates: must be >= 1, got %d", M));
    }
}

int64_t CGTConfig::num_params() const { return cgt_parameters(*this).count(); }

// ------------------------------------------------------------------------------------------------------
// flags

void add_cgt_flags(Cli& cli, const CGTFlagDefaults& d) {
    add_gpt_flags(cli, {d.layers, d.width, d.heads, d.attn_mods});  // the x stream (its attention: --attn-mod, spec/duallens.md §4)
    cli.renamed("--dx", "--width");
    cli.flag("--ell", d.ell, "ℓ: blocks 1..ℓ are dual-stream, y^ℓ modulates blocks ℓ+1..L (0 = baseline GPT)");
    cli.flag("--dy", d.dy, "y-stream width d_y (0 = baseline GPT)");
    cli.flag("--heads-y", d.heads_y, "y heads H_y (must divide d_y)");
    cli.flag("--rank", d.rank, "generator rank r");
    cli.flag("--templates", d.templates, "generator templates per operator M");
    cli.flag("--mix", "tanh", "generator mixing h: tanh | softmax");
    cli.flag_switch("--vae", "VAE variant: log-variance head, sampled y, KL against the GP prior");
    cli.flag_switch("--ln-gen", "a layer norm (own gain and bias) on y^ℓ before the generators, the regularizers and the VAE head read it (spec §1.4's option; default: the raw residual)");
    cli.flag("--eta", d.eta, "η: weight of the main CE (1−η on the aux loss; 1 = no aux)");
    cli.flag("--horizon", d.horizon, "aux horizon Δ (0 = whole remainder)");
    cli.flag("--aux-pass", "truncated", "how the aux pass runs: truncated (the remainder alone, positions kept) | masked (the full sequence, each remainder token attending only to the remainder; spec §2.3; the same loss, more work)");
    cli.flag("--wc", d.wc, "w_C: continuity regularizer weight");
    cli.renamed("--wC", "--wc");
    cli.flag("--wd", d.wd, "w_D: decorrelation regularizer weight");
    cli.renamed("--wD", "--wd");
    cli.flag("--zeta-power", "0", "p of the regularizers' position weights ζ_s = s^p (s = 1, 2, … from the sequence start; 0 = uniform, as in the paper; 2 = quadratic, spec §3.5)");
    cli.flag("--wp", "0", "w_P: weight of R_P, App. A.2's distribution matching (batch mean → 0, batch covariance of y^ℓ over all (position, component) pairs → the GP prior 𝒦⊗I; memory (T·d_y)², T·d_y ≤ 8192)");
    cli.flag("--beta", d.beta, "VAE KL weight β");
    cli.flag("--beta-warmup", "0", "VAE: KL annealing, β·min(1, step/N) over the first N training steps (0 = off)");
    cli.flag("--free-bits", "0", "VAE: free nats, the KL term is β·max(KL, this) so that y feels no KL pull while its KL per position (summed over components) is below it (0 = off); a collapsed y already pays d_y·½(Σ log 𝒦⁻¹_ss + log det 𝒦)/T nats, printed at the start: free bits below that never engage");
    cli.flag("--nu-K", "0.03", "GP prior: ν_K (𝒦 = ν_K·I + (1−ν_K)·RBF)");
    cli.flag("--lambda", "0.1", "GP prior: RBF length λ as a fraction of the sequence length");
}

CGTConfig cgt_config_from_cli(const Cli& cli, CGTConfig c) {
    const GPTConfig x = gpt_config_from_cli(cli, c.x_config());
    c.L = x.L;
    c.dx = x.C;
    c.NHx = x.NH;
    c.mod = x.mod;
    c.ell = (int)cli.get_int("--ell", 0, 1000);
    c.dy = (int)cli.get_int("--dy", 0, 1 << 16);
    c.NHy = (int)cli.get_int("--heads-y", 1, 1 << 16);
    c.r = (int)cli.get_int("--rank", 1, 4096);
    c.M = (int)cli.get_int("--templates", 1, 4096);
    c.h = cli.get_choice("--mix", {"tanh", "softmax"}) == "tanh" ? MixFn::tanh : MixFn::softmax;
    c.vae = cli.get_bool("--vae");
    c.ln_gen = cli.get_bool("--ln-gen");
    return c;
}

CGTLoss cgt_loss_from_cli(const Cli& cli, const CGTConfig& cfg) {
    CGTLoss ls;
    ls.eta = cli.get_double("--eta", 0, 1);
    ls.horizon = (int)cli.get_int("--horizon", 0, 1 << 20);
    ls.aux_masked = cli.get_choice("--aux-pass", {"truncated", "masked"}) == "masked";
    if (ls.aux_masked && cfg.mod.attention_active())
        fail_usage("--aux-pass masked: needs plain softmax attention in the x stream (not with --attn-mod regularized/negative)");
    ls.wC = cli.get_double("--wc", 0, 1e6);
    ls.wD = cli.get_double("--wd", 0, 1e6);
    ls.zeta_power = cli.get_double("--zeta-power", 0, 8);
    ls.wP = cli.get_double("--wp", 0, 1e6);
    ls.beta = cfg.vae ? cli.get_double("--beta", 0, 1e6) : 0.0;
    ls.beta_warmup = (int)cli.get_int("--beta-warmup", 0, 1 << 30);
    ls.free_bits = cli.get_double("--free-bits", 0, 1e6);
    ls.nu_K = cli.get_double("--nu-K", 1e-6, 1);
    ls.lambda = cli.get_double("--lambda", 1e-6, 1e3);
    return ls;
}

void check_prior_reg_size(const CGTLoss& loss, int T, int dy) {
    if (loss.wP > 0 && (int64_t)T * dy > 8192)
        fail_usage(strfmt("--wp: R_P forms a (T·d_y)² matrix; T·d_y = %lld exceeds 8192 (shorter sequences or a smaller --dy)", (long long)T * dy));
}

std::initializer_list<const char*> cgt_arch_flag_names() {
    static const std::initializer_list<const char*> names = {"--layers", "--ell", "--width", "--dy", "--heads", "--heads-y", "--rank",
                                                             "--templates", "--mix", "--vae", "--ln-gen", "--max-T"};
    return names;
}

// The registry: the x-only GPT's tensors verbatim (names, shapes, init), then the y stream, generators, VAE head.
TensorTable cgt_parameters(const CGTConfig& c) {
    TensorTable t = gpt_parameters(c.x_config());
    if (!c.has_y()) return t;
    const float s = 0.02f, sres = 0.02f / std::sqrt(2.0f * c.L);
    auto W = [&](std::string n, Shape sh, float std, std::string doc) { t.add({n, sh, Init::normal, std, doc, true}); };
    auto Z = [&](std::string n, Shape sh, std::string doc) { t.add({n, sh, Init::zeros, 0, doc, false}); };
    auto O = [&](std::string n, Shape sh, std::string doc) { t.add({n, sh, Init::ones, 0, doc, false}); };
    const int64_t dx = c.dx, dy = c.dy, Mr = (int64_t)c.M * c.r;
    if (c.d_in == 0) W("wte_y", {c.V, dy}, s, "token embedding, y slice (V,d_y)");
    t.add({"wpe_y", {c.maxT, dy}, Init::normal, 0.01f, "position embedding, y slice (maxT,d_y)", false});
    for (int b = 0; b < c.ell; b++) {
        std::string h = "h." + std::to_string(b) + ".y.";
        O(h + "ln1.w", {dy}, "y attention layer-norm gain");
        Z(h + "ln1.b", {dy}, "y attention layer-norm bias");
        W(h + "attn.qkv.w", {3 * dy, dx + dy}, s, "y query/key/value projection of [x,y] (3d_y,d_x+d_y)");
        Z(h + "attn.qkv.b", {3 * dy}, "y qkv bias");
        W(h + "attn.proj.w", {dy, dy}, sres, "y attention output projection (d_y,d_y)");
        Z(h + "attn.proj.b", {dy}, "y attention output bias");
        O(h + "ln2.w", {dy}, "y MLP layer-norm gain");
        Z(h + "ln2.b", {dy}, "y MLP layer-norm bias");
        W(h + "mlp.fc.w", {4 * dy, dx + dy}, s, "y MLP up projection of [x,y] (4d_y,d_x+d_y)");
        Z(h + "mlp.fc.b", {4 * dy}, "y MLP up bias");
        W(h + "mlp.proj.w", {dy, 4 * dy}, sres, "y MLP down projection (d_y,4d_y)");
        Z(h + "mlp.proj.b", {dy}, "y MLP down bias");
    }
    for (int b = c.ell; b < c.L; b++)
        for (const char* k : {"att", "mlp"}) {
            std::string h = "h." + std::to_string(b) + ".gen." + k + ".";
            W(h + "S", {c.M, dy + 1}, s, "generator mixing S^κ (M, d_y+1): σ = h(S[y;1])");
            Z(h + "L", {dx, Mr}, "generator left templates [L^1|…|L^M] (d_x, M·r); 0 at init: T = identity");
            W(h + "R", {dx + 1, Mr}, s, "generator right templates [R^1|…|R^M] (d_x+1, M·r); last row = bias");
        }
    if (c.has_y() && c.ln_gen) {
        O("yl_ln.w", {dy}, "layer-norm gain of y^ℓ = LN(y) (--ln-gen)");
        Z("yl_ln.b", {dy}, "layer-norm bias of y^ℓ (--ln-gen)");
    }
    if (c.vae) {
        W("vae.logv.w", {dy, dy}, s, "VAE log-variance head (d_y,d_y)");
        Z("vae.logv.b", {dy}, "VAE log-variance bias");
    }
    return t;
}

// ------------------------------------------------------------------------------------------------------
// model

template <typename real>
CGT<real>::CGT(const CGTConfig& c, Device dev, uint64_t seed) : cfg(c), rng_(Rng(seed).split(77)) {
    cfg.validate();
    s.create(dev, "cgt", cfg.to_json(), cgt_parameters(cfg), seed);
    seed_ = seed;
    head_.spec = ahead_.spec = HeadSpec{cfg.dx, cfg.V, cfg.d_out};
    ahead_.pre = "aux.";
}

// The x stream's blocks: GPT blocks of width d_x; blocks ≥ ℓ put T^κ(u; y) between each LN and its projection.
BlockShape CGTConfig::x_block(int b) const {
    const CGTConfig& c = *this;
    BlockShape k;
    k.C = c.dx;
    k.NH = c.NHx;
    k.mod = c.mod;  // --attn-mod (the adapters and the lowsim input similarity read the mix output, T^κ(u; y) in blocks ≥ ℓ)
    if (c.modulated(b)) {
        k.mix = MixKind::generator;
        k.M = c.M;
        k.r = c.r;
        k.Dy = c.dy;
        k.h = c.h;
    }
    return k;
}

// The y stream's blocks (< ℓ): width d_y, the projections read [LN_x(x), LN_y(y)].
BlockShape CGTConfig::y_block() const {
    const CGTConfig& c = *this;
    BlockShape k;
    k.C = c.dy;
    k.NH = c.NHy;
    k.mix = MixKind::concat;
    k.Cx = c.dx;
    k.stream = 'y';
    return k;
}

// Block b of the x stream over (Bp,Tp) rows; the generators read ygen and accumulate into dygen.
template <typename real>
BlockRun<real> CGT<real>::x_block_run(int b, int Bp, int Tp, const real* ygen, real* dygen) {
    BlockRun<real> r;
    r.k = cfg.x_block(b);
    r.B = Bp;
    r.T = Tp;
    r.scratch = scratch_.ptr;
    r.mod_seed = seed_ * 0x9E3779B97F4A7C15ull + forwards_;  // the random neighbours of this forward (and its backward)
    r.y = ygen;
    r.dy = dygen;
    r.gscratch = gscratch_.ptr;
    r.kstart = pass_kstart_;
    return r;
}

// The y-stream block at activation prefix h (reads the x block's LN1/LN2 outputs there).
template <typename real>
BlockRun<real> CGT<real>::y_block_run(const std::string& h, int Bp, int Tp) {
    BlockRun<real> r;
    r.k = cfg.y_block();
    r.B = Bp;
    r.T = Tp;
    r.scratch = scratch_.ptr;
    r.ux1 = s.act(h + "ln1");
    r.ux2 = s.act(h + "ln2");
    r.dux1 = s.dact(h + "ln1");
    r.dux2 = s.dact(h + "ln2");
    return r;
}

template <typename real>
void CGT<real>::layout(int B_, int T_, int Ta_) {
    {  // the attention scratch is per thread: it follows the thread count in force at each call (--threads, tests)
        const int nt = omp_get_max_threads();
        size_t sc = 0;
        for (int Tl : {T_, Ta_})
            if (Tl > 0) {
                for (int b = 0; b < cfg.L; b++) sc = std::max(sc, block_scratch_size(cfg.x_block(b), B_, Tl, nt, s.dev));
                if (cfg.has_y()) sc = std::max(sc, block_scratch_size(cfg.y_block(), B_, Tl, nt, s.dev));
            }
        ensure_size(scratch_, s.dev, sc);
    }
    if (B_ == B && T_ == T && Ta_ == Ta && s.atable.size() > 0) return;
    B = B_; T = T_; Ta = Ta_;
    const int64_t dx = cfg.dx, dy = cfg.dy, Bl = B;
    ActTable t;
    auto pass = [&](const std::string& pre, int64_t Tl, bool ystream) {
        t.add(pre + "encoded", {Bl, Tl, dx}, "x⁰: token + position embedding, x slice", true);
        if (ystream) t.add(pre + "encoded_y", {Bl, Tl, dy}, "y⁰: token + position embedding, y slice", true);
        for (int b = 0; b < cfg.L; b++) {
            std::string h = pre + "h." + std::to_string(b) + ".";
            block_activations(t, h, Bl, Tl, cfg.x_block(b));
            if (ystream && b < cfg.ell) block_activations(t, h + "y.", Bl, Tl, cfg.y_block());
            if (ystream && b == cfg.ell - 1) {
                t.add(pre + "yl", {Bl, Tl, dy}, "y^ℓ: the context summary (y after block ℓ, or LN(y) with --ln-gen; VAE: μ)", true);
                if (cfg.ln_gen) {
                    t.add(pre + "yl.mean", {Bl, Tl}, "--ln-gen: mean of y per position", false);
                    t.add(pre + "yl.rstd", {Bl, Tl}, "--ln-gen: 1/std of y per position", false);
                }
                if (cfg.vae) {
                    t.add(pre + "vae.logv", {Bl, Tl, dy}, "VAE log-variance of y^ℓ", true);
                    t.add(pre + "vae.eps", {Bl, Tl, dy}, "VAE noise ε (0 in eval)", false);
                    t.add(pre + "y_used", {Bl, Tl, dy}, "VAE sample μ + e^{½logv}ε that the generators read", true);
                }
            }
        }
        if (!ystream && cfg.has_y() && cfg.L > cfg.ell)
            t.add(pre + "ytilde", {Bl, Tl, dy}, "frozen y each position's generators read (aux: ỹ_b = y^ℓ[b, s_b−1])", true);
        lm_head_activations(t, pre, Bl, Tl, head_.spec);
    };
    if (T > 0) pass("", T, cfg.has_y());
    if (Ta > 0) pass("aux.", Ta, false);
    s.set_activations(std::move(t.acts), std::move(t.grads));
    size_t gs = generator_scratch_size(B * std::max(T, Ta), cfg.M, cfg.r);
    ensure_size(gscratch_, s.dev, gs);
}

template <typename real>
BatchSpec CGT<real>::batch_spec() const {
    return lm_batch_spec(cfg.V, cfg.d_in, cfg.d_out, cfg.maxT, "CGT");
}

// One pass of the model over (Bp,Tp) rows with activation prefix `pre`. with_y_stream: the dual blocks also run
// the y stream and the generators read its y_used; otherwise the generators read `ygen` (B,Tp,d_y).
template <typename real>
real* CGT<real>::x_pass_forward(const std::string& pre, int Bp, int Tp, const int* tokens, const real* vectors, const int* pos,
                                const real* ygen, bool with_y_stream) {
    const Device dev = s.dev;
    const int N = Bp * Tp, dx = cfg.dx, dy = cfg.dy;
    real* x = s.act(pre + "encoded");
    if (cfg.d_in > 0) op::vector_embed_forward(dev, x, vectors, pos, s.param("wpe"), Bp, Tp, dx, cfg.d_in, cfg.maxT);
    else op::encoder_forward(dev, x, tokens, pos, s.param("wte"), s.param("wpe"), Bp, Tp, dx, cfg.V, cfg.maxT);
    real* y = nullptr;
    if (with_y_stream) {
        y = s.act(pre + "encoded_y");
        if (cfg.d_in > 0) op::vector_embed_forward(dev, y, vectors, pos, s.param("wpe_y"), Bp, Tp, dy, 0, cfg.maxT);
        else op::encoder_forward(dev, y, tokens, pos, s.param("wte_y"), s.param("wpe_y"), Bp, Tp, dy, cfg.V, cfg.maxT);
    }
    for (int b = 0; b < cfg.L; b++) {
        const std::string h = pre + "h." + std::to_string(b) + ".", ph = "h." + std::to_string(b) + ".";
        // x = x + Attn(T^att(LN1(x); y)) ;  x = x + MLP(T^mlp(LN2(x); y))   (no T^κ in blocks < ℓ)
        x = block_forward(s, h, ph, x, x_block_run(b, Bp, Tp, ygen, nullptr));
        if (patch_now_)
            for (const Patch& pt : patches)  // task-vector patching (forward_with_y only)
                if (pt.block == b) {
                    if (pt.row < 0 || pt.row >= (int64_t)N || pt.value.size() != (size_t)dx) fail("patch: row or width out of range");
                    s.upload(s.acts, s.atable.offset(h + "res3") + (size_t)pt.row * dx, pt.value.data(), dx);
                }
        if (with_y_stream && b < cfg.ell) {
            // y = y + Attn_y([LN1x(x), LN1y(y)]) ;  y = y + MLP_y([LN2x(x), LN2y(y)])   (x never reads y)
            y = block_forward(s, h + "y.", ph + "y.", y, y_block_run(h, Bp, Tp));
            if (b == cfg.ell - 1) {
                // y^ℓ = y (copy, so it has its own name in dumps), or LN(y) with --ln-gen;  VAE: y_used = μ + e^{½ logv} ε
                real* yl = s.act(pre + "yl");
                if (cfg.ln_gen)
                    op::layernorm_forward(dev, yl, s.act(pre + "yl.mean"), s.act(pre + "yl.rstd"), y, s.param("yl_ln.w"), s.param("yl_ln.b"), N, dy);
                else
                    device_copy(dev, yl, y, (size_t)N * dy * sizeof(real), Copy::device_to_device);
                ygen = yl;
                if (cfg.vae) {
                    op::matmul_forward(dev, s.act(pre + "vae.logv"), yl, s.param("vae.logv.w"), s.param("vae.logv.b"), N, dy, dy);
                    if (!train_mode) {
                        eps_host_.assign((size_t)N * dy, real(0));  // eval: y_used = μ
                    } else if (!hold_random || eps_host_.size() != (size_t)N * dy) {
                        eps_host_.assign((size_t)N * dy, real(0));
                        fill_normal(eps_host_.data(), eps_host_.size(), rng_);
                    }
                    s.upload(s.acts, s.atable.offset(pre + "vae.eps"), eps_host_.data(), eps_host_.size());
                    op::reparam_forward(dev, s.act(pre + "y_used"), yl, s.act(pre + "vae.logv"), s.act(pre + "vae.eps"), (int64_t)N * dy);
                    ygen = s.act(pre + "y_used");
                }
            }
        }
    }
    return x;  // x_L; the head (LN_f, logits or predictions, loss) is models/lm_io.h's LMHead
}

// Backward of x_pass_forward from d(x_L) (the head's backward wrote it). dygen (B,Tp,d_y) receives the generators' dy (x-only passes);
// with the y stream, the generators' dy goes into d(y_used) and on through the VAE/regularizers and the y stream.
template <typename real>
void CGT<real>::x_pass_backward(const std::string& pre, int Bp, int Tp, const int* tokens, const int* pos, const real* ygen, real* dygen,
                                bool with_y_stream) {
    const Device dev = s.dev;
    const int N = Bp * Tp, dx = cfg.dx, dy = cfg.dy;
    if (with_y_stream) {
        ygen = s.act(pre + (cfg.vae ? "y_used" : "yl"));
        dygen = s.dact(pre + (cfg.vae ? "y_used" : "yl"));
    }
    for (int b = cfg.L - 1; b >= 0; b--) {
        const std::string h = pre + "h." + std::to_string(b) + ".", ph = "h." + std::to_string(b) + ".";
        const std::string in = b == 0 ? pre + "encoded" : pre + "h." + std::to_string(b - 1) + ".res3";
        if (with_y_stream && b < cfg.ell) {
            const std::string yin = b == 0 ? pre + "encoded_y" : pre + "h." + std::to_string(b - 1) + ".y.res3";
            if (b == cfg.ell - 1) {
                real* yl = s.act(pre + "yl");
                real* dyl = s.dact(pre + "yl");
                if (cfg.vae) {
                    // y_used = μ + e^{½ logv} ε ;  logv = yl·Wvᵀ + bv ;  KL(μ = yl, logv)
                    real* lv = s.act(pre + "vae.logv");
                    real* dlv = s.dact(pre + "vae.logv");
                    op::reparam_backward(dev, dyl, dlv, s.dact(pre + "y_used"), lv, s.act(pre + "vae.eps"), (int64_t)N * dy);
                    if (loss.beta > 0 && kl_weight_ != 0) op::gp_kl_backward(dev, dyl, dlv, yl, lv, d_kinv_.ptr, kl_weight_, Bp, Tp, dy);
                    op::matmul_backward(dev, dyl, s.grad("vae.logv.w"), s.grad("vae.logv.b"), dlv, yl, s.param("vae.logv.w"), N, dy, dy);
                }
                if (loss.wC > 0) op::continuity_reg_backward(dev, dyl, yl, loss.wC * scale.seq, Bp, Tp, dy, loss.zeta_power);
                if (loss.wD > 0) op::decorrelation_reg_backward(dev, dyl, yl, loss.wD * scale.seq, Bp, Tp, dy, loss.zeta_power);
                if (loss.wP > 0) op::prior_reg_backward(dev, dyl, yl, d_k_.ptr, loss.wP * scale.seq, Bp, Tp, dy);
                if (cfg.ln_gen)  // yl = LN(y.res3)
                    op::layernorm_backward(dev, s.dact(h + "y.res3"), s.grad("yl_ln.w"), s.grad("yl_ln.b"), dyl, s.act(h + "y.res3"),
                                           s.param("yl_ln.w"), s.act(pre + "yl.mean"), s.act(pre + "yl.rstd"), N, dy);
                else  // yl = y.res3 (copy)
                    op::residual_backward(dev, s.dact(h + "y.res3"), (real*)nullptr, dyl, (int64_t)N * dy);
            }
            // y = y + Attn_y([LN1x(x), LN1y(y)]) ;  y = y + MLP_y([LN2x(x), LN2y(y)])
            block_backward(s, h + "y.", ph + "y.", s.act(yin), s.dact(yin), y_block_run(h, Bp, Tp));
        }
        // x = x + Attn(T^att(LN1(x); y)) ;  x = x + MLP(T^mlp(LN2(x); y))
        block_backward(s, h, ph, s.act(in), s.dact(in), x_block_run(b, Bp, Tp, ygen, dygen));
    }
    // encoded = wte[tokens] + wpe[pos]  (x and y slices)
    if (cfg.d_in > 0) {
        op::vector_embed_backward(dev, s.grad("wpe"), s.dact(pre + "encoded"), pos, Bp, Tp, dx, cfg.maxT);
        if (with_y_stream) op::vector_embed_backward(dev, s.grad("wpe_y"), s.dact(pre + "encoded_y"), pos, Bp, Tp, dy, cfg.maxT);
    } else {
        op::encoder_backward(dev, s.grad("wte"), s.grad("wpe"), s.dact(pre + "encoded"), tokens, pos, Bp, Tp, dx, cfg.V, cfg.maxT);
        if (with_y_stream)
            op::encoder_backward(dev, s.grad("wte_y"), s.grad("wpe_y"), s.dact(pre + "encoded_y"), tokens, pos, Bp, Tp, dy, cfg.V, cfg.maxT);
    }
}

// The remainder rows p_b..p_b+Ta−1 of every sample as their own (B,Ta) batch (absolute positions; rows past
// the end are padding: mask 0, target −1, last valid position).
static Batch slice_batch(const Batch& bt, const std::vector<int>& p, int Ta) {
    Batch a;
    a.B = bt.B; a.T = Ta; a.D = bt.D; a.Dout = bt.Dout;
    for (int b = 0; b < bt.B; b++)
        for (int t = 0; t < Ta; t++) {
            const int src = std::min(p[b] + t, bt.T - 1);
            const bool valid = p[b] + t < bt.T;
            const size_t i = (size_t)b * bt.T + src;
            if (!bt.tokens.empty()) a.tokens.push_back(bt.tokens[i]);
            for (int d = 0; d < bt.D; d++) a.vectors.push_back(bt.vectors[i * bt.D + d]);
            if (!bt.targets.empty()) a.targets.push_back(valid ? bt.targets[i] : -1);
            for (int d = 0; d < bt.Dout; d++) a.target_vecs.push_back(bt.target_vecs.empty() ? 0.f : bt.target_vecs[i * bt.Dout + d]);
            if (!bt.mask.empty()) a.mask.push_back(valid ? bt.mask[i] : 0.f);
            a.pos.push_back(bt.pos.empty() ? src : bt.pos[i]);
        }
    if (bt.target_vecs.empty()) a.target_vecs.clear();
    return a;
}

// Which targets the aux pass scores: those of the remainder's inputs t = p_b … (p_b + Δ − 1 with a horizon Δ; to the
// end without) — the rows slice_batch keeps, the rows masked_aux_batch leaves scored, the weight accumulation_scales counts.
static inline bool aux_scored(int t, int p, int horizon) { return t >= p && (horizon == 0 || t < p + horizon); }

// The masked full-length aux batch (spec §2.3): the whole sequence at its own positions, scored only where
// aux_scored — the targets slice_batch keeps, at the same rows of the sequence. Rows before p_b are computed (each
// attends to itself) and weigh 0.
static Batch masked_aux_batch(const Batch& bt, const std::vector<int>& p, int horizon) {
    Batch a = bt;
    for (int b = 0; b < bt.B; b++)
        for (int t = 0; t < bt.T; t++)
            if (!aux_scored(t, p[b], horizon)) a.mask[(size_t)b * bt.T + t] = 0.f;
    return a;
}

template <typename real>
double CGT<real>::beta_now() const {
    if (loss.beta_warmup <= 0 || train_step_ < 0) return loss.beta;
    return loss.beta * std::min(1.0, (train_step_ + 1.0) / loss.beta_warmup);
}

template <typename real>
int CGT<real>::aux_hi(const Batch& bt) const {
    const int hi = loss.horizon > 0 ? bt.T - loss.horizon : bt.T - 1;
    if (hi < 2) fail(strfmt("aux loss: sequence length %d too short for horizon %d (need p in [2, T-Δ])", bt.T, loss.horizon));
    return hi;
}

template <typename real>
std::vector<int> CGT<real>::draw_aux_positions(const Batch& bt) {
    const int hi = aux_hi(bt);
    std::vector<int> p(bt.B, 0);
    for (auto& v : p) v = 2 + (int)rng_.below((uint64_t)(hi - 1));
    return p;
}

template <typename real>
std::vector<LossScale> CGT<real>::accumulation_scales(const std::vector<Batch>& micro) {
    std::vector<LossScale> sc = plain_accumulation_scales(micro);
    queued_aux_p_.clear();
    if (!cfg.has_y() || loss.eta >= 1.0) return sc;
    std::vector<double> A(micro.size(), 0.0);
    double Asum = 0;
    for (size_t i = 0; i < micro.size(); i++) {
        const Batch& bt = micro[i];
        if (bt.targets.empty() && bt.target_vecs.empty()) continue;
        std::vector<int> p = draw_aux_positions(bt);
        const std::vector<double> w = loss_weights(bt);
        // the aux pass scores the targets of inputs p_b .. p_b+Δ−1 (Δ = 0: to the end), truncated or masked alike
        for (int b = 0; b < bt.B; b++)
            for (int t = p[b]; t < bt.T && aux_scored(t, p[b], loss.horizon); t++) A[i] += w[(size_t)b * bt.T + t];
        Asum += A[i];
        queued_aux_p_.push_back(std::move(p));
    }
    for (size_t i = 0; i < micro.size(); i++) sc[i].aux = Asum > 0 ? A[i] / Asum : 0.0;
    return sc;
}

template <typename real>
void CGT<real>::skip_forward(const Batch& bt) {
    // forward's draws, in its order: the aux positions (queued by accumulation_scales), the random-neighbour count,
    // and the VAE's noise ε (B·T·d_y normals, the main pass only: the aux pass has no y stream)
    const bool has_targets = !bt.targets.empty() || !bt.target_vecs.empty();
    if (has_targets && cfg.has_y() && loss.eta < 1.0 && !queued_aux_p_.empty()) queued_aux_p_.pop_front();
    if (!hold_random) forwards_++;
    if (cfg.vae && train_mode && !hold_random) {
        std::vector<real> eps((size_t)bt.B * bt.T * cfg.dy);
        fill_normal(eps.data(), eps.size(), rng_);
    }
}

template <typename real>
double CGT<real>::forward(const Batch& bt) {
    const Device dev = s.dev;
    in_.upload(dev, bt, batch_spec());  // the batch contract (data/batch.h), then the device copies
    // aux positions p_b (0-indexed first remainder input; spec's s = p_b + 1)
    has_aux_ = in_.has_targets && cfg.has_y() && loss.eta < 1.0;
    int Ta_new = 0;
    if (has_aux_) {
        const int hi = aux_hi(bt);
        if (!queued_aux_p_.empty()) {  // drawn by accumulation_scales
            aux_p = queued_aux_p_.front();
            queued_aux_p_.pop_front();
            if (aux_p.size() != (size_t)bt.B) fail("CGT: a queued aux draw does not match the batch (accumulation_scales)");
        } else if (!hold_random || aux_p.size() != (size_t)bt.B) {
            aux_p = draw_aux_positions(bt);
        }
        int pmin = bt.T;
        for (int p : aux_p) {
            if (p < 2 || p > hi) fail(strfmt("aux position %d outside [2, %d]", p, hi));
            pmin = std::min(pmin, p);
        }
        Ta_new = loss.aux_masked ? bt.T : loss.horizon > 0 ? loss.horizon : bt.T - pmin;
    }
    layout(bt.B, bt.T, Ta_new);
    if (!hold_random) forwards_++;  // a fresh random-neighbour draw (attention mods), held like the aux positions
    if (cfg.vae && loss.beta > 0 && kinv_T_ != T) {
        std::vector<double> Kinv;
        logdetK_ = gp_kernel_inverse(T, loss.nu_K, loss.lambda * T, Kinv);
        std::vector<real> k(Kinv.begin(), Kinv.end());
        d_kinv_ = Buffer<real>(dev, k.size());
        s.upload(d_kinv_, 0, k.data(), k.size());
        kinv_T_ = T;
    }
    if (cfg.has_y() && loss.wP > 0 && k_T_ != T) {
        check_prior_reg_size(loss, T, cfg.dy);
        std::vector<double> Kinv, K;
        gp_kernel_inverse(T, loss.nu_K, loss.lambda * T, Kinv, &K);
        std::vector<real> k(K.begin(), K.end());
        d_k_ = Buffer<real>(dev, k.size());
        s.upload(d_k_, 0, k.data(), k.size());
        k_T_ = T;
    }
    real* x = x_pass_forward("", B, T, in_.tokens.ptr, in_.vectors.ptr, in_.pos_ptr(), nullptr, cfg.has_y());
    last_ce = last_aux = last_rc = last_rd = last_rp = last_kl = 0;
    last_aux_targets = 0;
    const double eta = cfg.has_y() ? loss.eta : 1.0;
    // η·CE: LN_f, the head and the masked mean (models/lm_io.h); NaN without targets
    last_ce = head_.forward(s, x, in_, eta * scale.ce);
    if (!in_.has_targets) return NAN;
    double total = eta * scale.ce * last_ce;
    if (has_aux_) {
        aux_batch_ = loss.aux_masked ? masked_aux_batch(bt, aux_p, loss.horizon) : slice_batch(bt, aux_p, Ta);
        ain_.upload(dev, aux_batch_, batch_spec());
        if (loss.aux_masked) {  // each sequence's keys start at its remainder, p_b
            ensure_size(a_kstart_, dev, aux_p.size());
            device_copy(dev, a_kstart_.ptr, aux_p.data(), aux_p.size() * sizeof(int), Copy::host_to_device);
        }
        // ỹ_b = y_used[b, p_b − 1], broadcast over the remainder rows (gather; backward = scatter-add)
        std::vector<int> idx((size_t)B * Ta);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Ta; t++) idx[(size_t)b * Ta + t] = b * T + aux_p[b] - 1;
        ensure_size(a_idx_, dev, idx.size());
        device_copy(dev, a_idx_.ptr, idx.data(), idx.size() * sizeof(int), Copy::host_to_device);
        const real* yu = s.act(cfg.vae ? "y_used" : "yl");
        if (cfg.L > cfg.ell) op::gather_rows_forward(dev, s.act("aux.ytilde"), yu, a_idx_.ptr, B * Ta, cfg.dy);
        real* ax = nullptr;
        {
            KeyStartScope ks(pass_kstart_, loss.aux_masked ? a_kstart_.ptr : nullptr);
            ax = x_pass_forward("aux.", B, Ta, ain_.tokens.ptr, ain_.vectors.ptr, ain_.pos_ptr(), cfg.L > cfg.ell ? s.act("aux.ytilde") : nullptr,
                                false);
        }
        // (1−η)·L_aux: padding rows past the end weigh 0; a batch of padding only is a loss of 0
        last_aux = ahead_.forward(s, ax, ain_, (1.0 - eta) * scale.aux, /*allow_unscored=*/true);
        for (float m : aux_batch_.mask) last_aux_targets += m > 0;
        total += (1.0 - eta) * scale.aux * last_aux;
    }
    if (cfg.has_y()) {
        const real* yl = s.act("yl");
        if (loss.wC > 0) total += loss.wC * scale.seq * (last_rc = op::continuity_reg_forward(dev, yl, B, T, cfg.dy, loss.zeta_power));
        if (loss.wD > 0) total += loss.wD * scale.seq * (last_rd = op::decorrelation_reg_forward(dev, yl, B, T, cfg.dy, loss.zeta_power));
        if (loss.wP > 0) total += loss.wP * scale.seq * (last_rp = op::prior_reg_forward(dev, yl, d_k_.ptr, B, T, cfg.dy));
        if (cfg.vae && loss.beta > 0) {
            // β·KL, or with free bits β·max(KL, free_bits) (no gradient while KL is below them); β warmed up
            last_kl = op::gp_kl_forward(dev, yl, s.act("vae.logv"), d_kinv_.ptr, logdetK_, B, T, cfg.dy);
            const double b = beta_now() * scale.seq;
            const bool free = loss.free_bits > 0 && last_kl < loss.free_bits;
            kl_weight_ = free ? 0.0 : b;
            total += b * (free ? loss.free_bits : last_kl);
        }
    }
    return total;
}

template <typename real>
void CGT<real>::backward() {
    if (!head_.ready()) fail("backward() needs a forward() with targets first");
    const Device dev = s.dev;
    const std::string last = "h." + std::to_string(cfg.L - 1) + ".res3";
    s.zero_grad();
    if (has_aux_) {
        // the aux pass first: its dỹ is scattered into dy_used[b, p_b−1] before the main pass's y stream runs backward
        const int Na = B * Ta;
        ahead_.backward(s, "aux." + last, ain_);
        const bool gen = cfg.L > cfg.ell;
        {
            KeyStartScope ks(pass_kstart_, loss.aux_masked ? a_kstart_.ptr : nullptr);  // the attention backward recomputes its probabilities
            x_pass_backward("aux.", B, Ta, ain_.tokens.ptr, ain_.pos_ptr(), gen ? s.act("aux.ytilde") : nullptr, gen ? s.dact("aux.ytilde") : nullptr,
                            false);
        }
        if (gen) op::gather_rows_backward(dev, s.dact(cfg.vae ? "y_used" : "yl"), s.dact("aux.ytilde"), a_idx_.ptr, Na, cfg.dy);
    }
    head_.backward(s, last, in_);
    x_pass_backward("", B, T, in_.tokens.ptr, in_.pos_ptr(), nullptr, nullptr, cfg.has_y());
}

// ------------------------------------------------------------------------------------------------------
// inference

template <typename real>
std::vector<real> CGT<real>::outputs() {
    return head_.outputs(s);
}

template <typename real>
std::vector<real> CGT<real>::dynamic_y(const Batch& bt) {
    if (!cfg.has_y()) fail("this CGT has no y stream (ell = 0 or d_y = 0)");
    bool tm = train_mode;
    train_mode = false;
    in_.upload(s.dev, bt, batch_spec());
    layout(bt.B, bt.T, 0);
    x_pass_forward("", B, T, in_.tokens.ptr, in_.vectors.ptr, in_.pos_ptr(), nullptr, true);
    train_mode = tm;
    return s.fetch_act(cfg.vae ? "y_used" : "yl");
}

template <typename real>
std::vector<real> CGT<real>::forward_with_y(const Batch& bt, const std::vector<real>& y_pos) {
    const bool gen = cfg.has_y() && cfg.L > cfg.ell;
    if (gen && y_pos.size() != (size_t)bt.B * bt.T * cfg.dy) fail("forward_with_y: y must be (B,T,d_y)");
    ain_.upload(s.dev, bt, batch_spec());
    layout(bt.B, 0, bt.T);
    if (gen) s.upload(s.acts, s.atable.offset("aux.ytilde"), y_pos.data(), y_pos.size());
    patch_now_ = !patches.empty();
    real* x = x_pass_forward("aux.", bt.B, bt.T, ain_.tokens.ptr, ain_.vectors.ptr, ain_.pos_ptr(), gen ? s.act("aux.ytilde") : nullptr, false);
    patch_now_ = false;
    ahead_.forward_outputs(s, x, ain_);  // the outputs only (an evaluation batch may score nothing here)
    return ahead_.outputs(s);
}

template <typename real>
std::vector<real> CGT<real>::frozen_outputs(const Batch& bt, const std::vector<int>& p, int* Ta_out) {
    std::vector<real> y = dynamic_y(bt);
    int pmin = bt.T;
    for (int pb : p) {
        if (pb < 1 || pb >= bt.T) fail(strfmt("freeze position %d outside [1, %d)", pb, bt.T));
        pmin = std::min(pmin, pb);
    }
    const int Tr = bt.T - pmin, dy = cfg.dy;
    Batch sub = slice_batch(bt, p, Tr);
    std::vector<real> yp((size_t)bt.B * Tr * dy);
    for (int b = 0; b < bt.B; b++)
        for (int t = 0; t < Tr; t++)
            std::copy_n(&y[((size_t)b * bt.T + p[b] - 1) * dy], dy, &yp[((size_t)b * Tr + t) * dy]);
    if (Ta_out) *Ta_out = Tr;
    return forward_with_y(sub, yp);
}

template <typename real>
std::vector<real> CGT<real>::frozen_ctx_outputs(const Batch& bt, const std::vector<int>& p) {
    std::vector<real> y = dynamic_y(bt), yp(y.size());
    const int dy = cfg.dy;
    for (int b = 0; b < bt.B; b++)
        for (int t = 0; t < bt.T; t++) {
            const int src = t < p[b] ? t : p[b] - 1;
            std::copy_n(&y[((size_t)b * bt.T + src) * dy], dy, &yp[((size_t)b * bt.T + t) * dy]);
        }
    return forward_with_y(bt, yp);
}

template <typename real>
std::vector<real> CGT<real>::ema_outputs(const Batch& bt, const std::vector<real>& y_init, double gamma) {
    std::vector<real> y = dynamic_y(bt), yp(y.size());
    const int dy = cfg.dy;
    if (y_init.size() != (size_t)bt.B * dy) fail("ema: y_init must be (B,d_y)");
    for (int b = 0; b < bt.B; b++) {
        std::vector<double> u(y_init.begin() + (size_t)b * dy, y_init.begin() + (size_t)(b + 1) * dy);
        for (int t = 0; t < bt.T; t++)
            for (int i = 0; i < dy; i++) {
                const size_t j = ((size_t)b * bt.T + t) * dy + i;
                u[i] = (1 - gamma) * u[i] + gamma * (double)y[j];  // y_used_t = (1−γ) y_used_{t−1} + γ y_dyn_t
                yp[j] = (real)u[i];
            }
    }
    return forward_with_y(bt, yp);
}

template <typename real>
std::vector<real> CGT<real>::transplant_outputs(const Batch& bt, const std::vector<real>& y_fixed) {
    const int dy = cfg.dy;
    if (y_fixed.size() != (size_t)bt.B * dy) fail("transplant: y must be (B,d_y)");
    std::vector<real> yp((size_t)bt.B * bt.T * dy);
    for (int b = 0; b < bt.B; b++)
        for (int t = 0; t < bt.T; t++) std::copy_n(&y_fixed[(size_t)b * dy], dy, &yp[((size_t)b * bt.T + t) * dy]);
    return forward_with_y(bt, yp);
}

// ------------------------------------------------------------------------------------------------------
// folding

template <typename real>
void CGT<real>::fold_into(GPT<real>& g, const std::vector<real>& yt) {
    const GPTConfig xc = cfg.x_config();
    if (g.cfg.L != xc.L || g.cfg.C != xc.C || g.cfg.NH != xc.NH || g.cfg.V != xc.V || g.cfg.maxT != xc.maxT || g.cfg.d_in != xc.d_in ||
        g.cfg.d_out != xc.d_out)
        fail("fold: the GPT's config is not the CGT's x-only config");
    if (cfg.mod.adapters_active() || cfg.mod.needs_sim_src())
        fail("fold: the augmented adapters and the lowsim input similarity read T^κ(u; y), which folding moves into the weights: "
             "no exact fold with --attn-mod augmented or --attn-sim input");
    const int dx = cfg.dx, dy = cfg.dy, M = cfg.M, r = cfg.r, Mr = M * r;
    if (cfg.has_y() && yt.size() != (size_t)dy) fail("fold: ỹ must have d_y elements");
    for (size_t i = 0; i < g.s.ptable.size(); i++) {
        const TensorSpec& sp = g.s.ptable.specs[i];
        std::vector<real> w = s.to_host(s.params, s.ptable.offset(sp.name), sp.numel());
        g.s.upload(g.s.params, g.s.ptable.offsets[i], w.data(), w.size());
    }
    for (int b = 0; b < cfg.L; b++) {
        if (!cfg.modulated(b)) continue;
        const std::string h = "h." + std::to_string(b) + ".";
        for (int k = 0; k < 2; k++) {
            const std::string gn = h + (k == 0 ? "gen.att." : "gen.mlp."), wn = h + (k == 0 ? "attn.qkv." : "mlp.fc.");
            std::vector<real> S = s.to_host(s.params, s.ptable.offset(gn + "S"), (size_t)M * (dy + 1));
            std::vector<real> Lw = s.to_host(s.params, s.ptable.offset(gn + "L"), (size_t)dx * Mr);
            std::vector<real> Rw = s.to_host(s.params, s.ptable.offset(gn + "R"), (size_t)(dx + 1) * Mr);
            std::vector<real> c(M);
            generator_mix(c.data(), yt.data(), S.data(), 1, dy, M, cfg.h);
            // L(ỹ) (dx,r), R(ỹ) (dx+1,r);  δW = L Rᵀ = [D_w | d_b]
            std::vector<double> Ly((size_t)dx * r, 0.0), Ry((size_t)(dx + 1) * r, 0.0), dW((size_t)dx * (dx + 1), 0.0);
            for (int i = 0; i < dx; i++)
                for (int m = 0; m < M; m++)
                    for (int q = 0; q < r; q++) Ly[(size_t)i * r + q] += (double)c[m] * Lw[(size_t)i * Mr + m * r + q];
            for (int j = 0; j <= dx; j++)
                for (int m = 0; m < M; m++)
                    for (int q = 0; q < r; q++) Ry[(size_t)j * r + q] += (double)c[m] * Rw[(size_t)j * Mr + m * r + q];
            for (int i = 0; i < dx; i++)
                for (int j = 0; j <= dx; j++)
                    for (int q = 0; q < r; q++) dW[(size_t)i * (dx + 1) + j] += Ly[(size_t)i * r + q] * Ry[(size_t)j * r + q];
            const int OC = (int)s.ptable.spec(wn + "w").shape[0];
            std::vector<real> W = s.to_host(s.params, s.ptable.offset(wn + "w"), (size_t)OC * dx);
            std::vector<real> bias = s.to_host(s.params, s.ptable.offset(wn + "b"), OC);
            std::vector<real> W2(W.size()), b2(OC);
            for (int o = 0; o < OC; o++) {
                double bb = bias[o];
                for (int i = 0; i < dx; i++) bb += (double)W[(size_t)o * dx + i] * dW[(size_t)i * (dx + 1) + dx];  // b' = b + W d_b
                b2[o] = (real)bb;
                for (int j = 0; j < dx; j++) {
                    double v = W[(size_t)o * dx + j];                                                    // W' = W (I + D_w)
                    for (int i = 0; i < dx; i++) v += (double)W[(size_t)o * dx + i] * dW[(size_t)i * (dx + 1) + j];
                    W2[(size_t)o * dx + j] = (real)v;
                }
            }
            g.s.upload(g.s.params, g.s.ptable.offset(wn + "w"), W2.data(), W2.size());
            g.s.upload(g.s.params, g.s.ptable.offset(wn + "b"), b2.data(), b2.size());
        }
    }
}

// ------------------------------------------------------------------------------------------------------
// FLOPs (analytic; forward. A training step = 3× forward for the products, which dominate.)

// Forward FLOPs of one pass over (Bn,Tn) rows, by part: x stream (+ head), y stream, generators.
struct PassFlops { double x = 0, y = 0, gen = 0; };
static PassFlops xpass_flops(const CGTConfig& c, double Bn, double Tn, bool ystream) {
    const double N = Bn * Tn, dx = c.dx, dy = c.dy;
    PassFlops f;
    for (int b = 0; b < c.L; b++) {
        f.x += 2 * N * (3 * dx * dx + dx * dx + 8 * dx * dx);  // qkv, proj, fc, fcproj
        f.x += 2 * Bn * Tn * (Tn + 1) / 2 * dx * 2;            // causal q·k and att·v
        if (c.modulated(b)) f.gen += 2 * generator_flops(N, c.dx, c.dy, c.M, c.r);
        if (ystream && b < c.ell) {
            f.y += 2 * N * ((dx + dy) * 3 * dy + dy * dy + (dx + dy) * 4 * dy + 4 * dy * dy);
            f.y += 2 * Bn * Tn * (Tn + 1) / 2 * dy * 2;
        }
    }
    f.x += 2 * N * dx * (c.d_out > 0 ? c.d_out : c.V);
    if (ystream && c.vae) f.y += 2 * N * dy * dy;
    return f;
}

template <typename real>
CGTFlops CGT<real>::flops(int Bn, int Tn) const {
    CGTFlops f;
    const PassFlops m = xpass_flops(cfg, Bn, Tn, cfg.has_y());
    f.x_fwd = m.x; f.y_fwd = m.y; f.gen_fwd = m.gen;
    f.main_fwd = m.x + m.y + m.gen;
    if (cfg.has_y() && loss.eta < 1.0) {
        // rows of the aux pass: the whole sequence (masked), Δ, or E[T − p] with p ~ U{2..T−1}
        const double Ta_mean = loss.aux_masked ? Tn : loss.horizon > 0 ? loss.horizon : (Tn - 2) / 2.0;
        const PassFlops a = xpass_flops(cfg, Bn, Ta_mean, false);
        f.aux_fwd = a.x + a.gen;
        f.aux_gen_fwd = a.gen;
    }
    if (cfg.has_y()) {
        const double n = (double)Bn * Tn * cfg.dy;
        if (loss.wC > 0) f.reg_fwd += 6 * n;                              // normalize + squared differences
        if (loss.wD > 0) f.reg_fwd += 3 * n + 2.0 * Bn * Bn * Tn * cfg.dy;  // normalize + per-position Gram N_s N_sᵀ
        if (loss.wP > 0) f.reg_fwd += 2.0 * Bn * (Tn * cfg.dy) * (Tn * cfg.dy);  // the covariance ΔᵀΔ (N,N)
        if (cfg.vae && loss.beta > 0) f.reg_fwd += 2.0 * Bn * Tn * Tn * cfg.dy + 4 * n;  // 𝒦⁻¹μ per component
    }
    f.total_step = 3 * (f.main_fwd + f.aux_fwd + f.reg_fwd);
    return f;
}

template struct CGT<float>;
template struct CGT<double>;

}  // namespace icl
