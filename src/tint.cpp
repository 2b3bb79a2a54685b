// tint — TinT (spec/tint.md): a simulator transformer that runs, back-propagates and fine-tunes a small OPT-like
// auxiliary transformer stored in its prefix tokens, in one forward pass. Subcommands:
//
//   tint check    the simulator vs oracle A (fp64 and fp32) and its k=1 update vs exact SGD (oracle B); exit 1 if off
//   tint params   the constructed simulator's parameter count; the §6 formula for OPT-125m … 2.7b beside Table 1
//   tint train    train the auxiliary model (the engine's GPT with ReLU or GELU) on a text file or the few-shot task
//   tint lm       language modelling (§7.1): perplexity before/after the simulated update vs dynamic evaluation
//   tint fewshot  few-shot classification (§7.2) on a synthetic labelled task: Single/Multi, label/full-context loss
//   tint eps      errors vs the finite-difference ε and vs attention hardness (§5)
//   tint bench    a full simulated pass vs oracle A's explicit computation: time, ratio, memory
//
// Runs write to out/tint/<sub>-<time>/ (or --out): table.csv / log.csv, PNG plots, summary.json.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "data/fewshot.h"
#include "data/text.h"
#include "engine/checkpoint.h"
#include "engine/cli.h"
#include "engine/compare.h"
#include "engine/npy.h"
#include "engine/plot.h"
#include "engine/run.h"
#include "layers/layernorm.h"
#include "models/gpt.h"
#include "models/tint.h"
#include "models/tint_oracle.h"
#include "models/trainer.h"

using namespace icl;

