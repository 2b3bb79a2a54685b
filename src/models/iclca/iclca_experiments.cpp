// iclca_experiments.cpp — the subcommands of the `iclca` binary; its flags are in src/iclca.cpp.
// iclca — kernel-attention LMs with RoPE and bias terms, and the exact conversion of an in-context prompt into
// those biases (spec/iclca.md). Subcommands:
//
//   iclca train    train a kernel LM (induction task or a byte-level text file); writes a checkpoint
//   iclca convert  --load CKPT --prompt TEXT|FILE --save CKPT2 : fold the prompt into the biases (exact)
//   iclca e1       exactness table: relative logit error prompted vs converted, fp32 and fp64, + no-ICL contrast
//   iclca e2       induction task: ICL accuracy with prompt / converted / neither
//   iclca e3       bias terms trained from scratch vs none, a few seeds (plot)
//   iclca e4       softmax GPT: approximate conversion with Performer (FAVOR+) features, error vs features
//   iclca bench    prompted vs converted inference cost over M; training-form throughput vs the softmax GPT over T
//
// Runs write to out/iclca/<sub>-<time>/ (or --out): log.csv / table.csv, PNG plots, summary.json.
#include <sys/stat.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "engine/fileio.h"
#include "data/text.h"
#include "engine/checkpoint.h"
#include "engine/cli.h"
#include "report/analysis.h"
#include "report/plot.h"
#include "engine/run.h"
#include "engine/provenance.h"
#include "layers/dispatch.h"
#include "models/gpt.h"
#include "models/gpt_infer.h"
#include "models/pretrained.h"
#include "models/iclca/iclca_convert.h"
#include "models/iclca/kernel_lm.h"
#include "models/iclca/iclaa.h"
#include "models/trainer.h"
#include "models/iclca/iclca_experiments.h"

