// train_cgt — train the Contextually Guided Transformer (spec/cgt.md) on the arithmetic ICL task, in-context
// linear regression or a byte-level text file; optionally fold a frozen y into an x-only GPT checkpoint.
// Writes out/train_cgt/<run>/{log.csv, loss.png, summary.json, model.safetensors}.
#include <cmath>
#include <cstdio>

#include "data/arith.h"
#include "data/linreg.h"
#include "data/text.h"
#include "engine/checkpoint.h"
#include "engine/cli.h"
#include "engine/run.h"
#include "layers/dispatch.h"
#include "models/cgt.h"
#include "models/trainer.h"

using namespace icl;

namespace {

void register_flags(Cli& cli) {
    add_common_flags(cli, {"300", "16", "1e-3", "1"});
    cli.flag("--task", "arith", "arith | linreg | text");
    cli.flag("--data", "", "text file for --task text (any bytes)");
    cli.flag("--layers", "4", "transformer blocks L");
    cli.flag("--ell", "3", "ℓ: blocks 1..ℓ are dual-stream, y^ℓ modulates blocks ℓ+1..L (0 = baseline GPT)");
    cli.flag("--dx", "64", "x-stream width d_x");
    cli.flag("--dy", "32", "y-stream width d_y (0 = baseline GPT)");
    cli.flag("--heads", "4", "x heads H_x (must divide d_x)");
    cli.flag("--heads-y", "2", "y heads H_y (must divide d_y)");
    cli.flag("--rank", "4", "generator rank r");
    cli.flag("--templates", "8", "generator templates per operator M");
    cli.flag("--mix", "tanh", "generator mixing h: tanh | softmax");
    cli.flag("--eta", "0.5", "η: weight of the main CE (1−η on the aux loss; 1 = no aux)");
    cli.flag("--horizon", "0", "aux horizon Δ (0 = whole remainder)");
    cli.flag("--wc", "0.08", "w_C: continuity regularizer weight");
    cli.flag("--wd", "0.04", "w_D: decorrelation regularizer weight");
    cli.flag_switch("--vae", "VAE variant: log-variance head, sampled y, KL against the GP prior");
    cli.flag("--beta", "0.01", "VAE KL weight β");
    cli.flag("--nu-K", "0.03", "GP prior: ν_K (𝒦 = ν_K·I + (1−ν_K)·RBF)");
    cli.flag("--lambda", "0.1", "GP prior: RBF length λ as a fraction of the sequence length");
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
    cli.flag("--eval-batches", "2", "validation batches per evaluation");
    cli.flag("--save-every", "0", "also checkpoint every N steps (0 = only at the end)");
    cli.flag_switch("--fold", "after training (or with --steps 0 after --load), fold y frozen at --freeze-at into an x-only GPT checkpoint");
    cli.flag("--freeze-at", "30", "--fold: ỹ = y^ℓ at this 0-indexed position of the first validation sequence");
    cli.flag("--fold-out", "", "--fold: output path (default RUN/folded_gpt.safetensors)");
    cli.preset("tiny", "a seconds-long smoke run on the arithmetic task",
               {{"--steps", "20"}, {"--layers", "2"}, {"--ell", "1"}, {"--dx", "32"}, {"--dy", "16"}, {"--heads", "2"}, {"--heads-y", "1"},
                {"--rank", "2"}, {"--templates", "4"}, {"--batch", "4"}, {"--eval-every", "10"}, {"--horizon", "10"}});
    cli.preset("arith", "ICL-mini (spec §5.4.3): CPU-sized arithmetic, L=4 ℓ=3 d_x=64 d_y=32",
               {{"--task", "arith"}, {"--n-tasks", "2"}, {"--digits", "1"}, {"--steps", "2000"}, {"--layers", "4"}, {"--ell", "3"},
                {"--dx", "64"}, {"--dy", "32"}, {"--heads", "4"}, {"--heads-y", "2"}, {"--rank", "4"}, {"--templates", "8"},
                {"--batch", "32"}, {"--horizon", "10"}});
    cli.preset("linreg", "LR-mini (spec §5.4.2): d_in=4, 16 pairs, L=4 ℓ=3 d_x=64 d_y=32",
               {{"--task", "linreg"}, {"--d-in", "4"}, {"--pairs", "16"}, {"--steps", "3000"}, {"--layers", "4"}, {"--ell", "3"},
                {"--dx", "64"}, {"--dy", "32"}, {"--heads", "4"}, {"--heads-y", "2"}, {"--rank", "4"}, {"--templates", "8"}, {"--batch", "32"}});
    cli.preset("paper-icl", "the paper's ICL config (L=6 ℓ=4 d_x=112 d_y=64 H 7/4 r=4 M=16; a GPU job)",
               {{"--task", "arith"}, {"--steps", "400000"}, {"--layers", "6"}, {"--ell", "4"}, {"--dx", "112"}, {"--dy", "64"}, {"--heads", "7"},
                {"--heads-y", "4"}, {"--rank", "4"}, {"--templates", "16"}, {"--batch", "128"}, {"--lr", "5e-4"}, {"--warmup", "10000"},
                {"--weight-decay", "1e-8"}, {"--horizon", "10"}, {"--eval-every", "5000"}});
    cli.preset("paper-linreg", "the paper's LR config (L=8 ℓ=7 d_x=128 d_y=64 r=4 M=8; d_in=16, 64 pairs; a GPU job)",
               {{"--task", "linreg"}, {"--d-in", "16"}, {"--pairs", "64"}, {"--steps", "400000"}, {"--layers", "8"}, {"--ell", "7"},
                {"--dx", "128"}, {"--dy", "64"}, {"--heads", "8"}, {"--heads-y", "4"}, {"--rank", "4"}, {"--templates", "8"},
                {"--batch", "128"}, {"--lr", "5e-4"}, {"--warmup", "10000"}, {"--weight-decay", "1e-8"}, {"--eval-every", "5000"}});
    cli.preset("paper-text", "the paper's text config (L=12 ℓ=8 d_x=128 d_y=128 r=4 M=16, 512 tokens, w_C=0.04 w_D=0.02; a GPU job)",
               {{"--task", "text"}, {"--seq", "512"}, {"--steps", "400000"}, {"--layers", "12"}, {"--ell", "8"}, {"--dx", "128"}, {"--dy", "128"},
                {"--heads", "8"}, {"--heads-y", "8"}, {"--rank", "4"}, {"--templates", "16"}, {"--batch", "128"}, {"--lr", "5e-4"},
                {"--warmup", "10000"}, {"--wc", "0.04"}, {"--wd", "0.02"}, {"--eval-every", "5000"}});
    cli.epilog(
        "examples:\n"
        "  train_cgt --preset arith                          # ICL-mini with aux loss + regularizers\n"
        "  train_cgt --preset tiny --dump-npy out/dump       # one step's tensors as .npy (y^ℓ = yl.npy, σ = h.*.gen.*.c.npy)\n"
        "  train_cgt --preset tiny --fold --freeze-at 20     # also write an x-only GPT with y frozen at position 20\n"
        "  train_gpt --load out/train_cgt/X/folded_gpt.safetensors --steps 1   # the folded model is a plain GPT");
}

int run(int argc, char** argv) {
    Cli cli("train_cgt", "Train the Contextually Guided Transformer (dual x/y streams, low-rank weight generator, aux loss, regularizers).");
    register_flags(cli);
    if (!cli.parse(argc, argv)) return 0;
    int threads = apply_threads(cli);
    Device dev = parse_device(cli.get("--device"));
    require_device(dev);
    const std::string task = cli.get_choice("--task", {"arith", "linreg", "text"});
    const uint64_t seed = (uint64_t)cli.get_int("--seed", 0);
    const int steps = (int)cli.get_int("--steps", 0, 100000000), B = (int)cli.get_int("--batch", 1, 1 << 20);

    ArithConfig ac{(int)cli.get_int("--n-tasks", 1, 64), (int)cli.get_int("--n-ex", 1, 64), (int)cli.get_int("--digits", 1, 6)};
    LinRegConfig lc{(int)cli.get_int("--d-in", 1, 4096), 1, (int)cli.get_int("--pairs", 1, 1 << 16), cli.get_double("--noise", 0, 1e6)};
    TextData text;
    int T = 0;
    CGTConfig cfg;
    if (task == "arith") { T = ac.seq_len() - 1; cfg.V = ARITH_VOCAB; }
    if (task == "linreg") { T = lc.seq_len(); cfg.d_in = lc.width(); cfg.d_out = lc.d_out; cfg.V = 0; }
    if (task == "text") {
        T = (int)cli.get_int("--seq", 1, 1 << 20);
        if (!cli.has_value("--data")) fail_usage("--task text needs --data FILE");
        text = text_load(cli.get("--data"), 0.1, T);
        cfg.V = BYTE_VOCAB;
    }
    cfg.L = (int)cli.get_int("--layers", 1, 1000);
    cfg.ell = (int)cli.get_int("--ell", 0, 1000);
    cfg.dx = (int)cli.get_int("--dx", 1, 1 << 16);
    cfg.dy = (int)cli.get_int("--dy", 0, 1 << 16);
    cfg.NHx = (int)cli.get_int("--heads", 1, 1 << 16);
    cfg.NHy = (int)cli.get_int("--heads-y", 1, 1 << 16);
    cfg.r = (int)cli.get_int("--rank", 1, 4096);
    cfg.M = (int)cli.get_int("--templates", 1, 4096);
    cfg.h = cli.get_choice("--mix", {"tanh", "softmax"}) == "tanh" ? MixFn::tanh : MixFn::softmax;
    cfg.vae = cli.get_bool("--vae");
    int maxT = (int)cli.get_int("--max-T", 0, 1 << 20);
    cfg.maxT = maxT > 0 ? maxT : T;
    if (cfg.maxT < T) fail_usage(strfmt("--max-T: %d is shorter than the task's sequence length %d", cfg.maxT, T));
    if (cli.has_value("--load")) {
        CheckpointInfo ci = read_checkpoint_metadata(cli.get("--load"));
        if (ci.model != "cgt") fail("--load: '" + cli.get("--load") + "' holds a '" + ci.model + "' model, not 'cgt'");
        CGTConfig saved = CGTConfig::from_json(nlohmann::json::parse(ci.config));
        for (const char* f : {"--layers", "--ell", "--dx", "--dy", "--heads", "--heads-y", "--rank", "--templates", "--mix", "--vae", "--max-T"})
            if (cli.given(f)) fail_usage(std::string(f) + ": the architecture comes from --load; drop the flag");
        if (saved.V != cfg.V || saved.d_in != cfg.d_in || saved.d_out != cfg.d_out)
            fail("--load: the checkpoint's input/output shape does not fit --task " + task);
        if (saved.maxT < T) fail(strfmt("--load: the checkpoint's max-T %d is shorter than the task's %d", saved.maxT, T));
        cfg = saved;
    }
    cfg.validate();
    CGTLoss ls;
    ls.eta = cli.get_double("--eta", 0, 1);
    ls.horizon = (int)cli.get_int("--horizon", 0, 1 << 20);
    ls.wC = cli.get_double("--wc", 0, 1e6);
    ls.wD = cli.get_double("--wd", 0, 1e6);
    ls.beta = cfg.vae ? cli.get_double("--beta", 0, 1e6) : 0.0;
    ls.nu_K = cli.get_double("--nu-K", 1e-6, 1);
    ls.lambda = cli.get_double("--lambda", 1e-6, 1e3);
    if (ls.eta < 1 && (ls.horizon > 0 ? T - ls.horizon < 2 : T < 3))
        fail_usage(strfmt("--horizon: %d leaves no aux start position in a sequence of %d inputs", ls.horizon, T));
    const bool fold = cli.get_bool("--fold");
    const int freeze_at = (int)cli.get_int("--freeze-at", 1, 1 << 20);
    if (fold && freeze_at >= T) fail_usage(strfmt("--freeze-at: must be < the sequence length %d", T));
    if (fold && !cfg.has_y()) fail_usage("--fold: the model has no y stream (--ell 0 or --dy 0)");

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
    o.run_dir = cli.has_value("--out") ? cli.get("--out") : default_run_dir("train_cgt", cli.preset_name().empty() ? task : cli.preset_name());
    make_dirs(o.run_dir);
    o.save_path = cli.has_value("--save") ? cli.get("--save") : o.run_dir + "/model.safetensors";
    o.dump_dir = cli.get("--dump-npy");
    o.tokens_per_step = (int64_t)B * T;
    o.title = "train_cgt " + task + strfmt(" (L=%d ℓ=%d d_x=%d d_y=%d)", cfg.L, cfg.ell, cfg.dx, cfg.dy);

    CGT<float> model(cfg, dev, seed);
    model.loss = ls;
    if (cli.has_value("--load")) model.s.load(cli.get("--load"));
    CGTFlops fl = model.flops(B, T);
    std::fprintf(stderr,
                 "train_cgt: task %s, %lld parameters (L=%d ℓ=%d d_x=%d d_y=%d r=%d M=%d T=%d), batch %d, %d steps, %s, %d threads\n"
                 "  η=%.3g Δ=%d w_C=%.3g w_D=%.3g%s; %.3f GFLOP/step (main fwd %.3f, aux fwd %.3f)\n  run dir %s\n",
                 task.c_str(), (long long)cfg.num_params(), cfg.L, cfg.ell, cfg.dx, cfg.dy, cfg.r, cfg.M, T, B, steps, device_name(dev), threads,
                 ls.eta, ls.horizon, ls.wC, ls.wD, cfg.vae ? strfmt(" VAE β=%.3g", ls.beta).c_str() : "", fl.total_step / 1e9,
                 fl.main_fwd / 1e9, fl.aux_fwd / 1e9, o.run_dir.c_str());

    Rng train_rng = Rng(seed).split(101), val_rng = Rng(seed).split(202);
    std::vector<Batch> val;
    for (int i = 0; i < eval_batches; i++) {
        if (task == "arith") val.push_back(arith_batch(ac, B, val_rng));
        if (task == "linreg") val.push_back(linreg_batch(lc, B, val_rng));
        if (task == "text") val.push_back(text_batch(text.val, B, T, val_rng));
    }
    auto next_batch = [&](int) {
        if (task == "arith") return arith_batch(ac, B, train_rng);
        if (task == "linreg") return linreg_batch(lc, B, train_rng);
        return text_batch(text.train, B, T, train_rng);
    };
    o.eval_columns = {"val_loss", "val_main_loss"};
    auto evaluate = [&]() {
        double loss = 0, main = 0;
        model.train_mode = false;
        for (int i = 0; i < eval_batches; i++) {
            loss += model.forward(val[i]) / eval_batches;
            main += model.last_ce / eval_batches;
        }
        model.train_mode = true;
        return std::map<std::string, double>{{"val_loss", loss}, {"val_main_loss", main}};
    };
    TrainResult r;
    if (steps > 0) r = train(model, o, next_batch, evaluate);

    nlohmann::json summary = {{"binary", "train_cgt"}, {"task", task}, {"model", cfg.to_json()}, {"params", cfg.num_params()},
                              {"flags", cli_json(cli.values())}, {"threads", threads}, {"device", device_name(dev)},
                              {"steps", r.steps_done}, {"final_train_loss", r.last_loss}, {"ms_per_step", r.ms_per_step},
                              {"tokens_per_s", r.tokens_per_s}, {"gflop_per_step", fl.total_step / 1e9}, {"checkpoint", o.save_path}};
    for (auto& kv : r.last_eval) summary["final_" + kv.first] = kv.second;
    if (steps > 0) {
        std::printf("final: train loss %.4f", r.last_loss);
        for (auto& kv : r.last_eval) std::printf("  %s %.4f", kv.first.c_str(), kv.second);
        std::printf("  (%.1f ms/step, %.0f tokens/s, %.2f GFLOP/s)\n", r.ms_per_step, r.tokens_per_s, fl.total_step / (r.ms_per_step * 1e6));
    }
    if (fold) {
        // ỹ = y^ℓ at --freeze-at of the first validation sequence; the folded x-only GPT is an ordinary checkpoint
        Batch one = val[0];
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
    write_file_atomic(o.run_dir + "/summary.json", summary.dump(2) + "\n");
    std::printf("wrote %s/summary.json%s\n", o.run_dir.c_str(), steps > 0 ? (" and " + o.save_path).c_str() : "");
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
