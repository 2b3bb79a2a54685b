// gpt.cpp — the baseline GPT: registry, forward, backward, sampling. See gpt.h.
#include "models/gpt.h"

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

// ------------------------------------------------------------------------------------------------------
// config

nlohmann::json GPTConfig::to_json() const {
    nlohmann::json j = {{"L", L}, {"C", C}, {"NH", NH}, {"V", V}, {"maxT", maxT}, {"d_in", d_in}, {"d_out", d_out}};
    if (act != "gelu") j["act"] = act;  // only when not the default: GELU checkpoints keep their exact config
    if (attn_mods_configured(mod)) j["attn_mod"] = attn_mods_to_json(mod);  // likewise
    return j;
}

GPTConfig GPTConfig::from_json(const nlohmann::json& j) {
    GPTConfig c;
    // hard limits before anything is sized from these numbers (engine/checkpoint.h)
    c.L = config_int(j, "L", "GPT", 1, 1 << 12);
    c.C = config_int(j, "C", "GPT", 1, 1 << 16);
    c.NH = config_int(j, "NH", "GPT", 1, 1 << 12);
    c.V = config_int(j, "V", "GPT", 0, 1 << 24);
    c.maxT = config_int(j, "maxT", "GPT", 1, 1 << 24);
    c.d_in = config_int(j, "d_in", "GPT", 0, 1 << 16);
    c.d_out = config_int(j, "d_out", "GPT", 0, 1 << 16);
    if (j.contains("act")) {
        if (!j["act"].is_string()) fail("GPT config: 'act' is not a string");
        c.act = j["act"].get<std::string>();
    }
    if (j.contains("attn_mod")) c.mod = attn_mods_from_json(j["attn_mod"]);
    validate_file_config(c, "GPT");
    return c;
}

void GPTConfig::validate() const {
    if (L < 1) fail_usage(strfmt("--layers: must be >= 1, got %d", L));
    if (C < 1) fail_usage(strfmt("--width: must be >= 1, got %d", C));
    if (NH < 1 || C % NH != 0) fail_usage(strfmt("--heads: must divide the width %d, got %d", C, NH));
    if (maxT < 1) fail_usage(strfmt("--max-T: must be >= 1, got %d", maxT));
    if (d_in < 0 || d_in > C) fail_usage(strfmt("vector input width %d must be in [0, C=%d]", d_in, C));
    if (d_out < 0) fail_usage("output width must be >= 0");
    if (d_in == 0 && V < 1) fail_usage(strfmt("vocabulary size must be >= 1, got %d", V));
    if (d_in > 0 && d_out == 0) fail_usage("vector-input GPT needs a vector head (d_out > 0): no token table to tie to");
    if (act != "gelu" && act != "relu") fail_usage("--act: must be gelu or relu, got '" + act + "'");
    attn_mods_validate(mod);
}

int64_t GPTConfig::num_params() const { return gpt_parameters(*this).count(); }

// ------------------------------------------------------------------------------------------------------
// the registry: every parameter once. GPT-2 init: N(0, 0.02), residual projections N(0, 0.02/√(2L)),
// positions N(0, 0.01), biases 0, layer-norm gains 1. Weight decay on matrices only.

// The pre-LN block as GPT runs it: softmax attention, nothing between LN and projection (models/block.h).
static BlockShape block_shape(const GPTConfig& c) {
    BlockShape k;
    k.C = c.C;
    k.NH = c.NH;
    k.act = c.act == "relu" ? ActKind::relu : ActKind::gelu;
    k.mod = c.mod;
    return k;
}

TensorTable gpt_parameters(const GPTConfig& c) {
    TensorTable t;
    const int64_t C = c.C;
    if (c.d_in == 0) t.add({"wte", {c.V, C}, Init::normal, 0.02f, "token embedding (V,C); also the tied LM head", true});
    t.add({"wpe", {c.maxT, C}, Init::normal, 0.01f, "position embedding (maxT,C)", false});
    for (int l = 0; l < c.L; l++) block_parameters(t, "h." + std::to_string(l) + ".", block_shape(c), c.L);
    lm_head_parameters(t, c.C, c.d_out);  // lnf.w, lnf.b (+ head.w, head.b)
    return t;
}

// ------------------------------------------------------------------------------------------------------
// flags

