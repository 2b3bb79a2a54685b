// Pretrained models in and out (models/pretrained.h, models/gpt_infer.h), on tiny files the tests write.
//
// With NumPy: a Python script writes one random model in each source layout — Hugging Face GPT-2 with and without
// the "transformer." prefix (plus the tied lm_head and the attention-mask buffers), llm.c's .bin in fp32 (version 3,
// padded vocabulary) and bf16 (version 5), Hugging Face OPT in F16 — and computes its logits with its own float64
// forward pass written from each format's semantics (Conv1D (in,out) weights, OPT's q scaling and position offset
// 2, ReLU, …), never through the engine. The engine's import must give the same logits to fp32 rounding; the
// perplexity of --eval-text and the greedy continuation must match the script's window protocol.
// Without NumPy those cases are skipped (visibly); the round trip and every refusal run everywhere.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <tuple>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/common.h"
#include "engine/npy.h"
#include "engine/safetensors.h"
#include "file_util.h"
#include "models/gpt.h"
#include "data/gpt2_tokenizer.h"
#include "models/gpt_infer.h"
#include "models/pretrained.h"
#include "run_binary.h"
#include "skip.h"

using icl_test::TmpDir;
using icl_test::slurp;
using icl_test::spit;

namespace {

const char* kMakeModels = R"PY(
import json, struct, sys
import numpy as np
D = sys.argv[1]
rng = np.random.default_rng(7)

def st_write(path, tensors, meta=None):
    header, off, blobs = {}, 0, []
    if meta: header["__metadata__"] = meta
    for name, a in tensors:
        dt = {"float32": "F32", "float16": "F16"}[str(a.dtype)]
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h); f.write(b"".join(blobs))

def ln(x, w, b):  # eps 1e-5: GPT-2's layer_norm_epsilon and OPT's nn.LayerNorm default
    m = x.mean(-1, keepdims=True); v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * w + b

def attn(q, k, v, NH, scale):  # causal multi-head attention on (T, C) rows
    T, C = q.shape; hd = C // NH; out = np.zeros_like(q)
    for h in range(NH):
        s = slice(h * hd, (h + 1) * hd)
        a = (q[:, s] * scale) @ k[:, s].T
        a = np.where(np.tril(np.ones((T, T), bool)), a, -np.inf)
        a = np.exp(a - a.max(-1, keepdims=True)); a /= a.sum(-1, keepdims=True)
        out[:, s] = a @ v[:, s]
    return out

def gelu_new(x): return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
def r(*shape, s=0.3): return (rng.standard_normal(shape) * s).astype(np.float32)

# ---- GPT-2, Hugging Face layout: Conv1D weights stored (in, out), x @ W + b
def gpt2_weights(V, C, L, T):
    w = {"wte.weight": r(V, C), "wpe.weight": r(T, C), "ln_f.weight": 1 + r(C, s=0.1), "ln_f.bias": r(C, s=0.1)}
    for l in range(L):
        p = "h.%d." % l
        w[p + "ln_1.weight"] = 1 + r(C, s=0.1); w[p + "ln_1.bias"] = r(C, s=0.1)
        w[p + "attn.c_attn.weight"] = r(C, 3 * C); w[p + "attn.c_attn.bias"] = r(3 * C, s=0.1)
        w[p + "attn.c_proj.weight"] = r(C, C); w[p + "attn.c_proj.bias"] = r(C, s=0.1)
        w[p + "ln_2.weight"] = 1 + r(C, s=0.1); w[p + "ln_2.bias"] = r(C, s=0.1)
        w[p + "mlp.c_fc.weight"] = r(C, 4 * C); w[p + "mlp.c_fc.bias"] = r(4 * C, s=0.1)
        w[p + "mlp.c_proj.weight"] = r(4 * C, C); w[p + "mlp.c_proj.bias"] = r(C, s=0.1)
    return w

