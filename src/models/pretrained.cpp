// pretrained.cpp — Hugging Face GPT-2 / OPT and llm.c checkpoints into the engine's GPT, and GPT out as Hugging Face
// GPT-2. See pretrained.h for the formats.
#include "models/pretrained.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/common.h"
#include "engine/fileio.h"
#include "engine/run.h"
#include "engine/safetensors.h"
#include "models/attn_mod.h"

namespace icl {

namespace {

bool is_dir(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

nlohmann::json read_config(const std::string& dir) {
    const std::string p = dir + "/config.json";
    const std::string text = read_file(p, kMaxTextFileBytes, "model config");
    try {
        nlohmann::json j = nlohmann::json::parse(text);
        if (!j.is_object()) fail(p + ": not a JSON object");
        return j;
    } catch (const nlohmann::json::exception& e) {
        fail(p + ": not valid JSON (" + std::string(e.what()).substr(0, 120) + ")");
    }
}

// A config field: an integer in [lo, hi] (missing: `dflt`, or refused when there is none).
int cfg_int(const nlohmann::json& j, const std::string& dir, const char* key, int lo, int hi, const int* dflt = nullptr) {
    if (!j.contains(key) || j[key].is_null()) {
        if (dflt) return *dflt;
        fail(strfmt("%s/config.json: no '%s'", dir.c_str(), key));
    }
    const nlohmann::json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
        fail(strfmt("%s/config.json: '%s' must be an integer in [%d, %d], got %s", dir.c_str(), key, lo, hi, v.dump().substr(0, 40).c_str()));
    return (int)v.get<int64_t>();
}
std::string cfg_str(const nlohmann::json& j, const std::string& dir, const char* key, const std::string& dflt) {
    if (!j.contains(key) || j[key].is_null()) return dflt;
    if (!j[key].is_string()) fail(strfmt("%s/config.json: '%s' is not a string", dir.c_str(), key));
    return j[key].get<std::string>();
}
bool cfg_bool(const nlohmann::json& j, const std::string& dir, const char* key, bool dflt) {
    if (!j.contains(key) || j[key].is_null()) return dflt;
    if (!j[key].is_boolean()) fail(strfmt("%s/config.json: '%s' is not true or false", dir.c_str(), key));
    return j[key].get<bool>();
}
// The engine's layer norms use ε = 1e-5 (layers/layernorm.h); a model trained with another ε is refused.
void require_ln_eps(const nlohmann::json& j, const std::string& dir, const char* key) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number() || std::fabs(j[key].get<double>() - 1e-5) > 1e-12)
        fail(strfmt("%s/config.json: '%s' is %s; the engine's layer norm uses 1e-5", dir.c_str(), key, j[key].dump().substr(0, 40).c_str()));
}

// ---- llm.c's .bin ---------------------------------------------------------------------------------------
// header: int32[256]: [0] magic 20240326, [1] version (3: fp32, 5: bf16), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp
struct LlmcHeader { int version, maxT, V, L, NH, C, Vp; };
constexpr int kLlmcMagic = 20240326;

LlmcHeader llmc_header(const FileFd& f, const std::string& path) {
    if (f.size < 256 * 4) fail(strfmt("%s: %llu bytes, shorter than llm.c's 1024-byte header", path.c_str(), (unsigned long long)f.size));
    int32_t h[256];
    f.pread_exact(h, sizeof h, 0, path);
    if (h[0] != kLlmcMagic) fail(strfmt("%s: not an llm.c model file (magic %d, expected %d)", path.c_str(), h[0], kLlmcMagic));
    if (h[1] != 3 && h[1] != 5) fail(strfmt("%s: llm.c file version %d; supported: 3 (fp32) and 5 (bf16)", path.c_str(), h[1]));
    LlmcHeader H{h[1], h[2], h[3], h[4], h[5], h[6], h[7]};
    auto in = [&](int v, int lo, int hi, const char* what) {
        if (v < lo || v > hi) fail(strfmt("%s: header %s = %d, outside [%d, %d]", path.c_str(), what, v, lo, hi));
    };
    in(H.maxT, 1, 1 << 20, "max_seq_len");
    in(H.V, 1, 1 << 24, "vocab_size");
    in(H.L, 1, 1 << 12, "num_layers");
    in(H.NH, 1, 1 << 12, "num_heads");
    in(H.C, 1, 1 << 16, "channels");
    in(H.Vp, H.V, 1 << 24, "padded_vocab_size");
    if (H.C % H.NH) fail(strfmt("%s: channels %d not divisible by num_heads %d", path.c_str(), H.C, H.NH));
    // the parameter count in 64 bits against the file size before anything is allocated
    const uint64_t C = H.C, L = H.L;
    const uint64_t n = (uint64_t)H.Vp * C + (uint64_t)H.maxT * C + L * (12 * C * C + 13 * C) + 2 * C;
    const uint64_t bytes = 1024 + n * (H.version == 3 ? 4 : 2);
    if (f.size != bytes)
        fail(strfmt("%s: %llu bytes; the header's model (L=%d C=%d Vp=%d maxT=%d, %s) needs %llu", path.c_str(), (unsigned long long)f.size,
                    H.L, H.C, H.Vp, H.maxT, H.version == 3 ? "fp32" : "bf16", (unsigned long long)bytes));
    return H;
}

GPTConfig config_of(const LlmcHeader& H) {
    GPTConfig c;
    c.L = H.L; c.C = H.C; c.NH = H.NH; c.V = H.V; c.maxT = H.maxT;
    return c;
}

// ---- Hugging Face ------------------------------------------------------------------------------------------

GPTConfig hf_gpt2_config(const nlohmann::json& j, const std::string& dir) {
    GPTConfig c;
    c.C = cfg_int(j, dir, "n_embd", 1, 1 << 16);
    c.L = cfg_int(j, dir, "n_layer", 1, 1 << 12);
    c.NH = cfg_int(j, dir, "n_head", 1, 1 << 12);
    c.V = cfg_int(j, dir, "vocab_size", 1, 1 << 24);
    c.maxT = cfg_int(j, dir, "n_positions", 1, 1 << 20);
    if (c.C % c.NH) fail(strfmt("%s/config.json: n_embd %d not divisible by n_head %d", dir.c_str(), c.C, c.NH));
    const std::string act = cfg_str(j, dir, "activation_function", "gelu_new");
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
        fail(dir + "/config.json: activation_function '" + act + "'; the engine's GELU is GPT-2's tanh form (gelu_new)");
    const int four_c = 4 * c.C;
    if (cfg_int(j, dir, "n_inner", 1, 1 << 20, &four_c) != four_c) fail(dir + "/config.json: n_inner must be 4·n_embd (the engine's MLP)");
    require_ln_eps(j, dir, "layer_norm_epsilon");
    if (!cfg_bool(j, dir, "scale_attn_weights", true)) fail(dir + "/config.json: scale_attn_weights false is not supported");
    if (cfg_bool(j, dir, "scale_attn_by_inverse_layer_idx", false))
        fail(dir + "/config.json: scale_attn_by_inverse_layer_idx is not supported");
    if (!cfg_bool(j, dir, "tie_word_embeddings", true)) fail(dir + "/config.json: an untied LM head is not supported (the engine ties it to wte)");
    return c;
}

GPTConfig hf_opt_config(const nlohmann::json& j, const std::string& dir) {
    GPTConfig c;
    c.C = cfg_int(j, dir, "hidden_size", 1, 1 << 16);
    c.L = cfg_int(j, dir, "num_hidden_layers", 1, 1 << 12);
    c.NH = cfg_int(j, dir, "num_attention_heads", 1, 1 << 12);
    c.V = cfg_int(j, dir, "vocab_size", 1, 1 << 24);
    c.maxT = cfg_int(j, dir, "max_position_embeddings", 1, 1 << 20);
    c.act = "relu";
    if (c.C % c.NH) fail(strfmt("%s/config.json: hidden_size %d not divisible by num_attention_heads %d", dir.c_str(), c.C, c.NH));
    if (!cfg_bool(j, dir, "do_layer_norm_before", true))
        fail(dir + "/config.json: a post-LN OPT (do_layer_norm_before false, as OPT-350m) is not supported; the engine's GPT is pre-LN");
    const int wep = cfg_int(j, dir, "word_embed_proj_dim", 1, 1 << 16, &c.C);
    if (wep != c.C)
        fail(strfmt("%s/config.json: word_embed_proj_dim %d != hidden_size %d (projected embeddings, as OPT-350m) is not supported",
                    dir.c_str(), wep, c.C));
    if (cfg_int(j, dir, "ffn_dim", 1, 1 << 20) != 4 * c.C) fail(dir + "/config.json: ffn_dim must be 4·hidden_size (the engine's MLP)");
    const std::string act = cfg_str(j, dir, "activation_function", "relu");
    if (act != "relu") fail(dir + "/config.json: activation_function '" + act + "'; OPT's is relu");
    if (!cfg_bool(j, dir, "enable_bias", true)) fail(dir + "/config.json: enable_bias false is not supported");
    if (!cfg_bool(j, dir, "layer_norm_elementwise_affine", true)) fail(dir + "/config.json: layer norms without gains are not supported");
    if (cfg_bool(j, dir, "_remove_final_layer_norm", false)) fail(dir + "/config.json: _remove_final_layer_norm is not supported");
    if (!cfg_bool(j, dir, "tie_word_embeddings", true)) fail(dir + "/config.json: an untied LM head is not supported (the engine ties it to wte)");
    return c;
}

std::string model_type(const nlohmann::json& j, const std::string& dir) {
    const std::string t = cfg_str(j, dir, "model_type", "");
    if (t != "gpt2" && t != "opt")
        fail(dir + "/config.json: model_type '" + t + "'; supported: gpt2 (GPT-2) and opt (OPT, pre-LN)");
    return t;
}

// The source's tensors by engine name: each entry fills one engine parameter from the file.
struct Filler {
    std::string src;                                   // the file's key(s), for messages
    std::function<void(const SafetensorsFile&, float*)> fill;
};

// Keys of a Hugging Face file: the model's own (with the detected prefix), and those it may hold but we do not read.
std::string detect_prefix(const SafetensorsFile& f, const std::string& probe, std::initializer_list<const char*> prefixes) {
    for (const char* p : prefixes)
        if (f.has(std::string(p) + probe)) return p;
    fail(f.path() + ": no tensor '" + probe + "' (with any of the expected key prefixes): not this model's weights");
}

void read_t(const SafetensorsFile& f, const std::string& name, int64_t rows, int64_t cols, float* dst) {
    // a (rows, cols) tensor stored transposed as (cols, rows): read, then transpose into dst (rows, cols)
    std::vector<float> tmp((size_t)(rows * cols));
    f.read(name, {cols, rows}, tmp.data());
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[r * cols + c] = tmp[(size_t)(c * rows + r)];
}

std::map<std::string, Filler> hf_gpt2_fillers(const GPTConfig& c, const SafetensorsFile& f, std::string& pre) {
    pre = detect_prefix(f, "wte.weight", {"", "transformer."});
    const int64_t C = c.C;
    std::map<std::string, Filler> m;
    auto direct = [&](const std::string& eng, const std::string& key, Shape sh) {
        m[eng] = {pre + key, [=](const SafetensorsFile& f, float* d) { f.read(pre + key, sh, d); }};
    };
    auto conv1d = [&](const std::string& eng, const std::string& key, int64_t out, int64_t in) {  // Conv1D: (in, out)
        m[eng] = {pre + key, [=](const SafetensorsFile& f, float* d) { read_t(f, pre + key, out, in, d); }};
    };
    direct("wte", "wte.weight", {c.V, C});
    direct("wpe", "wpe.weight", {c.maxT, C});
    for (int l = 0; l < c.L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        direct(h + "ln1.w", h + "ln_1.weight", {C});
        direct(h + "ln1.b", h + "ln_1.bias", {C});
        conv1d(h + "attn.qkv.w", h + "attn.c_attn.weight", 3 * C, C);
        direct(h + "attn.qkv.b", h + "attn.c_attn.bias", {3 * C});
        conv1d(h + "attn.proj.w", h + "attn.c_proj.weight", C, C);
        direct(h + "attn.proj.b", h + "attn.c_proj.bias", {C});
        direct(h + "ln2.w", h + "ln_2.weight", {C});
        direct(h + "ln2.b", h + "ln_2.bias", {C});
        conv1d(h + "mlp.fc.w", h + "mlp.c_fc.weight", 4 * C, C);
        direct(h + "mlp.fc.b", h + "mlp.c_fc.bias", {4 * C});
        conv1d(h + "mlp.proj.w", h + "mlp.c_proj.weight", C, 4 * C);
        direct(h + "mlp.proj.b", h + "mlp.c_proj.bias", {C});
    }
    direct("lnf.w", "ln_f.weight", {C});
    direct("lnf.b", "ln_f.bias", {C});
    return m;
}

std::map<std::string, Filler> hf_opt_fillers(const GPTConfig& c, const SafetensorsFile& f, std::string& pre) {
    pre = detect_prefix(f, "embed_tokens.weight", {"model.decoder.", "decoder.", ""});
    const int64_t C = c.C;
    std::map<std::string, Filler> m;
    auto direct = [&](const std::string& eng, const std::string& key, Shape sh) {
        m[eng] = {pre + key, [=](const SafetensorsFile& f, float* d) { f.read(pre + key, sh, d); }};
    };
    direct("wte", "embed_tokens.weight", {c.V, C});
    // OPT's learned positions: position p is row p + 2 of embed_positions (max_position_embeddings + 2, C)
    m["wpe"] = {pre + "embed_positions.weight", [=](const SafetensorsFile& f, float* d) {
                    std::vector<float> all((size_t)((c.maxT + 2) * C));
                    f.read(pre + "embed_positions.weight", {c.maxT + 2, C}, all.data());
                    std::memcpy(d, all.data() + 2 * C, sizeof(float) * (size_t)(c.maxT * C));
                }};
    for (int l = 0; l < c.L; l++) {
        const std::string h = "h." + std::to_string(l) + ".", o = "layers." + std::to_string(l) + ".";
        direct(h + "ln1.w", o + "self_attn_layer_norm.weight", {C});
        direct(h + "ln1.b", o + "self_attn_layer_norm.bias", {C});
        // qkv (3C, C) = [q_proj; k_proj; v_proj], each (out, in) as the engine stores it; the bias likewise
        m[h + "attn.qkv.w"] = {pre + o + "self_attn.{q,k,v}_proj.weight", [=](const SafetensorsFile& f, float* d) {
                                   for (int i = 0; i < 3; i++)
                                       f.read(pre + o + "self_attn." + "qkv"[i] + "_proj.weight", {C, C}, d + (size_t)(i * C * C));
                               }};
        m[h + "attn.qkv.b"] = {pre + o + "self_attn.{q,k,v}_proj.bias", [=](const SafetensorsFile& f, float* d) {
                                   for (int i = 0; i < 3; i++) f.read(pre + o + "self_attn." + "qkv"[i] + "_proj.bias", {C}, d + i * C);
                               }};
        direct(h + "attn.proj.w", o + "self_attn.out_proj.weight", {C, C});
        direct(h + "attn.proj.b", o + "self_attn.out_proj.bias", {C});
        direct(h + "ln2.w", o + "final_layer_norm.weight", {C});
        direct(h + "ln2.b", o + "final_layer_norm.bias", {C});
        direct(h + "mlp.fc.w", o + "fc1.weight", {4 * C, C});
        direct(h + "mlp.fc.b", o + "fc1.bias", {4 * C});
        direct(h + "mlp.proj.w", o + "fc2.weight", {C, 4 * C});
        direct(h + "mlp.proj.b", o + "fc2.bias", {C});
    }
    direct("lnf.w", "final_layer_norm.weight", {C});
    direct("lnf.b", "final_layer_norm.bias", {C});
    return m;
}

// Every key of the file is read, a known buffer, or a tied head equal to wte; anything else is refused (a file with
// more layers than its config, or another model's weights).
void check_no_strays(const SafetensorsFile& f, const std::map<std::string, Filler>& fillers, const std::string& pre,
                     const std::vector<std::string>& tied_heads, const std::vector<float>& wte) {
    std::set<std::string> used;
    for (auto& kv : fillers) {
        const std::string& s = kv.second.src;
        const size_t brace = s.find('{');
        if (brace == std::string::npos) { used.insert(s); continue; }
        for (char x : std::string("qkv")) used.insert(s.substr(0, brace) + x + s.substr(s.find('}') + 1));
    }
    for (const std::string& n : f.names()) {
        if (used.count(n)) continue;
        const bool buffer = n.size() > 9 && (n.compare(n.size() - 9, 9, "attn.bias") == 0 ||
                                             (n.size() > 16 && n.compare(n.size() - 16, 16, "attn.masked_bias") == 0));
        if (buffer) continue;
        bool head = false;
        for (const std::string& t : tied_heads) head |= n == t;
        if (head) {
            const StTensorInfo& i = f.info(n);
            std::vector<float> w((size_t)numel(i.shape));
            if (w.size() != wte.size()) fail(f.path() + ": '" + n + "' is not shaped as the token embedding; an untied head is not supported");
            f.read(n, i.shape, w.data());
            if (std::memcmp(w.data(), wte.data(), w.size() * sizeof(float)) != 0)
                fail(f.path() + ": '" + n + "' differs from the token embedding; an untied head is not supported (the engine ties it)");
            continue;
        }
        fail(f.path() + ": tensor '" + n + "' is not part of this model (prefix '" + pre + "'; does config.json match the weights?)");
    }
}

// The model's parameters in registry order, from `path`, in float (the files hold F32, F16 or BF16).
std::vector<float> pretrained_params(const GPTConfig& c, const std::string& path) {
    const TensorTable table = gpt_parameters(c);
    std::vector<float> p(table.total);
    const std::string fmt = pretrained_format(path);
    if (fmt == "llmc") {
        FileFd fd = open_for_reading(path, kMaxDataFileBytes, "llm.c model");
        const LlmcHeader H = llmc_header(fd, path);
        const int64_t C = H.C, L = H.L;
        uint64_t at = 1024;
        const size_t es = H.version == 3 ? 4 : 2;
        auto next = [&](int64_t n) {  // the next n values of the file, as float
            std::vector<float> v((size_t)n);
            if (es == 4) {
                fd.pread_exact(v.data(), (size_t)n * 4, at, path);
            } else {
                std::vector<uint16_t> b((size_t)n);
                fd.pread_exact(b.data(), (size_t)n * 2, at, path);
                for (size_t i = 0; i < b.size(); i++) v[i] = bfloat16_to_float(b[i]);
            }
            at += (uint64_t)n * es;
            return v;
        };
        std::vector<float> wte = next(H.Vp * C);
        std::memcpy(p.data() + table.offset("wte"), wte.data(), sizeof(float) * (size_t)(H.V * C));  // padding rows dropped
        std::vector<float> wpe = next((int64_t)H.maxT * C);
        std::memcpy(p.data() + table.offset("wpe"), wpe.data(), sizeof(float) * wpe.size());
        // each per-layer tensor is stored for all L layers at once, in this order
        const std::pair<const char*, int64_t> stacked[] = {{"ln1.w", C}, {"ln1.b", C}, {"attn.qkv.w", 3 * C * C}, {"attn.qkv.b", 3 * C},
                                                           {"attn.proj.w", C * C}, {"attn.proj.b", C}, {"ln2.w", C}, {"ln2.b", C},
                                                           {"mlp.fc.w", 4 * C * C}, {"mlp.fc.b", 4 * C}, {"mlp.proj.w", 4 * C * C},
                                                           {"mlp.proj.b", C}};
        for (auto& s : stacked) {
            std::vector<float> all = next(L * s.second);
            for (int64_t l = 0; l < L; l++)
                std::memcpy(p.data() + table.offset("h." + std::to_string(l) + "." + s.first), all.data() + l * s.second,
                            sizeof(float) * (size_t)s.second);
        }
        std::vector<float> w = next(C), b = next(C);
        std::memcpy(p.data() + table.offset("lnf.w"), w.data(), sizeof(float) * C);
        std::memcpy(p.data() + table.offset("lnf.b"), b.data(), sizeof(float) * C);
        ICL_ASSERT(at == fd.size);
        return p;
    }
    struct stat st;
    if (stat((path + "/model.safetensors").c_str(), &st) != 0 && stat((path + "/pytorch_model.bin").c_str(), &st) == 0)
        fail(path + ": only pytorch_model.bin; the engine reads model.safetensors (in Python: "
                    "AutoModelForCausalLM.from_pretrained(DIR).save_pretrained(DIR, safe_serialization=True))");
    SafetensorsFile f = safetensors_open(path + "/model.safetensors");
    std::string pre;
    std::map<std::string, Filler> fillers = fmt == "hf-gpt2" ? hf_gpt2_fillers(c, f, pre) : hf_opt_fillers(c, f, pre);
    for (const TensorSpec& s : table.specs) {
        auto it = fillers.find(s.name);
        ICL_ASSERT_MSG(it != fillers.end(), "no source for " + s.name);
        it->second.fill(f, p.data() + table.offset(s.name));
    }
    const std::vector<float> wte(p.begin() + (long)table.offset("wte"), p.begin() + (long)(table.offset("wte") + (size_t)c.V * c.C));
    check_no_strays(f, fillers, pre, {"lm_head.weight", pre + "lm_head.weight"}, wte);
    return p;
}

}  // namespace

