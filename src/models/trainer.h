// trainer.h — the training loop every binary shares: AdamW with warm-up + cosine decay and clipping,
// log.csv, the progress line, periodic evaluation, resumable checkpoints, a .npy dump of one step and its batch,
// NaN guard, and loss.png at the end.
//
// Resume: --save-every N writes <run>/checkpoint-<N·k>.safetensors holding the parameters, AdamW's m and v and step
// count, the training step, every random stream that moves during training (the data generator's, the model's) and
// every flag. `--resume <run>/checkpoint-10.safetensors` continues that run: the same flags (only those of
// kResumeMayChange may differ), the same state, so steps 11… are bit-identical to the uninterrupted run's (same
// thread count; tests/test_workflow.cpp).
//
// A Model is anything with   double forward(const Batch&);  void backward();  ModelState<real> s;  LossScale scale;
// (GPT, CGT, the kernel LM).
//
// Gradient accumulation (--grad-accum K): a step draws K micro-batches from next_batch, asks the model for each
// one's share of the loss (accumulation_scales below: W_i/W of the scored weight, the CGT's aux share and
// sequence share too), runs forward/backward on each with the model's `scale` set to it and the parameter
// gradients accumulating, then updates once. The step is the one of a single batch of K·B whenever the data
// stream gives the same sequences in K draws of B as in one of K·B (every task of src/data does; the tests say so).
//
// Several processes (mpirun -np N, engine/comm.h): every rank draws the step's N·K micro-batches from the same data
// stream and computes the same scales; rank r runs micro-batches r·K … r·K+K−1 (the others move the model's random
// state as their forwards would: skip_forward), the gradients and the loss are summed across the ranks, and every
// rank makes the same update: N ranks × K micro-batches of B make the step of one batch of N·K·B. The parameters
// are broadcast from rank 0 at the start; rank 0 alone writes (log.csv, checkpoints, dumps, plots). Host buffers go
// through MPI, GPU buffers through NCCL (one process per GPU; engine/comm.h).
//
// Evaluation is a callback returning named metrics ("val_loss", "val_acc", …), logged as columns and plotted when
// their name contains "loss"; every rank evaluates (the same parameters give the same numbers).
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
#include "engine/comm.h"
#include "models/block.h"
#include "engine/common.h"
#include "engine/rng.h"
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
    int save_every = 0;            // > 0: a resumable <run_dir>/checkpoint-<step>.safetensors every N steps
    int grad_accum = 1;            // micro-batches per step (--grad-accum): next_batch is called this often per step
    int progress_every = 10;       // progress lines when stderr is not a terminal
    std::string run_dir;           // log.csv, loss.png, checkpoint-<step>.safetensors go here
    std::string save_path;         // the final model's checkpoint ("" = none)
    std::string dump_dir;          // --dump-npy: dump step dump_step here ("" = none)
    int dump_step = 0;             // 0-based (the flag --dump-step counts from 1, as log.csv does)
    int64_t tokens_per_step = 0;   // for tokens/s
    std::vector<std::string> eval_columns;  // names the eval callback returns
    std::string title;             // plot title
    // Resume (--save-every / --resume): what a checkpoint-<step> file holds besides the parameters and AdamW m, v.
    std::string binary;            // the binary that wrote it (a checkpoint resumes in the same one)
    std::map<std::string, std::string> flags;  // every flag's value (Cli::values; --resume inherits them)
    RandomState streams;           // the data's random streams ("data"); train() adds the model's (m.random_state())
    std::string resume_path;       // --resume: continue from this checkpoint ("" = start at step 1)
};

struct TrainResult {
    int steps_done = 0;
    double last_loss = NAN, ms_per_step = NAN, tokens_per_s = NAN;
    std::map<std::string, double> last_eval;
    std::vector<double> losses;    // training loss per step
};

// The optimizer, its schedule, evaluation, checkpoint and resume flags (--eval-batches 4).
void add_train_flags(Cli& cli);
// --beta1 --beta2 --adam-eps alone (part of add_train_flags; tint and duallens, whose trainers have their own
// schedule flags, add just these) and the AdamW config they give (weight decay 0, clipping 1 unless set after).
void add_adamw_flags(Cli& cli);
// --grad-accum K (part of add_train_flags; binaries that build their TrainOptions themselves add it alone) and its
// value, refusing --dump-npy with K > 1.
void add_grad_accum_flag(Cli& cli);
int grad_accum_from_cli(const Cli& cli);
AdamWConfig adamw_from_cli(const Cli& cli);

// --resume CKPT, right after cli.parse(): every flag of the resumed run comes from the checkpoint (Cli::inherit;
// only the flags of kResumeMayChange may be given with another value), --out defaults to the checkpoint's folder,
// and --load is refused. A no-op without --resume.
void resume_flags(Cli& cli);
extern const std::vector<std::string> kResumeMayChange;

