// kernel_lm.cpp — the kernel-attention LM: registry, forward, backward, streaming. See kernel_lm.h.
#include "models/iclca/kernel_lm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "engine/checkpoint.h"
#include "engine/common.h"
#include "layers/dispatch.h"
#include "models/block.h"
#include "models/lm_io.h"

namespace icl {

// ------------------------------------------------------------------------------------------------------
// config

nlohmann::json KernelLMConfig::to_json() const {
    nlohmann::json j = {{"L", L}, {"C", C}, {"NH", NH}, {"V", V}, {"maxT", maxT}, {"bias", bias}, {"eps", eps}};
    if (linear()) j["attn"] = attn;  // absent = kernel: the files written before the option read the same
    return j;
}

KernelLMConfig KernelLMConfig::from_json(const nlohmann::json& j) {
    KernelLMConfig c;
    // hard limits before anything is sized from these numbers (engine/checkpoint.h)
    c.L = config_int(j, "L", "kernel_lm", 1, 1 << 12);
    c.C = config_int(j, "C", "kernel_lm", 1, 1 << 16);
    c.NH = config_int(j, "NH", "kernel_lm", 1, 1 << 12);
    c.V = config_int(j, "V", "kernel_lm", 1, 1 << 24);
    c.maxT = config_int(j, "maxT", "kernel_lm", 1, 1 << 30);
    c.bias = config_int(j, "bias", "kernel_lm", 0, 1);
    if (!j.contains("eps") || !j["eps"].is_number()) fail("kernel_lm config: missing or non-numeric 'eps'");
    c.eps = j["eps"].get<double>();
    if (j.contains("attn")) {
        if (!j["attn"].is_string()) fail("kernel_lm config: 'attn' is not a string");
        c.attn = j["attn"].get<std::string>();
        if (c.attn != "kernel" && c.attn != "linear") fail("kernel_lm config: 'attn' must be kernel or linear, got '" + c.attn + "'");
    }
    validate_file_config(c, "kernel_lm");
    return c;
}

void KernelLMConfig::validate() const {
    if (L < 1) fail_usage(strfmt("--layers: must be >= 1, got %d", L));
    if (C < 1) fail_usage(strfmt("--width: must be >= 1, got %d", C));
    if (NH < 1 || C % NH != 0) fail_usage(strfmt("--heads: must divide the width %d, got %d", C, NH));
    if (attn != "kernel" && attn != "linear") fail_usage("--attention: expected kernel or linear, got '" + attn + "'");
    if (!linear() && (C / NH) % 2 != 0) fail_usage(strfmt("--heads: the head size C/NH = %d must be even (RoPE rotates pairs)", C / NH));
    if (C / NH > 512) fail_usage("--heads: head size above 512 is not supported");
    if (V < 1) fail_usage(strfmt("vocabulary size must be >= 1, got %d", V));
    if (maxT < 1) fail_usage("--max-T: must be >= 1");
    if (bias != 0 && bias != 1) fail_usage("--bias: must be 0 or 1");
    if (!(eps >= 0)) fail_usage("--eps: must be >= 0");
}

int64_t KernelLMConfig::num_params() const { return kernel_lm_parameters(*this).count(); }

void add_kernel_lm_flags(Cli& cli, const KernelLMFlagDefaults& d) {
    cli.flag_shared("--layers", d.layers, "blocks L");
    cli.flag_shared("--width", d.width, "width C");
    cli.flag_shared("--heads", d.heads, "heads (kernel attention: C/heads must be even, RoPE rotates pairs)");
    cli.flag("--bias", "1", "1: trainable b_KV, b_D (zero init); 0: none");
    cli.flag("--eps", "1e-6", "denominator epsilon");
}

KernelLMConfig kernel_lm_config_from_cli(const Cli& cli, int V) {
    KernelLMConfig c;
    c.L = (int)cli.get_int("--layers", 1, 1000);
    c.C = (int)cli.get_int("--width", 2, 1 << 16);
    c.NH = (int)cli.get_int("--heads", 1, 1 << 16);
    c.V = V;
    c.bias = (int)cli.get_int("--bias", 0, 1);
    c.eps = cli.get_double("--eps", 0, 1);
    c.validate();
    return c;
}

// ------------------------------------------------------------------------------------------------------
// the registry. GPT-2 init (N(0,0.02), residual projections N(0,0.02/√(2L)), biases 0, LN gains 1); the
// ICLCA biases start at zero (spec §7 "Bias parametrization") and get no weight decay.

// The pre-LN block as the kernel LM runs it: kernel attention with (b_KV, b_D), nothing between LN and projection.
static BlockShape block_shape(const KernelLMConfig& c) {
    BlockShape k;
    k.C = c.C;
    k.NH = c.NH;
    k.attn = c.linear() ? AttnKind::linear : AttnKind::kernel;
    return k;
}

TensorTable kernel_lm_parameters(const KernelLMConfig& c) {
    TensorTable t;
    const int64_t C = c.C;
    t.add({"wte", {c.V, C}, Init::normal, 0.02f, "token embedding (V,C); also the tied LM head", true});
    for (int l = 0; l < c.L; l++) block_parameters(t, "h." + std::to_string(l) + ".", block_shape(c), c.L, c.bias != 0);
    lm_head_parameters(t, c.C, 0);  // lnf.w, lnf.b; the head is tied to wte
    return t;
}

// ------------------------------------------------------------------------------------------------------
// model

template <typename real>
KernelLM<real>::KernelLM(const KernelLMConfig& c, Device dev, uint64_t seed) : cfg(c) {
    cfg.validate();
    if (cfg.linear() && dev != Device::cpu)
        fail("--attention linear: Theorem 4.1's linear attention runs on the CPU only (a teaching case, no CUDA kernel)", 2);
    s.create(dev, "kernel_lm", cfg.to_json(), kernel_lm_parameters(cfg), seed);
    zero_wpe_ = Buffer<real>(dev, (size_t)cfg.C);  // the token-only embedding: wte[tok] + 0
    head_.spec = HeadSpec{cfg.C, cfg.V, 0};
}

template <typename real>
BlockRun<real> KernelLM<real>::block_run(const int* pos) {
    BlockRun<real> b;
    b.k = block_shape(cfg);
    b.B = B;
    b.T = T;
    b.scratch = scratch_.ptr;
    b.pos = pos;
    b.bias = cfg.bias != 0;
    b.eps = cfg.eps;
    return b;
}

template <typename real>
void KernelLM<real>::layout(int B_, int T_) {
    // the attention scratch is per thread: it follows the thread count in force at each call (--threads, tests)
    ensure_size(scratch_, s.dev, block_scratch_size(block_shape(cfg), B_, T_, omp_get_max_threads(), s.dev));
    if (B_ == B && T_ == T) return;
    B = B_;
    T = T_;
    const int64_t C = cfg.C, Bl = B, Tl = T;
    ActTable t;
    t.add("encoded", {Bl, Tl, C}, "token embedding (no position embedding)", true);
    for (int l = 0; l < cfg.L; l++) block_activations(t, "h." + std::to_string(l) + ".", Bl, Tl, block_shape(cfg));
    lm_head_activations(t, "", Bl, Tl, head_.spec);
    s.set_activations(std::move(t.acts), std::move(t.grads));
    ensure_size(d_zero_pos_, s.dev, (size_t)B * T);  // zero-filled
}

template <typename real>
double KernelLM<real>::forward(const Batch& bt) {
    in_.upload(s.dev, bt, batch_spec());  // the batch contract (data/batch.h), then the device copies
    layout(bt.B, bt.T);
    const Device dev = s.dev;
    const int C = cfg.C;
    real* x = s.act("encoded");
    // x = wte[tokens] (+ a zero row: the engine's encoder with a one-row zero position table)
    op::encoder_forward(dev, x, in_.tokens.ptr, d_zero_pos_.ptr, s.param("wte"), zero_wpe_.ptr, B, T, C, cfg.V, 1);
    const BlockRun<real> run = block_run(in_.pos_ptr());
    x = blocks_forward(s, cfg.L, x, run);  // x = x + kattn(LN1(x)) ;  x = x + mlp(LN2(x)), L times
    // lnf = LN_f(x); logits = lnf·wteᵀ (tied); the masked mean loss (models/lm_io.h)
    return scale.ce * head_.forward(s, x, in_, scale.ce);
}

template <typename real>
void KernelLM<real>::backward() {
    if (!head_.ready()) fail("backward() needs a forward() with targets first");
    const Device dev = s.dev;
    const int C = cfg.C;
    s.zero_grad();
    // the loss, the tied head and LN_f, into d(x_L)
    head_.backward(s, blocks_output(cfg.L, "encoded"), in_);
    const BlockRun<real> run = block_run(in_.pos_ptr());
    blocks_backward(s, cfg.L, "encoded", run);  // x = x + kattn(LN1(x)) ;  x = x + mlp(LN2(x)), L times
    // encoded = wte[tokens] + 0
    op::encoder_backward(dev, s.grad("wte"), (real*)nullptr, s.dact("encoded"), in_.tokens.ptr, d_zero_pos_.ptr, B, T, C, cfg.V, 1);
}

template <typename real>
std::vector<real> KernelLM<real>::outputs() {
    return head_.outputs(s);
}

template <typename real>
BatchSpec KernelLM<real>::batch_spec() const {
    return lm_batch_spec(cfg.V, 0, 0, cfg.maxT, "kernel LM");
}

// ------------------------------------------------------------------------------------------------------
// streaming (recurrent) form

template <typename real>
typename KernelLM<real>::Stream KernelLM<real>::stream_start(int p0) {
    if (cfg.linear())
        fail("--attention linear has no streaming form: with no mask every token reads the whole sequence (use the parallel form)", 2);
    const Device dev = s.dev;
    const size_t m = cfg.hs(), per_S = (size_t)cfg.NH * m * m, per_z = (size_t)cfg.NH * m;
    Stream st;
    st.S = Buffer<real>(dev, cfg.L * per_S);  // zero-filled
    st.z = Buffer<real>(dev, cfg.L * per_z);
    st.ids = Buffer<int>(dev, 2);
    st.pos = p0;
    if (cfg.bias)  // S = b_KV, z = b_D, layer by layer, device to device
        for (int l = 0; l < cfg.L; l++) {
            const std::string h = "h." + std::to_string(l) + ".";
            device_copy(dev, st.S.ptr + l * per_S, s.param(h + "attn.bkv"), per_S * sizeof(real), Copy::device_to_device);
            device_copy(dev, st.z.ptr + l * per_z, s.param(h + "attn.bd"), per_z * sizeof(real), Copy::device_to_device);
        }
    return st;
}

template <typename real>
void KernelLM<real>::stream_state(const Stream& st, std::vector<real>& S, std::vector<real>& z) const {
    S = s.to_host(st.S, 0, st.S.n);
    z = s.to_host(st.z, 0, st.z.n);
}

template <typename real>
std::vector<real> KernelLM<real>::stream_step(Stream& st, int token) {
    if (token < 0 || token >= cfg.V) fail(strfmt("token id %d outside the vocabulary [0, %d)", token, cfg.V));
    if (st.pos < 0 || st.pos >= cfg.maxT) fail(strfmt("position %d outside [0, %d)", st.pos, cfg.maxT));
    if (st.ids.dev != s.dev || !st.S.ptr) fail("stream_step: the stream was not started by this model's stream_start");
    const Device dev = s.dev;
    const int C = cfg.C, NH = cfg.NH;
    const size_t m = cfg.hs(), per_S = (size_t)NH * m * m, per_z = (size_t)NH * m;
    // one token's activations: x, ln, qkv(3C), atty, proj, res, fch(4C), gelu(4C), logits(V), mean, rstd
    const size_t need = (size_t)C * 16 + cfg.V + 2;
    ensure_size(step_buf_, dev, need);
    real* x = step_buf_.ptr;
    real* ln = x + C;
    real* qkv = ln + C;
    real* atty = qkv + 3 * C;
    real* proj = atty + C;
    real* res = proj + C;
    real* fch = res + C;
    real* gel = fch + 4 * C;
    real* logits = gel + 4 * C;
    real* mean = logits + cfg.V;
    real* rstd = mean + 1;
    device_copy(dev, st.ids.ptr, &token, sizeof(int), Copy::host_to_device);  // ids = [token, 0]
    // x = wte[token] (+ the zero position row)
    op::encoder_forward(dev, x, st.ids.ptr, st.ids.ptr + 1, s.param("wte"), zero_wpe_.ptr, 1, 1, C, cfg.V, 1);
    for (int l = 0; l < cfg.L; l++) {
        std::string h = "h." + std::to_string(l) + ".";
        auto P = [&](const char* n) { return s.param(h + n); };
        // x = x + kattn(LN1(x)): one query against the state; S += R_pos φ(k) vᵀ, z += φ(k) first (layers/kernel_attention.h)
        op::layernorm_forward(dev, ln, mean, rstd, x, P("ln1.w"), P("ln1.b"), 1, C);
        op::matmul_forward(dev, qkv, ln, P("attn.qkv.w"), P("attn.qkv.b"), 1, C, 3 * C);
        op::kernel_attention_step(dev, atty, st.S.ptr + l * per_S, st.z.ptr + l * per_z, qkv, st.pos, C, NH, cfg.eps);
        op::matmul_forward(dev, proj, atty, P("attn.proj.w"), P("attn.proj.b"), 1, C, C);
        op::residual_forward(dev, res, x, proj, (int64_t)C);
        // x = x + mlp(LN2(x))
        op::layernorm_forward(dev, ln, mean, rstd, res, P("ln2.w"), P("ln2.b"), 1, C);
        op::matmul_forward(dev, fch, ln, P("mlp.fc.w"), P("mlp.fc.b"), 1, C, 4 * C);
        op::gelu_forward(dev, gel, fch, (int64_t)4 * C);
        op::matmul_forward(dev, proj, gel, P("mlp.proj.w"), P("mlp.proj.b"), 1, 4 * C, C);
        op::residual_forward(dev, x, res, proj, (int64_t)C);
    }
    // logits = LN_f(x)·wteᵀ (tied)
    op::layernorm_forward(dev, ln, mean, rstd, x, s.param("lnf.w"), s.param("lnf.b"), 1, C);
    op::matmul_forward(dev, logits, ln, s.param("wte"), (const real*)nullptr, 1, C, cfg.V);
    st.pos++;
    return s.to_host(step_buf_, (size_t)(logits - step_buf_.ptr), (size_t)cfg.V);
}

template <typename real>
std::vector<int> KernelLM<real>::generate(const std::vector<int>& prompt, int n, int p0) {
    Stream st = stream_start(p0);
    std::vector<real> logits;
    for (int t : prompt) logits = stream_step(st, t);
    std::vector<int> out;
    for (int i = 0; i < n; i++) {
        if (logits.empty()) logits = stream_step(st, 0);  // empty prompt: start from token 0
        int next = (int)(std::max_element(logits.begin(), logits.end()) - logits.begin());
        out.push_back(next);
        if (i + 1 < n) logits = stream_step(st, next);
    }
    return out;
}

template struct KernelLM<float>;
template struct KernelLM<double>;

}  // namespace icl
