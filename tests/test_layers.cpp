// test_layers.cpp — the CPU reference layers (src/layers/*.h, except the GEMM and linear layer).
//
// Every layer: an fp64 finite-difference check (tests/fdcheck.h) of every input and parameter gradient, for the
// random scalar loss L = Σ out ⊙ R, on odd shapes (B=3, T=7, C=12, NH=3, V=11, N=21, D=5). Every backward is
// run into gradient buffers PRE-FILLED with random values and the pre-fill is subtracted afterwards, which
// checks the engine-wide "backward accumulates (+=)" convention at the same time.
// Plus the layer-specific properties: attention causality and agreement with a naive implementation, masked
// and extreme rows of the cross-entropy, AdamW and the schedule by hand, and bit-for-bit determinism.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "engine/rng.h"
#include "fdcheck.h"
#include "layers/adamw.h"
#include "layers/attention.h"
#include "layers/embedding.h"
#include "layers/fixed_sum.h"
#include "layers/gelu.h"
#include "layers/layernorm.h"
#include "layers/loss.h"
#include "layers/residual.h"
#include "vec_util.h"

namespace {

using namespace icl;
using vec = std::vector<double>;

using icl_test::dot;
using icl_test::max_abs_diff;
using icl_test::minus;
using icl_test::randn;

// Sets the OpenMP thread count for one scope.
struct ThreadScope {
    int saved = 1;
    explicit ThreadScope(int n) {
#ifdef _OPENMP
        saved = omp_get_max_threads();
        omp_set_num_threads(n);
#else
        (void)n;
#endif
    }
    ~ThreadScope() {
#ifdef _OPENMP
        omp_set_num_threads(saved);
#endif
    }
};

template <typename T>
bool bit_equal(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// ---- naive attention, written independently of attention.h: plain loops, one (b,h,i) at a time ----
void attention_naive_forward(vec& out, vec& att, const vec& qkv, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const double scale = 1.0 / std::sqrt((double)hs);
    out.assign((size_t)B * T * C, 0.0);
    att.assign((size_t)B * NH * T * T, 0.0);
    auto Q = [&](int b, int t, int h, int d) { return qkv[((size_t)b * T + t) * 3 * C + h * hs + d]; };
    auto K = [&](int b, int t, int h, int d) { return qkv[((size_t)b * T + t) * 3 * C + C + h * hs + d]; };
    auto Vv = [&](int b, int t, int h, int d) { return qkv[((size_t)b * T + t) * 3 * C + 2 * C + h * hs + d]; };
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                double* a = &att[(((size_t)b * NH + h) * T + i) * T];
                double mx = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    double s = 0.0;
                    for (int d = 0; d < hs; d++) s += Q(b, i, h, d) * K(b, j, h, d);
                    a[j] = s * scale;
                    mx = std::max(mx, a[j]);
                }
                double sum = 0.0;
                for (int j = 0; j <= i; j++) sum += (a[j] = std::exp(a[j] - mx));
                for (int j = 0; j <= i; j++) a[j] /= sum;
                for (int d = 0; d < hs; d++) {
                    double s = 0.0;
                    for (int j = 0; j <= i; j++) s += a[j] * Vv(b, j, h, d);
                    out[((size_t)b * T + i) * C + h * hs + d] = s;
                }
            }
}
void attention_naive_backward(vec& dqkv, const vec& dout, const vec& qkv, const vec& att, int B, int T, int C,
                              int NH) {
    const int hs = C / NH;
    const double scale = 1.0 / std::sqrt((double)hs);
    auto at = [&](int b, int t, int part, int h, int d) { return ((size_t)b * T + t) * 3 * C + part * C + h * hs + d; };
    std::vector<double> datt(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double* a = &att[(((size_t)b * NH + h) * T + i) * T];
                const double* dO = &dout[((size_t)b * T + i) * C + h * hs];
                double dotp = 0.0;
                for (int j = 0; j <= i; j++) {
                    double s = 0.0;
                    for (int d = 0; d < hs; d++) {
                        s += dO[d] * qkv[at(b, j, 2, h, d)];
                        dqkv[at(b, j, 2, h, d)] += a[j] * dO[d];
                    }
                    datt[j] = s;
                    dotp += a[j] * s;
                }
                for (int j = 0; j <= i; j++) {
                    const double dpre = a[j] * (datt[j] - dotp) * scale;
                    for (int d = 0; d < hs; d++) {
                        dqkv[at(b, i, 0, h, d)] += dpre * qkv[at(b, j, 1, h, d)];
                        dqkv[at(b, j, 1, h, d)] += dpre * qkv[at(b, i, 0, h, d)];
                    }
                }
            }
}

}  // namespace