namespace {

const char* kDefaultText = "/usr/share/common-licenses/GPL-3";

void register_flags(Cli& cli) {
    add_common_flags(cli, {"3000", "16", "3e-3", "1"});
    cli.positionals("SUBCOMMAND (check | params | train | lm | fewshot | eps | bench)", 1, 1);
    cli.flag("--task", "text", "train: text (bytes of --data) | fewshot (the synthetic labelled task)");
    cli.flag("--data", kDefaultText, "text: a text file (bytes); 10% at the end is validation");
    cli.flag("--act", "relu", "auxiliary MLP activation: relu (OPT) | gelu (GPT-2)");
    cli.flag("--layers", "4", "auxiliary blocks L");
    cli.flag("--width", "48", "auxiliary width d (divisible by --S)");
    cli.flag("--heads", "3", "auxiliary heads");
    cli.flag("--seq", "64", "auxiliary positions T (= the evaluation window of lm; the context of fewshot)");
    cli.flag("--init-std", "0.3", "check/eps/bench without --load: a random auxiliary model, weights N(0, std)");
    cli.flag("--warmup", "100", "train: learning-rate warm-up steps");
    cli.flag("--eval-every", "500", "train: evaluate every N steps");
    cli.flag("--S", "3", "TinT: weight rows per prefix token (K = d/S prefixes, D = d(S+1))");
    cli.flag("--H-sim", "12", "TinT: heads of the softmax modules");
    cli.flag("--eps", "1e-3", "TinT: finite-difference step ε = 1/N of the LayerNorm / activation backward");
    cli.flag("--eta", "1e-2", "check/bench: inner SGD learning rate (on the summed loss)");
    cli.flag("--gate-scale", "10", "TinT: tanh gate sharpness (fp64 checks use 20)");
    cli.flag("--k", "1", "check/bench: simulated (updated) top layers");
    cli.flag("--s", "1", "check/bench: inner steps");
    cli.flag("--budgets", "4:1,2:2,1:4", "lm/fewshot: k:s budgets (equal cost when k·s is constant)");
    cli.flag("--fracs", "0.3,0.5,0.7,0.9", "lm: training fractions of each window");
    cli.flag("--etas", "", "lm/fewshot: inner learning rates (summed loss); the best on the dev part is reported on the test part (default: lm 1e-5,3e-5,1e-4,3e-4,1e-3; fewshot 3e-3,1e-2,3e-2,1e-1,3e-1)");
    cli.flag("--windows", "48", "lm: test windows (non-overlapping, from the validation text)");
    cli.flag("--dev-windows", "16", "lm: dev windows (choose η)");
    cli.flag("--demos", "4", "fewshot: demonstrations per episode (class-balanced)");
    cli.flag("--episodes", "100", "fewshot: test episodes");
    cli.flag("--dev-episodes", "40", "fewshot: dev episodes (choose η)");
    cli.preset("tiny", "seconds-long smoke runs", {{"--steps", "40"}, {"--layers", "2"}, {"--width", "24"}, {"--seq", "32"}, {"--windows", "4"},
                                                   {"--dev-windows", "2"}, {"--episodes", "6"}, {"--dev-episodes", "4"}, {"--budgets", "2:1,1:2"},
                                                   {"--fracs", "0.5"}, {"--etas", "1e-2"}, {"--demos", "2"}, {"--eval-every", "20"}});
    cli.epilog(
        "examples:\n"
        "  tint check                                  # simulator vs oracles on a random auxiliary model (fp64, fp32)\n"
        "  tint params                                 # parameter counts beside the paper's Table 1\n"
        "  tint train --task text --save out/lm.safetensors\n"
        "  tint lm --load out/lm.safetensors           # perplexity: vanilla / TinT / dynamic evaluation\n"
        "  tint fewshot                                # trains the few-shot model first if no --load\n"
        "  tint eps; tint bench --threads 1");
}

std::string run_dir(const Cli& cli, const std::string& sub) {
    std::string d = cli.has_value("--out") ? cli.get("--out") : default_run_dir("tint", sub);
    make_dirs(d);
    return d;
}

std::vector<double> double_list(const Cli& cli, const std::string& flag, double lo, double hi, const std::string& def = "") {
    std::vector<double> v;
    std::stringstream ss(cli.has_value(flag) ? cli.get(flag) : def);
    for (std::string s; std::getline(ss, s, ',');) {
        char* end = nullptr;
        double x = std::strtod(s.c_str(), &end);
        if (s.empty() || *end || !(x >= lo && x <= hi)) fail_usage(flag + ": '" + s + "' is not a number in [" + strfmt("%g, %g]", lo, hi));
        v.push_back(x);
    }
    if (v.empty()) fail_usage(flag + ": empty list");
    return v;
}

struct Budget { int k, s; };
std::vector<Budget> budgets(const Cli& cli, int L) {
    std::vector<Budget> b;
    std::stringstream ss(cli.get("--budgets"));
    for (std::string s; std::getline(ss, s, ',');) {
        int k = 0, st = 0;
        if (std::sscanf(s.c_str(), "%d:%d", &k, &st) != 2 || k < 1 || k > L || st < 1)
            fail_usage("--budgets: '" + s + strfmt("' is not k:s with 1 <= k <= L=%d and s >= 1", L));
        b.push_back({k, st});
    }
    return b;
}

GPTConfig aux_config(const Cli& cli, int V) {
    GPTConfig g;
    g.L = (int)cli.get_int("--layers", 1, 1000);
    g.C = (int)cli.get_int("--width", 1, 1 << 14);
    g.NH = (int)cli.get_int("--heads", 1, 1 << 10);
    g.maxT = (int)cli.get_int("--seq", 2, 1 << 14);
    g.V = V;
    g.act = cli.get_choice("--act", {"relu", "gelu"});
    g.validate();
    return g;
}

TintConfig tint_config(const Cli& cli, const GPTConfig& g) {
    TintConfig c = TintConfig::from_aux(g);
    c.S = (int)cli.get_int("--S", 1, 64);
    c.H_sim = (int)cli.get_int("--H-sim", 1, 4096);
    c.eps = cli.get_double("--eps", 1e-12, 1);
    c.eta = cli.get_double("--eta", 0, 1e6);
    c.gate_scale = cli.get_double("--gate-scale", 1e-3, 1e3);
    c.validate();
    return c;
}

template <typename to, typename from>
void copy_params(GPT<to>& dst, const GPT<from>& src) {
    std::vector<to> p(src.s.params.ptr, src.s.params.ptr + src.s.ptable.total);
    dst.s.upload(dst.s.params, 0, p.data(), p.size());
}

// The auxiliary model: --load, else a random one (check/eps/bench) or a freshly trained one (lm/fewshot).
GPTConfig loaded_config(const Cli& cli) {
    CheckpointInfo ci = read_checkpoint_metadata(cli.get("--load"));
    if (ci.model != "gpt") fail("--load: '" + cli.get("--load") + "' holds a '" + ci.model + "' model, not the auxiliary 'gpt'");
    for (const char* f : {"--layers", "--width", "--heads", "--seq", "--act"})
        if (cli.given(f)) fail_usage(std::string(f) + ": the architecture comes from --load; drop the flag");
    return GPTConfig::from_json(nlohmann::json::parse(ci.config));
}

// Train the auxiliary model (AdamW, the engine's trainer) on text or the few-shot task; returns it.
GPT<float> train_aux(const Cli& cli, const std::string& task, const std::string& dir, const std::string& save, TextData* text_out) {
    const uint64_t seed = (uint64_t)cli.get_int("--seed", 0);
    const int steps = (int)cli.get_int("--steps", 1, 100000000), B = (int)cli.get_int("--batch", 1, 1 << 20);
    const int T = (int)cli.get_int("--seq", 2, 1 << 14);
    TextData text;
    if (task == "text") text = text_load(cli.get("--data"), 0.1, T);
    GPTConfig g = aux_config(cli, task == "text" ? BYTE_VOCAB : FEWSHOT_VOCAB);
    GPT<float> m(g, Device::cpu, seed);
    TrainOptions o;
    o.steps = steps;
    o.lr = cli.get_double("--lr", 0, 10);
    o.warmup = (int)cli.get_int("--warmup", 0);
    o.eval_every = (int)cli.get_int("--eval-every", 0);
    o.run_dir = dir;
    o.save_path = save;
    o.dump_dir = cli.get("--dump-npy");
    o.tokens_per_step = (int64_t)B * T;
    o.eval_columns = {"val_loss"};
    o.title = "tint train: auxiliary " + g.act + " model on " + task;
    Rng tr = Rng(seed).split(101), vr = Rng(seed).split(202);
    Batch val = task == "text" ? text_batch(text.val, std::max(B, 32), T, vr) : fewshot_batch(std::max(B, 32), T, vr);
    std::fprintf(stderr, "tint train: %s auxiliary model, %lld parameters (L=%d d=%d heads=%d T=%d V=%d), %d steps, run dir %s\n",
                 g.act.c_str(), (long long)g.num_params(), g.L, g.C, g.NH, T, g.V, steps, dir.c_str());
    TrainResult r = train(m, o, [&](int) { return task == "text" ? text_batch(text.train, B, T, tr) : fewshot_batch(B, T, tr); },
                          [&]() { return std::map<std::string, double>{{"val_loss", m.forward(val)}}; });
    std::printf("auxiliary model: train loss %.4f  val_loss %.4f  (%.1f ms/step)\n", r.last_loss, r.last_eval["val_loss"], r.ms_per_step);
    if (text_out) *text_out = std::move(text);
    return m;
}

GPT<float> load_or_train(const Cli& cli, const std::string& task, const std::string& dir, TextData* text) {
    if (cli.has_value("--load")) {
        GPTConfig g = loaded_config(cli);
        if (task == "text" && g.V != BYTE_VOCAB) fail("--load: lm needs a byte-level model (V = 256)");
        if (task == "fewshot" && g.V != FEWSHOT_VOCAB) fail(strfmt("--load: fewshot needs a model of the few-shot task (V = %d)", FEWSHOT_VOCAB));
        GPT<float> m(g, Device::cpu, 1);
        m.s.load(cli.get("--load"));
        if (text) *text = text_load(cli.get("--data"), 0.1, g.maxT);
        return m;
    }
    std::fprintf(stderr, "no --load: training the auxiliary model first (tint train --task %s)\n", task.c_str());
    return train_aux(cli, task, dir, dir + "/aux.safetensors", text);
}

void write_summary(const std::string& dir, const Cli& cli, nlohmann::json j) {
    j["flags"] = cli_json(cli.values());
    write_file_atomic(dir + "/summary.json", j.dump(2) + "\n");
}

// ---- check ------------------------------------------------------------------------------------------------

// What check and eps share: the auxiliary model (--load, or random with --init-std) in fp64 and fp32, the simulator
// config, and one random sequence of min(T, 32) tokens whose first half trains.
struct CheckSetup {
    GPTConfig g;
    GPT<double> aux;
    GPT<float> aux32;
    TintConfig c;
    TintInput in;
    CheckSetup(const Cli& cli, uint64_t seed, uint64_t salt)
        : g(cli.has_value("--load") ? loaded_config(cli) : aux_config(cli, 64)), aux(g, Device::cpu, seed), aux32(g, Device::cpu, seed) {
        if (cli.has_value("--load")) {
            aux32.s.load(cli.get("--load"));
            copy_params(aux, aux32);
        } else {
            tint_random_aux(aux, seed, cli.get_double("--init-std", 0, 10));
            copy_params(aux32, aux);
        }
        c = tint_config(cli, g);
        Rng r(seed * salt + 1);
        in.B = 1;
        in.T = std::min(g.maxT, 32);
        for (int t = 0; t < in.T; t++) { in.ids.push_back((int)r.below(g.V)); in.train.push_back(t < in.T / 2); }
    }
};

int cmd_check(const Cli& cli) {
    const uint64_t seed = (uint64_t)cli.get_int("--seed", 0);
    const int k = (int)cli.get_int("--k", 0), s = (int)cli.get_int("--s", 0);
    CheckSetup su(cli, seed, 7);
    const GPTConfig& g = su.g;
    GPT<double>& aux = su.aux;
    GPT<float>& aux32 = su.aux32;
    const TintConfig& c = su.c;
    const TintInput& in = su.in;
    const int T = in.T;
    std::string dir = run_dir(cli, "check");
    std::printf("tint check: auxiliary %s model L=%d d=%d heads=%d V=%d (%s), TinT K=%d D=%d H_lin=%d H_sim=%d, k=%d s=%d, eps=%g eta=%g\n",
                g.act.c_str(), g.L, g.C, g.NH, g.V, cli.has_value("--load") ? cli.get("--load").c_str() : "random", c.K(), c.D(), c.H_lin(),
                c.H_sim, k, s, c.eps, c.eta);
    // fp64 (gate scale 20: exact gates) and fp32, each against oracle A of the same precision
    TintConfig c64 = c;
    c64.gate_scale = 20;
    TintOutput<double> o = Tint<double>(c64).run(aux, in, k, s);
    OracleOutput<double> A = oracle_a(aux, c64, in, 0, k, s);
    TintOutput<float> o32 = Tint<float>(c).run(aux32, in, k, s);
    OracleOutput<float> A32 = oracle_a(aux32, c, in, 0, k, s);
    aux.forward(tint_batch(in, 0));
    std::vector<double> gpt_logits = aux.outputs();
    auto reld = [](const auto& a, const auto& b) {
        double n = 0, z = 0;
        for (size_t i = 0; i < a.size(); i++) { n += ((double)a[i] - (double)b[i]) * ((double)a[i] - (double)b[i]); z += (double)b[i] * (double)b[i]; }
        return std::sqrt(n / std::max(z, 1e-300));
    };
    struct Row { std::string what; double err, tol; };
    std::vector<Row> rows = {
        {"fp64 logits0 vs the GPT's own forward", reld(o.logits0, gpt_logits), 1e-10},
        {"fp64 logits1 vs oracle A", reld(o.logits1, A.logits1), 1e-9},
        {"fp64 decoded weights vs oracle A", reld(o.params[0], A.params), 1e-9},
        {"fp32 logits1 vs fp32 oracle A", reld(o32.logits1, A32.logits1), 1e-3},
        {"fp32 decoded weights vs fp32 oracle A", reld(o32.params[0], A32.params), 1e-4},
        {"(the update itself: logits1 vs logits0)", reld(o.logits1, o.logits0), NAN},
    };
    // k = 1: TinT's update of the top layer vs exact SGD (oracle B on the same trainable set), per tensor
    TintConfig c1 = c64;
    c1.eta = 1e-2;
    TintOutput<double> o1 = Tint<double>(c1).run(aux, in, 1, 1);
    OracleOutput<double> B1 = oracle_b(aux, tint_batch(in, 0), c1.eta, 1, 1, false);
    std::vector<double> p0(aux.s.params.ptr, aux.s.params.ptr + aux.s.ptable.total);
    std::vector<TensorDiff> diffs;
    const std::string top = "h." + std::to_string(g.L - 1) + ".";
    for (const char* n : {"attn.qkv.w", "attn.qkv.b", "attn.proj.w", "attn.proj.b", "ln2.b", "mlp.fc.w", "mlp.fc.b", "mlp.proj.w", "mlp.proj.b", "ln1.b", "lnf.b"}) {
        const std::string name = std::string(n) == "lnf.b" ? "lnf.b" : top + n;
        const size_t off = aux.s.ptable.offset(name), num = aux.s.ptable.spec(name).numel();
        std::vector<double> gt, gb;
        for (size_t i = 0; i < num; i++) {
            gt.push_back((p0[off + i] - o1.params[0][off + i]) / c1.eta);
            gb.push_back((p0[off + i] - B1.params[off + i]) / c1.eta);
        }
        // judged by the RMS relative error (the FD error is relative to the tensor's scale, not to each element)
        double amax = 0;
        for (double v : gb) amax = std::max(amax, std::fabs(v));
        TensorDiff td = compare_tensor(name, std::string(n) == "ln1.b" ? "grad (attn approx)" : "grad", {(int64_t)num}, gb.data(), gt.data(),
                                       0.01 * amax, 20 * c.eps);
        td.pass = std::string(n) == "ln1.b" || td.rms_rel <= 20 * c.eps;
        diffs.push_back(td);
    }
    int bad = 0;
    std::printf("\n  %-44s %12s %10s  ok\n", "comparison", "rel err", "tolerance");
    for (auto& rw : rows) {
        const bool ok = std::isnan(rw.tol) || rw.err <= rw.tol;
        bad += !ok;
        std::printf("  %-44s %12.3e %10s  %s\n", rw.what.c_str(), rw.err, std::isnan(rw.tol) ? "-" : strfmt("%.0e", rw.tol).c_str(), ok ? "ok" : "FAIL");
    }
    std::printf("\n");
    bad += print_diff_table(stdout, "k=1 top-layer update of TinT (fp64) vs exact SGD (oracle B), gradient = Δθ/η, eps = " + strfmt("%g", c.eps) +
                                        "; pass: RMS rel <= 20·eps (ln1.b, shown only: it misses the ∂q,∂k paths of the attention)",
                            diffs, 0.01, 20 * c.eps);
    std::printf("simulated blocks: %d forward + %d backward (L + 2·s·k = %d)\n", o.fwd_blocks, o.bwd_blocks, g.L + 2 * s * k);
    if (cli.has_value("--dump-npy")) {
        const std::string dd = cli.get("--dump-npy");
        make_dirs(dd);
        npy_save(dd + "/tint_logits1.npy", o.logits1.data(), {T, g.V});
        npy_save(dd + "/oracle_a_logits1.npy", A.logits1.data(), {T, g.V});
        npy_save(dd + "/tint_params.npy", o.params[0].data(), {(int64_t)o.params[0].size()});
        npy_save(dd + "/oracle_a_params.npy", A.params.data(), {(int64_t)A.params.size()});
        std::printf("wrote %s/{tint,oracle_a}_{logits1,params}.npy (params in the GPT registry order)\n", dd.c_str());
    }
    nlohmann::json jr = nlohmann::json::array();
    for (auto& rw : rows) jr.push_back({{"what", rw.what}, {"rel_err", rw.err}});
    write_summary(dir, cli, {{"subcommand", "check"}, {"rows", jr}, {"failures", bad}});
    std::printf("%s; wrote %s/summary.json\n", bad ? "FAILED" : "all comparisons within tolerance", dir.c_str());
    return bad ? 1 : 0;
}

// ---- params -----------------------------------------------------------------------------------------------

int cmd_params(const Cli& cli) {
    std::string dir = run_dir(cli, "params");
    GPTConfig g = cli.has_value("--load") ? loaded_config(cli) : aux_config(cli, BYTE_VOCAB);
    TintConfig c = tint_config(cli, g);
    const int k = cli.given("--k") ? (int)cli.get_int("--k", 0, g.L) : g.L;  // default: every layer simulated
    nlohmann::json j = {{"subcommand", "params"}};
    auto show = [&](const char* title, const TintConfig& cc, int L, int kk) {
        Tint<float> tt(cc);
        TintCount n = tt.count(kk);
        std::printf("%s: d=%d L=%d T=%d, K=%d D=%d H_lin=%d H_sim=%d, %d simulated layers\n", title, cc.d, L, cc.T, cc.K(), cc.D(), cc.H_lin(), cc.H_sim, kk);
        std::printf("  %-10s %16s %16s\n", "", "parameters", "non-zero");
        std::printf("  %-10s %16lld %16lld\n", "Forward", (long long)n.fwd, (long long)n.fwd_nz);
        std::printf("  %-10s %16lld %16lld\n", "Backward", (long long)n.bwd, (long long)n.bwd_nz);
        std::printf("  %-10s %16lld %16lld\n", "Descent", (long long)n.desc, (long long)n.desc_nz);
        std::printf("  %-10s %16lld %16lld\n", "Total", (long long)n.total(), (long long)n.total_nz());
        std::printf("  per module (one instance): ");
        for (auto* m : {&tt.lin_fwd, &tt.ln_fwd, &tt.attn_fwd, &tt.act_fwd, &tt.lin_bwd, &tt.ln_bwd, &tt.attn_bwd, &tt.act_bwd, &tt.lin_desc})
            std::printf("%s %lld; ", m->name.c_str(), (long long)m->params());
        std::printf("\n\n");
        return nlohmann::json{{"fwd", n.fwd}, {"bwd", n.bwd}, {"desc", n.desc}, {"total", n.total()}, {"fwd_nz", n.fwd_nz}, {"bwd_nz", n.bwd_nz},
                              {"desc_nz", n.desc_nz}, {"total_nz", n.total_nz()}};
    };
    j["this_model"] = show("this auxiliary model's simulator", c, g.L, k);
    TintConfig opt;
    opt.d = 768; opt.n_h = 12; opt.L = 12; opt.V = 50272; opt.T = 2048; opt.S = 3; opt.H_sim = 12;
    j["opt125m_constructed"] = show("our construction for OPT-125m (all 12 layers simulated)", opt, 12, 12);
    std::printf("The paper's Table 1 (billions; Forward / Backward / Descent / Total) beside the reconstructed formula of spec §6\n"
                "(Q_split = D²/H + DH, Q = 4·Q_split + 3·T_sim·D/H, D = 4d, T_sim = T + d/4, T = 2048; per block F = 7Q + Q_split,\n"
                " B = 7Q + 6DH, Dsc = 7Q), all layers simulated:\n\n");
    std::printf("  %-9s %5s %3s %3s | %-23s | %-23s\n", "model", "d", "L", "H", "paper F / B / D / Tot", "formula F / B / D / Tot");
    struct Row { const char* name; int d, L, H; double F, B, D, Tot; };
    nlohmann::json jt = nlohmann::json::array();
    for (Row r : {Row{"OPT-125m", 768, 12, 12, 0.4, 0.4, 0.4, 1.2}, Row{"OPT-350m", 1024, 24, 16, 1.2, 1.1, 1.1, 3.4},
                  Row{"OPT-1.3b", 2048, 24, 16, 3.7, 3.6, 3.5, 10.8}, Row{"OPT-2.7b", 2560, 32, 16, 7.4, 7.2, 7.2, 21.8}}) {
        TintFormula f = tint_formula(r.d, r.L, 2048, r.H);
        std::printf("  %-9s %5d %3d %3d | %4.1f / %4.1f / %4.1f / %5.1f | %4.2f / %4.2f / %4.2f / %5.2f\n", r.name, r.d, r.L, r.H, r.F, r.B, r.D, r.Tot,
                    f.fwd / 1e9, f.bwd / 1e9, f.desc / 1e9, f.total / 1e9);
        jt.push_back({{"model", r.name}, {"paper", {r.F, r.B, r.D, r.Tot}}, {"formula", {f.fwd / 1e9, f.bwd / 1e9, f.desc / 1e9, f.total / 1e9}}});
    }
    std::printf("\n(OPT-350m is post-LN, which TinT does not support; its row does not fit the reconstruction, spec §6.)\n");
    j["table1"] = jt;
    write_summary(dir, cli, j);
    std::printf("wrote %s/summary.json\n", dir.c_str());
    return 0;
}

// ---- train ------------------------------------------------------------------------------------------------

int cmd_train(const Cli& cli) {
    const std::string task = cli.get_choice("--task", {"text", "fewshot"});
    std::string dir = run_dir(cli, "train-" + task);
    const std::string save = cli.has_value("--save") ? cli.get("--save") : dir + "/model.safetensors";
    if (cli.has_value("--load")) fail_usage("train: starts from scratch; --load is for lm / fewshot / check / eps / bench");
    GPT<float> m = train_aux(cli, task, dir, save, nullptr);
    write_summary(dir, cli, {{"subcommand", "train"}, {"task", task}, {"config", m.cfg.to_json()}, {"params", m.cfg.num_params()}});
    std::printf("wrote %s/{log.csv, loss.png, summary.json} and %s\n", dir.c_str(), save.c_str());
    return 0;
}

// ---- lm ---------------------------------------------------------------------------------------------------

// Σ CE and the count over the test predictions (t+1 >= n_train) of one window's logits (T,V).
template <typename real>
void test_ce(const real* logits, const int* ids, int T, int V, int n_train, double& sum, long& n) {
    for (int t = std::max(0, n_train - 1); t + 1 < T; t++) {
        const real* z = logits + (size_t)t * V;
        double mx = z[0], s = 0;
        for (int v = 1; v < V; v++) mx = std::max(mx, (double)z[v]);
        for (int v = 0; v < V; v++) s += std::exp((double)z[v] - mx);
        sum += mx + std::log(s) - (double)z[ids[t + 1]];
        n++;
    }
}

int cmd_lm(const Cli& cli) {
    // every flag is checked before the (possibly long) training of the auxiliary model
    const std::vector<double> fracs = double_list(cli, "--fracs", 0.01, 0.99), etas = double_list(cli, "--etas", 0, 1e6, "1e-5,3e-5,1e-4,3e-4,1e-3");
    const std::vector<Budget> bud = budgets(cli, cli.has_value("--load") ? loaded_config(cli).L : aux_config(cli, BYTE_VOCAB).L);
    const int n_test = (int)cli.get_int("--windows", 1, 1 << 20), n_dev = (int)cli.get_int("--dev-windows", 1, 1 << 20);
    std::string dir = run_dir(cli, "lm");
    TextData text;
    GPT<float> aux = load_or_train(cli, "text", dir, &text);
    const GPTConfig& g = aux.cfg;
    TintConfig c = tint_config(cli, g);
    const int T = g.maxT, V = g.V;
    // non-overlapping windows of the validation text: dev first, then test
    const int avail = (int)(text.val.size() / T);
    if (avail < n_dev + n_test) fail(strfmt("lm: the validation text holds %d windows of %d bytes; asked for %d dev + %d test", avail, T, n_dev, n_test));
    auto windows = [&](int first, int count, double frac) {
        TintInput in;
        in.B = count;
        in.T = T;
        const int ntr = std::max(1, (int)std::floor(frac * T));
        for (int w = first; w < first + count; w++)
            for (int t = 0; t < T; t++) {
                in.ids.push_back(text.val[(size_t)w * T + t]);
                in.train.push_back(t < ntr);
            }
        return in;
    };
    auto ppl_of = [&](const std::vector<float>& logits, const TintInput& in, int ntr) {
        double sum = 0;
        long n = 0;
        for (int b = 0; b < in.B; b++) test_ce(logits.data() + (size_t)b * T * V, in.ids.data() + (size_t)b * T, T, V, ntr, sum, n);
        return std::exp(sum / n);
    };
    // method: "tint" (the simulator), "dyn" (oracle B on TinT's trainable set), "dyn-all" (oracle B, every parameter)
    auto evaluate = [&](const std::string& method, const TintInput& in, int k, int s, double eta, int ntr) {
        if (method == "tint") {
            TintConfig cc = c;
            cc.eta = eta;
            TintOutput<float> o = Tint<float>(cc).run(aux, in, k, s);
            return std::make_pair(ppl_of(o.logits0, in, ntr), ppl_of(o.logits1, in, ntr));
        }
        std::vector<float> l0, l1;
        for (int b = 0; b < in.B; b++) {
            OracleOutput<float> B = oracle_b(aux, tint_batch(in, b), eta, k, s, method == "dyn-all");
            l0.insert(l0.end(), B.logits0.begin(), B.logits0.end());
            l1.insert(l1.end(), B.logits1.begin(), B.logits1.end());
        }
        return std::make_pair(ppl_of(l0, in, ntr), ppl_of(l1, in, ntr));
    };
    struct Arm { std::string method; Budget b; };
    std::vector<Arm> arms;
    for (Budget b : bud) arms.push_back({"tint", b});
    for (Budget b : bud) arms.push_back({"dyn", b});
    arms.push_back({"dyn-all", {g.L, 1}});
    std::printf("tint lm: %s, %d dev + %d test windows of %d bytes; TinT K=%d D=%d eps=%g; eta grid chosen per arm and fraction on dev\n",
                text.path.c_str(), n_dev, n_test, T, c.K(), c.D(), c.eps);
    std::FILE* csv = std::fopen((dir + "/table.csv").c_str(), "w");
    if (!csv) fail("cannot write " + dir + "/table.csv");
    std::fprintf(csv, "method,k,s,frac,eta,ppl_dev,ppl_test,ppl_vanilla_test\n");
    std::map<std::string, std::vector<double>> table;  // arm label -> test ppl per fraction
    std::vector<double> vanilla;
    nlohmann::json jrows = nlohmann::json::array();
    const double t0 = now_seconds();
    int done = 0, total = (int)(fracs.size() * arms.size());
    for (double frac : fracs) {
        const int ntr = std::max(1, (int)std::floor(frac * T));
        TintInput dev = windows(0, n_dev, frac), test = windows(n_dev, n_test, frac);
        double van = 0;
        for (const Arm& a : arms) {
            double best = INFINITY, best_eta = etas[0];
            for (double eta : etas) {
                double p = evaluate(a.method, dev, a.b.k, a.b.s, eta, ntr).second;
                std::fprintf(csv, "%s,%d,%d,%.2f,%g,%.5f,,\n", a.method.c_str(), a.b.k, a.b.s, frac, eta, p);
                if (p < best) { best = p; best_eta = eta; }
            }
            auto pt = evaluate(a.method, test, a.b.k, a.b.s, best_eta, ntr);
            van = pt.first;
            const std::string label = a.method + strfmt(" (%d,%d)", a.b.k, a.b.s);
            table[label].push_back(pt.second);
            std::fprintf(csv, "%s,%d,%d,%.2f,%g,%.5f,%.5f,%.5f\n", a.method.c_str(), a.b.k, a.b.s, frac, best_eta, best, pt.second, pt.first);
            std::fflush(csv);
            jrows.push_back({{"method", a.method}, {"k", a.b.k}, {"s", a.b.s}, {"frac", frac}, {"eta", best_eta}, {"ppl_test", pt.second},
                             {"ppl_vanilla", pt.first}});
            done++;
            const double el = now_seconds() - t0;
            std::fprintf(stderr, "  [%d/%d] frac %.2f %-14s eta %-6g test ppl %.4f (vanilla %.4f)  elapsed %.0fs eta %.0fs\n", done, total, frac,
                         label.c_str(), best_eta, pt.second, pt.first, el, el / done * (total - done));
        }
        vanilla.push_back(van);
    }
    std::fclose(csv);
    std::printf("\nperplexity on the test part of %d windows (bytes; lower is better), by training fraction:\n\n  %-20s", n_test, "");
    for (double f : fracs) std::printf(" %8.0f%%", 100 * f);
    std::printf("\n  %-20s", "vanilla");
    for (double v : vanilla) std::printf(" %9.4f", v);
    std::printf("\n");
    for (const Arm& a : arms) {
        const std::string label = a.method + strfmt(" (%d,%d)", a.b.k, a.b.s);
        std::printf("  %-20s", (std::string(a.method == "tint" ? "TinT" : a.method == "dyn" ? "dyn. eval" : "dyn. eval all") + strfmt(" (%d,%d)", a.b.k, a.b.s)).c_str());
        for (double v : table[label]) std::printf(" %9.4f", v);
        std::printf("\n");
    }
    // plot: the change of the test perplexity against vanilla (%), per fraction, one line per arm
    LinePlot p;
    p.title = "tint lm: test perplexity change after the update, vs vanilla";
    p.xlabel = "training fraction of each window";
    p.ylabel = "perplexity change (%)";
    p.hlines.push_back({"vanilla", 0.0});
    for (const Arm& a : arms) {
        const std::string label = a.method + strfmt(" (%d,%d)", a.b.k, a.b.s);
        std::vector<double> rel;
        for (size_t i = 0; i < fracs.size(); i++) rel.push_back(100 * (table[label][i] / vanilla[i] - 1));
        Series sr{a.method == "dyn-all" ? std::string("dyn. eval, all params") : (a.method == "tint" ? "TinT" : "dyn. eval") + strfmt(" k=%d s=%d", a.b.k, a.b.s),
                  fracs, rel, true};
        sr.dashed = a.method != "tint";
        p.series.push_back(sr);
    }
    save_line_plot(dir + "/lm.png", p);
    write_summary(dir, cli, {{"subcommand", "lm"}, {"data", text.path}, {"rows", jrows}, {"aux", g.to_json()}});
    std::printf("\nwrote %s/{table.csv, lm.png, summary.json}\n", dir.c_str());
    return 0;
}

// ---- fewshot ----------------------------------------------------------------------------------------------

struct Episode {
    bool flip = false;
    std::vector<FewshotExample> demos;
    FewshotExample eval;
};

Episode make_episode(int n_demos, Rng& rng) {
    Episode e;
    e.flip = rng.below(2);
    std::vector<int> cls;
    for (int i = 0; i < n_demos; i++) cls.push_back(i % 2);
    for (int i = n_demos - 1; i > 0; i--) std::swap(cls[i], cls[rng.below(i + 1)]);
    // the new label words: NEW0 + (class XOR flip)
    for (int c : cls) e.demos.push_back(fewshot_example(c, FS_NEW0 + (c ^ (int)e.flip), rng));
    const int c = (int)rng.below(2);
    e.eval = fewshot_example(c, FS_NEW0 + (c ^ (int)e.flip), rng);
    return e;
}

// The TinT input of an episode in a format, with the position (`read`) whose logits predict the eval label.
// Single: demos and eval as separate segments (block ICL mask, positions reset); Multi: joined by SEP (plain ICL).
// Training tokens: everything except the eval label. Label-only loss: only the demos' label predictions.
TintInput episode_input(const Episode& e, bool single, bool label_only, int& read) {
    TintInput in;
    in.B = 1;
    std::vector<int> seg_start;
    std::vector<uint8_t> is_label;
    auto add = [&](const FewshotExample& x, bool sep) {
        seg_start.push_back(in.T);
        for (size_t i = 0; i < x.tokens.size(); i++) {
            in.ids.push_back(x.tokens[i]);
            in.pos.push_back(single ? (int)i : in.T);
            is_label.push_back(i + 1 == x.tokens.size());
            in.T++;
        }
        if (sep) {
            in.ids.push_back(FS_SEP);
            in.pos.push_back(in.T);
            is_label.push_back(0);
            in.T++;
        }
    };
    for (auto& d : e.demos) add(d, !single);
    add(e.eval, false);
    read = in.T - 2;
    in.train.assign(in.T, 1);
    in.train[in.T - 1] = 0;
    in.label.assign(in.T, 0);
    for (int t = 0; t < in.T; t++) in.label[t] = label_only ? (is_label[t] && t != in.T - 1) : 1;
    if (single) {
        for (int s : seg_start) in.label[s] = 0;  // no prediction across segments
        in.icl.assign((size_t)in.T * in.T, 0);
        for (size_t s = 0; s < seg_start.size(); s++) {
            const int a = seg_start[s], b = s + 1 < seg_start.size() ? seg_start[s + 1] : in.T;
            for (int t = a; t < b; t++)
                for (int j = a; j <= t; j++) in.icl[(size_t)t * in.T + j] = 1;
        }
    } else {
        in.pos.clear();
    }
    return in;
}

// Single format as a GPT batch (dynamic evaluation): each segment its own row, padded at the end (masked).
Batch single_batch(const TintInput& in) {
    std::vector<int> starts;
    for (int t = 0; t < in.T; t++)
        if (in.pos[t] == 0) starts.push_back(t);
    starts.push_back(in.T);
    int Tm = 0;
    for (size_t s = 0; s + 1 < starts.size(); s++) Tm = std::max(Tm, starts[s + 1] - starts[s]);
    Batch bt;
    bt.B = (int)starts.size() - 1;
    bt.T = Tm;
    std::vector<uint8_t> m = in.loss_mask(0);
    for (int s = 0; s + 1 < (int)starts.size(); s++)
        for (int i = 0; i < Tm; i++) {
            const int t = starts[s] + i;
            const bool in_seg = t < starts[s + 1];
            bt.tokens.push_back(in_seg ? in.ids[t] : FS_SEP);
            bt.targets.push_back(in_seg && t + 1 < in.T ? in.ids[t + 1] : 0);
            bt.mask.push_back(in_seg && t + 1 < starts[s + 1] ? (float)m[t] : 0.0f);
        }
    return bt;
}

int cmd_fewshot(const Cli& cli) {
    // every flag is checked before the (possibly long) training of the auxiliary model
    const uint64_t seed = (uint64_t)cli.get_int("--seed", 0);
    const int n_demos = (int)cli.get_int("--demos", 1, 64), n_test = (int)cli.get_int("--episodes", 1, 1 << 20),
              n_dev = (int)cli.get_int("--dev-episodes", 1, 1 << 20);
    const std::vector<double> etas = double_list(cli, "--etas", 0, 1e6, "3e-3,1e-2,3e-2,1e-1,3e-1");
    const std::vector<Budget> bud = budgets(cli, cli.has_value("--load") ? loaded_config(cli).L : aux_config(cli, FEWSHOT_VOCAB).L);
    std::string dir = run_dir(cli, "fewshot");
    GPT<float> aux = load_or_train(cli, "fewshot", dir, nullptr);
    const GPTConfig& g = aux.cfg;
    TintConfig c = tint_config(cli, g);
    Rng dr = Rng(seed).split(505), tr = Rng(seed).split(606);
    std::vector<Episode> dev, test;
    for (int i = 0; i < n_dev; i++) dev.push_back(make_episode(n_demos, dr));
    for (int i = 0; i < n_test; i++) test.push_back(make_episode(n_demos, tr));
    for (auto* set : {&dev, &test})
        for (const Episode& e : *set) {
            int r0;
            TintInput m = episode_input(e, false, true, r0);
            if (m.T > g.maxT)
                fail(strfmt("fewshot: a Multi-format episode has %d tokens > the model's %d positions; use fewer --demos or a longer --seq", m.T, g.maxT));
        }
    // margin = log p(NEW0) − log p(NEW1) at the read position (the label words' log-softmax difference)
    auto margin = [&](const float* z) { return (double)z[FS_NEW0] - (double)z[FS_NEW1]; };
    // does the model read the class? its zero-shot accuracy with the pretraining label words (LABEL0 + class)
    double reads_class = 0;
    for (const Episode& e : test) {
        Batch bt;
        bt.B = 1;
        bt.T = (int)e.eval.tokens.size();
        bt.tokens = e.eval.tokens;
        aux.forward(bt);
        std::vector<float> lg = aux.outputs();
        const float* z = lg.data() + (size_t)(bt.T - 2) * g.V;
        reads_class += (z[FS_LABEL0 + e.eval.cls] > z[FS_LABEL1 - e.eval.cls]) / (double)test.size();
    }
    // Accuracy of one arm on a set of episodes, before and after the update, uncalibrated and calibrated.
    // Calibration (spec §7.2, "icl_sfc"): the label words' margin on the episode minus their margin on the same demos
    // followed by the content-free prompt [MARK] (a second pass, which also updates internally).
    struct Acc { double before = 0, after = 0, before_cal = 0, after_cal = 0; };
    auto run_arm = [&](const std::string& method, bool single, bool label_only, Budget b, double eta, const std::vector<Episode>& eps) {
        const int n = (int)eps.size(), V = g.V;
        std::vector<double> m0(2 * n), m1(2 * n);  // margins before/after: [episode, content-free prompt]
        TintConfig cc = c;
        cc.eta = eta;
        Tint<float> tt(cc);
#pragma omp parallel for schedule(dynamic)
        for (int job = 0; job < 2 * n; job++) {
            Episode e = eps[job / 2];
            if (job % 2) e.eval.tokens = {FS_MARK, e.eval.tokens.back()};  // the content-free prompt
            int r;
            TintInput in = episode_input(e, single, label_only, r);
            if (method == "tint") {
                TintOutput<float> o = tt.run(aux, in, b.k, b.s);
                m0[job] = margin(o.logits0.data() + (size_t)r * V);
                m1[job] = margin(o.logits1.data() + (size_t)r * V);
            } else {
                GPT<float> m(g, Device::cpu, 1);  // a private copy per thread
                copy_params(m, aux);
                Batch bt = single ? single_batch(in) : tint_batch(in, 0);
                OracleOutput<float> B = oracle_b(m, bt, eta, b.k, b.s, method == "dyn-all");
                // Single: the eval segment is the batch's last row
                const size_t row = single ? ((size_t)(bt.B - 1) * bt.T + (r - (in.T - (int)e.eval.tokens.size()))) * V : (size_t)r * V;
                m0[job] = margin(B.logits0.data() + row);
                m1[job] = margin(B.logits1.data() + row);
            }
        }
        Acc a;
        for (int i = 0; i < n; i++) {
            const bool want0 = (eps[i].eval.cls ^ (int)eps[i].flip) == 0;  // the right label word is NEW0
            a.before += ((m0[2 * i] > 0) == want0) / (double)n;
            a.after += ((m1[2 * i] > 0) == want0) / (double)n;
            a.before_cal += ((m0[2 * i] - m0[2 * i + 1] > 0) == want0) / (double)n;
            a.after_cal += ((m1[2 * i] - m1[2 * i + 1] > 0) == want0) / (double)n;
        }
        return a;
    };
    struct Arm { std::string method; bool single, label; Budget b; };
    std::vector<Arm> arms;
    const Budget full{g.L, 1};
    for (bool single : {true, false})
        for (bool label : {true, false}) {
            arms.push_back({"tint", single, label, full});
            arms.push_back({"dyn", single, label, full});
        }
    for (Budget b : bud)
        if (b.k != full.k || b.s != full.s) arms.push_back({"tint", true, true, b});
    std::printf("tint fewshot: %d demos per episode, %d dev + %d test episodes; two label words never seen in pretraining, their\n"
                "mapping to the classes a coin per episode (chance = 50%%); TinT K=%d D=%d eps=%g\n"
                "the auxiliary model reads the class: %.1f%% zero-shot with its pretraining label words\n",
                n_demos, n_dev, n_test, c.K(), c.D(), c.eps, 100 * reads_class);
    std::FILE* csv = std::fopen((dir + "/table.csv").c_str(), "w");
    if (!csv) fail("cannot write " + dir + "/table.csv");
    std::fprintf(csv, "method,format,loss,k,s,eta,acc_dev,acc_dev_cal,acc_test,acc_test_cal,acc_test_before,acc_test_before_cal\n");
    nlohmann::json jrows = nlohmann::json::array();
    Acc zero, icl;  // before any update: Single = the eval example alone (block mask), Multi = plain ICL
    std::vector<std::string> lines;
    const double t0 = now_seconds();
    auto fmt = [](const Arm& a) { return std::string(a.single ? "single" : "multi") + "," + (a.label ? "label" : "full"); };
    for (size_t ai = 0; ai < arms.size(); ai++) {
        const Arm& a = arms[ai];
        // η chosen on dev, separately for the uncalibrated and the calibrated score
        double best = -1, best_cal = -1, eta_u = etas[0], eta_c = etas[0];
        for (double eta : etas) {
            Acc d = run_arm(a.method, a.single, a.label, a.b, eta, dev);
            std::fprintf(csv, "%s,%s,%d,%d,%g,%.4f,%.4f,,,,\n", a.method.c_str(), fmt(a).c_str(), a.b.k, a.b.s, eta, d.after, d.after_cal);
            if (d.after > best) { best = d.after; eta_u = eta; }
            if (d.after_cal > best_cal) { best_cal = d.after_cal; eta_c = eta; }
        }
        Acc tu = run_arm(a.method, a.single, a.label, a.b, eta_u, test);
        Acc tc = eta_c == eta_u ? tu : run_arm(a.method, a.single, a.label, a.b, eta_c, test);
        if (a.single) zero = tu;
        else icl = tu;
        std::fprintf(csv, "%s,%s,%d,%d,%g/%g,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", a.method.c_str(), fmt(a).c_str(), a.b.k, a.b.s, eta_u, eta_c, best, best_cal,
                     tu.after, tc.after_cal, tu.before, tu.before_cal);
        std::fflush(csv);
        auto se = [&](double p) { return 100 * std::sqrt(p * (1 - p) / n_test); };
        lines.push_back(strfmt("  %-10s %-7s %-6s (%d,%d) | eta %-6g %5.1f%% ± %4.1f | eta %-6g %5.1f%% ± %4.1f", a.method == "tint" ? "TinT" : "dyn. eval",
                               a.single ? "Single" : "Multi", a.label ? "label" : "full", a.b.k, a.b.s, eta_u, 100 * tu.after, se(tu.after), eta_c,
                               100 * tc.after_cal, se(tc.after_cal)));
        jrows.push_back({{"method", a.method}, {"format", a.single ? "single" : "multi"}, {"loss", a.label ? "label" : "full"}, {"k", a.b.k}, {"s", a.b.s},
                         {"eta", eta_u}, {"eta_cal", eta_c}, {"acc_test", tu.after}, {"acc_test_cal", tc.after_cal}, {"acc_dev", best},
                         {"acc_dev_cal", best_cal}});
        const double el = now_seconds() - t0;
        std::fprintf(stderr, "  [%zu/%zu] %s  elapsed %.0fs eta %.0fs\n", ai + 1, arms.size(), lines.back().c_str() + 2, el,
                     el / (ai + 1) * (arms.size() - ai - 1));
    }
    std::fclose(csv);
    std::printf("\naccuracy on %d test episodes (η chosen on %d dev episodes; ± = binomial standard error):\n\n", n_test, n_dev);
    std::printf("  %-31s | %-24s | %-24s\n", "", "uncalibrated", "calibrated");
    std::printf("  %-31s | %16.1f%%        | %16.1f%%\n  %-31s | %16.1f%%        | %16.1f%%\n", "zero-shot (eval example alone)", 100 * zero.before,
                100 * zero.before_cal, "vanilla ICL (Multi, no update)", 100 * icl.before, 100 * icl.before_cal);
    for (auto& l : lines) std::printf("%s\n", l.c_str());
    write_summary(dir, cli, {{"subcommand", "fewshot"}, {"zero_shot", zero.before}, {"zero_shot_cal", zero.before_cal}, {"icl", icl.before},
                             {"icl_cal", icl.before_cal}, {"reads_class", reads_class}, {"rows", jrows},
                             {"aux", g.to_json()}});
    std::printf("\nwrote %s/{table.csv, summary.json}\n", dir.c_str());
    return 0;
}

// ---- eps --------------------------------------------------------------------------------------------------

int cmd_eps(const Cli& cli) {
    std::string dir = run_dir(cli, "eps");
    const uint64_t seed = (uint64_t)cli.get_int("--seed", 0);
    CheckSetup su(cli, seed, 3);
    const GPTConfig& g = su.g;
    GPT<double>& aux = su.aux;
    GPT<float>& aux32 = su.aux32;
    const TintConfig& c = su.c;
    const TintInput& in = su.in;
    const int T = in.T;
    const double eta = 1e-2;
    std::vector<double> p0(aux.s.params.ptr, aux.s.params.ptr + aux.s.ptable.total);
    OracleOutput<double> B = oracle_b(aux, tint_batch(in, 0), eta, 1, 1, false);
    // the exact gradient on TinT's trainable set of the top layer, except β1 (the attention approximation's)
    std::vector<std::pair<size_t, size_t>> ranges;
    for (auto& rg : tint_trainable(aux.s.ptable, g, 1))
        if (rg.first != aux.s.ptable.offset("h." + std::to_string(g.L - 1) + ".ln1.b")) ranges.push_back(rg);
    auto grad_err = [&](const auto& params) {
        double n = 0, z = 0;
        for (auto& rg : ranges)
            for (size_t i = rg.first; i < rg.second; i++) {
                const double gt = (p0[i] - (double)params[i]) / eta, gb = (p0[i] - B.params[i]) / eta;
                n += (gt - gb) * (gt - gb);
                z += gb * gb;
            }
        return std::sqrt(n / z);
    };
    // LayerNorm backward alone: (1/ε)(f(x + εg) − f(x)) vs J_fᵀ g, on N(0,1) inputs of width d, fp64 and fp32
    auto ln_err = [&](double e, bool fp32) {
        const int d = g.C, n = 64;
        Rng rr(11);
        double num = 0, den = 0;
        for (int s = 0; s < n; s++) {
            std::vector<double> x(d), gg(d), f(d), fs(d);
            fill_normal(x.data(), d, rr);
            fill_normal(gg.data(), d, rr);
            auto norm = [&](const std::vector<double>& v, std::vector<double>& out) {
                if (fp32) {
                    std::vector<float> vf(v.begin(), v.end()), of(d), on(d, 1.0f), ze(d, 0.0f);
                    float mean, rstd;
                    layernorm_forward(of.data(), &mean, &rstd, vf.data(), on.data(), ze.data(), 1, d);
                    out.assign(of.begin(), of.end());
                } else {
                    std::vector<double> on(d, 1.0), ze(d, 0.0);
                    double mean, rstd;
                    out.resize(d);
                    layernorm_forward(out.data(), &mean, &rstd, v.data(), on.data(), ze.data(), 1, d);
                }
            };
            std::vector<double> xs(d);
            for (int i = 0; i < d; i++) xs[i] = fp32 ? (double)((float)x[i] + (float)e * (float)gg[i]) : x[i] + e * gg[i];
            norm(x, f);
            norm(xs, fs);
            double m = 0, v = 0, gm = 0, gxm = 0;
            for (int i = 0; i < d; i++) m += x[i] / d;
            for (int i = 0; i < d; i++) v += (x[i] - m) * (x[i] - m) / d;
            std::vector<double> xh(d);
            for (int i = 0; i < d; i++) xh[i] = (x[i] - m) / std::sqrt(v + 1e-5);
            for (int i = 0; i < d; i++) { gm += gg[i] / d; gxm += gg[i] * xh[i] / d; }
            for (int i = 0; i < d; i++) {
                const double ex = (gg[i] - gm - xh[i] * gxm) / std::sqrt(v + 1e-5);
                const double ap = fp32 ? (double)((float)fs[i] - (float)f[i]) / (float)e : (fs[i] - f[i]) / e;
                num += (ap - ex) * (ap - ex);
                den += ex * ex;
            }
        }
        return std::sqrt(num / den);
    };
    std::vector<double> E = {1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5};
    std::vector<double> ln64, ln32, up64, up32;
    std::FILE* csv = std::fopen((dir + "/eps.csv").c_str(), "w");
    if (!csv) fail("cannot write " + dir + "/eps.csv");
    std::fprintf(csv, "eps,ln_bwd_fp64,ln_bwd_fp32,k1_update_fp64,k1_update_fp32\n");
    std::printf("tint eps: relative errors vs the finite-difference step ε (auxiliary %s model L=%d d=%d; k=1 update vs exact SGD on the\n"
                "top layer's TinT-trainable tensors except β1)\n\n  %8s %14s %14s %16s %16s\n",
                g.act.c_str(), g.L, g.C, "eps", "LN bwd fp64", "LN bwd fp32", "k=1 update fp64", "k=1 update fp32");
    for (double e : E) {
        TintConfig ce = c;
        ce.eps = e;
        ce.eta = eta;
        ce.gate_scale = 20;
        TintOutput<double> o = Tint<double>(ce).run(aux, in, 1, 1);
        ce.gate_scale = 10;
        TintOutput<float> o32 = Tint<float>(ce).run(aux32, in, 1, 1);
        ln64.push_back(ln_err(e, false));
        ln32.push_back(ln_err(e, true));
        up64.push_back(grad_err(o.params[0]));
        up32.push_back(grad_err(o32.params[0]));
        std::printf("  %8.0e %14.3e %14.3e %16.3e %16.3e\n", e, ln64.back(), ln32.back(), up64.back(), up32.back());
        std::fprintf(csv, "%g,%.4e,%.4e,%.4e,%.4e\n", e, ln64.back(), ln32.back(), up64.back(), up32.back());
    }
    std::fclose(csv);
    LinePlot p;
    p.title = "TinT: error of the finite-difference backward vs eps";
    p.xlabel = "finite-difference step eps";
    p.ylabel = "relative error";
    p.logx = p.logy = true;
    p.series.push_back({"LayerNorm backward, fp64", E, ln64, true});
    p.series.push_back({"LayerNorm backward, fp32", E, ln32, true, true});
    p.series.push_back({"k=1 update vs exact SGD, fp64", E, up64, true});
    p.series.push_back({"k=1 update vs exact SGD, fp32", E, up32, true, true});
    save_line_plot(dir + "/eps.png", p);
    // attention hardness: scale W_Q by h; x = the measured 1 − (mean max attention weight); y = the gradient error of
    // the simulated k = L update (ε -> 0) vs exact SGD, on every TinT-trainable tensor and on β of the top LN1
    std::printf("\nerror vs attention hardness (W_Q scaled; k = L = %d, eps = 1e-6 so that only the attention approximation remains):\n\n", g.L);
    std::printf("  %8s %14s %16s %16s\n", "W_Q x", "1 - max attn", "all trainable", "top-layer beta1");
    std::FILE* csv2 = std::fopen((dir + "/hardness.csv").c_str(), "w");
    std::fprintf(csv2, "wq_scale,one_minus_max_attn,err_all,err_beta1\n");
    std::vector<double> hx, hy, hb;
    for (double h : {1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0}) {
        GPT<double> a(g, Device::cpu, seed);
        std::vector<double> p = p0;
        for (int l = 0; l < g.L; l++) {
            const size_t o = a.s.ptable.offset("h." + std::to_string(l) + ".attn.qkv.w");
            for (int i = 0; i < g.C * g.C; i++) p[o + i] *= h;
        }
        a.s.upload(a.s.params, 0, p.data(), p.size());
        TintConfig ch = c;
        ch.eps = 1e-6;
        ch.eta = 1e-3;
        ch.gate_scale = 20;
        TintOutput<double> o = Tint<double>(ch).run(a, in, g.L, 1);
        OracleOutput<double> Bh = oracle_b(a, tint_batch(in, 0), ch.eta, g.L, 1, false);
        double n = 0, z = 0;
        for (auto& rg : tint_trainable(a.s.ptable, g, g.L))
            for (size_t i = rg.first; i < rg.second; i++) {
                n += (o.params[0][i] - Bh.params[i]) * (o.params[0][i] - Bh.params[i]);
                z += (p[i] - Bh.params[i]) * (p[i] - Bh.params[i]);
            }
        const size_t ob = a.s.ptable.offset("h." + std::to_string(g.L - 1) + ".ln1.b");
        double nb = 0, zb = 0;
        for (int i = 0; i < g.C; i++) {
            nb += (o.params[0][ob + i] - Bh.params[ob + i]) * (o.params[0][ob + i] - Bh.params[ob + i]);
            zb += (p[ob + i] - Bh.params[ob + i]) * (p[ob + i] - Bh.params[ob + i]);
        }
        a.forward(tint_batch(in, 0));
        double soft = 0;
        long cnt = 0;
        for (int l = 0; l < g.L; l++) {
            std::vector<double> att = a.s.fetch_act("h." + std::to_string(l) + ".att");
            for (int hh = 0; hh < g.NH; hh++)
                for (int t = 1; t < T; t++) {
                    double mx = 0;
                    for (int j = 0; j <= t; j++) mx = std::max(mx, att[((size_t)hh * T + t) * T + j]);
                    soft += 1 - mx;
                    cnt++;
                }
        }
        hx.push_back(std::max(soft / cnt, 1e-17));
        hy.push_back(std::sqrt(n / z));
        hb.push_back(std::sqrt(nb / zb));
        std::printf("  %8g %14.3e %16.3e %16.3e\n", h, hx.back(), hy.back(), hb.back());
        std::fprintf(csv2, "%g,%.4e,%.4e,%.4e\n", h, hx.back(), hy.back(), hb.back());
    }
    std::fclose(csv2);
    LinePlot q;
    q.title = "TinT: update error vs attention hardness (W_Q scaled up)";
    q.xlabel = "1 - mean max attention weight";
    q.ylabel = "relative error vs exact SGD";
    q.logx = q.logy = true;
    q.series.push_back({"all trainable, k = L", hx, hy, true});
    q.series.push_back({"top LN1 beta", hx, hb, true, true});
    save_line_plot(dir + "/hardness.png", q);
    write_summary(dir, cli, {{"subcommand", "eps"}, {"eps", E}, {"ln_fp64", ln64}, {"ln_fp32", ln32}, {"update_fp64", up64}, {"update_fp32", up32},
                             {"hardness_x", hx}, {"hardness_err", hy}, {"hardness_beta1", hb}});
    std::printf("\nwrote %s/{eps.csv, eps.png, hardness.csv, hardness.png, summary.json}\n", dir.c_str());
    return 0;
}

// ---- bench ------------------------------------------------------------------------------------------------

int cmd_bench(const Cli& cli) {
    std::string dir = run_dir(cli, "bench");
    const uint64_t seed = (uint64_t)cli.get_int("--seed", 0);
    GPTConfig g = cli.has_value("--load") ? loaded_config(cli) : aux_config(cli, 256);
    GPT<float> aux(g, Device::cpu, seed);
    if (cli.has_value("--load")) aux.s.load(cli.get("--load"));
    else tint_random_aux(aux, seed, cli.get_double("--init-std", 0, 10));
    TintConfig c = tint_config(cli, g);
    const int k = (int)cli.get_int("--k", 1, g.L), s = (int)cli.get_int("--s", 1, 1000), T = g.maxT;
    std::printf("tint bench: auxiliary %s model L=%d d=%d T=%d V=%d (%lld parameters); TinT K=%d D=%d, k=%d s=%d; %d threads\n"
                "(timings on a shared, busy 2-core machine: medians of repeated runs)\n\n",
                g.act.c_str(), g.L, g.C, T, g.V, (long long)g.num_params(), c.K(), c.D(), k, s, omp_get_max_threads());
    Tint<float> tt(c);
    nlohmann::json rows = nlohmann::json::array();
    std::printf("  %3s | %12s %12s %8s | %14s %14s\n", "B", "TinT ms", "oracle A ms", "ratio", "TinT memory", "aux acts");
    for (int B : {1, 8}) {
        Rng r(seed + B);
        TintInput in;
        in.B = B;
        in.T = T;
        for (int i = 0; i < B * T; i++) { in.ids.push_back((int)r.below(g.V)); in.train.push_back(i % T < T / 2); }
        auto median = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
        std::vector<double> ts, ta;
        TintOutput<float> o;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now_seconds();
            o = tt.run(aux, in, k, s);
            ts.push_back(now_seconds() - t0);
            t0 = now_seconds();
#pragma omp parallel for schedule(dynamic)
            for (int b = 0; b < B; b++) oracle_a(aux, c, in, b, k, s);
            ta.push_back(now_seconds() - t0);
        }
        const double mt = median(ts), ma = median(ta);
        // the auxiliary model's own activations for the same pass (what oracle A keeps per sequence): L layers of
        // x, x̂, u, qkv(3), att (n_h·T), o, res2, x̂2, u2, z(4), a(4) per token, ×B
        const double aux_bytes = (double)B * T * g.L * (13.0 * g.C + g.NH * T) * sizeof(float);
        std::printf("  %3d | %12.2f %12.3f %8.1f | %11.2f MB %11.2f MB\n", B, mt * 1e3, ma * 1e3, mt / ma, o.state_bytes * (double)B / 1e6, aux_bytes / 1e6);
        rows.push_back({{"B", B}, {"tint_ms", mt * 1e3}, {"oracle_a_ms", ma * 1e3}, {"ratio", mt / ma}, {"tint_bytes", (double)o.state_bytes * B},
                        {"aux_act_bytes", aux_bytes}, {"blocks", o.fwd_blocks + o.bwd_blocks}});
    }
    TintCount n = tt.count(k);
    std::printf("\nsimulated blocks per sequence: %d = L + 2·s·k; simulator parameters %lld (%lld non-zero) vs the auxiliary's %lld\n",
                g.L + 2 * s * k, (long long)n.total(), (long long)n.total_nz(), (long long)g.num_params());
    write_summary(dir, cli, {{"subcommand", "bench"}, {"rows", rows}, {"threads", omp_get_max_threads()}, {"aux", g.to_json()}, {"tint_params", n.total()}});
    std::printf("wrote %s/summary.json\n", dir.c_str());
    return 0;
}

int run(int argc, char** argv) {
    Cli cli("tint", "TinT: a simulator transformer that runs, back-propagates and fine-tunes a small auxiliary transformer stored in prefix tokens.");
    register_flags(cli);
    if (!cli.parse(argc, argv)) return 0;
    apply_threads(cli);
    Device dev = parse_device(cli.get("--device"));
    require_device(dev);
    if (dev != Device::cpu) fail("tint: the simulator runs on the CPU only; use --device cpu");
    const std::string sub = cli.args()[0];
    if (sub == "check") return cmd_check(cli);
    if (sub == "params") return cmd_params(cli);
    if (sub == "train") return cmd_train(cli);
    if (sub == "lm") return cmd_lm(cli);
    if (sub == "fewshot") return cmd_fewshot(cli);
    if (sub == "eps") return cmd_eps(cli);
    if (sub == "bench") return cmd_bench(cli);
    fail_usage("unknown subcommand '" + sub + "' (check | params | train | lm | fewshot | eps | bench)");
}

}  // namespace

int main(int argc, char** argv) { return cli_main(argc, argv, run); }
