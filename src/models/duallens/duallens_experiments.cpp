// duallens_experiments.cpp — the subcommands of the `duallens` binary; its flags are in src/duallens.cpp.
// duallens — softmax attention as one gradient step on a dual model, and the attention modifications the lens
// suggests (spec/duallens.md; paper 004, Ren & Liu, NeurIPS 2024). Subcommands:
//
//   duallens check        every theory check (spec §7 R1–R4, R6; §8 I1–I17, I20): measured error beside its
//                         tolerance; exit 1 if any fails. Writes checks.csv, kstep.png (R3), theorem32.png (R6);
//                         --dump-npy DIR writes R1's A, D, W1, y, h as .npy.
//   duallens features     R2: positive-random-feature error vs the feature count on log-log axes (features.png)
//   duallens experiment   R5: in-context linear regression, M1 (one head on raw tokens) and M2 (a small embedded
//                         model: the engine's GPT with one block), trained with each modification over the spec's
//                         sweeps and seeds; normalized-MSE table beside the reference predictors + learning curves.
//
// Runs write to out/duallens/<sub>-<time>/ (or --out).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "engine/fileio.h"
#include "engine/cli.h"
#include "engine/comm.h"
#include "engine/npy.h"
#include "report/analysis.h"
#include "report/plot.h"
#include "engine/run.h"
#include "engine/provenance.h"
#include "layers/adamw.h"
#include "models/trainer.h"
#include "models/attn_mod.h"
#include "models/duallens/dual_model.h"
#include "models/gpt.h"
#include "models/duallens/duallens_experiments.h"