def gpt2_forward(w, toks, L, NH):
    g = lambda n: w[n].astype(np.float64)
    x = g("wte.weight")[toks] + g("wpe.weight")[np.arange(len(toks))]
    for l in range(L):
        p = "h.%d." % l
        h = ln(x, g(p + "ln_1.weight"), g(p + "ln_1.bias")) @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")
        q, k, v = np.split(h, 3, axis=-1)
        x = x + attn(q, k, v, NH, 1 / np.sqrt(q.shape[1] // NH)) @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
        h = gelu_new(ln(x, g(p + "ln_2.weight"), g(p + "ln_2.bias")) @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias"))
        x = x + h @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
    return ln(x, g("ln_f.weight"), g("ln_f.bias")) @ g("wte.weight").T

def gpt2_config(V, C, L, NH, T):
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V, "n_positions": T, "n_ctx": T,
            "n_embd": C, "n_layer": L, "n_head": NH, "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05}

def write_dir(d, cfg, tensors):
    import os
    os.makedirs(d, exist_ok=True)
    json.dump(cfg, open(d + "/config.json", "w"))
    st_write(d + "/model.safetensors", tensors, {"format": "pt"})

L, C, NH, V, T = 2, 16, 2, 37, 12
toks = rng.integers(0, V, 10)
np.save(D + "/tokens.npy", toks.astype(np.int32))
w = gpt2_weights(V, C, L, T)
write_dir(D + "/gpt2_plain", gpt2_config(V, C, L, NH, T), list(w.items()))
pre = [("transformer." + k, a) for k, a in w.items()]
pre.append(("lm_head.weight", w["wte.weight"].copy()))  # tied: GPT2LMHeadModel saves it too
for l in range(L):  # the mask buffers older checkpoints hold
    pre.append(("transformer.h.%d.attn.bias" % l, np.tril(np.ones((1, 1, T, T), np.float32))))
    pre.append(("transformer.h.%d.attn.masked_bias" % l, np.array(-1e4, np.float32)))
write_dir(D + "/gpt2_prefixed", gpt2_config(V, C, L, NH, T), pre[::-1])
np.save(D + "/logits_gpt2.npy", gpt2_forward(w, toks, L, NH))

# ---- llm.c: int32 header[256], then wte (Vp,C) … with weights (out, in), each per-layer tensor stacked over layers
def llmc_write(path, w, version, Vp):
    hdr = np.zeros(256, np.int32); hdr[:8] = [20240326, version, T, V, L, NH, C, Vp]
    wte = np.concatenate([w["wte.weight"], np.full((Vp - V, C), 1e3, np.float32)])  # padding rows: never read
    parts = [wte, w["wpe.weight"]]
    per = [("ln_1.weight", False), ("ln_1.bias", False), ("attn.c_attn.weight", True), ("attn.c_attn.bias", False),
           ("attn.c_proj.weight", True), ("attn.c_proj.bias", False), ("ln_2.weight", False), ("ln_2.bias", False),
           ("mlp.c_fc.weight", True), ("mlp.c_fc.bias", False), ("mlp.c_proj.weight", True), ("mlp.c_proj.bias", False)]
    for name, conv in per:
        parts.append(np.stack([w["h.%d.%s" % (l, name)].T if conv else w["h.%d.%s" % (l, name)] for l in range(L)]))
    parts += [w["ln_f.weight"], w["ln_f.bias"]]
    flat = np.concatenate([p.astype(np.float32).ravel() for p in parts])
    if version == 5:
        u = flat.view(np.uint32).astype(np.uint64)
        flat = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even bfloat16
    with open(path, "wb") as f:
        f.write(hdr.tobytes()); f.write(flat.tobytes())

llmc_write(D + "/gpt2_124M.bin", w, 3, 40)
def to_bf16(a):
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32)).view(np.float32)
llmc_write(D + "/gpt2_bf16.bin", w, 5, 40)
np.save(D + "/logits_llmc_bf16.npy", gpt2_forward({k: to_bf16(a) for k, a in w.items()}, toks, L, NH))

# ---- OPT (pre-LN), Hugging Face layout, stored as F16: nn.Linear weights (out, in), x @ W.T + b
o = {"embed_tokens.weight": r(V, C), "embed_positions.weight": r(T + 2, C),
     "final_layer_norm.weight": 1 + r(C, s=0.1), "final_layer_norm.bias": r(C, s=0.1)}
for l in range(L):
    p = "layers.%d." % l
    for n in ["q_proj", "k_proj", "v_proj", "out_proj"]:
        o[p + "self_attn.%s.weight" % n] = r(C, C); o[p + "self_attn.%s.bias" % n] = r(C, s=0.1)
    o[p + "self_attn_layer_norm.weight"] = 1 + r(C, s=0.1); o[p + "self_attn_layer_norm.bias"] = r(C, s=0.1)
    o[p + "fc1.weight"] = r(4 * C, C); o[p + "fc1.bias"] = r(4 * C, s=0.1)
    o[p + "fc2.weight"] = r(C, 4 * C); o[p + "fc2.bias"] = r(C, s=0.1)
    o[p + "final_layer_norm.weight"] = 1 + r(C, s=0.1); o[p + "final_layer_norm.bias"] = r(C, s=0.1)
o = {k: a.astype(np.float16) for k, a in o.items()}
def opt_forward(o, toks):
    g = lambda n: o[n].astype(np.float64)
    lin = lambda x, n: x @ g(n + ".weight").T + g(n + ".bias")
    x = g("embed_tokens.weight")[toks] + g("embed_positions.weight")[np.arange(len(toks)) + 2]  # OPT's offset of 2
    hd = C // NH
    for l in range(L):
        p = "layers.%d." % l
        h = ln(x, g(p + "self_attn_layer_norm.weight"), g(p + "self_attn_layer_norm.bias"))
        q = lin(h, p + "self_attn.q_proj") * hd ** -0.5  # OPT scales q (bias included), then plain q·k
        x = x + lin(attn(q, lin(h, p + "self_attn.k_proj"), lin(h, p + "self_attn.v_proj"), NH, 1.0), p + "self_attn.out_proj")
        h = ln(x, g(p + "final_layer_norm.weight"), g(p + "final_layer_norm.bias"))
        x = x + lin(np.maximum(lin(h, p + "fc1"), 0), p + "fc2")
    return ln(x, g("final_layer_norm.weight"), g("final_layer_norm.bias")) @ g("embed_tokens.weight").T
opt_cfg = {"model_type": "opt", "hidden_size": C, "num_hidden_layers": L, "num_attention_heads": NH, "ffn_dim": 4 * C,
           "vocab_size": V, "max_position_embeddings": T, "do_layer_norm_before": True, "word_embed_proj_dim": C,
           "activation_function": "relu", "enable_bias": True, "layer_norm_elementwise_affine": True, "torch_dtype": "float16"}
ot = [("model.decoder." + k, a) for k, a in o.items()] + [("lm_head.weight", o["embed_tokens.weight"])]
write_dir(D + "/opt", opt_cfg, ot)
np.save(D + "/logits_opt.npy", opt_forward(o, toks))

# ---- a byte-level GPT-2 (V = 256, context 8) for the perplexity protocol and greedy sampling
Lb, Cb, NHb, Tb = 2, 16, 2, 8
wb = gpt2_weights(256, Cb, Lb, Tb)
write_dir(D + "/bytes", gpt2_config(256, Cb, Lb, NHb, Tb), list(wb.items()))
text = b"The quick brown fox jumps over the lazy dog. \xc3\xa9t\xc3\xa9!"  # 51 bytes: 6 windows of 8 + one of 3
text2 = text[:41]                                                        # 5 windows + 1 token: not a window
open(D + "/text.txt", "wb").write(text); open(D + "/text2.txt", "wb").write(text2)
def ppl(ids):
    tot, n, win = 0.0, 0, 0
    for at in range(0, len(ids), Tb):
        w = ids[at:at + Tb]
        if len(w) < 2: break
        z = gpt2_forward(wb, np.array(w), Lb, NHb)
        z = z - z.max(-1, keepdims=True); lp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        tot -= sum(lp[t, w[t + 1]] for t in range(len(w) - 1)); n += len(w) - 1; win += 1
    return tot / n, win
seq = [97, 98]  # "ab", then 6 greedy steps on the last <= 8 tokens
for _ in range(6):
    seq.append(int(np.argmax(gpt2_forward(wb, np.array(seq[-Tb:]), Lb, NHb)[-1])))
l1, w1 = ppl(list(text)); l2, w2 = ppl(list(text2))
json.dump({"loss": l1, "windows": w1, "loss2": l2, "windows2": w2, "greedy": seq[2:]}, open(D + "/expected.json", "w"))
)PY";

