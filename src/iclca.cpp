// iclca — kernel-attention LMs with RoPE and bias terms, and the exact conversion of an in-context prompt into
// those biases (spec/iclca.md). Subcommands:
//
//   iclca train    train a kernel LM (induction task or a byte-level text file); writes a checkpoint
//   iclca convert  --load CKPT --prompt TEXT|FILE --save CKPT2 : fold the prompt into the biases (exact)
//   iclca eval     --load CKPT : loss (and induction accuracy) of a trained or converted checkpoint
//   iclca generate --load CKPT --prompt TEXT : greedy continuation (a converted checkpoint continues its prompt)
//   iclca e1       exactness table: relative logit error prompted vs converted, fp32 and fp64, + no-ICL contrast
//   iclca e2       induction task: ICL accuracy with prompt / converted / neither
//   iclca e3       bias terms trained from scratch vs none, a few seeds (plot)
//   iclca e4       softmax GPT: approximate conversion with Performer (FAVOR+) features, error vs features
//   iclca bench    prompted vs converted inference cost over M; training-form throughput vs the softmax GPT over T
//
// Runs write to out/iclca/<sub>-<time>/ (or --out): log.csv / table.csv, PNG plots, summary.json.
#include <algorithm>

#include "engine/cli.h"
#include "engine/common.h"
#include "engine/device.h"
#include "engine/provenance.h"
#include "models/iclca/iclca_experiments.h"
#include "models/iclca/kernel_lm.h"
#include "models/trainer.h"

using namespace icl;

