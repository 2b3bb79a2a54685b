// gradcheck — check a model's hand-written backward against fp64 central finite differences on a tiny
// config, tensor by tensor; exits 1 if any tensor is over tolerance.
//   --model gpt   the baseline GPT's cross-entropy (or MSE) loss
//   --model cgt   the CGT's full loss η·CE + (1−η)·L_aux + w_C·R_C + w_D·R_D (+ β·KL with --vae), the aux pass at
//                 fixed positions p_b (drawn once from --seed) and fixed VAE noise (spec/cgt.md §7.12)
// --devices cpu,cuda instead compares two devices (src/models/compare_devices.h): the same parameters and batch,
// one forward + backward on the CPU (fp64 reference, or --ref fp32) and one on the GPU (fp32, TF32 off), every
// activation and gradient side by side. `--devices cpu,cpu` runs the comparison against CPU fp32 (no GPU needed).
// The model flags are the models' own (models/gpt.h, models/cgt/cgt.h), spelled as in train_gpt and train_cgt.
#include <cmath>
#include <cstdio>

#include "data/arith.h"
#include "data/linreg.h"
#include "engine/cli.h"
#include "models/cgt/cgt.h"
#include "models/compare_devices.h"
#include "models/fdcheck.h"
#include "models/gpt.h"

using namespace icl;