namespace icl::duallens_cmd {

// ---- check ---------------------------------------------------------------------------------------------------------

int cmd_check(const Cli& cli) {
    const uint64_t seed = cli.get_seed();
    std::string dir = subcommand_run_dir(cli, "duallens", "check");
    const double t0 = now_seconds();
    std::vector<CheckResult> res = duallens_checks(seed);
    std::printf("duallens check: softmax attention as one gradient step on its dual model (spec/duallens.md), fp64, seed %llu\n",
                (unsigned long long)seed);
    std::printf("  %-4s %-104s %11s %17s  %s\n", "id", "check", "measured", "tolerance", "ok");
    TextOut csv(dir + "/checks.csv", csv_provenance_comment());
    csv.printf("id,check,measured,cmp,tol,tol2,pass\n");
    int failed = 0;
    nlohmann::json rows = nlohmann::json::array();
    for (const CheckResult& c : res) {
        std::string tol = c.cmp == "in" ? strfmt("in [%g, %g]", c.tol, c.tol2) : strfmt("<= %g", c.tol);
        std::printf("  %-4s %-104s %11.3g %17s  %s\n", c.id.c_str(), c.what.c_str(), c.err, tol.c_str(), c.pass ? "ok" : "FAIL");
        csv.printf("%s,\"%s\",%.6g,%s,%g,%g,%d\n", c.id.c_str(), c.what.c_str(), c.err, c.cmp.c_str(), c.tol, c.tol2, (int)c.pass);
        rows.push_back({{"id", c.id}, {"check", c.what}, {"measured", c.err}, {"cmp", c.cmp}, {"tol", c.tol}, {"tol2", c.tol2}, {"pass", c.pass}});
        failed += !c.pass;
    }
    csv.commit();
    // R3: the "15 steps" curve, Taylor features (exact) and positive random features (d_r = 4096)
    std::vector<double> m, th, mp, thp;
    kstep_curve(seed * 7 + 6, 15, m, th);
    RandomFeatures prf(4, 4096, seed + 77);
    kstep_curve(seed * 7 + 6, 15, mp, thp, &prf);
    LinePlot p = make_line_plot("R3: K = 15 gradient steps at eta/15 on the dual model", "step t", "|y_test(t) - h'|^2");
    p.series.push_back(Series{"Taylor features (exact to 1e-10)", {}, m, true});
    p.series.push_back(Series{"random features (d_r=4096)", {}, mp, true});
    Series ts{"theory (1 - t/15)^2 |h'|^2", {}, th};
    ts.dashed = true;
    p.series.push_back(ts);
    save_line_plot(dir + "/kstep.png", p);
    // R6: Theorem 3.2's trend
    std::vector<int> Ns = {4, 8, 16, 32, 64, 128, 256, 512, 1024};
    std::vector<Theorem32Row> t32 = theorem32_trend(Ns, 20, 0, seed * 13 + 6);
    std::vector<double> xs, ex, bt, x32, e32;
    TextOut c32(dir + "/theorem32.csv", csv_provenance_comment());
    c32.printf("N,excess,excess_sd,trK_over_N,sqrt_trK_over_N\n");
    for (auto& r : t32) {
        xs.push_back(r.N);
        ex.push_back(r.excess);
        bt.push_back(r.bound_term);
        if (r.N >= 32) { x32.push_back(r.N); e32.push_back(r.excess); }
        c32.printf("%d,%.6g,%.6g,%.6g,%.6g\n", r.N, r.excess, r.excess_sd, r.trK_over_N, r.bound_term);
    }
    c32.commit();
    LinePlot q = make_line_plot(strfmt("R6: Theorem 3.2, excess loss vs N (slope %.2f for N >= 32)", loglog_slope(x32, e32)), "demonstration tokens N", "w|G_pop|(1 - cos theta_S)", true, true);
    q.series.push_back(Series{"ERM dual, mean of 20 draws", xs, ex, true});
    Series bs{"sqrt(Tr K_S)/N (bound term)", xs, bt, true};
    bs.dashed = true;
    q.series.push_back(bs);
    save_line_plot(dir + "/theorem32.png", q);
    if (cli.has_value("--dump-npy")) {
        const std::string dd = cli.get("--dump-npy");
        make_dirs(dd);
        R1Tensors o = r1_tensors(seed);
        npy_save(dd + "/A.npy", o.A.data(), {(int64_t)o.N});
        npy_save(dd + "/D.npy", &o.D, {1});
        npy_save(dd + "/W1.npy", o.W1.data(), {(int64_t)o.dv, (int64_t)o.dr});
        npy_save(dd + "/y.npy", o.y.data(), {(int64_t)o.dv});
        npy_save(dd + "/h.npy", o.h.data(), {(int64_t)o.dv});
        std::printf("wrote R1's A (attention of the query), D, W1 (dual weights after one step), y (dual test output), h (attention output) to %s/\n",
                    dd.c_str());
    }
    write_run_summary(dir + "/summary.json", nlohmann::json{{"subcommand", "check"}, {"seed", seed}, {"checks", rows}, {"failed", failed},
                                                            {"flags", cli_json(cli.values())}});
    std::printf("%zu checks, %d failed (%.1f s); wrote %s/{checks.csv,kstep.png,theorem32.png,theorem32.csv,summary.json}\n", res.size(), failed,
                now_seconds() - t0, dir.c_str());
    if (failed) fail(strfmt("%d of %zu checks failed", failed, res.size()));
    return 0;
}

// ---- features ------------------------------------------------------------------------------------------------------

int cmd_features(const Cli& cli) {
    const uint64_t seed = cli.get_seed();
    std::vector<int64_t> drs64 = cli.get_int_list("--features", 1, 1 << 22);
    const int seeds = (int)cli.get_int("--feature-seeds", 1, 100000);
    std::vector<int> drs(drs64.begin(), drs64.end());
    std::string dir = subcommand_run_dir(cli, "duallens", "features");
    const double t0 = now_seconds();
    std::vector<PrfRow> rows = prf_convergence(drs, seeds, seed);
    std::printf("R2: positive random features (i.i.d. omega), d_i=8 d_k=d_o=4 N=16, mean relative error over %d draws per d_r\n", seeds);
    std::printf("  %8s %12s %12s %12s %10s\n", "d_r", "A_u", "output", "dual y", "sd(output)");
    TextOut csv(dir + "/features.csv", csv_provenance_comment());
    csv.printf("dr,err_Au,err_out,err_y,sd_out\n");
    std::vector<double> x, a, o, y, ref;
    for (auto& r : rows) {
        std::printf("  %8d %12.4g %12.4g %12.4g %10.3g\n", r.dr, r.err_Au, r.err_out, r.err_y, r.sd_out);
        csv.printf("%d,%.6g,%.6g,%.6g,%.6g\n", r.dr, r.err_Au, r.err_out, r.err_y, r.sd_out);
        x.push_back(r.dr); a.push_back(r.err_Au); o.push_back(r.err_out); y.push_back(r.err_y);
    }
    csv.commit();
    for (double d : x) ref.push_back(a[0] * std::sqrt(x[0] / d));
    const double sa = loglog_slope(x, a), so = loglog_slope(x, o), sy = loglog_slope(x, y);
    std::printf("  log-log slopes: A_u %.3f, output %.3f, dual y %.3f   (expected about -0.5)\n", sa, so, sy);
    for (size_t i = 0; i + 2 < rows.size(); i += 2)
        if (x[i + 2] == 16 * x[i])
            std::printf("  error ratio d_r=%d -> %d: A_u %.2f, output %.2f   (expected about 4; accept 2.5-6)\n", rows[i].dr, rows[i + 2].dr,
                        a[i] / a[i + 2], o[i] / o[i + 2]);
    LinePlot p = make_line_plot(strfmt("R2: PRF approximation error vs d_r (%d draws each)", seeds), "random features d_r", "mean relative error", true, true);
    p.series.push_back(Series{strfmt("A_u (slope %.2f)", sa), x, a, true});
    p.series.push_back(Series{strfmt("output, RF-estimated D (slope %.2f)", so), x, o, true});
    p.series.push_back(Series{strfmt("dual y_test, exact D (slope %.2f)", sy), x, y, true});
    Series rs{"slope -1/2", x, ref};
    rs.dashed = true;
    p.series.push_back(rs);
    save_line_plot(dir + "/features.png", p);
    nlohmann::json jr = nlohmann::json::array();
    for (auto& r : rows) jr.push_back({{"dr", r.dr}, {"err_Au", r.err_Au}, {"err_out", r.err_out}, {"err_y", r.err_y}, {"sd_out", r.sd_out}});
    write_run_summary(dir + "/summary.json", nlohmann::json{{"subcommand", "features"}, {"rows", jr}, {"slope_Au", sa}, {"slope_out", so},
                                                            {"slope_y", sy}, {"flags", cli_json(cli.values())}});
    std::printf("wrote %s/{features.csv,features.png,summary.json} (%.1f s)\n", dir.c_str(), now_seconds() - t0);
    return 0;
}

// ---- experiment ----------------------------------------------------------------------------------------------------

struct Config {
    std::string family, name;  // "negative", "lowsim-3 b=0.5"
    AttnMods mod;
    double spec_pred = NAN;    // the spec's predicted nMSE of the hand-built smoother (negative family)
};

std::vector<Config> sweep(const std::vector<std::string>& families) {
    std::vector<Config> out;
    auto want = [&](const std::string& f) { return std::find(families.begin(), families.end(), f) != families.end(); };
    for (const std::string& f : families)
        if (f != "baseline" && f != "regularized" && f != "augmented" && f != "negative")
            fail_usage("--families: unknown family '" + f + "' (baseline, regularized, augmented, negative)");
    // the baseline is always run: every family is compared with it
    out.push_back({"baseline", "plain", AttnMods()});
    if (want("regularized"))
        for (double a : {0.01, 0.05, 0.1, 0.2, 0.5}) {
            Config c{"regularized", strfmt("a=%g", a), AttnMods()};
            c.mod.alpha = a;
            out.push_back(c);
        }
    if (want("augmented"))
        for (const char* g : {"g1", "g2", "g1+g2"})
            for (double cc : {0.1, 1.0}) {
                Config c{"augmented", strfmt("%s c=%g", g, cc), AttnMods()};
                c.mod.g1 = std::string(g) != "g2";
                c.mod.g2 = std::string(g) != "g1";
                c.mod.c = cc;
                c.mod.dh = 16;
                out.push_back(c);
            }
    if (want("negative")) {
        // the spec's predictions for the hand-built smoother (§7 R5), by rule and beta
        const std::map<std::string, std::map<double, double>> pred = {{"all", {{0.2, 0.482}, {0.5, 0.385}, {1.0, 0.245}}},
                                                                      {"lowsim-3", {{0.2, 0.443}, {0.5, 0.366}, {1.0, 0.344}}},
                                                                      {"random-3", {{0.2, 0.488}, {0.5, 0.444}, {1.0, 0.524}}}};
        for (NegRule r : {NegRule::lowsim, NegRule::random, NegRule::all})
            for (double b : {0.1, 0.2, 0.5, 1.0}) {
                const std::string rn = r == NegRule::all ? "all" : strfmt("%s-3", neg_rule_name(r));
                Config c{"negative", strfmt("%s b=%g", rn.c_str(), b), AttnMods()};
                c.mod.beta = b;
                c.mod.rule = r;
                c.mod.k = 3;
                c.mod.sim = NegSim::input;
                auto it = pred.find(rn);
                if (it != pred.end() && it->second.count(b)) c.spec_pred = it->second.at(b);
                out.push_back(c);
            }
    }
    return out;
}

// One model under training: M1 (OneHead<float>) or M2 (GPT<float>, one block), behind the same three calls.
struct AnyModel {
    std::unique_ptr<OneHead<float>> m1;
    std::unique_ptr<GPT<float>> m2;
    double forward(const Batch& b) { return m1 ? m1->forward(b) : m2->forward(b); }
    void backward() { if (m1) m1->backward(); else m2->backward(); }
    // gradient accumulation (models/trainer.h: run_micro_batches): this micro-batch's share, and whether its backward adds
    void set_micro(const LossScale& sc, bool accumulate) {
        if (m1) { m1->scale = sc; m1->s.accumulate_grads = accumulate; }
        else { m2->scale = sc; m2->s.accumulate_grads = accumulate; }
    }
    double update(const AdamWConfig& a, double lr) { return m1 ? m1->s.update(a, lr) : m2->s.update(a, lr); }
    // several processes (engine/comm.h, as in models/trainer.h): another rank's micro-batch moves the random state only
    // (skip_forward); the gradient and the loss are summed across the ranks; the start is rank 0's parameters
    void skip_forward(const Batch& b) { if (m1) m1->skip_forward(b); else m2->skip_forward(b); }
    void sum_across_ranks(double& loss) {
        ModelState<float>& s = m1 ? m1->s : m2->s;
        comm_sum_on(s.dev, s.grads.ptr, s.ptable.total);
        comm_sum(&loss, 1);
    }
    void broadcast_params() {
        ModelState<float>& s = m1 ? m1->s : m2->s;
        comm_broadcast_on(s.dev, s.params.ptr, s.ptable.total * sizeof(float), 0);
    }
    int64_t params() const { return m1 ? m1->cfg.num_params() : m2->cfg.num_params(); }
};

// Normalized MSE (MSE / d) over a set of prompts, in chunks (the loss at the query is the squared error).
double eval_nmse(AnyModel& m, const std::vector<Batch>& chunks, int d) {
    double s = 0;
    int n = 0;
    for (const Batch& b : chunks) { s += m.forward(b) * b.B; n += b.B; }
    return s / n / d;
}

std::vector<Batch> prompt_chunks(const RegTask& task, int n, uint64_t seed) {
    Rng r(seed);
    std::vector<Batch> out;
    for (int left = n; left > 0; left -= 1000) out.push_back(regression_prompts(task, std::min(left, 1000), r));
    return out;
}

// --retabulate: the results of a finished run, from its runs.csv and curves.csv (fields hold no commas).
std::vector<std::vector<std::string>> read_rows(const std::string& path, size_t cols) {
    std::istringstream f(read_file(path, kMaxTextFileBytes, "results CSV"));  // no FIFO, bounded
    std::vector<std::vector<std::string>> rows;
    std::string line;
    std::getline(f, line);  // header
    while (std::getline(f, line)) {
        if (line.empty()) continue;
        std::vector<std::string> r;
        std::stringstream ss(line);
        for (std::string c; std::getline(ss, c, ',');) r.push_back(c);
        if (r.size() != cols) fail(strfmt("%s: a row with %zu fields, expected %zu", path.c_str(), r.size(), cols));
        rows.push_back(r);
    }
    return rows;
}
void read_runs(const std::string& dir, int seeds, std::map<std::string, std::vector<double>>& results,
               std::map<std::string, std::vector<double>>& curves_mean, std::map<std::string, std::vector<double>>& curves_steps, nlohmann::json& jruns) {
    auto key_of = [](const std::vector<std::string>& r) { return strfmt("%s|%g|%s", r[0].c_str(), std::stod(r[1]), r[3].c_str()); };
    std::map<std::string, std::map<int, double>> by_seed;
    for (const auto& r : read_rows(dir + "/runs.csv", 9)) {
        by_seed[key_of(r)][std::stoi(r[4])] = std::stod(r[6]);
        jruns.push_back({{"model", r[0]}, {"noise", std::stod(r[1])}, {"family", r[2]}, {"config", r[3]}, {"seed", std::stoi(r[4])},
                         {"test_nmse", std::stod(r[6])}, {"seconds", std::stod(r[8])}});
    }
    for (auto& [k, m] : by_seed)
        for (auto& [sd, v] : m) results[k].push_back(v);  // in seed order
    std::map<std::string, std::map<int, double>> sum;  // key → step → Σ val
    for (const auto& r : read_rows(dir + "/curves.csv", 7)) sum[key_of(r)][std::stoi(r[5])] += std::stod(r[6]) / seeds;
    for (auto& [k, m] : sum)
        for (auto& [step, v] : m) {
            curves_steps[k].push_back(step);
            curves_mean[k].push_back(v);
        }
}

struct RunOut {
    double test_nmse = NAN, train_loss = NAN, seconds = 0;
    std::vector<double> steps, val;
};

int cmd_experiment(const Cli& cli) {
    const int steps = (int)cli.get_int("--steps", 1, 10000000), B = (int)cli.get_int("--batch", 1, 1 << 16);
    const int accum = grad_accum_from_cli(cli);  // --grad-accum (models/trainer.h)
    const int seeds = (int)cli.get_int("--seeds", 1, 1000), eval_every = (int)cli.get_int("--eval-every", 1);
    const int nval = (int)cli.get_int("--val-prompts", 1, 1000000), ntest = (int)cli.get_int("--test-prompts", 1, 10000000);
    const int width = (int)cli.get_int("--width", 1, 4096), heads = (int)cli.get_int("--heads", 1, 4096);
    const double lr = cli.get_double("--lr", 0, 10);
    const int warmup = (int)cli.get_int("--warmup", 0);
    const double init_std = cli.get_double("--init-std", 0, 100);
    const uint64_t seed0 = cli.get_seed();
    RegTask task;
    task.d = (int)cli.get_int("--dim", 1, 1000);
    task.N = (int)cli.get_int("--pairs", 1, 100000);
    const std::vector<std::string> models = cli.get_list("--models"), fams = cli.get_list("--families");
    for (const std::string& m : models)
        if (m != "m1" && m != "m2") fail_usage("--models: expected m1 and/or m2, got '" + m + "'");
    const std::vector<double> noises = cli.get_double_list("--noises", 0, 1e300);
    if (models.empty() || noises.empty()) fail_usage("--models / --noises: empty list");
    if (width % heads) fail_usage(strfmt("--heads: must divide --width %d, got %d", width, heads));
    const std::vector<Config> configs = sweep(fams);
    const Device dev = parse_device(cli.get("--device"));  // every trained model lives there
    comm_require_device(dev);  // several processes on GPUs: NCCL compiled in
    const bool retab = cli.has_value("--retabulate");
    std::string dir = retab ? cli.get("--retabulate") : subcommand_run_dir(cli, "duallens", "experiment");
    const int total = (int)(models.size() * noises.size() * configs.size() * seeds);
    std::fprintf(stderr, "duallens experiment: %zu model(s) x %zu noise level(s) x %zu configurations x %d seeds = %d runs of %d steps (batch %d), "
                         "%s, %d threads; run dir %s\n", models.size(), noises.size(), configs.size(), seeds, total, steps, B, device_name(dev), omp_get_max_threads(), dir.c_str());
    // (model, noise, config) → test nMSE per seed;  and the mean learning curves
    std::map<std::string, std::vector<double>> results;
    std::map<std::string, std::vector<double>> curves_mean;
    std::map<std::string, std::vector<double>> curves_steps;
    nlohmann::json jruns = nlohmann::json::array(), jrefs = nlohmann::json::object();
    std::optional<TextOut> runs_csv, curves_csv;  // written after every run (not when retabulating)
    if (retab) {
        read_runs(dir, seeds, results, curves_mean, curves_steps, jruns);
    } else {
        runs_csv.emplace(dir + "/runs.csv", csv_provenance_comment());
        runs_csv->printf("model,noise,family,config,seed,params,test_nmse,final_train_loss,seconds\n");
        curves_csv.emplace(dir + "/curves.csv", csv_provenance_comment());
        curves_csv->printf("model,noise,family,config,seed,step,val_nmse\n");
    }
    TextOut refs_csv(dir + "/references.csv", csv_provenance_comment());
    refs_csv.printf("noise,reference,nmse\n");
    Progress progress(total, 1);
    int done = 0;
    std::map<double, RegReference> refs;
    std::map<std::string, double> neg_refs;  // hand-built smoother with the modification, per noise|config
    std::string md;
    for (double noise : noises) {
        task.noise = noise;
        // the same validation and test prompts for every model and configuration at this noise level
        const std::vector<Batch> val = prompt_chunks(task, nval, seed0 * 7 + 1001);
        const std::vector<Batch> test = prompt_chunks(task, ntest, seed0 * 7 + 2002);
        // references on the test prompts (first chunk of at most 1000 × … all chunks)
        RegReference ref;
        {
            double z = 0, o = 0, g = 0, sm = 0;
            for (const Batch& b : test) {
                RegReference r = regression_references(task, b);
                z += r.zero * b.B; o += r.ols * b.B; g += r.gd * b.B; sm += r.smoother * b.B;
                ref.gd_theory = r.gd_theory;
            }
            ref.zero = z / ntest; ref.ols = o / ntest; ref.gd = g / ntest; ref.smoother = sm / ntest;
            Batch all = test[0];  // the smoother's best (b, c) on the first chunk, for the record
            RegReference r0 = regression_references(task, all);
            ref.smoother_b = r0.smoother_b;
            ref.smoother_c = r0.smoother_c;
        }
        refs[noise] = ref;
        for (auto [nm, v] : std::vector<std::pair<std::string, double>>{{"zero predictor", ref.zero}, {"OLS", ref.ols},
                                                                          {"one GD step, optimal eta", ref.gd}, {"(d+1)/(N+d+1)", ref.gd_theory},
                                                                          {"best hand-built smoother", ref.smoother}})
            refs_csv.printf("%g,%s,%.6g\n", noise, nm.c_str(), v);
        jrefs[strfmt("%g", noise)] = {{"zero", ref.zero}, {"ols", ref.ols}, {"gd", ref.gd}, {"gd_theory", ref.gd_theory},
                                      {"smoother", ref.smoother}, {"smoother_b", ref.smoother_b}, {"smoother_c", ref.smoother_c}};
        for (const Config& c : configs)
            if (c.family == "negative") {
                // the hand-built smoother with the same negative values (first test chunk)
                neg_refs[strfmt("%g|%s", noise, c.name.c_str())] = negative_smoother(task, test[0], c.mod.beta, c.mod.rule, c.mod.k, seed0 + 5);
            }
        if (retab) continue;
        for (const std::string& model : models)
            for (const Config& c : configs)
                for (int sd = 0; sd < seeds; sd++) {
                    const uint64_t seed = seed0 * 1000 + (uint64_t)sd + 1;
                    AnyModel m;
                    if (model == "m1") {
                        HeadConfig hc;
                        hc.D = task.d + 1;
                        hc.sim_cols = task.d;
                        hc.mod = c.mod;
                        hc.init_std = (float)init_std;
                        m.m1 = std::make_unique<OneHead<float>>(hc, dev, seed);
                    } else {
                        GPTConfig gc;
                        gc.L = 1; gc.C = width; gc.NH = heads; gc.V = 0; gc.maxT = task.T(); gc.d_in = task.d + 1; gc.d_out = 1;
                        gc.mod = c.mod;
                        m.m2 = std::make_unique<GPT<float>>(gc, dev, seed);
                    }
                    Rng train_rng(seed * 31 + 7 + (uint64_t)(noise * 1000));
                    const int R = comm().size, mine = comm().rank * accum;  // this process's micro-batches: mine … mine+accum−1
                    if (R > 1) m.broadcast_params();
                    const AdamWConfig adam = adamw_from_cli(cli);  // --beta1 --beta2 --adam-eps; no weight decay, clip 1
                    RunOut ro;
                    const double t0 = now_seconds();
                    double last = NAN;
                    for (int step = 0; step <= steps; step++) {
                        if (step % eval_every == 0 || step == steps) {
                            ro.steps.push_back(step);
                            ro.val.push_back(eval_nmse(m, val, task.d));
                            curves_csv->printf("%s,%g,%s,%s,%d,%d,%.6g\n", model.c_str(), noise, c.family.c_str(), c.name.c_str(), sd + 1, step,
                                         ro.val.back());
                        }
                        if (step == steps) break;
                        // K micro-batches of B (--grad-accum) on each of R processes, each weighted by its share: the step of
                        // one batch of R·K·B (every process draws them all and runs its own K)
                        std::vector<Batch> micro;
                        for (int i = 0; i < R * accum; i++) micro.push_back(regression_prompts(task, B, train_rng));
                        const std::vector<LossScale> sc = micro.size() > 1 ? plain_accumulation_scales(micro) : std::vector<LossScale>(1);
                        last = run_micro_batches(m, micro, sc, mine, accum);
                        if (R > 1) m.sum_across_ranks(last);
                        if (!std::isfinite(last)) fail(strfmt("%s %s seed %d: the loss is not finite at step %d", model.c_str(), c.name.c_str(), sd + 1, step));
                        m.update(adam, lr_schedule(step, lr, warmup, steps, 0.1));
                    }
                    ro.train_loss = last;
                    ro.test_nmse = eval_nmse(m, test, task.d);
                    ro.seconds = now_seconds() - t0;
                    const std::string key = strfmt("%s|%g|%s", model.c_str(), noise, c.name.c_str());
                    results[key].push_back(ro.test_nmse);
                    auto& cm = curves_mean[key];
                    if (cm.empty()) { cm.assign(ro.val.size(), 0.0); curves_steps[key] = ro.steps; }
                    for (size_t i = 0; i < ro.val.size(); i++) cm[i] += ro.val[i] / seeds;
                    runs_csv->printf("%s,%g,%s,%s,%d,%lld,%.6g,%.6g,%.1f\n", model.c_str(), noise, c.family.c_str(), c.name.c_str(), sd + 1,
                                 (long long)m.params(), ro.test_nmse, ro.train_loss, ro.seconds);
                    runs_csv->commit();
                    curves_csv->commit();
                    jruns.push_back({{"model", model}, {"noise", noise}, {"family", c.family}, {"config", c.name}, {"seed", sd + 1},
                                     {"test_nmse", ro.test_nmse}, {"seconds", ro.seconds}});
                    progress.update(done++, ro.test_nmse, (double)B * task.T() * steps / ro.seconds, strfmt("%s noise %g %s seed %d: test nMSE %.4f", model.c_str(), noise, c.name.c_str(), sd + 1,
                                                                      ro.test_nmse));
                }
    }
    progress.finish();
    if (runs_csv) runs_csv->commit();
    if (curves_csv) curves_csv->commit();
    refs_csv.commit();
    // every (model, noise, configuration) has all its seeds (a --retabulate of a different run is refused)
    for (const std::string& model : models)
        for (double noise : noises)
            for (const Config& c : configs) {
                const std::string key = strfmt("%s|%g|%s", model.c_str(), noise, c.name.c_str());
                if (results[key].size() != (size_t)seeds)
                    fail(strfmt("%s: %zu of %d seeds for %s noise %g %s (--retabulate needs the run's own flags)", dir.c_str(), results[key].size(),
                                seeds, model.c_str(), noise, c.name.c_str()));
            }
    // ---- the table: mean ± std over seeds, beside the references --------------------------------------------------
    TextOut tab(dir + "/table.csv", csv_provenance_comment());
    tab.printf("model,noise,family,config,seeds,mean,std,ci95,median,min,max,delta_vs_baseline,delta_ci95,better_than_baseline,handbuilt_smoother,"
               "spec_prediction\n");
    md += strfmt("In-context linear regression, d=%d, N=%d; normalized MSE = MSE/d on %d fresh test prompts; mean ± the half-width of a 95%% "
                 "interval over %d seeds (Student t); \"vs plain\": the paired difference from plain attention, seed by seed, mean ± 95%% "
                 "interval, and in how many seeds the configuration is better; %d steps of Adam (lr %g, batch %d).\n\n",
                 task.d, task.N, ntest, seeds, steps, lr, B);
    for (double noise : noises) {
        const RegReference& r = refs[noise];
        md += strfmt("**noise sigma = %g** — references: zero predictor %.4f, OLS %.2g, one GD step (eta* = N/(N+d+1)) %.4f (theory %.4f), "
                     "best hand-built softmax smoother %.4f (b=%.2f, c=%.2f)\n\n",
                     noise, r.zero, r.ols, r.gd, r.gd_theory, r.smoother, r.smoother_b, r.smoother_c);
        md += "| config |";
        for (auto& model : models) md += " " + model + " nMSE | median | vs plain | better |";
        md += " hand-built smoother | spec prediction |\n|---|";
        for (size_t i = 0; i < models.size(); i++) md += "---|---|---|---|";
        md += "---|---|\n";
        for (const Config& c : configs) {
            md += "| " + c.family + " " + c.name + " |";
            for (auto& model : models) {
                const auto& v = results[strfmt("%s|%g|%s", model.c_str(), noise, c.name.c_str())];
                const auto& v0 = results[strfmt("%s|%g|plain", model.c_str(), noise)];
                double mean = 0, sd = 0, mn = INFINITY, mx = -INFINITY, m0 = 0;
                for (double x : v) { mean += x / v.size(); mn = std::min(mn, x); mx = std::max(mx, x); }
                for (double x : v) sd += (x - mean) * (x - mean);
                sd = v.size() > 1 ? std::sqrt(sd / (v.size() - 1)) : 0;
                for (double x : v0) m0 += x / v0.size();
                // paired by seed (the same seeds give the same W_QKV init and the same training prompts)
                int better = 0;
                for (size_t i = 0; i < v.size() && i < v0.size(); i++) better += v[i] < v0[i];
                std::vector<double> sorted = v;
                std::sort(sorted.begin(), sorted.end());
                const double med = sorted.empty() ? NAN : sorted.size() % 2 ? sorted[sorted.size() / 2]
                                                                             : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);
                const double hb = c.family == "negative" ? neg_refs[strfmt("%g|%s", noise, c.name.c_str())] : c.family == "baseline" ? r.smoother : NAN;
                const std::vector<double> d = paired_diff(v, v0);
                const double ci = ci95_half_width(mean_se(v)), dci = ci95_half_width(mean_se(d));
                tab.printf("%s,%g,%s,%s,%zu,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%d,%.6g,%.6g\n", model.c_str(), noise, c.family.c_str(), c.name.c_str(),
                           v.size(), mean, sd, ci, med, mn, mx, mean - m0, dci, better, hb, c.spec_pred);
                md += c.family == "baseline" ? " " + mean_ci(v, "%.4f") + strfmt(" | %.4f | | |", med)
                                             : " " + mean_ci(v, "%.4f") + strfmt(" | %.4f | ", med) + mean_ci(d, "%+.4f") + strfmt(" | %d/%zu |", better, v.size());
            }
            const double hb = c.family == "negative" ? neg_refs[strfmt("%g|%s", noise, c.name.c_str())] : c.family == "baseline" ? r.smoother : NAN;
            md += std::isfinite(hb) ? strfmt(" %.4f |", hb) : std::string(" |");
            md += std::isfinite(c.spec_pred) ? strfmt(" %.3f |\n", c.spec_pred) : (c.family == "baseline" ? std::string(" 0.554 |\n") : std::string(" |\n"));
        }
        md += "\n";
    }
    tab.commit();
    // ---- learning curves: one plot per (model, noise, group), mean over seeds, with the plain run and references.
    // Groups: the regularized and augmented families, and the negative family split by neighbour rule (<= 6 curves each).
    std::vector<std::string> pngs;
    struct Group { std::string name, family, prefix; };
    const std::vector<Group> groups = {{"regularized", "regularized", ""}, {"augmented", "augmented", ""}, {"negative-lowsim", "negative", "lowsim"},
                                       {"negative-random", "negative", "random"}, {"negative-all", "negative", "all"}, {"baseline", "baseline", ""}};
    auto in_group = [](const Config& c, const Group& g) { return c.family == g.family && c.name.compare(0, g.prefix.size(), g.prefix) == 0; };
    for (const std::string& model : models)
        for (double noise : noises)
            for (const Group& g : groups) {
                bool any = false;
                for (const Config& c : configs) any |= in_group(c, g);
                if (!any || (g.family == "baseline" && configs.size() > 1)) continue;
                LinePlot p = make_line_plot(strfmt("R5 %s, %s, noise %g: validation nMSE (mean of %d seeds)", model.c_str(), g.name.c_str(), noise, seeds), "step", "normalized MSE", false, true);
                for (const Config& c : configs) {
                    if (!in_group(c, g) && c.family != "baseline") continue;
                    const std::string key = strfmt("%s|%g|%s", model.c_str(), noise, c.name.c_str());
                    Series s{c.family == "baseline" ? "plain attention" : c.name, curves_steps[key], curves_mean[key]};
                    s.dashed = c.family == "baseline";
                    p.series.push_back(s);
                }
                const RegReference& r = refs[noise];
                p.hlines = {{"one GD step (opt.)", r.gd}, {"hand-built smoother", r.smoother}};
                const std::string png = strfmt("curves_%s_noise%g_%s.png", model.c_str(), noise, g.name.c_str());
                save_line_plot(dir + "/" + png, p);
                pngs.push_back(png);
            }
    write_file_atomic(dir + "/results.md", md + "\n_" + provenance_line() + "_\n");
    write_run_summary(dir + "/summary.json",
                      nlohmann::json{{"subcommand", "experiment"}, {"d", task.d}, {"N", task.N}, {"steps", steps}, {"batch", B}, {"lr", lr}, {"seeds", seeds},
                                     {"references", jrefs}, {"runs", jruns}, {"flags", cli_json(cli.values())}});
    std::printf("%s", md.c_str());
    std::printf("wrote %s/{results.md,table.csv,runs.csv,curves.csv,references.csv,summary.json} and %zu learning-curve plots\n", dir.c_str(), pngs.size());
    return 0;
}

}  // namespace icl::duallens_cmd
