// tint_studies.cpp — the paper's experiments as `tint` subcommands: lm (§7.1), fewshot (§7.2), eps (§5); the
// helpers they share with the other subcommands are in tint_experiments.cpp.
// tint — TinT (spec/tint.md): a simulator transformer that runs, back-propagates and fine-tunes a small OPT-like
// auxiliary transformer stored in its prefix tokens, in one forward pass. Subcommands:
//
//   tint check    the simulator vs oracle A (fp64 and fp32) and its k=1 update vs exact SGD (oracle B); exit 1 if off
//   tint params   the constructed simulator's parameter count; the §6 formula for OPT-125m … 2.7b beside Table 1
//   tint train    train the auxiliary model (the engine's GPT with ReLU or GELU) on a text file or the few-shot task
//   tint lm       language modelling (§7.1): perplexity before/after the simulated update vs dynamic evaluation
//   tint fewshot  few-shot classification (§7.2): Single/Multi, label/full-context loss; a synthetic labelled task, or
//                 with --load-hf a pretrained model on a labelled text dataset (--dataset) in the paper's templates
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
#include "report/analysis.h"
#include "report/plot.h"
#include "engine/run.h"
#include "engine/provenance.h"
#include "layers/layernorm.h"
#include "models/gpt.h"
#include "models/gpt_infer.h"
#include "models/tint/tint_sim.h"
#include "models/tint/tint_oracle.h"
#include "models/trainer.h"
#include "models/tint/tint_experiments.h"

namespace icl::tint_cmd {

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
    const std::vector<double> fracs = cli.get_double_list("--fracs", 0.01, 0.99);
    const std::vector<double> etas = cli.has_value("--etas") ? cli.get_double_list("--etas", 0, 1e6) : std::vector<double>{1e-5, 3e-5, 1e-4, 3e-4, 1e-3};
    if (fracs.empty()) fail_usage("--fracs: empty list");
    const GPTConfig g0 = planned_aux_config(cli, "text");
    const std::vector<Budget> bud = budgets(cli, g0.L);
    const TintConfig c = tint_config(cli, g0);
    const int n_test = (int)cli.get_int("--windows", 1, 1 << 20), n_dev = (int)cli.get_int("--dev-windows", 1, 1 << 20);
    const TextData text = aux_text(cli, g0);
    // non-overlapping windows of the validation text: dev first, then test
    const int avail = (int)(text.val.size() / g0.maxT);
    if (avail < n_dev + n_test)
        fail(strfmt("lm: the validation text holds %d windows of %d bytes; asked for %d dev + %d test", avail, g0.maxT, n_dev, n_test));
    std::string dir = subcommand_run_dir(cli, "tint", "lm");
    GPT<float> aux = load_or_train(cli, "text", dir, &text);
    const GPTConfig& g = aux.cfg;
    const int T = g.maxT, V = g.V;
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
            TintOutput<float> o = Tint<float>(cc, sim_device(cli)).run(aux, in, k, s);
            return std::make_pair(ppl_of(o.logits0, in, ntr), ppl_of(o.logits1, in, ntr));
        }
        std::vector<float> l0, l1;
        for (int b = 0; b < in.B; b++) {
            OracleOutput<float> B = oracle_b(aux, tint_batch(in, b), eta, k, s, method == "dyn-all", c.ln_gamma);
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
    TextOut csv(dir + "/table.csv", csv_provenance_comment());
    csv.printf("method,k,s,frac,eta,ppl_dev,ppl_test,ppl_vanilla_test\n");
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
                csv.printf("%s,%d,%d,%.2f,%g,%.5f,,\n", a.method.c_str(), a.b.k, a.b.s, frac, eta, p);
                if (p < best) { best = p; best_eta = eta; }
            }
            auto pt = evaluate(a.method, test, a.b.k, a.b.s, best_eta, ntr);
            van = pt.first;
            const std::string label = a.method + strfmt(" (%d,%d)", a.b.k, a.b.s);
            table[label].push_back(pt.second);
            csv.printf("%s,%d,%d,%.2f,%g,%.5f,%.5f,%.5f\n", a.method.c_str(), a.b.k, a.b.s, frac, best_eta, best, pt.second, pt.first);
            csv.commit();
            jrows.push_back({{"method", a.method}, {"k", a.b.k}, {"s", a.b.s}, {"frac", frac}, {"eta", best_eta}, {"ppl_test", pt.second},
                             {"ppl_vanilla", pt.first}});
            done++;
            const double el = now_seconds() - t0;
            std::fprintf(stderr, "  [%d/%d] frac %.2f %-14s eta %-6g test ppl %.4f (vanilla %.4f)  elapsed %.0fs eta %.0fs\n", done, total, frac,
                         label.c_str(), best_eta, pt.second, pt.first, el, el / done * (total - done));
        }
        vanilla.push_back(van);
    }
    csv.commit();
    std::printf("\nperplexity on the test part of %d windows (%s; lower is better), by training fraction:\n\n  %-20s", n_test,
                cli.has_value("--load-hf") ? "GPT-2 tokens" : "bytes", "");
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
    LinePlot p = make_line_plot("tint lm: test perplexity change after the update, vs vanilla", "training fraction of each window", "perplexity change (%)");
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