// Logits (T,V) of `path`'s model on `tokens`, through the engine's import.
std::vector<float> engine_logits(const std::string& path, const std::vector<int>& tokens) {
    icl::GPT<float> m(icl::pretrained_config(path), icl::Device::cpu, 1);
    icl::pretrained_load(m, path);
    icl::Batch bt;
    bt.B = 1;
    bt.T = (int)tokens.size();
    bt.tokens = tokens;
    m.forward(bt);
    return m.outputs();
}

double max_abs_diff(const std::vector<float>& a, const icl::NpyArray& ref) {
    const std::vector<double> r = ref.to_double();
    REQUIRE(a.size() == r.size());
    double worst = 0;
    for (size_t i = 0; i < a.size(); i++) worst = std::max(worst, std::fabs((double)a[i] - r[i]));
    return worst;
}

// The model of `gpt2_plain` rewritten: keys renamed or dropped, config edited (refusal cases).
void copy_dir(const std::string& from, const std::string& to) {
    std::filesystem::create_directories(to);
    for (const char* f : {"/config.json", "/model.safetensors"}) std::filesystem::copy_file(from + f, to + f);
}

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const icl::Error& e) {
        return e.what();
    }
    return "";
}

// A random engine GPT exported to the Hugging Face GPT-2 layout, and its parameters.
std::vector<float> export_random(const std::string& dir, icl::GPTConfig c, uint64_t seed) {
    icl::GPT<float> m(c, icl::Device::cpu, seed);
    icl::export_hf_gpt2(m, dir);
    return m.s.to_host(m.s.params, 0, m.s.ptable.total);
}

icl::GPTConfig small_config() {
    icl::GPTConfig c;
    c.L = 2; c.C = 16; c.NH = 4; c.V = 29; c.maxT = 9;
    return c;
}

// The rows of a results CSV (its "# icl.cpp …" provenance line skipped), header first, as text cells.
std::vector<std::vector<std::string>> csv_rows(const std::string& path) {
    std::vector<std::vector<std::string>> rows;
    std::istringstream in(slurp(path));
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#') continue;
        std::vector<std::string> f;
        std::stringstream ss(line);
        for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
        if (!line.empty() && line.back() == ',') f.push_back("");
        rows.push_back(f);
    }
    return rows;
}

// A random GPT-2 folder with the small tokenizer of the fuzz corpus (256 byte symbols, 10 merges, <|endoftext|>).
void gpt2_with_small_tokenizer(const std::string& dir, int maxT, uint64_t seed) {
    icl::GPTConfig c = small_config();
    c.V = 267;
    c.maxT = maxT;
    export_random(dir, c, seed);
    const std::string tok = slurp(icl_test::repo_root() + "/tests/fuzz/corpus/gpt2_tokenizer/small");
    const size_t nul = tok.find('\0');
    REQUIRE(nul != std::string::npos);
    spit(dir + "/vocab.json", tok.substr(0, nul));
    spit(dir + "/merges.txt", tok.substr(nul + 1));
}

// Runs the script into `d`; the models, logits and expected values are then in d.path.
void make_models(const TmpDir& d) {
    spit(d / "make_models.py", kMakeModels);
    REQUIRE(std::system(("/usr/bin/python3 " + (d / "make_models.py") + " " + d.path).c_str()) == 0);
}

}  // namespace