namespace icl::iclca_cmd {

// Text -> token ids for a model of vocabulary V: the 52-letter induction vocabulary (a..z = 0..25, A..Z =
// 26..51; triggers are a..e) or bytes (V >= 256).
std::vector<int> tokenize(const std::string& text, int V) {
    std::vector<int> t;
    for (unsigned char ch : text) {
        if (V == INDUCTION_VOCAB) {
            if (ch >= 'a' && ch <= 'z') t.push_back(ch - 'a');
            else if (ch >= 'A' && ch <= 'Z') t.push_back(26 + ch - 'A');
            else if (ch == '\n' || ch == ' ') continue;
            else fail_usage(strfmt("--prompt: the 52-letter model only takes letters a-z A-Z, got byte %d", ch));
        } else if (V >= 256) {
            t.push_back(ch);
        } else {
            fail(strfmt("--prompt: no text tokenizer for a vocabulary of %d", V));
        }
    }
    return t;
}


// --device: every model of a subcommand lives there (the fp64 arms of e1 stay on the CPU: the CUDA backend is fp32).
static Device run_device(const Cli& cli) { return parse_device(cli.get("--device")); }

// ---- induction evaluation: accuracy at the scored positions (spec §7) -------------------------------
// Besides the accuracies, the logits themselves at the input positions: the converted model's against the
// prompted one's (the conversion is exact in real arithmetic: only fp32 rounding may separate them) and the
// un-prompted model's against the prompted one's (how much the prompt changes the predictions: the scale that
// makes the first number meaningful even where a model is still at chance). Both as max |Δ| / RMS of the logits.
struct IclAcc {
    long hit_icl = 0, hit_conv = 0, hit_none = 0, n = 0, hit_icl_all = 0, hit_conv_all = 0, n_all = 0;
    double conv_max_rel = 0, none_max_rel = 0;
};

IclAcc induction_eval(KernelLM<float>& m, int M, int N, int chains, uint64_t seed) {
    IclAcc r;
    Rng rng(seed);
    std::vector<float> orig = m.s.to_host(m.s.params, 0, m.s.ptable.total);
    const int V = m.cfg.V;
    auto argmax = [&](const std::vector<float>& lg, int row) {
        const float* p = &lg[(size_t)row * V];
        return (int)(std::max_element(p, p + V) - p);
    };
    for (int c = 0; c < chains; c++) {
        InductionSeq s = induction_sequence(M + N, rng);
        std::vector<int> all(s.tokens.begin(), s.tokens.begin() + M + N), prompt(all.begin(), all.begin() + M), input(all.begin() + M, all.end());
        std::vector<int> sc = induction_scored(s, M), sca = induction_scored(s, M, true);
        std::vector<float> lp = kernel_lm_logits(m, all, 0);
        std::vector<float> ln = kernel_lm_logits(m, input, 0);
        m.s.upload(m.s.params, 0, orig.data(), orig.size());
        iclca_convert(m, prompt, 0);
        std::vector<float> lc = kernel_lm_logits(m, input, 0);
        m.s.upload(m.s.params, 0, orig.data(), orig.size());  // reset (spec §6.9)
        double ss = 0, dc = 0, dn = 0;
        for (size_t i = 0; i < lc.size(); i++) {
            const double p = lp[(size_t)M * V + i];
            ss += p * p;
            dc = std::max(dc, std::fabs((double)lc[i] - p));
            dn = std::max(dn, std::fabs((double)ln[i] - p));
        }
        const double rms = std::sqrt(ss / std::max<size_t>(lc.size(), 1));
        r.conv_max_rel = std::max(r.conv_max_rel, dc / rms);
        r.none_max_rel = std::max(r.none_max_rel, dn / rms);
        for (int t : sc) {
            int target = s.tokens[t + 1];
            r.hit_icl += argmax(lp, t) == target;
            r.hit_conv += argmax(lc, t - M) == target;
            r.hit_none += argmax(ln, t - M) == target;
            r.n++;
        }
        for (int t : sca) {
            int target = s.tokens[t + 1];
            r.hit_icl_all += argmax(lp, t) == target;
            r.hit_conv_all += argmax(lc, t - M) == target;
            r.n_all++;
        }
    }
    return r;
}

// In-sequence accuracy at the SECOND occurrence of each trigger (the first time its commitment can be used;
// the training-time metric). Later occurrences are not scored: a trigger committed to a trigger can lock a
// chain into a loop (a→b→a→…, allowed by the task), and scoring every step of a loop rewards plain copying.
double induction_train_acc(KernelLM<float>& m, const Batch& bt) {
    m.forward(bt);
    std::vector<float> lg = m.outputs();
    long hit = 0, n = 0;
    for (int b = 0; b < bt.B; b++) {
        int seen[INDUCTION_TRIGGERS] = {0};
        for (int t = 0; t < bt.T; t++) {
            int tok = bt.tokens[(size_t)b * bt.T + t];
            if (tok >= INDUCTION_TRIGGERS) continue;
            if (seen[tok] == 1) {
                const float* p = &lg[((size_t)b * bt.T + t) * m.cfg.V];
                hit += (int)(std::max_element(p, p + m.cfg.V) - p) == bt.targets[(size_t)b * bt.T + t];
                n++;
            }
            seen[tok]++;
        }
    }
    return n ? (double)hit / n : NAN;
}

TrainResult train_induction(KernelLM<float>& m, const Cli& cli, const std::string& dir, uint64_t seed, int steps, int T,
                            const std::string& save, const std::string& title) {
    const int B = (int)cli.get_int("--batch", 1, 1 << 20);
    TrainOptions o = train_options(cli, "iclca", dir, (int64_t)B * T, steps);  // models/trainer.h
    o.save_path = save;
    o.eval_columns = {"val_loss", "val_icl_acc"};
    o.title = title;
    Rng train_rng = Rng(seed).split(101), val_rng = Rng(seed).split(202);
    o.streams.streams = {{"data", &train_rng}};
    Batch val = induction_batch(B, T, val_rng);
    return train(m, o, [&](int) { return induction_batch(B, T, train_rng); },
                 [&]() {
                     double loss = m.forward(val);
                     return std::map<std::string, double>{{"val_loss", loss}, {"val_icl_acc", induction_train_acc(m, val)}};
                 });
}

// The kernel LM's config: from --resume's or --load's checkpoint (the architecture flags refused beside it), else from
// the flags. V > 0: the vocabulary the task needs.
static KernelLMConfig kernel_lm_config(const Cli& cli, int V, const std::string& task) {
    const std::string ck = architecture_checkpoint(cli);
    if (ck.empty()) return kernel_lm_config_from_cli(cli, V);
    CheckpointInfo ci = read_checkpoint_metadata(ck);
    if (ci.model != "kernel_lm") fail("checkpoint " + ck + " holds a '" + ci.model + "' model, not a kernel LM ('kernel_lm')");
    KernelLMConfig c = KernelLMConfig::from_json(checkpoint_config_json(ci));  // validated, bounded
    for (const char* f : {"--layers", "--width", "--heads", "--bias", "--eps"})
        if (cli.given(f)) fail_usage(std::string(f) + ": the architecture comes from the checkpoint " + ck + "; drop the flag");
    if (V > 0 && c.V != V) fail(strfmt("checkpoint %s: a vocabulary of %d does not fit --task %s (%d)", ck.c_str(), c.V, task.c_str(), V));
    return c;
}

// A converted checkpoint's input starts at position iclca_p0 (its metadata; 0 for any other checkpoint).
static int checkpoint_p0(const std::string& path, const KernelLMConfig& c) {
    CheckpointInfo ci = read_checkpoint_metadata(path);
    auto it = ci.metadata.find("iclca_p0");
    if (it == ci.metadata.end()) return 0;
    char* end = nullptr;
    const long p0 = std::strtol(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end || p0 < 0 || p0 >= c.maxT) fail("checkpoint " + path + ": its 'iclca_p0' is not a position");
    return (int)p0;
}

static int task_vocab(const std::string& task) { return task == "induction" ? INDUCTION_VOCAB : BYTE_VOCAB; }

// Token ids -> text: letters for the 52-token induction vocabulary, bytes otherwise (invalid UTF-8 shown escaped).
static std::string detokenize(const std::vector<int>& t, int V) {
    if (V != INDUCTION_VOCAB) return bytes_to_text(t.data(), (int)t.size());
    std::string s;
    for (int x : t) s += (char)(x < 26 ? 'a' + x : 'A' + x - 26);
    return s;
}

// --prompt: the text itself, or the contents of the file it names.
static std::string prompt_text(const Cli& cli) {
    std::string text = cli.get("--prompt");
    struct stat st;
    if (::stat(text.c_str(), &st) == 0) text = read_file(text, kMaxTextFileBytes, "--prompt file");  // no FIFO, bounded
    return text;
}

// ---- subcommands ---------------------------------------------------------------------------------------

int cmd_train(const Cli& cli) {
    const std::string task = cli.get_choice("--task", {"induction", "text"});
    const uint64_t seed = cli.get_seed();
    const int steps = (int)cli.get_int("--steps", 1, 100000000), T = (int)cli.get_int("--seq", 2, 1 << 20);
    const int B = (int)cli.get_int("--batch", 1, 1 << 20);
    if (task == "text" && !cli.has_value("--data")) fail_usage("--task text needs --data FILE");
    const KernelLMConfig c = kernel_lm_config(cli, task_vocab(task), task);
    const std::string dir = subcommand_run_dir(cli, "iclca", "train-" + task);
    const std::string save = cli.has_value("--save") ? cli.get("--save") : dir + "/model.safetensors";
    KernelLM<float> m(c, run_device(cli), seed);
    if (cli.has_value("--load")) m.s.load(cli.get("--load"));  // --resume loads in train()
    std::fprintf(stderr, "iclca train: %s, %lld parameters (L=%d C=%d NH=%d), T=%d, batch %d, %d steps, run dir %s\n", task.c_str(),
                 (long long)c.num_params(), c.L, c.C, c.NH, T, B, steps, dir.c_str());
    TrainResult r;
    if (task == "induction") {
        r = train_induction(m, cli, dir, seed, steps, T, save, "kernel LM, induction");
    } else {
        TextData text = text_load(cli.get("--data"), 0.1, T);
        TrainOptions o = train_options(cli, "iclca", dir, (int64_t)B * T, steps);
        o.save_path = save;
        o.eval_columns = {"val_loss"};
        o.title = "kernel LM, text";
        Rng tr = Rng(seed).split(101), vr = Rng(seed).split(202);
        o.streams.streams = {{"data", &tr}};
        Batch val = text_batch(text.val, B, T, vr);
        r = train(m, o, [&](int) { return text_batch(text.train, B, T, tr); },
                  [&]() { return std::map<std::string, double>{{"val_loss", m.forward(val)}}; });
    }
    nlohmann::json summary = {{"binary", "iclca train"}, {"task", task}, {"model", c.to_json()}, {"params", c.num_params()},
                              {"flags", cli_json(cli.values())}, {"steps", r.steps_done}, {"final_train_loss", r.last_loss},
                              {"ms_per_step", r.ms_per_step}, {"tokens_per_s", r.tokens_per_s}, {"checkpoint", save}};
    for (auto& kv : r.last_eval) summary["final_" + kv.first] = kv.second;
    summary["provenance"] = provenance_json();
    write_run_summary(dir + "/summary.json", summary);
    std::printf("%s  (%.1f ms/step)\nwrote %s/{log.csv, loss.png, summary.json} and %s\n", final_line(r).c_str(), r.ms_per_step, dir.c_str(),
                save.c_str());
    return 0;
}

int cmd_eval(const Cli& cli) {
    if (!cli.has_value("--load")) fail_usage("eval needs --load CKPT (a kernel LM from iclca train or iclca convert)");
    const std::string task = cli.get_choice("--task", {"induction", "text"});
    if (task == "text" && !cli.has_value("--data")) fail_usage("--task text needs --data FILE");
    const uint64_t seed = cli.get_seed();
    const int T = (int)cli.get_int("--seq", 2, 1 << 20), B = (int)cli.get_int("--batch", 1, 1 << 20);
    const int nb = (int)cli.get_int("--eval-batches", 1, 1 << 20);
    const std::string path = cli.get("--load");
    const KernelLMConfig c = kernel_lm_config(cli, task_vocab(task), task);
    KernelLM<float> m(c, run_device(cli), seed);
    m.s.load(path);
    const int p0 = checkpoint_p0(path, c);
    if ((int64_t)p0 + T > c.maxT) fail_usage(strfmt("--seq %d: positions from %d would pass the model's max position %d", T, p0, c.maxT));
    TextData text;
    if (task == "text") text = text_load(cli.get("--data"), 0.1, T);
    Rng vr = Rng(seed).split(202);  // the validation stream of iclca train (its first batch is train's val batch)
    double loss = 0, acc = 0;
    for (int i = 0; i < nb; i++) {
        Batch bt = task == "induction" ? induction_batch(B, T, vr) : text_batch(text.val, B, T, vr);
        bt.pos.resize((size_t)B * T);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) bt.pos[(size_t)b * T + t] = p0 + t;  // a converted model's input starts at p0
        loss += m.forward(bt) / nb;
        if (task == "induction") acc += induction_train_acc(m, bt) / nb;
    }
    const std::string dir = subcommand_run_dir(cli, "iclca", "eval");
    nlohmann::json summary = {{"binary", "iclca eval"}, {"checkpoint", path}, {"task", task}, {"model", c.to_json()}, {"p0", p0},
                              {"batches", nb}, {"batch", B}, {"seq", T}, {"loss", loss}, {"flags", cli_json(cli.values())}};
    if (task == "induction") summary["icl_acc"] = acc;
    summary["provenance"] = provenance_json();
    write_run_summary(dir + "/summary.json", summary);
    std::printf("iclca eval %s on %s (%d x %d sequences of %d tokens, positions from %d): loss %.4f", path.c_str(), task.c_str(), nb, B, T, p0, loss);
    if (task == "induction") std::printf("  icl_acc %.4f (second occurrences of triggers)", acc);
    std::printf("\nwrote %s/summary.json\n", dir.c_str());
    return 0;
}