TEST_SUITE("layers") {

TEST_CASE("encoder: values, default and custom positions, gradients (accumulating)") {
    const int B = 3, T = 7, C = 12, V = 11, maxT = 9;
    Rng rng(101);
    vec wte = randn((size_t)V * C, rng), wpe = randn((size_t)maxT * C, rng);
    std::vector<int> inp(B * T), pos(B * T);
    for (auto& x : inp) x = (int)rng.below(V);
    for (auto& x : pos) x = (int)rng.below(maxT);
    for (bool custom : {false, true}) {
        CAPTURE(custom);
        const int* p = custom ? pos.data() : nullptr;
        vec out((size_t)B * T * C);
        encoder_forward(out.data(), inp.data(), p, wte.data(), wpe.data(), B, T, C, V, maxT);
        bool values_ok = true;
        for (int n = 0; n < B * T; n++) {
            const int pp = custom ? pos[n] : n % T;
            for (int c = 0; c < C; c++)
                values_ok &= out[(size_t)n * C + c] == wte[(size_t)inp[n] * C + c] + wpe[(size_t)pp * C + c];
        }
        CHECK(values_ok);

        const vec R = randn(out.size(), rng);
        auto loss = [&] {
            vec o(out.size());
            encoder_forward(o.data(), inp.data(), p, wte.data(), wpe.data(), B, T, C, V, maxT);
            return dot(o, R);
        };
        const vec P1 = randn(wte.size(), rng), P2 = randn(wpe.size(), rng);
        vec dwte = P1, dwpe = P2;
        encoder_backward(dwte.data(), dwpe.data(), R.data(), inp.data(), p, B, T, C, V, maxT);
        const vec g1 = minus(dwte, P1), g2 = minus(dwpe, P2);
        check_gradient("wte", loss, wte.data(), wte.size(), g1.data());
        check_gradient("wpe", loss, wpe.data(), wpe.size(), g2.data());
    }
}

TEST_CASE("vector_embed: zero-padded vectors plus positions, dwpe (accumulating)") {
    const int B = 3, T = 7, C = 12, D = 5, maxT = 10;
    Rng rng(102);
    vec x = randn((size_t)B * T * D, rng), wpe = randn((size_t)maxT * C, rng);
    std::vector<int> pos(B * T);
    for (int n = 0; n < B * T; n++) pos[n] = 3 + n % T;  // a prefix of 3 positions before each row
    vec out((size_t)B * T * C);
    vector_embed_forward(out.data(), x.data(), pos.data(), wpe.data(), B, T, C, D, maxT);
    bool values_ok = true;
    for (int n = 0; n < B * T; n++)
        for (int c = 0; c < C; c++)
            values_ok &= out[(size_t)n * C + c] == (c < D ? x[(size_t)n * D + c] : 0.0) + wpe[(size_t)pos[n] * C + c];
    CHECK(values_ok);

    const vec R = randn(out.size(), rng);
    auto loss = [&] {
        vec o(out.size());
        vector_embed_forward(o.data(), x.data(), pos.data(), wpe.data(), B, T, C, D, maxT);
        return dot(o, R);
    };
    const vec P = randn(wpe.size(), rng);
    vec dwpe = P;
    vector_embed_backward(dwpe.data(), R.data(), pos.data(), B, T, C, maxT);
    const vec g = minus(dwpe, P);
    check_gradient("wpe", loss, wpe.data(), wpe.size(), g.data());
}

TEST_CASE("layernorm: saved statistics, gradients of inp/weight/bias (accumulating)") {
    const int N = 21, C = 12;
    Rng rng(103);
    vec inp = randn((size_t)N * C, rng, 1.5, 0.7), weight = randn(C, rng, 0.3, 1.0), bias = randn(C, rng);
    vec out((size_t)N * C), mean(N), rstd(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += inp[(size_t)n * C + c] / C;
        for (int c = 0; c < C; c++) v += (inp[(size_t)n * C + c] - m) * (inp[(size_t)n * C + c] - m) / C;
        CHECK(mean[n] == doctest::Approx(m).epsilon(1e-13));
        CHECK(rstd[n] == doctest::Approx(1.0 / std::sqrt(v + 1e-5)).epsilon(1e-13));
    }

    const vec R = randn(out.size(), rng);
    auto loss = [&] {
        vec o(out.size()), m(N), s(N);
        layernorm_forward(o.data(), m.data(), s.data(), inp.data(), weight.data(), bias.data(), N, C);
        return dot(o, R);
    };
    const vec P0 = randn(inp.size(), rng), P1 = randn(C, rng), P2 = randn(C, rng);
    vec dinp = P0, dw = P1, db = P2;
    layernorm_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), weight.data(), mean.data(),
                       rstd.data(), N, C);
    const vec g0 = minus(dinp, P0), g1 = minus(dw, P1), g2 = minus(db, P2);
    check_gradient("inp", loss, inp.data(), inp.size(), g0.data());
    check_gradient("weight", loss, weight.data(), weight.size(), g1.data());
    check_gradient("bias", loss, bias.data(), bias.size(), g2.data());

    // nullptr gradients are skipped; the others are unchanged by the omission
    vec dw2 = P1;
    layernorm_backward<double>(nullptr, dw2.data(), nullptr, R.data(), inp.data(), weight.data(), mean.data(),
                               rstd.data(), N, C);
    CHECK(bit_equal(dw2, dw));
}

