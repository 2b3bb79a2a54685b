// trainer.h — the training loop every binary shares: AdamW with warm-up + cosine decay and clipping,
// log.csv, the progress line, periodic evaluation, checkpoints, a .npy dump of one step, NaN guard, and
// loss.png at the end.
//
// A Model is anything with   double forward(const Batch&);  void backward();  ModelState<real> s;
// (GPT, CGT, the kernel LM). Evaluation is a callback returning named metrics
// ("val_loss", "val_acc", …), logged as columns and plotted when their name contains "loss".
#pragma once
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/task.h"
#include "engine/checkpoint.h"
#include "engine/cli.h"
#include "engine/common.h"
#include "engine/run.h"
#include "layers/adamw.h"
#include "models/gpt.h"
#include "models/state.h"
#include "report/plot.h"

namespace icl {

struct TrainOptions {
    int steps = 100;
    double lr = 1e-3, min_lr_frac = 0.1;
    int warmup = 10;
    AdamWConfig adam;
    int eval_every = 50;           // 0 = only at the end
    int save_every = 0;            // 0 = only at the end
    int progress_every = 10;       // progress lines when stderr is not a terminal
    std::string run_dir;           // log.csv, loss.png go here
    std::string save_path;         // checkpoint path ("" = none)
    std::string dump_dir;          // --dump-npy: dump step dump_step here ("" = none)
    int dump_step = 0;             // 0-based (the flag --dump-step counts from 1, as log.csv does)
    int64_t tokens_per_step = 0;   // for tokens/s
    std::vector<std::string> eval_columns;  // names the eval callback returns
    std::string title;             // plot title
};

struct TrainResult {
    int steps_done = 0;
    double last_loss = NAN, ms_per_step = NAN, tokens_per_s = NAN;
    std::map<std::string, double> last_eval;
    std::vector<double> losses;    // training loss per step
};

// The optimizer schedule, evaluation and checkpoint cadence flags (--eval-batches 4).
void add_train_flags(Cli& cli);

// --load: the config saved in the checkpoint. Refuses a checkpoint of another model kind, any of
// `arch_flags` given beside --load, and a model that does not fit the task.
template <typename Config>
Config checkpoint_config(const Cli& cli, const Task& task, const std::string& model, std::initializer_list<const char*> arch_flags) {
    CheckpointInfo ci = read_checkpoint_metadata(cli.get("--load"));
    if (ci.model != model) fail("--load: '" + cli.get("--load") + "' holds a '" + ci.model + "' model, not '" + model + "'");
    Config saved = Config::from_json(nlohmann::json::parse(ci.config));
    for (const std::string& f : given_arch_flags(cli, arch_flags))  // the listed flags and the --attn-* ones
        fail_usage(f + ": the architecture comes from --load; drop the flag");
    task.check_fits(saved.V, saved.d_in, saved.d_out, saved.maxT);
    return saved;
}

// --lr --warmup --min-lr-frac --weight-decay --grad-clip --eval-every --save-every --out --save --dump-npy as
// TrainOptions; creates the run directory (default out/<binary>/<preset-or-task>-<time>). The caller sets
// title and eval_columns.
TrainOptions train_options_from_cli(const Cli& cli, const std::string& binary, const Task& task, int steps);

// summary.json's common part: binary, task, model config and size, every flag, threads, device, the run's
// figures, the checkpoint path and final_<metric> for each evaluation metric.
nlohmann::json run_summary(const std::string& binary, const Cli& cli, const Task& task, const nlohmann::json& model,
                           int64_t params, int threads, Device dev, const TrainOptions& o, const TrainResult& r);

// "final: train loss 2.5578  val_loss 2.5455 ..." (no newline; the binary adds its rates).
std::string final_line(const TrainResult& r);

template <typename Model>
TrainResult train(Model& m, const TrainOptions& o, const std::function<Batch(int)>& next_batch,
                  const std::function<std::map<std::string, double>()>& evaluate) {
    std::vector<std::string> cols = {"step", "loss", "lr", "grad_norm", "ms_per_step", "tokens_per_s"};
    for (auto& c : o.eval_columns) cols.push_back(c);
    CsvLog log(o.run_dir + "/log.csv", cols);
    Progress progress(o.steps, o.progress_every);
    TrainResult r;
    double t_total = 0;
    int timed = 0;
    for (int step = 0; step < o.steps; step++) {
        Batch batch = next_batch(step);
        double t0 = now_seconds();
        double loss = m.forward(batch);
        if (!std::isfinite(loss)) {
            progress.finish();
            fail(strfmt("step %d: the loss is %s; stopping (last good checkpoint: %s)", step, std::isnan(loss) ? "NaN" : "Inf",
                        o.save_path.empty() ? "none" : o.save_path.c_str()));
        }
        m.backward();
        if (step == o.dump_step && !o.dump_dir.empty()) {
            m.s.dump_npy(o.dump_dir, step);
            std::fprintf(stderr, "wrote every parameter, activation and gradient of step %d to %s/ (index.json)\n", step + 1, o.dump_dir.c_str());
        }
        double lr = lr_schedule(step, o.lr, o.warmup, o.steps, o.min_lr_frac);
        double norm = m.s.update(o.adam, lr);
        if (!std::isfinite(norm)) {
            progress.finish();
            std::string bad = m.s.first_nonfinite_grad();
            fail(strfmt("step %d: the gradient of '%s' is not finite; stopping before the update (last good checkpoint: %s)", step,
                        bad.empty() ? "?" : bad.c_str(), o.save_path.empty() ? "none" : o.save_path.c_str()));
        }
        device_sync(m.s.dev);
        double dt = now_seconds() - t0;
        if (step > 0 || o.steps == 1) { t_total += dt; timed++; }
        double tps = o.tokens_per_step / dt;
        r.losses.push_back(loss);
        r.last_loss = loss;
        std::map<std::string, double> row = {{"step", step + 1}, {"loss", loss}, {"lr", lr}, {"grad_norm", norm},
                                             {"ms_per_step", dt * 1e3}, {"tokens_per_s", tps}};
        bool last = step + 1 == o.steps;
        std::string extra;
        if (evaluate && ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last)) {
            r.last_eval = evaluate();
            for (auto& kv : r.last_eval) {
                row[kv.first] = kv.second;
                extra += strfmt("%s %.4g  ", kv.first.c_str(), kv.second);
            }
        }
        log.row(row);
        progress.update(step, loss, tps, extra);
        if (!o.save_path.empty() && ((o.save_every > 0 && (step + 1) % o.save_every == 0) || last))
            m.s.save(o.save_path, {{"step", std::to_string(step + 1)}, {"loss", strfmt("%.6g", loss)}});
        r.steps_done = step + 1;
    }
    progress.finish();
    r.ms_per_step = timed ? t_total / timed * 1e3 : NAN;
    r.tokens_per_s = timed ? o.tokens_per_step / (t_total / timed) : NAN;
    // loss.png: training loss (and every eval column with "loss" in its name) against the step
    LinePlot p = make_line_plot(o.title, "step", "loss", false, true);
    std::vector<double> steps = log.column("step");
    p.series.push_back({"train loss", steps, log.column("loss")});
    for (auto& c : o.eval_columns)
        if (c.find("loss") != std::string::npos) {
            Series sr{c, steps, log.column(c)};
            sr.markers = true;
            p.series.push_back(sr);
        }
    for (auto& sr : p.series)
        for (double v : sr.y) if (std::isfinite(v) && v <= 0) p.logy = false;
    save_line_plot(o.run_dir + "/loss.png", p);
    return r;
}

}  // namespace icl
