// Whole-model tests of the baseline GPT (src/models/gpt.h): fp64 gradient check, determinism,
// checkpoint round trip, dumps, and a short training run that learns.
#include <doctest/doctest.h>

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "data/arith.h"
#include "data/linreg.h"
#include "engine/checkpoint.h"
#include "engine/npy.h"
#include "models/fdcheck.h"
#include "models/gpt.h"
#include "models/trainer.h"
#include "file_util.h"

using namespace icl;

namespace {

GPTConfig tiny_cfg(int T) {
    GPTConfig c;
    c.L = 2; c.C = 12; c.NH = 3; c.V = ARITH_VOCAB; c.maxT = T;
    return c;
}

// A (B,T) window of arithmetic sequences with a non-uniform mask.
Batch tiny_arith(int B, int T, uint64_t seed) {
    Rng rng(seed);
    Batch full = arith_batch(ArithConfig{}, B, rng), bt;
    bt.B = B; bt.T = T;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            bt.tokens.push_back(full.tokens[(size_t)b * full.T + t]);
            bt.targets.push_back(full.targets[(size_t)b * full.T + t]);
            bt.mask.push_back((t % 4 == 3) ? 0.0f : 1.0f + 0.5f * (float)(b % 2));
        }
    return bt;
}

template <typename real>
void randomize(GPT<real>& m, uint64_t seed, double std) { m.s.randomize_params(seed, std); }


}  // namespace