TEST_SUITE("pretrained") {

TEST_CASE("pretrained: GPT-2 (both key styles), llm.c fp32/bf16 and OPT F16 logits = an independent NumPy forward" * NUMPY_CASE) {
    TmpDir d;
    make_models(d);
    icl::NpyArray tok = icl::npy_load(d / "tokens.npy");
    const std::vector<int> tokens = tok.as<int32_t>();
    struct Case { const char* path; const char* logits; const char* format; };
    for (Case c : {Case{"gpt2_plain", "logits_gpt2.npy", "hf-gpt2"}, Case{"gpt2_prefixed", "logits_gpt2.npy", "hf-gpt2"},
                   Case{"gpt2_124M.bin", "logits_gpt2.npy", "llmc"}, Case{"gpt2_bf16.bin", "logits_llmc_bf16.npy", "llmc"},
                   Case{"opt", "logits_opt.npy", "hf-opt"}}) {
        CAPTURE(c.path);
        CHECK(icl::pretrained_format(d / c.path) == c.format);
        const icl::GPTConfig cfg = icl::pretrained_config(d / c.path);
        CHECK(cfg.L == 2);
        CHECK(cfg.C == 16);
        CHECK(cfg.NH == 2);
        CHECK(cfg.V == 37);  // llm.c's padded 40 rows cut to the real vocabulary
        CHECK(cfg.maxT == 12);
        CHECK(cfg.act == (std::string(c.format) == "hf-opt" ? "relu" : "gelu"));
        const double err = max_abs_diff(engine_logits(d / c.path, tokens), icl::npy_load(d / c.logits));
        MESSAGE(std::string(c.path) << ": max |engine fp32 − NumPy fp64| over the logits = " << err);
        // logits of magnitude ~3 through 2 blocks in fp32: measured 0.9e-6 – 1.7e-6 (Zen 4, AVX-512); 2e-5 leaves 10x for other
        // CPUs' summation order, and is 100x below the smallest effect of any format mistake (a transposed
        // weight, a missing offset of 2, GELU for ReLU change logits by O(0.1–1))
        CHECK(err < 2e-5);
    }
}

TEST_CASE("pretrained: --eval-text perplexity and greedy --prompt = the NumPy window protocol" * NUMPY_CASE) {
    TmpDir d;
    make_models(d);
    const nlohmann::json e = nlohmann::json::parse(slurp(d / "expected.json"));
    for (auto [file, key, wkey, n] : {std::make_tuple("text.txt", "loss", "windows", 51), std::make_tuple("text2.txt", "loss2", "windows2", 41)}) {
        icl_test::Result r = icl_test::run("train_gpt --load-hf " + (d / "bytes") + " --eval-text " + (d / file));
        CAPTURE(r.err);
        CAPTURE(r.out);
        REQUIRE(r.code == 0);
        CHECK(r.out.find(icl::strfmt("eval: %d tokens, %d windows, loss ", n, e[wkey].get<int>())) == 0);
        const size_t at = r.out.find(", loss ");
        REQUIRE(at != std::string::npos);
        const double loss = std::stod(r.out.substr(at + 7));
        const size_t pp = r.out.find("perplexity ");
        REQUIRE(pp != std::string::npos);
        CHECK(std::stod(r.out.substr(pp + 11)) == doctest::Approx(std::exp(loss)).epsilon(1e-5));  // loss printed to 6 decimals
        // mean of ~40 fp32 cross-entropies of ~5.5 nats: measured |Δ| ≤ 2e-6 here; printed to 6 decimals
        CHECK(std::fabs(loss - e[key].get<double>()) < 1e-5);
    }
    // greedy continuation of "ab" in-process (the binary prints raw bytes, which may be unprintable)
    icl::GPT<float> m(icl::pretrained_config(d / "bytes"), icl::Device::cpu, 1);
    icl::pretrained_load(m, d / "bytes");
    icl::Rng rng(1);
    CHECK(m.sample({97, 98}, 6, 0.0, rng) == e["greedy"].get<std::vector<int>>());
    icl_test::Result r = icl_test::run("train_gpt --load-hf " + (d / "bytes") + " --prompt ab --sample 6 --temperature 0");
    CHECK(r.code == 0);
    CHECK(r.out.rfind("ab", 0) == 0);
}

TEST_CASE("pretrained: export to the Hugging Face GPT-2 layout; import → export → import is bit-exact") {
    TmpDir d;
    const std::vector<float> p0 = export_random(d / "a", small_config(), 5);
    // the layout: metadata format pt, Conv1D weights (in, out), unprefixed keys, GPT-2's config fields
    icl::SafetensorsFile f = icl::safetensors_open(d / "a/model.safetensors");
    CHECK(f.metadata().at("format") == "pt");
    CHECK(f.info("h.0.attn.c_attn.weight").shape == icl::Shape{16, 48});
    CHECK(f.info("h.1.mlp.c_proj.weight").shape == icl::Shape{64, 16});
    CHECK(f.info("wte.weight").shape == icl::Shape{29, 16});
    const nlohmann::json cfg = nlohmann::json::parse(slurp(d / "a/config.json"));
    CHECK(cfg["model_type"] == "gpt2");
    CHECK(cfg["n_embd"] == 16);
    CHECK(cfg["n_head"] == 4);
    CHECK(cfg["n_positions"] == 9);
    CHECK(cfg["activation_function"] == "gelu_new");
    // a Conv1D weight is the transpose of the engine's (out, in) matrix
    icl::GPT<float> m(icl::pretrained_config(d / "a"), icl::Device::cpu, 99);
    icl::pretrained_load(m, d / "a");
    const std::vector<float> p1 = m.s.to_host(m.s.params, 0, m.s.ptable.total);
    REQUIRE(p1.size() == p0.size());
    CHECK(std::memcmp(p1.data(), p0.data(), p0.size() * sizeof(float)) == 0);
    std::vector<float> w((size_t)16 * 48);
    f.read("h.0.attn.c_attn.weight", {16, 48}, w.data());
    const float* qkv = m.s.param("h.0.attn.qkv.w");  // (48, 16)
    CHECK(w[(size_t)3 * 48 + 40] == qkv[40 * 16 + 3]);
    // export again: the same bytes
    icl::export_hf_gpt2(m, d / "b");
    CHECK(slurp(d / "a/model.safetensors") == slurp(d / "b/model.safetensors"));
    CHECK(slurp(d / "a/config.json") == slurp(d / "b/config.json"));
    // what GPT-2 cannot hold is refused
    icl::GPTConfig relu = small_config();
    relu.act = "relu";
    icl::GPT<float> r(relu, icl::Device::cpu, 1);
    CHECK_THROWS_WITH_AS(icl::export_hf_gpt2(r, d / "c"), doctest::Contains("GPT-2's MLP is GELU"), icl::Error);
}

TEST_CASE("pretrained: every refusal is one line naming the file and the problem") {
    TmpDir d;
    export_random(d / "ok", small_config(), 3);
    auto with_config = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
        copy_dir(d / "ok", d / name);
        nlohmann::json j = nlohmann::json::parse(slurp(d / "ok/config.json"));
        edit(j);
        spit(d / name + "/config.json", j.dump());
        return d / name;
    };
    // rewrite the weights: drop, rename, reshape or add one tensor
    auto with_tensors = [&](const std::string& name, const std::function<void(std::vector<std::pair<std::string, std::vector<float>>>&,
                                                                              std::vector<icl::Shape>&)>& edit) {
        copy_dir(d / "ok", d / name);
        icl::SafetensorsFile f = icl::safetensors_open(d / "ok/model.safetensors");
        std::vector<std::pair<std::string, std::vector<float>>> t;
        std::vector<icl::Shape> shapes;
        for (const std::string& n : f.names()) {
            t.push_back({n, std::vector<float>((size_t)icl::numel(f.info(n).shape))});
            f.read(n, f.info(n).shape, t.back().second.data());
            shapes.push_back(f.info(n).shape);
        }
        edit(t, shapes);
        std::vector<icl::StEntry> e;
        for (size_t i = 0; i < t.size(); i++) e.emplace_back(t[i].first, shapes[i], t[i].second.data());
        std::filesystem::remove(d / name + "/model.safetensors");
        icl::safetensors_save(d / name + "/model.safetensors", e, {{"format", "pt"}});
        return d / name;
    };
    auto index_of = [](const std::vector<std::pair<std::string, std::vector<float>>>& t, const std::string& n) {
        for (size_t i = 0; i < t.size(); i++)
            if (t[i].first == n) return i;
        FAIL("no tensor " << n);
        return (size_t)0;
    };
    struct Case { std::string path, needle; };
    std::vector<Case> cases = {
        {with_config("bert", [](nlohmann::json& j) { j["model_type"] = "bert"; }), "model_type 'bert'; supported: gpt2"},
        {with_config("erf", [](nlohmann::json& j) { j["activation_function"] = "gelu"; }), "activation_function 'gelu'"},
        {with_config("eps", [](nlohmann::json& j) { j["layer_norm_epsilon"] = 1e-6; }), "layer_norm_epsilon' is 1e-06"},
        {with_config("heads", [](nlohmann::json& j) { j["n_head"] = 3; }), "n_embd 16 not divisible by n_head 3"},
        {with_config("nolayers", [](nlohmann::json& j) { j.erase("n_layer"); }), "no 'n_layer'"},
        {with_config("deeper", [](nlohmann::json& j) { j["n_layer"] = 3; }), "no tensor named 'h.2.ln_1.weight'"},
        {with_config("shallower", [](nlohmann::json& j) { j["n_layer"] = 1; }), "tensor 'h.1.ln_1.weight' is not part of this model"},
        {with_config("opt350m", [](nlohmann::json& j) {
             j = {{"model_type", "opt"}, {"hidden_size", 16}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"ffn_dim", 64},
                  {"vocab_size", 29}, {"max_position_embeddings", 9}, {"do_layer_norm_before", false}, {"word_embed_proj_dim", 16}};
         }), "a post-LN OPT (do_layer_norm_before false, as OPT-350m) is not supported"},
        {with_config("optproj", [](nlohmann::json& j) {
             j = {{"model_type", "opt"}, {"hidden_size", 16}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"ffn_dim", 64},
                  {"vocab_size", 29}, {"max_position_embeddings", 9}, {"word_embed_proj_dim", 8}};
         }), "word_embed_proj_dim 8 != hidden_size 16"},
        {with_tensors("missing", [&](auto& t, auto& sh) { size_t i = index_of(t, "h.1.mlp.c_fc.bias"); t.erase(t.begin() + (long)i); sh.erase(sh.begin() + (long)i); }),
         "no tensor named 'h.1.mlp.c_fc.bias'"},
        {with_tensors("shape", [&](auto& t, auto& sh) { size_t i = index_of(t, "h.0.attn.c_attn.weight"); sh[i] = {48, 16}; }),
         "tensor 'h.0.attn.c_attn.weight' has shape (48,16), expected (16,48)"},
        {with_tensors("untied", [&](auto& t, auto& sh) { t.push_back({"lm_head.weight", t[index_of(t, "wte.weight")].second}); t.back().second[5] += 1; sh.push_back({29, 16}); }),
         "'lm_head.weight' differs from the token embedding"},
    };
    // a truncated weights file, and a folder without config.json
    copy_dir(d / "ok", d / "trunc");
    const std::string st = slurp(d / "ok/model.safetensors");
    std::filesystem::remove(d / "trunc/model.safetensors");
    spit(d / "trunc/model.safetensors", st.substr(0, st.size() - 100));
    cases.push_back({d / "trunc", "model.safetensors"});
    std::filesystem::create_directories(d / "empty");
    cases.push_back({d / "empty", "config.json"});
    // llm.c: bad magic, unsupported version, truncated
    std::vector<int32_t> hdr(256, 0);
    hdr[0] = 20240326; hdr[1] = 3; hdr[2] = 9; hdr[3] = 29; hdr[4] = 2; hdr[5] = 4; hdr[6] = 16; hdr[7] = 32;
    const std::string h((const char*)hdr.data(), 1024);
    spit(d / "short.bin", h + std::string(400, '\0'));
    cases.push_back({d / "short.bin", "the header's model (L=2 C=16 Vp=32 maxT=9, fp32) needs"});
    hdr[1] = 4;
    spit(d / "v4.bin", std::string((const char*)hdr.data(), 1024));
    cases.push_back({d / "v4.bin", "llm.c file version 4; supported: 3 (fp32) and 5 (bf16)"});
    spit(d / "random.bin", std::string(2048, 'x'));
    cases.push_back({d / "random.bin", "neither a Hugging Face model directory"});
    cases.push_back({d / "nonexistent", "nonexistent"});
    for (const Case& c : cases) {
        CAPTURE(c.path);
        const std::string err = error_of([&] {
            icl::GPT<float> m(icl::pretrained_config(c.path), icl::Device::cpu, 1);
            icl::pretrained_load(m, c.path);
        });
        CAPTURE(err);
        CHECK(err.find(c.needle) != std::string::npos);
        CHECK(err.find('\n') == std::string::npos);
        CHECK(!err.empty());
    }
}

