// gradcheck — check a model's hand-written backward against fp64 central finite differences on a tiny
// config, tensor by tensor; exits 1 if any tensor is over tolerance.
#include <cstdio>

#include "data/arith.h"
#include "data/linreg.h"
#include "engine/cli.h"
#include "models/fdcheck.h"
#include "models/gpt.h"

using namespace icl;

namespace {

int run(int argc, char** argv) {
    Cli cli("gradcheck", "Compare a model's backward pass with fp64 central finite differences, tensor by tensor (tiny config).");
    cli.flag("--model", "gpt", "model to check: gpt");
    cli.flag("--task", "arith", "input/output kind: arith (tokens, cross-entropy) | linreg (vectors, MSE)");
    cli.flag("--layers", "2", "blocks");
    cli.flag("--width", "12", "width C");
    cli.flag("--heads", "3", "heads");
    cli.flag("--batch", "2", "sequences");
    cli.flag("--seq", "7", "sequence length T (arith: a window of the generated sequence)");
    cli.flag("--seed", "1", "random seed for parameters and data");
    cli.flag("--h", "1e-5", "finite-difference step");
    cli.flag("--atol", "1e-8", "absolute tolerance");
    cli.flag("--rtol", "1e-6", "relative tolerance");
    cli.flag("--max-per-tensor", "0", "check at most this many elements per tensor (0 = all)");
    cli.flag("--threads", "0", "CPU threads (0 = OpenMP default)");
    if (!cli.parse(argc, argv)) return 0;
    apply_threads(cli);
    cli.get_choice("--model", {"gpt"});
    std::string task = cli.get_choice("--task", {"arith", "linreg"});
    const int B = (int)cli.get_int("--batch", 1, 64), T = (int)cli.get_int("--seq", 1, 512);
    const uint64_t seed = (uint64_t)cli.get_int("--seed", 0);
    const double h = cli.get_double("--h", 1e-12, 1), atol = cli.get_double("--atol", 0), rtol = cli.get_double("--rtol", 0);

    GPTConfig cfg;
    cfg.L = (int)cli.get_int("--layers", 1, 64);
    cfg.C = (int)cli.get_int("--width", 1, 4096);
    cfg.NH = (int)cli.get_int("--heads", 1, 4096);
    cfg.maxT = T;
    Rng rng(seed + 7);
    Batch bt;
    if (task == "arith") {
        cfg.V = ARITH_VOCAB;
        ArithConfig ac;
        Batch full = arith_batch(ac, B, rng);
        if (T > full.T) fail_usage(strfmt("--seq: at most %d for arith", full.T));
        bt.B = B;
        bt.T = T;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                bt.tokens.push_back(full.tokens[(size_t)b * full.T + t]);
                bt.targets.push_back(full.targets[(size_t)b * full.T + t]);
                bt.mask.push_back(1.0f + (float)((b + t) % 3));  // non-uniform weights exercise the mask
            }
    } else {
        LinRegConfig lc{4, 2, (T + 1) / 2, 0.1};
        bt = linreg_batch(lc, B, rng);
        cfg.maxT = bt.T;
        cfg.d_in = lc.width();
        cfg.d_out = lc.d_out;
        cfg.V = 0;
    }
    cfg.validate();
    GPT<double> model(cfg, Device::cpu, seed);
    // Random (not GPT-2 small) parameters, so every path carries a sizeable gradient.
    {
        std::vector<double> p(model.s.ptable.total);
        Rng prng(seed + 11);
        fill_normal(p.data(), p.size(), prng, 0.0, 0.3);
        for (size_t i = 0; i < model.s.ptable.size(); i++)
            if (model.s.ptable.specs[i].init == Init::ones)
                for (int64_t k = 0; k < model.s.ptable.specs[i].numel(); k++) p[model.s.ptable.offsets[i] + k] += 1.0;
        model.s.upload(model.s.params, 0, p.data(), p.size());
    }
    auto rows = fd_check_params(model, bt, h, atol, rtol, cli.get_int("--max-per-tensor", 0));
    std::string title = strfmt("gradcheck: %s on %s, L=%d C=%d NH=%d B=%d T=%d, fp64, analytic backward vs central differences (h=%g)",
                               "gpt", task.c_str(), cfg.L, cfg.C, cfg.NH, bt.B, bt.T, h);
    int failed = print_diff_table(stdout, title, rows, atol, rtol);
    return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return cli_main(argc, argv, run); }