TEST_CASE("gelu: tanh form values and gradient (accumulating)") {
    const size_t n = 253;
    Rng rng(104);
    vec x = randn(n, rng, 2.0), out(n);
    gelu_forward(out.data(), x.data(), n);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double u = std::sqrt(2.0 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
        worst = std::max(worst, std::fabs(out[i] - 0.5 * x[i] * (1.0 + std::tanh(u))) / (1.0 + std::fabs(x[i])));
    }
    CHECK(worst <= 1e-15);

    const vec R = randn(n, rng);
    auto loss = [&] {
        vec o(n);
        gelu_forward(o.data(), x.data(), n);
        return dot(o, R);
    };
    const vec P = randn(n, rng);
    vec dx = P;
    gelu_backward(dx.data(), x.data(), R.data(), n);
    const vec g = minus(dx, P);
    check_gradient("inp", loss, x.data(), n, g.data());
}

TEST_CASE("gelu: the float path (vectorized exp where AVX2 is compiled in) agrees with double") {
    const size_t n = 1003;  // not a multiple of 8: the tail goes through the padded path
    Rng rng(105);
    vec xd(n);
    for (size_t i = 0; i < n; i++) xd[i] = -12.0 + 24.0 * (double)i / (n - 1);
    xd[0] = -1e4; xd[1] = 1e4; xd[2] = -100; xd[3] = 100; xd[4] = 0.0;
    std::vector<float> xf(xd.begin(), xd.end()), of(n), gf(n, 0.5f), doutf(n);
    vec od(n), gd(n, 0.5), doutd = randn(n, rng);
    for (size_t i = 0; i < n; i++) doutf[i] = (float)doutd[i], doutd[i] = (double)doutf[i];
    for (size_t i = 0; i < n; i++) xd[i] = (double)xf[i];
    gelu_forward(of.data(), xf.data(), n);
    gelu_forward(od.data(), xd.data(), n);
    gelu_backward(gf.data(), xf.data(), doutf.data(), n);
    gelu_backward(gd.data(), xd.data(), doutd.data(), n);
    double werr_f = 0, werr_b = 0;
    for (size_t i = 0; i < n; i++) {
        werr_f = std::max(werr_f, std::fabs(of[i] - od[i]) / (1e-6 + std::fabs(od[i])));
        werr_b = std::max(werr_b, std::fabs(gf[i] - gd[i]) / (1.0 + std::fabs(gd[i])));
    }
    CHECK(werr_f <= 2e-6);
    CHECK(werr_b <= 2e-6);
}

TEST_CASE("vmath::exp_shifted_sum (the softmax exponential): float agrees with std::exp, edge values") {
    const int n = 37;  // 4 full vectors of 8 and a tail of 5
    std::vector<float> xf(n);
    for (int j = 0; j < n; j++) xf[j] = -95.0f + 105.0f * j / (n - 1);  // from e^-95 (-> 0) up to e^10
    vec xd(n);
    for (int j = 0; j < n; j++) xd[j] = (double)(xf[j] - 1.5f);  // the shifted argument as float computes it
    const vec arg = xd;
    const float sf = vmath::exp_shifted_sum(xf.data(), n, 1.5f);
    const double sd = vmath::exp_shifted_sum(xd.data(), n, 0.0);
    double worst = 0;
    for (int j = 0; j < n; j++)
        if (arg[j] > -87.0) worst = std::max(worst, std::fabs(xf[j] - xd[j]) / xd[j]);
    CHECK(worst <= 3e-7);
    CHECK(xf[0] <= 1e-37f);  // e^(-96.5): 0 (vector path) or a subnormal (std::exp)
    CHECK(sf == doctest::Approx(sd).epsilon(1e-6));
    std::vector<float> edge = {NAN, 200.0f, -200.0f, 0.0f};
    vmath::exp_shifted_sum(edge.data(), 4, 0.0f);
    CHECK(std::isnan(edge[0]));
    CHECK(std::isinf(edge[1]));
    CHECK(edge[2] == 0.0f);
    CHECK(edge[3] == 1.0f);
}

#if defined(ICL_VMATH_AVX2) && defined(__AVX512F__)
constexpr bool kBuiltWithAvx512 = true;
#else
constexpr bool kBuiltWithAvx512 = false;  // a portable AVX2 (or plainer) build: there is no exp16 to compare
#endif
TEST_CASE("vmath::exp16 (AVX-512) = exp8 (AVX2) lane for lane, edge values included" * doctest::skip(!kBuiltWithAvx512)) {
#if defined(ICL_VMATH_AVX2) && defined(__AVX512F__)
    std::vector<float> x(16 * 40);
    for (size_t j = 0; j < x.size(); j++) x[j] = -100.0f + 200.0f * (float)j / (float)(x.size() - 1) + 1e-3f * (float)(j % 7);
    x[3] = NAN;
    x[4] = INFINITY;
    x[5] = -INFINITY;
    for (size_t j = 0; j < x.size(); j += 16) {
        alignas(64) float a[16], b[16];
        _mm512_store_ps(a, vmath::exp16(_mm512_loadu_ps(&x[j])));
        _mm256_store_ps(b, vmath::exp8(_mm256_loadu_ps(&x[j])));
        _mm256_store_ps(b + 8, vmath::exp8(_mm256_loadu_ps(&x[j + 8])));
        for (int l = 0; l < 16; l++) {
            CAPTURE(x[j + l]);
            if (std::isnan(b[l])) CHECK(std::isnan(a[l]));
            else CHECK(a[l] == b[l]);
        }
    }
#endif
}


