// cgt_experiment.h — train_cgt's runs: one CGT (or baseline) trained with the shared trainer and then
// evaluated for its task (models/cgt/cgt_eval.h), and --compare experiments that train several variants over
// several seeds and write the comparison table (spec/cgt.md §5: Table 1 style, mean ± 95% interval over the
// seeds, then the paired differences between variants).
//
//   variants (--compare a,b,…), all sharing every architecture flag:
//     baseline   the x-only GPT (ℓ = 0: same registry, same x weights; no y stream)
//     eta1       CGT, η = 1, no regularizers          ("no Aux/Reg")
//     aux        CGT, η = --eta, no regularizers      ("Aux")
//     aux-reg    CGT, η = --eta, w_C = --wc, w_D = --wd  ("Aux + Reg")
//     reg        CGT, η = 1, w_C, w_D                  (the paper's heatmap model)
//     vae:β      the VAE variant with KL weight β, η = --eta, no element-wise regularizers
//     flags      exactly the flags given
//
// A run folder holds log.csv, loss.png, summary.json, model.safetensors and the analyses (yl.npy, ndot.png,
// ytrace.png, spectrum.png; lr_curves.png for linear regression). An experiment folder holds one run folder
// per (variant, seed), table.md, summary.json and the cross-run plots.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/task.h"
#include "engine/cli.h"
#include "models/cgt/cgt.h"
#include "models/cgt/cgt_eval.h"
#include "models/trainer.h"

namespace icl {

struct CGTVariant {
    std::string name;
    CGTConfig cfg;
    CGTLoss loss;
};
// The variant `name` built from the flags' config and loss (fail_usage for an unknown name).
CGTVariant cgt_variant(const std::string& name, const CGTConfig& cfg, const CGTLoss& loss);

struct ExperimentOptions {
    int eval_seqs = 256;               // sequences of the final evaluation (fixed seed, the same for every run)
    int eval_batch = 64;
    std::vector<int> freeze_k;         // linear regression: frozen curves after these many samples
    bool task_vectors = true;          // ICL: the task-vector baseline for models without y
    int analysis_seqs = 64;            // sequences for the y analyses (heatmap, spectrum)
    TextEvalOptions text;              // text mixtures (--task mix)
};
ExperimentOptions experiment_options_from_cli(const Cli& cli);

struct CGTRun {
    std::string variant, dir;
    uint64_t seed = 0;
    std::unique_ptr<CGT<float>> model;
    TrainResult train;
    ICLEval icl;
    LREval lr;
    TextEval text;
    YAnalysis y;
    nlohmann::json summary;            // what dir/summary.json holds
};

// Train (steps from --steps; --load continues a checkpoint) and evaluate one variant in `dir`, writing its
// summary.json. `o` carries the schedule and checkpoint cadence (run_dir/save_path are replaced by dir's).
CGTRun cgt_train_and_evaluate(const Cli& cli, Task& task, const CGTVariant& v, uint64_t seed, const std::string& dir, TrainOptions o,
                              const ExperimentOptions& eo, Device dev, int threads);

// --compare: every variant × --seeds seeds in RUN/<variant>-s<seed>/, then RUN/table.md, RUN/summary.json,
// the cross-run plots, and the table on stdout.
int cgt_compare(const Cli& cli, const std::vector<std::string>& variants, const CGTConfig& cfg, const CGTLoss& loss, Device dev, int threads);

// --retable DIR: the table of a finished --compare run rebuilt from the evaluations its DIR/summary.json stores
// (every run's "eval"), with today's aggregation — mean ± 95% interval and the paired differences — into
// DIR/table-retabled.md; nothing is retrained. The runs keep their own provenance (named in the file).
int cgt_retable(const std::string& dir);

// The Table-1-style markdown table of an arithmetic experiment (rows: metrics; columns: variants; cells
// "mean ± 95% CI" over the runs of each variant, then the paired differences) — exposed for tests.
std::string icl_table_markdown(const std::vector<std::string>& variants, const std::vector<std::vector<ICLEval>>& runs);

}  // namespace icl
