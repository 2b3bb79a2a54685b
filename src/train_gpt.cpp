// train_gpt — train the baseline GPT on the arithmetic ICL task, in-context linear regression, or a
// byte-level text file. Writes out/train_gpt/<run>/{log.csv, loss.png, summary.json, model.safetensors}.
#include <cmath>
#include <cstdio>

#include "data/arith.h"
#include "data/linreg.h"
#include "data/text.h"
#include "engine/checkpoint.h"
#include "engine/cli.h"
#include "engine/run.h"
#include "models/gpt.h"
#include "models/trainer.h"

using namespace icl;

namespace {

void register_flags(Cli& cli) {
    add_common_flags(cli, {"300", "16", "1e-3", "1"});
    cli.flag("--task", "arith", "arith | linreg | text");
    cli.flag("--data", "", "text file for --task text (any bytes)");
    cli.flag("--layers", "4", "transformer blocks L");
    cli.flag("--width", "128", "model width C");
    cli.flag("--heads", "4", "attention heads (must divide the width)");
    cli.flag("--max-T", "0", "position-table size (0 = the task's sequence length)");
    cli.flag("--seq", "128", "text: tokens per training window");
    cli.flag("--n-tasks", "4", "arith: tasks per sequence");
    cli.flag("--n-ex", "4", "arith: examples per task");
    cli.flag("--digits", "3", "arith: operand digits d");
    cli.flag("--d-in", "16", "linreg: input dimension");
    cli.flag("--pairs", "64", "linreg: (u,v) pairs per sequence");
    cli.flag("--noise", "0.1", "linreg: noise level epsilon");
    cli.flag("--warmup", "20", "learning-rate warm-up steps");
    cli.flag("--min-lr-frac", "0.1", "final learning rate as a fraction of --lr (cosine decay)");
    cli.flag("--weight-decay", "0.0", "AdamW weight decay (matrices only)");
    cli.flag("--grad-clip", "1.0", "clip the global gradient norm to this (0 = off)");
    cli.flag("--eval-every", "50", "evaluate every N steps (and at the end)");
    cli.flag("--eval-batches", "4", "validation batches per evaluation");
    cli.flag("--save-every", "0", "also checkpoint every N steps (0 = only at the end)");
    cli.flag("--sample", "200", "text: bytes to sample after training (0 = none)");
    cli.flag("--temperature", "0.8", "text: sampling temperature (0 = argmax)");
    cli.preset("tiny", "a seconds-long smoke run on the arithmetic task",
               {{"--steps", "20"}, {"--layers", "2"}, {"--width", "32"}, {"--heads", "2"}, {"--batch", "4"}, {"--eval-every", "10"}});
    cli.preset("arith", "the arithmetic ICL baseline, CPU-sized (a few minutes on 2 cores)",
               {{"--task", "arith"}, {"--steps", "600"}, {"--layers", "4"}, {"--width", "128"}, {"--heads", "4"},
                {"--batch", "16"}, {"--lr", "1e-3"}, {"--eval-every", "100"}});
    cli.preset("paper-arith", "the paper's ICL baseline (6 blocks, d=112, 7 heads; a GPU job)",
               {{"--task", "arith"}, {"--steps", "400000"}, {"--layers", "6"}, {"--width", "112"}, {"--heads", "7"},
                {"--batch", "128"}, {"--lr", "5e-4"}, {"--warmup", "10000"}, {"--weight-decay", "1e-8"}, {"--eval-every", "5000"}});
    cli.preset("linreg", "in-context linear regression baseline, CPU-sized",
               {{"--task", "linreg"}, {"--steps", "500"}, {"--layers", "4"}, {"--width", "128"}, {"--heads", "8"},
                {"--batch", "16"}, {"--d-in", "4"}, {"--pairs", "16"}, {"--lr", "1e-3"}});
    cli.preset("bench", "the benchmark shape of the README (L=6, C=384, NH=6, V=256, T=256, B=8) on text",
               {{"--task", "text"}, {"--layers", "6"}, {"--width", "384"}, {"--heads", "6"}, {"--seq", "256"}, {"--batch", "8"}});
    cli.epilog(
        "examples:\n"
        "  train_gpt --preset arith                         # arithmetic ICL baseline\n"
        "  train_gpt --task text --data README.md --steps 200\n"
        "  train_gpt --preset tiny --dump-npy out/dump      # dump one step's tensors as .npy\n"
        "  train_gpt --load out/train_gpt/X/model.safetensors --steps 100   # continue from a checkpoint");
}

// The answer accuracy of spec/cgt.md §4.1: teacher-forced argmax on the answer characters (sign + digits)
// of examples ≥ 3 of every task.
double arith_accuracy(const std::vector<float>& logits, const std::vector<ArithSample>& samples, int T, int V, bool digits_only) {
    long hit = 0, tot = 0;
    for (size_t b = 0; b < samples.size(); b++) {
        std::vector<float> m = arith_answer_mask(samples[b], 2, digits_only);
        for (int t = 0; t < T; t++) {
            if (m[t] == 0) continue;
            const float* row = &logits[((size_t)b * T + t) * V];
            int best = 0;
            for (int v = 1; v < V; v++) if (row[v] > row[best]) best = v;
            hit += best == samples[b].tokens[t + 1];
            tot++;
        }
    }
    return tot ? (double)hit / tot : NAN;
}

int run(int argc, char** argv) {
    Cli cli("train_gpt", "Train the baseline GPT-2 style model on a synthetic ICL task or a byte-level text file.");
    register_flags(cli);
    if (!cli.parse(argc, argv)) return 0;
    int threads = apply_threads(cli);
    Device dev = parse_device(cli.get("--device"));
    require_device(dev);
    const std::string task = cli.get_choice("--task", {"arith", "linreg", "text"});
    const uint64_t seed = (uint64_t)cli.get_int("--seed", 0);
    const int steps = (int)cli.get_int("--steps", 1, 100000000), B = (int)cli.get_int("--batch", 1, 1 << 20);

    // the task
    ArithConfig ac{(int)cli.get_int("--n-tasks", 1, 64), (int)cli.get_int("--n-ex", 1, 64), (int)cli.get_int("--digits", 1, 6)};
    LinRegConfig lc{(int)cli.get_int("--d-in", 1, 4096), 1, (int)cli.get_int("--pairs", 1, 1 << 16), cli.get_double("--noise", 0, 1e6)};
    TextData text;
    int T = 0;
    GPTConfig cfg;
    if (task == "arith") { T = ac.seq_len() - 1; cfg.V = ARITH_VOCAB; }
    if (task == "linreg") { T = lc.seq_len(); cfg.d_in = lc.width(); cfg.d_out = lc.d_out; cfg.V = 0; }
    if (task == "text") {
        T = (int)cli.get_int("--seq", 1, 1 << 20);
        if (!cli.has_value("--data")) fail_usage("--task text needs --data FILE");
        text = text_load(cli.get("--data"), 0.1, T);
        cfg.V = BYTE_VOCAB;
    }
    cfg.L = (int)cli.get_int("--layers", 1, 1000);
    cfg.C = (int)cli.get_int("--width", 1, 1 << 16);
    cfg.NH = (int)cli.get_int("--heads", 1, 1 << 16);
    int maxT = (int)cli.get_int("--max-T", 0, 1 << 20);
    cfg.maxT = maxT > 0 ? maxT : T;
    if (cfg.maxT < T) fail_usage(strfmt("--max-T: %d is shorter than the task's sequence length %d", cfg.maxT, T));
    if (cli.has_value("--load")) {
        CheckpointInfo ci = read_checkpoint_metadata(cli.get("--load"));
        if (ci.model != "gpt") fail("--load: '" + cli.get("--load") + "' holds a '" + ci.model + "' model, not 'gpt'");
        GPTConfig saved = GPTConfig::from_json(nlohmann::json::parse(ci.config));
        for (const char* f : {"--layers", "--width", "--heads", "--max-T"})
            if (cli.given(f)) fail_usage(std::string(f) + ": the architecture comes from --load; drop the flag");
        if (saved.V != cfg.V || saved.d_in != cfg.d_in || saved.d_out != cfg.d_out)
            fail("--load: the checkpoint's input/output shape does not fit --task " + task);
        if (saved.maxT < T) fail(strfmt("--load: the checkpoint's max-T %d is shorter than the task's %d", saved.maxT, T));
        cfg = saved;
    }
    cfg.validate();

    TrainOptions o;
    o.steps = steps;
    o.lr = cli.get_double("--lr", 0, 10);
    o.warmup = (int)cli.get_int("--warmup", 0);
    o.min_lr_frac = cli.get_double("--min-lr-frac", 0, 1);
    o.adam.weight_decay = (float)cli.get_double("--weight-decay", 0, 10);
    o.adam.grad_clip = (float)cli.get_double("--grad-clip", 0);
    o.eval_every = (int)cli.get_int("--eval-every", 0);
    o.save_every = (int)cli.get_int("--save-every", 0);
    const int eval_batches = (int)cli.get_int("--eval-batches", 1, 10000);
    const int n_sample = (int)cli.get_int("--sample", 0, 1 << 20);
    const double temperature = cli.get_double("--temperature", 0, 100);
    o.run_dir = cli.has_value("--out") ? cli.get("--out") : default_run_dir("train_gpt", cli.preset_name().empty() ? task : cli.preset_name());
    make_dirs(o.run_dir);
    o.save_path = cli.has_value("--save") ? cli.get("--save") : o.run_dir + "/model.safetensors";
    o.dump_dir = cli.get("--dump-npy");
    o.tokens_per_step = (int64_t)B * T;
    o.title = "train_gpt " + task + strfmt(" (L=%d C=%d)", cfg.L, cfg.C);

    GPT<float> model(cfg, dev, seed);
    if (cli.has_value("--load")) model.s.load(cli.get("--load"));
    std::fprintf(stderr, "train_gpt: task %s, %lld parameters (L=%d C=%d NH=%d T=%d), batch %d, %d steps, %s, %d threads\n  run dir %s\n",
                 task.c_str(), (long long)cfg.num_params(), cfg.L, cfg.C, cfg.NH, T, B, steps, device_name(dev), threads, o.run_dir.c_str());

    // data: the training stream and a fixed validation set, each from its own seed
    Rng train_rng = Rng(seed).split(101), val_rng = Rng(seed).split(202);
    std::vector<Batch> val;
    std::vector<std::vector<ArithSample>> val_samples(eval_batches);
    for (int i = 0; i < eval_batches; i++) {
        if (task == "arith") val.push_back(arith_batch(ac, B, val_rng, &val_samples[i]));
        if (task == "linreg") val.push_back(linreg_batch(lc, B, val_rng));
        if (task == "text") val.push_back(text_batch(text.val, B, T, val_rng));
    }
    auto next_batch = [&](int) {
        if (task == "arith") return arith_batch(ac, B, train_rng);
        if (task == "linreg") return linreg_batch(lc, B, train_rng);
        return text_batch(text.train, B, T, train_rng);
    };
    o.eval_columns = {"val_loss"};
    if (task == "arith") o.eval_columns.push_back("val_answer_acc");
    auto evaluate = [&]() {
        double loss = 0, acc = 0;
        for (int i = 0; i < eval_batches; i++) {
            loss += model.forward(val[i]) / eval_batches;
            if (task == "arith") acc += arith_accuracy(model.outputs(), val_samples[i], T, cfg.V, false) / eval_batches;
        }
        std::map<std::string, double> m = {{"val_loss", loss}};
        if (task == "arith") m["val_answer_acc"] = acc;
        return m;
    };

    TrainResult r = train(model, o, next_batch, evaluate);

    nlohmann::json summary = {{"binary", "train_gpt"}, {"task", task}, {"model", cfg.to_json()}, {"params", cfg.num_params()},
                              {"flags", cli_json(cli.values())}, {"threads", threads}, {"device", device_name(dev)},
                              {"steps", r.steps_done}, {"final_train_loss", r.last_loss}, {"ms_per_step", r.ms_per_step},
                              {"tokens_per_s", r.tokens_per_s}, {"checkpoint", o.save_path}};
    for (auto& kv : r.last_eval) summary["final_" + kv.first] = kv.second;
    std::printf("final: train loss %.4f", r.last_loss);
    for (auto& kv : r.last_eval) std::printf("  %s %.4f", kv.first.c_str(), kv.second);
    std::printf("  (%.1f ms/step, %.0f tokens/s)\n", r.ms_per_step, r.tokens_per_s);
    if (task == "text" && n_sample > 0) {
        Rng srng = Rng(seed).split(303);
        std::vector<int> prompt(text.val.begin(), text.val.begin() + std::min<size_t>(16, text.val.size()));
        std::vector<int> out = model.sample(prompt, n_sample, temperature, srng);
        std::string s = bytes_to_text(prompt.data(), (int)prompt.size()) + bytes_to_text(out.data(), (int)out.size());
        std::printf("sample:\n%s\n", s.c_str());
        summary["sample"] = s;
    }
    write_file_atomic(o.run_dir + "/summary.json", summary.dump(2) + "\n");
    std::printf("wrote %s/{log.csv, loss.png, summary.json} and %s\n", o.run_dir.c_str(), o.save_path.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return e.exit_code;
    }
}