TEST_CASE("pretrained: train_gpt --load-hf trains, evaluates and exports; flags that do not fit are refused") {
    TmpDir d;
    icl::GPTConfig c = small_config();
    c.V = 256;  // a byte-level model: --task text without a tokenizer
    c.maxT = 16;
    export_random(d / "hf", c, 8);
    std::string text;
    for (int i = 0; i < 60; i++) text += "line " + std::to_string(i) + " of a small text\n";
    spit(d / "t.txt", text);
    using icl_test::run;
    icl_test::Result r = run("train_gpt --load-hf " + (d / "hf") + " --task text --data " + (d / "t.txt") +
                             " --seq 16 --steps 3 --batch 2 --sample 0 --out " + (d / "run"));
    CAPTURE(r.err);
    REQUIRE(r.code == 0);
    // the trained checkpoint: its eval through --load equals the same model exported and read back through --load-hf
    r = run("train_gpt --load " + (d / "run/model.safetensors") + " --export-hf " + (d / "back"));
    REQUIRE(r.code == 0);
    icl_test::Result a = run("train_gpt --load " + (d / "run/model.safetensors") + " --eval-text " + (d / "t.txt"));
    icl_test::Result b = run("train_gpt --load-hf " + (d / "back") + " --eval-text " + (d / "t.txt"));
    REQUIRE(a.code == 0);
    REQUIRE(b.code == 0);
    CHECK(a.out.substr(0, a.out.find("  (")) == b.out.substr(0, b.out.find("  (")));
    struct Case { std::string cmd; int code; const char* needle; };
    for (const Case& k : {Case{"train_gpt --load-hf " + (d / "hf") + " --layers 3 --task text --data " + (d / "t.txt"), 2,
                               "--layers: the architecture comes from --load-hf"},
                          Case{"train_gpt --load-hf " + (d / "hf") + " --eval-text " + (d / "t.txt") + " --steps 5", 2,
                               "--steps: --eval-text, --prompt and --export-hf train nothing"},
                          Case{"train_gpt --eval-text " + (d / "t.txt"), 2, "need a model: --load CKPT or --load-hf DIR"},
                          Case{"train_gpt --load-hf " + (d / "hf") + " --load " + (d / "run/model.safetensors") + " --steps 2", 2,
                               "--load-hf: not with --load"},
                          Case{"train_gpt --load-hf " + (d / "hf") + " --task arith --steps 2", 1, "does not fit --task arith"},
                          Case{"train_gpt --load-hf " + (d / "hf") + " --sample 5 --export-hf " + (d / "x"), 2, "--sample: only with --prompt"}}) {
        icl_test::Result x = run(k.cmd);
        CAPTURE(k.cmd);
        CAPTURE(x.err);
        CHECK(x.code == k.code);
        CHECK(x.err.find(k.needle) != std::string::npos);
    }
}