int cmd_generate(const Cli& cli) {
    if (!cli.has_value("--load")) fail_usage("generate needs --load CKPT (a kernel LM from iclca train or iclca convert)");
    if (!cli.has_value("--prompt")) fail_usage("generate needs --prompt TEXT|FILE (the text to continue)");
    const std::string path = cli.get("--load");
    const KernelLMConfig c = kernel_lm_config(cli, 0, "");
    KernelLM<float> m(c, run_device(cli), 1);
    m.s.load(path);
    const int p0 = checkpoint_p0(path, c);
    const std::vector<int> prompt = tokenize(prompt_text(cli), c.V);
    if (prompt.empty()) fail_usage("--prompt: no tokens to continue");
    const int n = (int)cli.get_int("--gen", 1, 1 << 20);
    if ((int64_t)p0 + (int64_t)prompt.size() + n > c.maxT) fail_usage("--gen: the continuation would pass the model's max position");
    const std::vector<int> out = m.generate(prompt, n, p0);
    std::fprintf(stderr, "iclca generate: %s, greedy, %zu prompt tokens from position %d, %d new\n", path.c_str(), prompt.size(), p0, n);
    std::printf("%s%s\n", detokenize(prompt, c.V).c_str(), detokenize(out, c.V).c_str());
    return 0;
}

int cmd_convert(const Cli& cli) {
    if (!cli.has_value("--load")) fail_usage("convert needs --load CKPT");
    if (!cli.has_value("--prompt")) fail_usage("convert needs --prompt TEXT|FILE");
    if (!cli.has_value("--save")) fail_usage("convert needs --save CKPT2");
    const KernelLMConfig c = kernel_lm_config(cli, 0, "");  // --load's architecture (architecture flags refused)
    const CheckpointInfo ci = read_checkpoint_metadata(cli.get("--load"));
    KernelLM<float> m(c, run_device(cli), 1);
    m.s.load(cli.get("--load"));
    std::vector<int> prompt = tokenize(prompt_text(cli), c.V);
    const int p0 = (int)cli.get_int("--p0", 0, c.maxT - 1);
    double t0 = now_seconds();
    iclca_convert(m, prompt, p0);
    double dt = now_seconds() - t0;
    int prev = 0;
    if (ci.metadata.count("iclca_prompt_tokens")) {
        const std::string& v = ci.metadata.at("iclca_prompt_tokens");
        char* end = nullptr;
        const long x = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end || x < 0 || x > (1l << 30)) fail("checkpoint " + cli.get("--load") + ": its 'iclca_prompt_tokens' is not a count");
        prev = (int)x;
    }
    m.s.save(cli.get("--save"), {{"iclca_prompt_tokens", std::to_string(prev + (int)prompt.size())}, {"iclca_p0", std::to_string(p0)},
                                 {"iclca_source", cli.get("--load")}});
    std::printf("converted a %zu-token prompt into the biases of %d layers x %d heads in %.1f ms; wrote %s\n"
                "(run the converted model with its input starting at position %d)\n",
                prompt.size(), c.L, c.NH, dt * 1e3, cli.get("--save").c_str(), p0);
    return 0;
}

struct SizeSpec { std::string name; int L, C, NH; };

// One E1 trial (spec E1): a random-init kernel LM whose bias terms start from random non-zero values — so the
// conversion must add to what is there, not just fill zeros — a random prompt of M and input of N tokens.
// b_KV ~ N(0, 1) and b_D ~ U(0, 1) (b_D positive like the Σφ(k) it stands for: the denominator stays positive).
template <typename real>
void e1_trial(const KernelLMConfig& c, Device dev, uint64_t seed, int M, int N, double& err_conv, double& err_noicl) {
    KernelLM<real> m(c, dev, seed);
    Rng r(seed * 31 + 7);
    for (int l = 0; l < c.L; l++)
        for (const char* b : {"attn.bkv", "attn.bd"}) {
            const std::string name = "h." + std::to_string(l) + "." + b;
            if (!m.s.ptable.has(name)) continue;  // --attention linear: no b_D
            std::vector<real> v(m.s.ptable.spec(name).numel());
            for (auto& x : v) x = b[6] == 'k' ? (real)r.normal() : (real)r.uniform(0, 1);
            m.s.upload(m.s.params, m.s.ptable.offset(name), v.data(), v.size());
        }
    std::vector<int> prompt(M), input(N);
    for (auto& t : prompt) t = (int)r.below(c.V);
    for (auto& t : input) t = (int)r.below(c.V);
    std::vector<int> all = prompt;
    all.insert(all.end(), input.begin(), input.end());
    std::vector<real> lp = kernel_lm_logits(m, all, 0);
    lp.erase(lp.begin(), lp.begin() + (size_t)M * c.V);
    std::vector<real> ln = kernel_lm_logits(m, input, 0);
    iclca_convert(m, prompt, 0);
    std::vector<real> lc = kernel_lm_logits(m, input, 0);
    err_conv = relerr(lp, lc);
    err_noicl = relerr(lp, ln);
}

// "--M 8-128": a range lo-hi (each trial draws from it) or one number.
std::pair<int, int> int_range(const Cli& cli, const std::string& name) {
    const std::string v = cli.get(name);
    const size_t dash = v.find('-');
    auto num = [&](const std::string& x) {
        char* end = nullptr;
        const long n = std::strtol(x.c_str(), &end, 10);
        if (x.empty() || *end || n < 1 || n > (1 << 16)) fail_usage(name + ": expected a number or a range lo-hi of numbers in [1, 65536], got '" + v + "'");
        return (int)n;
    };
    if (dash == std::string::npos) { const int n = num(v); return {n, n}; }
    const int lo = num(v.substr(0, dash)), hi = num(v.substr(dash + 1));
    if (lo > hi) fail_usage(name + ": the range '" + v + "' is empty (lo > hi)");
    return {lo, hi};
}