TEST_CASE("residual: values and gradients of both inputs (accumulating)") {
    const size_t n = 21 * 12;
    Rng rng(106);
    vec a = randn(n, rng), b = randn(n, rng), out(n);
    residual_forward(out.data(), a.data(), b.data(), n);
    CHECK(out[7] == a[7] + b[7]);
    const vec R = randn(n, rng);
    auto loss = [&] {
        vec o(n);
        residual_forward(o.data(), a.data(), b.data(), n);
        return dot(o, R);
    };
    const vec P1 = randn(n, rng), P2 = randn(n, rng);
    vec da = P1, db = P2;
    residual_backward(da.data(), db.data(), R.data(), n);
    const vec g1 = minus(da, P1), g2 = minus(db, P2);
    check_gradient("inp1", loss, a.data(), n, g1.data());
    check_gradient("inp2", loss, b.data(), n, g2.data());
}

TEST_CASE("attention: gradient of qkv (accumulating), att rows are causal distributions") {
    const int B = 3, T = 7, C = 12, NH = 3;
    Rng rng(107);
    vec qkv = randn((size_t)B * T * 3 * C, rng), out((size_t)B * T * C), att((size_t)B * NH * T * T);
    attention_forward(out.data(), att.data(), nullptr, qkv.data(), B, T, C, NH);
    bool rows_ok = true;
    for (int r = 0; r < B * NH * T; r++) {
        const int i = r % T;
        double s = 0;
        for (int j = 0; j < T; j++) {
            s += att[(size_t)r * T + j];
            if (j > i) rows_ok &= att[(size_t)r * T + j] == 0.0;
        }
        rows_ok &= std::fabs(s - 1.0) <= 1e-14;
    }
    CHECK(rows_ok);

    const vec R = randn(out.size(), rng);
    auto loss = [&] {
        vec o(out.size()), a(att.size());
        attention_forward(o.data(), a.data(), nullptr, qkv.data(), B, T, C, NH);
        return dot(o, R);
    };
    const vec P = randn(qkv.size(), rng);
    vec dqkv = P, scratch(attention_scratch_size(B, T, C, NH));
    attention_backward(dqkv.data(), scratch.data(), R.data(), qkv.data(), att.data(), B, T, C, NH);
    const vec g = minus(dqkv, P);
    check_gradient("qkv", loss, qkv.data(), qkv.size(), g.data());
}

TEST_CASE("attention with a key start per sequence (the CGT's masked aux pass): rows from the definition; gradient of qkv; rows before the start attend to themselves") {
    const int B = 3, T = ATT_BLOCK + 9, C = 8, NH = 2, hs = C / NH;  // two row blocks
    const int ks[B] = {0, 5, ATT_BLOCK + 3};
    Rng rng(131);
    vec qkv = randn((size_t)B * T * 3 * C, rng), out((size_t)B * T * C), att((size_t)B * NH * T * T);
    attention_forward(out.data(), att.data(), nullptr, qkv.data(), B, T, C, NH, ks);
    // the definition: softmax over lo <= j <= i of q_i·k_j/√hs, lo = ks (i >= ks) or i (i < ks); out = Σ att·v
    double err = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const int lo = i < ks[b] ? i : ks[b];
                std::vector<double> p(T, 0.0);
                double mx = -1e300, sum = 0;
                for (int j = lo; j <= i; j++) {
                    double d = 0;
                    for (int c = 0; c < hs; c++) d += qkv[((size_t)b * T + i) * 3 * C + h * hs + c] * qkv[((size_t)b * T + j) * 3 * C + C + h * hs + c];
                    p[j] = d / std::sqrt((double)hs);
                    mx = std::max(mx, p[j]);
                }
                for (int j = lo; j <= i; j++) sum += p[j] = std::exp(p[j] - mx);
                for (int j = 0; j < T; j++) {
                    const double a = j >= lo && j <= i ? p[j] / sum : 0.0;
                    err = std::max(err, std::fabs(a - att[(((size_t)b * NH + h) * T + i) * T + j]));
                }
                for (int c = 0; c < hs; c++) {
                    double o = 0;
                    for (int j = lo; j <= i; j++) o += p[j] / sum * qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * hs + c];
                    err = std::max(err, std::fabs(o - out[((size_t)b * T + i) * C + h * hs + c]));
                }
            }
    CHECK(err < 1e-14);
    // a row before its sequence's start is its own value: finite, one-hot attention
    CHECK(att[(((size_t)1 * NH + 1) * T + 2) * T + 2] == 1.0);
    // ks = 0 is the plain causal attention, bit for bit
    vec out0(out.size()), att0(att.size());
    attention_forward(out0.data(), att0.data(), nullptr, qkv.data(), B, T, C, NH);
    CHECK(std::equal(out0.begin(), out0.begin() + (size_t)T * C, out.begin()));
    // gradient: the unchanged backward reads the zeros of att outside each row's keys
    const vec R = randn(out.size(), rng);
    auto loss = [&] {
        vec o(out.size()), a(att.size());
        attention_forward(o.data(), a.data(), nullptr, qkv.data(), B, T, C, NH, ks);
        return dot(o, R);
    };
    const vec P = randn(qkv.size(), rng);
    vec dqkv = P, scratch(attention_scratch_size(B, T, C, NH));
    attention_backward(dqkv.data(), scratch.data(), R.data(), qkv.data(), att.data(), B, T, C, NH);
    const vec g = minus(dqkv, P);
    check_gradient("qkv (key start)", loss, qkv.data(), qkv.size(), g.data());
}