namespace {

const std::vector<Subcommand> kSubcommands = {
    {"train", iclca_cmd::cmd_train},
    {"convert", iclca_cmd::cmd_convert},
    {"eval", iclca_cmd::cmd_eval},
    {"generate", iclca_cmd::cmd_generate},
    {"e1", iclca_cmd::cmd_e1},
    {"e2", iclca_cmd::cmd_e2},
    {"e3", iclca_cmd::cmd_e3},
    {"e4", iclca_cmd::cmd_e4},
    {"bench", iclca_cmd::cmd_bench},
};

// The flags only some subcommands read: given to another, they are refused rather than ignored.
const FlagUsers kFlagUsers = {
    {"--resume", {"train"}}, {"--save-every", {"train"}}, {"--grad-accum", {"train", "e2", "e3"}}, {"--dump-step", {"train", "e2"}}, {"--dump-npy", {"train", "e2"}},
    {"--eval-batches", {"eval"}}, {"--task", {"train", "eval"}}, {"--data", {"train", "eval"}}, {"--prompt", {"convert", "generate", "e4"}},
    {"--input", {"e4"}}, {"--load-hf", {"e4"}}, {"--tokenizer", {"e4"}},
    {"--p0", {"convert"}}, {"--save", {"train", "convert"}}, {"--load", {"train", "convert", "eval", "generate", "e2", "e4"}},
    {"--trials", {"e1", "e2", "e4"}}, {"--sizes", {"e1"}}, {"--M", {"e1", "e4"}}, {"--N", {"e1", "e4"}}, {"--seeds", {"e2", "e3"}},
    {"--replot", {"e3"}}, {"--Ms", {"bench"}}, {"--Ts", {"bench"}}, {"--gen", {"bench", "generate"}}, {"--features", {"e4"}},
    {"--orf", {"e4"}}, {"--attn-std", {"e4"}}, {"--attention", {"e1"}},
};

void register_flags(Cli& cli) {
    add_common_flags(cli, {"10000", "32", "1e-3", "1"});
    add_subcommands(cli, kSubcommands);
    cli.flag("--task", "induction", "train: induction | text");
    cli.flag("--data", "", "train --task text: a text file (bytes)");
    add_kernel_lm_flags(cli);  // --layers --width --heads --bias --eps (models/iclca/kernel_lm.h); e4's GPT reads the first three
    cli.flag("--attention", "kernel", "e1: the models' attention — kernel (the ICLCA model: φ = elu+1, RoPE, causal; Theorem 4.5) or linear "
                                      "(Theorem 4.1's case: φ = I, no denominator, no RoPE, no mask, b_KV only; exact for one layer, CPU only)");
    cli.flag("--seq", "128", "training / eval sequence length T (e2: prompt M = input N = T/2)");
    add_train_flags(cli);  // train (and e2, e3 when they train): --warmup … --save-every --resume (models/trainer.h)
    cli.set_default("--warmup", "50");
    cli.set_default("--weight-decay", "0.01");
    cli.set_default("--eval-every", "250");
    cli.flag("--prompt", "", "convert: prompt text, or a file holding it; generate: the text to continue; e4 with --load-hf: the ICL "
                             "prompt (text or file, tokenized by the model's tokenizer; then --input is what follows it)");
    cli.flag("--input", "", "e4 with --load-hf and --prompt: the input text after the prompt (the paper: \"He is the CEO of\")");
    cli.flag("--load-hf", "", "e4: a pretrained softmax GPT (Hugging Face GPT-2 / OPT folder or llm.c .bin; models/pretrained.h)");
    cli.flag("--tokenizer", "", "e4 with --prompt: GPT-2 tokenizer folder (default: the --load-hf folder's vocab.json + merges.txt)");
    cli.flag("--p0", "0", "convert: position of the prompt's first token (the converted model starts its input there)");
    cli.flag("--trials", "20", "e1: random (model, prompt, input) draws per size, e4: random (model, prompt, input, features) draws — "
                               "the replicates of their mean ± 95% CI (each its own seed, derived from --seed); e2: evaluation chains");
    cli.flag("--sizes", "205k,2m,20m", "e1: model sizes among 205k,2m,20m,200m,2b (the paper's Table 1; 200m needs ~4 GB of memory, 2b ~32 GB)");
    cli.flag("--M", "8-128", "prompt tokens: e1 draws each pair's M from a range lo-hi (or takes one number); e4: one number (40 if not given)");
    cli.flag("--N", "8-128", "input tokens: as --M (e4: 20 if not given)");
    cli.flag("--seeds", "3", "e3: seeds per arm; e2: models trained from seeds seed.. (with --load: evaluation draws), mean ± 95% CI (default 1)");
    cli.flag("--replot", "0", "e3: 1 = only rebuild the plots and summary from the runs already in --out (no training)");
    cli.flag("--Ms", "0,64,256,1024,4096", "bench: prompt lengths");
    cli.flag("--Ts", "256,512,1024,2048,4096", "bench: training lengths");
    cli.flag("--gen", "32", "bench: generated tokens per request; generate: tokens to generate");
    cli.flag("--features", "16,64,256,1024,4096", "e4: numbers of Performer random features m");
    cli.flag("--orf", "1", "e4: 1 = orthogonal random features (ORF), 0 = i.i.d. (PRF)");
    cli.flag("--attn-std", "1.0", "e4, random-init GPT: target std of the attention logits q.k/sqrt(hs) (qkv weights ~ N(0, attn-std/C))");
    cli.preset("tiny", "seconds-long smoke runs", {{"--steps", "30"}, {"--trials", "3"}, {"--sizes", "205k"}, {"--seeds", "1"},
                                                   {"--Ms", "0,64,256"}, {"--Ts", "256,512"}, {"--seq", "64"}, {"--eval-every", "10"}});
    cli.preset("paper-e1",
               "e1 at every size of the paper's Table 1, 100 pairs each (a big-machine job: the 2b model needs ~32 GB of host memory; "
               "fp64 at most 3 pairs above 10M parameters, none above 1B)",
               {{"--sizes", "205k,2m,20m,200m,2b"}, {"--trials", "100"}});
    cli.epilog(
        "examples:\n"
        "  iclca train --save out/ind.safetensors     # induction-task kernel LM (10000 steps, ~8 min on one core)\n"
        "  iclca convert --load out/ind.safetensors --prompt abXcdYabXef --save out/conv.safetensors\n"
        "  iclca generate --load out/conv.safetensors --prompt ab --gen 8     # = the original model continuing abXcdYabXef+ab\n"
        "  iclca eval --load out/conv.safetensors                       # loss / accuracy of a (converted) checkpoint\n"
        "  iclca e1 --trials 100                                        # exactness table\n"
        "  iclca e2 --load out/ind.safetensors                          # induction accuracy (trains if no --load)\n"
        "  iclca e4 --layers 3 --width 64 --heads 4 --M 40 --N 20 --trials 5   # Performer ICLAA on a softmax GPT\n"
        "  iclca e4 --load out/train_gpt/run/model.safetensors                  # ... on any GPT checkpoint\n"
        "  iclca bench");
}

int run(int argc, char** argv) {
    Cli cli("iclca", "Kernel-attention LMs with RoPE + bias terms, and the exact conversion of an ICL prompt into those biases.");
    register_flags(cli);
    if (!cli.parse(argc, argv)) return 0;
    const std::string sub = cli.args().empty() ? "" : cli.args()[0];
    if ((sub == "e1" || sub == "e4") && cli.given("--seeds"))
        fail_usage("--seeds: " + sub + "'s replicates are --trials (each trial a fresh random model, prompt, input" +
                   (sub == "e4" ? " and feature draw" : std::string()) + ", each its own seed; mean ± 95% CI over the trials)");
    refuse_unused_flags(cli, sub, kFlagUsers);
    if (sub == "train") resume_flags(cli);  // --resume: the run's flags from its checkpoint
    apply_run_flags(cli);  // --threads, --device (each subcommand builds its models there: iclca_experiments.cpp)
    if (sub != "e3") {  // --seeds is e3's (and e2's when given); e1's and e4's replicates are their trials; the others have one seed
        RunRecord r = run_record();
        r.seeds = sub == "e2" && cli.given("--seeds") ? (int)cli.get_int("--seeds", 1, 100)
                  : sub == "e1" || sub == "e4"       ? (int)cli.get_int("--trials", 1, 100000)
                                                      : 1;
        set_run_record(r);
    }
    return run_subcommand(cli, kSubcommands);
}

}  // namespace

int main(int argc, char** argv) { return cli_main(argc, argv, run); }
