// tint — TinT (spec/tint.md): a simulator transformer that runs, back-propagates and fine-tunes a small OPT-like
// auxiliary transformer stored in its prefix tokens, in one forward pass. Subcommands:
//
//   tint check    the simulator vs oracle A (fp64 and fp32) and its k=1 update vs exact SGD (oracle B); exit 1 if off
//   tint params   the constructed simulator's parameter count; the §6 formula for OPT-125m … 2.7b beside Table 1
//   tint train    train the auxiliary model (the engine's GPT with ReLU or GELU) on a text file or the few-shot task
//   tint lm       language modelling (§7.1): perplexity before/after the simulated update vs dynamic evaluation
//   tint fewshot  few-shot classification (§7.2): Single/Multi, label/full-context loss; a synthetic labelled task, or
//                 with --load-hf a pretrained model on a labelled text dataset (--dataset) in the paper's templates
//   tint eps      errors vs the finite-difference ε and vs attention hardness (§5)
//   tint bench    a full simulated pass vs oracle A's explicit computation: time, ratio, memory
//
// Runs write to out/tint/<sub>-<time>/ (or --out): table.csv / log.csv, PNG plots, summary.json.
#include "engine/cli.h"
#include "engine/common.h"
#include "engine/device.h"
#include "engine/provenance.h"
#include "engine/run.h"
#include "models/gpt.h"
#include "models/tint/tint_experiments.h"
#include "models/trainer.h"

using namespace icl;

