// Determinism of every trainable model: the same seed and thread count give the same bits — the losses of every
// step and the parameters after training — for the GPT (token and vector heads), the kernel LM, the CGT (aux pass,
// both regularizers and the VAE's sampled y included), the duallens one-head model and the TinT simulator (its
// logits and decoded weights, sequences spread over threads). fp32 as the binaries train, 2 threads, shapes large
// enough that the matrix products and attention split their work across both threads.
#include <doctest/doctest.h>

#include <omp.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "engine/rng.h"
#include "layers/adamw.h"
#include "models/cgt/cgt.h"
#include "models/duallens/dual_model.h"
#include "models/gpt.h"
#include "models/iclca/kernel_lm.h"
#include "models/tint/tint_sim.h"

using namespace icl;

namespace {

struct Trace {
    std::vector<double> losses;
    std::vector<float> params;
};

// Bitwise equality (NaN-safe, -0 ≠ +0: what "identical bits" means).
template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// A batch of B·T random tokens (V > 0) or vectors (D inputs, Dout targets), every position scored.
Batch random_batch(Rng& r, int B, int T, int V, int D, int Dout) {
    Batch bt;
    bt.B = B;
    bt.T = T;
    bt.D = V ? 0 : D;
    bt.Dout = V ? 0 : Dout;
    for (int i = 0; i < B * T; i++) {
        if (V) {
            bt.tokens.push_back((int)r.below((uint64_t)V));
            bt.targets.push_back((int)r.below((uint64_t)V));
        } else {
            for (int d = 0; d < D; d++) bt.vectors.push_back((float)r.normal());
            for (int d = 0; d < Dout; d++) bt.target_vecs.push_back((float)r.normal());
        }
        bt.mask.push_back(1.0f);
    }
    return bt;
}

// Five AdamW steps of a freshly built model (make() builds it from its seed) on batches from one data seed.
template <typename Model>
Trace train(const std::function<std::unique_ptr<Model>()>& make, int B, int T, int V, int D, int Dout) {
    omp_set_num_threads(2);
    std::unique_ptr<Model> m = make();
    Rng data(77);
    AdamWConfig adam;
    Trace tr;
    for (int step = 0; step < 5; step++) {
        Batch bt = random_batch(data, B, T, V, D, Dout);
        tr.losses.push_back(m->forward(bt));
        m->backward();
        m->s.update(adam, 3e-3f);
    }
    tr.params.assign(m->s.params.ptr, m->s.params.ptr + m->s.ptable.total);
    return tr;
}

template <typename Model>
void check_deterministic(const std::string& name, const std::function<std::unique_ptr<Model>()>& make, int B, int T, int V, int D = 0,
                         int Dout = 0) {
    CAPTURE(name);
    const Trace a = train<Model>(make, B, T, V, D, Dout), b = train<Model>(make, B, T, V, D, Dout);
    REQUIRE(a.losses.size() == 5);
    CHECK(a.losses.front() != a.losses.back());  // it trained
    CHECK(same_bits(a.losses, b.losses));
    CHECK(same_bits(a.params, b.params));
}

}  // namespace

TEST_SUITE("determinism") {
TEST_CASE("determinism: GPT (tokens and vectors): same seed and threads, identical losses and parameters") {
    GPTConfig c;
    c.L = 2; c.C = 64; c.NH = 4; c.V = 37; c.maxT = 64;
    check_deterministic<GPT<float>>("GPT tokens", [&] { return std::make_unique<GPT<float>>(c, Device::cpu, 11); }, 4, 64, c.V);
    GPTConfig v = c;
    v.V = 0; v.d_in = 5; v.d_out = 2;
    check_deterministic<GPT<float>>("GPT vectors", [&] { return std::make_unique<GPT<float>>(v, Device::cpu, 12); }, 4, 64, 0, 5, 2);
}

TEST_CASE("determinism: kernel LM: same seed and threads, identical losses and parameters") {
    KernelLMConfig c;
    c.L = 2; c.C = 64; c.NH = 4; c.V = 37; c.maxT = 128;
    check_deterministic<KernelLM<float>>("kernel LM", [&] { return std::make_unique<KernelLM<float>>(c, Device::cpu, 13); }, 4, 64, c.V);
}

TEST_CASE("determinism: CGT with its aux pass, R_C, R_D and the VAE: same seed and threads, identical losses and parameters") {
    CGTConfig c;
    c.L = 3; c.ell = 1; c.dx = 64; c.dy = 32; c.NHx = 4; c.NHy = 2; c.r = 4; c.M = 4; c.V = 37; c.maxT = 64;
    for (bool vae : {false, true}) {
        c.vae = vae;
        auto make = [&] {
            auto m = std::make_unique<CGT<float>>(c, Device::cpu, 14);
            m->loss.eta = 0.5;
            m->loss.horizon = 8;
            m->loss.wC = 0.08;
            m->loss.wD = 0.04;
            m->loss.beta = vae ? 0.01 : 0;
            m->set_aux_positions({10, 20, 30, 40});
            return m;
        };
        check_deterministic<CGT<float>>(vae ? "CGT (VAE)" : "CGT", make, 4, 64, c.V);
    }
}

TEST_CASE("determinism: duallens one-head model: same seed and threads, identical losses and parameters") {
    HeadConfig c;
    c.D = 6;
    c.sim_cols = 5;
    check_deterministic<OneHead<float>>("one-head", [&] { return std::make_unique<OneHead<float>>(c, Device::cpu, 15); }, 16, 41, 0, 6, 1);
}

TEST_CASE("determinism: TinT simulator (fp32, sequences over 2 threads): identical logits and decoded weights") {
    omp_set_num_threads(2);
    GPTConfig g;
    g.L = 2; g.C = 24; g.NH = 3; g.V = 20; g.maxT = 16; g.act = "relu";
    GPT<float> aux(g, Device::cpu, 16);
    aux.s.randomize_params(17, 0.3);
    TintConfig c = TintConfig::from_aux(g);
    TintInput in;
    in.B = 4; in.T = 12;
    Rng r(18);
    for (int i = 0; i < in.B * in.T; i++) {
        in.ids.push_back((int)r.below((uint64_t)g.V));
        in.train.push_back(i % in.T < 8);
    }
    auto run = [&] { return Tint<float>(c).run(aux, in, 2, 2); };
    TintOutput<float> a = run(), b = run();
    CHECK(same_bits(a.logits1, b.logits1));
    REQUIRE(a.params.size() == 4);
    for (int s = 0; s < 4; s++) CHECK(same_bits(a.params[s], b.params[s]));
    CHECK(!same_bits(a.logits1, a.logits0));  // the update happened
}
}