TEST_CASE("pretrained: iclca e4 --load-hf runs the approximate conversion on a GPT-2 folder, on token ids or on text") {
    TmpDir d;
    icl::GPTConfig c = small_config();
    c.V = 267;  // the 256 byte symbols, 10 merges and <|endoftext|> of the small tokenizer of the fuzz corpus
    c.maxT = 64;
    export_random(d / "hf", c, 4);
    const std::string tok = slurp(icl_test::repo_root() + "/tests/fuzz/corpus/gpt2_tokenizer/small");
    const size_t nul = tok.find('\0');
    REQUIRE(nul != std::string::npos);
    spit(d / "hf/vocab.json", tok.substr(0, nul));
    spit(d / "hf/merges.txt", tok.substr(nul + 1));
    const icl::GPT2Tokenizer t = icl::GPT2Tokenizer::load(d / "hf");
    REQUIRE(t.size() == 267);
    const std::string prompt = "Bill Gates was born at Seattle, Washington.", input = " He is the CEO of";
    using icl_test::run;
    icl_test::Result r = run("iclca e4 --load-hf " + (d / "hf") + " --prompt '" + prompt + "' --input '" + input +
                             "' --features 16,256 --trials 2 --out " + (d / "e4"));
    CAPTURE(r.err);
    REQUIRE(r.code == 0);
    const nlohmann::json j = nlohmann::json::parse(slurp(d / "e4/summary.json"));
    CHECK(j["text"] == true);
    CHECK(j["M"] == (int)t.encode(prompt).size());
    CHECK(j["N"] == (int)t.encode(input).size());
    CHECK(j["source"] == d / "hf");
    CHECK(j["rows"].size() == 2);
    for (auto& row : j["rows"]) CHECK(std::isfinite(row["relerr_converted_offset"].get<double>()));
    CHECK(r.out.find("E4 ICLAA on a softmax GPT (" + (d / "hf") + "; L=2 C=16 NH=4 hs=4)") != std::string::npos);
    // random token ids from the model's vocabulary, as without --load-hf
    r = run("iclca e4 --load-hf " + (d / "hf") + " --M 10 --N 5 --features 16 --trials 2 --out " + (d / "e4b"));
    CHECK(r.code == 0);
    struct Case { std::string cmd; const char* needle; };
    for (const Case& k : {Case{"iclca e4 --load-hf " + (d / "hf") + " --width 32", "--width: the GPT comes from --load-hf"},
                          Case{"iclca e4 --load-hf " + (d / "hf") + " --prompt abc", "--prompt and --input: e4 needs both"},
                          Case{"iclca e4 --prompt abc --input d", "--prompt: e4 takes text only with --load-hf"},
                          Case{"iclca e1 --load-hf " + (d / "hf"), "--load-hf: iclca e1 does not use it (only e4)"},
                          Case{"iclca e4 --load-hf " + (d / "hf") + " --M 60 --N 10", "exceeds the GPT's max-T 64"}}) {
        icl_test::Result x = run(k.cmd);
        CAPTURE(k.cmd);
        CAPTURE(x.err);
        CHECK(x.code == 2);
        CHECK(x.err.find(k.needle) != std::string::npos);
    }
}

