// Gradient accumulation (models/trainer.h, --grad-accum K): K micro-batches of B make the step of one batch of K·B.
//
// Model level, fp64: the loss and every parameter gradient of one batch equal the sum over its micro-batches run
// with the scales of accumulation_scales and the parameter gradients accumulating — for the GPT, the kernel LM and
// the CGT with the aux pass (truncated and masked), R_C, R_P off, the VAE's KL and sampled y (the model's random
// draws come in the same order), on batches whose micro-batches carry different scored weights. Binary level:
// train_gpt, train_cgt, iclca train and tint train with --batch 2B vs --batch B --grad-accum 2 log the same loss at
// every step (the data streams give the same sequences in two draws of B as in one of 2B).
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "engine/rng.h"
#include "models/cgt/cgt.h"
#include "models/gpt.h"
#include "models/iclca/kernel_lm.h"
#include "models/trainer.h"
#include "report/plot.h"
#include "file_util.h"
#include "run_binary.h"

using namespace icl;
using namespace icl_test;

namespace {

// B·T random tokens; the mask varies (0, 0.5, 1, 2) so that micro-batches carry different scored weights, and a
// few targets are ignored (< 0).
Batch random_tokens(uint64_t seed, int B, int T, int V) {
    Rng r(seed);
    Batch bt;
    bt.B = B;
    bt.T = T;
    for (int i = 0; i < B * T; i++) {
        bt.tokens.push_back((int)r.below((uint64_t)V));
        bt.targets.push_back(i % 11 == 5 ? -1 : (int)r.below((uint64_t)V));
        const float m[4] = {0.f, 0.5f, 1.f, 2.f};
        bt.mask.push_back(i < T ? 1.f : m[r.below(4)]);
    }
    return bt;
}

// Rows [b0, b1) of bt.
Batch rows(const Batch& bt, int b0, int b1) {
    Batch a;
    a.B = b1 - b0;
    a.T = bt.T;
    const size_t lo = (size_t)b0 * bt.T, hi = (size_t)b1 * bt.T;
    a.tokens.assign(bt.tokens.begin() + lo, bt.tokens.begin() + hi);
    a.targets.assign(bt.targets.begin() + lo, bt.targets.begin() + hi);
    a.mask.assign(bt.mask.begin() + lo, bt.mask.begin() + hi);
    return a;
}

// The whole batch in one forward/backward vs its micro-batches (split at `cuts`) accumulated; make() builds a
// fresh model from the same seed each time (the same parameters and random streams).
template <typename Model, typename Make>
void check_accumulation(Make make, const Batch& whole, const std::vector<int>& cuts) {
    std::unique_ptr<Model> pa = make(), pb = make();
    Model& a = *pa;
    Model& b = *pb;
    const double loss_a = a.forward(whole);
    a.backward();
    const std::vector<double> ga = a.s.to_host(a.s.grads, 0, a.s.ptable.total);

    std::vector<Batch> micro;
    for (size_t i = 0; i + 1 < cuts.size(); i++) micro.push_back(rows(whole, cuts[i], cuts[i + 1]));
    const std::vector<LossScale> sc = accumulation_scales(b, micro, 0);
    double loss_b = 0;
    for (size_t i = 0; i < micro.size(); i++) {
        b.scale = sc[i];
        b.s.accumulate_grads = i > 0;
        loss_b += b.forward(micro[i]);
        b.backward();
    }
    const std::vector<double> gb = b.s.to_host(b.s.grads, 0, b.s.ptable.total);
    CHECK(loss_b == doctest::Approx(loss_a).epsilon(1e-13));
    double err = 0, scale = 0;
    for (size_t i = 0; i < ga.size(); i++) {
        err = std::max(err, std::fabs(ga[i] - gb[i]));
        scale = std::max(scale, std::fabs(ga[i]));
    }
    CHECK(scale > 0);
    CHECK(err <= 1e-12 * scale);
}

// --batch 2B vs --batch B --grad-accum 2 (and a third run, --batch B --grad-accum 2 again: bit-identical).
void check_binary(const std::string& cmd, int B, int steps, double tol) {
    TmpDir dir;
    const std::string one = dir / "one", two = dir / "two", again = dir / "again";
    const std::string base = cmd + " --threads 1 --steps " + std::to_string(steps);
    Result r1 = run(base + " --batch " + std::to_string(2 * B) + " --out " + one);
    Result r2 = run(base + " --batch " + std::to_string(B) + " --grad-accum 2 --out " + two);
    Result r3 = run(base + " --batch " + std::to_string(B) + " --grad-accum 2 --out " + again);
    REQUIRE_MESSAGE(r1.code == 0, std::string(cmd + ": " + r1.err));
    REQUIRE_MESSAGE(r2.code == 0, std::string(cmd + ": " + r2.err));
    REQUIRE_MESSAGE(r3.code == 0, std::string(cmd + ": " + r3.err));
    // log.csv through the project's own CSV reader (report/plot.h)
    const std::vector<double> l1 = read_csv(one + "/log.csv").col("loss"), l2 = read_csv(two + "/log.csv").col("loss"),
                              l3 = read_csv(again + "/log.csv").col("loss");
    REQUIRE(l1.size() == (size_t)steps);
    REQUIRE(l2.size() == (size_t)steps);
    double worst = 0;
    for (int s = 0; s < steps; s++) worst = std::max(worst, std::fabs(l1[s] - l2[s]) / std::fabs(l1[s]));
    MESSAGE(cmd << ": --batch " << 2 * B << " vs --batch " << B << " --grad-accum 2 over " << steps << " steps: largest relative loss difference " << worst);
    CHECK(worst <= tol);
    CHECK(l2 == l3);
}

}  // namespace

