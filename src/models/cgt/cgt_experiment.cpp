// cgt_experiment.cpp — see cgt_experiment.h.
#include "models/cgt/cgt_experiment.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>

#include "report/analysis.h"
#include "engine/common.h"
#include "engine/fileio.h"
#include "report/plot.h"
#include "engine/run.h"
#include "engine/provenance.h"
#include "layers/cgt_ops.h"
#include "models/attn_mod.h"

namespace icl {

CGTVariant cgt_variant(const std::string& name, const CGTConfig& cfg, const CGTLoss& loss) {
    CGTVariant v{name, cfg, loss};
    if (name == "baseline") {
        v.cfg.ell = 0;  // the x-only GPT: no y stream, no generators
        v.cfg.vae = false;
        v.loss = CGTLoss{};
    } else if (name == "eta1") {
        v.loss.eta = 1; v.loss.wC = 0; v.loss.wD = 0; v.loss.wP = 0;
    } else if (name == "aux") {
        v.loss.wC = 0; v.loss.wD = 0; v.loss.wP = 0;
    } else if (name == "aux-reg") {
    } else if (name == "reg") {
        v.loss.eta = 1;
    } else if (name.rfind("vae:", 0) == 0) {
        char* end = nullptr;
        const double beta = std::strtod(name.c_str() + 4, &end);
        if (end == name.c_str() + 4 || *end || !(beta >= 0)) fail_usage("--compare: '" + name + "' needs a number β >= 0 after 'vae:'");
        v.cfg.vae = true;
        v.loss.beta = beta;
        v.loss.wC = 0; v.loss.wD = 0; v.loss.wP = 0;
    } else if (name != "flags") {
        fail_usage("--compare: unknown variant '" + name + "' (baseline, eta1, aux, aux-reg, reg, vae:<β>, flags)");
    }
    if (name != "baseline" && !v.cfg.has_y()) fail_usage("--compare: variant '" + name + "' needs a y stream (--ell > 0 and --dy > 0)");
    if (!v.cfg.vae) v.loss.beta = 0;
    return v;
}

ExperimentOptions experiment_options_from_cli(const Cli& cli) {
    ExperimentOptions e;
    e.eval_seqs = (int)cli.get_int("--eval-seqs", 1, 1 << 24);
    e.eval_batch = (int)std::min<int64_t>(e.eval_seqs, 64);
    for (int64_t k : cli.get_int_list("--freeze-k", 1, 1 << 20)) e.freeze_k.push_back((int)k);
    e.analysis_seqs = std::min(e.eval_seqs, 64);
    return e;
}

namespace {

// The fixed evaluation set: the same sequences for every variant and seed (its own Rng, independent of --seed).
struct EvalSet {
    std::vector<Batch> batches;
    std::vector<std::vector<ArithSample>> samples;  // arith
    std::vector<std::vector<float>> clean;          // linreg: noise-free targets
};

EvalSet make_eval_set(const Task& task, const ExperimentOptions& eo) {
    EvalSet es;
    Rng rng(0x5EED5EED);
    for (int done = 0; done < eo.eval_seqs; done += eo.eval_batch) {
        const int B = std::min(eo.eval_batch, eo.eval_seqs - done);
        if (task.kind == "arith") {
            es.samples.emplace_back();
            es.batches.push_back(arith_batch(task.arith, B, rng, &es.samples.back()));
        } else if (task.kind == "linreg") {
            es.clean.emplace_back();
            es.batches.push_back(linreg_batch(task.linreg, B, rng, &es.clean.back()));
        }
    }
    return es;
}

// The first n sequences of a batch.
Batch first_rows(const Batch& bt, int n) {
    n = std::min(n, bt.B);
    Batch o = bt;
    o.B = n;
    auto cut = [&](auto& v, size_t per) { if (!v.empty()) v.resize((size_t)n * bt.T * per); };
    cut(o.tokens, 1); cut(o.vectors, bt.D); cut(o.targets, 1); cut(o.target_vecs, bt.Dout); cut(o.mask, 1); cut(o.pos, 1);
    return o;
}

void plot_lr_curves(const std::string& path, const std::string& title, const LREval& e, const LREval* baseline) {
    LinePlot p = make_line_plot(title, "in-context samples seen k", "squared error vs U u + b", false, true);
    auto idx = [](size_t n) { std::vector<double> x; for (size_t i = 0; i < n; i++) x.push_back((double)i); return x; };
    p.series.push_back({"Bayes optimal (ridge)", idx(e.bayes.size()), e.bayes});
    p.series.back().dashed = true;
    if (baseline && baseline != &e) p.series.push_back({"baseline GPT (dynamic)", idx(baseline->dynamic.size()), baseline->dynamic});
    p.series.push_back({"CGT dynamic", idx(e.dynamic.size()), e.dynamic});
    for (size_t f = 0; f < e.freeze_k.size(); f++) {
        Series s{"frozen after " + std::to_string(e.freeze_k[f]), idx(e.frozen[f].size()), e.frozen[f]};
        s.markers = true;
        p.series.push_back(s);
    }
    save_line_plot(path, p);
}

// The numbers behind plot_lr_curves, one row per k: k, dynamic, frozen_<k0>… (empty where k < k0), bayes.
void write_lr_csv(const std::string& path, const LREval& e) {
    auto cell = [](double v) { return std::isfinite(v) ? strfmt(",%.6g", v) : std::string(","); };
    std::string t = csv_provenance_comment() + "k,dynamic";
    for (int k0 : e.freeze_k) t += ",frozen_" + std::to_string(k0);
    t += ",bayes\n";
    for (size_t k = 0; k < e.dynamic.size(); k++) {
        t += std::to_string(k) + cell(e.dynamic[k]);
        for (size_t f = 0; f < e.frozen.size(); f++) t += cell(k < e.frozen[f].size() ? e.frozen[f][k] : NAN);
        t += cell(k < e.bayes.size() ? e.bayes[k] : NAN) + "\n";
    }
    write_file_atomic(path, t);
}

}  // namespace

CGTRun cgt_train_and_evaluate(const Cli& cli, Task& task, const CGTVariant& v, uint64_t seed, const std::string& dir, TrainOptions o,
                              const ExperimentOptions& eo, Device dev, int threads) {
    CGTRun run;
    run.variant = v.name;
    run.seed = seed;
    run.dir = dir;
    make_dirs(dir);
    run.model = std::make_unique<CGT<float>>(v.cfg, dev, seed);
    CGT<float>& model = *run.model;
    model.loss = v.loss;
    if (cli.has_value("--load")) model.s.load(cli.get("--load"));
    o.run_dir = dir;
    const CGTConfig& cfg = v.cfg;
    const CGTLoss& ls = v.loss;
    o.title = "train_cgt " + v.name + " " + task.kind + strfmt(" (L=%d ℓ=%d d_x=%d d_y=%d)", cfg.L, cfg.ell, cfg.dx, cfg.has_y() ? cfg.dy : 0);
    if (attn_mods_configured(cfg.mod)) o.title += ", attention " + attn_mods_describe(cfg.mod);
    const int B = task.B, T = task.T;
    CGTFlops fl = model.flops(B, T);
    std::fprintf(stderr,
                 "train_cgt %s: task %s, %lld parameters (L=%d ℓ=%d d_x=%d d_y=%d r=%d M=%d T=%d), batch %d, %d steps, %s, %d threads, seed %llu\n"
                 "  η=%.3g Δ=%d w_C=%.3g w_D=%.3g%s; %.3f GFLOP/step (main fwd %.3f, aux fwd %.3f)\n  run dir %s\n",
                 v.name.c_str(), task.kind.c_str(), (long long)cfg.num_params(), cfg.L, cfg.ell, cfg.dx, cfg.has_y() ? cfg.dy : 0, cfg.r, cfg.M, T, B,
                 o.steps, device_name(dev), threads, (unsigned long long)seed, cfg.has_y() ? ls.eta : 1.0, ls.horizon, ls.wC, ls.wD,
                 cfg.vae ? strfmt(" VAE β=%.3g", ls.beta).c_str() : "", fl.total_step / 1e9, fl.main_fwd / 1e9, fl.aux_fwd / 1e9, dir.c_str());

    if (cfg.vae && ls.beta > 0) {  // what a collapsed y's KL is: free bits below it never engage
        const double floor = cfg.dy * gp_kl_floor(T, ls.nu_K, ls.lambda * T);
        std::fprintf(stderr, "  VAE: a collapsed y's KL against the GP prior is %.3g nats per position (d_y × ½(Σ log 𝒦⁻¹_ss + log det 𝒦)/T)%s\n", floor,
                     ls.free_bits > 0 && ls.free_bits <= floor ? strfmt("; --free-bits %g is below it and never engages", ls.free_bits).c_str() : "");
    }

    // train
    const bool arith = task.kind == "arith";
    o.eval_columns = {"val_loss", "val_main_loss"};
    if (arith) o.eval_columns.push_back("val_answer_acc");
    const bool vae_kl = cfg.vae && ls.beta > 0;
    if (vae_kl) o.eval_columns.push_back("val_kl");  // the VAE's KL per position (nats, summed over components)
    auto evaluate = [&]() {
        double loss = 0, main = 0, acc = 0, kl = 0;
        model.train_mode = false;
        for (int i = 0; i < task.eval_batches; i++) {
            loss += model.forward(task.val[i]) / task.eval_batches;
            main += model.last_ce / task.eval_batches;
            kl += model.last_kl / task.eval_batches;
            if (arith) acc += task.answer_accuracy(model.outputs(), i) / task.eval_batches;
        }
        model.train_mode = true;
        std::map<std::string, double> m = {{"val_loss", loss}, {"val_main_loss", main}};
        if (arith) m["val_answer_acc"] = acc;
        if (vae_kl) m["val_kl"] = kl;
        return m;
    };
    if (o.steps > 0) run.train = train(model, o, [&](int) { return task.next_batch(); }, evaluate);

    // evaluate for the task, then the y analyses
    nlohmann::json s = run_summary("train_cgt", cli, task, cfg.to_json(), cfg.num_params(), threads, dev, o, run.train);
    s["variant"] = v.name;
    s["seed"] = seed;
    s["loss"] = {{"eta", cfg.has_y() ? ls.eta : 1.0}, {"horizon", ls.horizon}, {"wC", ls.wC}, {"wD", ls.wD}, {"zeta_power", ls.zeta_power}, {"wP", ls.wP}, {"aux_pass", ls.aux_masked ? "masked" : "truncated"}, {"beta", ls.beta}, {"beta_warmup", ls.beta_warmup}, {"free_bits", ls.free_bits},
                 {"nu_K", ls.nu_K}, {"lambda", ls.lambda}};
    s["gflop_per_step"] = fl.total_step / 1e9;
    const EvalSet es = make_eval_set(task, eo);
    Batch analysis_batch = es.batches.empty() ? task.val[0] : es.batches[0];  // text, mix: the validation set's first batch
    std::vector<int> marks;
    if (arith) {
        ICLEvalOptions io;
        io.task_vectors = eo.task_vectors && !cfg.has_y();
        if (task.arith.n_ex > io.freeze_after) {
            run.icl = icl_evaluate(model, task.arith, es.batches, es.samples, io);
            s["eval"] = run.icl.to_json();
        }
        for (int i = 1; i < task.arith.n_tasks; i++) marks.push_back(i * task.arith.task_len());
    } else if (task.kind == "linreg") {
        std::vector<int> fk;
        for (int k : eo.freeze_k)
            if (k < task.linreg.pairs) fk.push_back(k);
        run.lr = lr_evaluate(model, task.linreg, es.batches, es.clean, fk);
        s["eval"] = run.lr.to_json();
        plot_lr_curves(dir + "/lr_curves.png", "in-context linear regression: " + v.name, run.lr, nullptr);
        s["plots"].push_back(dir + "/lr_curves.png");
        write_lr_csv(dir + "/lr_curves.csv", run.lr);
        s["analysis_files"].push_back(dir + "/lr_curves.csv");
    } else if (task.kind == "mix") {
        run.text = text_evaluate(model, task.corpus, task.mix, eo.text, dir, v.name);
        s["eval"] = run.text.to_json();
        for (auto& f : run.text.files) s[f.size() > 4 && f.substr(f.size() - 4) == ".png" ? "plots" : "analysis_files"].push_back(f);
        const MixSample& m0 = task.val_mix[0][0];
        marks.assign(m0.starts.begin() + 1, m0.starts.end());
    }
    if (cfg.has_y()) {
        run.y = write_y_analysis(model, first_rows(analysis_batch, eo.analysis_seqs), dir, v.name, marks);
        s["spectrum"] = run.y.spectrum;
        s["spectrum_peak_k"] = run.y.peak_k;
        for (auto& f : run.y.files) s["analysis_files"].push_back(f);
    }
    s["plots"].push_back(dir + "/loss.png");
    write_run_summary(dir + "/summary.json", s);
    run.summary = s;
    return run;
}

// ------------------------------------------------------------------------------------------------------
// tables

namespace {

std::string column_title(const std::string& v, double eta) {
    if (v == "baseline") return "Baseline";
    if (v == "eta1") return "CGT (no Aux/Reg, η=1)";
    if (v == "aux") return strfmt("CGT (Aux, η=%g)", eta);
    if (v == "aux-reg") return strfmt("CGT (Aux + Reg, η=%g)", eta);
    if (v == "reg") return "CGT (Reg, η=1)";
    if (v.rfind("vae:", 0) == 0) return "CGT VAE β=" + v.substr(4);
    return v;
}

// One table cell over the runs of a variant: mean ± the half-width of its 95% interval (Student t over the
// seeds; report/analysis.h mean_ci) in printf format fmt after scaling by k, the mean alone for one run, "–" when
// no run has the value (NaN). E.g. "77.7% ± 0.8%" from fmt "%.1f%%", k 100.
std::string cell(const std::vector<double>& vals, const char* fmt, double k = 1) {
    const MeanSE m = mean_se(vals);
    return m.n == 1 ? strfmt(fmt, m.mean * k) : mean_ci(vals, fmt, k);
}
std::string cell(const std::vector<double>& vals, bool percent) { return percent ? cell(vals, "%.1f%%", 100) : cell(vals, "%.3f"); }

// One row of a paired comparison: values[variant][seed] (the same seeds in every variant), printed as fmt × k.
struct PairedRow {
    std::string label;
    std::vector<std::vector<double>> values;
    const char* fmt;
    double k;
};

// The paired differences of a table's main rows: per row, every variant minus the row's reference (the first
// variant that has the row's value), seed by seed, as mean ± 95% interval over the seeds and the count of seeds
// where the difference is > 0. Empty with fewer than 2 seeds or 2 variants: nothing to pair.
std::string paired_markdown(const std::vector<std::string>& variants, const std::vector<PairedRow>& rows) {
    if (variants.size() < 2 || rows.empty() || rows[0].values.empty() || rows[0].values[0].size() < 2) return "";
    std::string md = "\nPaired differences (same seed; mean ± 95% interval over the seeds, and in how many seeds the difference "
                     "is > 0), each row against its first column with a value:\n\n| |";
    for (auto& v : variants) md += " " + v + " |";
    md += "\n|---|";
    for (size_t i = 0; i < variants.size(); i++) md += "---|";
    md += "\n";
    for (const PairedRow& r : rows) {
        int ref = -1;
        for (size_t i = 0; i < r.values.size() && ref < 0; i++)
            if (mean_se(r.values[i]).n > 0) ref = (int)i;
        if (ref < 0) continue;
        std::string line = "| " + r.label + " |", f = std::string("%+") + (r.fmt + 1);  // a sign on every difference
        int cells = 0;
        for (size_t i = 0; i < r.values.size(); i++) {
            const std::vector<double> d = paired_diff(r.values[i], r.values[ref]);
            if ((int)i == ref) line += " (reference) |";
            else if (d.empty()) line += " – |";
            else { line += " " + mean_ci(d, f.c_str(), r.k) + " (" + count_positive(d) + ") |"; cells++; }
        }
        if (cells) md += line + "\n";
    }
    return md;
}

}  // namespace

std::string icl_table_markdown(const std::vector<std::string>& variants, const std::vector<std::vector<ICLEval>>& runs) {
    struct Row { const char* label; double ICLEval::*field; bool percent; };
    const Row rows[] = {
        {"Base accuracy (dynamic y)", &ICLEval::base, true},
        {"Specialized accuracy (frozen y after ex. 2, ex. 1–2 removed)", &ICLEval::spec, true},
        {"Specialized, ex. 1–2 kept in context (ctx)", &ICLEval::ctx, true},
        {"Control: ex. 1–2 removed, y of another sequence (baseline: no context)", &ICLEval::wrong_y, true},
        {"Representation variation, eq. 4", &ICLEval::variation, false},
        {"Linear fit error (a,b from y; MAE of z-scores, 0.87 = no information)", &ICLEval::probe_mae, false},
        {"Task vectors, best layer, '\\|' token", &ICLEval::tv_best_bar, true},
        {"Task vectors, best layer, '=' token", &ICLEval::tv_best_eq, true},
        {"Base accuracy, digits only", &ICLEval::base_digits, true},
        {"Specialized accuracy, digits only", &ICLEval::spec_digits, true},
    };
    std::string md = "| |";
    for (auto& v : variants) md += " " + v + " |";
    md += "\n|---|";
    for (size_t i = 0; i < variants.size(); i++) md += "---|";
    md += "\n";
    std::vector<PairedRow> paired;
    for (const Row& r : rows) {
        bool any = false;
        std::string line = std::string("| ") + r.label + " |";
        PairedRow pr{r.label, {}, r.percent ? "%.1f" : "%.3f", r.percent ? 100.0 : 1.0};
        for (size_t i = 0; i < variants.size(); i++) {
            std::vector<double> v;
            for (const ICLEval& e : runs[i]) v.push_back(e.*(r.field));
            std::string c = cell(v, r.percent);
            any |= c != "–";
            line += " " + c + " |";
            pr.values.push_back(v);
        }
        if (any) md += line + "\n";
        // the accuracies the paper compares (Table 1's first two rows, and the examples kept in context)
        if (r.field == &ICLEval::base || r.field == &ICLEval::spec || r.field == &ICLEval::ctx) paired.push_back(pr);
    }
    return md + paired_markdown(variants, paired);
}

namespace {

const char* kPaperTable1 =
    "| (paper, Table 1: 6 runs, mean ± 3σ) | Baseline | CGT (no Aux/Reg, η=1) | CGT (Aux, η=0.5) | CGT (Aux + Reg, η=0.5) |\n"
    "|---|---|---|---|---|\n"
    "| Base accuracy (dynamic y) | 77.7% ± 0.8% | 79.0% ± 0.8% | 77.5% ± 1.3% | 78.6% ± 1.2% |\n"
    "| Specialized accuracy (frozen y after ex. 2, ex. 1–2 removed) | – | 15.3% ± 7.2% | 77.0% ± 1% | 77.5% ± 0.9% |\n"
    "| Representation variation, eq. 4 | – | 0.80 | 0.39 | 0.07 |\n"
    "| Linear fit error (a,b from y) | – | 0.19 | 0.12 | 0.04 |\n"
    "| Task vectors, best layer ('\\|' / '=' token) | 36.8% / 40.7% | – | – | – |\n";

std::string lr_table_markdown(const std::vector<std::string>& variants, const std::vector<std::vector<LREval>>& runs, const std::vector<int>& fk) {
    // rows: dynamic error at k = 0, each k0, k0+1, N−1; frozen(k0) at k0 and the mean over k ≥ k0; the Bayes error
    if (runs.empty() || runs[0].empty()) return "";
    const int N = (int)runs[0][0].dynamic.size();
    std::vector<std::pair<std::string, std::function<double(const LREval&)>>> rows;
    std::vector<int> ks = {0};
    for (int k : fk) ks.push_back(k);
    ks.push_back(N - 1);
    for (int k : ks) rows.push_back({strfmt("dynamic, query after k=%d samples", k), [k](const LREval& e) { return e.dynamic[k]; }});
    for (size_t f = 0; f < fk.size(); f++) {
        const int k0 = fk[f];
        rows.push_back({strfmt("frozen after %d samples, first query (k=%d, nothing in context)", k0, k0),
                        [f, k0](const LREval& e) { return f < e.frozen.size() ? e.frozen[f][k0] : NAN; }});
        rows.push_back({strfmt("frozen after %d, mean over queries k=%d..%d", k0, k0, N - 1), [f, k0, N](const LREval& e) {
                            if (f >= e.frozen.size()) return (double)NAN;
                            double s = 0;
                            for (int k = k0; k < N; k++) s += e.frozen[f][k];
                            return s / (N - k0);
                        }});
        rows.push_back({strfmt("dynamic, mean over queries k=%d..%d", k0, N - 1), [k0, N](const LREval& e) {
                            double s = 0;
                            for (int k = k0; k < N; k++) s += e.dynamic[k];
                            return s / (N - k0);
                        }});
    }
    std::string md = "| squared error vs U u + b |";
    for (auto& v : variants) md += " " + v + " |";
    md += " Bayes (ridge) |\n|---|";
    for (size_t i = 0; i <= variants.size(); i++) md += "---|";
    md += "\n";
    std::vector<PairedRow> paired;
    for (auto& r : rows) {
        md += "| " + r.first + " |";
        PairedRow pr{r.first, {}, "%.3g", 1.0};
        for (size_t i = 0; i < variants.size(); i++) {
            std::vector<double> v;
            for (const LREval& e : runs[i]) v.push_back(r.second(e));
            md += " " + cell(v, "%.4g") + " |";
            pr.values.push_back(v);
        }
        if (r.first.find("mean over queries") != std::string::npos) paired.push_back(pr);
        // the Bayes column: the same row applied to an LREval whose "dynamic" curve is the ridge curve
        const double bay = r.second(LREval{runs[0][0].bayes, {}, {}, runs[0][0].bayes, 0});
        md += std::isfinite(bay) ? strfmt(" %.4g |\n", bay) : " – |\n";
    }
    return md + paired_markdown(variants, paired);
}

std::vector<double> text_smooth(const std::vector<double>& v) {
    std::vector<double> o(v.size(), NAN);
    for (int i = 0; i < (int)v.size(); i++) {
        double s = 0;
        int n = 0;
        for (int j = std::max(0, i - 4); j <= std::min((int)v.size() - 1, i + 4); j++) { s += v[j]; n++; }
        o[i] = s / n;
    }
    return o;
}

std::string text_table_markdown(const std::vector<std::string>& variants, const std::vector<std::vector<TextEval>>& runs) {
    // mean CE over part 2 (all positions, and its first 32) per mode; differences; embedding clustering
    auto mean = [](const std::vector<double>& v, int n) {
        if (v.empty()) return (double)NAN;
        n = std::min<int>(n, (int)v.size());
        double s = 0;
        for (int i = 0; i < n; i++) s += v[i];
        return s / n;
    };
    const int ALL = 1 << 30;
    std::vector<std::pair<std::string, std::function<double(const TextEval&)>>> rows = {
        {"CE part 2, full context (part 1 kept)", [&](const TextEval& e) { return mean(e.full, ALL); }},
        {"CE part 2, uninformed (part 2 alone, dynamic y)", [&](const TextEval& e) { return mean(e.uninformed, ALL); }},
        {"CE part 2, specialized (part 2 alone, y frozen from part 1)", [&](const TextEval& e) { return mean(e.spec, ALL); }},
        {"CE part 2, EMA y from part 1", [&](const TextEval& e) { return mean(e.ema, ALL); }},
        {"first 32 tokens of part 2: uninformed", [&](const TextEval& e) { return mean(e.uninformed, 32); }},
        {"first 32 tokens of part 2: specialized", [&](const TextEval& e) { return mean(e.spec, 32); }},
        {"first 32 tokens of part 2: specialized − uninformed", [&](const TextEval& e) { return mean(e.spec, 32) - mean(e.uninformed, 32); }},
        {"all of part 2: EMA − uninformed", [&](const TextEval& e) { return mean(e.ema, ALL) - mean(e.uninformed, ALL); }},
        {"5-NN category accuracy of document embeddings (y space)", [](const TextEval& e) { return e.knn_y; }},
        {"5-NN category accuracy in the t-SNE plane", [](const TextEval& e) { return e.knn_tsne; }},
    };
    std::string md = "| text mixtures (nats/token) |";
    for (auto& v : variants) md += " " + v + " |";
    md += "\n|---|";
    for (size_t i = 0; i < variants.size(); i++) md += "---|";
    md += "\n";
    std::vector<PairedRow> paired;
    for (auto& r : rows) {
        md += "| " + r.first + " |";
        PairedRow pr{r.first, {}, "%.4f", 1.0};
        for (size_t i = 0; i < variants.size(); i++) {
            std::vector<double> v;
            for (const TextEval& e : runs[i]) v.push_back(r.second(e));
            md += " " + cell(v, "%.4f") + " |";
            pr.values.push_back(v);
        }
        md += "\n";
        if (r.first.rfind("CE part 2", 0) == 0) paired.push_back(pr);
    }
    return md + paired_markdown(variants, paired);
}

}  // namespace

// ------------------------------------------------------------------------------------------------------
// --compare

int cgt_compare(const Cli& cli, const std::vector<std::string>& variants, const CGTConfig& cfg, const CGTLoss& loss, Device dev, int threads) {
    const double t0 = now_seconds();
    const uint64_t seed = cli.get_seed();
    const int seeds = (int)cli.get_int("--seeds", 1, 1000);
    const int steps = (int)cli.get_int("--steps", 0, 100000000), B = (int)cli.get_int("--batch", 1, 1 << 20);
    const ExperimentOptions eo = experiment_options_from_cli(cli);
    std::vector<CGTVariant> vs;
    for (auto& n : variants) vs.push_back(cgt_variant(n, cfg, loss));
    Task task0(cli, B, seed);
    TrainOptions o = train_options_from_cli(cli, "train_cgt", task0, steps);
    const std::string top = o.run_dir;
    const std::string dump = o.dump_dir;
    std::fprintf(stderr, "train_cgt --compare %s: %zu variants × %d seeds on %s, %d steps each; experiment dir %s\n", cli.get("--compare").c_str(),
                 vs.size(), seeds, task0.kind.c_str(), steps, top.c_str());
    std::vector<std::vector<ICLEval>> icl(vs.size());
    std::vector<std::vector<LREval>> lr(vs.size());
    std::vector<std::vector<TextEval>> text(vs.size());
    std::vector<std::vector<std::vector<double>>> spectra(vs.size());
    nlohmann::json runs = nlohmann::json::array();
    std::vector<std::string> plots;
    int k = 0;
    for (size_t i = 0; i < vs.size(); i++)
        for (int sd = 0; sd < seeds; sd++) {
            k++;
            std::string vname = vs[i].name;  // "vae:0.01" → folder "vae-0.01-s1"
            for (char& ch : vname) if (ch == ':') ch = '-';
            const std::string dir = top + "/" + vname + "-s" + std::to_string(seed + sd);
            std::fprintf(stderr, "\n[%d/%zu] %s, seed %llu  (%.0f s elapsed)\n", k, vs.size() * seeds, vs[i].name.c_str(),
                         (unsigned long long)(seed + sd), now_seconds() - t0);
            Task task(cli, B, seed + sd);
            TrainOptions oi = o;
            oi.save_path = dir + "/model.safetensors";
            oi.dump_dir = dump.empty() ? "" : dump + "/" + vname + "-s" + std::to_string(seed + sd);
            CGTRun r = cgt_train_and_evaluate(cli, task, vs[i], seed + sd, dir, oi, eo, dev, threads);
            icl[i].push_back(r.icl);
            lr[i].push_back(r.lr);
            text[i].push_back(r.text);
            if (!r.y.spectrum.empty()) spectra[i].push_back(r.y.spectrum);
            nlohmann::json rj = {{"variant", vs[i].name}, {"seed", seed + sd}, {"dir", dir}, {"final_train_loss", r.train.last_loss},
                                 {"ms_per_step", r.train.ms_per_step}};
            if (r.summary.contains("eval")) rj["eval"] = r.summary["eval"];
            for (auto& kv : r.train.last_eval) rj["final_" + kv.first] = kv.second;
            runs.push_back(rj);
            if (sd == 0) {
                for (auto& f : r.y.files)
                    if (f.size() > 4 && f.substr(f.size() - 4) == ".png") plots.push_back(f);
                if (task.kind == "linreg") plots.push_back(dir + "/lr_curves.png");
                for (auto& f : r.text.files)
                    if (f.size() > 4 && f.substr(f.size() - 4) == ".png") plots.push_back(f);
            }
            if (task.kind == "linreg" && !r.lr.dynamic.empty()) {
                std::string line = strfmt("  %s seed %llu: error after k samples, dynamic:", vs[i].name.c_str(), (unsigned long long)(seed + sd));
                for (int q : {0, 2, 4, 8, 15, 31, 63})
                    if (q < (int)r.lr.dynamic.size()) line += strfmt(" k=%d %.3g", q, r.lr.dynamic[q]);
                for (size_t f = 0; f < r.lr.freeze_k.size(); f++)
                    line += strfmt(";  frozen@%d first query %.3g", r.lr.freeze_k[f], r.lr.frozen[f][r.lr.freeze_k[f]]);
                std::fprintf(stderr, "%s\n", line.c_str());
            }
            if (task.kind == "mix" && !r.text.full.empty()) {
                auto mean = [](const std::vector<double>& v) { double a = 0; for (double x : v) a += x / v.size(); return v.empty() ? NAN : a; };
                auto num = [](double v, const char* f) { return std::isfinite(v) ? strfmt(f, v) : std::string("–"); };  // – : no y
                std::fprintf(stderr, "  %s seed %llu: mean CE of part 2: full %.4f  uninformed %.4f  specialized %s  EMA %s  5-NN %s\n",
                             vs[i].name.c_str(), (unsigned long long)(seed + sd), mean(r.text.full), mean(r.text.uninformed),
                             num(mean(r.text.spec), "%.4f").c_str(), num(mean(r.text.ema), "%.4f").c_str(), num(r.text.knn_y, "%.2f").c_str());
            }
            if (task.kind == "arith" && !std::isnan(r.icl.base))
                std::fprintf(stderr, "  %s seed %llu: base %.1f%%  specialized %s  ctx %s  wrong-y %.1f%%%s\n", vs[i].name.c_str(),
                             (unsigned long long)(seed + sd), 100 * r.icl.base,
                             std::isnan(r.icl.spec) ? "–" : strfmt("%.1f%%", 100 * r.icl.spec).c_str(),
                             std::isnan(r.icl.ctx) ? "–" : strfmt("%.1f%%", 100 * r.icl.ctx).c_str(), 100 * r.icl.wrong_y,
                             std::isnan(r.icl.tv_best_eq) ? "" : strfmt("  task vectors '|' %.1f%% '=' %.1f%%", 100 * r.icl.tv_best_bar, 100 * r.icl.tv_best_eq).c_str());
        }

    // cross-run plots
    std::vector<std::string> cols;
    for (auto& v : vs) cols.push_back(column_title(v.name, v.loss.eta));
    {
        LinePlot p = make_line_plot("DFT spectrum of y (seed mean)", "frequency k (periods per sequence)", "normalized power", false, true);
        for (size_t i = 0; i < vs.size(); i++) {
            if (spectra[i].empty()) continue;
            std::vector<double> m(spectra[i][0].size(), 0.0), x;
            for (auto& sp : spectra[i])
                for (size_t q = 0; q < m.size(); q++) m[q] += sp[q] / spectra[i].size();
            for (size_t q = 0; q < m.size(); q++) x.push_back((double)q + 1);
            p.series.push_back({vs[i].name, x, m, true});
        }
        if (!p.series.empty()) {
            save_line_plot(top + "/spectra.png", p);
            plots.insert(plots.begin(), top + "/spectra.png");
        }
    }
    std::string md = "# train_cgt --compare " + cli.get("--compare") + " (" + task0.kind + ")\n\n";
    md += strfmt("%d seed(s) per variant, %d training steps each, evaluated on %d fixed sequences; cells: mean ± the half-width of a 95%% confidence interval (Student t over the seeds).\n\n",
                 seeds, steps, eo.eval_seqs);
    nlohmann::json summary = {{"binary", "train_cgt"}, {"compare", variants}, {"seeds", seeds}, {"steps", steps}, {"task", task0.kind},
                              {"flags", cli_json(cli.values())}, {"threads", threads}, {"device", device_name(dev)}, {"runs", runs}};
    if (task0.kind == "arith") {
        std::string t = icl_table_markdown(cols, icl);
        md += t + "\n" + kPaperTable1;
        summary["table_markdown"] = t;
        nlohmann::json agg = nlohmann::json::object();
        for (size_t i = 0; i < vs.size(); i++) {
            auto put = [&](const char* key, double ICLEval::*f) {
                std::vector<double> v;
                for (auto& e : icl[i]) v.push_back(e.*f);
                MeanSE m = mean_se(v);
                agg[vs[i].name][key] = m.n ? nlohmann::json({{"mean", m.mean}, {"se", m.se}, {"n", m.n}}) : nlohmann::json(nullptr);
            };
            put("base_acc", &ICLEval::base); put("spec_acc", &ICLEval::spec); put("ctx_acc", &ICLEval::ctx); put("wrong_y_acc", &ICLEval::wrong_y);
            put("variation", &ICLEval::variation); put("probe_mae", &ICLEval::probe_mae); put("tv_best_bar", &ICLEval::tv_best_bar);
            put("tv_best_eq", &ICLEval::tv_best_eq);
        }
        summary["aggregate"] = agg;
    } else if (task0.kind == "linreg") {
        std::vector<int> fk;
        for (int q : eo.freeze_k)
            if (q < task0.linreg.pairs) fk.push_back(q);
        std::string t = lr_table_markdown(cols, lr, fk);
        md += t;
        summary["table_markdown"] = t;
        // every variant's seed-mean curves in one plot
        LinePlot p = make_line_plot("in-context linear regression (seed means)", "in-context samples seen k", "squared error vs U u + b", false, true);
        auto mean_curve = [&](size_t i, auto get) {
            std::vector<double> m;
            for (auto& e : lr[i]) {
                const std::vector<double>& c = get(e);
                if (m.empty()) m.assign(c.size(), 0.0);
                for (size_t q = 0; q < c.size(); q++) m[q] += c[q] / lr[i].size();
            }
            return m;
        };
        p.series.push_back({"Bayes optimal (ridge)", {}, lr[0][0].bayes});
        p.series.back().dashed = true;
        for (size_t i = 0; i < vs.size(); i++) {
            p.series.push_back({vs[i].name + " dynamic", {}, mean_curve(i, [](const LREval& e) -> const std::vector<double>& { return e.dynamic; })});
            if (!vs[i].cfg.has_y()) continue;
            for (size_t f = 0; f < fk.size(); f++) {
                Series s{vs[i].name + " frozen@" + std::to_string(fk[f]), {},
                         mean_curve(i, [f](const LREval& e) -> const std::vector<double>& { return e.frozen[f]; })};
                s.markers = true;
                p.series.push_back(s);
            }
        }
        save_line_plot(top + "/lr_compare.png", p);
        plots.insert(plots.begin(), top + "/lr_compare.png");
    }
    if (task0.kind == "mix") {
        std::string t = text_table_markdown(cols, text);
        md += t;
        summary["table_markdown"] = t;
        LinePlot p = make_line_plot("text mixtures: CE difference in part 2 vs the model's own uninformed run (seed means, moving average 9)", "position", "CE difference (nats/token)");
        for (size_t i = 0; i < vs.size(); i++) {
            if (text[i].empty() || text[i][0].spec.empty()) continue;
            const int P = text[i][0].split, T2 = (int)text[i][0].spec.size();
            std::vector<double> x, a(T2, 0.0), b(T2, 0.0);
            for (int t = 0; t < T2; t++) x.push_back(P + t);
            for (auto& e : text[i])
                for (int t = 0; t < T2; t++) {
                    a[t] += (e.spec[t] - e.uninformed[t]) / text[i].size();
                    b[t] += (e.ema[t] - e.uninformed[t]) / text[i].size();
                }
            p.series.push_back({vs[i].name + ": specialized - uninformed", x, text_smooth(a)});
            p.series.push_back({vs[i].name + ": EMA - uninformed", x, text_smooth(b), false, true});
        }
        p.hlines.push_back({"0", 0.0});
        if (!p.series.empty()) {
            save_line_plot(top + "/text_compare.png", p);
            plots.insert(plots.begin(), top + "/text_compare.png");
        }
    }
    const double wall = now_seconds() - t0;
    md += strfmt("\nWall time %.0f s on %d threads (%s).\n", wall, threads, device_name(dev));
    summary["wall_s"] = wall;
    summary["plots"] = plots;
    write_file_atomic(top + "/table.md", md + "\n_" + provenance_line() + "_\n");
    write_run_summary(top + "/summary.json", summary);
    std::printf("\n%s\nplots:\n", md.c_str());
    for (auto& p : plots) std::printf("  %s\n", p.c_str());
    std::printf("wrote %s/table.md and %s/summary.json (%.0f s)\n", top.c_str(), top.c_str(), wall);
    return 0;
}

// ------------------------------------------------------------------------------------------------------
// --retable

int cgt_retable(const std::string& dir) {
    const std::string path = dir + "/summary.json";
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) fail("--retable: '" + dir + "' is not a folder");
    nlohmann::json top;
    try {
        top = nlohmann::json::parse(read_file(path, kMaxTextFileBytes, "summary.json"));
    } catch (const nlohmann::json::exception& e) {
        fail("--retable: " + path + ": not valid JSON (" + e.what() + ")");
    }
    if (!top.is_object() || !top.contains("compare") || !top["compare"].is_array() || !top.contains("runs") || !top["runs"].is_array() ||
        !top.contains("task") || !top["task"].is_string())
        fail("--retable: " + path + " is not the summary of a train_cgt --compare run (no compare / runs / task)");
    std::vector<std::string> variants;
    for (auto& v : top["compare"]) {
        if (!v.is_string()) fail("--retable: " + path + ": 'compare' holds a non-name");
        variants.push_back(v.get<std::string>());
    }
    const std::string kind = top["task"].get<std::string>();
    if (kind != "arith" && kind != "linreg" && kind != "mix") fail("--retable: " + path + ": task " + quote_text(kind) + " has no table");
    if (variants.empty()) fail("--retable: " + path + ": 'compare' names no variant");
    for (size_t i = 0; i < variants.size(); i++)
        if (std::find(variants.begin(), variants.begin() + i, variants[i]) != variants.begin() + i)
            fail("--retable: " + path + ": 'compare' names " + quote_text(variants[i]) + " twice");
    const size_t n = variants.size();
    std::vector<std::vector<ICLEval>> icl(n);
    std::vector<std::vector<LREval>> lr(n);
    std::vector<std::vector<TextEval>> text(n);
    // column titles as --compare wrote them; aux and aux-reg name their η, read from a run's own summary.json
    std::vector<std::string> cols;
    for (const std::string& v : variants) cols.push_back(v == "aux" || v == "aux-reg" ? v : column_title(v, NAN));
    std::vector<bool> titled(n, false);
    int runs = 0;
    for (const nlohmann::json& r : top["runs"]) {
        if (!r.is_object() || !r.contains("variant") || !r["variant"].is_string())
            fail("--retable: " + path + ": a run without its variant");
        const std::string v = r["variant"].get<std::string>();
        const size_t i = std::find(variants.begin(), variants.end(), v) - variants.begin();
        if (i == n) fail("--retable: " + path + ": run of variant " + quote_text(v) + ", which 'compare' does not list");
        const std::string what = "--retable: " + path + ": run " + quote_text(v) + " seed " + (r.contains("seed") ? quote_text(r["seed"].dump()) : "?");
        if (!r.contains("eval")) fail(what + ": no stored evaluation");
        try {
            if (kind == "arith") icl[i].push_back(ICLEval::from_json(r["eval"]));
            else if (kind == "linreg") lr[i].push_back(LREval::from_json(r["eval"]));
            else text[i].push_back(TextEval::from_json(r["eval"]));
        } catch (const Error& e) {
            fail(what + ": " + e.what());
        }
        runs++;
        // η for the column title, from the run's own summary.json (beside this one) when it is there
        if (!titled[i] && r.contains("dir") && r["dir"].is_string()) {
            const std::string own = dir + "/" + std::filesystem::path(r["dir"].get<std::string>()).filename().string() + "/summary.json";
            if (std::filesystem::is_regular_file(own, ec)) {
                try {
                    const nlohmann::json rs = nlohmann::json::parse(read_file(own, kMaxTextFileBytes, "summary.json"));
                    if (rs.contains("loss") && rs["loss"].contains("eta") && rs["loss"]["eta"].is_number()) {
                        cols[i] = column_title(v, rs["loss"]["eta"].get<double>());
                        titled[i] = true;
                    }
                } catch (const nlohmann::json::exception&) {
                    // an unreadable run summary only costs the column its η
                } catch (const Error&) {
                    // (nor does one that cannot be read at all)
                }
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        if ((kind == "arith" ? icl[i].size() : kind == "linreg" ? lr[i].size() : text[i].size()) == 0)
            fail("--retable: " + path + ": variant " + quote_text(variants[i]) + " has no run");
    if (kind == "linreg") {
        // the LR table indexes every curve by k and by the frozen k0s of the first run: every run must agree with it
        const LREval& e0 = lr[0][0];
        const size_t N = e0.dynamic.size();
        for (size_t i = 0; i < n; i++)
            for (const LREval& e : lr[i]) {
                const std::string what = "--retable: " + path + ": a run of " + quote_text(variants[i]);
                if (N == 0 || e.dynamic.size() != N || e.bayes.size() != N)
                    fail(what + ": its dynamic and Bayes curves do not both have the first run's length " + std::to_string(N) + " (> 0)");
                if (e.freeze_k != e0.freeze_k) fail(what + ": its frozen curves start at other k0 than the first run's");
                for (size_t f = 0; f < e.frozen.size(); f++)
                    if (e.frozen[f].size() != N || e.freeze_k[f] < 1 || (size_t)e.freeze_k[f] >= N)
                        fail(what + strfmt(": the curve frozen after %d is not a curve of k = 0..%zu with 1 <= k0 < %zu", e.freeze_k[f], N - 1, N));
            }
    }
    std::string table;
    if (kind == "arith") table = icl_table_markdown(cols, icl);
    else if (kind == "linreg") {
        table = lr_table_markdown(cols, lr, lr[0][0].freeze_k);
    } else table = text_table_markdown(cols, text);
    // the runs' provenance as their summary recorded it
    std::string runs_prov = "not recorded";
    if (top.contains("provenance") && top["provenance"].is_object()) {
        const nlohmann::json& p = top["provenance"];
        auto str = [&](const char* k) { return p.contains(k) ? (p[k].is_string() ? p[k].get<std::string>() : p[k].dump()) : std::string("?"); };
        runs_prov = "icl.cpp " + str("commit") + ", " + str("compiler") + ", " + str("cpu") + " (" + str("isa") + "), " + str("threads") +
                    " threads, " + str("device") + ", " + str("date");
    }
    std::string md = "# train_cgt --retable " + dir + " (" + kind + ")\n\n";
    md += strfmt("The evaluations stored in %s (%d runs, %s steps each) re-tabled without retraining; cells: mean ± the half-width "
                 "of a 95%% confidence interval (Student t over the seeds).\n\n", path.c_str(), runs,
                 top.contains("steps") ? top["steps"].dump().c_str() : "?");
    md += table;
    if (kind == "arith") md += "\n" + std::string(kPaperTable1);
    md += "\n_the runs: " + runs_prov + "_\n\n_re-tabled by " + provenance_line() + "_\n";
    write_file_atomic(dir + "/table-retabled.md", md);
    std::printf("%s\nwrote %s/table-retabled.md\n", md.c_str(), dir.c_str());
    return 0;
}

}  // namespace icl