int cmd_e1(const Cli& cli) {
    const int trials = (int)cli.get_int("--trials", 1, 100000);
    const auto [Mlo, Mhi] = int_range(cli, "--M");
    const auto [Nlo, Nhi] = int_range(cli, "--N");
    // the paper's Table 1 sizes (its shapes are not given: spec/iclca.md §4.1); 200m and 2b are big-machine jobs
    std::vector<SizeSpec> all = {{"205k", 1, 128, 8}, {"2m", 10, 128, 8}, {"20m", 11, 384, 8}, {"200m", 16, 1024, 16}, {"2b", 16, 3200, 25}};
    std::vector<SizeSpec> sizes;
    for (const std::string& s : cli.get_list("--sizes")) {
        auto it = std::find_if(all.begin(), all.end(), [&](const SizeSpec& x) { return x.name == s; });
        if (it == all.end()) fail_usage("--sizes: unknown size '" + s + "' (205k, 2m, 20m, 200m, 2b)");
        sizes.push_back(*it);
    }
    {  // the attention flag checked before anything is written (the sizes' shapes suit both kinds)
        KernelLMConfig probe;
        probe.attn = cli.get("--attention");
        probe.validate();
    }
    std::string dir = subcommand_run_dir(cli, "iclca", "e1");
    TextOut csv(dir + "/table.csv", csv_provenance_comment());
    csv.printf("size,params,L,C,NH,attention,M,N,trials,relerr_fp32,relerr_fp32_ci95,relerr_fp64,relerr_fp64_ci95,relerr_noicl_fp32,relerr_noicl_fp32_ci95\n");
    const std::string mr = cli.get("--M"), nr = cli.get("--N");
    const bool linear = cli.get("--attention") == "linear";
    std::printf("E1 exactness: relerr = ||L_prompted[M:] - L_converted||_F / ||L_prompted[M:]||_F, mean over %d random pairs,\n"
                "M in [%d,%d], N in [%d,%d] drawn per pair, random non-zero initial biases b_KV ~ N(0,1)%s\n",
                trials, Mlo, Mhi, Nlo, Nhi, linear ? "" : ", b_D ~ U(0,1)");
    if (linear)
        std::printf("--attention linear: Theorem 4.1's case (phi = I, no denominator, no RoPE, no mask): exact for one layer (the 205k size,\n"
                    "L = 1); deeper models fold each layer from the prompt run alone, which the no-mask joint run does not reproduce\n");
    std::printf("%-6s %12s %20s %20s %16s   paper (fp32)\n", "size", "params", "fp32 (±95% CI)", "fp64", "no-ICL (fp32)");
    const std::map<std::string, std::string> paper = {{"205k", "2.9e-7"}, {"2m", "4.4e-7"}, {"20m", "8.3e-7"}, {"200m", "1.7e-6"}, {"2b", "4.3e-6"}};
    nlohmann::json rows = nlohmann::json::array();
    for (auto& sz : sizes) {
        KernelLMConfig c;
        c.L = sz.L; c.C = sz.C; c.NH = sz.NH; c.V = INDUCTION_VOCAB;
        c.attn = cli.get("--attention");
        c.validate();
        std::vector<double> v32, v64, vn;  // per pair: each pair (fresh weights, biases, tokens, lengths) is a replicate
        // fp64 is slow on big models: at most 3 trials above 10M parameters, none above 1B (its buffers alone: 64 GB)
        int t64 = c.num_params() > 1000000000 ? 0 : c.num_params() > 10000000 ? std::min(trials, 3) : trials;
        // trial t of --seed s draws from seed 1000 + t + (s − 1)·1000003 (--seed 1: 1000, 1001, …), so the trials
        // of different --seed values never share a draw
        const uint64_t s0 = 1000 + (cli.get_seed() - 1) * 1000003ull;
        Rng lengths(4242 + (cli.get_seed() - 1) * 7919ull);
        for (int t = 0; t < trials; t++) {
            const int M = Mlo + (int)lengths.below((uint64_t)(Mhi - Mlo + 1)), N = Nlo + (int)lengths.below((uint64_t)(Nhi - Nlo + 1));
            double a, b;
            e1_trial<float>(c, run_device(cli), s0 + t, M, N, a, b);
            v32.push_back(a);
            vn.push_back(b);
            if (t < t64) { e1_trial<double>(c, Device::cpu, s0 + t, M, N, a, b); v64.push_back(a); }
        }
        // mean ± t95(n−1)·se: a 95% interval of the mean over pairs ("±–" for a single pair)
        const MeanSE m32 = mean_se(v32), m64 = mean_se(v64), mn = mean_se(vn);
        auto hw = [](const MeanSE& m) { return m.n > 1 ? t95(m.n - 1) * m.se : 0.0; };
        auto ci = [&](const MeanSE& m) {
            return m.n == 0 ? std::string("not run") : m.n > 1 ? strfmt("%.3g ± %.2g", m.mean, hw(m)) : strfmt("%.3g ± –", m.mean);
        };
        std::printf("%-6s %12lld %20s %20s %16s   %s\n", sz.name.c_str(), (long long)c.num_params(), ci(m32).c_str(), ci(m64).c_str(), ci(mn).c_str(),
                    linear ? (c.L == 1 ? "exact (Thm 4.1)" : "not exact (L > 1)") : paper.at(sz.name).c_str());
        std::fflush(stdout);
        csv.printf("%s,%lld,%d,%d,%d,%s,%s,%s,%d,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g\n", sz.name.c_str(), (long long)c.num_params(), c.L, c.C, c.NH,
                   c.attn.c_str(), mr.c_str(),
                   nr.c_str(), trials, m32.mean, hw(m32), m64.mean, hw(m64), mn.mean, hw(mn));
        rows.push_back({{"size", sz.name}, {"attention", c.attn}, {"params", c.num_params()}, {"pairs", trials}, {"pairs_fp64", t64}, {"relerr_fp32", m32.mean},
                        {"relerr_fp32_ci95", hw(m32)}, {"relerr_fp64", m64.mean}, {"relerr_fp64_ci95", hw(m64)},
                        {"relerr_noicl", mn.mean}, {"relerr_noicl_ci95", hw(mn)}});
    }
    csv.commit();
    write_run_summary(dir + "/summary.json", nlohmann::json{{"experiment", "e1"}, {"rows", rows}, {"flags", cli_json(cli.values())}});
    std::printf("wrote %s/{table.csv,summary.json}\n", dir.c_str());
    return 0;
}

