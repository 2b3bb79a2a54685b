// gradcheck — check a model's hand-written backward against fp64 central finite differences on a tiny
// config, tensor by tensor; exits 1 if any tensor is over tolerance.
//   --model gpt   the baseline GPT's cross-entropy (or MSE) loss
//   --model cgt   the CGT's full loss η·CE + (1−η)·L_aux + w_C·R_C + w_D·R_D (+ β·KL with --vae), the aux pass at
//                 fixed positions p_b (drawn once from --seed) and fixed VAE noise (spec/cgt.md §7.12)
#include <cstdio>

#include "data/arith.h"
#include "data/linreg.h"
#include "engine/cli.h"
#include "models/cgt.h"
#include "models/fdcheck.h"
#include "models/gpt.h"

using namespace icl;

namespace {

// Random (not GPT-2 small) parameters, so every path carries a sizeable gradient; LN gains around 1.
template <typename Model>
void randomize_params(Model& model, uint64_t seed) {
    std::vector<double> p(model.s.ptable.total);
    Rng prng(seed + 11);
    fill_normal(p.data(), p.size(), prng, 0.0, 0.3);
    for (size_t i = 0; i < model.s.ptable.size(); i++)
        if (model.s.ptable.specs[i].init == Init::ones)
            for (int64_t k = 0; k < model.s.ptable.specs[i].numel(); k++) p[model.s.ptable.offsets[i] + k] += 1.0;
    model.s.upload(model.s.params, 0, p.data(), p.size());
}

int run(int argc, char** argv) {
    Cli cli("gradcheck", "Compare a model's backward pass with fp64 central finite differences, tensor by tensor (tiny config).");
    cli.flag("--model", "gpt", "model to check: gpt | cgt");
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
    cli.flag("--ell", "1", "cgt: dual blocks ℓ (blocks ℓ..L−1 are modulated)");
    cli.flag("--dy", "4", "cgt: y-stream width d_y");
    cli.flag("--heads-y", "2", "cgt: y-stream heads");
    cli.flag("--rank", "2", "cgt: generator rank r");
    cli.flag("--templates", "3", "cgt: generator templates M");
    cli.flag("--mix", "tanh", "cgt: mixing nonlinearity h: tanh | softmax");
    cli.flag("--eta", "0.5", "cgt: weight of the main CE (1−η on the aux loss)");
    cli.flag("--horizon", "0", "cgt: aux horizon Δ (0 = the whole remainder)");
    cli.flag("--wC", "0.3", "cgt: R_C weight");
    cli.flag("--wD", "0.2", "cgt: R_D weight");
    cli.flag("--vae", "0", "cgt: 1 = VAE y (reparameterized, fixed noise) with the GP-prior KL");
    cli.flag("--beta", "0.1", "cgt: KL weight (with --vae 1)");
    if (!cli.parse(argc, argv)) return 0;
    apply_threads(cli);
    const std::string model_kind = cli.get_choice("--model", {"gpt", "cgt"});
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
    std::vector<TensorDiff> rows;
    std::string title;
    if (model_kind == "gpt") {
        GPT<double> model(cfg, Device::cpu, seed);
        randomize_params(model, seed);
        rows = fd_check_params(model, bt, h, atol, rtol, cli.get_int("--max-per-tensor", 0));
        title = strfmt("gradcheck: %s on %s, L=%d C=%d NH=%d B=%d T=%d, fp64, analytic backward vs central differences (h=%g)", "gpt",
                       task.c_str(), cfg.L, cfg.C, cfg.NH, bt.B, bt.T, h);
    } else {
        CGTConfig cc;
        cc.L = cfg.L; cc.dx = cfg.C; cc.NHx = cfg.NH; cc.V = cfg.V; cc.maxT = cfg.maxT; cc.d_in = cfg.d_in; cc.d_out = cfg.d_out;
        cc.ell = (int)cli.get_int("--ell", 0, cfg.L);
        cc.dy = (int)cli.get_int("--dy", 0, 4096);
        cc.NHy = (int)cli.get_int("--heads-y", 1, 4096);
        cc.r = (int)cli.get_int("--rank", 1, 4096);
        cc.M = (int)cli.get_int("--templates", 1, 4096);
        cc.h = cli.get_choice("--mix", {"tanh", "softmax"}) == "tanh" ? MixFn::tanh : MixFn::softmax;
        cc.vae = cli.get_int("--vae", 0, 1) == 1;
        cc.validate();
        CGT<double> model(cc, Device::cpu, seed);
        randomize_params(model, seed);
        model.loss.eta = cli.get_double("--eta", 0, 1);
        model.loss.horizon = (int)cli.get_int("--horizon", 0, 1 << 20);
        model.loss.wC = cli.get_double("--wC", 0);
        model.loss.wD = cli.get_double("--wD", 0);
        model.loss.beta = cc.vae ? cli.get_double("--beta", 0) : 0.0;
        // fixed aux positions p_b ∈ [2, T−1] (or [2, T−Δ]) and fixed VAE noise: the loss is a function of θ alone
        const int hi = model.loss.horizon > 0 ? bt.T - model.loss.horizon : bt.T - 1;
        if (cc.has_y() && model.loss.eta < 1.0) {
            if (hi < 2) fail_usage(strfmt("--seq: T=%d too short for the aux pass with horizon %d (need T - Δ >= 2)", bt.T, model.loss.horizon));
            std::vector<int> p(bt.B);
            for (int& pb : p) pb = 2 + (int)rng.below((uint64_t)(hi - 1));
            model.set_aux_positions(p);
        }
        model.hold_random = true;
        rows = fd_check_params(model, bt, h, atol, rtol, cli.get_int("--max-per-tensor", 0));
        title = strfmt("gradcheck: cgt on %s, L=%d ell=%d dx=%d dy=%d NHx=%d NHy=%d r=%d M=%d h=%s%s, B=%d T=%d, loss = %g*CE + %g*aux "
                       "(horizon %d) + %g*R_C + %g*R_D%s, fp64, analytic backward vs central differences (h=%g)",
                       task.c_str(), cc.L, cc.ell, cc.dx, cc.dy, cc.NHx, cc.NHy, cc.r, cc.M, cc.h == MixFn::tanh ? "tanh" : "softmax",
                       cc.vae ? " vae" : "", bt.B, bt.T, model.loss.eta, 1 - model.loss.eta, model.loss.horizon, model.loss.wC, model.loss.wD,
                       cc.vae ? strfmt(" + %g*KL", model.loss.beta).c_str() : "", h);
    }
    int failed = print_diff_table(stdout, title, rows, atol, rtol);
    return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return cli_main(argc, argv, run); }