TEST_CASE("pretrained: tint lm with a GPT-2 folder as the auxiliary model (its tokens, its first --seq positions)") {
    TmpDir d;
    gpt2_with_small_tokenizer(d / "hf", 32, 6);
    icl_test::Result r = icl_test::run("tint lm --load-hf " + (d / "hf") + " --seq 16 --S 4 --H-sim 5 --data " + icl_test::repo_root() +
                                       "/README.md --windows 4 --dev-windows 2 --budgets 1:1 --etas 1e-2 --fracs 0.5 --out " + (d / "lm"));
    CAPTURE(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("GPT-2 tokens") != std::string::npos);
    // TinT's simulated update = exact SGD on its trainable set (oracle B), on the imported model's test windows
    std::map<std::string, double> test_ppl;
    for (const std::vector<std::string>& f : csv_rows(d / "lm/table.csv"))
        if (f[0] != "method" && f.size() >= 7 && !f[6].empty()) test_ppl[f[0]] = std::stod(f[6]);
    REQUIRE(test_ppl.count("tint"));
    REQUIRE(test_ppl.count("dyn"));
    double vanilla = 0;
    {
        const size_t at = r.err.find("(vanilla ");
        REQUIRE(at != std::string::npos);
        vanilla = std::stod(r.err.substr(at + 9));
    }
    // TinT's backward is approximate (finite differences of step ε = 1e-3 through the layer norms and GELU, spec §5):
    // measured |TinT − exact SGD| = 0.07% of the update's own effect on the perplexity (0.0043 of 6.64); 1% allowed
    const double effect = std::fabs(test_ppl["dyn"] - vanilla);
    CHECK(effect > 0.1);
    CHECK(std::fabs(test_ppl["tint"] - test_ppl["dyn"]) < 0.01 * effect);
}