int cmd_e2(const Cli& cli) {
    const uint64_t seed = cli.get_seed();
    const int T = (int)cli.get_int("--seq", 4, 1 << 20), chains = (int)cli.get_int("--trials", 1, 1 << 20);
    // --seeds N: N models trained from seeds seed..seed+N−1 (with --load: one model, N independent evaluation draws);
    // every figure is then a mean ± 95% interval over them
    const int seeds = cli.given("--seeds") ? (int)cli.get_int("--seeds", 1, 100) : 1;
    std::string dir = subcommand_run_dir(cli, "iclca", "e2");
    const int M = T / 2, N = T - T / 2;
    std::vector<IclAcc> runs;
    KernelLMConfig cfg;
    for (int sd = 0; sd < seeds; sd++) {
        const std::string sub = seeds > 1 ? strfmt("%s/seed%d", dir.c_str(), sd + 1) : dir;
        if (seeds > 1) make_dirs(sub);
        KernelLM<float> m(kernel_lm_config(cli, INDUCTION_VOCAB, "induction"), run_device(cli), seed + sd);  // --load's architecture
        cfg = m.cfg;
        if (cli.has_value("--load")) {
            m.s.load(cli.get("--load"));
        } else {
            std::fprintf(stderr, "iclca e2: training a %lld-parameter kernel LM on the induction task first (T=%d, seed %llu)\n",
                         (long long)m.cfg.num_params(), T, (unsigned long long)(seed + sd));
            train_induction(m, cli, sub, seed + sd, (int)cli.get_int("--steps", 1), T, sub + "/model.safetensors", "E2 induction kernel LM");
        }
        runs.push_back(induction_eval(m, M, N, chains, seed + sd + 999));
    }
    auto pct = [](long h, long n) { return n ? 100.0 * h / n : NAN; };
    // one column per figure: its value per run, then mean ± t95·se over the runs
    auto column = [&](auto f) {
        std::vector<double> v;
        for (const IclAcc& r : runs) v.push_back(f(r));
        return v;
    };
    auto show = [&](const std::vector<double>& v) {
        const MeanSE m = mean_se(v);
        return m.n > 1 ? strfmt("%.2f%% ± %.2f", m.mean, t95(m.n - 1) * m.se) : strfmt("%.2f%%", m.mean);
    };
    const std::vector<double> icl = column([&](const IclAcc& r) { return pct(r.hit_icl, r.n); }),
                              conv = column([&](const IclAcc& r) { return pct(r.hit_conv, r.n); }),
                              none = column([&](const IclAcc& r) { return pct(r.hit_none, r.n); }),
                              icl_all = column([&](const IclAcc& r) { return pct(r.hit_icl_all, r.n_all); }),
                              conv_all = column([&](const IclAcc& r) { return pct(r.hit_conv_all, r.n_all); });
    long equal = 0;
    double conv_rel = 0, none_rel = 0;
    for (const IclAcc& r : runs) {
        equal += r.hit_icl == r.hit_conv;
        conv_rel = std::max(conv_rel, r.conv_max_rel);
        none_rel = std::max(none_rel, r.none_max_rel);
    }
    const std::string over = seeds == 1 ? "one seed" : strfmt("mean ± 95%% CI over %d %s", seeds, cli.has_value("--load") ? "evaluation draws" : "seeds");
    // each run draws its own chains (seed-dependent), so the number of scored positions can differ between runs
    long nlo = runs[0].n, nhi = runs[0].n;
    for (const auto& rr : runs) { nlo = std::min<long>(nlo, rr.n); nhi = std::max<long>(nhi, rr.n); }
    std::printf("E2 induction (M=%d prompt, N=%d input tokens, %d chains, %s scored positions per run; chance 1/52 = 1.92%%; %s)\n", M, N,
                chains, nlo == nhi ? std::to_string(nlo).c_str() : strfmt("%ld–%ld", nlo, nhi).c_str(), over.c_str());
    std::printf("  %-28s %18s %18s   paper\n", "model", "accuracy", "(all occ.)");
    std::printf("  %-28s %18s %18s   99.95%%\n", "M_old,ICL (prompted)", show(icl).c_str(), show(icl_all).c_str());
    std::printf("  %-28s %18s %18s   99.95%%\n", "M_new,noICL (converted)", show(conv).c_str(), show(conv_all).c_str());
    std::printf("  %-28s %18s %18s   2.23%%\n", "M_old,noICL (neither)", show(none).c_str(), "");
    std::printf("  correct predictions prompted = converted (spec §6.21) in %ld of %d runs\n", equal, seeds);
    std::printf("  logits at the input positions, max |Δ| / RMS over the runs: converted vs prompted %.2e (fp32 rounding), "
                "without the prompt vs prompted %.2e (the prompt's effect)\n", conv_rel, none_rel);
    nlohmann::json per = nlohmann::json::array();
    for (size_t i = 0; i < runs.size(); i++)
        per.push_back({{"seed", seed + i}, {"acc_prompted", icl[i]}, {"acc_converted", conv[i]}, {"acc_neither", none[i]},
                       {"correct_prompted", runs[i].hit_icl}, {"correct_converted", runs[i].hit_conv}});
    nlohmann::json j = {{"experiment", "e2"}, {"M", M}, {"N", N}, {"chains", chains}, {"scored", runs[0].n}, {"seeds", seeds},
                        {"acc_prompted", mean_se(icl).mean}, {"acc_converted", mean_se(conv).mean}, {"acc_neither", mean_se(none).mean},
                        {"acc_all_prompted", mean_se(icl_all).mean}, {"acc_all_converted", mean_se(conv_all).mean},
                        {"runs_prompted_equal_converted", equal}, {"runs", per},
                        {"logits_converted_vs_prompted_max_rel", conv_rel}, {"logits_unprompted_vs_prompted_max_rel", none_rel},
                        {"model", cfg.to_json()}, {"flags", cli_json(cli.values())}};
    write_run_summary(dir + "/summary.json", j);
    std::printf("wrote %s/summary.json\n", dir.c_str());
    return 0;
}

int cmd_e3(const Cli& cli) {
    const int seeds = (int)cli.get_int("--seeds", 1, 100), steps = (int)cli.get_int("--steps", 1), T = (int)cli.get_int("--seq", 2, 1 << 20);
    const bool replot = cli.get_int("--replot", 0, 1) == 1;
    if (replot && !cli.has_value("--out")) fail_usage("--replot 1 needs --out DIR, the folder of an earlier e3 run");
    std::string dir = subcommand_run_dir(cli, "iclca", "e3");
    auto sub_dir = [&](int bias, int sd) { return dir + strfmt("/%s-seed%d", bias ? "bias" : "nobias", sd + 1); };
    if (!replot)
        for (int bias = 1; bias >= 0; bias--)
            for (int sd = 0; sd < seeds; sd++) {
                KernelLMConfig c = kernel_lm_config_from_cli(cli, INDUCTION_VOCAB);
                c.bias = bias;
                // same seed for both arms: identical weights at init (the biases start at zero) and the same data
                KernelLM<float> m(c, run_device(cli), 1 + sd);
                make_dirs(sub_dir(bias, sd));
                train_induction(m, cli, sub_dir(bias, sd), 1 + sd, steps, T, "", strfmt("E3 %s seed %d", bias ? "bias" : "no bias", sd + 1));
            }
    // plots and summary from the runs' logs. Per-step training losses of single batches scatter by ±0.4 here, so
    // the loss plot shows each evaluation interval's mean train loss (and the fixed validation batch's loss).
    LinePlot loss, vloss, acc;
    loss.title = "E3: training loss (mean of each eval interval), bias terms vs none"; loss.xlabel = "step"; loss.ylabel = "train loss";
    vloss.title = "E3: validation loss, bias terms vs none"; vloss.xlabel = "step"; vloss.ylabel = "val loss";
    acc.title = "E3: in-context accuracy (val)"; acc.xlabel = "step"; acc.ylabel = "accuracy";
    nlohmann::json rows = nlohmann::json::array();
    // per arm (index 1 = bias, 0 = no bias), one value per seed: final train loss, final val ICL accuracy, emergence step
    std::vector<double> f_loss[2], f_acc[2], f_emerged[2];
    for (int bias = 1; bias >= 0; bias--)
        for (int sd = 0; sd < seeds; sd++) {
            CsvTable tab = read_csv(sub_dir(bias, sd) + "/log.csv");
            const std::vector<double>&step = tab.col("step"), &tl = tab.col("loss"), &vl = tab.col("val_loss"), &va = tab.col("val_icl_acc");
            std::string label = strfmt("%s s%d", bias ? "bias" : "no bias", sd + 1);
            Series ls{label, {}, {}, true}, vs{label, {}, {}, true}, as{label, {}, {}, true};
            double sum = 0;
            int cnt = 0;
            for (size_t i = 0; i < step.size(); i++) {
                if (std::isfinite(tl[i])) { sum += tl[i]; cnt++; }
                if (!std::isfinite(va[i])) continue;
                if (cnt) { ls.x.push_back(step[i]); ls.y.push_back(sum / cnt); }
                sum = 0;
                cnt = 0;
                vs.x.push_back(step[i]); vs.y.push_back(vl[i]);
                as.x.push_back(step[i]); as.y.push_back(va[i]);
            }
            ls.dashed = vs.dashed = as.dashed = !bias;
            loss.series.push_back(ls);
            vloss.series.push_back(vs);
            acc.series.push_back(as);
            // the induction head appears as a jump of the val ICL accuracy: the first evaluation at >= 90% dates it
            double emerged = NAN;
            for (size_t i = 0; i < as.x.size(); i++)
                if (as.y[i] >= 0.9) { emerged = as.x[i]; break; }
            const double final_loss = tl.empty() ? NAN : tl.back(), final_acc = as.y.empty() ? NAN : as.y.back();
            f_loss[bias].push_back(final_loss);
            f_acc[bias].push_back(final_acc);
            f_emerged[bias].push_back(emerged);
            rows.push_back({{"bias", bias}, {"seed", sd + 1}, {"final_loss", final_loss}, {"final_icl_acc", final_acc},
                            {"step_icl_acc_90", std::isfinite(emerged) ? nlohmann::json(emerged) : nlohmann::json(nullptr)}});
            std::printf("E3 %-8s seed %d: final train loss %.4f, val ICL acc %.4f, first eval with ICL acc >= 90%%: %s\n",
                        bias ? "bias" : "no-bias", sd + 1, final_loss, final_acc,
                        std::isfinite(emerged) ? strfmt("step %.0f", emerged).c_str() : "never");
        }
    // the arms over the seeds, and bias − no bias seed by seed (both arms of a seed start from the same weights
    // and see the same data, so the paired difference is the comparison). A run that never reaches 90% has no
    // emergence step and drops out of that row (its count shows in "n").
    auto n_of = [](const std::vector<double>& v) { return std::to_string(mean_se(v).n); };
    std::string md = strfmt("# iclca e3: bias terms vs none, %d seed(s) per arm, %d steps, T = %d\n\n"
                            "Mean ± the half-width of a 95%% interval (Student t over the seeds); paired = bias − no bias, same seed "
                            "(in how many seeds it is > 0).\n\n", seeds, steps, T);
    md += "| | bias | no bias | paired difference | n |\n|---|---|---|---|---|\n";
    nlohmann::json agg = nlohmann::json::object();
    auto row = [&](const char* label, const char* key, const std::vector<double>* v, const char* fmt) {
        const std::vector<double> d = paired_diff(v[1], v[0]);
        const std::string f = std::string("%+") + (fmt + 1);
        md += strfmt("| %s | %s | %s | %s (%s) | %s / %s |\n", label, mean_ci(v[1], fmt).c_str(), mean_ci(v[0], fmt).c_str(),
                     mean_ci(d, f.c_str()).c_str(), count_positive(d).c_str(), n_of(v[1]).c_str(), n_of(v[0]).c_str());
        const MeanSE b = mean_se(v[1]), nb = mean_se(v[0]), pd = mean_se(d);
        auto js = [](const MeanSE& m) {
            return m.n ? nlohmann::json({{"mean", m.mean}, {"ci95", ci95_half_width(m)}, {"n", m.n}}) : nlohmann::json(nullptr);
        };
        agg[key] = {{"bias", js(b)}, {"no_bias", js(nb)}, {"paired_bias_minus_no_bias", js(pd)}};
    };
    row("final training loss (last step)", "final_loss", f_loss, "%.4f");
    row("final validation ICL accuracy", "final_icl_acc", f_acc, "%.4f");
    row("first evaluation with ICL accuracy ≥ 90% (step)", "step_icl_acc_90", f_emerged, "%.0f");
    std::printf("\n%s", md.c_str());
    save_line_plot(dir + "/e3_loss.png", loss);
    save_line_plot(dir + "/e3_val_loss.png", vloss);
    save_line_plot(dir + "/e3_icl_acc.png", acc);
    write_file_atomic(dir + "/table.md", md + "\n_" + provenance_line() + "_\n");
    write_run_summary(dir + "/summary.json",
                      nlohmann::json{{"experiment", "e3"}, {"runs", rows}, {"aggregate", agg}, {"flags", cli_json(cli.values())}});
    std::printf("wrote %s/{table.md,e3_loss.png,e3_val_loss.png,e3_icl_acc.png,summary.json}\n", dir.c_str());
    return 0;
}

