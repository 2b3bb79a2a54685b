// gpt.cpp — the baseline GPT: registry, forward, backward, sampling. See gpt.h.
#include "models/gpt.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "engine/common.h"
#include "layers/dispatch.h"

namespace icl {

// ------------------------------------------------------------------------------------------------------
// config

nlohmann::json GPTConfig::to_json() const {
    return {{"L", L}, {"C", C}, {"NH", NH}, {"V", V}, {"maxT", maxT}, {"d_in", d_in}, {"d_out", d_out}};
}

GPTConfig GPTConfig::from_json(const nlohmann::json& j) {
    GPTConfig c;
    auto get = [&](const char* k, int& dst) {
        if (!j.contains(k) || !j[k].is_number_integer()) fail(std::string("GPT config: missing or non-integer '") + k + "'");
        dst = j[k].get<int>();
    };
    get("L", c.L); get("C", c.C); get("NH", c.NH); get("V", c.V); get("maxT", c.maxT); get("d_in", c.d_in); get("d_out", c.d_out);
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
}

int64_t GPTConfig::num_params() const { return gpt_parameters(*this).count(); }

// ------------------------------------------------------------------------------------------------------
// the registry: every parameter once. GPT-2 init: N(0, 0.02), residual projections N(0, 0.02/√(2L)),
// positions N(0, 0.01), biases 0, layer-norm gains 1. Weight decay on matrices only.

TensorTable gpt_parameters(const GPTConfig& c) {
    TensorTable t;
    const float s = 0.02f, sres = 0.02f / std::sqrt(2.0f * c.L);
    auto W = [&](std::string n, Shape sh, float std, std::string doc) { t.add({n, sh, Init::normal, std, doc, true}); };
    auto Z = [&](std::string n, Shape sh, std::string doc) { t.add({n, sh, Init::zeros, 0, doc, false}); };
    auto O = [&](std::string n, Shape sh, std::string doc) { t.add({n, sh, Init::ones, 0, doc, false}); };
    const int64_t C = c.C;
    if (c.d_in == 0) W("wte", {c.V, C}, s, "token embedding (V,C); also the tied LM head");
    t.add({"wpe", {c.maxT, C}, Init::normal, 0.01f, "position embedding (maxT,C)", false});
    for (int l = 0; l < c.L; l++) {
        std::string h = "h." + std::to_string(l) + ".";
        O(h + "ln1.w", {C}, "attention layer-norm gain");
        Z(h + "ln1.b", {C}, "attention layer-norm bias");
        W(h + "attn.qkv.w", {3 * C, C}, s, "query/key/value projection (3C,C)");
        Z(h + "attn.qkv.b", {3 * C}, "query/key/value bias");
        W(h + "attn.proj.w", {C, C}, sres, "attention output projection (C,C)");
        Z(h + "attn.proj.b", {C}, "attention output bias");
        O(h + "ln2.w", {C}, "MLP layer-norm gain");
        Z(h + "ln2.b", {C}, "MLP layer-norm bias");
        W(h + "mlp.fc.w", {4 * C, C}, s, "MLP up projection (4C,C)");
        Z(h + "mlp.fc.b", {4 * C}, "MLP up bias");
        W(h + "mlp.proj.w", {C, 4 * C}, sres, "MLP down projection (C,4C)");
        Z(h + "mlp.proj.b", {C}, "MLP down bias");
    }
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
}

// The activation table for (B,T): what forward writes and backward reads. `g` marks tensors that get a
// gradient buffer too.
template <typename real>
void GPT<real>::layout(int B_, int T_) {
    if (B_ == B && T_ == T) return;
    B = B_;
    T = T_;
    const int64_t C = cfg.C, NH = cfg.NH, Bl = B, Tl = T;
    TensorTable a, g;
    auto act = [&](const std::string& n, Shape sh, const char* doc, bool grad) {
        a.add({n, sh, Init::none, 0, doc, false});
        if (grad) g.add({n, sh, Init::none, 0, doc, false});
    };
    act("encoded", {Bl, Tl, C}, "token + position embedding", true);
    for (int l = 0; l < cfg.L; l++) {
        std::string h = "h." + std::to_string(l) + ".";
        act(h + "ln1", {Bl, Tl, C}, "LN1(x)", true);
        act(h + "ln1.mean", {Bl, Tl}, "LN1 mean", false);
        act(h + "ln1.rstd", {Bl, Tl}, "LN1 1/std", false);
        act(h + "qkv", {Bl, Tl, 3 * C}, "[q|k|v]", true);
        act(h + "att", {Bl, NH, Tl, Tl}, "attention probabilities (causal part valid)", false);
        act(h + "atty", {Bl, Tl, C}, "attention output, heads concatenated", true);
        act(h + "attproj", {Bl, Tl, C}, "attention output projection", true);
        act(h + "res2", {Bl, Tl, C}, "residual after attention", true);
        act(h + "ln2", {Bl, Tl, C}, "LN2(x)", true);
        act(h + "ln2.mean", {Bl, Tl}, "LN2 mean", false);
        act(h + "ln2.rstd", {Bl, Tl}, "LN2 1/std", false);
        act(h + "fch", {Bl, Tl, 4 * C}, "MLP pre-activation", true);
        act(h + "fch_gelu", {Bl, Tl, 4 * C}, "GELU(MLP pre-activation)", true);
        act(h + "fcproj", {Bl, Tl, C}, "MLP output", true);
        act(h + "res3", {Bl, Tl, C}, "residual after MLP (block output)", true);
    }
    act("lnf", {Bl, Tl, C}, "final LN", true);
    act("lnf.mean", {Bl, Tl}, "final LN mean", false);
    act("lnf.rstd", {Bl, Tl}, "final LN 1/std", false);
    if (cfg.d_out > 0) {
        act("pred", {Bl, Tl, cfg.d_out}, "vector predictions", true);
    } else {
        act("logits", {Bl, Tl, cfg.V}, "logits", true);
        act("probs", {Bl, Tl, cfg.V}, "softmax(logits)", false);
    }
    act("losses", {Bl, Tl}, "per-position loss", false);
    s.atable = std::move(a);
    s.gtable = std::move(g);
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
    const Device dev = s.dev;
    const int N = B * T, C = cfg.C, NH = cfg.NH;
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
    for (int l = 0; l < cfg.L; l++) {
        std::string h = "h." + std::to_string(l) + ".";
        auto A = [&](const char* n) { return s.act(h + n); };
        auto P = [&](const char* n) { return s.param(h + n); };
        op::layernorm_forward(dev, A("ln1"), A("ln1.mean"), A("ln1.rstd"), x, P("ln1.w"), P("ln1.b"), N, C);
        op::matmul_forward(dev, A("qkv"), A("ln1"), P("attn.qkv.w"), P("attn.qkv.b"), N, C, 3 * C);
        op::attention_forward(dev, A("atty"), A("att"), scratch_.ptr, A("qkv"), B, T, C, NH);
        op::matmul_forward(dev, A("attproj"), A("atty"), P("attn.proj.w"), P("attn.proj.b"), N, C, C);
        op::residual_forward(dev, A("res2"), x, A("attproj"), (int64_t)N * C);
        op::layernorm_forward(dev, A("ln2"), A("ln2.mean"), A("ln2.rstd"), A("res2"), P("ln2.w"), P("ln2.b"), N, C);
        op::matmul_forward(dev, A("fch"), A("ln2"), P("mlp.fc.w"), P("mlp.fc.b"), N, C, 4 * C);
        op::gelu_forward(dev, A("fch_gelu"), A("fch"), (int64_t)N * 4 * C);
        op::matmul_forward(dev, A("fcproj"), A("fch_gelu"), P("mlp.proj.w"), P("mlp.proj.b"), N, 4 * C, C);
        op::residual_forward(dev, A("res3"), A("res2"), A("fcproj"), (int64_t)N * C);
        x = A("res3");
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
    const int N = B * T, C = cfg.C, NH = cfg.NH;
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
    for (int l = cfg.L - 1; l >= 0; l--) {
        std::string h = "h." + std::to_string(l) + ".";
        std::string in = l == 0 ? "encoded" : "h." + std::to_string(l - 1) + ".res3";
        auto A = [&](const char* n) { return s.act(h + n); };
        auto D = [&](const char* n) { return s.dact(h + n); };
        auto P = [&](const char* n) { return s.param(h + n); };
        auto G = [&](const char* n) { return s.grad(h + n); };
        // res3 = res2 + fcproj
        op::residual_backward(dev, D("res2"), D("fcproj"), D("res3"), (int64_t)N * C);
        // fcproj = fch_gelu·W2ᵀ + b2
        op::matmul_backward(dev, D("fch_gelu"), G("mlp.proj.w"), G("mlp.proj.b"), D("fcproj"), A("fch_gelu"), P("mlp.proj.w"), N, 4 * C, C);
        // fch_gelu = GELU(fch)
        op::gelu_backward(dev, D("fch"), A("fch"), D("fch_gelu"), (int64_t)N * 4 * C);
        // fch = ln2·W1ᵀ + b1
        op::matmul_backward(dev, D("ln2"), G("mlp.fc.w"), G("mlp.fc.b"), D("fch"), A("ln2"), P("mlp.fc.w"), N, C, 4 * C);
        // ln2 = LN2(res2)
        op::layernorm_backward(dev, D("res2"), G("ln2.w"), G("ln2.b"), D("ln2"), A("res2"), P("ln2.w"), A("ln2.mean"), A("ln2.rstd"), N, C);
        // res2 = x + attproj
        op::residual_backward(dev, s.dact(in), D("attproj"), D("res2"), (int64_t)N * C);
        // attproj = atty·Woᵀ + bo
        op::matmul_backward(dev, D("atty"), G("attn.proj.w"), G("attn.proj.b"), D("attproj"), A("atty"), P("attn.proj.w"), N, C, C);
        // atty = attention(qkv)
        op::attention_backward(dev, D("qkv"), scratch_.ptr, D("atty"), A("qkv"), A("att"), B, T, C, NH);
        // qkv = ln1·Wqkvᵀ + bqkv
        op::matmul_backward(dev, D("ln1"), G("attn.qkv.w"), G("attn.qkv.b"), D("qkv"), A("ln1"), P("attn.qkv.w"), N, C, 3 * C);
        // ln1 = LN1(x)
        op::layernorm_backward(dev, s.dact(in), G("ln1.w"), G("ln1.b"), D("ln1"), s.act(in), P("ln1.w"), A("ln1.mean"), A("ln1.rstd"), N, C);
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