TEST_SUITE("gpt") {
TEST_CASE("whole-model fp64 gradient check: tokens + cross-entropy (tied head, mask)") {
    GPT<double> m(tiny_cfg(7), Device::cpu, 3);
    randomize(m, 5, 0.3);
    auto rows = fd_check_params(m, tiny_arith(2, 7, 9), 1e-5, 1e-8, 1e-6);
    REQUIRE(rows.size() == m.s.ptable.size());
    for (auto& r : rows) {
        CAPTURE(r.name);
        CHECK(r.pass);
        CHECK(r.nonfinite == 0);
    }
}

TEST_CASE("whole-model fp64 gradient check: vectors + MSE head, custom positions") {
    GPTConfig c = tiny_cfg(10);
    c.d_in = 4; c.d_out = 2; c.V = 0;
    GPT<double> m(c, Device::cpu, 4);
    randomize(m, 6, 0.3);
    Rng rng(2);
    Batch bt = linreg_batch(LinRegConfig{4, 2, 4, 0.1}, 2, rng);
    bt.pos = {1, 2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5, 6, 7, 8, 9};  // absolute positions, offset per sample
    auto rows = fd_check_params(m, bt, 1e-5, 1e-8, 1e-6);
    for (auto& r : rows) {
        CAPTURE(r.name);
        CHECK(r.pass);
    }
}

TEST_CASE("the finite-difference check catches a wrong gradient") {
    GPT<double> m(tiny_cfg(5), Device::cpu, 3);
    randomize(m, 5, 0.3);
    Batch bt = tiny_arith(1, 5, 1);
    m.forward(bt);
    m.backward();
    // Corrupt one analytic gradient element and re-run the comparison by hand.
    std::vector<double> g = m.s.to_host(m.s.grads, 0, m.s.ptable.total);
    size_t off = m.s.ptable.offset("h.1.mlp.fc.w");
    double base = g[off + 3];
    double plus = m.s.to_host(m.s.params, off + 3, 1)[0];
    double h = 1e-5, p1 = plus + h, p2 = plus - h;
    m.s.upload(m.s.params, off + 3, &p1, 1);
    double lp = m.forward(bt);
    m.s.upload(m.s.params, off + 3, &p2, 1);
    double lm = m.forward(bt);
    double numeric = (lp - lm) / (2 * h);
    CHECK(std::fabs(numeric - base) < 1e-8 + 1e-6 * std::fabs(numeric));
    TensorDiff ok = compare_tensor("x", "grad", {1}, &numeric, &base, 1e-8, 1e-6);
    double wrong = base * 1.001 + 1e-6;
    TensorDiff bad = compare_tensor("x", "grad", {1}, &numeric, &wrong, 1e-8, 1e-6);
    CHECK(ok.pass);
    CHECK_FALSE(bad.pass);
}

TEST_CASE("causality: changing a later token changes no earlier output") {
    GPT<double> m(tiny_cfg(9), Device::cpu, 1);
    randomize(m, 2, 0.3);
    Batch a = tiny_arith(1, 9, 4), b = a;
    b.tokens[6] = (b.tokens[6] + 5) % ARITH_VOCAB;
    m.forward(a);
    auto la = m.outputs();
    m.forward(b);
    auto lb = m.outputs();
    for (int t = 0; t < 6; t++)
        for (int v = 0; v < ARITH_VOCAB; v++) CHECK(la[t * ARITH_VOCAB + v] == lb[t * ARITH_VOCAB + v]);
    bool changed = false;
    for (int v = 0; v < ARITH_VOCAB; v++) changed |= la[6 * ARITH_VOCAB + v] != lb[6 * ARITH_VOCAB + v];
    CHECK(changed);
}

TEST_CASE("determinism: same seed and threads give bit-identical losses") {
    auto run = [](int threads) {
        omp_set_num_threads(threads);
        GPTConfig c = tiny_cfg(32);
        c.C = 32; c.NH = 4;
        GPT<float> m(c, Device::cpu, 11);
        Rng rng(5);
        std::vector<double> losses;
        AdamWConfig adam;
        for (int step = 0; step < 5; step++) {
            Batch full = arith_batch(ArithConfig{}, 4, rng), bt;
            bt.B = 4; bt.T = 32;
            for (int b = 0; b < 4; b++)
                for (int t = 0; t < 32; t++) {
                    bt.tokens.push_back(full.tokens[b * full.T + t]);
                    bt.targets.push_back(full.targets[b * full.T + t]);
                    bt.mask.push_back(1);
                }
            losses.push_back(m.forward(bt));
            m.backward();
            m.s.update(adam, 1e-2);
        }
        return losses;
    };
    auto a = run(2), b = run(2);
    for (size_t i = 0; i < a.size(); i++) CHECK(a[i] == b[i]);  // exact
    omp_set_num_threads(2);
}

TEST_CASE("checkpoint: save, load into a fresh model, identical outputs; a mismatched config is refused") {
    icl_test::TmpDir tmp;
    const std::string dir = tmp.path;
    GPT<float> a(tiny_cfg(12), Device::cpu, 1);
    randomize(a, 3, 0.2);
    Batch bt = tiny_arith(2, 12, 8);
    double la = a.forward(bt);
    auto oa = a.outputs();
    a.s.save(dir + "/m.safetensors", {{"step", "7"}});
    GPT<float> b(tiny_cfg(12), Device::cpu, 99);
    b.s.load(dir + "/m.safetensors");
    double lb = b.forward(bt);
    auto ob = b.outputs();
    CHECK(la == lb);
    CHECK(oa == ob);
    CheckpointInfo ci = read_checkpoint_metadata(dir + "/m.safetensors");
    CHECK(ci.model == "gpt");
    CHECK(ci.metadata.at("step") == "7");
    GPTConfig other = tiny_cfg(12);
    other.C = 16; other.NH = 4;
    GPT<float> c(other, Device::cpu, 1);
    CHECK_THROWS_WITH_AS(c.s.load(dir + "/m.safetensors"), doctest::Contains("'C'"), Error);
    std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("sampling allocates its buffers once, not per token; the same tokens as a forward per token") {
    GPTConfig c = tiny_cfg(16);
    c.mod.beta = 0.8;  // negative attention with random neighbours: each forward draws new ones, so an extra
    c.mod.rule = NegRule::random;  // draw (the reservation's) would change the tokens
    c.mod.k = 2;
    const std::vector<int> prompt = {3, 5, 7};
    // the reference: greedy decoding written out, one forward per token on a growing window (sliding past maxT)
    auto by_hand = [&](GPT<float>& m, int n) {
        std::vector<int> seq = prompt, out;
        for (int i = 0; i < n; i++) {
            Batch bt;
            bt.B = 1;
            const int start = std::max(0, (int)seq.size() - c.maxT);
            bt.tokens.assign(seq.begin() + start, seq.end());
            bt.T = (int)bt.tokens.size();
            m.forward(bt);
            const std::vector<float> lg = m.outputs();  // (1,T,V)
            const int next = (int)(std::max_element(lg.end() - c.V, lg.end()) - (lg.end() - c.V));
            seq.push_back(next);
            out.push_back(next);
        }
        return out;
    };
    for (int n : {10, 30}) {  // within maxT = 16, and past it
        CAPTURE(n);
        GPT<float> a(c, Device::cpu, 2), ref(c, Device::cpu, 2), e(c, Device::cpu, 2);
        randomize(a, 9, 0.5);
        randomize(ref, 9, 0.5);
        uint64_t n0 = device_alloc_count();
        Rng r1(4);
        const std::vector<int> got = a.sample(prompt, n, 0.0, r1);
        const uint64_t sampled = device_alloc_count() - n0;
        CHECK(got == by_hand(ref, n));
        // what one forward at the widest window the sample sees allocates, on a fresh model: all the sample may
        n0 = device_alloc_count();
        Batch widest;
        widest.B = 1;
        widest.T = std::min(c.maxT, (int)prompt.size() + n - 1);
        widest.tokens.assign((size_t)widest.T, 1);
        e.forward(widest);
        CHECK(sampled == device_alloc_count() - n0);
    }
}

TEST_CASE("activation gradients in one block's memory: the same parameter gradients to the bit, L-1 blocks' memory less") {
    for (int L : {2, 3, 4}) {
        CAPTURE(L);
        GPTConfig c = tiny_cfg(9);
        c.L = L;
        GPT<float> shared(c, Device::cpu, 5), full(c, Device::cpu, 5);
        randomize(shared, 17, 0.3);
        randomize(full, 17, 0.3);
        full.keep_all_activation_gradients(true);
        for (int step = 0; step < 2; step++) {  // the second backward finds the first one's gradients in the views
            const Batch bt = tiny_arith(3, 9, 40 + step);
            CHECK(shared.forward(bt) == full.forward(bt));
            shared.backward();
            full.backward();
            CHECK(shared.s.to_host(shared.s.grads, 0, shared.s.ptable.total) == full.s.to_host(full.s.grads, 0, full.s.ptable.total));
            // d(encoded) comes out of block 0 last: every block's backward on the way was right
            const size_t n = (size_t)3 * 9 * c.C;
            CHECK(shared.s.to_host(shared.s.dacts, shared.s.gtable.offset("encoded"), n) ==
                  full.s.to_host(full.s.dacts, full.s.gtable.offset("encoded"), n));
            CHECK(shared.s.to_host(shared.s.dacts, shared.s.gtable.offset("h.0.qkv"), 3 * n) ==
                  full.s.to_host(full.s.dacts, full.s.gtable.offset("h.0.qkv"), 3 * n));
        }
        // the views: block l's own gradients where block 0's are; res3 in two buffers by parity
        CHECK(shared.s.gtable.offset("h." + std::to_string(L - 1) + ".fch") == shared.s.gtable.offset("h.0.fch"));
        CHECK(shared.s.gtable.offset("h." + std::to_string(L - 1) + ".res3") == shared.s.gtable.offset("h." + std::to_string((L - 1) % 2) + ".res3"));
        CHECK(shared.s.gtable.offset("h.0.res3") != shared.s.gtable.offset("h.1.res3"));
        CHECK(full.s.gtable.aliases == 0);
        // one block's own gradients and two res3 instead of L of each: (L−1) blocks less one res3 (64-byte padded)
        const size_t per_block = full.s.gtable.offset("h.1.ln1") - full.s.gtable.offset("h.0.ln1");
        const size_t res3 = ((size_t)3 * 9 * c.C + 15) / 16 * 16;
        CHECK(full.s.gtable.total - shared.s.gtable.total == (size_t)(L - 1) * per_block - res3);
        // switching back to the full table on the next forward works too (the trainer's dump step)
        shared.keep_all_activation_gradients(true);
        const Batch bt = tiny_arith(3, 9, 99);
        full.forward(bt); full.backward();
        shared.forward(bt); shared.backward();
        CHECK(shared.s.gtable.total == full.s.gtable.total);
        CHECK(shared.s.to_host(shared.s.dacts, 0, full.s.gtable.total) == full.s.to_host(full.s.dacts, 0, full.s.gtable.total));
    }
}

TEST_CASE("--dump-npy writes every parameter, activation and gradient with an index") {
    icl_test::TmpDir tmp;
    const std::string dir = tmp.path;
    GPT<float> m(tiny_cfg(6), Device::cpu, 1);
    Batch bt = tiny_arith(2, 6, 3);
    m.forward(bt);
    m.backward();
    // by default blocks 1..L−1's activation gradients are views of block 0's: a dump refuses them
    CHECK_THROWS_WITH_AS(m.s.dump_npy(dir + "/refused", 0), doctest::Contains("share memory"), Error);
    m.keep_all_activation_gradients(true);  // what the trainer does on the dump step
    m.forward(bt);
    m.backward();
    // what the trainer passes: the attention probabilities of each block, rebuilt from its saved lse
    m.s.dump_npy(dir + "/dump", 0, nullptr, {}, attention_probability_dumps<float>(m.s, nullptr));
    std::ifstream f(dir + "/dump/index.json");
    REQUIRE(f.good());
    nlohmann::json j = nlohmann::json::parse(f);
    size_t expected = 2 * m.s.ptable.size() + m.s.atable.size() + m.s.gtable.size() + m.cfg.L;
    CHECK(j["tensors"].size() == expected);
    NpyArray w = npy_load(dir + "/dump/h.0.attn.qkv.w.npy");
    CHECK(w.shape == Shape{36, 12});
    NpyArray g = npy_load(dir + "/dump/grad.h.0.attn.qkv.w.npy");
    std::vector<float> gh = m.s.to_host(m.s.grads, m.s.ptable.offset("h.0.attn.qkv.w"), 36 * 12);
    CHECK(g.as<float>() == gh);
    NpyArray att = npy_load(dir + "/dump/h.1.att.npy");
    CHECK(att.shape == Shape{2, 3, 6, 6});
    // = what the materialising attention_forward saves for the dumped qkv
    NpyArray qkv = npy_load(dir + "/dump/h.1.qkv.npy");
    std::vector<float> out(2 * 6 * 12), ref(2 * 3 * 6 * 6);
    attention_forward<float>(out.data(), ref.data(), nullptr, qkv.as<float>().data(), 2, 6, 12, 3);
    double err = 0;
    for (size_t i = 0; i < ref.size(); i++) err = std::max(err, (double)std::fabs(ref[i] - att.as<float>()[i]));
    CHECK(err <= 1e-6);
    std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("a short run on the arithmetic task lowers the loss well below its start") {
    icl_test::TmpDir tmp;
    const std::string dir = tmp.path;
    GPTConfig c;
    c.L = 2; c.C = 48; c.NH = 4; c.V = ARITH_VOCAB; c.maxT = 243;
    GPT<float> m(c, Device::cpu, 1);
    Rng rng(1);
    TrainOptions o;
    o.steps = 60; o.lr = 3e-3; o.warmup = 5; o.eval_every = 0; o.run_dir = dir;
    o.tokens_per_step = 8 * 243; o.progress_every = 1000;
    TrainResult r = train(m, o, [&](int) { return arith_batch(ArithConfig{}, 8, rng); }, nullptr);
    double first = r.losses.front(), last = 0;
    for (int i = 50; i < 60; i++) last += r.losses[i] / 10;
    MESSAGE("arith loss: step 1 " << first << " -> steps 51-60 mean " << last);
    CHECK(first > 2.5);            // ≈ ln 16 = 2.77 at init
    CHECK(last < 0.7 * first);     // learned the format (digits, separators) at least
    std::ifstream log(dir + "/log.csv");
    CHECK(log.good());
    std::ifstream png(dir + "/loss.png");
    CHECK(png.good());
    std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("a NaN loss or gradient stops training, names the step/tensor, and keeps the last checkpoint") {
    icl_test::TmpDir tmp;
    const std::string dir = tmp.path;
    GPTConfig c = tiny_cfg(16);
    GPT<float> m(c, Device::cpu, 1);
    Batch bt = tiny_arith(2, 16, 3);
    TrainOptions o;
    o.steps = 3; o.eval_every = 0; o.save_every = 1; o.run_dir = dir; o.save_path = dir + "/ckpt.safetensors";
    o.tokens_per_step = 32; o.progress_every = 1000;
    train(m, o, [&](int) { return bt; }, nullptr);
    std::vector<float> saved = m.s.to_host(m.s.params, 0, m.s.ptable.total);
    // a NaN parameter: the next run stops at its first step with the loss named (this run wrote no checkpoint)
    float nan = NAN;
    m.s.upload(m.s.params, m.s.ptable.offset("h.1.mlp.fc.w") + 5, &nan, 1);
    CHECK_THROWS_WITH_AS(train(m, o, [&](int) { return bt; }, nullptr),
                         doctest::Contains("step 1: the loss is NaN; stopping (last good checkpoint: none written by this run)"), Error);
    // the run before wrote resumable checkpoints every step (save_every = 1) and the final model
    for (int k = 1; k <= 3; k++) CHECK(std::ifstream(dir + "/checkpoint-" + std::to_string(k) + ".safetensors").good());
    // the checkpoint written before is intact and loads
    GPT<float> back(c, Device::cpu, 2);
    back.s.load(dir + "/ckpt.safetensors");
    CHECK(back.s.to_host(back.s.params, 0, back.s.ptable.total) == saved);
    // a non-finite gradient: the update is refused and the tensor is named
    GPT<float> g(c, Device::cpu, 1);
    g.forward(bt);
    g.backward();
    float inf = INFINITY;
    g.s.upload(g.s.grads, g.s.ptable.offset("h.0.attn.proj.w") + 7, &inf, 1);
    std::vector<float> before = g.s.to_host(g.s.params, 0, g.s.ptable.total);
    CHECK_FALSE(std::isfinite(g.s.update(AdamWConfig{}, 1e-3)));
    CHECK(g.s.first_nonfinite_grad() == "h.0.attn.proj.w");
    CHECK(g.s.to_host(g.s.params, 0, g.s.ptable.total) == before);  // nothing was applied
    // a NaN where the loss never looks (a position row beyond T = 16 of a 32-row table): the loss and gradients stay
    // finite, but the run stops before saving it, naming the tensor and the checkpoint that really remains
    GPTConfig c32 = tiny_cfg(16);
    c32.maxT = 32;
    GPT<float> q(c32, Device::cpu, 1);
    q.s.upload(q.s.params, q.s.ptable.offset("wpe") + 20 * c32.C, &nan, 1);
    TrainOptions oq = o;
    oq.save_every = 2;
    oq.run_dir = dir + "/q";
    make_dirs(oq.run_dir);
    CHECK_THROWS_WITH_AS(train(q, oq, [&](int) { return bt; }, nullptr),
                         doctest::Contains("step 2: parameter 'wpe' holds a NaN or Inf; stopping without saving (last good checkpoint: none written by this run)"),
                         Error);
    CHECK_FALSE(std::ifstream(dir + "/q/checkpoint-2.safetensors").good());
    std::system(("rm -rf " + dir).c_str());
}
}
