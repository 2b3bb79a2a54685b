// The one batch/head/loss contract (data/batch.h, models/lm_io.h), each case run against every model that
// consumes batches: the GPT (token and vector variants), the kernel LM, the CGT (with its aux pass) and the
// duallens one-head model. A case that cannot apply to a model (an ignored target for a vector head) says so.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "data/batch.h"
#include "engine/common.h"
#include "engine/rng.h"
#include "models/cgt/cgt.h"
#include "models/duallens/dual_model.h"
#include "models/gpt.h"
#include "models/iclca/kernel_lm.h"

using namespace icl;

namespace {

// One model behind a uniform face: forward, backward, the gradient buffer, and a valid batch for it.
struct Subject {
    std::string name;
    bool tokens = true;        // token inputs and an LM head (else vectors and a vector head)
    int V = 0, D = 0, Dout = 0, maxT = 0;
    std::function<double(const Batch&)> forward;
    std::function<void()> backward;
    std::function<std::vector<double>()> grads;
    std::function<std::vector<double>()> outputs;
};

Batch valid_batch(const Subject& m, uint64_t seed) {
    Rng r(seed);
    Batch bt;
    bt.B = 2;
    bt.T = 6;
    const size_t n = 12;
    for (size_t i = 0; i < n; i++) {
        if (m.tokens) {
            bt.tokens.push_back((int)r.below((uint64_t)m.V));
            bt.targets.push_back((int)r.below((uint64_t)m.V));
        } else {
            for (int d = 0; d < m.D; d++) bt.vectors.push_back((float)r.uniform(-1, 1));
            for (int d = 0; d < m.Dout; d++) bt.target_vecs.push_back((float)r.uniform(-1, 1));
        }
        bt.mask.push_back(0.5f + (float)(i % 3));
    }
    bt.D = m.tokens ? 0 : m.D;
    bt.Dout = m.tokens ? 0 : m.Dout;
    return bt;
}

template <typename Model>
Subject wrap(const std::string& name, std::shared_ptr<Model> mdl, bool tokens, int V, int D, int Dout, int maxT) {
    Subject s;
    s.name = name;
    s.tokens = tokens;
    s.V = V; s.D = D; s.Dout = Dout; s.maxT = maxT;
    s.forward = [mdl](const Batch& b) { return mdl->forward(b); };
    s.backward = [mdl] { mdl->backward(); };
    s.grads = [mdl] { return std::vector<double>(mdl->s.grads.ptr, mdl->s.grads.ptr + mdl->s.ptable.total); };
    s.outputs = [mdl] { return mdl->outputs(); };
    return s;
}

std::vector<Subject> subjects() {
    std::vector<Subject> out;
    {
        GPTConfig c;
        c.L = 1; c.C = 8; c.NH = 2; c.V = 11; c.maxT = 8;
        auto m = std::make_shared<GPT<double>>(c, Device::cpu, 1);
        m->s.randomize_params(2, 0.3);
        out.push_back(wrap("GPT (tokens)", m, true, c.V, 0, 0, c.maxT));
    }
    {
        GPTConfig c;
        c.L = 1; c.C = 8; c.NH = 2; c.V = 0; c.maxT = 8; c.d_in = 3; c.d_out = 2;
        auto m = std::make_shared<GPT<double>>(c, Device::cpu, 1);
        m->s.randomize_params(3, 0.3);
        out.push_back(wrap("GPT (vectors)", m, false, 0, 3, 2, c.maxT));
    }
    {
        KernelLMConfig c;
        c.L = 1; c.C = 8; c.NH = 2; c.V = 11; c.maxT = 64;
        auto m = std::make_shared<KernelLM<double>>(c, Device::cpu, 1);
        m->s.randomize_params(4, 0.3);
        out.push_back(wrap("kernel LM", m, true, c.V, 0, 0, c.maxT));
    }
    {
        CGTConfig c;
        c.L = 2; c.ell = 1; c.dx = 8; c.dy = 4; c.NHx = 2; c.NHy = 1; c.r = 2; c.M = 2; c.V = 11; c.maxT = 8;
        auto m = std::make_shared<CGT<double>>(c, Device::cpu, 1);
        m->s.randomize_params(5, 0.3);
        m->loss.eta = 0.5;  // the aux pass runs too
        m->loss.horizon = 2;
        m->set_aux_positions({2, 3});
        out.push_back(wrap("CGT", m, true, c.V, 0, 0, c.maxT));
    }
    {
        HeadConfig c;
        c.D = 4;
        c.sim_cols = 3;
        auto m = std::make_shared<OneHead<double>>(c, Device::cpu, 1);
        out.push_back(wrap("one-head model", m, false, 0, 4, 1, 1 << 30));
    }
    return out;
}

void refused(Subject& m, const Batch& bt, const char* needle) {
    CAPTURE(needle);
    CHECK_THROWS_WITH_AS(m.forward(bt), doctest::Contains(needle), Error);
}

}  // namespace

