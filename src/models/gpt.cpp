// gpt.cpp — the baseline GPT: registry, forward, backward, sampling. See gpt.h.
#include "models/gpt.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "engine/common.h"
#include "layers/dispatch.h"
#include "models/attn_mod.h"
#include "models/block.h"

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
    auto get = [&](const char* k, int& dst) {
        if (!j.contains(k) || !j[k].is_number_integer()) fail(std::string("GPT config: missing or non-integer '") + k + "'");
        dst = j[k].get<int>();
    };
    get("L", c.L); get("C", c.C); get("NH", c.NH); get("V", c.V); get("maxT", c.maxT); get("d_in", c.d_in); get("d_out", c.d_out);
    if (j.contains("act")) {
        if (!j["act"].is_string()) fail("GPT config: 'act' is not a string");
        c.act = j["act"].get<std::string>();
    }
    if (j.contains("attn_mod")) c.mod = attn_mods_from_json(j["attn_mod"]);
    c.validate();
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
    const float s = 0.02f;
    auto W = [&](std::string n, Shape sh, float std, std::string doc) { t.add({n, sh, Init::normal, std, doc, true}); };
    auto Z = [&](std::string n, Shape sh, std::string doc) { t.add({n, sh, Init::zeros, 0, doc, false}); };
    auto O = [&](std::string n, Shape sh, std::string doc) { t.add({n, sh, Init::ones, 0, doc, false}); };
    const int64_t C = c.C;
    if (c.d_in == 0) W("wte", {c.V, C}, s, "token embedding (V,C); also the tied LM head");
    t.add({"wpe", {c.maxT, C}, Init::normal, 0.01f, "position embedding (maxT,C)", false});
    for (int l = 0; l < c.L; l++) block_parameters(t, "h." + std::to_string(l) + ".", block_shape(c), c.L);
    O("lnf.w", {C}, "final layer-norm gain");
    Z("lnf.b", {C}, "final layer-norm bias");
    if (c.d_out > 0) {
        W("head.w", {c.d_out, C}, s, "vector read-out head (D_out,C)");
        Z("head.b", {c.d_out}, "vector read-out bias");
    }
    return t;
}

// ------------------------------------------------------------------------------------------------------
// model

template <typename real>
GPT<real>::GPT(const GPTConfig& c, Device dev, uint64_t seed) : cfg(c) {
    cfg.validate();
    s.dev = dev;
    s.kind = "gpt";
    s.config = cfg.to_json();
    s.ptable = gpt_parameters(cfg);
    s.alloc_params();
    s.init_params(seed);
    seed_ = seed;
}

template <typename real>
BlockRun<real> GPT<real>::block_run() {
    BlockRun<real> b;
    b.k = block_shape(cfg);
    b.B = B;
    b.T = T;
    b.scratch = scratch_.ptr;
    b.mod_seed = seed_ * 0x9E3779B97F4A7C15ull + forwards_;  // the random neighbours of this forward (and its backward)
    return b;
}

// The activation table for (B,T): what forward writes and backward reads. `g` marks tensors that get a
// gradient buffer too.
template <typename real>
void GPT<real>::layout(int B_, int T_) {
    if (B_ == B && T_ == T) return;
    B = B_;
    T = T_;
    const int64_t C = cfg.C, Bl = B, Tl = T;
    ActTable t;
    t.add("encoded", {Bl, Tl, C}, "token + position embedding", true);
    for (int l = 0; l < cfg.L; l++) block_activations(t, "h." + std::to_string(l) + ".", Bl, Tl, block_shape(cfg));
    t.add("lnf", {Bl, Tl, C}, "final LN", true);
    t.add("lnf.mean", {Bl, Tl}, "final LN mean", false);
    t.add("lnf.rstd", {Bl, Tl}, "final LN 1/std", false);
    if (cfg.d_out > 0) {
        t.add("pred", {Bl, Tl, cfg.d_out}, "vector predictions", true);
    } else {
        t.add("logits", {Bl, Tl, cfg.V}, "logits", true);
        t.add("probs", {Bl, Tl, cfg.V}, "softmax(logits)", false);
    }
    t.add("losses", {Bl, Tl}, "per-position loss", false);
    s.atable = std::move(t.acts);
    s.gtable = std::move(t.grads);
    s.alloc_acts();
    size_t scratch = attention_scratch_size(B, T, cfg.C, cfg.NH, omp_get_max_threads());
    if (scratch_.n < scratch) scratch_ = Buffer<real>(s.dev, scratch);
}