// The checkpoint that fixes the architecture: --resume's, else --load's ("" = neither).
std::string architecture_checkpoint(const Cli& cli);

// --load / --resume: the config saved in the checkpoint. Refuses a checkpoint of another model kind, any of
// `arch_flags` given on the command line, and a model that does not fit the task.
template <typename Config>
Config checkpoint_config(const Cli& cli, const Task& task, const std::string& model, std::initializer_list<const char*> arch_flags) {
    const std::string path = architecture_checkpoint(cli), flag = cli.has_value("--resume") ? "--resume" : "--load";
    CheckpointInfo ci = read_checkpoint_metadata(path);
    if (ci.model != model) fail(flag + ": '" + path + "' holds a '" + ci.model + "' model, not '" + model + "'");
    Config saved = Config::from_json(checkpoint_config_json(ci));
    for (const std::string& f : given_arch_flags(cli, arch_flags))  // the listed flags and the --attn-* ones
        fail_usage(f + ": the architecture comes from " + flag + "; drop the flag");
    task.check_fits(saved.V, saved.d_in, saved.d_out, saved.maxT);
    return saved;
}

// --lr --warmup --min-lr-frac --beta1 --beta2 --adam-eps --weight-decay --grad-clip --eval-every --save-every --out --save
// --dump-npy --dump-step --resume as TrainOptions; creates the run directory (train_options_from_cli: --out, or
// out/<binary>/<preset-or-task>-<time>). The caller sets title, eval_columns and streams.
TrainOptions train_options(const Cli& cli, const std::string& binary, const std::string& run_dir, int64_t tokens_per_step, int steps);
inline TrainOptions train_options_from_cli(const Cli& cli, const std::string& binary, const Task& task, int steps) {
    const std::string name = cli.preset_name().empty() ? task.kind : cli.preset_name();
    return train_options(cli, binary, cli.has_value("--out") ? cli.get("--out") : default_run_dir(binary, name), (int64_t)task.B * task.T, steps);
}

// What a resumable checkpoint's metadata holds besides the parameters (see TrainOptions), and its inverse: restores
// the streams and returns the number of steps done, refusing a checkpoint of another binary or one without it.
std::map<std::string, std::string> train_state_metadata(const TrainOptions& o, const RandomState& rs, int steps_done, double loss);
int restore_train_state(const TrainOptions& o, const RandomState& rs);
// The log rows of steps 1..steps_done already in <run_dir>/log.csv, when it has these columns (else none).
std::vector<std::map<std::string, double>> earlier_log_rows(const std::string& path, const std::vector<std::string>& cols, int steps_done);

// summary.json's common part: binary, task, model config and size, every flag, threads, device, the run's
// figures, the checkpoint path and final_<metric> for each evaluation metric.
nlohmann::json run_summary(const std::string& binary, const Cli& cli, const Task& task, const nlohmann::json& model,
                           int64_t params, int threads, Device dev, const TrainOptions& o, const TrainResult& r);

// "final: train loss 2.5578  val_loss 2.5455 ..." (no newline; the binary adds its rates).
std::string final_line(const TrainResult& r);

// The dump of one step: the model's tensors and the batch, plus CGT's aux start positions (a model with aux_p).
template <typename Model>
auto model_dump_extras(const Model& m, int) -> decltype((void)m.aux_p, std::vector<typename decltype(m.s)::IntArray>{}) {
    if (m.aux_p.empty()) return {};
    return {{"batch.aux_start", "CGT: per sequence, the first remainder input p of the auxiliary pass (0-based; the spec's s = p+1)",
             {(int64_t)m.aux_p.size()}, m.aux_p}};
}
template <typename Model>
std::vector<typename decltype(Model::s)::IntArray> model_dump_extras(const Model&, long) { return {}; }

// The key starts (host) of the block at activation prefix h, for the dump's rebuilt attention probabilities: the
// model's own (the CGT's masked aux pass), else none.
template <typename Model>
auto dump_kstart(const Model& m, const std::string& h, int) -> decltype(m.dump_kstart(h)) { return m.dump_kstart(h); }
template <typename Model>
const int* dump_kstart(const Model&, const std::string&, long) { return nullptr; }

// The loss scales of K micro-batches: the model's own (the CGT: its aux pass), else plain_accumulation_scales.
template <typename Model>
auto accumulation_scales(Model& m, const std::vector<Batch>& micro, int) -> decltype(m.accumulation_scales(micro)) {
    return m.accumulation_scales(micro);
}
template <typename Model>
std::vector<LossScale> accumulation_scales(Model&, const std::vector<Batch>& micro, long) {
    return plain_accumulation_scales(micro);
}

