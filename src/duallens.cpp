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
#include "engine/cli.h"
#include "engine/common.h"
#include "engine/device.h"
#include "models/duallens/duallens_experiments.h"
#include "models/trainer.h"

using namespace icl;

namespace {

const std::vector<Subcommand> kSubcommands = {
    {"check", duallens_cmd::cmd_check},
    {"features", duallens_cmd::cmd_features},
    {"experiment", duallens_cmd::cmd_experiment},
};

// Which subcommands read each flag; a flag given to any other is refused, not ignored. No subcommand reads or writes
// a checkpoint; only check dumps. --seed, --threads and --out are everyone's.
const std::vector<std::string> kExp = {"experiment"};
const FlagUsers kFlagUsers = {
    {"--load", {}}, {"--save", {}}, {"--dump-npy", {"check"}}, {"--features", {"features"}}, {"--feature-seeds", {"features"}},
    {"--steps", kExp}, {"--batch", kExp}, {"--grad-accum", kExp}, {"--lr", kExp}, {"--beta1", kExp}, {"--beta2", kExp}, {"--adam-eps", kExp},
    {"--models", kExp}, {"--noises", kExp}, {"--families", kExp}, {"--seeds", kExp}, {"--dim", kExp}, {"--pairs", kExp},
    {"--init-std", kExp}, {"--width", kExp}, {"--heads", kExp}, {"--warmup", kExp}, {"--eval-every", kExp},
    {"--val-prompts", kExp}, {"--test-prompts", kExp}, {"--retabulate", kExp},
};

void register_flags(Cli& cli) {
    add_common_flags(cli, {"5000", "64", "1e-3", "1"});
    add_subcommands(cli, kSubcommands);
    cli.flag("--features", "64,256,1024,4096,16384,65536", "features: numbers of random features d_r");
    cli.flag("--feature-seeds", "50", "features: draws of the random features per d_r");
    cli.flag("--models", "m1,m2", "experiment: m1 (one head on raw tokens, 108 parameters) and/or m2 (GPT, 1 block)");
    cli.flag("--noises", "0,0.1", "experiment: label noise levels sigma");
    cli.flag("--families", "baseline,regularized,augmented,negative", "experiment: which sweeps of spec R5 to run");
    cli.flag("--seeds", "3", "experiment: seeds per configuration");
    cli.flag("--dim", "5", "experiment: input dimension d");
    cli.flag("--pairs", "20", "experiment: context pairs N (prompt = N tokens [x;y] + the query [x_q;0])");
    cli.flag("--init-std", "0.3", "experiment, m1: std of the W_Q, W_K, W_V (and adapter A) init");
    cli.flag("--width", "32", "experiment, m2: model width");
    cli.flag("--heads", "2", "experiment, m2: attention heads");
    cli.flag("--warmup", "100", "experiment: learning-rate warm-up steps (then cosine to 0.1 lr)");
    cli.flag("--eval-every", "250", "experiment: validation nMSE (learning curves) every N steps");
    add_adamw_flags(cli);  // experiment: the trained models' AdamW (no weight decay, clipping at 1)
    add_grad_accum_flag(cli);
    cli.flag("--val-prompts", "1000", "experiment: fixed validation prompts for the learning curves");
    cli.flag("--test-prompts", "10000", "experiment: fresh test prompts for the final table");
    cli.flag("--retabulate", "", "experiment: no training; rebuild the table, results.md and plots of the run in DIR from its runs.csv and "
                                 "curves.csv (give the run's own flags)");
    cli.preset("tiny", "seconds-long smoke runs", {{"--steps", "60"}, {"--seeds", "1"}, {"--noises", "0"}, {"--feature-seeds", "4"},
                                                   {"--features", "64,1024"}, {"--eval-every", "30"}, {"--val-prompts", "200"},
                                                   {"--test-prompts", "500"}});
    cli.epilog(
        "examples:\n"
        "  duallens check                                   # every theory check (seconds); exit 1 on a failure\n"
        "  duallens check --dump-npy out/r1                 # + R1's A, D, W1, y, h as .npy\n"
        "  duallens features                                # PRF error vs d_r (log-log plot)\n"
        "  nice duallens experiment --threads 1             # R5, both models, all sweeps, 3 seeds (tens of minutes)\n"
        "  duallens experiment --models m1 --families baseline,negative --noises 0 --seeds 2\n"
        "The modified attentions are also a flag of train_gpt and train_cgt: --attn-mod regularized|augmented|negative (see their --help).");
}

int run(int argc, char** argv) {
    Cli cli("duallens", "Softmax attention as one gradient step on a dual model: theory checks, random-feature convergence, and the "
                        "regularized / augmented / negative-sample attentions on in-context regression (spec/duallens.md).");
    register_flags(cli);
    if (!cli.parse(argc, argv)) return 0;
    refuse_unused_flags(cli, cli.args().empty() ? "" : cli.args()[0], kFlagUsers);
    const Device dev = apply_run_flags(cli).dev;
    const std::string sub = cli.args().empty() ? "" : cli.args()[0];
    if (dev != Device::cpu && !sub.empty() && sub != "experiment")  // like an unused flag (refuse_unused_flags): no model of check or features runs anywhere
        fail_usage("--device " + std::string(device_name(dev)) + ": '" + sub + "' computes its checks in fp64 on the host and trains no model; "
                   "--device is experiment's (its M1 and M2 models)");
    return run_subcommand(cli, kSubcommands);
}

}  // namespace

int main(int argc, char** argv) { return cli_main(argc, argv, run); }