TEST_CASE("pretrained: tint fewshot on a labelled text dataset: the paper's template and label tokens = the GPT on the text built here") {
    TmpDir d;
    gpt2_with_small_tokenizer(d / "hf", 160, 7);
    const icl::GPT2Tokenizer tok = icl::GPT2Tokenizer::load(d / "hf");
    // 24 examples (14 of class 0, 10 of class 1), "LABEL<TAB>TEXT"; the label words " a" and " the" are single tokens of the small tokenizer
    const char* words[2][4] = {{"dull", "cold", "bad", "slow"}, {"warm", "fine", "well", "good"}};
    std::vector<std::pair<int, std::string>> data;
    std::string tsv = "\n";  // an empty first line: skipped, the lines still count
    for (int i = 0; i < 24; i++) {
        const int c = (i * 7 + i / 5) % 2;
        data.push_back({c, std::string(words[c][i % 4]) + " film " + std::to_string(i)});
        tsv += std::to_string(c) + "\t" + data.back().second + (i % 3 ? "\n" : "\r\n");
    }
    spit(d / "data.tsv", tsv);
    const std::string base = "tint fewshot --load-hf " + (d / "hf") + " --dataset " + (d / "data.tsv") +
                             " --S 4 --H-sim 5 --budgets 1:1 --etas 1e-2 --dev-episodes 2";
    const std::string words_a_the = " --label-words a,the";
    icl_test::Result r = icl_test::run(base + words_a_the + " --demos 3 --episodes 6 --out " + (d / "fs"));
    CAPTURE(r.err);
    REQUIRE(r.code == 0);
    const nlohmann::json j = nlohmann::json::parse(slurp(d / "fs/summary.json"));
    const nlohmann::json& tt = j["text_task"];
    const std::vector<int> lab = {tok.encode(" a").at(0), tok.encode(" the").at(0)};
    CHECK(tt["label_tokens"] == nlohmann::json(lab));
    CHECK(tt["template"] == "sst2");
    const std::vector<int> demo_lines = tt["demo_lines"], test_lines = tt["test_lines"], dev_lines = tt["dev_lines"];
    REQUIRE(demo_lines.size() == 3);
    REQUIRE(test_lines.size() == 6);
    // class-balanced: demonstrations of classes 0, 1, 0 in some order; the i-th eval example of class i % 2; all distinct
    auto example = [&](int line) { return data.at(line - 2); };  // line 1 is the empty one
    int demo_c1 = 0;
    for (int l : demo_lines) demo_c1 += example(l).first;
    CHECK(demo_c1 == 1);
    std::vector<int> all = demo_lines;
    all.insert(all.end(), dev_lines.begin(), dev_lines.end());
    all.insert(all.end(), test_lines.begin(), test_lines.end());
    for (size_t i = 0; i < test_lines.size(); i++) CHECK(example(test_lines[i]).first == (int)(2 + i) % 2);
    std::sort(all.begin(), all.end());
    CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
    // The label words' logits the run read, against the engine's GPT on the same text built here from the template:
    //   Single, before the update: the eval prompt alone;  Multi: demos "Review: …\nSentiment:" + label, "\n\n", …
    // (the calibration prompt "\nSentiment:" in place of the eval prompt for the cf_ columns)
    icl::GPT<float> m(icl::pretrained_config(d / "hf"), icl::Device::cpu, 1);
    icl::pretrained_load(m, d / "hf");
    auto last_scores = [&](const std::vector<int>& ids) {
        icl::Batch bt;
        bt.B = 1;
        bt.T = (int)ids.size();
        bt.tokens = ids;
        m.forward(bt);
        const std::vector<float> z = m.outputs();
        const float* last = z.data() + (size_t)(bt.T - 1) * 267;
        return std::vector<double>{last[lab[0]], last[lab[1]]};
    };
    auto prompt = [&](const std::string& text) { return tok.encode("Review: " + text + "\nSentiment:"); };
    std::vector<int> demos;
    for (int l : demo_lines) {
        std::vector<int> p = prompt(example(l).second), sep = tok.encode("\n\n");
        demos.insert(demos.end(), p.begin(), p.end());
        demos.push_back(lab[example(l).first]);
        demos.insert(demos.end(), sep.begin(), sep.end());
    }
    const std::vector<int> cf = tok.encode("\nSentiment:");
    const std::vector<std::vector<std::string>> rows = csv_rows(d / "fs/episodes.csv");
    REQUIRE(rows.size() > 1);
    const std::vector<std::string>& h = rows[0];
    auto col = [&](const char* name) { return (size_t)(std::find(h.begin(), h.end(), name) - h.begin()); };
    int checked = 0, right = 0;
    double worst = 0;
    for (size_t i = 1; i < rows.size(); i++) {
        const std::vector<std::string>& f = rows[i];
        REQUIRE(f.size() == h.size());
        const int ep = std::stoi(f[col("episode")]), line = std::stoi(f[col("line")]);
        CHECK(line == test_lines.at(ep));
        CHECK(std::stoi(f[col("class")]) == example(line).first);
        const bool single = f[col("format")] == "single";
        std::vector<int> ids = single ? std::vector<int>{} : demos, cfi = ids;
        const std::vector<int> p = prompt(example(line).second);
        ids.insert(ids.end(), p.begin(), p.end());
        cfi.insert(cfi.end(), cf.begin(), cf.end());
        const std::vector<double> want = last_scores(ids), want_cf = last_scores(cfi);
        for (int k = 0; k < 2; k++) {
            worst = std::max(worst, std::fabs(std::stod(f[col(k ? "before_1" : "before_0")]) - want[k]));
            worst = std::max(worst, std::fabs(std::stod(f[col(k ? "cf_before_1" : "cf_before_0")]) - want_cf[k]));
        }
        if (f[0] == "tint" && single && f[col("loss")] == "label" && f[col("k")] == "2") right += (want[1] > want[0]) == (example(line).first == 1);
        checked++;
    }
    CHECK(checked == 9 * 6);  // 9 arms × 6 test examples
    // the simulator's forward (TinT arms) and the GPT's (dynamic evaluation) in fp32 against the GPT here: measured
    // 1.5e-8 (logits of size ~1); 1e-6 leaves room for another build's summation order (fp32 ε = 6e-8 per operation)
    CHECK(worst < 1e-6);
    CHECK(j["zero_shot"].get<double>() == doctest::Approx(right / 6.0).epsilon(1e-12));
    CHECK(r.out.find("template sst2, 2 classes") != std::string::npos);
    // every refusal is one line
    spit(d / "notab.tsv", "0 no tab here\n");
    spit(d / "badlabel.tsv", "0\tfine\n2\tthree classes?\n");
    struct Case { std::string cmd; int code; const char* needle; };
    for (const Case& k : {Case{"tint fewshot --load-hf " + (d / "hf"), 2, "--load-hf: tint fewshot with a pretrained model needs --dataset FILE"},
                          Case{"tint fewshot --dataset " + (d / "data.tsv"), 2, "--dataset: the text task needs a pretrained model"},
                          Case{"tint fewshot --template agnews", 2, "--template: only with --dataset"},
                          Case{base + words_a_the + " --labels flip", 2, "--labels: only for the synthetic task"},
                          Case{base + " --label-words ab,the", 2, "the label word ' ab' is 2 tokens of this tokenizer"},
                          Case{base + " --template imdb", 2, "--template: 'imdb' is not one of sst2, agnews, subj"},
                          Case{base + " --label-words a", 2, "--label-words: give at least two words"},
                          Case{base + " --template agnews", 2, "the label word ' World' is"},
                          Case{base + words_a_the + " --demos 12 --episodes 10", 1, "data.tsv: not enough examples of class 1 for 2 dev + 10 test examples"},
                          Case{base + words_a_the + " --demos 22", 1, "data.tsv: not enough examples of class 1 for 22 demonstrations"},
                          Case{base + words_a_the + " --demos 6 --episodes 2", 2, "a Multi-format episode has"},
                          Case{base + words_a_the + " --eval-data " + (d / "notab.tsv"), 1, "notab.tsv:1: expected LABEL<TAB>TEXT"},
                          Case{base + words_a_the + " --eval-data " + (d / "badlabel.tsv"), 1, "badlabel.tsv:2: label '2' is not a class index 0..1"},
                          Case{base + words_a_the + " --eval-data " + (d / "missing.tsv"), 1, "missing.tsv"}}) {
        icl_test::Result x = icl_test::run(k.cmd);
        CAPTURE(k.cmd);
        CAPTURE(x.err);
        CHECK(x.code == k.code);
        CHECK(x.err.find(k.needle) != std::string::npos);
    }
}

}  // TEST_SUITE