// A micro-batch another rank runs: the model moves its random state as that forward would (GPT, CGT), if it has any.
template <typename Model>
auto skip_forward(Model& m, const Batch& b, int) -> decltype(m.skip_forward(b)) { m.skip_forward(b); }
template <typename Model>
void skip_forward(Model&, const Batch&, long) {}

// A micro-batch's loss scale and whether its backward adds to the parameter gradients; a wrapper of several model
// kinds sets them itself (duallens_experiments.cpp's AnyModel: set_micro).
template <typename Model>
auto set_micro_batch(Model& m, const LossScale& sc, bool add, int) -> decltype(m.set_micro(sc, add)) { m.set_micro(sc, add); }
template <typename Model>
void set_micro_batch(Model& m, const LossScale& sc, bool add, long) {
    m.scale = sc;                // this micro-batch's share of the step's loss (1 without accumulation)
    m.s.accumulate_grads = add;  // its backward adds to the parameter gradients instead of setting them
}
// One step's gradient from R ranks × K micro-batches. `micro` holds all R·K of them (every rank draws them all, so
// the data and random streams stay in step) with their loss scales; this rank runs its own, mine … mine+K−1 (the
// first backward zeroes the parameter gradients, the others add) and lets the model skip the others. Returns this
// rank's part of the step's loss; the caller sums it and the gradient across the ranks.
template <typename Model>
double run_micro_batches(Model& m, const std::vector<Batch>& micro, const std::vector<LossScale>& scales, int mine, int K) {
    double loss = 0;
    for (int i = 0; i < (int)micro.size(); i++) {
        if (i < mine || i >= mine + K) {  // another rank's
            skip_forward(m, micro[i], 0);
            continue;
        }
        set_micro_batch(m, scales[i], i > mine, 0);
        loss += m.forward(micro[i]);
        m.backward();
    }
    set_micro_batch(m, LossScale{}, false, 0);
    return loss;
}

// Tell the model the step about to run, if it wants it (the CGT's β warm-up).
template <typename Model>
auto tell_step(Model& m, int step, int) -> decltype(m.set_train_step(step)) { m.set_train_step(step); }
template <typename Model>
void tell_step(Model&, int, long) {}

