// trainer.cpp — the training options and summary every trainer shares (see trainer.h).
#include "models/trainer.h"

#include "engine/provenance.h"
#include "engine/run.h"

namespace icl {

void add_train_flags(Cli& cli) {
    cli.flag("--warmup", "20", "learning-rate warm-up steps");
    cli.flag("--min-lr-frac", "0.1", "final learning rate as a fraction of --lr (cosine decay)");
    cli.flag("--weight-decay", "0.0", "AdamW weight decay (matrices only)");
    cli.flag("--grad-clip", "1.0", "clip the global gradient norm to this (0 = off)");
    cli.flag("--eval-every", "50", "evaluate every N steps (and at the end)");
    cli.flag("--eval-batches", "4", "validation batches per evaluation");
    cli.flag("--save-every", "0", "also checkpoint every N steps (0 = only at the end)");
    cli.flag("--dump-step", "1", "with --dump-npy: the training step to dump (1 = the first)");
}

TrainOptions train_options_from_cli(const Cli& cli, const std::string& binary, const Task& task, int steps) {
    TrainOptions o;
    o.steps = steps;
    o.lr = cli.get_double("--lr", 0, 10);
    o.warmup = (int)cli.get_int("--warmup", 0);
    o.min_lr_frac = cli.get_double("--min-lr-frac", 0, 1);
    o.adam.weight_decay = (float)cli.get_double("--weight-decay", 0, 10);
    o.adam.grad_clip = (float)cli.get_double("--grad-clip", 0);
    o.eval_every = (int)cli.get_int("--eval-every", 0);
    o.save_every = (int)cli.get_int("--save-every", 0);
    o.run_dir = cli.has_value("--out") ? cli.get("--out") : default_run_dir(binary, cli.preset_name().empty() ? task.kind : cli.preset_name());
    make_dirs(o.run_dir);
    o.save_path = cli.has_value("--save") ? cli.get("--save") : o.run_dir + "/model.safetensors";
    o.dump_dir = cli.get("--dump-npy");
    o.dump_step = (int)cli.get_int("--dump-step", 1, 1 << 30) - 1;
    if (!o.dump_dir.empty() && o.dump_step >= steps)
        fail_usage(strfmt("--dump-step %d: the run has only %d steps", o.dump_step + 1, steps));
    o.tokens_per_step = (int64_t)task.B * task.T;
    return o;
}

nlohmann::json run_summary(const std::string& binary, const Cli& cli, const Task& task, const nlohmann::json& model,
                           int64_t params, int threads, Device dev, const TrainOptions& o, const TrainResult& r) {
    nlohmann::json s = {{"binary", binary}, {"task", task.kind}, {"model", model}, {"params", params},
                        {"flags", cli_json(cli.values())}, {"threads", threads}, {"device", device_name(dev)},
                        {"steps", r.steps_done}, {"final_train_loss", r.last_loss}, {"ms_per_step", r.ms_per_step},
                        {"tokens_per_s", r.tokens_per_s}, {"checkpoint", o.save_path}};
    for (auto& kv : r.last_eval) s["final_" + kv.first] = kv.second;
    s["provenance"] = provenance_json();
    return s;
}

std::string final_line(const TrainResult& r) {
    std::string s = strfmt("final: train loss %.4f", r.last_loss);
    for (auto& kv : r.last_eval) s += strfmt("  %s %.4f", kv.first.c_str(), kv.second);
    return s;
}

}  // namespace icl