void add_gpt_flags(Cli& cli, const GPTFlagDefaults& d) {
    cli.flag_shared("--layers", d.layers, "transformer blocks L");
    cli.flag_shared("--width", d.width, "model width C (the CGT: its x stream's d_x)");
    cli.flag_shared("--heads", d.heads, "attention heads (must divide the width)");
    if (d.attn_mods && !cli.has_flag("--attn-mod")) add_attn_mod_flags(cli);
}

GPTConfig gpt_config_from_cli(const Cli& cli, GPTConfig c) {
    c.L = (int)cli.get_int("--layers", 1, 1000);
    c.C = (int)cli.get_int("--width", 1, 1 << 16);
    c.NH = (int)cli.get_int("--heads", 1, 1 << 16);
    if (cli.has_flag("--attn-mod")) c.mod = attn_mods_from_cli(cli);
    return c;
}

std::vector<std::string> given_arch_flags(const Cli& cli, std::initializer_list<const char*> own) {
    std::vector<std::string> out;
    for (const char* f : own)
        if (cli.has_flag(f) && cli.given(f)) out.push_back(f);
    if (cli.has_flag("--attn-mod"))
        for (const char* f : attn_mod_flag_names())
            if (cli.given(f)) out.push_back(f);
    return out;
}

// ------------------------------------------------------------------------------------------------------
// model

template <typename real>
GPT<real>::GPT(const GPTConfig& c, Device dev, uint64_t seed) : cfg(c) {
    cfg.validate();
    s.create(dev, "gpt", cfg.to_json(), gpt_parameters(cfg), seed);
    seed_ = seed;
    head_.spec = HeadSpec{cfg.C, cfg.V, cfg.d_out};
}

template <typename real>
BatchSpec GPT<real>::batch_spec() const {
    return lm_batch_spec(cfg.V, cfg.d_in, cfg.d_out, cfg.maxT, "GPT");
}

template <typename real>
BlockRun<real> GPT<real>::block_run() {
    BlockRun<real> b;
    b.k = block_shape(cfg);
    b.B = B;
    b.T = T;
    b.scratch = scratch_.ptr;
    b.mod_seed = seed_ * 0x9E3779B97F4A7C15ull + forwards_;  // the random neighbours of this forward (and its backward)
    b.shared_grads = shared_dacts_;
    b.attention = attention_override;
    return b;
}

// The activation table for (B,T): what forward writes and backward reads. `g` marks tensors that get a
// gradient buffer too.
template <typename real>
void GPT<real>::layout(int B_, int T_) {
    // the attention scratch is per thread: it follows the thread count in force at each call (--threads, tests)
    ensure_size(scratch_, s.dev, block_scratch_size(block_shape(cfg), B_, T_, omp_get_max_threads(), s.dev));
    const bool share = cfg.L >= 2 && !keep_all_dacts_;
    if (B_ == B && T_ == T && share == shared_dacts_) return;
    const int64_t C = cfg.C, Bl = B_, Tl = T_;
    ActTable t;
    t.add("encoded", {Bl, Tl, C}, "token + position embedding", true);
    for (int l = 0; l < cfg.L; l++) block_activations(t, "h." + std::to_string(l) + ".", Bl, Tl, block_shape(cfg));
    lm_head_activations(t, "", Bl, Tl, head_.spec);
    // the blocks' activation gradients in one block's memory instead of L (models/block.h: share_block_gradients)
    s.set_activations(std::move(t.acts), share ? share_block_gradients(t.grads, cfg.L, "encoded") : std::move(t.grads));
    B = B_;  // only once the buffers exist: a refused allocation (check_host_memory) leaves the old shape in force
    T = T_;
    shared_dacts_ = share;
}

template <typename real>
double GPT<real>::forward(const Batch& bt) {
    in_.upload(s.dev, bt, batch_spec());  // the batch contract (data/batch.h), then the device copies
    layout(bt.B, bt.T);
    forwards_++;
    overridden_ = (bool)attention_override;
    const Device dev = s.dev;
    const int C = cfg.C;
    const int* pos = in_.pos_ptr();
    // encoded = wte[tokens] + wpe[pos]   (or zero-padded vectors + wpe[pos])
    real* x = s.act("encoded");
    if (cfg.d_in > 0) op::vector_embed_forward(dev, x, in_.vectors.ptr, pos, s.param("wpe"), B, T, C, cfg.d_in, cfg.maxT);
    else op::encoder_forward(dev, x, in_.tokens.ptr, pos, s.param("wte"), s.param("wpe"), B, T, C, cfg.V, cfg.maxT);
    // the blocks
    const BlockRun<real> run = block_run();
    x = blocks_forward(s, cfg.L, x, run);  // x = x + attn(LN1(x)) ;  x = x + mlp(LN2(x)), L times
    // lnf = LN_f(x); logits = lnf·wteᵀ | pred = lnf·Wheadᵀ + b; the masked mean loss (models/lm_io.h)
    return scale.ce * head_.forward(s, x, in_, scale.ce);
}