template <typename Model>
TrainResult train(Model& m, const TrainOptions& o, const std::function<Batch(int)>& next_batch,
                  const std::function<std::map<std::string, double>()>& evaluate) {
    std::vector<std::string> cols = {"step", "loss", "lr", "grad_norm", "ms_per_step", "tokens_per_s"};
    for (auto& c : o.eval_columns) cols.push_back(c);
    RandomState rs = m.random_state();  // everything a resumable checkpoint holds besides the model's buffers
    rs.streams.insert(rs.streams.end(), o.streams.streams.begin(), o.streams.streams.end());
    rs.counters.insert(rs.counters.end(), o.streams.counters.begin(), o.streams.counters.end());
    int start = 0;  // steps already done
    std::string last_ckpt = "none written by this run";
    if (!o.resume_path.empty()) {
        m.s.load_resumable(o.resume_path);    // parameters, AdamW m and v, its step count
        start = restore_train_state(o, rs);  // the random streams and counters; the step
        last_ckpt = o.resume_path;
        if (!o.dump_dir.empty() && o.dump_step < start)
            fail_usage(strfmt("--dump-step %d: the run resumes at step %d; dump a later step", o.dump_step + 1, start + 1));
        std::fprintf(stderr, "resuming %s at step %d of %d\n", o.resume_path.c_str(), start + 1, o.steps);
    }
    const Comm& world = comm();
    const int K = std::max(1, o.grad_accum), R = world.size, mine = world.rank * K;  // this rank's micro-batches: mine … mine+K−1
    comm_require_device(m.s.dev);  // several processes on GPUs: NCCL compiled in
    // every rank starts from rank 0's parameters (nothing to send in one process, unless ICL_NCCL_ALWAYS=1: engine/comm.h)
    comm_broadcast_on(m.s.dev, m.s.params.ptr, m.s.ptable.total * sizeof(*m.s.params.ptr), 0);
    if (R > 1) {
        if (!o.dump_dir.empty()) fail_usage("--dump-npy: dumps one batch's step; not with several processes");
        const double mb = m.s.ptable.total * sizeof(*m.s.params.ptr) / 1e6;
        std::fprintf(stderr, "data-parallel: %d processes × %d micro-batch%s per step; every step sums the gradient (%.3g MB) across them: %s\n", R,
                     K, K == 1 ? "" : "es", mb,
                     m.s.dev == Device::cpu ? "each rank sends it once and receives it once (MPI: reduce to rank 0, broadcast back)"
                                            : "one NCCL all-reduce between the GPUs");
    }
    CsvLog log(o.run_dir + "/log.csv", cols, start ? earlier_log_rows(o.run_dir + "/log.csv", cols, start) : std::vector<std::map<std::string, double>>{});
    Progress progress(o.steps, o.progress_every);
    TrainResult r;
    double t_total = 0;
    int timed = 0;
    for (int step = start; step < o.steps; step++) {
        tell_step(m, step, 0);
        const bool dump_now = step == o.dump_step && !o.dump_dir.empty();
        keep_all_activation_gradients(m, dump_now, 0);  // the dump writes every block's activation gradients
        std::vector<Batch> micro;  // the step's batch, or its R·K micro-batches (every rank draws them all)
        for (int i = 0; i < R * K; i++) micro.push_back(next_batch(step));
        const Batch& batch = micro[0];
        double t0 = now_seconds(), t_dump = 0;
        const std::vector<LossScale> scales = micro.size() > 1 ? accumulation_scales(m, micro, 0) : std::vector<LossScale>(1);
        double loss = run_micro_batches(m, micro, scales, mine, K);
        // the step's gradient and loss: the sums over the ranks (the same bits on every rank; nothing in one process)
        comm_sum_on(m.s.dev, m.s.grads.ptr, m.s.ptable.total);
        comm_sum(&loss, 1);
        if (!std::isfinite(loss)) {  // after the sum: a NaN on any rank stops every rank with the same message
            progress.finish();
            fail(strfmt("step %d: the loss is %s; stopping (last good checkpoint: %s)", step + 1, std::isnan(loss) ? "NaN" : "Inf", last_ckpt.c_str()));
        }
        if (dump_now) {  // not part of the step's time
            const double td = now_seconds();
            m.s.dump_npy(o.dump_dir, step + 1, &batch, model_dump_extras(m, 0),
                         attention_probability_dumps(m.s, [&](const std::string& h) { return dump_kstart(m, h, 0); }));
            std::fprintf(stderr, "wrote every parameter, activation and gradient of step %d, and its batch, to %s/ (index.json)\n", step + 1,
                         o.dump_dir.c_str());
            t_dump = now_seconds() - td;
        }
        double lr = lr_schedule(step, o.lr, o.warmup, o.steps, o.min_lr_frac);
        double norm = m.s.update(o.adam, lr);
        if (!std::isfinite(norm)) {
            progress.finish();
            std::string bad = m.s.first_nonfinite_grad();
            fail(strfmt("step %d: the gradient of '%s' is not finite; stopping before the update (last good checkpoint: %s)", step + 1,
                        bad.empty() ? "?" : bad.c_str(), last_ckpt.c_str()));
        }
        device_sync(m.s.dev);
        double dt = now_seconds() - t0 - t_dump;
        if (step > start || o.steps == start + 1) { t_total += dt; timed++; }  // the first step warms up (unless it is the only one)
        double tps = o.tokens_per_step * R / dt;  // every rank's tokens
        r.losses.push_back(loss);
        r.last_loss = loss;
        std::map<std::string, double> row = {{"step", step + 1}, {"loss", loss}, {"lr", lr}, {"grad_norm", norm},
                                             {"ms_per_step", dt * 1e3}, {"tokens_per_s", tps}};
        bool last = step + 1 == o.steps;
        std::string extra;
        if (evaluate && ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last)) {
            const RandomSnapshot before(rs);  // an evaluation draws nothing from the training streams (the CGT's aux
            r.last_eval = evaluate();         // positions of its validation passes: their number follows --batch)
            before.restore(rs);
            for (auto& kv : r.last_eval) {
                row[kv.first] = kv.second;
                extra += strfmt("%s %.4g  ", kv.first.c_str(), kv.second);
            }
        }
        log.row(row);
        progress.update(step, loss, tps, extra);
        const bool save_ckpt = o.save_every > 0 && (step + 1) % o.save_every == 0, save_final = last && !o.save_path.empty();
        if (save_ckpt || save_final) {  // never save a non-finite parameter, even one the loss does not read
            const std::string bad = m.s.first_nonfinite_param();
            if (!bad.empty()) {
                progress.finish();
                fail(strfmt("step %d: parameter '%s' holds a NaN or Inf; stopping without saving (last good checkpoint: %s)", step + 1,
                            bad.c_str(), last_ckpt.c_str()));
            }
        }
        if (save_ckpt) {
            log.flush();  // the log on disk reaches the checkpoint's step
            const std::string path = o.run_dir + strfmt("/checkpoint-%d.safetensors", step + 1);
            m.s.save_resumable(path, train_state_metadata(o, rs, step + 1, loss));
            last_ckpt = path;
        }
        if (save_final) m.s.save(o.save_path, {{"step", std::to_string(step + 1)}, {"loss", strfmt("%.6g", loss)}});
        r.steps_done = step + 1;
    }
    log.flush();
    progress.finish();
    r.ms_per_step = timed ? t_total / timed * 1e3 : NAN;
    r.tokens_per_s = timed ? o.tokens_per_step * R / (t_total / timed) : NAN;
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