// One few-shot episode: demonstrations, then the evaluation example, each ending in its label token.
struct Episode {
    std::vector<FewshotExample> demos;
    FewshotExample eval;
    std::vector<int> label_tok;  // class c's label token in this episode
    std::vector<int> sep;        // Multi format: the tokens between two examples
    std::vector<int> sfc;        // the content-free prompt of the calibration (the label token follows)
    int eval_line = 0;           // text task: the evaluation example's line in its file
};

// The synthetic task: new demos and a coin for the label words in every episode. The words are NEW0/NEW1 (never
// seen in pretraining), or with `pretrained_words` LABEL0/LABEL1 (--labels flip): then the coin keeps the pretrained
// mapping in half of the episodes and swaps it in the other half, where the demonstrations contradict the model.
Episode make_episode(int n_demos, bool pretrained_words, Rng& rng) {
    Episode e;
    const int flip = (int)rng.below(2);
    const int w0 = pretrained_words ? FS_LABEL0 : FS_NEW0;
    std::vector<int> cls;
    for (int i = 0; i < n_demos; i++) cls.push_back(i % 2);
    for (int i = n_demos - 1; i > 0; i--) std::swap(cls[i], cls[rng.below(i + 1)]);
    // the label words: w0 + (class XOR flip)
    for (int c : cls) e.demos.push_back(fewshot_example(c, w0 + (c ^ flip), rng));
    const int c = (int)rng.below(2);
    e.eval = fewshot_example(c, w0 + (c ^ flip), rng);
    e.label_tok = {w0 + flip, w0 + (1 ^ flip)};
    e.sep = {FS_SEP};
    e.sfc = {FS_MARK};
    return e;
}

// The text task (--dataset, a pretrained model; spec §7.2): one set of n_demos demonstrations per seed (class i % C
// for the i-th, drawn without replacement, then shuffled), and class-balanced evaluation examples (the i-th of class
// i % C) drawn without replacement from --eval-data, else from the dataset's lines not used as demonstrations.
// Tokens: each example's prompt (before + text + after) encoded as one text, then its label word's single token;
// demonstrations joined by the separator's own tokens; no BOS token.
struct TextEpisodes {
    FewshotTemplate tmpl;
    std::vector<int> demo_lines, dev_lines, test_lines;
    std::vector<Episode> dev, test;
};