TEST_SUITE("grad_accum") {
TEST_CASE("GPT and kernel LM: micro-batches with the scales of accumulation_scales give the whole batch's loss and gradient (fp64)") {
    GPTConfig g;
    g.L = 2; g.C = 12; g.NH = 3; g.V = 13; g.maxT = 16;
    const Batch whole = random_tokens(3, 5, 9, g.V);
    check_accumulation<GPT<double>>([&] { auto m = std::make_unique<GPT<double>>(g, Device::cpu, 7); m->s.randomize_params(8, 0.3); return m; }, whole, {0, 2, 5});
    check_accumulation<GPT<double>>([&] { auto m = std::make_unique<GPT<double>>(g, Device::cpu, 7); m->s.randomize_params(8, 0.3); return m; }, whole, {0, 1, 2, 3, 4, 5});
    KernelLMConfig k;
    k.L = 2; k.C = 12; k.NH = 3; k.V = 13; k.maxT = 64;
    check_accumulation<KernelLM<double>>([&] { auto m = std::make_unique<KernelLM<double>>(k, Device::cpu, 9); m->s.randomize_params(10, 0.3); return m; }, whole, {0, 3, 5});
}

TEST_CASE("CGT: the aux pass (truncated and masked), R_C, the VAE's KL and sampled y accumulate to the whole batch (fp64)") {
    const Batch whole = random_tokens(4, 6, 10, 13);
    for (int variant = 0; variant < 4; variant++) {
        CAPTURE(variant);
        CGTConfig c;
        c.L = 3; c.ell = 2; c.dx = 8; c.dy = 4; c.NHx = 2; c.NHy = 2; c.r = 2; c.M = 3; c.V = 13; c.maxT = 12;
        c.vae = variant == 2;
        check_accumulation<CGT<double>>(
            [&] {
                auto m = std::make_unique<CGT<double>>(c, Device::cpu, 11);
                m->s.randomize_params(12, 0.3);
                m->loss.eta = 0.6; m->loss.wC = 0.2;
                m->loss.horizon = variant == 1 ? 3 : 0;
                m->loss.aux_masked = variant == 3;
                if (c.vae) m->loss.beta = 0.05;
                return m;
            },
            whole, {0, 2, 6});
    }
}

TEST_CASE("binaries: --batch 2B equals --batch B --grad-accum 2 at every step (train_gpt, train_cgt, iclca train, tint train)") {
    // fp32 training: the two sum the same terms in another order; the differences measured (2026-11-25, Zen 4)
    // were ≤ 3e-7 relative after 8 steps — 1e-5 leaves room for other CPUs' vector paths
    check_binary("train_gpt --task arith --layers 2 --width 32 --heads 2", 4, 8, 1e-5);
    // (evaluations at steps 3 and 6: they leave the training streams where they were, though the number of aux positions
    // their validation passes draw follows --batch)
    check_binary("train_cgt --task arith --layers 3 --ell 2 --width 32 --dy 16 --heads 2 --heads-y 2 --wd 0 --eta 0.5 --wc 0.08 --eval-every 3", 4, 8, 1e-5);
    check_binary("iclca train --layers 2 --width 32 --heads 2 --seq 32", 4, 8, 1e-5);
    check_binary("tint train --task fewshot --layers 2 --width 24 --heads 2 --seq 32", 4, 8, 1e-5);
}

TEST_CASE("binaries: duallens experiment trains its models with --grad-accum too (M1 and M2, 60 steps: the same test nMSE)") {
    TmpDir dir;
    const std::string base = "duallens experiment --preset tiny --models m1,m2 --families baseline --threads 1";
    Result a = run(base + " --batch 8 --out " + (dir / "a")), b = run(base + " --batch 4 --grad-accum 2 --out " + (dir / "b"));
    REQUIRE_MESSAGE(a.code == 0, a.err);
    REQUIRE_MESSAGE(b.code == 0, b.err);
    const std::vector<double> na = read_csv(dir / "a/runs.csv").col("test_nmse"), nb = read_csv(dir / "b/runs.csv").col("test_nmse");
    REQUIRE(na.size() == 2);
    REQUIRE(nb.size() == 2);
    for (int i = 0; i < 2; i++) CHECK(nb[i] == doctest::Approx(na[i]).epsilon(1e-5));
}
}
