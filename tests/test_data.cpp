// Tests of the data generators (src/data/): the arithmetic task reproduces the spec's worked examples.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <set>

#include "data/arith.h"
#include "data/linreg.h"
#include "data/text.h"
#include "engine/common.h"

using namespace icl;

TEST_SUITE("data") {
TEST_CASE("arithmetic: the paper's worked examples (spec cgt.md §4.1)") {
    CHECK(arith_example(12, 23, 1.0, 1.0, 3) == "012*023=+00035|");
    // 0.5·12 − 1.5·23 = −28.5 → trunc toward zero → "-00028" (floor would give −29)
    CHECK(arith_example(12, 23, 0.5, -1.5, 3) == "012*023=-00028|");
    CHECK(arith_example(0, 0, 3.3, -2.2, 3) == "000*000=+00000|");
    CHECK(arith_example(999, 999, 9.999, 9.999, 3) == "999*999=+19978|");   // 19978.002: the largest answers fit 5 digits
    CHECK(arith_example(999, 999, 0.0, -9.999, 3) == "999*999=-09989|");
    CHECK(arith_example(5, 7, 0.0, -0.1, 1) == "5*7=+000|");  // trunc(−0.7) = 0, printed with a "+" as C = 0 is
}

TEST_CASE("arithmetic: sequence layout, vocabulary and answer mask") {
    ArithConfig cfg;  // 4 tasks × 4 examples, d = 3
    CHECK(cfg.example_len() == 15);
    CHECK(cfg.task_len() == 61);
    CHECK(cfg.seq_len() == 244);
    Rng rng(42);
    ArithSample s = arith_sample(cfg, rng);
    REQUIRE(s.text.size() == 244);
    for (int t = 0; t < 4; t++) {
        std::string task = s.text.substr(t * 61, 61);
        CHECK(task.back() == '#');
        for (int e = 0; e < 4; e++) {
            std::string ex = task.substr(e * 15, 15);
            int A = std::stoi(ex.substr(0, 3)), B = std::stoi(ex.substr(4, 3));
            CHECK(ex[3] == '*');
            CHECK(ex[7] == '=');
            CHECK(ex.back() == '|');
            // every example is consistent with its task's hidden (a, b)
            CHECK(ex == arith_example(A, B, s.a[t], s.b[t], 3));
        }
        CHECK(s.a[t] >= 0.0);
        CHECK(s.a[t] < 10.0);
        CHECK(s.b[t] > -10.0);
        CHECK(s.b[t] < 10.0);
    }
    for (size_t i = 0; i < s.text.size(); i++) CHECK(arith_char(s.tokens[i]) == s.text[i]);
    // scored: sign + 5 digits of examples 3 and 4 of each of the 4 tasks = 48 positions
    std::vector<float> m = arith_answer_mask(s, 2, false), md = arith_answer_mask(s, 2, true);
    double n = 0, nd = 0;
    for (float x : m) n += x;
    for (float x : md) nd += x;
    CHECK(n == 48);
    CHECK(nd == 40);
    CHECK_THROWS_AS(arith_token('x'), Error);
    Batch b = arith_batch(cfg, 3, rng);
    CHECK(b.T == 243);
    CHECK(b.tokens.size() == 3 * 243u);
    for (int t = 0; t + 1 < b.T; t++) CHECK(b.targets[t] == b.tokens[t + 1]);
}

TEST_CASE("arithmetic: same seed, same data; different seed, different data") {
    ArithConfig cfg;
    Rng r1(7), r2(7), r3(8);
    CHECK(arith_sample(cfg, r1).text == arith_sample(cfg, r2).text);
    CHECK(arith_sample(cfg, r1).text != arith_sample(cfg, r3).text);
}

TEST_CASE("linear regression: v = U u + b + eps q, predicted at the u positions") {
    LinRegConfig cfg{3, 1, 10, 0.0};  // noiseless: v equals the clean target exactly
    Rng rng(3);
    std::vector<float> clean;
    Batch b = linreg_batch(cfg, 2, rng, &clean);
    CHECK(b.T == 20);
    CHECK(b.D == 3);
    CHECK(b.Dout == 1);
    double scored = 0;
    for (float x : b.mask) scored += x;
    CHECK(scored == 2 * 10);
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 10; k++) {
            size_t tu = (size_t)s * b.T + 2 * k, tv = tu + 1;
            CHECK(b.mask[tu] == 1.0f);
            CHECK(b.mask[tv] == 0.0f);
            CHECK(b.target_vecs[tu] == b.vectors[tv * 3]);  // target at u = the v token that follows
            CHECK(clean[tu] == doctest::Approx(b.target_vecs[tu]).epsilon(1e-6));
            CHECK(b.vectors[tv * 3 + 1] == 0.0f);           // v is zero-padded
        }
    // the map is linear in u within one sequence: fit it from d_in+1 pairs and predict the rest exactly
    // (a cheap check that U and b are fixed per sequence)
    LinRegConfig noisy{3, 1, 10, 0.1};
    Batch c = linreg_batch(noisy, 1, rng, &clean);
    double err = 0;
    for (int k = 0; k < 10; k++) err += std::fabs(c.target_vecs[2 * k] - clean[2 * k]);
    CHECK(err > 0);  // noise present
    CHECK(err / 10 < 0.5);
}

TEST_CASE("text: loading, splitting, windows, errors") {
    std::string path = "/tmp/icl_test_text.txt";
    {
        std::FILE* f = std::fopen(path.c_str(), "wb");
        for (int i = 0; i < 1000; i++) std::fputc('a' + i % 26, f);
        std::fclose(f);
    }
    TextData d = text_load(path, 0.1, 16);
    CHECK(d.train.size() == 900);
    CHECK(d.val.size() == 100);
    Rng rng(1);
    Batch b = text_batch(d.train, 4, 16, rng);
    for (int i = 0; i < 4 * 16; i++) CHECK((b.targets[i] - 'a' + 26) % 26 == (b.tokens[i] - 'a' + 1) % 26);
    CHECK_THROWS_WITH_AS(text_load("/nonexistent/file.txt", 0.1, 16), doctest::Contains("cannot open"), Error);
    CHECK_THROWS_WITH_AS(text_load(path, 0.1, 500), doctest::Contains("need at least"), Error);
    std::remove(path.c_str());
}
}
