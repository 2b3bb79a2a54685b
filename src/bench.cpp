// bench.cpp — benchmarks on the CPU, or with --device cuda on the GPU.
//
//   bench [SUBCOMMAND]... [--device cpu|cuda] [--tf32] [--threads N] [--reps N]
//
// Subcommands (none given: run them all, in table order):
//   model   ms per train_gpt step (forward + backward + AdamW) and tokens/s at --layers/--width/--heads/
//           --seq/--batch/--vocab (default: L=6, C=384, NH=6, T=256, B=8, V=256), the step's analytic FLOPs
//           as GFLOP/s and % of the FMA peak, and the time per layer kind (matmul, attention, ...).
//   cgt     ms per train_cgt step (main pass + aux pass + R_C/R_D + backward + AdamW) at the model flags plus
//           --ell/--dy/--heads-y/--rank/--templates/--horizon (default: L=6, ℓ=4, d_x=384, d_y=128, NH_x=6, NH_y=2, r=4,
//           M=16, T=256, B=8, Δ=64, η=0.5, w_C=0.08, w_D=0.04), analytic FLOPs per part (x stream, y stream, generators,
//           aux pass, regularizers), GFLOP/s, time per layer kind, and — timed in the same run, steps interleaved —
//           the baseline GPT step at the same x width (L, d_x, NH_x, V, B, T) and the ratio of the two GFLOP/s.
//   gemm    GFLOP/s of the fp32 GEMM at 1024³ (all four transpose combinations) and at the GPT model's own
//           linear-layer shapes (forward, backward dinp, backward dweight), beside the machine's measured FP32
//           FMA peak and the fraction of it reached. --device cuda: cuBLAS TFLOP/s at 4096³ and the model's shapes,
//           fp32 and TF32 side by side, beside the GPU's measured FP32 FMA peak and its datasheet TF32 peak.
//   kernels the bandwidth-bound layers (residual, GELU, layernorm, cross-entropy, AdamW, embedding) at the model's
//           activation shapes: GB/s moved (a minimal-traffic count) against the device's measured copy bandwidth.
//   attention the CPU softmax attention of one layer at --batch/--seq/--width/--heads, its two forms side by side:
//           the materialising one (saves the (B,NH,T,T) probabilities) and the O(T)-memory one the models run (saves
//           the row log-sum-exp, recomputes the probabilities in backward): forward and backward ms and their ratios.
//           CPU only.
// --device cuda runs every subcommand on the GPU (model and cgt: the same models on Device::cuda, timed with
// device synchronization); --tf32 lets cuBLAS use TF32 tensor cores in model/cgt/kernels. Preset gpt2-small:
// the GPT-2 small shape (L=12, C=768, NH=12, V=50257, T=1024, B=8), the PyTorch comparison of tools/gpu_acceptance.sh.
//
// Every number is the median of --reps timed runs (the `best` column: the fastest run, for noisy machines);
// each run repeats the kernel until it has taken at least MIN_RUN_SECONDS, so short kernels are not swamped
// by timer noise.
//
// To add a benchmark (e.g. `bench model`: train-step ms and tokens/s), write `int bench_xxx(const BenchOptions&)`
// and add a row to kSubcommands; --help, the subcommand check and "no subcommand = run all" follow from the table.
#include <algorithm>
#include <map>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>


#include "engine/cli.h"
#include "engine/common.h"
#include "engine/rng.h"
#include "models/benchmarks.h"

using namespace icl;