static GPTConfig file_config(const std::string& path);

std::string pretrained_format(const std::string& path) {
    if (is_dir(path)) {
        const nlohmann::json j = read_config(path);
        const std::string t = model_type(j, path);
        return t == "gpt2" ? "hf-gpt2" : "hf-opt";
    }
    FileFd fd = open_for_reading(path, kMaxDataFileBytes, "pretrained model");
    int32_t magic = 0;
    if (fd.size >= 4) fd.pread_exact(&magic, 4, 0, path);
    if (magic != kLlmcMagic)
        fail(path + ": neither a Hugging Face model directory (config.json + model.safetensors) nor an llm.c .bin (magic 20240326)");
    return "llmc";
}

GPTConfig pretrained_config(const std::string& path, int max_T) {
    GPTConfig c = file_config(path);
    if (max_T > c.maxT) fail_usage(strfmt("--seq: %d positions; the model at %s has %d", max_T, path.c_str(), c.maxT));
    if (max_T > 0) c.maxT = max_T;
    return c;
}

static GPTConfig file_config(const std::string& path) {
    const std::string fmt = pretrained_format(path);
    GPTConfig c;
    if (fmt == "llmc") {
        FileFd fd = open_for_reading(path, kMaxDataFileBytes, "llm.c model");
        c = config_of(llmc_header(fd, path));
    } else {
        const nlohmann::json j = read_config(path);
        c = fmt == "hf-gpt2" ? hf_gpt2_config(j, path) : hf_opt_config(j, path);
    }
    c.validate();
    return c;
}