// ---- E4: approximate conversion for a softmax GPT (ICLAA with FAVOR+ features; spec §3, §5 E4) ------------
// GPT-2 weights are not obtainable here: the engine's own GPT stands in (random init with O(1) attention
// logits, or --load any `gpt` checkpoint, e.g. from train_gpt). Per trial: a random prompt X' (M tokens) and
// input X (N tokens); the prompted model runs [X';X] at positions 0..M+N−1. Compared at the input rows:
//   no-ICL   the plain GPT on X alone, positions restarted at 0 (paper-faithful) or offset by M
//   ICLAA    X alone + the prompt's Performer bias terms, positions restarted at 0 or offset by M
int cmd_e4(const Cli& cli) {
    // one prompt and input length for every trial (not e1's ranges); 40 and 20 unless given
    const int trials = (int)cli.get_int("--trials", 1, 100000);
    int M = cli.given("--M") ? (int)cli.get_int("--M", 1, 1 << 16) : 40, N = cli.given("--N") ? (int)cli.get_int("--N", 1, 1 << 16) : 20;
    std::vector<int64_t> ms = cli.get_int_list("--features", 1, 1 << 20);
    const bool orf = cli.get_int("--orf", 0, 1) != 0;
    const double astd = cli.get_double("--attn-std", 0, 100);
    const uint64_t seed = cli.get_seed();
    GPTConfig gc;
    std::string source = "random init";
    const bool hf = cli.has_value("--load-hf");
    if (hf || cli.has_value("--load")) {
        const std::string flag = hf ? "--load-hf" : "--load";
        if (hf && cli.has_value("--load")) fail_usage("--load-hf: not with --load (one source of weights)");
        for (const char* f : {"--layers", "--width", "--heads", "--attn-std"})
            if (cli.given(f)) fail_usage(std::string(f) + ": the GPT comes from " + flag + "; drop the flag");
        source = cli.get(flag);
        if (hf) {
            gc = pretrained_config(source);
        } else {
            CheckpointInfo ci = read_checkpoint_metadata(source);
            if (ci.model != "gpt") fail("--load: '" + source + "' holds a '" + ci.model + "' model, e4 needs a 'gpt' (softmax) checkpoint");
            gc = GPTConfig::from_json(checkpoint_config_json(ci));
        }
    } else {
        gc.L = (int)cli.get_int("--layers", 1, 1000);
        gc.C = (int)cli.get_int("--width", 2, 1 << 16);
        gc.NH = (int)cli.get_int("--heads", 1, 1 << 16);
        gc.V = 64;
        gc.maxT = std::max(256, M + N);
        gc.validate();
    }
    // the paper's form on a pretrained GPT: a text ICL prompt and the input after it, tokenized (spec/iclca.md §4.4)
    std::vector<int> text_prompt, text_input;
    if (cli.has_value("--prompt") || cli.has_value("--input")) {
        if (!hf) fail_usage("--prompt: e4 takes text only with --load-hf (a GPT with its tokenizer)");
        if (!cli.has_value("--prompt") || !cli.has_value("--input")) fail_usage("--prompt and --input: e4 needs both (the ICL prompt and what follows)");
        if (cli.given("--M") || cli.given("--N")) fail_usage("--M/--N: the lengths come from --prompt and --input");
        const TextCodec codec = model_codec(cli.get("--tokenizer"), source, gc.V, true);
        text_prompt = codec.encode(prompt_text(cli));
        text_input = codec.encode(cli.get("--input"));
        if (text_prompt.empty() || text_input.empty()) fail_usage("--prompt / --input: empty after tokenization");
        M = (int)text_prompt.size();
        N = (int)text_input.size();
    } else if (cli.given("--tokenizer")) {
        fail_usage("--tokenizer: e4 reads it only with --prompt and --input");
    }
    if (M + N > gc.maxT) fail_usage(strfmt("--M + --N = %d exceeds the GPT's max-T %d", M + N, gc.maxT));
    std::string dir = subcommand_run_dir(cli, "iclca", "e4");
    const int hs = gc.C / gc.NH;
    auto make_model = [&](int t) {
        GPT<float> g(gc, run_device(cli), seed + 1000 + t);
        if (hf) {
            pretrained_load(g, source);
        } else if (cli.has_value("--load")) {
            g.s.load(cli.get("--load"));
        } else {
            // q·k/√hs has std ≈ C σ² for LN'd inputs: σ = √(astd / C) gives logits of std ≈ astd
            Rng r(seed * 7 + 31 + t);
            std::vector<float> w((size_t)3 * gc.C * gc.C);
            for (int l = 0; l < gc.L; l++) {
                const std::string n = "h." + std::to_string(l) + ".attn.qkv.w";
                fill_normal(w.data(), w.size(), r, 0.0, std::sqrt(astd / gc.C));
                g.s.upload(g.s.params, g.s.ptable.offset(n), w.data(), w.size());
            }
        }
        return g;
    };
    // per trial (each a fresh model, prompt, input and feature draw: the replicates of the interval)
    std::vector<std::vector<double>> v_conv_off(ms.size()), v_conv_re(ms.size());
    std::vector<double> v_none_re, v_none_off;
    for (int t = 0; t < trials; t++) {
        GPT<float> g = make_model(t);
        Rng r(seed * 31 + 7 + t);
        std::vector<int> prompt(M), input(N);
        for (auto& x : prompt) x = (int)r.below(gc.V);
        for (auto& x : input) x = (int)r.below(gc.V);
        if (!text_prompt.empty()) {  // the same text every trial; the features are redrawn
            prompt = text_prompt;
            input = text_input;
        }
        std::vector<int> all = prompt;
        all.insert(all.end(), input.begin(), input.end());
        PerformerFeatures none(gc.L, gc.NH, hs, 1, FeatureKind::favor, orf, 0);
        std::vector<float> lp = iclaa_logits(g, none, nullptr, AttnSim::softmax, all, 0);
        lp.erase(lp.begin(), lp.begin() + (size_t)M * gc.V);
        v_none_re.push_back(relerr(lp, iclaa_logits(g, none, nullptr, AttnSim::softmax, input, 0)));
        v_none_off.push_back(relerr(lp, iclaa_logits(g, none, nullptr, AttnSim::softmax, input, M)));
        for (size_t k = 0; k < ms.size(); k++) {
            PerformerFeatures f(gc.L, gc.NH, hs, (int)ms[k], FeatureKind::favor, orf, seed * 1000003 + t * 7919 + ms[k]);
            IclaaBias b(f);
            iclaa_convert(g, f, b, AttnSim::softmax, prompt, 0);
            v_conv_off[k].push_back(relerr(lp, iclaa_logits(g, f, &b, AttnSim::softmax, input, M)));
            v_conv_re[k].push_back(relerr(lp, iclaa_logits(g, f, &b, AttnSim::softmax, input, 0)));
        }
        std::fprintf(stderr, "\re4: trial %d/%d", t + 1, trials);
    }
    std::fprintf(stderr, "\n");
    // mean ± t95(n−1)·se over the trials (a 95% interval; "±–" with one trial)
    auto ci = [](const std::vector<double>& v) {
        const MeanSE m = mean_se(v);
        return m.n > 1 ? strfmt("%.4g ± %.2g", m.mean, t95(m.n - 1) * m.se) : strfmt("%.4g ± –", m.mean);
    };
    const double e_none_re = mean_se(v_none_re).mean, e_none_off = mean_se(v_none_off).mean;
    std::vector<double> e_conv_off, e_conv_re;
    for (size_t k = 0; k < ms.size(); k++) {
        e_conv_off.push_back(mean_se(v_conv_off[k]).mean);
        e_conv_re.push_back(mean_se(v_conv_re[k]).mean);
    }
    std::printf("E4 ICLAA on a softmax GPT (%s; L=%d C=%d NH=%d hs=%d), %s features, M=%d N=%d, mean logit relerr ± 95%% CI over %d trials\n",
                source.c_str(), gc.L, gc.C, gc.NH, hs, orf ? "orthogonal (ORF)" : "i.i.d. (PRF)", M, N, trials);
    std::printf("  %-22s %20s %20s\n", "model", "restart@0", "offset@M");
    std::printf("  %-22s %20s %20s\n", "M_old,noICL", ci(v_none_re).c_str(), ci(v_none_off).c_str());
    TextOut csv(dir + "/table.csv", csv_provenance_comment());
    csv.printf("m,relerr_converted_restart,relerr_converted_offset,relerr_noicl_restart,relerr_noicl_offset\n");
    nlohmann::json rows = nlohmann::json::array();
    std::vector<double> xs;
    for (size_t k = 0; k < ms.size(); k++) {
        std::printf("  M_new,noICL m=%-9lld %20s %20s\n", (long long)ms[k], ci(v_conv_re[k]).c_str(), ci(v_conv_off[k]).c_str());
        csv.printf("%lld,%.6g,%.6g,%.6g,%.6g\n", (long long)ms[k], e_conv_re[k], e_conv_off[k], e_none_re, e_none_off);
        rows.push_back({{"m", ms[k]}, {"relerr_converted_restart", e_conv_re[k]}, {"relerr_converted_offset", e_conv_off[k]}});
        xs.push_back((double)ms[k]);
    }
    csv.commit();
    LinePlot p = make_line_plot(strfmt("E4: ICLAA (Performer) on a softmax GPT, M=%d N=%d", M, N), "random features m", "logit relerr vs prompted", true, true);
    p.series.push_back(Series{"converted, positions offset by M", xs, e_conv_off, true});
    Series sr{"converted, positions restart at 0", xs, e_conv_re, true};
    sr.dashed = true;
    p.series.push_back(sr);
    p.hlines = {{"no ICL, restart", e_none_re}, {"no ICL, offset", e_none_off}};
    save_line_plot(dir + "/e4_relerr.png", p);
    write_run_summary(dir + "/summary.json", nlohmann::json{{"experiment", "e4"}, {"source", source}, {"model", gc.to_json()}, {"M", M}, {"N", N}, {"trials", trials},
                                     {"text", !text_prompt.empty()},
                                     {"orf", orf}, {"relerr_noicl_restart", e_none_re}, {"relerr_noicl_offset", e_none_off}, {"rows", rows},
                                     {"flags", cli_json(cli.values())}});
    std::printf("wrote %s/{table.csv,e4_relerr.png,summary.json}\n", dir.c_str());
    return 0;
}