template <typename real>
double GPT<real>::forward(const Batch& bt) {
    if (bt.T > cfg.maxT) fail(strfmt("sequence length %d exceeds the model's max-T %d", bt.T, cfg.maxT));
    if (bt.vector_input() != (cfg.d_in > 0))
        fail(cfg.d_in > 0 ? "this GPT takes vector inputs, the batch has tokens" : "this GPT takes tokens, the batch has vectors");
    if (bt.vector_input() && bt.D != cfg.d_in) fail(strfmt("batch vectors have width %d, the model expects %d", bt.D, cfg.d_in));
    layout(bt.B, bt.T);
    forwards_++;
    const Device dev = s.dev;
    const int N = B * T, C = cfg.C;
    const size_t nBT = (size_t)N;
    // inputs to the device
    has_pos_ = !bt.pos.empty();
    if (has_pos_) {
        for (int p : bt.pos) if (p < 0 || p >= cfg.maxT) fail(strfmt("position %d outside [0, %d)", p, cfg.maxT));
        if (d_pos_.n < nBT) d_pos_ = Buffer<int>(dev, nBT);
        device_copy(dev, d_pos_.ptr, bt.pos.data(), nBT * sizeof(int), Copy::host_to_device);
    }
    const int* pos = has_pos_ ? d_pos_.ptr : nullptr;
    real* x = s.act("encoded");
    if (cfg.d_in > 0) {
        std::vector<real> v(bt.vectors.begin(), bt.vectors.end());
        if (d_vectors_.n < v.size()) d_vectors_ = Buffer<real>(dev, v.size());
        s.upload(d_vectors_, 0, v.data(), v.size());
        op::vector_embed_forward(dev, x, d_vectors_.ptr, pos, s.param("wpe"), B, T, C, cfg.d_in, cfg.maxT);
    } else {
        for (int t : bt.tokens) if (t < 0 || t >= cfg.V) fail(strfmt("token id %d outside the vocabulary [0, %d)", t, cfg.V));
        if (d_tokens_.n < nBT) d_tokens_ = Buffer<int>(dev, nBT);
        device_copy(dev, d_tokens_.ptr, bt.tokens.data(), nBT * sizeof(int), Copy::host_to_device);
        op::encoder_forward(dev, x, d_tokens_.ptr, pos, s.param("wte"), s.param("wpe"), B, T, C, cfg.V, cfg.maxT);
    }
    // the blocks
    const BlockRun<real> run = block_run();
    for (int l = 0; l < cfg.L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        // x = x + attn(LN1(x)) ;  x = x + mlp(LN2(x))
        x = block_forward(s, h, h, x, run);
    }
    op::layernorm_forward(dev, s.act("lnf"), s.act("lnf.mean"), s.act("lnf.rstd"), x, s.param("lnf.w"), s.param("lnf.b"), N, C);
    // the head and the loss
    bool has_targets = cfg.d_out > 0 ? !bt.target_vecs.empty() : !bt.targets.empty();
    if (cfg.d_out > 0) {
        op::matmul_forward(dev, s.act("pred"), s.act("lnf"), s.param("head.w"), s.param("head.b"), N, C, cfg.d_out);
        if (has_targets) {
            if (bt.Dout != cfg.d_out) fail(strfmt("batch targets have width %d, the model predicts %d", bt.Dout, cfg.d_out));
            std::vector<real> tv(bt.target_vecs.begin(), bt.target_vecs.end());
            if (d_target_vecs_.n < tv.size()) d_target_vecs_ = Buffer<real>(dev, tv.size());
            s.upload(d_target_vecs_, 0, tv.data(), tv.size());
            op::mse_forward(dev, s.act("losses"), s.act("pred"), d_target_vecs_.ptr, N, cfg.d_out);
        }
    } else {
        op::matmul_forward(dev, s.act("logits"), s.act("lnf"), s.param("wte"), (const real*)nullptr, N, C, cfg.V);
        if (has_targets) {
            for (int t : bt.targets) if (t < 0 || t >= cfg.V) fail(strfmt("target id %d outside the vocabulary [0, %d)", t, cfg.V));
            if (d_targets_.n < nBT) d_targets_ = Buffer<int>(dev, nBT);
            device_copy(dev, d_targets_.ptr, bt.targets.data(), nBT * sizeof(int), Copy::host_to_device);
            op::crossentropy_forward(dev, s.act("losses"), s.act("probs"), s.act("logits"), d_targets_.ptr, N, cfg.V);
        }
    }
    if (!has_targets) { dloss_host_.clear(); return NAN; }
    // masked mean on the host (B·T numbers); backward starts from dloss = mask / Σ mask
    std::vector<real> losses = s.fetch_act("losses");
    double wsum = 0, lsum = 0;
    for (size_t i = 0; i < nBT; i++) { wsum += bt.mask[i]; lsum += (double)bt.mask[i] * (double)losses[i]; }
    if (wsum <= 0) fail("batch mask is all zero: no position is scored");
    dloss_host_.resize(nBT);
    for (size_t i = 0; i < nBT; i++) dloss_host_[i] = (real)(bt.mask[i] / wsum);
    return lsum / wsum;
}

