// train_gpt — train the baseline GPT on the arithmetic ICL task, in-context linear regression, or a
// byte-level text file. Writes out/train_gpt/<run>/{log.csv, loss.png, summary.json, model.safetensors}.
#include <algorithm>
#include <cstdio>

#include "data/task.h"
#include "engine/cli.h"
#include "engine/run.h"
#include "engine/provenance.h"
#include "models/attn_mod.h"
#include "models/gpt.h"
#include "models/gpt_infer.h"
#include "models/pretrained.h"
#include "models/trainer.h"
#include "report/analysis.h"
#include "report/plot.h"

using namespace icl;

namespace {

void register_flags(Cli& cli) {
    add_common_flags(cli, {"300", "16", "1e-3", "1"});
    add_task_flags(cli);
    add_gpt_flags(cli);  // --layers --width --heads and the attention modifications (models/gpt.h)
    add_task_shape_flags(cli);
    add_train_flags(cli);
    add_pretrained_flags(cli);  // --load-hf --eval-text --prompt --export-hf (models/gpt_infer.h)
    cli.flag("--sample", "200", "tokens to sample: text, after training (0 = none); with --prompt, after the prompt");
    cli.flag("--temperature", "0.8", "text: sampling temperature (0 = argmax)");
    cli.flag("--seeds", "1", "train once per seed --seed, --seed+1, … (each in <out>/seed<k>/), then <out>/table.md: the final "
                             "metrics' mean ± 95% CI over the seeds, and <out>/val_loss.png");
    cli.preset("tiny", "a seconds-long smoke run on the arithmetic task",
               {{"--steps", "20"}, {"--layers", "2"}, {"--width", "32"}, {"--heads", "2"}, {"--batch", "4"}, {"--eval-every", "10"}});
    cli.preset("arith", "the arithmetic ICL baseline, CPU-sized (a few minutes on 2 cores)",
               {{"--task", "arith"}, {"--steps", "600"}, {"--layers", "4"}, {"--width", "128"}, {"--heads", "4"},
                {"--batch", "16"}, {"--lr", "1e-3"}, {"--eval-every", "100"}});
    cli.preset("paper-arith", "the paper's ICL baseline (6 blocks, d=112, 7 heads; a GPU job)",
               {{"--beta2", "0.999"}, {"--min-lr-frac", "0"}, {"--task", "arith"}, {"--steps", "400000"}, {"--layers", "6"}, {"--width", "112"}, {"--heads", "7"},
                {"--batch", "128"}, {"--lr", "5e-4"}, {"--warmup", "10000"}, {"--weight-decay", "1e-8"}, {"--eval-every", "5000"}});
    cli.preset("linreg", "in-context linear regression baseline, CPU-sized",
               {{"--task", "linreg"}, {"--steps", "500"}, {"--layers", "4"}, {"--width", "128"}, {"--heads", "8"},
                {"--batch", "16"}, {"--d-in", "4"}, {"--pairs", "16"}, {"--lr", "1e-3"}});
    cli.preset("bench", "the benchmark shape of the README (L=6, C=384, NH=6, V=256, T=256, B=8) on text",
               {{"--task", "text"}, {"--layers", "6"}, {"--width", "384"}, {"--heads", "6"}, {"--seq", "256"}, {"--batch", "8"}});
    cli.epilog(
        "examples:\n"
        "  train_gpt --preset arith                         # arithmetic ICL baseline\n"
        "  train_gpt --preset arith --seeds 3 --out out/a3  # the same over seeds 1-3: out/a3/table.md\n"
        "  train_gpt --task text --data data/text/notes.txt --steps 200\n"
        "  train_gpt --preset tiny --dump-npy out/dump      # dump one step's tensors as .npy\n"
        "  train_gpt --preset linreg --attn-mod regularized --attn-alpha 0.1   # modified attention (docs/duallens.md)\n"
        "  train_gpt --load out/train_gpt/X/model.safetensors --steps 100   # new run from a checkpoint's weights\n"
        "  train_gpt --preset arith --save-every 100 --out out/a              # resumable checkpoints every 100 steps\n"
        "  train_gpt --resume out/a/checkpoint-300.safetensors                # continue that run from step 301\n"
        "  train_gpt --load-hf gpt2/ --eval-text wiki.txt                     # GPT-2's perplexity (its folder's tokenizer)\n"
        "  train_gpt --load-hf gpt2/ --prompt \"The meaning of\" --sample 20     # GPT-2 continues a prompt\n"
        "  train_gpt --load-hf gpt2/ --task text --tokenizer gpt2/ --data notes.txt --seq 256 --steps 100   # fine-tune");
}

const char* kSummary = "Train the baseline GPT-2 style model on a synthetic ICL task or a byte-level text file.";

// One training run: the whole binary without --seeds. Returns its summary (also written to <run>/summary.json).
nlohmann::json train_one(const Cli& cli, const RunEnv& env) {
    const int threads = env.threads;
    const Device dev = env.dev;
    const uint64_t seed = cli.get_seed();
    const int steps = (int)cli.get_int("--steps", 1, 100000000), B = (int)cli.get_int("--batch", 1, 1 << 20);

    // the task: training stream + fixed validation set
    Task task(cli, B, seed);
    const int T = task.T;

    // the model
    GPTConfig cfg;
    task.configure(cfg);
    cfg = gpt_config_from_cli(cli, cfg);
    const bool hf = cli.has_value("--load-hf") && !cli.has_value("--resume");  // a resumed run's weights are its checkpoint's
    if (hf) {
        cfg = load_hf_config(cli);
        task.check_fits(cfg.V, cfg.d_in, cfg.d_out, cfg.maxT);
    } else if (!architecture_checkpoint(cli).empty()) {
        cfg = checkpoint_config<GPTConfig>(cli, task, "gpt", {"--layers", "--width", "--heads", "--max-T"});
    }
    cfg.validate();
    const int n_sample = (int)cli.get_int("--sample", 0, 1 << 20);
    const double temperature = cli.get_double("--temperature", 0, 100);
    TrainOptions o = train_options_from_cli(cli, "train_gpt", task, steps);
    o.streams.streams = {{"data", &task.train_stream()}};
    o.title = "train_gpt " + task.kind + strfmt(" (L=%d C=%d)", cfg.L, cfg.C);
    if (attn_mods_configured(cfg.mod)) o.title += ", attention " + attn_mods_describe(cfg.mod);

    GPT<float> model(cfg, dev, seed);
    if (cli.has_value("--load")) model.s.load(cli.get("--load"));
    if (hf) pretrained_load(model, cli.get("--load-hf"));
    std::fprintf(stderr, "train_gpt: task %s, %lld parameters (L=%d C=%d NH=%d T=%d), batch %d, %d steps, %s, %d threads\n  run dir %s\n",
                 task.kind.c_str(), (long long)cfg.num_params(), cfg.L, cfg.C, cfg.NH, T, B, steps, device_name(dev), threads, o.run_dir.c_str());

    // train
    const bool arith = task.kind == "arith";
    o.eval_columns = {"val_loss"};
    if (arith) o.eval_columns.push_back("val_answer_acc");
    auto evaluate = [&]() {
        double loss = 0, acc = 0;
        for (int i = 0; i < task.eval_batches; i++) {
            loss += model.forward(task.val[i]) / task.eval_batches;
            if (arith) acc += task.answer_accuracy(model.outputs(), i) / task.eval_batches;
        }
        std::map<std::string, double> m = {{"val_loss", loss}};
        if (arith) m["val_answer_acc"] = acc;
        return m;
    };
    TrainResult r = train(model, o, [&](int) { return task.next_batch(); }, evaluate);

    // report
    nlohmann::json summary = run_summary("train_gpt", cli, task, cfg.to_json(), cfg.num_params(), threads, dev, o, r);
    std::printf("%s  (%.1f ms/step, %.0f tokens/s)\n", final_line(r).c_str(), r.ms_per_step, r.tokens_per_s);
    if (task.kind == "text" && n_sample > 0) {
        const std::vector<int>& val_text = task.text.val;
        Rng srng = Rng(seed).split(303);
        std::vector<int> prompt(val_text.begin(), val_text.begin() + std::min<size_t>(16, val_text.size()));
        std::vector<int> out = model.sample(prompt, n_sample, temperature, srng, task.V);
        std::string s = task.gpt2 ? task.gpt2->decode(prompt) + task.gpt2->decode(out)
                                  : bytes_to_text(prompt.data(), (int)prompt.size()) + bytes_to_text(out.data(), (int)out.size());
        std::printf("sample:\n%s\n", s.c_str());
        summary["sample"] = s;
    }
    write_run_summary(o.run_dir + "/summary.json", summary);
    std::printf("wrote %s/{log.csv, loss.png, summary.json} and %s\n", o.run_dir.c_str(), o.save_path.c_str());
    summary["run_dir"] = o.run_dir;
    return summary;
}

// --seeds N: train_one per seed (per_seed_args: --seed s+k, --out DIR/seed<k+1>), then one table of the final
// metrics — each seed's value and mean ± 95% CI (Student t) — and the seeds' validation-loss curves in one plot.
int run_seeds(const Cli& cli, const std::vector<std::string>& args, int n, const RunEnv& env) {
    if (cli.has_value("--resume")) fail_usage("--seeds: not with --resume (resume each seed's run on its own)");
    if (inference_run(cli)) fail_usage("--seeds: only for training (not with --eval-text, --prompt or --export-hf)");
    for (const char* f : {"--save", "--dump-npy"})
        if (cli.has_value(f)) fail_usage(std::string(f) + ": not with --seeds (each seed writes its own <out>/seed<k>/model.safetensors)");
    const std::string dir = cli.has_value("--out") ? cli.get("--out") : default_run_dir("train_gpt", cli.preset_name().empty() ? cli.get("--task") : cli.preset_name());
    make_dirs(dir);
    std::vector<nlohmann::json> runs;
    std::vector<unsigned long long> sds;
    for (const std::vector<std::string>& a : per_seed_args(args, cli.get_seed(), n, dir)) {
        Cli one("train_gpt", kSummary);
        register_flags(one);
        one.parse(a);
        sds.push_back(one.get_seed());
        std::fprintf(stderr, "train_gpt: seed %llu (%zu of %d)\n", sds.back(), sds.size(), n);
        SeedScope scope((int64_t)sds.back());  // the seed's own summary.json names its seed
        runs.push_back(train_one(one, env));
    }
    // rows: the final training loss, then every evaluation metric (final_<name> in each summary)
    std::vector<std::string> keys = {"final_train_loss"};
    for (auto& kv : runs[0].items())
        if (kv.key().rfind("final_", 0) == 0 && kv.key() != "final_train_loss" && kv.value().is_number()) keys.push_back(kv.key());
    std::string md = strfmt("# train_gpt over %d seeds (%llu–%llu)\n\nFinal values of each run; mean ± the half-width of a 95%% interval "
                            "(Student t over the seeds).\n\n| |", n, (unsigned long long)cli.get_seed(),
                            (unsigned long long)(cli.get_seed() + n - 1));
    for (unsigned long long sd : sds) md += strfmt(" seed %llu |", sd);
    md += " mean ± 95% CI |\n|---|";
    for (int i = 0; i <= n; i++) md += "---|";
    md += "\n";
    nlohmann::json agg = nlohmann::json::object();
    for (const std::string& key : keys) {
        std::vector<double> v;
        for (auto& r : runs) v.push_back(r.contains(key) && r[key].is_number() ? r[key].get<double>() : NAN);
        md += "| " + key.substr(6) + " |";
        for (double x : v) md += std::isfinite(x) ? strfmt(" %.4f |", x) : " – |";
        md += " " + mean_ci(v, "%.4f") + " |\n";
        const MeanSE m = mean_se(v);
        agg[key.substr(6)] = {{"values", v}, {"mean", m.mean}, {"ci95", ci95_half_width(m)}, {"n", m.n}};
    }
    LinePlot p = make_line_plot(strfmt("train_gpt: validation loss, %d seeds", n), "step", "val loss");
    for (size_t i = 0; i < runs.size(); i++) {
        const CsvTable t = read_csv(runs[i]["run_dir"].get<std::string>() + "/log.csv");
        Series s{strfmt("seed %llu", sds[i]), {}, {}, true};
        const std::vector<double>&step = t.col("step"), &vl = t.col("val_loss");
        for (size_t q = 0; q < step.size(); q++)
            if (std::isfinite(vl[q])) { s.x.push_back(step[q]); s.y.push_back(vl[q]); }
        p.series.push_back(s);
    }
    save_line_plot(dir + "/val_loss.png", p);
    write_file_atomic(dir + "/table.md", md + "\n_" + provenance_line() + "_\n");
    nlohmann::json sj = {{"binary", "train_gpt"}, {"seeds", n}, {"aggregate", agg}, {"runs", nlohmann::json::array()}};
    for (size_t i = 0; i < runs.size(); i++) sj["runs"].push_back({{"dir", runs[i]["run_dir"]}, {"seed", sds[i]}});
    write_run_summary(dir + "/summary.json", sj);
    std::printf("\n%s\nwrote %s/{table.md, val_loss.png, summary.json}\n", md.c_str(), dir.c_str());
    return 0;
}

int run(int argc, char** argv) {
    Cli cli("train_gpt", kSummary);
    register_flags(cli);
    if (!cli.parse(argc, argv)) return 0;
    resume_flags(cli);  // --resume: the run's flags from its checkpoint
    const RunEnv env = apply_run_flags(cli);
    const int seeds = (int)cli.get_int("--seeds", 1, 100);
    if (seeds > 1) return run_seeds(cli, std::vector<std::string>(argv + 1, argv + argc), seeds, env);
    if (inference_run(cli)) return run_inference(cli, env);  // --eval-text / --prompt / --export-hf: no training
    train_one(cli, env);
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return cli_main(argc, argv, run); }