TextEpisodes text_episodes(const Cli& cli, const TextCodec& codec, int n_demos, int n_dev, int n_test, Rng& rng) {
    TextEpisodes te;
    te.tmpl = fewshot_template(cli.get("--template"), cli.has_value("--label-words") ? cli.get_list("--label-words") : std::vector<std::string>{});
    const int C = (int)te.tmpl.labels.size();
    std::vector<int> label_tok;
    for (const std::string& w : te.tmpl.labels) {
        std::vector<int> ids = codec.encode(w);
        if (ids.size() != 1)
            fail_usage(strfmt("--template %s: the label word %s is %zu tokens of this tokenizer; TinT reads one label token (choose --label-words "
                              "that are single tokens)", te.tmpl.name.c_str(), quote_text(w).c_str(), ids.size()));
        label_tok.push_back(ids[0]);
    }
    const std::string path = cli.get("--dataset");
    const std::vector<LabeledText> data = read_labeled_text(path, C);
    const bool own_eval = cli.has_value("--eval-data");
    const std::vector<LabeledText> eval_data = own_eval ? read_labeled_text(cli.get("--eval-data"), C) : std::vector<LabeledText>{};
    // pools of example indices per class
    auto pools = [&](const std::vector<LabeledText>& d) {
        std::vector<std::vector<int>> p(C);
        for (int i = 0; i < (int)d.size(); i++) p[d[i].cls].push_back(i);
        return p;
    };
    std::vector<std::vector<int>> pool = pools(data);
    auto draw = [&](std::vector<std::vector<int>>& p, int cls, const std::string& what, const std::string& file) {
        if (p[cls].empty()) fail(strfmt("%s: not enough examples of class %d for %s (class-balanced sampling)", file.c_str(), cls, what.c_str()));
        const size_t j = rng.below(p[cls].size());
        const int i = p[cls][j];
        p[cls].erase(p[cls].begin() + (long)j);
        return i;
    };
    std::vector<int> demo_idx;
    for (int i = 0; i < n_demos; i++) demo_idx.push_back(draw(pool, i % C, strfmt("%d demonstrations", n_demos), path));
    for (int i = n_demos - 1; i > 0; i--) std::swap(demo_idx[i], demo_idx[rng.below(i + 1)]);
    std::vector<std::vector<int>> epool = own_eval ? pools(eval_data) : pool;
    const std::vector<LabeledText>& ed = own_eval ? eval_data : data;
    const std::string efile = own_eval ? cli.get("--eval-data") : path;
    auto example = [&](const LabeledText& x) {
        FewshotExample f;
        f.cls = x.cls;
        f.tokens = codec.encode(te.tmpl.before + x.text + te.tmpl.after);
        f.tokens.push_back(label_tok[x.cls]);
        return f;
    };
    Episode base;
    for (int i : demo_idx) {
        base.demos.push_back(example(data[i]));
        te.demo_lines.push_back(data[i].line);
    }
    base.label_tok = label_tok;
    base.sep = codec.encode(te.tmpl.sep);
    base.sfc = codec.encode(te.tmpl.after);
    for (int i = 0; i < n_dev + n_test; i++) {
        const int k = draw(epool, i % C, strfmt("%d dev + %d test examples", n_dev, n_test), efile);
        Episode e = base;
        e.eval = example(ed[k]);
        e.eval_line = ed[k].line;
        (i < n_dev ? te.dev : te.test).push_back(e);
        (i < n_dev ? te.dev_lines : te.test_lines).push_back(ed[k].line);
    }
    return te;
}

// The TinT input of an episode in a format, with the position (`read`) whose logits predict the eval label.
// Single: demos and eval as separate segments (block ICL mask, positions reset); Multi: joined by the separator
// (plain ICL). Training tokens: everything except the eval label. Label-only loss: only the demos' label predictions.
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
        if (sep)
            for (int t : e.sep) {
                in.ids.push_back(t);
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
            bt.tokens.push_back(in_seg ? in.ids[t] : 0);  // padding: any token (causal, masked out of the loss)
            bt.targets.push_back(in_seg && t + 1 < in.T ? in.ids[t + 1] : 0);
            bt.mask.push_back(in_seg && t + 1 < starts[s + 1] ? (float)m[t] : 0.0f);
        }
    return bt;
}