TEST_SUITE("contract") {

TEST_CASE("contract: a valid batch trains; the same batch gives the same loss and gradients (every model)") {
    for (Subject& m : subjects()) {
        CAPTURE(m.name);
        const Batch bt = valid_batch(m, 7);
        const double l1 = m.forward(bt);
        REQUIRE(std::isfinite(l1));
        m.backward();
        const std::vector<double> g1 = m.grads();
        CHECK(m.forward(bt) == l1);
        m.backward();
        CHECK(m.grads() == g1);
    }
}

TEST_CASE("contract: targets need a mask of B·T finite weights >= 0 (every model)") {
    for (Subject& m : subjects()) {
        CAPTURE(m.name);
        Batch bt = valid_batch(m, 8);
        bt.mask.clear();
        refused(m, bt, "batch mask has 0 entries, the batch B*T = 12");
        bt = valid_batch(m, 8);
        bt.mask.pop_back();
        refused(m, bt, "batch mask has 11 entries");
        bt = valid_batch(m, 8);
        bt.mask[3] = -1;
        refused(m, bt, "batch mask weight -1: must be finite and >= 0");
        bt.mask[3] = NAN;
        refused(m, bt, "batch mask weight nan");
    }
}

TEST_CASE("contract: the loss is the mask-weighted mean, so scaling every weight changes nothing (every model)") {
    for (Subject& m : subjects()) {
        CAPTURE(m.name);
        Batch bt = valid_batch(m, 9);
        const double l1 = m.forward(bt);
        m.backward();
        const std::vector<double> g1 = m.grads();
        for (float& w : bt.mask) w *= 4;  // a power of two: the weights' ratios are exact
        CHECK(m.forward(bt) == doctest::Approx(l1).epsilon(1e-14));
        m.backward();
        const std::vector<double> g4 = m.grads();
        double worst = 0;
        for (size_t i = 0; i < g1.size(); i++) worst = std::max(worst, std::fabs(g4[i] - g1[i]) / (1e-12 + std::fabs(g1[i])));
        CHECK(worst < 1e-10);
    }
}

TEST_CASE("contract: a negative target is an ignored position, whatever its mask says (every token model)") {
    for (Subject& m : subjects()) {
        CAPTURE(m.name);
        if (!m.tokens) {
            MESSAGE(m.name << ": vector targets have no ignore value; a position is left out by a mask of 0");
            continue;
        }
        Batch ignored = valid_batch(m, 10), masked = ignored;
        ignored.targets[4] = -1;   // mask stays 1.5
        ignored.targets[9] = -7;
        masked.mask[4] = 0;        // the same positions left out through the mask
        masked.mask[9] = 0;
        const double li = m.forward(ignored);
        m.backward();
        const std::vector<double> gi = m.grads();
        const double lm = m.forward(masked);
        m.backward();
        CHECK(li == lm);
        CHECK(m.grads() == gi);
    }
}

TEST_CASE("contract: a batch that scores no position is refused (every model)") {
    for (Subject& m : subjects()) {
        CAPTURE(m.name);
        Batch bt = valid_batch(m, 11);
        for (float& w : bt.mask) w = 0;
        refused(m, bt, "no position is scored");
        if (m.tokens) {
            bt = valid_batch(m, 11);
            for (int& t : bt.targets) t = -1;
            refused(m, bt, "no position is scored");
        }
    }
}

TEST_CASE("contract: inputs, targets and positions outside the model are refused by name (every model)") {
    for (Subject& m : subjects()) {
        CAPTURE(m.name);
        Batch bt = valid_batch(m, 12);
        if (m.tokens) {
            bt.tokens[5] = m.V;
            refused(m, bt, ("token id " + std::to_string(m.V) + " outside the vocabulary").c_str());
            bt = valid_batch(m, 12);
            bt.targets[5] = m.V + 3;
            refused(m, bt, "target id");
            bt = valid_batch(m, 12);
            bt.tokens.pop_back();
            refused(m, bt, "batch tokens do not have B*T entries");
            bt = valid_batch(m, 12);
            bt.targets.pop_back();
            refused(m, bt, "batch targets do not have B*T entries");
        } else {
            bt.D = m.D + 1;
            refused(m, bt, "batch vectors have width");
            bt = valid_batch(m, 12);
            bt.vectors.pop_back();
            refused(m, bt, "batch vectors do not have B*T*D entries");
            bt = valid_batch(m, 12);
            bt.Dout = m.Dout + 1;
            refused(m, bt, "batch targets have width");
        }
        bt = valid_batch(m, 12);
        bt.pos.assign(11, 0);
        refused(m, bt, "batch positions do not have B*T entries");
        if (m.maxT < (1 << 30)) {
            bt.pos.assign(12, 1);
            bt.pos[7] = m.maxT;
            refused(m, bt, ("position " + std::to_string(m.maxT) + " outside [0, ").c_str());
        }
        bt = valid_batch(m, 12);
        bt.B = 0;
        refused(m, bt, "empty batch");
    }
}

TEST_CASE("contract: a batch without targets runs forward only (every model)") {
    for (Subject& m : subjects()) {
        CAPTURE(m.name);
        Batch bt = valid_batch(m, 13);
        bt.targets.clear();
        bt.target_vecs.clear();
        bt.mask.clear();
        CHECK(std::isnan(m.forward(bt)));
        for (double v : m.outputs()) REQUIRE(std::isfinite(v));
        CHECK_THROWS_WITH_AS(m.backward(), doctest::Contains("needs a forward() with targets"), Error);
    }
}

}  // TEST_SUITE