template <typename real>
void GPT<real>::backward() {
    if (!head_.ready()) fail("backward() needs a forward() with targets first");
    if (overridden_ || attention_override) fail("backward(): the forward ran an attention override (inference only)");
    const Device dev = s.dev;
    const int C = cfg.C;
    if (shared_dacts_ && block_sets_own_gradients(block_shape(cfg))) {
        // the blocks' own gradients are set by their writers (models/block.h): zero only the rest
        const size_t stream = s.gtable.offset("encoded");
        s.zero_grad([&](size_t i) { return s.gtable.specs[i].name.compare(0, 2, "h.") == 0 && s.gtable.offsets[i] != stream; });
    } else {
        s.zero_grad();
    }
    // the loss, the head and LN_f, into d(x_L)
    head_.backward(s, blocks_output(cfg.L, "encoded"), in_);
    const BlockRun<real> run = block_run();
    blocks_backward(s, cfg.L, "encoded", run);  // x = x + attn(LN1(x)) ;  x = x + mlp(LN2(x)), L times
    // encoded = wte[tokens] + wpe[pos]   (or zero-padded vectors + wpe[pos])
    if (cfg.d_in > 0) op::vector_embed_backward(dev, s.grad("wpe"), s.dact("encoded"), in_.pos_ptr(), B, T, C, cfg.maxT);
    else op::encoder_backward(dev, s.grad("wte"), s.grad("wpe"), s.dact("encoded"), in_.tokens.ptr, in_.pos_ptr(), B, T, C, cfg.V, cfg.maxT);
}

template <typename real>
std::vector<real> GPT<real>::outputs() {
    return head_.outputs(s);
}

template <typename real>
std::vector<int> GPT<real>::sample(const std::vector<int>& prompt, int n, double temperature, Rng& rng, int v_limit) {
    if (cfg.d_in > 0 || cfg.d_out > 0) fail("sampling needs a token model with an LM head");
    const int V = v_limit > 0 ? std::min(v_limit, cfg.V) : cfg.V;
    std::vector<int> seq = prompt;
    if (seq.empty()) seq.push_back(0);
    // Every buffer is grow-only: one forward at the longest window first lays out and allocates them all, so the
    // token loop below (a window one longer each time until maxT) allocates nothing on either device.
    if (n > 0) {
        Batch widest;
        widest.B = 1;
        widest.T = std::min(cfg.maxT, (int)seq.size() + n - 1);
        widest.tokens.assign((size_t)widest.T, 0);
        const uint64_t draws = forwards_;  // not a forward of the sample: the random-neighbour count stays
        forward(widest);
        forwards_ = draws;
    }
    for (int i = 0; i < n; i++) {
        Batch bt;
        bt.B = 1;
        int start = std::max(0, (int)seq.size() - cfg.maxT);
        bt.tokens.assign(seq.begin() + start, seq.end());
        bt.T = (int)bt.tokens.size();
        forward(bt);
        std::vector<real> logits = s.to_host(s.acts, s.atable.offset("logits") + (size_t)(bt.T - 1) * cfg.V, V);
        int next = 0;
        if (temperature <= 0) {
            next = (int)(std::max_element(logits.begin(), logits.end()) - logits.begin());
        } else {
            double mx = *std::max_element(logits.begin(), logits.end()), z = 0;
            std::vector<double> p(V);
            for (int v = 0; v < V; v++) z += p[v] = std::exp(((double)logits[v] - mx) / temperature);
            double u = rng.uniform() * z, c = 0;
            next = V - 1;
            for (int v = 0; v < V; v++) { c += p[v]; if (u < c) { next = v; break; } }
        }
        seq.push_back(next);
    }
    return std::vector<int>(seq.begin() + prompt.size(), seq.end());
}

template struct GPT<float>;
template struct GPT<double>;

}  // namespace icl