int cmd_fewshot(const Cli& cli) {
    // every flag is checked before the (possibly long) training of the auxiliary model
    const uint64_t seed = cli.get_seed();
    const int n_demos = (int)cli.get_int("--demos", 1, 256), n_test = (int)cli.get_int("--episodes", 1, 1 << 20),
              n_dev = (int)cli.get_int("--dev-episodes", 1, 1 << 20);
    const bool text_task = cli.has_value("--dataset");
    if (cli.has_value("--load-hf") && !text_task)
        fail_usage("--load-hf: tint fewshot with a pretrained model needs --dataset FILE (LABEL<TAB>TEXT lines; see --help)");
    if (text_task && !cli.has_value("--load-hf")) fail_usage("--dataset: the text task needs a pretrained model (--load-hf DIR)");
    if (!text_task)
        for (const char* f : {"--eval-data", "--label-words", "--tokenizer"})
            if (cli.given(f)) fail_usage(std::string(f) + ": only with --dataset (the text task of a pretrained model)");
    if (!text_task && cli.given("--template")) fail_usage("--template: only with --dataset (the text task of a pretrained model)");
    const bool flip_words = cli.get_choice("--labels", {"new", "flip"}) == "flip";
    if (text_task && cli.given("--labels")) fail_usage("--labels: only for the synthetic task (the text task's words come from --template / --label-words)");
    const std::vector<double> etas = cli.has_value("--etas") ? cli.get_double_list("--etas", 0, 1e6) : std::vector<double>{3e-3, 1e-2, 3e-2, 1e-1, 3e-1};
    const GPTConfig g0 = planned_aux_config(cli, "fewshot");
    const std::vector<Budget> bud = budgets(cli, g0.L);
    const TintConfig c = tint_config(cli, g0);
    Rng dr = Rng(seed).split(505), tr = Rng(seed).split(606);
    std::vector<Episode> dev, test;
    TextEpisodes te;
    if (text_task) {
        const TextCodec codec = model_codec(cli.get("--tokenizer"), cli.get("--load-hf"), g0.V, true);
        te = text_episodes(cli, codec, n_demos, n_dev, n_test, dr);
        dev = te.dev;
        test = te.test;
    } else {
        for (int i = 0; i < n_dev; i++) dev.push_back(make_episode(n_demos, flip_words, dr));
        for (int i = 0; i < n_test; i++) test.push_back(make_episode(n_demos, flip_words, tr));
    }
    for (auto* set : {&dev, &test})
        for (const Episode& e : *set) {
            int r0;
            TintInput m = episode_input(e, false, true, r0);
            if (m.T > g0.maxT)
                fail_usage(strfmt("--demos %d: a Multi-format episode has %d tokens > the model's %d positions; use fewer --demos%s", n_demos, m.T,
                                  g0.maxT, text_task ? " or shorter texts" : " or a longer --seq"));
        }
    const int C = (int)test[0].label_tok.size();
    std::string dir = subcommand_run_dir(cli, "tint", "fewshot");
    GPT<float> aux = load_or_train(cli, "fewshot", dir, nullptr);
    const GPTConfig& g = aux.cfg;
    // the label words' scores at the read position: their logits (the same argmax as their log-probabilities)
    auto scores = [&](const float* z, const Episode& e) {
        std::vector<double> v;
        for (int t : e.label_tok) v.push_back((double)z[t]);
        return v;
    };
    // the predicted class: argmax of the scores (minus the content-free prompt's when calibrating)
    auto predict = [](const std::vector<double>& s, const std::vector<double>* cf) {
        int best = 0;
        for (int k = 1; k < (int)s.size(); k++)
            if (s[k] - (cf ? (*cf)[k] : 0.0) > s[best] - (cf ? (*cf)[best] : 0.0)) best = k;
        return best;
    };
    // synthetic task: does the model read the class? its zero-shot accuracy with the pretraining label words
    double reads_class = NAN;
    if (!text_task) {
        reads_class = 0;
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
    }
    // Accuracy of one arm on a set of episodes, before and after the update, uncalibrated and calibrated, and each
    // episode's scores. Calibration (spec §7.2, "icl_sfc"): the label words' scores on the episode minus their scores
    // on the same demos followed by the content-free prompt (a second pass, which also updates internally).
    struct Acc {
        double before = 0, after = 0, before_cal = 0, after_cal = 0;
        std::vector<std::vector<double>> s0, s1;  // [2·episode + (0 = episode, 1 = content-free prompt)] → C scores
    };
    auto run_arm = [&](const std::string& method, bool single, bool label_only, Budget b, double eta, const std::vector<Episode>& eps) {
        const int n = (int)eps.size(), V = g.V;
        Acc a;
        a.s0.assign(2 * n, {});
        a.s1.assign(2 * n, {});
        TintConfig cc = c;
        cc.eta = eta;
        Tint<float> tt(cc, sim_device(cli));
        // episodes in parallel, except the simulator's on the GPU (one stream, shared scratch); the oracles are host code
#pragma omp parallel for schedule(dynamic) if (tt.dev == Device::cpu || method != "tint")
        for (int job = 0; job < 2 * n; job++) {
            Episode e = eps[job / 2];
            if (job % 2) {  // the content-free prompt, then the label token
                const int lab = e.eval.tokens.back();
                e.eval.tokens = e.sfc;
                e.eval.tokens.push_back(lab);
            }
            int r;
            TintInput in = episode_input(e, single, label_only, r);
            if (method == "tint") {
                TintOutput<float> o = tt.run(aux, in, b.k, b.s);
                a.s0[job] = scores(o.logits0.data() + (size_t)r * V, e);
                a.s1[job] = scores(o.logits1.data() + (size_t)r * V, e);
            } else {
                GPT<float> m(g, Device::cpu, 1);  // a private copy per thread
                copy_params(m, aux);
                Batch bt = single ? single_batch(in) : tint_batch(in, 0);
                OracleOutput<float> B = oracle_b(m, bt, eta, b.k, b.s, method == "dyn-all", c.ln_gamma);
                // Single: the eval segment is the batch's last row
                const size_t row = single ? ((size_t)(bt.B - 1) * bt.T + (r - (in.T - (int)e.eval.tokens.size()))) * V : (size_t)r * V;
                a.s0[job] = scores(B.logits0.data() + row, e);
                a.s1[job] = scores(B.logits1.data() + row, e);
            }
        }
        for (int i = 0; i < n; i++) {
            const int want = eps[i].eval.cls;
            a.before += (predict(a.s0[2 * i], nullptr) == want) / (double)n;
            a.after += (predict(a.s1[2 * i], nullptr) == want) / (double)n;
            a.before_cal += (predict(a.s0[2 * i], &a.s0[2 * i + 1]) == want) / (double)n;
            a.after_cal += (predict(a.s1[2 * i], &a.s1[2 * i + 1]) == want) / (double)n;
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
    if (text_task)
        std::printf("tint fewshot: %s (template %s, %d classes), %d demonstrations (the same for every example of this seed), %d dev + %d test "
                    "examples;\nTinT K=%d D=%d eps=%g\n",
                    cli.get("--dataset").c_str(), te.tmpl.name.c_str(), C, n_demos, n_dev, n_test, c.K(), c.D(), c.eps);
    else
        std::printf("tint fewshot: %d demos per episode, %d dev + %d test episodes; %s\n"
                    "(chance = 50%%); TinT K=%d D=%d eps=%g\n"
                    "the auxiliary model reads the class: %.1f%% zero-shot with its pretraining label words\n",
                    n_demos, n_dev, n_test,
                    flip_words ? "the pretraining label words, swapped by a coin per episode (--labels flip)"
                               : "two label words never seen in pretraining, their mapping to the classes a coin per episode",
                    c.K(), c.D(), c.eps, 100 * reads_class);
    TextOut csv(dir + "/table.csv", csv_provenance_comment());
    csv.printf("method,format,loss,k,s,eta,acc_dev,acc_dev_cal,acc_test,acc_test_cal,acc_test_before,acc_test_before_cal\n");
    // every test episode's label-word scores of every arm (at its η chosen uncalibrated), for analysis and the tests
    TextOut ecsv(dir + "/episodes.csv", csv_provenance_comment());
    ecsv.printf("method,format,loss,k,s,eta,episode,line,class");
    for (const char* w : {"before", "after", "cf_before", "cf_after"})
        for (int k = 0; k < C; k++) ecsv.printf(",%s_%d", w, k);
    ecsv.printf("\n");
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
            csv.printf("%s,%s,%d,%d,%g,%.4f,%.4f,,,,\n", a.method.c_str(), fmt(a).c_str(), a.b.k, a.b.s, eta, d.after, d.after_cal);
            if (d.after > best) { best = d.after; eta_u = eta; }
            if (d.after_cal > best_cal) { best_cal = d.after_cal; eta_c = eta; }
        }
        Acc tu = run_arm(a.method, a.single, a.label, a.b, eta_u, test);
        Acc tc = eta_c == eta_u ? tu : run_arm(a.method, a.single, a.label, a.b, eta_c, test);
        if (a.single) zero = tu;
        else icl = tu;
        csv.printf("%s,%s,%d,%d,%g/%g,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", a.method.c_str(), fmt(a).c_str(), a.b.k, a.b.s, eta_u, eta_c, best, best_cal,
                     tu.after, tc.after_cal, tu.before, tu.before_cal);
        csv.commit();
        for (int i = 0; i < n_test; i++) {
            ecsv.printf("%s,%s,%d,%d,%g,%d,%d,%d", a.method.c_str(), fmt(a).c_str(), a.b.k, a.b.s, eta_u, i, test[i].eval_line, test[i].eval.cls);
            for (const std::vector<double>* v : {&tu.s0[2 * i], &tu.s1[2 * i], &tu.s0[2 * i + 1], &tu.s1[2 * i + 1]})
                for (double x : *v) ecsv.printf(",%.9g", x);
            ecsv.printf("\n");
        }
        ecsv.commit();
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
    csv.commit();
    std::printf("\naccuracy on %d test %s (η chosen on %d dev %s; ± = binomial standard error):\n\n", n_test, text_task ? "examples" : "episodes", n_dev,
                text_task ? "examples" : "episodes");
    std::printf("  %-31s | %-24s | %-24s\n", "", "uncalibrated", "calibrated");
    std::printf("  %-31s | %16.1f%%        | %16.1f%%\n  %-31s | %16.1f%%        | %16.1f%%\n", "zero-shot (eval example alone)", 100 * zero.before,
                100 * zero.before_cal, "vanilla ICL (Multi, no update)", 100 * icl.before, 100 * icl.before_cal);
    for (auto& l : lines) std::printf("%s\n", l.c_str());
    nlohmann::json sum = {{"subcommand", "fewshot"}, {"zero_shot", zero.before}, {"zero_shot_cal", zero.before_cal}, {"icl", icl.before},
                          {"icl_cal", icl.before_cal}, {"rows", jrows}, {"aux", g.to_json()}};
    if (text_task)
        sum["text_task"] = {{"dataset", cli.get("--dataset")}, {"eval_data", cli.get("--eval-data")}, {"template", te.tmpl.name},
                            {"label_words", te.tmpl.labels}, {"label_tokens", test[0].label_tok}, {"demo_lines", te.demo_lines},
                            {"dev_lines", te.dev_lines}, {"test_lines", te.test_lines}};
    else
        sum["reads_class"] = reads_class;
    write_summary(dir, cli, sum);
    std::printf("\nwrote %s/{table.csv, episodes.csv, summary.json}\n", dir.c_str());
    return 0;
}

// ---- --seeds: one table over the seeds ---------------------------------------------------------------------

int aggregate_seeds(const Cli& cli, const std::string& sub, const std::string& dir, const std::vector<std::string>& runs) {
    std::vector<nlohmann::json> js;
    for (const std::string& r : runs) js.push_back(nlohmann::json::parse(read_file(r + "/summary.json", kMaxTextFileBytes, "run summary")));
    const int n = (int)runs.size();
    // "mean ± half-width" in the format f (the half-width without a trailing %)
    auto ci = [](const std::vector<double>& v, double scale, const char* f) {
        const MeanSE m = mean_se(v);
        std::string g = f;
        if (g.size() > 2 && g.substr(g.size() - 2) == "%%") g.resize(g.size() - 2);
        if (g.find('+') != std::string::npos) g.erase(g.find('+'), 1);
        return strfmt(f, scale * m.mean) + (m.n > 1 ? " ± " + strfmt(g.c_str(), scale * t95(m.n - 1) * m.se) : std::string(" ± –"));
    };
    // the rows of one arm, keyed by the arm's description, one value per seed (every run has the same arms)
    std::map<std::string, std::vector<const nlohmann::json*>> rows;
    std::vector<std::string> order;
    auto key_of = [&](const nlohmann::json& r) {
        std::string k = r["method"].get<std::string>() + strfmt(" (%d,%d)", r["k"].get<int>(), r["s"].get<int>());
        if (sub == "lm") k += strfmt(" frac %.2f", r["frac"].get<double>());
        else k += " " + r["format"].get<std::string>() + " " + r["loss"].get<std::string>();
        return k;
    };
    for (const nlohmann::json& j : js)
        for (const nlohmann::json& r : j["rows"]) {
            const std::string k = key_of(r);
            if (!rows.count(k)) order.push_back(k);
            rows[k].push_back(&r);
        }
    std::string md = strfmt("# tint %s over %d seeds (mean ± 95%% CI, Student t over the seeds)\n\n", sub.c_str(), n);
    nlohmann::json out = nlohmann::json::array();
    auto col = [&](const std::string& k, const char* f) {
        std::vector<double> v;
        for (const nlohmann::json* r : rows[k]) v.push_back((*r)[f].get<double>());
        return v;
    };
    if (sub == "lm") {
        md += "| arm | test perplexity | vanilla | change vs vanilla (paired, %) |\n|---|---|---|---|\n";
        for (const std::string& k : order) {
            const std::vector<double> p = col(k, "ppl_test"), v = col(k, "ppl_vanilla");
            std::vector<double> rel;
            for (size_t i = 0; i < p.size(); i++) rel.push_back(100 * (p[i] / v[i] - 1));
            md += "| " + k + " | " + ci(p, 1, "%.4f") + " | " + ci(v, 1, "%.4f") + " | " + ci(rel, 1, "%+.3f") + " |\n";
            out.push_back({{"arm", k}, {"seeds", (int)p.size()}, {"ppl_test", mean_se(p).mean}, {"ppl_vanilla", mean_se(v).mean},
                           {"change_pct", mean_se(rel).mean}, {"change_pct_ci95", p.size() > 1 ? t95((int)p.size() - 1) * mean_se(rel).se : NAN}});
        }
    } else {
        std::vector<double> zero, icl;
        for (const nlohmann::json& j : js) {
            zero.push_back(j["zero_shot"].get<double>());
            icl.push_back(j["icl"].get<double>());
        }
        md += "zero-shot " + ci(zero, 100, "%.1f%%") + ", vanilla ICL " + ci(icl, 100, "%.1f%%") + "\n\n";
        md += "| arm | accuracy | calibrated | vs vanilla ICL (paired, points) | TinT − dyn. eval (paired, points) |\n|---|---|---|---|---|\n";
        for (const std::string& k : order) {
            const std::vector<double> a = col(k, "acc_test"), c = col(k, "acc_test_cal");
            std::vector<double> d_icl, d_dyn;
            for (size_t i = 0; i < a.size(); i++) d_icl.push_back(a[i] - icl[i]);
            std::string vs_dyn = "";
            const std::string twin = k.rfind("tint ", 0) == 0 ? "dyn " + k.substr(5) : "";
            if (!twin.empty() && rows.count(twin)) {
                const std::vector<double> b = col(twin, "acc_test");
                for (size_t i = 0; i < a.size(); i++) d_dyn.push_back(a[i] - b[i]);
                vs_dyn = ci(d_dyn, 100, "%+.1f");
            }
            md += "| " + k + " | " + ci(a, 100, "%.1f%%") + " | " + ci(c, 100, "%.1f%%") + " | " + ci(d_icl, 100, "%+.1f") + " | " + vs_dyn + " |\n";
            out.push_back({{"arm", k}, {"seeds", (int)a.size()}, {"acc_test", mean_se(a).mean}, {"acc_test_cal", mean_se(c).mean},
                           {"vs_icl_points", 100 * mean_se(d_icl).mean}});
        }
    }
    md += "\nruns: " + std::to_string(n) + " seeds from --seed " + cli.get("--seed") + " (each in seed<i>/); " + csv_provenance_comment().substr(2);
    write_file_atomic(dir + "/table.md", md + "\n");
    write_summary(dir, cli, {{"subcommand", sub}, {"seeds", n}, {"rows", out}});
    std::printf("\n%s\nwrote %s/{table.md, summary.json}\n", md.c_str(), dir.c_str());
    return 0;
}

// ---- eps --------------------------------------------------------------------------------------------------

int cmd_eps(const Cli& cli) {
    std::string dir = subcommand_run_dir(cli, "tint", "eps");
    const uint64_t seed = cli.get_seed();
    CheckSetup su(cli, seed, 3);
    // the auxiliary model (fp64, fp32), the TinT config, the sequence (references, not a structured binding: the
    // lambdas below capture them, which C++17 allows only for variables)
    GPTConfig& g = su.g;
    GPT<double>& aux = su.aux;
    GPT<float>& aux32 = su.aux32;
    TintConfig& c = su.c;
    TintInput& in = su.in;
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
    TextOut csv(dir + "/eps.csv", csv_provenance_comment());
    csv.printf("eps,ln_bwd_fp64,ln_bwd_fp32,k1_update_fp64,k1_update_fp32\n");
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
        TintOutput<float> o32 = Tint<float>(ce, sim_device(cli)).run(aux32, in, 1, 1);
        ln64.push_back(ln_err(e, false));
        ln32.push_back(ln_err(e, true));
        up64.push_back(grad_err(o.params[0]));
        up32.push_back(grad_err(o32.params[0]));
        std::printf("  %8.0e %14.3e %14.3e %16.3e %16.3e\n", e, ln64.back(), ln32.back(), up64.back(), up32.back());
        csv.printf("%g,%.4e,%.4e,%.4e,%.4e\n", e, ln64.back(), ln32.back(), up64.back(), up32.back());
    }
    csv.commit();
    LinePlot p = make_line_plot("TinT: error of the finite-difference backward vs eps", "finite-difference step eps", "relative error", true, true);
    p.series.push_back({"LayerNorm backward, fp64", E, ln64, true});
    p.series.push_back({"LayerNorm backward, fp32", E, ln32, true, true});
    p.series.push_back({"k=1 update vs exact SGD, fp64", E, up64, true});
    p.series.push_back({"k=1 update vs exact SGD, fp32", E, up32, true, true});
    save_line_plot(dir + "/eps.png", p);
    // attention hardness: scale W_Q by h; x = the measured 1 − (mean max attention weight); y = the gradient error of
    // the simulated k = L update (ε -> 0) vs exact SGD, on every TinT-trainable tensor and on β of the top LN1
    std::printf("\nerror vs attention hardness (W_Q scaled; k = L = %d, eps = 1e-6 so that only the attention approximation remains):\n\n", g.L);
    std::printf("  %8s %14s %16s %16s\n", "W_Q x", "1 - max attn", "all trainable", "top-layer beta1");
    TextOut csv2(dir + "/hardness.csv", csv_provenance_comment());
    csv2.printf("wq_scale,one_minus_max_attn,err_all,err_beta1\n");
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
            std::vector<double> att = attention_probabilities_of(a.s, "h." + std::to_string(l) + ".");  // (NH,T,T), rebuilt from lse
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
        csv2.printf("%g,%.4e,%.4e,%.4e\n", h, hx.back(), hy.back(), hb.back());
    }
    csv2.commit();
    LinePlot q = make_line_plot("TinT: update error vs attention hardness (W_Q scaled up)", "1 - mean max attention weight", "relative error vs exact SGD", true, true);
    q.series.push_back({"all trainable, k = L", hx, hy, true});
    q.series.push_back({"top LN1 beta", hx, hb, true, true});
    save_line_plot(dir + "/hardness.png", q);
    write_summary(dir, cli, {{"subcommand", "eps"}, {"eps", E}, {"ln_fp64", ln64}, {"ln_fp32", ln32}, {"update_fp64", up64}, {"update_fp32", up32},
                             {"hardness_x", hx}, {"hardness_err", hy}, {"hardness_beta1", hb}});
    std::printf("\nwrote %s/{eps.csv, eps.png, hardness.csv, hardness.png, summary.json}\n", dir.c_str());
    return 0;
}

}  // namespace icl::tint_cmd