TEST_CASE("attention: several causal blocks agree with a naive implementation; future tokens are invisible") {
    const int B = 2, T = 2 * ATT_BLOCK + 5, C = 8, NH = 2;
    Rng rng(108);
    vec qkv = randn((size_t)B * T * 3 * C, rng), out((size_t)B * T * C), att((size_t)B * NH * T * T);
    attention_forward(out.data(), att.data(), nullptr, qkv.data(), B, T, C, NH);
    vec out_ref, att_ref;
    attention_naive_forward(out_ref, att_ref, qkv, B, T, C, NH);
    CHECK(max_abs_diff(out, out_ref) <= 1e-13);
    CHECK(max_abs_diff(att, att_ref) <= 1e-13);

    const vec dout = randn(out.size(), rng), P = randn(qkv.size(), rng);
    vec dqkv = P, dqkv_ref = P, scratch(attention_scratch_size(B, T, C, NH));
    attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    attention_naive_backward(dqkv_ref, dout, qkv, att_ref, B, T, C, NH);
    CHECK(max_abs_diff(dqkv, dqkv_ref) <= 1e-12);

    // a subset finite-difference check at this size too (crosses every block boundary); one thread, as
    // hundreds of tiny parallel regions are slow on a loaded machine and the threaded path is checked above
    ThreadScope one_thread(1);
    auto loss = [&] {
        vec o(out.size()), a(att.size());
        attention_forward(o.data(), a.data(), nullptr, qkv.data(), B, T, C, NH);
        return dot(o, dout);
    };
    const vec g = minus(dqkv, P);
    FdOptions opt;
    opt.max_elems = 157;
    check_gradient("qkv (T=133, subset)", loss, qkv.data(), qkv.size(), g.data(), 1e-6, opt);

    // causality: change k and v of token tf; outputs before tf are bit-identical, from tf on they change
    const int tf = ATT_BLOCK + 6;
    vec qkv2 = qkv;
    for (int b = 0; b < B; b++)
        for (int c = C; c < 3 * C; c++) qkv2[((size_t)b * T + tf) * 3 * C + c] += 0.5;
    vec out2(out.size()), att2(att.size());
    attention_forward(out2.data(), att2.data(), nullptr, qkv2.data(), B, T, C, NH);
    bool before_same = true, at_changed = true;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < tf; t++)
            before_same &= std::memcmp(&out[((size_t)b * T + t) * C], &out2[((size_t)b * T + t) * C], C * sizeof(double)) == 0;
        at_changed &= std::memcmp(&out[((size_t)b * T + tf) * C], &out2[((size_t)b * T + tf) * C], C * sizeof(double)) != 0;
    }
    CHECK(before_same);
    CHECK(at_changed);
}