namespace {

// ---------------------------------------------------------------------------------------------------------
// Command line (the project's shared parser, engine/cli.h).

struct Subcommand {
    const char* name;
    const char* help;
    int (*run)(const BenchOptions&);
};

const Subcommand kSubcommands[] = {
    {"gemm", "fp32 GEMM GFLOP/s at 1024^3 and the GPT layer shapes, vs the measured FMA peak", bench_gemm},
    {"model", "train_gpt step time, tokens/s, GFLOP/s vs peak, time per layer kind", bench_model},
    {"cgt", "train_cgt step time, FLOPs per part, GFLOP/s vs the same-width GPT step, time per layer kind", bench_cgt},
    {"kernels", "bandwidth-bound layers at the model's shapes: GB/s vs the measured copy bandwidth", bench_kernels},
    {"attention", "CPU softmax attention at the model's B/T/C/NH: the materialising vs the O(T) form, fwd/bwd ms", bench_attention},
};

int run_main(int argc, char** argv) {
    std::string usage = "[", list;
    for (const Subcommand& s : kSubcommands) {
        usage += std::string(usage.size() > 1 ? "|" : "") + s.name;
        list += strfmt("  %-10s %s\n", s.name, s.help);
    }
    usage += "]...";
    const int nsub = (int)(sizeof(kSubcommands) / sizeof(kSubcommands[0]));

    BenchOptions defaults;
    Cli cli("bench", "Benchmarks on the CPU or the GPU: GFLOP/s per kernel beside the machine's measured peak, GB/s beside its copy "
                     "bandwidth, train step time and tokens/s.");
    cli.positionals(usage, 0, nsub);
    cli.flag("--device", "cpu", "cpu | cuda");
    cli.flag_switch("--tf32", "cuda: let cuBLAS use TF32 tensor cores in model/cgt/kernels (bench gemm shows both)");
    cli.flag("--threads", "0", "OpenMP threads (0 = the OpenMP default, i.e. all cores)");
    cli.flag("--reps", std::to_string(defaults.reps), "timed runs per measurement; the median is reported");
    cli.flag("--vocab", "256", "model: vocabulary V");
    cli.flag("--seq", "256", "model: sequence length T");
    cli.flag("--batch", "8", "model: batch B");
    // the models' own flags, spelled as in train_gpt / train_cgt (model: the GPT; cgt: its x stream is that GPT)
    CGTFlagDefaults cd;
    cd.layers = "6"; cd.width = "384"; cd.heads = "6"; cd.attn_mods = false;
    cd.ell = "4"; cd.dy = "128"; cd.heads_y = "2"; cd.rank = "4"; cd.templates = "16"; cd.horizon = "64";
    add_cgt_flags(cli, cd);
    cli.preset("gpt2-small", "the GPT-2 small shape: L=12 C=768 NH=12 V=50257 T=1024 B=8 (a GPU job)",
               {{"--layers", "12"}, {"--width", "768"}, {"--heads", "12"}, {"--vocab", "50257"}, {"--seq", "1024"}, {"--batch", "8"}});
    cli.epilog("subcommands (none given: run them all):\n" + list +
               "\nexamples:\n"
               "  bench gemm model                                   # CPU\n"
               "  bench --device cuda                                # everything on the GPU\n"
               "  bench model --device cuda --tf32 --preset gpt2-small  # the GPT-2 small step (compare: tools/gpu_acceptance.sh)");
    if (!cli.parse(argc, argv)) return 0;  // --help

    std::vector<const Subcommand*> chosen;
    for (const std::string& a : cli.args()) {
        const Subcommand* found = nullptr;
        for (const Subcommand& s : kSubcommands)
            if (a == s.name) found = &s;
        if (!found) fail_usage(strfmt("unknown subcommand '%s' (see bench --help)", a.c_str()));
        chosen.push_back(found);
    }
    if (chosen.empty())
        for (const Subcommand& s : kSubcommands) chosen.push_back(&s);
    // the CGT's own flags are read by `cgt` alone: given without it they are refused, not ignored
    bool cgt = false;
    std::string names;
    for (const Subcommand* s : chosen) {
        cgt = cgt || std::string(s->name) == "cgt";
        names += std::string(names.empty() ? "" : " ") + s->name;
    }
    if (!cgt)
        for (const char* f : {"--ell", "--dy", "--heads-y", "--rank", "--templates", "--mix", "--vae", "--ln-gen", "--beta-warmup", "--free-bits", "--eta", "--horizon", "--aux-pass", "--wc", "--wd", "--zeta-power", "--wp",
                              "--beta", "--nu-K", "--lambda"})
            if (cli.given(f)) fail_usage(std::string(f) + ": bench " + names + " does not use it (only cgt)");

    BenchOptions opt;
    opt.reps = (int)cli.get_int("--reps", 1, 1000000);
    const RunEnv env = apply_run_flags(cli);
    opt.threads = env.threads;
    opt.dev = env.dev;
    opt.model.V = (int)cli.get_int("--vocab", 1, 1 << 24);
    opt.seq = (int)cli.get_int("--seq", 1, 1 << 20);
    opt.batch = (int)cli.get_int("--batch", 1, 1 << 20);
    opt.model.maxT = opt.seq;
    opt.model = gpt_config_from_cli(cli, opt.model);
    opt.model.validate();
    // the CGT: its x stream is `model`; the default ℓ = 4 follows a smaller --layers down, keeping one modulated
    // block (so `bench model --layers 2` is not refused over a CGT flag), and the default Δ = 64 a shorter --seq
    CGTConfig cc;
    cc.V = opt.model.V;
    cc.maxT = opt.seq;
    cc = cgt_config_from_cli(cli, cc);
    if (!cli.given("--ell")) cc.ell = std::min(std::max(cc.L - 1, 0), cc.ell);
    cc.validate();
    opt.cgt = cc;
    opt.cgt_loss = cgt_loss_from_cli(cli, cc);
    if (!cli.given("--horizon")) opt.cgt_loss.horizon = std::min(opt.cgt_loss.horizon, std::max(0, opt.seq - 2));
    else if (opt.cgt_loss.horizon > std::max(0, opt.seq - 2)) fail_usage(strfmt("--horizon: must be in [0, %d], got %d", std::max(0, opt.seq - 2), opt.cgt_loss.horizon));


    int rc = 0;
    for (size_t i = 0; i < chosen.size(); i++) {
        if (i) std::printf("\n");
        rc = std::max(rc, chosen[i]->run(opt));
    }
    return rc;
}

}  // namespace

int main(int argc, char** argv) { return cli_main(argc, argv, run_main); }