namespace {

int run(int argc, char** argv) {
    Cli cli("gradcheck", "Compare a model's backward pass with fp64 central finite differences, tensor by tensor (tiny config); "
                         "or, with --devices cpu,cuda, the CPU and the GPU on one forward + backward.");
    cli.flag("--model", "gpt", "model to check: gpt | cgt");
    cli.flag("--task", "arith", "input/output kind: arith (tokens, cross-entropy) | linreg (vectors, MSE) | random (random tokens, --vocab)");
    cli.flag("--vocab", "64", "random: vocabulary size");
    cli.flag("--devices", "", "cpu,cuda: compare every activation and gradient of one step on the two devices instead "
                              "(cpu,cpu: against CPU fp32); exits 1 if any tensor is over tolerance");
    cli.renamed("--compare", "--devices");
    cli.flag("--ref", "fp64", "--devices: precision of the CPU reference: fp64 | fp32");
    cli.flag("--batch", "2", "sequences");
    cli.flag("--seq", "7", "sequence length T (arith: a window of the generated sequence)");
    cli.flag("--seed", "1", "random seed for parameters and data");
    cli.flag("--h", "1e-5", "finite-difference step");
    cli.flag("--atol", "1e-8", "absolute tolerance (--devices: default 1e-5)");
    cli.flag("--rtol", "1e-6", "relative tolerance (--devices: default 1e-3)");
    cli.flag("--max-per-tensor", "0", "check at most this many elements per tensor (0 = all)");
    cli.flag("--threads", "0", "CPU threads (0 = OpenMP default)");
    // the models' own flags (gpt: --layers --width --heads; cgt: those of its x stream and its own)
    CGTFlagDefaults cd;
    cd.layers = "2"; cd.width = "12"; cd.heads = "3"; cd.attn_mods = false;
    cd.ell = "1"; cd.dy = "4"; cd.heads_y = "2"; cd.rank = "2"; cd.templates = "3"; cd.wc = "0.3"; cd.wd = "0.2"; cd.beta = "0.1";
    add_cgt_flags(cli, cd);
    if (!cli.parse(argc, argv)) return 0;
    apply_threads(cli);
    const std::string model_kind = cli.get_choice("--model", {"gpt", "cgt"});
    std::string task = cli.get_choice("--task", {"arith", "linreg", "random"});
    // flags of another mode are refused, not ignored
    if (cli.given("--vocab") && task != "random") fail_usage("--vocab: only --task random reads it (got --task " + task + ")");
    if (cli.given("--ref") && cli.get("--devices").empty()) fail_usage("--ref: only --devices reads it");
    if (cli.given("--h") && !cli.get("--devices").empty()) fail_usage("--h: --devices compares two devices, no finite differences");
    if (model_kind == "gpt")
        for (const char* f : {"--ell", "--dy", "--heads-y", "--rank", "--templates", "--mix", "--vae", "--ln-gen", "--beta-warmup", "--free-bits", "--eta", "--horizon", "--aux-pass", "--wc", "--wd", "--zeta-power", "--wp",
                              "--beta", "--nu-K", "--lambda"})
            if (cli.given(f)) fail_usage(std::string(f) + ": a CGT flag; use --model cgt");
    const int B = (int)cli.get_int("--batch", 1, 4096), T = (int)cli.get_int("--seq", 1, 1 << 16);
    const uint64_t seed = cli.get_seed();
    const double h = cli.get_double("--h", 1e-12, 1);
    // tolerances: the flag when given, else the mode's default (finite differences in fp64 | fp32 vs fp64)
    const bool comparing = !cli.get("--devices").empty();
    const double atol = cli.given("--atol") || !comparing ? cli.get_double("--atol", 0) : 1e-5;
    const double rtol = cli.given("--rtol") || !comparing ? cli.get_double("--rtol", 0) : 1e-3;

    // --devices: two devices instead of finite differences
    const std::string compare = cli.get("--devices");
    Device cmp_dev = Device::cpu;
    bool ref_fp64 = true;
    if (!compare.empty()) {
        const size_t comma = compare.find(',');
        if (comma == std::string::npos || compare.substr(0, comma) != "cpu")
            fail_usage("--devices: expected cpu,cuda or cpu,cpu (the reference is the CPU), got '" + compare + "'");
        cmp_dev = parse_device(compare.substr(comma + 1));
        require_device(cmp_dev);
        ref_fp64 = cli.get_choice("--ref", {"fp64", "fp32"}) == "fp64";
        set_tf32(false);  // comparisons always run the GPU's matmuls in full fp32
    }

    GPTConfig cfg;
    cfg = gpt_config_from_cli(cli, cfg);
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
    } else if (task == "random") {
        // uniform random tokens and targets over --vocab ids; every 5th position unscored (mask 0)
        cfg.V = (int)cli.get_int("--vocab", 1, 1 << 20);
        bt.B = B;
        bt.T = T;
        for (int i = 0; i < B * T; i++) {
            bt.tokens.push_back((int)rng.below((uint64_t)cfg.V));
            bt.targets.push_back((int)rng.below((uint64_t)cfg.V));
            bt.mask.push_back(i % 5 == 4 ? 0.0f : 1.0f + (float)(i % 3));
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
    // the random parameters' scale: N(0, 0.3²) at the default width 12, shrunk as 1/√C at larger widths so that
    // attention logits and activations stay O(1) (a saturated softmax would make the comparison meaningless)
    const double pstd = 0.3 * std::sqrt(12.0 / std::max(cfg.C, 12));
    const std::string ref_desc = ref_fp64 ? "CPU fp64" : "CPU fp32";
    const std::string cmp_desc = cmp_dev == Device::cpu ? "CPU fp32" : device_description(cmp_dev) + ", fp32, TF32 off";
    // CPU-vs-device: the reference in fp64 (or fp32), the compared model in fp32 on cmp_dev, same parameters
    auto compare_models = [&](auto make_ref, auto make_cmp) {
        auto ref = make_ref();
        auto cmp = make_cmp();
        return compare_devices(ref, cmp, bt, seed, pstd, atol, rtol);
    };
    std::vector<TensorDiff> rows;
    std::string title;
    if (model_kind == "gpt") {
        if (!compare.empty()) {
            auto make_cmp = [&] { return GPT<float>(cfg, cmp_dev, seed); };
            rows = ref_fp64 ? compare_models([&] { return GPT<double>(cfg, Device::cpu, seed); }, make_cmp)
                            : compare_models([&] { return GPT<float>(cfg, Device::cpu, seed); }, make_cmp);
            title = strfmt("gradcheck --devices %s: gpt on %s, L=%d C=%d NH=%d V=%d B=%d T=%d, one forward + backward\n"
                           "reference: %s   compared: %s   parameters: the same, N(0, %.3g^2)",
                           compare.c_str(), task.c_str(), cfg.L, cfg.C, cfg.NH, cfg.V, bt.B, bt.T, ref_desc.c_str(), cmp_desc.c_str(), pstd);
        } else {
            GPT<double> model(cfg, Device::cpu, seed);
            randomize_params(model, seed);
            rows = fd_check_params(model, bt, h, atol, rtol, cli.get_int("--max-per-tensor", 0));
            title = strfmt("gradcheck: %s on %s, L=%d C=%d NH=%d B=%d T=%d, fp64, analytic backward vs central differences (h=%g)", "gpt",
                           task.c_str(), cfg.L, cfg.C, cfg.NH, bt.B, bt.T, h);
        }
    } else {
        CGTConfig cc;
        cc.V = cfg.V; cc.maxT = cfg.maxT; cc.d_in = cfg.d_in; cc.d_out = cfg.d_out;
        cc = cgt_config_from_cli(cli, cc);
        cc.validate();
        const CGTLoss loss = cgt_loss_from_cli(cli, cc);
        // fixed aux positions p_b ∈ [2, T−1] (or [2, T−Δ]) and fixed VAE noise: the loss is a function of θ alone
        const int hi = loss.horizon > 0 ? bt.T - loss.horizon : bt.T - 1;
        std::vector<int> aux_p;
        if (cc.has_y() && loss.eta < 1.0) {
            if (hi < 2) fail_usage(strfmt("--seq: T=%d too short for the aux pass with horizon %d (need T - Δ >= 2)", bt.T, loss.horizon));
            aux_p.resize(bt.B);
            for (int& pb : aux_p) pb = 2 + (int)rng.below((uint64_t)(hi - 1));
        }
        auto setup = [&](auto& model) {
            model.loss = loss;
            if (!aux_p.empty()) model.set_aux_positions(aux_p);
            model.hold_random = true;
        };
        const std::string what = strfmt("cgt on %s, L=%d ell=%d dx=%d dy=%d NHx=%d NHy=%d r=%d M=%d h=%s%s, B=%d T=%d, loss = %g*CE + %g*aux "
                                        "(horizon %d) + %g*R_C + %g*R_D%s",
                                        task.c_str(), cc.L, cc.ell, cc.dx, cc.dy, cc.NHx, cc.NHy, cc.r, cc.M,
                                        cc.h == MixFn::tanh ? "tanh" : "softmax", cc.vae ? " vae" : "", bt.B, bt.T, loss.eta, 1 - loss.eta,
                                        loss.horizon, loss.wC, loss.wD, cc.vae ? strfmt(" + %g*KL", loss.beta).c_str() : "");
        if (!compare.empty()) {
            auto make_cmp = [&] { CGT<float> m(cc, cmp_dev, seed); setup(m); return m; };
            rows = ref_fp64 ? compare_models([&] { CGT<double> m(cc, Device::cpu, seed); setup(m); return m; }, make_cmp)
                            : compare_models([&] { CGT<float> m(cc, Device::cpu, seed); setup(m); return m; }, make_cmp);
            title = strfmt("gradcheck --devices %s: %s, one forward + backward\nreference: %s   compared: %s   parameters: the same, N(0, %.3g^2)",
                           compare.c_str(), what.c_str(), ref_desc.c_str(), cmp_desc.c_str(), pstd);
        } else {
            CGT<double> model(cc, Device::cpu, seed);
            randomize_params(model, seed);
            setup(model);
            rows = fd_check_params(model, bt, h, atol, rtol, cli.get_int("--max-per-tensor", 0));
            title = strfmt("gradcheck: %s, fp64, analytic backward vs central differences (h=%g)", what.c_str(), h);
        }
    }
    int failed = print_diff_table(stdout, title, rows, atol, rtol);
    return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return cli_main(argc, argv, run); }