template <typename real>
void pretrained_load(GPT<real>& m, const std::string& path) {
    const GPTConfig file = file_config(path);
    ICL_ASSERT_MSG(m.cfg.maxT <= file.maxT && m.cfg.L == file.L && m.cfg.C == file.C && m.cfg.V == file.V, "model not built from pretrained_config");
    const std::vector<float> p = pretrained_params(file, path);
    // a shorter context keeps the first maxT position rows; every other tensor is the file's
    const TensorTable from = gpt_parameters(file);
    std::vector<real> r(m.s.ptable.total);
    for (size_t i = 0; i < m.s.ptable.size(); i++) {
        const TensorSpec& t = m.s.ptable.specs[i];
        const float* src = p.data() + from.offset(t.name);
        std::copy(src, src + numel(t.shape), r.begin() + (long)m.s.ptable.offsets[i]);
    }
    m.s.upload(m.s.params, 0, r.data(), r.size());
}

void export_hf_gpt2(GPT<float>& m, const std::string& dir) {
    const GPTConfig& c = m.cfg;
    if (c.d_in > 0 || c.d_out > 0) fail_usage("--export-hf: a vector-input or vector-output model has no GPT-2 layout");
    if (c.act != "gelu") fail_usage("--export-hf: GPT-2's MLP is GELU; this model's is " + c.act);
    if (attn_mods_configured(c.mod)) fail_usage("--export-hf: GPT-2 has no attention modifications; this model has " + attn_mods_describe(c.mod));
    const std::vector<float> p = m.s.to_host(m.s.params, 0, m.s.ptable.total);
    const TensorTable& t = m.s.ptable;
    auto at = [&](const std::string& n) { return p.data() + t.offset(n); };
    std::vector<std::vector<float>> keep;  // transposed copies, alive until the save
    std::vector<StEntry> e;
    auto direct = [&](const std::string& key, const std::string& eng) { e.emplace_back(key, t.spec(eng).shape, at(eng)); };
    auto conv1d = [&](const std::string& key, const std::string& eng) {  // engine (out, in) -> Conv1D (in, out)
        const int64_t out = t.spec(eng).shape[0], in = t.spec(eng).shape[1];
        keep.emplace_back((size_t)(out * in));
        std::vector<float>& w = keep.back();
        const float* s = at(eng);
        for (int64_t o = 0; o < out; o++)
            for (int64_t i = 0; i < in; i++) w[(size_t)(i * out + o)] = s[o * in + i];
        e.emplace_back(key, Shape{in, out}, w.data());
    };
    keep.reserve((size_t)c.L * 4);
    direct("wte.weight", "wte");
    direct("wpe.weight", "wpe");
    for (int l = 0; l < c.L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        direct(h + "ln_1.weight", h + "ln1.w");
        direct(h + "ln_1.bias", h + "ln1.b");
        conv1d(h + "attn.c_attn.weight", h + "attn.qkv.w");
        direct(h + "attn.c_attn.bias", h + "attn.qkv.b");
        conv1d(h + "attn.c_proj.weight", h + "attn.proj.w");
        direct(h + "attn.c_proj.bias", h + "attn.proj.b");
        direct(h + "ln_2.weight", h + "ln2.w");
        direct(h + "ln_2.bias", h + "ln2.b");
        conv1d(h + "mlp.c_fc.weight", h + "mlp.fc.w");
        direct(h + "mlp.c_fc.bias", h + "mlp.fc.b");
        conv1d(h + "mlp.c_proj.weight", h + "mlp.proj.w");
        direct(h + "mlp.c_proj.bias", h + "mlp.proj.b");
    }
    direct("ln_f.weight", "lnf.w");
    direct("ln_f.bias", "lnf.b");
    nlohmann::ordered_json j = {{"architectures", {"GPT2LMHeadModel"}},
                                {"model_type", "gpt2"},
                                {"vocab_size", c.V},
                                {"n_positions", c.maxT},
                                {"n_ctx", c.maxT},
                                {"n_embd", c.C},
                                {"n_layer", c.L},
                                {"n_head", c.NH},
                                {"n_inner", nullptr},
                                {"activation_function", "gelu_new"},
                                {"layer_norm_epsilon", 1e-5},
                                {"resid_pdrop", 0.0},
                                {"embd_pdrop", 0.0},
                                {"attn_pdrop", 0.0},
                                {"tie_word_embeddings", true},
                                {"torch_dtype", "float32"}};
    make_dirs(dir);
    check_writable(dir + "/model.safetensors");
    safetensors_save(dir + "/model.safetensors", e, {{"format", "pt"}});
    write_file_atomic(dir + "/config.json", j.dump(2) + "\n");
}

template void pretrained_load<float>(GPT<float>&, const std::string&);
template void pretrained_load<double>(GPT<double>&, const std::string&);

}  // namespace icl