namespace {

const char* kDefaultText = "/usr/share/common-licenses/GPL-3";

const std::vector<Subcommand> kSubcommands = {
    {"check", tint_cmd::cmd_check},
    {"params", tint_cmd::cmd_params},
    {"train", tint_cmd::cmd_train},
    {"lm", tint_cmd::cmd_lm},
    {"fewshot", tint_cmd::cmd_fewshot},
    {"eps", tint_cmd::cmd_eps},
    {"bench", tint_cmd::cmd_bench},
};

// Which subcommands read each flag; a flag given to any other is refused, not ignored. The architecture flags, --seed,
// --threads and --out are everyone's (--layers … --act are refused beside --load where a subcommand takes one).
const FlagUsers kFlagUsers = {
    {"--save", {"train"}}, {"--load", {"check", "params", "lm", "fewshot", "eps", "bench"}}, {"--load-hf", {"params", "lm", "fewshot"}},
    {"--tokenizer", {"lm", "fewshot"}}, {"--dataset", {"fewshot"}}, {"--eval-data", {"fewshot"}}, {"--template", {"fewshot"}},
    {"--label-words", {"fewshot"}},
    {"--dump-npy", {"train", "lm", "fewshot", "check"}}, {"--task", {"train"}}, {"--data", {"train", "lm"}},
    {"--steps", {"train", "lm", "fewshot"}}, {"--batch", {"train", "lm", "fewshot"}}, {"--lr", {"train", "lm", "fewshot"}},
    {"--warmup", {"train", "lm", "fewshot"}}, {"--eval-every", {"train", "lm", "fewshot"}},
    {"--grad-accum", {"train", "lm", "fewshot"}}, {"--beta1", {"train", "lm", "fewshot"}}, {"--beta2", {"train", "lm", "fewshot"}}, {"--adam-eps", {"train", "lm", "fewshot"}},
    {"--init-std", {"check", "eps", "bench"}},
    {"--S", {"check", "params", "lm", "fewshot", "eps", "bench"}}, {"--H-sim", {"check", "params", "lm", "fewshot", "eps", "bench"}},
    {"--eps", {"check", "params", "lm", "fewshot", "eps", "bench"}},
    {"--gate-scale", {"check", "params", "lm", "fewshot", "eps", "bench"}},
    {"--ln-gamma", {"check", "params", "lm", "fewshot", "bench"}},
    {"--loss-layers", {"check", "params", "lm", "fewshot", "bench"}},
    {"--eta", {"check", "bench"}}, {"--k", {"check", "params", "bench"}}, {"--s", {"check", "bench"}},
    {"--budgets", {"lm", "fewshot"}}, {"--etas", {"lm", "fewshot"}}, {"--fracs", {"lm"}}, {"--windows", {"lm"}},
    {"--dev-windows", {"lm"}}, {"--demos", {"fewshot"}}, {"--labels", {"fewshot"}}, {"--episodes", {"fewshot"}}, {"--dev-episodes", {"fewshot"}},
    {"--seeds", {"lm", "fewshot"}},
};

void register_flags(Cli& cli) {
    add_common_flags(cli, {"3000", "16", "3e-3", "1"});
    add_subcommands(cli, kSubcommands);
    cli.flag("--task", "text", "train: text (bytes of --data) | fewshot (the synthetic labelled task)");
    cli.flag("--data", kDefaultText, "text: a text file (bytes; with --load-hf its GPT-2 tokens); 10% at the end is validation");
    cli.flag("--load-hf", "", "params, lm, fewshot: a pretrained auxiliary model, a Hugging Face OPT (pre-LN) or GPT-2 folder or an llm.c .bin "
                              "(models/pretrained.h); --seq N keeps its first N positions (the lm window)");
    cli.flag("--tokenizer", "", "lm, fewshot with --load-hf: a GPT-2 tokenizer folder (default: the --load-hf folder's vocab.json + merges.txt)");
    cli.flag("--dataset", "", "fewshot with --load-hf: a labelled text file, one example per line 'LABEL<TAB>TEXT' (LABEL = class index 0, 1, …); "
                              "the demonstrations come from it");
    cli.flag("--eval-data", "", "fewshot with --dataset: the evaluation examples' file, same format (default: the --dataset lines not drawn as "
                                "demonstrations)");
    cli.flag("--template", "sst2", "fewshot with --dataset: the paper's prompt (spec §7.2): sst2 'Review: {text}\\nSentiment: {Negative|Positive}' "
                                   "| agnews 'Article: {text}\\nWhat is the article about? Answer: {World|Sports|Business|Technology}' | subj "
                                   "'{text} This is {objective|subjective}'");
    cli.flag("--label-words", "", "fewshot with --dataset: replace the template's label words (comma list, one per class, each a single token "
                                  "after a space)");
    cli.flag("--act", "relu", "auxiliary MLP activation: relu (OPT) | gelu (GPT-2)");
    add_gpt_flags(cli, {"4", "48", "3", false});  // the auxiliary model is the engine's GPT (width divisible by --S)
    cli.flag("--seq", "64", "auxiliary positions T (= the evaluation window of lm; the context of fewshot)");
    cli.flag("--init-std", "0.3", "check/eps/bench without --load: a random auxiliary model, weights N(0, std)");
    cli.flag("--warmup", "100", "train: learning-rate warm-up steps");
    cli.flag("--eval-every", "500", "train: evaluate every N steps");
    add_adamw_flags(cli);  // the auxiliary model's AdamW (train, and lm / fewshot when they train it)
    add_grad_accum_flag(cli);
    cli.flag("--S", "3", "TinT: weight rows per prefix token (K = d/S prefixes, D = d(S+1))");
    cli.flag("--H-sim", "12", "TinT: heads of the softmax modules");
    cli.flag("--eps", "1e-3", "TinT: finite-difference step ε = 1/N of the LayerNorm / activation backward");
    cli.flag("--eta", "1e-2", "check/bench: inner SGD learning rate (on the summed loss)");
    cli.flag("--gate-scale", "10", "TinT: tanh gate sharpness (fp64 checks use 20)");
    cli.flag_switch("--ln-gamma", "TinT: also descend the LayerNorm gains γ (exact diagonal update, per-coordinate gates); "
                                  "default β only, as the paper (dyn evaluation then trains γ too)");
    cli.flag_switch("--loss-layers", "TinT: compute the loss gradient with App. G's loss head — TinT layers (a softmax feed-forward layer over "
                                     "the vocabulary, a self and a shift-by-one attention head) — instead of the direct module of the official "
                                     "code; the same gradient (docs/tint.md)");
    cli.flag("--k", "1", "check/bench: simulated (updated) top layers");
    cli.flag("--s", "1", "check/bench: inner steps");
    cli.flag("--budgets", "4:1,2:2,1:4", "lm/fewshot: k:s budgets (equal cost when k·s is constant)");
    cli.flag("--fracs", "0.3,0.5,0.7,0.9", "lm: training fractions of each window");
    cli.flag("--etas", "", "lm/fewshot: inner learning rates (summed loss); the best on the dev part is reported on the test part (default: lm 1e-5,3e-5,1e-4,3e-4,1e-3; fewshot 3e-3,1e-2,3e-2,1e-1,3e-1)");
    cli.flag("--windows", "48", "lm: test windows (non-overlapping, from the validation text)");
    cli.flag("--dev-windows", "16", "lm: dev windows (choose η)");
    cli.flag("--demos", "4", "fewshot: demonstrations per episode (class-balanced; the paper: 32)");
    cli.flag("--labels", "new", "fewshot, synthetic task: the episodes' label words: new (NEW0/NEW1, never seen in pretraining; a coin per "
                                "episode names the classes) | flip (the pretraining words LABEL0/LABEL1, swapped in half of the episodes: "
                                "there the demonstrations contradict what the model learned)");
    cli.flag("--episodes", "100", "fewshot: test episodes");
    cli.flag("--dev-episodes", "40", "fewshot: dev episodes (choose η)");
    cli.flag("--seeds", "1", "lm, fewshot: run the whole study for seeds --seed, --seed+1, … (each in <out>/seed<i>/) and tabulate mean ± 95% CI "
                             "over them with paired differences (<out>/table.md)");
    cli.preset("tiny", "seconds-long smoke runs", {{"--steps", "40"}, {"--layers", "2"}, {"--width", "24"}, {"--seq", "32"}, {"--windows", "4"},
                                                   {"--dev-windows", "2"}, {"--episodes", "6"}, {"--dev-episodes", "4"}, {"--budgets", "2:1,1:2"},
                                                   {"--fracs", "0.5"}, {"--etas", "1e-2"}, {"--demos", "2"}, {"--eval-every", "20"}});
    cli.epilog(
        "examples:\n"
        "  tint check                                  # simulator vs oracles on a random auxiliary model (fp64, fp32)\n"
        "  tint params                                 # parameter counts beside the paper's Table 1\n"
        "  tint train --task text --save out/lm.safetensors\n"
        "  tint lm --load out/lm.safetensors           # perplexity: vanilla / TinT / dynamic evaluation\n"
        "  tint fewshot                                # trains the few-shot model first if no --load\n"
        "  tint eps; tint bench --threads 1\n"
        "  tint lm --load-hf opt-125m --seq 128 --data wiki.txt   # a pretrained OPT as the auxiliary model (a long CPU job)\n"
        "  tint bench --device cuda                    # the fp32 simulator on the GPU (also: check, eps, lm, fewshot; train trains\n"
        "                                              # the auxiliary model there); oracles and fp64 references stay on the CPU\n"
        "  tint fewshot --load-hf opt-125m --dataset sst2-train.tsv --eval-data sst2-dev.tsv --demos 32 --seeds 3   # spec §7.2");
}

const char* kSummary = "TinT: a simulator transformer that runs, back-propagates and fine-tunes a small auxiliary transformer stored in prefix tokens.";

// --seeds N: the study once per seed (the same command line with --seed s+i --out <out>/seed<i+1>), then one table.
int run_seeds(const Cli& cli, const std::vector<std::string>& args, int n) {
    const std::string sub = cli.args()[0];
    if (sub == "lm" && (cli.has_value("--load") || cli.has_value("--load-hf")))
        fail_usage("--seeds: tint lm with a given model has nothing random (fixed windows of a fixed model); the seeds vary the trained auxiliary model");
    const std::string dir = subcommand_run_dir(cli, "tint", sub);
    std::vector<std::string> runs;
    int k = 0;
    for (const std::vector<std::string>& a : per_seed_args(args, cli.get_seed(), n, dir)) {
        Cli one("tint", kSummary);
        register_flags(one);
        one.parse(a);
        std::fprintf(stderr, "tint %s: seed %llu (%d of %d)\n", sub.c_str(), (unsigned long long)one.get_seed(), ++k, n);
        SeedScope scope((int64_t)one.get_seed());  // the seed's own summary.json names its seed
        run_subcommand(one, kSubcommands);
        runs.push_back(one.get("--out"));
    }
    return tint_cmd::aggregate_seeds(cli, sub, dir, runs);
}

int run(int argc, char** argv) {
    Cli cli("tint", kSummary);
    register_flags(cli);
    if (!cli.parse(argc, argv)) return 0;
    refuse_unused_flags(cli, cli.args().empty() ? "" : cli.args()[0], kFlagUsers);
    apply_run_flags(cli);  // --device: the fp32 simulator and the auxiliary model's training (tint_experiments.h: sim_device)
    const int seeds = (int)cli.get_int("--seeds", 1, 100);
    if (seeds > 1) return run_seeds(cli, std::vector<std::string>(argv + 1, argv + argc), seeds);
    return run_subcommand(cli, kSubcommands);
}

}  // namespace

int main(int argc, char** argv) { return cli_main(argc, argv, run); }