template <typename real>
void GPT<real>::backward() {
    if (dloss_host_.empty()) fail("backward() needs a forward() with targets first");
    const Device dev = s.dev;
    const int N = B * T, C = cfg.C;
    s.zero_grad();
    if (d_dloss_.n < (size_t)N) d_dloss_ = Buffer<real>(dev, N);
    s.upload(d_dloss_, 0, dloss_host_.data(), N);
    // loss = Σ dloss·losses ; the head
    if (cfg.d_out > 0) {
        op::mse_backward(dev, s.dact("pred"), d_dloss_.ptr, s.act("pred"), d_target_vecs_.ptr, N, cfg.d_out);
        // pred = lnf·Wheadᵀ + b
        op::matmul_backward(dev, s.dact("lnf"), s.grad("head.w"), s.grad("head.b"), s.dact("pred"), s.act("lnf"), s.param("head.w"), N, C, cfg.d_out);
    } else {
        op::crossentropy_backward(dev, s.dact("logits"), d_dloss_.ptr, s.act("probs"), d_targets_.ptr, N, cfg.V);
        // logits = lnf·wteᵀ  (tied head: wte gets this gradient and the embedding's)
        op::matmul_backward(dev, s.dact("lnf"), s.grad("wte"), (real*)nullptr, s.dact("logits"), s.act("lnf"), s.param("wte"), N, C, cfg.V);
    }
    std::string last = cfg.L > 0 ? "h." + std::to_string(cfg.L - 1) + ".res3" : "encoded";
    // lnf = LN_f(x_L)
    op::layernorm_backward(dev, s.dact(last), s.grad("lnf.w"), s.grad("lnf.b"), s.dact("lnf"), s.act(last), s.param("lnf.w"),
                           s.act("lnf.mean"), s.act("lnf.rstd"), N, C);
    const BlockRun<real> run = block_run();
    for (int l = cfg.L - 1; l >= 0; l--) {
        const std::string h = "h." + std::to_string(l) + ".";
        const std::string in = l == 0 ? "encoded" : "h." + std::to_string(l - 1) + ".res3";
        // x = x + attn(LN1(x)) ;  x = x + mlp(LN2(x))
        block_backward(s, h, h, s.act(in), s.dact(in), run);
    }
    const int* pos = has_pos_ ? d_pos_.ptr : nullptr;
    // encoded = wte[tokens] + wpe[pos]   (or zero-padded vectors + wpe[pos])
    if (cfg.d_in > 0) op::vector_embed_backward(dev, s.grad("wpe"), s.dact("encoded"), pos, B, T, C, cfg.maxT);
    else op::encoder_backward(dev, s.grad("wte"), s.grad("wpe"), s.dact("encoded"), d_tokens_.ptr, pos, B, T, C, cfg.V, cfg.maxT);
}

template <typename real>
std::vector<real> GPT<real>::outputs() {
    return s.fetch_act(cfg.d_out > 0 ? "pred" : "logits");
}

template <typename real>
std::vector<int> GPT<real>::sample(const std::vector<int>& prompt, int n, double temperature, Rng& rng) {
    if (cfg.d_in > 0 || cfg.d_out > 0) fail("sampling needs a token model with an LM head");
    std::vector<int> seq = prompt;
    if (seq.empty()) seq.push_back(0);
    for (int i = 0; i < n; i++) {
        Batch bt;
        bt.B = 1;
        int start = std::max(0, (int)seq.size() - cfg.maxT);
        bt.tokens.assign(seq.begin() + start, seq.end());
        bt.T = (int)bt.tokens.size();
        forward(bt);
        std::vector<real> logits = s.to_host(s.acts, s.atable.offset("logits") + (size_t)(bt.T - 1) * cfg.V, cfg.V);
        int next = 0;
        if (temperature <= 0) {
            next = (int)(std::max_element(logits.begin(), logits.end()) - logits.begin());
        } else {
            double mx = *std::max_element(logits.begin(), logits.end()), z = 0;
            std::vector<double> p(cfg.V);
            for (int v = 0; v < cfg.V; v++) z += p[v] = std::exp(((double)logits[v] - mx) / temperature);
            double u = rng.uniform() * z, c = 0;
            next = cfg.V - 1;
            for (int v = 0; v < cfg.V; v++) { c += p[v]; if (u < c) { next = v; break; } }
        }
        seq.push_back(next);
    }
    return std::vector<int>(seq.begin() + prompt.size(), seq.end());
}

template struct GPT<float>;
template struct GPT<double>;

}  // namespace icl