TEST_CASE("attention, O(T) form: lse saved, probabilities recomputed — out bit-identical to the materialised form, gradient = its, FD, key starts, any thread count") {
    const int B = 3, T = 2 * ATT_BLOCK + 7, C = 12, NH = 3;  // three row blocks, the last partial
    const int ks[B] = {0, 5, ATT_BLOCK + 3};
    Rng rng(141);
    const vec qkv = randn((size_t)B * T * 3 * C, rng), dout = randn((size_t)B * T * C, rng), P = randn(qkv.size(), rng);
    for (const int* kstart : {(const int*)nullptr, ks}) {
        CAPTURE(kstart != nullptr);
        vec out((size_t)B * T * C), att((size_t)B * NH * T * T), dref = P, sref(attention_scratch_size(B, T, C, NH));
        attention_forward(out.data(), att.data(), nullptr, qkv.data(), B, T, C, NH, kstart);
        attention_backward(dref.data(), sref.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
        vec out2(out.size()), lse((size_t)B * NH * T), d2 = P, s2(attention_lse_scratch_size(B, T, NH));
        attention_forward_lse(out2.data(), lse.data(), s2.data(), qkv.data(), B, T, C, NH, kstart);
        CHECK(out2 == out);  // the same products and softmax: the same bits
        attention_backward_lse(d2.data(), s2.data(), dout.data(), out2.data(), qkv.data(), lse.data(), B, T, C, NH, kstart);
        double scale = 0;
        for (double x : dref) scale = std::max(scale, std::fabs(x));
        CHECK(max_abs_diff(d2, dref) <= 1e-13 * scale);  // the sums of dv and dk in another order
        vec att2(att.size());
        attention_probabilities(att2.data(), qkv.data(), lse.data(), B, T, C, NH, kstart);
        CHECK(max_abs_diff(att2, att) <= 1e-14);
        for (int threads : {1, 2, 3}) {  // one thread per (b,h) pair: the same bits for any count
            ThreadScope ts(threads);
            vec o3(out.size()), l3(lse.size()), d3 = P, s3(attention_lse_scratch_size(B, T, NH));
            attention_forward_lse(o3.data(), l3.data(), s3.data(), qkv.data(), B, T, C, NH, kstart);
            attention_backward_lse(d3.data(), s3.data(), dout.data(), o3.data(), qkv.data(), l3.data(), B, T, C, NH, kstart);
            CHECK(o3 == out2);
            CHECK(l3 == lse);
            CHECK(d3 == d2);
        }
        // finite differences on a subset (crosses the block boundaries), one thread
        ThreadScope one_thread(1);
        const vec g = minus(d2, P);
        FdOptions opt;
        opt.max_elems = 157;
        vec q = qkv;
        auto loss_q = [&] {
            vec o(out.size()), l(lse.size()), sc(attention_lse_scratch_size(B, T, NH, 1));
            attention_forward_lse(o.data(), l.data(), sc.data(), q.data(), B, T, C, NH, kstart);
            return dot(o, dout);
        };
        check_gradient("qkv (lse form)", loss_q, q.data(), q.size(), g.data(), 1e-6, opt);
    }
}

TEST_CASE("attention: float (fast GEMM path) agrees with double") {
    const int B = 2, T = ATT_BLOCK + 9, C = 24, NH = 3;
    Rng rng(109);
    vec qkv = randn((size_t)B * T * 3 * C, rng), dout = randn((size_t)B * T * C, rng);
    std::vector<float> qkvf(qkv.begin(), qkv.end()), doutf(dout.begin(), dout.end());
    for (size_t i = 0; i < qkv.size(); i++) qkv[i] = qkvf[i];
    for (size_t i = 0; i < dout.size(); i++) dout[i] = doutf[i];
    vec out((size_t)B * T * C), att((size_t)B * NH * T * T), dqkv(qkv.size(), 0.0), scr(attention_scratch_size(B, T, C, NH));
    std::vector<float> outf(out.size()), attf(att.size()), dqkvf(qkv.size(), 0.0f), scrf(scr.size());
    attention_forward(out.data(), att.data(), nullptr, qkv.data(), B, T, C, NH);
    attention_forward(outf.data(), attf.data(), nullptr, qkvf.data(), B, T, C, NH);
    attention_backward(dqkv.data(), scr.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    attention_backward(dqkvf.data(), scrf.data(), doutf.data(), qkvf.data(), attf.data(), B, T, C, NH);
    double e_out = 0, e_att = 0, e_d = 0;
    for (size_t i = 0; i < out.size(); i++) e_out = std::max(e_out, std::fabs(outf[i] - out[i]));
    for (size_t i = 0; i < att.size(); i++) e_att = std::max(e_att, std::fabs(attf[i] - att[i]));
    for (size_t i = 0; i < dqkv.size(); i++) e_d = std::max(e_d, std::fabs(dqkvf[i] - dqkv[i]) / (1.0 + std::fabs(dqkv[i])));
    CHECK(e_out <= 1e-5);
    CHECK(e_att <= 1e-5);
    CHECK(e_d <= 1e-5);
}

TEST_CASE("crossentropy: gradient of logits (accumulating), masked rows, probabilities, huge logits") {
    const int N = 21, V = 11;
    Rng rng(110);
    vec logits = randn((size_t)N * V, rng, 2.0), w = randn(N, rng);
    std::vector<int> targets(N);
    for (auto& t : targets) t = (int)rng.below(V);
    targets[3] = -1;   // ignored row (negative target)
    targets[10] = -1;
    w[5] = 0.0;        // masked through its loss weight
    w[15] = 0.0;
    vec losses(N), probs((size_t)N * V);
    crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
    bool ok = true;
    for (int n = 0; n < N; n++) {
        double s = 0, lse = 0, mx = -INFINITY;
        for (int v = 0; v < V; v++) s += probs[(size_t)n * V + v], mx = std::max(mx, logits[(size_t)n * V + v]);
        for (int v = 0; v < V; v++) lse += std::exp(logits[(size_t)n * V + v] - mx);
        ok &= std::fabs(s - 1.0) <= 1e-14;
        const double ref = targets[n] < 0 ? 0.0 : std::log(lse) + mx - logits[(size_t)n * V + targets[n]];
        ok &= std::fabs(losses[n] - ref) <= 1e-13;
    }
    CHECK(ok);

    auto loss = [&] {
        vec l(N), p(probs.size());
        crossentropy_forward(l.data(), p.data(), logits.data(), targets.data(), N, V);
        return dot(l, w);
    };
    const vec P = randn(logits.size(), rng);
    vec dlogits = P;
    crossentropy_backward(dlogits.data(), w.data(), probs.data(), targets.data(), N, V);
    const vec g = minus(dlogits, P);
    check_gradient("logits", loss, logits.data(), logits.size(), g.data());
    for (int n : {3, 10, 5, 15}) {
        CAPTURE(n);
        bool zero = true;
        for (int v = 0; v < V; v++) zero &= g[(size_t)n * V + v] == 0.0;
        CHECK(zero);
    }
    // a negative target gets no gradient even when its weight is not zero
    vec w2 = w;
    w2[3] = 1.0;
    vec d2 = P;
    crossentropy_backward(d2.data(), w2.data(), probs.data(), targets.data(), N, V);
    CHECK(bit_equal(d2, dlogits));

    // huge logits (1e4): finite, exact log-sum-exp, in double and float
    const int Vh = 5;
    for (int trial = 0; trial < 2; trial++) {
        const double zr[Vh] = {1e4, 1e4 - 1.0, -1e4, 0.0, 1e4 - 3.0};
        const int tr[2] = {1, 2};
        vec z(zr, zr + Vh), p(Vh), l(1);
        std::vector<float> zf(zr, zr + Vh), pf(Vh), lf(1);
        crossentropy_forward(l.data(), p.data(), z.data(), &tr[trial], 1, Vh);
        crossentropy_forward(lf.data(), pf.data(), zf.data(), &tr[trial], 1, Vh);
        const double lse = std::log1p(std::exp(-1.0) + std::exp(-3.0));  // log Σ e^(z − 1e4)
        const double ref = trial == 0 ? 1.0 + lse : 2e4 + lse;
        CHECK(l[0] == doctest::Approx(ref).epsilon(1e-14));
        CHECK(lf[0] == doctest::Approx(ref).epsilon(1e-6));
        double s = 0, sf = 0;
        for (int v = 0; v < Vh; v++) s += p[v], sf += pf[v];
        CHECK(s == doctest::Approx(1.0).epsilon(1e-14));
        CHECK(sf == doctest::Approx(1.0).epsilon(1e-6));
        CHECK(p[2] == 0.0);
    }
}

TEST_CASE("mse: per-row mean squared error and gradient of pred (accumulating)") {
    const int N = 21, D = 5;
    Rng rng(111);
    vec pred = randn((size_t)N * D, rng), target = randn((size_t)N * D, rng), w = randn(N, rng), losses(N);
    mse_forward(losses.data(), pred.data(), target.data(), N, D);
    double s = 0;
    for (int d = 0; d < D; d++) s += (pred[4 * D + d] - target[4 * D + d]) * (pred[4 * D + d] - target[4 * D + d]);
    CHECK(losses[4] == doctest::Approx(s / D).epsilon(1e-14));
    auto loss = [&] {
        vec l(N);
        mse_forward(l.data(), pred.data(), target.data(), N, D);
        return dot(l, w);
    };
    const vec P = randn(pred.size(), rng);
    vec dpred = P;
    mse_backward(dpred.data(), w.data(), pred.data(), target.data(), N, D);
    const vec g = minus(dpred, P);
    check_gradient("pred", loss, pred.data(), pred.size(), g.data());
}

TEST_CASE("adamw: one and two steps by hand") {
    // p = 1, g = 0.5, lr = 0.1, β = (0.9, 0.999), eps = 1e-8, wd = 0.01, step 1:
    //   m = 0.05, v = 0.00025, m̂ = 0.5, v̂ = 0.25, p = 1 − 0.1·(0.5/(0.5 + 1e-8) + 0.01·1)
    vec p = {1.0, -2.0}, g = {0.5, 0.0}, m(2, 0.0), v(2, 0.0);
    adamw_update(p.data(), g.data(), m.data(), v.data(), 2, 0.1, 0.9, 0.999, 1e-8, 0.01, 1);
    CHECK(m[0] == doctest::Approx(0.05).epsilon(1e-15));
    CHECK(v[0] == doctest::Approx(0.00025).epsilon(1e-15));
    CHECK(p[0] == doctest::Approx(1.0 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.01)).epsilon(1e-15));
    CHECK(p[1] == doctest::Approx(-2.0 - 0.1 * 0.01 * -2.0).epsilon(1e-15));  // zero gradient: decay only
    // step 2 with g = −0.25
    const double p1 = p[0];
    g[0] = -0.25;
    adamw_update(p.data(), g.data(), m.data(), v.data(), 2, 0.1, 0.9, 0.999, 1e-8, 0.01, 2);
    const double m2 = 0.9 * 0.05 + 0.1 * -0.25, v2 = 0.999 * 0.00025 + 0.001 * 0.0625;
    const double mh = m2 / (1 - 0.81), vh = v2 / (1 - 0.998001);
    CHECK(p[0] == doctest::Approx(p1 - 0.1 * (mh / (std::sqrt(vh) + 1e-8) + 0.01 * p1)).epsilon(1e-14));
    // float agrees
    std::vector<float> pf = {1.0f}, gf = {0.5f}, mf = {0.0f}, vf = {0.0f};
    adamw_update(pf.data(), gf.data(), mf.data(), vf.data(), 1, 0.1, 0.9, 0.999, 1e-8, 0.01, 1);
    CHECK(pf[0] == doctest::Approx(0.899).epsilon(1e-6));
}

TEST_CASE("lr_schedule: warm-up then cosine to min") {
    const double mx = 1e-3, frac = 0.1;
    // the schedule is a few fp64 operations: relative 1e-12 (a bare Approx would be absolute 1.2e-5 here, 12% of 1e-4)
    auto Approx = [](double v) { return doctest::Approx(v).scale(0).epsilon(1e-12); };
    CHECK(lr_schedule(0, mx, 10, 100, frac) == Approx(1e-4));      // first warm-up step: max/warmup
    CHECK(lr_schedule(4, mx, 10, 100, frac) == Approx(5e-4));
    CHECK(lr_schedule(9, mx, 10, 100, frac) == Approx(mx));        // end of warm-up
    CHECK(lr_schedule(10, mx, 10, 100, frac) == Approx(mx));       // start of the decay
    CHECK(lr_schedule(55, mx, 10, 100, frac) == Approx(1e-4 + 0.5 * 9e-4));  // halfway: cos = 0
    CHECK(lr_schedule(100, mx, 10, 100, frac) == Approx(1e-4));    // the end: min_lr
    CHECK(lr_schedule(500, mx, 10, 100, frac) == Approx(1e-4));
    CHECK(lr_schedule(0, mx, 0, 100, frac) == Approx(mx));         // no warm-up
    bool monotone = true;
    for (int s = 10; s < 100; s++) monotone &= lr_schedule(s + 1, mx, 10, 100, frac) <= lr_schedule(s, mx, 10, 100, frac);
    CHECK(monotone);
}

TEST_CASE("grad_norm_squared, clip_factor and scale; the norm is thread-count independent") {
    const size_t n = 100003;
    std::vector<float> g(n);
    double ref = 0;
    for (size_t i = 0; i < n; i++) {
        g[i] = (float)(((i * 7919) % 1000) * 1e-3 - 0.5);
        ref += (double)g[i] * (double)g[i];
    }
    double n1, n2;
    {
        ThreadScope ts(1);
        n1 = grad_norm_squared(g.data(), n);
    }
    {
        ThreadScope ts(2);
        n2 = grad_norm_squared(g.data(), n);
    }
    CHECK(n1 == doctest::Approx(ref).epsilon(1e-12));
    CHECK(std::memcmp(&n1, &n2, sizeof(double)) == 0);
    const double norm = std::sqrt(n1);
    const double f = clip_factor(norm, 1.0);
    CHECK(f == doctest::Approx(1.0 / norm).scale(0).epsilon(1e-15));  // one fp64 division: to rounding
    scale(g.data(), n, f);
    CHECK(std::sqrt(grad_norm_squared(g.data(), n)) == doctest::Approx(1.0).epsilon(1e-6));
    CHECK(clip_factor(0.5, 1.0) == 1.0);
    CHECK(clip_factor(5.0, 0.0) == 1.0);  // clipping disabled
    CHECK(clip_factor(NAN, 1.0) == 1.0);
}

TEST_CASE("determinism: layernorm and embedding backward are bit-identical run to run and across thread counts") {
    const int N = 1034, C = 96, V = 37, T = 47, maxT = 64;  // N = 22·47; N·C above worth_parallel's threshold
    Rng rng(112);
    std::vector<float> inp(N * C), dout(N * C), w(C), b(C), wte(V * C), wpe(maxT * C);
    fill_normal(inp.data(), inp.size(), rng);
    fill_normal(dout.data(), dout.size(), rng);
    fill_normal(w.data(), w.size(), rng, 1.0, 0.2);
    fill_normal(b.data(), b.size(), rng);
    std::vector<int> tok(N);
    for (auto& t : tok) t = (int)rng.below(V);
    std::vector<float> out(N * C), mean(N), rstd(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);

    auto run_ln = [&](int threads) {
        ThreadScope ts(threads);
        std::vector<float> dinp(N * C, 0.1f), dw(C, 0.2f), db(C, 0.3f);
        layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                           rstd.data(), N, C);
        dinp.insert(dinp.end(), dw.begin(), dw.end());
        dinp.insert(dinp.end(), db.begin(), db.end());
        return dinp;
    };
    auto run_enc = [&](int threads) {
        ThreadScope ts(threads);
        std::vector<float> dwte(V * C, 0.1f), dwpe(maxT * C, 0.2f);
        encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), nullptr, N / T, T, C, V, maxT);
        dwte.insert(dwte.end(), dwpe.begin(), dwpe.end());
        return dwte;
    };
    const auto ln2a = run_ln(2), ln2b = run_ln(2), ln1 = run_ln(1);
    CHECK(bit_equal(ln2a, ln2b));
    CHECK(bit_equal(ln2a, ln1));
    const auto en2a = run_enc(2), en2b = run_enc(2), en1 = run_enc(1);
    CHECK(bit_equal(en2a, en2b));
    CHECK(bit_equal(en2a, en1));
}

TEST_CASE("fixed_sum: exact on integers; the order written in fixed_sum.h (8 running sums, a fixed tree), tails included") {
    for (size_t n : {0, 1, 7, 8, 9, 16, 23, 100}) {
        CAPTURE(n);
        CHECK(icl::fixed_sum<double>(n, [](size_t i) { return (double)(i + 1); }) == (double)(n * (n + 1) / 2));
    }
    // terms whose fp32 sum depends on the order: the result is that of the documented order, computed here by hand
    std::vector<float> t(21);
    icl::Rng r(3);
    for (auto& v : t) v = (float)(r.normal() * std::pow(10.0, (double)r.below(6)));
    float s[8] = {0};
    for (size_t i = 0; i < t.size(); i++) s[i % 8] += t[i];
    const float ref = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
    CHECK(icl::fixed_sum<float>(t.size(), [&](size_t i) { return t[i]; }) == ref);
}

}  // TEST_SUITE
