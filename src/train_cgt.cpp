// train_cgt — train the Contextually Guided Transformer (spec/cgt.md) on the arithmetic ICL task, in-context
// linear regression or a byte-level text file; optionally fold a frozen y into an x-only GPT checkpoint.
// Writes out/train_cgt/<run>/{log.csv, loss.png, summary.json, model.safetensors}.
#include <cmath>
#include <cstdio>

#include "data/task.h"
#include "engine/cli.h"
#include "engine/run.h"
#include "engine/provenance.h"
#include "layers/dispatch.h"
#include "models/attn_mod.h"
#include "models/cgt/cgt.h"
#include "models/cgt/cgt_experiment.h"
#include "models/trainer.h"

using namespace icl;

namespace {

void register_flags(Cli& cli) {
    add_common_flags(cli, {"300", "16", "1e-3", "1"});
    add_task_flags(cli);
    add_cgt_flags(cli);  // the model and its loss (models/cgt/cgt.h); the x stream's flags are the GPT's
    add_task_shape_flags(cli);
    add_train_flags(cli);
    cli.set_default("--eval-batches", "2");
    cli.flag_switch("--fold", "after training (or with --steps 0 after --load), fold y frozen at --freeze-at into an x-only GPT checkpoint");
    cli.flag("--freeze-at", "30", "--fold: ỹ = y^ℓ at this 0-indexed position of the first validation sequence");
    cli.flag("--fold-out", "", "--fold: output path (default RUN/folded_gpt.safetensors)");
    cli.flag("--compare", "", "train and compare these variants (comma list of baseline, eta1, aux, aux-reg, reg, vae:<β>, flags); "
                              "writes RUN/table.md (mean ± 95% CI over --seeds, paired differences)");
    cli.flag("--seeds", "1", "--compare: seeds per variant (--seed, --seed+1, …)");
    cli.flag("--retable", "", "DIR of a finished --compare run: rebuild its table from the evaluations DIR/summary.json stores (mean ± 95% CI, "
                              "paired differences) into DIR/table-retabled.md; trains nothing, other flags are not used");
    cli.flag("--eval-seqs", "256", "sequences of the final evaluation (a fixed set, the same for every run)");
    cli.flag("--freeze-k", "5,10", "linreg: frozen-y curves after these many in-context samples");
    cli.preset("tiny", "a seconds-long smoke run on the arithmetic task",
               {{"--steps", "20"}, {"--layers", "2"}, {"--ell", "1"}, {"--width", "32"}, {"--dy", "16"}, {"--heads", "2"}, {"--heads-y", "1"},
                {"--rank", "2"}, {"--templates", "4"}, {"--batch", "4"}, {"--eval-every", "10"}, {"--horizon", "10"}});
    cli.preset("arith", "ICL-mini (spec §5.4.3): CPU-sized arithmetic, L=4 ℓ=3 d_x=64 d_y=32",
               {{"--task", "arith"}, {"--n-tasks", "2"}, {"--digits", "1"}, {"--steps", "2000"}, {"--layers", "4"}, {"--ell", "3"},
                {"--width", "64"}, {"--dy", "32"}, {"--heads", "4"}, {"--heads-y", "2"}, {"--rank", "4"}, {"--templates", "8"},
                {"--batch", "32"}, {"--horizon", "10"}});
    cli.preset("linreg", "LR-mini (spec §5.4.2): d_in=4, 16 pairs, L=4 ℓ=3 d_x=64 d_y=32",
               {{"--task", "linreg"}, {"--d-in", "4"}, {"--pairs", "16"}, {"--steps", "3000"}, {"--layers", "4"}, {"--ell", "3"},
                {"--width", "64"}, {"--dy", "32"}, {"--heads", "4"}, {"--heads-y", "2"}, {"--rank", "4"}, {"--templates", "8"}, {"--batch", "32"}});
    cli.preset("paper-icl", "the paper's ICL config (L=6 ℓ=4 d_x=112 d_y=64 H 7/4 r=4 M=16; a GPU job)",
               {{"--beta2", "0.999"}, {"--min-lr-frac", "0"}, {"--task", "arith"}, {"--steps", "400000"}, {"--layers", "6"}, {"--ell", "4"}, {"--width", "112"}, {"--dy", "64"}, {"--heads", "7"},
                {"--heads-y", "4"}, {"--rank", "4"}, {"--templates", "16"}, {"--batch", "128"}, {"--lr", "5e-4"}, {"--warmup", "10000"},
                {"--weight-decay", "1e-8"}, {"--horizon", "10"}, {"--eval-every", "5000"}});
    cli.preset("paper-linreg", "the paper's LR config (L=8 ℓ=7 d_x=128 d_y=64 r=4 M=8; d_in=16, 64 pairs; a GPU job)",
               {{"--beta2", "0.999"}, {"--min-lr-frac", "0"}, {"--task", "linreg"}, {"--d-in", "16"}, {"--pairs", "64"}, {"--steps", "400000"}, {"--layers", "8"}, {"--ell", "7"},
                {"--width", "128"}, {"--dy", "64"}, {"--heads", "8"}, {"--heads-y", "4"}, {"--rank", "4"}, {"--templates", "8"},
                {"--batch", "128"}, {"--lr", "5e-4"}, {"--warmup", "10000"}, {"--weight-decay", "1e-8"}, {"--eval-every", "5000"}});
    cli.preset("paper-text", "the paper's text config: mixtures cut in [256,384] (spec §4.3), L=12 ℓ=8 d_x=128 d_y=128 r=4 M=16, 512 tokens, "
               "w_C=0.04 w_D=0.02; add --data DIR and --tokenizer FILE (bpe train --vocab 8000); a GPU job",
               {{"--beta2", "0.999"}, {"--min-lr-frac", "0"}, {"--task", "mix"}, {"--seq", "512"}, {"--l-start", "256"}, {"--l-finish", "384"}, {"--steps", "400000"}, {"--layers", "12"},
                {"--ell", "8"}, {"--width", "128"}, {"--dy", "128"}, {"--heads", "8"}, {"--heads-y", "8"}, {"--rank", "4"}, {"--templates", "16"},
                {"--batch", "128"}, {"--lr", "5e-4"}, {"--warmup", "10000"}, {"--wc", "0.04"}, {"--wd", "0.02"}, {"--eval-every", "5000"}});
    cli.preset("icl-mini", "Table 1 on the CPU: ICL-mini (1 digit, 2 tasks × 4 examples, L=4 ℓ=2 d_x=64 d_y=32), "
               "baseline / η=1 / aux / aux+reg × 3 seeds (31 minutes on 2 cores)",
               {{"--task", "arith"}, {"--n-tasks", "2"}, {"--n-ex", "4"}, {"--digits", "1"}, {"--steps", "2000"}, {"--layers", "4"}, {"--ell", "2"},
                {"--width", "64"}, {"--dy", "32"}, {"--heads", "4"}, {"--heads-y", "2"}, {"--rank", "4"}, {"--templates", "8"}, {"--batch", "32"},
                {"--horizon", "10"}, {"--eval-every", "250"}, {"--compare", "baseline,eta1,aux,aux-reg"}, {"--seeds", "3"}, {"--eval-seqs", "512"}});
    cli.preset("icl-table1", "Table 1 at paper size (L=6 ℓ=4 d_x=112 d_y=64, 3 digits, 4 tasks × 4 examples, 400k steps, 6 seeds; a GPU job)",
               {{"--beta2", "0.999"}, {"--min-lr-frac", "0"}, {"--task", "arith"}, {"--steps", "400000"}, {"--layers", "6"}, {"--ell", "4"}, {"--width", "112"}, {"--dy", "64"}, {"--heads", "7"},
                {"--heads-y", "4"}, {"--rank", "4"}, {"--templates", "16"}, {"--batch", "128"}, {"--lr", "5e-4"}, {"--warmup", "10000"},
                {"--weight-decay", "1e-8"}, {"--horizon", "10"}, {"--eval-every", "5000"}, {"--compare", "baseline,eta1,aux,aux-reg"},
                {"--seeds", "6"}, {"--eval-seqs", "10240"}});
    cli.preset("lr-mini", "LR-mini (spec §5.4.2): d_in=4, 16 pairs, L=4 ℓ=3; baseline / η=1 / aux+reg; error-vs-samples curves with frozen y",
               {{"--task", "linreg"}, {"--d-in", "4"}, {"--pairs", "16"}, {"--steps", "3000"}, {"--layers", "4"}, {"--ell", "3"}, {"--width", "64"},
                {"--dy", "32"}, {"--heads", "4"}, {"--heads-y", "2"}, {"--rank", "4"}, {"--templates", "8"}, {"--batch", "64"},
                {"--eval-every", "500"}, {"--compare", "baseline,eta1,aux-reg"}, {"--freeze-k", "3,5,8"}, {"--eval-seqs", "1024"}});
    cli.preset("vae-mini", "VAE β sweep on ICL-mini (β = 1e-4, 1e-3, 0.01, 0.1; the paper used 0.01–1): accuracies, representation metrics, y spectra",
               {{"--task", "arith"}, {"--n-tasks", "2"}, {"--n-ex", "4"}, {"--digits", "1"}, {"--steps", "2000"}, {"--layers", "4"}, {"--ell", "2"},
                {"--width", "64"}, {"--dy", "32"}, {"--heads", "4"}, {"--heads-y", "2"}, {"--rank", "4"}, {"--templates", "8"}, {"--batch", "32"},
                {"--horizon", "10"}, {"--eval-every", "250"}, {"--compare", "vae:0.0001,vae:0.001,vae:0.01,vae:0.1"}, {"--eval-seqs", "512"}});
    cli.preset("text-mini", "text mixtures of the fortune corpus (tools/prep_fortunes → out/fortunes), bytes, 128 tokens, cut in [48,80]; "
               "baseline / aux / aux+reg (w_C=0.04 w_D=0.02)",
               {{"--task", "mix"}, {"--data", "out/fortunes"}, {"--seq", "128"}, {"--l-start", "48"}, {"--l-finish", "80"}, {"--steps", "2000"},
                {"--layers", "4"}, {"--ell", "3"}, {"--width", "64"}, {"--dy", "32"}, {"--heads", "4"}, {"--heads-y", "2"}, {"--rank", "4"},
                {"--templates", "8"}, {"--batch", "32"}, {"--horizon", "32"}, {"--wc", "0.04"}, {"--wd", "0.02"}, {"--eval-every", "250"},
                {"--compare", "baseline,aux,aux-reg"}});
    cli.preset("make-run", "what `make run` trains: ICL-mini, baseline / η=1 / aux+reg, one seed each (≤ 10 minutes on 2 cores)",
               {{"--task", "arith"}, {"--n-tasks", "2"}, {"--n-ex", "4"}, {"--digits", "1"}, {"--steps", "1500"}, {"--layers", "4"}, {"--ell", "2"},
                {"--width", "64"}, {"--dy", "32"}, {"--heads", "4"}, {"--heads-y", "2"}, {"--rank", "4"}, {"--templates", "8"}, {"--batch", "32"},
                {"--horizon", "10"}, {"--eval-every", "250"}, {"--compare", "baseline,eta1,aux-reg"}, {"--eval-seqs", "512"}});
    cli.epilog(
        "examples:\n"
        "  train_cgt --preset arith                          # ICL-mini with aux loss + regularizers\n"
        "  train_cgt --preset tiny --dump-npy out/dump       # one step's tensors as .npy (y^ℓ = yl.npy, σ = h.*.gen.*.c.npy)\n"
        "  train_cgt --preset tiny --fold --freeze-at 20     # also write an x-only GPT with y frozen at position 20\n"
        "  train_cgt --retable out/train_cgt/X               # an older --compare run's table with 95% intervals, nothing retrained\n"
        "  train_gpt --load out/train_cgt/X/folded_gpt.safetensors --steps 1   # the folded model is a plain GPT");
}

int run(int argc, char** argv) {
    // flags
    Cli cli("train_cgt", "Train the Contextually Guided Transformer (dual x/y streams, low-rank weight generator, aux loss, regularizers).");
    register_flags(cli);
    if (!cli.parse(argc, argv)) return 0;
    if (cli.given("--retable")) {  // an old run's table, today's aggregation
        if (cli.get("--retable").empty()) fail_usage("--retable: name the folder of a finished --compare run");
        return cgt_retable(cli.get("--retable"));
    }
    resume_flags(cli);  // --resume: the run's flags from its checkpoint
    const RunEnv env = apply_run_flags(cli);
    const int threads = env.threads;
    const Device dev = env.dev;
    const uint64_t seed = cli.get_seed();
    const int steps = (int)cli.get_int("--steps", 0, 100000000), B = (int)cli.get_int("--batch", 1, 1 << 20);

    // the task: training stream + fixed validation set
    Task task(cli, B, seed);
    const int T = task.T;

    // the model and its losses
    CGTConfig cfg;
    task.configure(cfg);
    cfg = cgt_config_from_cli(cli, cfg);
    if (!architecture_checkpoint(cli).empty()) cfg = checkpoint_config<CGTConfig>(cli, task, "cgt", cgt_arch_flag_names());
    cfg.validate();
    const CGTLoss ls = cgt_loss_from_cli(cli, cfg);
    if (cfg.has_y()) check_prior_reg_size(ls, T, cfg.dy);
    if (ls.eta < 1 && (ls.horizon > 0 ? T - ls.horizon < 2 : T < 3))
        fail_usage(strfmt("--horizon: %d leaves no aux start position in a sequence of %d inputs", ls.horizon, T));
    const bool fold = cli.get_bool("--fold");
    const int freeze_at = (int)cli.get_int("--freeze-at", 1, 1 << 20);
    if (fold && freeze_at >= T) fail_usage(strfmt("--freeze-at: must be < the sequence length %d", T));
    if (fold && !cfg.has_y()) fail_usage("--fold: the model has no y stream (--ell 0 or --dy 0)");
    if (fold && (cfg.mod.adapters_active() || cfg.mod.needs_sim_src()))
        fail_usage("--fold: not exact with --attn-mod augmented or --attn-sim input (they read T^κ(u; y), which folding moves into the weights)");
    const std::string compare = cli.get("--compare");
    if (!compare.empty()) {
        // several variants × seeds, then the comparison table (models/cgt/cgt_experiment.h)
        if (fold) fail_usage("--fold: not with --compare");
        if (cli.has_value("--load")) fail_usage("--load: not with --compare (each variant trains from scratch)");
        if (cli.has_value("--resume")) fail_usage("--resume: not with --compare (resume one variant's run)");
        const std::vector<std::string> names = cli.get_list("--compare");
        if (names.empty()) fail_usage("--compare: no variant named");
        return cgt_compare(cli, names, cfg, ls, dev, threads);
    }
    TrainOptions o = train_options_from_cli(cli, "train_cgt", task, steps);
    o.streams.streams = {{"data", &task.train_stream()}};  // the model's own streams join in train()

    // train, evaluate for the task (ICL table metrics, LR curves) and write the y analyses
    CGTRun run = cgt_train_and_evaluate(cli, task, CGTVariant{"flags", cfg, ls}, seed, o.run_dir, o, experiment_options_from_cli(cli), dev, threads);
    CGT<float>& model = *run.model;
    const TrainResult& r = run.train;
    nlohmann::json summary = run.summary;
    if (steps > 0)
        std::printf("%s  (%.1f ms/step, %.0f tokens/s, %.2f GFLOP/s)\n", final_line(r).c_str(), r.ms_per_step, r.tokens_per_s,
                    summary["gflop_per_step"].get<double>() * 1e3 / r.ms_per_step);
    if (task.kind == "arith" && !std::isnan(run.icl.base))
        std::printf("ICL eval (%d sequences): base %.1f%%  specialized (frozen y, ex. 1-2 removed) %s  ctx %s  wrong-y %.1f%%  variation %s  probe MAE %s\n",
                    run.icl.sequences, 100 * run.icl.base, std::isnan(run.icl.spec) ? "-" : strfmt("%.1f%%", 100 * run.icl.spec).c_str(),
                    std::isnan(run.icl.ctx) ? "-" : strfmt("%.1f%%", 100 * run.icl.ctx).c_str(), 100 * run.icl.wrong_y,
                    std::isnan(run.icl.variation) ? "-" : strfmt("%.3f", run.icl.variation).c_str(),
                    std::isnan(run.icl.probe_mae) ? "-" : strfmt("%.3f", run.icl.probe_mae).c_str());
    if (task.kind == "linreg" && !run.lr.dynamic.empty()) {
        std::printf("LR eval (%d sequences): error vs U u + b after k samples (dynamic / Bayes):", run.lr.sequences);
        for (int k : {0, 1, 2, 4, 8, 16, 32, 63})
            if (k < (int)run.lr.dynamic.size()) std::printf("  k=%d %.3g/%.3g", k, run.lr.dynamic[k], run.lr.bayes[k]);
        std::printf("\n");
    }
    if (task.kind == "mix" && !run.text.full.empty()) {
        auto mean = [](const std::vector<double>& v) { double a = 0; for (double x : v) a += x / v.size(); return v.empty() ? NAN : a; };
        std::printf("text eval (split at %d): mean CE of part 2: full context %.4f  uninformed %.4f  specialized %.4f  EMA %.4f  "
                    "(5-NN category accuracy of document embeddings %.2f)\n", run.text.split, mean(run.text.full), mean(run.text.uninformed),
                    mean(run.text.spec), mean(run.text.ema), run.text.knn_y);
        for (auto& f : run.text.files) std::printf("analysis: %s\n", f.c_str());
    }
    for (auto& f : run.y.files) std::printf("analysis: %s\n", f.c_str());
    if (fold) {
        // ỹ = y^ℓ at --freeze-at of the first validation sequence; the folded x-only GPT is an ordinary checkpoint
        Batch one = task.val[0];
        one.B = 1;
        auto cut = [&](auto& v, size_t per) { if (!v.empty()) v.resize(per * T); };
        cut(one.tokens, 1); cut(one.vectors, one.D); cut(one.targets, 1); cut(one.target_vecs, one.Dout); cut(one.mask, 1);
        std::vector<float> y = model.dynamic_y(one);
        std::vector<float> yt(y.begin() + (size_t)freeze_at * cfg.dy, y.begin() + (size_t)(freeze_at + 1) * cfg.dy);
        GPT<float> g(cfg.x_config(), dev, seed);
        model.fold_into(g, yt);
        std::string path = cli.has_value("--fold-out") ? cli.get("--fold-out") : o.run_dir + "/folded_gpt.safetensors";
        g.s.save(path, {{"folded_from", o.save_path}, {"freeze_at", std::to_string(freeze_at)}});
        summary["folded_gpt"] = path;
        std::printf("wrote the folded x-only GPT (y frozen at position %d) to %s\n", freeze_at, path.c_str());
    }
    write_run_summary(o.run_dir + "/summary.json", summary);
    std::printf("wrote %s/summary.json%s\n", o.run_dir.c_str(), steps > 0 ? (" and " + o.save_path).c_str() : "");
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return cli_main(argc, argv, run); }