int cmd_bench(const Cli& cli) {
    std::string dir = subcommand_run_dir(cli, "iclca", "bench");
    KernelLMConfig c = kernel_lm_config_from_cli(cli, BYTE_VOCAB);
    const int gen = (int)cli.get_int("--gen", 1, 1 << 20);
    std::vector<int64_t> Ms = cli.get_int_list("--Ms", 0, 1 << 20), Ts = cli.get_int_list("--Ts", 2, 1 << 20);
    c.maxT = 1 << 20;
    KernelLM<float> m(c, run_device(cli), 1);
    std::vector<float> orig = m.s.to_host(m.s.params, 0, m.s.ptable.total);
    Rng r(1);
    std::printf("bench (a): inference per request = the prompt (M tokens) + %d greedy tokens; L=%d C=%d NH=%d, %s, %d threads\n", gen, c.L, c.C,
                c.NH, device_description(m.s.dev).c_str(), omp_get_max_threads());
    std::printf("  %6s | %14s %14s %12s | %14s %14s %12s | %10s\n", "M", "prompted ms/tok", "prefill ms", "act. MiB", "converted ms/tok",
                "state KiB", "act. MiB", "convert ms");
    TextOut csv(dir + "/inference.csv", csv_provenance_comment());
    csv.printf("M,gen,prompted_ms_per_token,prompted_prefill_ms,prompted_act_MiB,converted_ms_per_token,converted_act_MiB,state_KiB,convert_ms\n");
    const double state_kib = (double)c.L * c.NH * c.hs() * (c.hs() + 1) * 4 / 1024.0;
    for (int64_t M : Ms) {
        std::vector<int> prompt(M), input = {1};
        for (auto& t : prompt) t = (int)r.below(c.V);
        m.s.upload(m.s.params, 0, orig.data(), orig.size());
        // prompted: the prompt goes through the parallel form every request, then greedy decoding streams
        double act_p = 0;
        KernelLM<float>::Stream st = m.stream_start(0);
        if (M > 0) {
            kernel_lm_logits(m, prompt, 0);  // warm-up; activation memory of the parallel prefill
            act_p = (double)m.s.atable.total * 4 / (1 << 20);
            // the decoding state after the prompt (what a recurrent prefill leaves: biases + prompt sums)
            for (int t : prompt) m.stream_step(st, t);
        }
        // timed: parallel prefill of the prompt (every request pays it) + decoding
        double t0 = now_seconds();
        if (M > 0) kernel_lm_logits(m, prompt, 0);
        double t_prefill = now_seconds() - t0;
        t0 = now_seconds();
        std::vector<float> lg = m.stream_step(st, input[0]);
        for (int i = 1; i < gen; i++) lg = m.stream_step(st, (int)(std::max_element(lg.begin(), lg.end()) - lg.begin()));
        double t_dec = now_seconds() - t0;
        double prompted_ms = (t_prefill + t_dec) / gen * 1e3;
        // converted: once, then requests carry no prompt
        t0 = now_seconds();
        if (M > 0) iclca_convert(m, prompt, 0);
        double t_conv = now_seconds() - t0;
        t0 = now_seconds();
        KernelLM<float>::Stream st2 = m.stream_start(0);
        lg = m.stream_step(st2, input[0]);
        for (int i = 1; i < gen; i++) lg = m.stream_step(st2, (int)(std::max_element(lg.begin(), lg.end()) - lg.begin()));
        double conv_ms = (now_seconds() - t0) / gen * 1e3;
        const double act_c = 0;  // no prompt activations: decoding holds only the (bias-initialised) state
        std::printf("  %6lld | %14.3f %14.1f %12.2f | %14.3f %14.1f %12.2f | %10.1f\n", (long long)M, prompted_ms, t_prefill * 1e3, act_p, conv_ms,
                    state_kib, act_c, t_conv * 1e3);
        std::fflush(stdout);
        csv.printf("%lld,%d,%.4f,%.3f,%.3f,%.4f,%.3f,%.2f,%.3f\n", (long long)M, gen, prompted_ms, t_prefill * 1e3, act_p, conv_ms, act_c,
                     state_kib, t_conv * 1e3);
    }
    csv.commit();
    // (b) training-form throughput vs the softmax GPT, B = 1, forward + backward
    std::printf("bench (b): training step (forward+backward, B=1) tokens/s, kernel LM vs softmax GPT (same L, C, NH)\n");
    std::printf("  %6s | %13s %9s | %13s %9s | %9s %9s %9s %6s | %9s %9s %6s\n", "T", "kernel tok/s", "ms/step", "softmax tok/s",
                "ms/step", "kattn", "causal", "matmul", "ratio", "kattn bwd", "mm bwd", "ratio");
    std::printf("  (GF/s, forward: kattn = kernel attention with the nominal chunked-form flops (full 64x64 blocks), causal = the\n"
                "   same time with only the causal half of each block counted, matmul = all of the model's matmul forwards,\n"
                "   ratio = causal / matmul; backward: kernel attention (causal count) and matmul backwards, and their ratio)\n");
    TextOut csv2(dir + "/training.csv", csv_provenance_comment());
    csv2.printf("T,kernel_tokens_per_s,kernel_ms,gpt_tokens_per_s,gpt_ms,kattn_fwd_gflops,matmul_fwd_gflops,kattn_fwd_causal_gflops,"
                       "kattn_bwd_causal_gflops,matmul_bwd_gflops\n");
    for (int64_t T : Ts) {
        Rng br(2);
        Batch bt;
        bt.B = 1; bt.T = (int)T;
        for (int t = 0; t < T; t++) { bt.tokens.push_back((int)br.below(c.V)); bt.targets.push_back((int)br.below(c.V)); bt.mask.push_back(1); }
        KernelLM<float> km(c, run_device(cli), 1);
        GPTConfig gc;
        gc.L = c.L; gc.C = c.C; gc.NH = c.NH; gc.V = c.V; gc.maxT = (int)T;
        GPT<float> gm(gc, run_device(cli), 1);
        auto time_steps = [&](auto& model) {
            model.forward(bt); model.backward();  // warm-up (allocations)
            int reps = 0;
            double t0 = now_seconds();
            do { model.forward(bt); model.backward(); device_sync(model.s.dev); reps++; } while (now_seconds() - t0 < 1.0 && reps < 20);
            return (now_seconds() - t0) / reps;
        };
        double tk = time_steps(km), tg = time_steps(gm);
        // kernel attention vs the model's matmuls, forward and backward, from the op profiler
        op::op_profile().reset();
        op::op_profile().enabled = true;
        for (int i = 0; i < 3; i++) { km.forward(bt); km.backward(); }
        op::op_profile().enabled = false;
        const double hs = c.hs(), CHf = KA_CHUNK, nT = (double)T, head_tokens = 3.0 * c.L * c.NH * nT;  // 3 passes × layers × heads × tokens
        // flops per head and token of the chunked form. Forward: P (2·CH·m), P·V (2·CH·hs), Â·S (2·m·hs),
        // S += ĈᵀV (2·m·hs), with the full CH×CH block ("nominal": what a GEMM-per-product chunked form executes,
        // and the count of the earlier tables) or only its causal half ("causal": the useful work; the register-
        // tiled form executes about this, rounded up to its tiles). Backward, causal count: six triangular
        // products (tril(DnVᵀ), ·Ĉ, triu(VDnᵀ), ·Â, triu(ĈÂᵀ), ·Dn) and five m×hs ones (DnSᵀ, S update, VUᵀ, ĈU,
        // U update).
        const double t_k = op::op_profile().seconds["kernel attention fwd"], t_kb = op::op_profile().seconds["kernel attention bwd"];
        double kflops = head_tokens * (2 * CHf * hs + 2 * CHf * hs + 4 * hs * hs);
        double kflops_causal = head_tokens * ((CHf + 1) * hs + (CHf + 1) * hs + 4 * hs * hs);
        double kflops_bwd = head_tokens * (6 * (CHf + 1) * hs + 10 * hs * hs);
        double kgf = kflops / t_k / 1e9, kgf_causal = kflops_causal / t_k / 1e9, kgf_bwd = kflops_bwd / t_kb / 1e9;
        // all matmul flops of the model (qkv, proj, fc, fc-proj, LM head) over their time; backward = 2 × forward
        double mflops = 3.0 * nT * (c.L * 2.0 * (3 * c.C * c.C + c.C * c.C + 8.0 * c.C * c.C) + 2.0 * c.C * c.V);
        double mgf = mflops / op::op_profile().seconds["matmul fwd"] / 1e9, mgf_bwd = 2 * mflops / op::op_profile().seconds["matmul bwd"] / 1e9;
        std::printf("  %6lld | %13.0f %9.2f | %13.0f %9.2f | %9.1f %9.1f %9.1f %6.2f | %9.1f %9.1f %6.2f\n", (long long)T, T / tk, tk * 1e3,
                    T / tg, tg * 1e3, kgf, kgf_causal, mgf, kgf_causal / mgf, kgf_bwd, mgf_bwd, kgf_bwd / mgf_bwd);
        std::fflush(stdout);
        csv2.printf("%lld,%.1f,%.3f,%.1f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", (long long)T, T / tk, tk * 1e3, T / tg, tg * 1e3, kgf, mgf,
                     kgf_causal, kgf_bwd, mgf_bwd);
    }
    csv2.commit();
    std::printf("wrote %s/{inference.csv,training.csv}\n", dir.c_str());
    return 0;
}

}  // namespace icl::iclca_cmd
