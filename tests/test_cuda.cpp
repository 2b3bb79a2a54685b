// The CUDA backend against the CPU reference (DESIGN.md "Tests": every CUDA kernel on fresh random inputs,
// outputs poisoned first), the whole GPT/CGT/kernel LM on both devices, checkpoints across devices — plus
// the device-comparison machinery itself (compare_devices.h, npydiff), which runs on the CPU.
//
// Without a GPU (or in a build without CUDA) every GPU test case is skipped (tests/skip.h): doctest counts it under
// "skipped", and tests/main.cpp says why. Run them on a GPU with `make test-cuda` (or build-cuda/test_icl -ts=cuda);
// ICL_EXPECT_GPU=1 makes a missing GPU a failure instead.
//
// How each kernel is checked: inputs are random (never zeros), rounded to float so both sides see the same
// numbers; the CPU reference runs the layer template in fp64 on them; the GPU runs the fp32 kernel through the
// same op:: dispatch the models use. Outputs that a kernel SETS start as NaN on the GPU (an element it forgets
// stays NaN and fails); gradients that a kernel ACCUMULATES into start from the same random values on both sides
// (so "=" instead of "+=" fails too). Backward passes get the CPU forward's saved tensors as inputs, so a
// backward error is not confused with a forward one.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/arith.h"
#include "engine/checkpoint.h"
#include "engine/compare.h"
#include "engine/device.h"
#include "engine/npy.h"
#include "engine/npy_compare.h"
#include "engine/rng.h"
#include "layers/dispatch.h"
#include "models/attn_mod.h"
#include "models/cgt/cgt.h"
#include "models/compare_devices.h"
#include "models/gpt.h"
#include "models/iclca/iclaa.h"
#include "models/iclca/iclca_convert.h"
#include "models/iclca/kernel_lm.h"
#include "models/tint/tint_oracle.h"
#include "models/tint/tint_sim.h"
#include "run_binary.h"
#include "skip.h"

using namespace icl;

namespace {

// ---- host data and device copies --------------------------------------------------------------------------

constexpr Device GPU = Device::cuda;
using Vec = std::vector<double>;

// n random values in [lo, hi), rounded through float (the GPU's inputs are exactly these numbers)
Vec rnd(size_t n, Rng& r, double lo = -1.0, double hi = 1.0) {
    Vec v(n);
    for (auto& x : v) x = (double)(float)r.uniform(lo, hi);
    return v;
}
Vec f32(const Vec& v) {  // round to float and back
    Vec r(v.size());
    for (size_t i = 0; i < v.size(); i++) r[i] = (double)(float)v[i];
    return r;
}
Buffer<float> up(const Vec& h) {
    std::vector<float> f(h.begin(), h.end());
    Buffer<float> b(GPU, std::max<size_t>(f.size(), 1));
    device_copy(GPU, b.ptr, f.data(), f.size() * sizeof(float), Copy::host_to_device);
    return b;
}
Buffer<int> up(const std::vector<int>& h) {
    Buffer<int> b(GPU, std::max<size_t>(h.size(), 1));
    device_copy(GPU, b.ptr, h.data(), h.size() * sizeof(int), Copy::host_to_device);
    return b;
}
Buffer<double> up64(const Vec& h) {  // doubles stay doubles (the few ops that take them: ICLAA, the streaming EMA)
    Buffer<double> b(GPU, std::max<size_t>(h.size(), 1));
    device_copy(GPU, b.ptr, h.data(), h.size() * sizeof(double), Copy::host_to_device);
    return b;
}
Vec down64(const Buffer<double>& b, size_t n) {
    Vec h(n);
    device_copy(GPU, h.data(), b.ptr, n * sizeof(double), Copy::device_to_host);
    return h;
}
Buffer<float> poisoned(size_t n) { return up(Vec(n, NAN)); }  // an output the kernel must overwrite entirely
Vec down(const Buffer<float>& b, size_t n) {
    std::vector<float> f(n);
    device_copy(GPU, f.data(), b.ptr, n * sizeof(float), Copy::device_to_host);
    return Vec(f.begin(), f.end());
}

// GPU result `got` against the fp64 reference `ref`, element by element (engine/compare.h's criterion).
// Default atol 1e-5, rtol 1e-4: an fp32 sum of K terms of size ~1 is off the fp64 one by at most ~K·2⁻²⁴ (6e-8·K)
// and in practice ~√K·6e-8, so 1e-4 relative holds for the K ≤ ~1000 (dot products, reductions) of these tests'
// sizes with room for the different summation order of the GPU kernels; atol covers outputs near 0 (cancellation).
// Measured on an H200 (2026-11-28, 72b8cd6; docs/gpu_tolerances.md): the worst check at this default reaches 0.151 of
// it (the softmax attention backward), most 0.001–0.05. ICL_TEST_LOG_ERRORS=1 prints every comparison's measured
// max |d| and max d/tol (tools/gpu_acceptance.sh sets it and tabulates them).
void check_close(const std::string& name, const Vec& ref, const Vec& got, double atol = 1e-5, double rtol = 1e-4) {
    REQUIRE(ref.size() == got.size());
    TensorDiff d = compare_tensor(name, "", Shape{(int64_t)ref.size()}, ref.data(), got.data(), atol, rtol);
    static const bool log_errors = std::getenv("ICL_TEST_LOG_ERRORS") && std::string(std::getenv("ICL_TEST_LOG_ERRORS")) == "1";
    if (log_errors) MESSAGE("gpu-error\t" << name << "\t" << d.max_abs << "\t" << d.max_scaled << "\t" << atol << "\t" << rtol);
    INFO(name << ": max |d| = " << d.max_abs << ", max d/tol = " << d.max_scaled << ", non-finite = " << d.nonfinite << ", worst at "
              << d.worst << " (ref " << d.worst_ref << ", got " << d.worst_got << ")");
    CHECK(d.pass);
}

// ---- binaries (for the gradcheck/npydiff command-line tests): tests/run_binary.h ----------------------------

using icl_test::bin_dir;
using Run = icl_test::Result;
Run run_bin(const std::string& args) { return icl_test::run(args); }


// The same parameters in an fp64 CPU model and an fp32 GPU model: N(0, std²) (+1 on the gains), rounded to float
// for both, so that only the arithmetic differs. `fix` may adjust the host values first (e.g. positive b_D).
template <typename RefModel, typename GpuModel>
void same_params(RefModel& ref, GpuModel& gpu, uint64_t seed, double std, const std::function<void(const TensorSpec&, double*)>& fix = {}) {
    ref.s.randomize_params(seed, std);
    std::vector<double> p = ref.s.to_host(ref.s.params, 0, ref.s.ptable.total);
    if (fix)
        for (size_t i = 0; i < ref.s.ptable.size(); i++) fix(ref.s.ptable.specs[i], p.data() + ref.s.ptable.offsets[i]);
    const std::vector<float> pf(p.begin(), p.end());
    p.assign(pf.begin(), pf.end());
    ref.s.upload(ref.s.params, 0, p.data(), p.size());
    REQUIRE(gpu.s.ptable.total == ref.s.ptable.total);
    gpu.s.upload(gpu.s.params, 0, pf.data(), pf.size());
}

// A (B,T) window of arithmetic sequences with a non-uniform mask (zeros included).
Batch arith_window(int B, int T, uint64_t seed) {
    Rng rng(seed);
    Batch full = arith_batch(ArithConfig{}, B, rng), bt;
    bt.B = B;
    bt.T = T;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            bt.tokens.push_back(full.tokens[(size_t)b * full.T + t]);
            bt.targets.push_back(full.targets[(size_t)b * full.T + t]);
            bt.mask.push_back(t % 5 == 4 ? 0.0f : 1.0f + 0.5f * (float)((b + t) % 3));
        }
    return bt;
}

// The random parameters' scale for width C: 0.3 at C = 12, shrinking as 1/√C (gradcheck --devices's choice).
double param_std(int C) { return 0.3 * std::sqrt(12.0 / std::max(C, 12)); }

// Every row of a device comparison within tolerance (the table is printed on failure).
void check_rows(const std::vector<TensorDiff>& rows, double atol, double rtol) {
    int failed = 0;
    for (auto& r : rows) failed += !r.pass;
    if (failed) print_diff_table(stdout, "failing comparison", rows, atol, rtol);
    CHECK(failed == 0);
    CHECK(rows.size() > 3);
}

}  // namespace

TEST_SUITE("cuda") {

// ================================ per-kernel checks (need a GPU) ================================

TEST_CASE("cuda kernels: encoder and vector embedding, forward and backward" * GPU_CASE) {
    REQUIRE_GPU();
    const int B = 3, T = 37, C = 45, V = 29, maxT = 50, D = 7;
    const int N = B * T;
    Rng r(101);
    std::vector<int> tok(N), pos(N);
    for (int n = 0; n < N; n++) { tok[n] = (int)r.below(V); pos[n] = (int)r.below(maxT); }
    const Vec wte = rnd((size_t)V * C, r), wpe = rnd((size_t)maxT * C, r), dout = rnd((size_t)N * C, r);
    const Vec x = rnd((size_t)N * D, r);
    auto dtok = up(tok), dpos = up(pos);
    auto dwte_ = up(wte), dwpe_ = up(wpe), ddout = up(dout), dx = up(x);
    for (int explicit_pos = 0; explicit_pos < 2; explicit_pos++) {
        CAPTURE(explicit_pos);
        const int* hp = explicit_pos ? pos.data() : nullptr;
        const int* gp = explicit_pos ? dpos.ptr : nullptr;
        // forward
        Vec out((size_t)N * C);
        icl::encoder_forward(out.data(), tok.data(), hp, wte.data(), wpe.data(), B, T, C, V, maxT);
        auto gout = poisoned((size_t)N * C);
        op::encoder_forward(GPU, gout.ptr, dtok.ptr, gp, dwte_.ptr, dwpe_.ptr, B, T, C, V, maxT);
        check_close("encoder_forward out", out, down(gout, out.size()));
        // backward: accumulates into random tables
        Vec g_wte = rnd(wte.size(), r), g_wpe = rnd(wpe.size(), r);
        auto gg_wte = up(g_wte), gg_wpe = up(g_wpe);
        icl::encoder_backward(g_wte.data(), g_wpe.data(), dout.data(), tok.data(), hp, B, T, C, V, maxT);
        op::encoder_backward(GPU, gg_wte.ptr, gg_wpe.ptr, ddout.ptr, dtok.ptr, gp, B, T, C, V, maxT);
        check_close("encoder_backward dwte", g_wte, down(gg_wte, g_wte.size()));
        check_close("encoder_backward dwpe", g_wpe, down(gg_wpe, g_wpe.size()));
        // vector inputs
        icl::vector_embed_forward(out.data(), x.data(), hp, wpe.data(), B, T, C, D, maxT);
        auto vout = poisoned((size_t)N * C);
        op::vector_embed_forward(GPU, vout.ptr, dx.ptr, gp, dwpe_.ptr, B, T, C, D, maxT);
        check_close("vector_embed_forward out", out, down(vout, out.size()));
        Vec g2 = rnd(wpe.size(), r);
        auto gg2 = up(g2);
        icl::vector_embed_backward(g2.data(), dout.data(), hp, B, T, C, maxT);
        op::vector_embed_backward(GPU, gg2.ptr, ddout.ptr, gp, B, T, C, maxT);
        check_close("vector_embed_backward dwpe", g2, down(gg2, g2.size()));
    }
    // The scatter-adds sum each table row's contributions in increasing n, like the CPU: the GPU's fp32 result is the
    // CPU's fp32 result bit for bit, and the same on every run. N = 2100 rows over 3 tiles of the chain search, 29
    // tokens (chains of ~70 rows) and positions drawn from 50.
    {
        const int B2 = 3, T2 = 700, N2 = B2 * T2, maxT2 = 800;
        std::vector<int> tok2(N2), pos2(N2);
        for (int n = 0; n < N2; n++) { tok2[n] = (int)r.below(V); pos2[n] = (int)r.below(50); }
        const Vec dout2 = rnd((size_t)N2 * C, r), t0 = rnd((size_t)V * C, r), p0 = rnd((size_t)maxT2 * C, r);
        std::vector<float> dout2f(dout2.begin(), dout2.end());
        auto dtok2 = up(tok2), dpos2 = up(pos2);
        auto ddout2 = up(dout2);
        for (int explicit_pos = 0; explicit_pos < 2; explicit_pos++) {
            CAPTURE(explicit_pos);
            std::vector<float> wt(t0.begin(), t0.end()), wp(p0.begin(), p0.end());
            icl::encoder_backward(wt.data(), wp.data(), dout2f.data(), tok2.data(), explicit_pos ? pos2.data() : nullptr, B2, T2, C, V, maxT2);
            for (int run = 0; run < 2; run++) {
                CAPTURE(run);
                auto gt = up(t0), gpp = up(p0);
                op::encoder_backward(GPU, gt.ptr, gpp.ptr, ddout2.ptr, dtok2.ptr, explicit_pos ? dpos2.ptr : nullptr, B2, T2, C, V, maxT2);
                const Vec got_t = down(gt, wt.size()), got_p = down(gpp, wp.size());
                size_t bad_t = 0, bad_p = 0;
                for (size_t i = 0; i < wt.size(); i++) bad_t += (float)got_t[i] != wt[i];
                for (size_t i = 0; i < wp.size(); i++) bad_p += (float)got_p[i] != wp[i];
                CHECK(bad_t == 0);
                CHECK(bad_p == 0);
            }
        }
    }
}

TEST_CASE("cuda kernels: matmul (cuBLAS, TF32 off) forward and backward" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    const int N = 37, C = 45, OC = 29;
    Rng r(202);
    const Vec inp = rnd((size_t)N * C, r), w = rnd((size_t)OC * C, r), bias = rnd(OC, r), dout = rnd((size_t)N * OC, r);
    auto ginp = up(inp), gw = up(w), gb = up(bias), gdout = up(dout);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        CAPTURE(with_bias);
        Vec out((size_t)N * OC);
        icl::matmul_forward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, C, OC);
        auto gout = poisoned(out.size());
        op::matmul_forward(GPU, gout.ptr, ginp.ptr, gw.ptr, with_bias ? gb.ptr : nullptr, N, C, OC);
        check_close("matmul_forward out", out, down(gout, out.size()));
    }
    Vec dinp = rnd(inp.size(), r), dw = rnd(w.size(), r), db = rnd(bias.size(), r);
    auto gdinp = up(dinp), gdw = up(dw), gdb = up(db);
    icl::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    op::matmul_backward(GPU, gdinp.ptr, gdw.ptr, gdb.ptr, gdout.ptr, ginp.ptr, gw.ptr, N, C, OC);
    check_close("matmul_backward dinp", dinp, down(gdinp, dinp.size()));
    check_close("matmul_backward dweight", dw, down(gdw, dw.size()));
    check_close("matmul_backward dbias", db, down(gdb, db.size()));
    // nullptr gradients are skipped (only dweight here)
    Vec dw2 = rnd(w.size(), r);
    auto gdw2 = up(dw2);
    icl::matmul_backward<double>(nullptr, dw2.data(), nullptr, dout.data(), inp.data(), w.data(), N, C, OC);
    op::matmul_backward<float>(GPU, nullptr, gdw2.ptr, nullptr, gdout.ptr, ginp.ptr, gw.ptr, N, C, OC);
    check_close("matmul_backward dweight only", dw2, down(gdw2, dw2.size()));
}

TEST_CASE("cuda kernels: GradWrite::set (matmul dinp, GELU, ReLU, O(T) attention dqkv) overwrites a NaN-filled gradient with the CPU's value" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    Rng r(909);
    {
        const int N = 37, C = 45, OC = 29;
        const Vec inp = rnd((size_t)N * C, r), w = rnd((size_t)OC * C, r), dout = rnd((size_t)N * OC, r);
        auto ginp = up(inp), gw = up(w), gdout = up(dout);
        Vec dinp(inp.size(), NAN);
        icl::matmul_backward<double>(dinp.data(), nullptr, nullptr, dout.data(), inp.data(), w.data(), N, C, OC, GradWrite::set);
        auto gdinp = poisoned(dinp.size());
        op::matmul_backward<float>(GPU, gdinp.ptr, nullptr, nullptr, gdout.ptr, ginp.ptr, gw.ptr, N, C, OC, GradWrite::set);
        check_close("matmul_backward dinp (set)", dinp, down(gdinp, dinp.size()));
    }
    {
        const int64_t n = 3001;
        const Vec x = rnd(n, r, -4, 4), dout = rnd(n, r);
        auto gx = up(x), gdout = up(dout);
        Vec dg(n, NAN), dr(n, NAN);
        icl::gelu_backward(dg.data(), x.data(), dout.data(), (size_t)n, GradWrite::set);
        icl::relu_backward(dr.data(), x.data(), dout.data(), (size_t)n, GradWrite::set);
        auto gdg = poisoned(n), gdr = poisoned(n);
        op::gelu_backward<float>(GPU, gdg.ptr, gx.ptr, gdout.ptr, n, GradWrite::set);
        op::relu_backward<float>(GPU, gdr.ptr, gx.ptr, gdout.ptr, n, GradWrite::set);
        check_close("gelu_backward (set)", dg, down(gdg, n));
        check_close("relu_backward (set)", dr, down(gdr, n));
    }
    {
        const int B = 2, T = 70, C = 48, NH = 3;
        const Vec qkv = rnd((size_t)B * T * 3 * C, r, -1.5, 1.5), dout = rnd((size_t)B * T * C, r);
        Vec out((size_t)B * T * C), lse((size_t)B * NH * T), scratch(attention_lse_scratch_size(B, T, NH));
        icl::attention_forward_lse(out.data(), lse.data(), scratch.data(), qkv.data(), B, T, C, NH);
        const Vec lse32 = f32(lse), out32 = f32(out);
        Vec dqkv(qkv.size(), NAN);
        icl::attention_backward_lse(dqkv.data(), scratch.data(), dout.data(), out32.data(), qkv.data(), lse32.data(), B, T, C, NH,
                                    nullptr, GradWrite::set);
        auto gqkv = up(qkv), gdout = up(dout), gout = up(out32), glse = up(lse32);
        auto gdqkv = poisoned(dqkv.size());
        op::attention_backward_lse<float>(GPU, gdqkv.ptr, nullptr, gdout.ptr, gout.ptr, gqkv.ptr, glse.ptr, B, T, C, NH, nullptr,
                                          GradWrite::set);
        check_close("attention_backward_lse dqkv (set)", dqkv, down(gdqkv, dqkv.size()));
    }
}

TEST_CASE("cuda kernels: layernorm forward and backward" * GPU_CASE) {
    REQUIRE_GPU();
    const int N = 37, C = 77;
    Rng r(303);
    Vec inp = rnd((size_t)N * C, r, -2, 3);  // a non-zero mean per row
    const Vec w = rnd(C, r, 0.5, 1.5), b = rnd(C, r), dout = rnd((size_t)N * C, r);
    Vec out((size_t)N * C), mean(N), rstd(N);
    icl::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    auto ginp = up(inp), gw = up(w), gb = up(b), gdout = up(dout);
    auto gout = poisoned(out.size()), gmean = poisoned(N), grstd = poisoned(N);
    op::layernorm_forward(GPU, gout.ptr, gmean.ptr, grstd.ptr, ginp.ptr, gw.ptr, gb.ptr, N, C);
    check_close("layernorm_forward out", out, down(gout, out.size()));
    check_close("layernorm_forward mean", mean, down(gmean, N));
    check_close("layernorm_forward rstd", rstd, down(grstd, N));
    // backward from the CPU's saved mean/rstd (rounded to float)
    const Vec mean32 = f32(mean), rstd32 = f32(rstd);
    auto smean = up(mean32), srstd = up(rstd32);
    Vec dinp = rnd(inp.size(), r), dw = rnd(C, r), db = rnd(C, r);
    auto gdinp = up(dinp), gdw = up(dw), gdb = up(db);
    icl::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean32.data(), rstd32.data(), N, C);
    op::layernorm_backward(GPU, gdinp.ptr, gdw.ptr, gdb.ptr, gdout.ptr, ginp.ptr, gw.ptr, smean.ptr, srstd.ptr, N, C);
    check_close("layernorm_backward dinp", dinp, down(gdinp, dinp.size()));
    check_close("layernorm_backward dweight", dw, down(gdw, C));
    check_close("layernorm_backward dbias", db, down(gdb, C));
}

TEST_CASE("cuda kernels: GELU, ReLU and residual, forward and backward" * GPU_CASE) {
    REQUIRE_GPU();
    const int64_t n = 3001;
    Rng r(404);
    const Vec x = rnd(n, r, -4, 4), y = rnd(n, r), dout = rnd(n, r);
    auto gx = up(x), gy = up(y), gdout = up(dout);
    Vec out(n);
    icl::gelu_forward(out.data(), x.data(), (size_t)n);
    auto gout = poisoned(n);
    op::gelu_forward(GPU, gout.ptr, gx.ptr, n);
    check_close("gelu_forward", out, down(gout, n));
    Vec dinp = rnd(n, r);
    auto gdinp = up(dinp);
    icl::gelu_backward(dinp.data(), x.data(), dout.data(), (size_t)n);
    op::gelu_backward(GPU, gdinp.ptr, gx.ptr, gdout.ptr, n);
    check_close("gelu_backward", dinp, down(gdinp, n));
    icl::relu_forward(out.data(), x.data(), (size_t)n);
    auto rlout = poisoned(n);
    op::relu_forward(GPU, rlout.ptr, gx.ptr, n);
    check_close("relu_forward", out, down(rlout, n), 0, 0);
    Vec drl = rnd(n, r);
    auto gdrl = up(drl);
    icl::relu_backward(drl.data(), x.data(), dout.data(), (size_t)n);
    op::relu_backward(GPU, gdrl.ptr, gx.ptr, gdout.ptr, n);
    check_close("relu_backward", drl, down(gdrl, n));  // the += rounds in float
    icl::residual_forward(out.data(), x.data(), y.data(), (size_t)n);
    auto rout = poisoned(n);
    op::residual_forward(GPU, rout.ptr, gx.ptr, gy.ptr, n);
    check_close("residual_forward", out, down(rout, n));
    Vec d1 = rnd(n, r), d2 = rnd(n, r);
    auto g1 = up(d1), g2 = up(d2);
    icl::residual_backward(d1.data(), d2.data(), dout.data(), (size_t)n);
    op::residual_backward(GPU, g1.ptr, g2.ptr, gdout.ptr, n);
    check_close("residual_backward dinp1", d1, down(g1, n));
    check_close("residual_backward dinp2", d2, down(g2, n));
}

// Causal softmax attention on one shape, CPU fp64 vs GPU fp32 from the same float inputs: the plain form (the
// (B,NH,T,T) probabilities saved), forward and backward, then the forward with a key start per sequence (the CGT's
// masked aux pass: rows before it attend to themselves).
void check_plain_attention(int B, int T, int C, int NH) {
    CAPTURE(T);
    Rng r(505 + T);
    const Vec qkv = rnd((size_t)B * T * 3 * C, r, -1.5, 1.5), dout = rnd((size_t)B * T * C, r);
    Vec out((size_t)B * T * C), att((size_t)B * NH * T * T);
    Vec scratch(attention_scratch_size(B, T, C, NH));
    icl::attention_forward(out.data(), att.data(), scratch.data(), qkv.data(), B, T, C, NH);
    auto gqkv = up(qkv), gdout = up(dout);
    auto gout = poisoned(out.size()), gatt = poisoned(att.size());
    op::attention_forward<float>(GPU, gout.ptr, gatt.ptr, nullptr, gqkv.ptr, B, T, C, NH);
    check_close("attention_forward out", out, down(gout, out.size()));
    check_close("attention_forward att (zeros above the diagonal)", att, down(gatt, att.size()));
    const Vec att32 = f32(att);
    auto satt = up(att32);
    Vec dqkv = rnd(qkv.size(), r);
    auto gdqkv = up(dqkv);
    icl::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att32.data(), B, T, C, NH);
    op::attention_backward<float>(GPU, gdqkv.ptr, nullptr, gdout.ptr, gqkv.ptr, satt.ptr, B, T, C, NH);
    check_close("attention_backward dqkv", dqkv, down(gdqkv, dqkv.size()));
    std::vector<int> ks(B);
    for (int b = 0; b < B; b++) ks[b] = (b * 7 + 3) % T;
    icl::attention_forward(out.data(), att.data(), scratch.data(), qkv.data(), B, T, C, NH, ks.data());
    auto gks = up(ks);
    op::attention_forward<float>(GPU, gout.ptr, gatt.ptr, nullptr, gqkv.ptr, B, T, C, NH, gks.ptr);
    check_close("attention_forward out (key start)", out, down(gout, out.size()));
    check_close("attention_forward att (key start)", att, down(gatt, att.size()));
}

// The same for the O(T) form (only the row log-sum-exp saved, the probabilities recomputed), without and with key
// starts, through cuBLAS and through the fused online-softmax kernels (cuda/attention_fused.cu).
void check_lse_attention(int B, int T, int C, int NH) {
    std::vector<int> ks(B);
    for (int b = 0; b < B; b++) ks[b] = (b * 7 + 3) % T;
    auto gks = up(ks);
    for (int variant = 0; variant < 4; variant++) {
        const bool with_ks = variant % 2 == 1, fused = variant >= 2;
        set_fused_attention(fused);
        CAPTURE(T);
        CAPTURE(with_ks);
        CAPTURE(fused);
        Rng r(606 + T);
        const Vec qkv = rnd((size_t)B * T * 3 * C, r, -1.5, 1.5), dout = rnd((size_t)B * T * C, r);
        Vec out((size_t)B * T * C), lse((size_t)B * NH * T), scratch(attention_lse_scratch_size(B, T, NH));
        const int* kc = with_ks ? ks.data() : nullptr;
        const int* kg = with_ks ? gks.ptr : nullptr;
        icl::attention_forward_lse(out.data(), lse.data(), scratch.data(), qkv.data(), B, T, C, NH, kc);
        auto gqkv = up(qkv), gdout = up(dout);
        auto gout = poisoned(out.size()), glse = poisoned(lse.size());
        op::attention_forward_lse<float>(GPU, gout.ptr, glse.ptr, nullptr, gqkv.ptr, B, T, C, NH, kg);
        check_close("attention_forward_lse out", out, down(gout, out.size()));
        check_close("attention_forward_lse lse", lse, down(glse, lse.size()));
        // backward from the CPU's lse; accumulates into random dqkv
        const Vec lse32 = f32(lse);
        auto slse = up(lse32);
        Vec dqkv = rnd(qkv.size(), r);
        auto gdqkv = up(dqkv);
        icl::attention_backward_lse(dqkv.data(), scratch.data(), dout.data(), out.data(), qkv.data(), lse32.data(), B, T, C, NH, kc);
        op::attention_backward_lse<float>(GPU, gdqkv.ptr, nullptr, gdout.ptr, gout.ptr, gqkv.ptr, slse.ptr, B, T, C, NH, kg);
        check_close("attention_backward_lse dqkv", dqkv, down(gdqkv, dqkv.size()));
    }
    set_fused_attention(false);
}

TEST_CASE("cuda kernels: causal softmax attention forward and backward" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    check_plain_attention(2, 37, 48, 3);
    check_plain_attention(3, 70, 40, 2);
    check_plain_attention(1, 5, 12, 4);
}

TEST_CASE("cuda kernels: causal softmax attention, O(T) form (lse saved, probabilities recomputed), forward and backward, key starts" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    check_lse_attention(2, 37, 48, 3);
    check_lse_attention(3, 70, 40, 2);
    check_lse_attention(1, 5, 12, 4);
}

// NH·T² = 2^26 floats per batch row: the plain backward goes in groups of G = 2^28 / 2^26 = 4 batch rows (4 + 1), the
// O(T) form's forward in groups of 4 and its backward of 2 (2 + 2 + 1) — the group loops of cuda/attention.cu. (Not in
// the sanitizer's subset: the fp64 reference alone takes a while at T = 2048. Host memory: ~10 GB at the peak, the fp64
// probabilities and their copies — fine on the lent GPU machine's 128 GiB.)
TEST_CASE("cuda kernels: attention over several batch groups (B·NH·T² past one 1 GiB group), both forms" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    check_plain_attention(5, 2048, 32, 16);
    check_lse_attention(5, 2048, 32, 16);
}

TEST_CASE("cuda kernels: backward with null gradients (layernorm: each one alone; residual and concat: one side; generator: no dy)" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    Rng r(1212);
    // layernorm: only dinp, only dweight, only dbias
    const int N = 29, C = 40;
    const Vec inp = rnd((size_t)N * C, r, -2, 3), w = rnd(C, r, 0.5, 1.5), b = rnd(C, r), dout = rnd((size_t)N * C, r);
    Vec out((size_t)N * C), mean(N), rstd(N);
    icl::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    const Vec mean32 = f32(mean), rstd32 = f32(rstd);
    auto ginp = up(inp), gw = up(w), gdout = up(dout), smean = up(mean32), srstd = up(rstd32);
    for (int which = 0; which < 3; which++) {
        CAPTURE(which);
        Vec g = rnd(which == 0 ? inp.size() : (size_t)C, r);
        auto gg = up(g);
        double* h[3] = {nullptr, nullptr, nullptr};
        float* d[3] = {nullptr, nullptr, nullptr};
        h[which] = g.data();
        d[which] = gg.ptr;
        icl::layernorm_backward(h[0], h[1], h[2], dout.data(), inp.data(), w.data(), mean32.data(), rstd32.data(), N, C);
        op::layernorm_backward<float>(GPU, d[0], d[1], d[2], gdout.ptr, ginp.ptr, gw.ptr, smean.ptr, srstd.ptr, N, C);
        check_close("layernorm_backward, one gradient", g, down(gg, g.size()));
    }
    // residual and concat: one side only
    const int64_t n = 1001;
    const Vec rd = rnd(n, r);
    auto grd = up(rd);
    for (int side = 0; side < 2; side++) {
        CAPTURE(side);
        Vec g = rnd(n, r);
        auto gg = up(g);
        icl::residual_backward(side == 0 ? g.data() : nullptr, side == 1 ? g.data() : nullptr, rd.data(), (size_t)n);
        op::residual_backward<float>(GPU, side == 0 ? gg.ptr : nullptr, side == 1 ? gg.ptr : nullptr, grd.ptr, n);
        check_close("residual_backward, one side", g, down(gg, n));
        const int Ca = 11, Cb = 6, Nc = 31;
        const Vec dcat = rnd((size_t)Nc * (Ca + Cb), r);
        auto gdcat = up(dcat);
        Vec gc = rnd((size_t)Nc * (side == 0 ? Ca : Cb), r);
        auto ggc = up(gc);
        icl::concat_backward(side == 0 ? gc.data() : nullptr, side == 1 ? gc.data() : nullptr, dcat.data(), Nc, Ca, Cb);
        op::concat_backward<float>(GPU, side == 0 ? ggc.ptr : nullptr, side == 1 ? ggc.ptr : nullptr, gdcat.ptr, Nc, Ca, Cb);
        check_close("concat_backward, one side", gc, down(ggc, gc.size()));
    }
    // generator without dy (a frozen ỹ)
    const int Ng = 23, Cg = 20, Dy = 6, M = 3, rk = 2, Mr = M * rk;
    for (MixFn h : {MixFn::tanh, MixFn::softmax}) {
        CAPTURE((int)h);
        const Vec u = rnd((size_t)Ng * Cg, r), y = rnd((size_t)Ng * Dy, r), S = rnd((size_t)M * (Dy + 1), r), Lw = rnd((size_t)Cg * Mr, r),
                  Rw = rnd((size_t)(Cg + 1) * Mr, r), dg = rnd((size_t)Ng * Cg, r);
        Vec go((size_t)Ng * Cg), c((size_t)Ng * M), P((size_t)Ng * Mr), z((size_t)Ng * rk), G((size_t)Ng * Mr);
        icl::generator_forward(go.data(), c.data(), P.data(), z.data(), G.data(), u.data(), y.data(), S.data(), Lw.data(), Rw.data(), Ng, Cg, Dy, M,
                               rk, h);
        const Vec c32 = f32(c), P32 = f32(P), z32 = f32(z), G32 = f32(G);
        auto gu = up(u), gy = up(y), gS = up(S), gL = up(Lw), gR = up(Rw), gdg = up(dg), sc = up(c32), sP = up(P32), sz = up(z32), sG = up(G32);
        Vec du = rnd(u.size(), r), dS = rnd(S.size(), r), dL = rnd(Lw.size(), r), dR = rnd(Rw.size(), r);
        auto gdu = up(du), gdS = up(dS), gdL = up(dL), gdR = up(dR);
        Vec scratch(generator_scratch_size(Ng, M, rk));
        auto gscratch = poisoned(scratch.size());
        icl::generator_backward(du.data(), (double*)nullptr, dS.data(), dL.data(), dR.data(), scratch.data(), dg.data(), u.data(), y.data(),
                                c32.data(), P32.data(), z32.data(), G32.data(), S.data(), Lw.data(), Rw.data(), Ng, Cg, Dy, M, rk, h);
        op::generator_backward<float>(GPU, gdu.ptr, nullptr, gdS.ptr, gdL.ptr, gdR.ptr, gscratch.ptr, gdg.ptr, gu.ptr, gy.ptr, sc.ptr, sP.ptr, sz.ptr,
                                      sG.ptr, gS.ptr, gL.ptr, gR.ptr, Ng, Cg, Dy, M, rk, h);
        check_close("generator du (no dy)", du, down(gdu, du.size()));
        check_close("generator dS (no dy)", dS, down(gdS, dS.size()));
        check_close("generator dL (no dy)", dL, down(gdL, dL.size()));
        check_close("generator dR (no dy)", dR, down(gdR, dR.size()));
    }
}

// ‖got − ref‖ / ‖ref‖ over all elements
double rel_norm_err(const Vec& ref, const Vec& got) {
    double d = 0, n = 0;
    for (size_t i = 0; i < ref.size(); i++) { d += (got[i] - ref[i]) * (got[i] - ref[i]); n += ref[i] * ref[i]; }
    return std::sqrt(d / n);
}

// --tf32 applies to every product, operands 16-byte aligned or not (cuBLAS handles both): the arithmetic task's odd
// T = 243, a head size of 6, and an LM-head-like product with an odd number of columns (GPT-2's V = 50257) — each
// against the fp64 CPU result, within TF32's rounding. TF32 keeps 10 mantissa bits (unit roundoff 2^-11 ≈ 4.9e-4);
// a product of K random terms lands near that in relative norm. The bound, 2e-3, is that rounding bound; measured on
// an H200 (2026-11-28): 2.8e-4 (T = 243), 2.6e-4 (the LM head), and ~1e-7 at head size 6 (cuBLAS kept fp32 there).
TEST_CASE("cuda kernels: --tf32 on operands that are not 16-byte aligned (odd T, head size 6, an odd-width LM head) stays within TF32 rounding" * GPU_CASE) {
    REQUIRE_GPU();
    struct Shape4 { int B, T, C, NH; };
    for (Shape4 s : {Shape4{2, 243, 48, 3}, Shape4{2, 64, 30, 5}}) {  // T odd (the arith task's 243); hs = 6
        const int B = s.B, T = s.T, C = s.C, NH = s.NH;
        CAPTURE(T);
        CAPTURE(C);
        Rng r(707 + T);
        const Vec qkv = rnd((size_t)B * T * 3 * C, r, -1.5, 1.5), dout = rnd((size_t)B * T * C, r);
        Vec out((size_t)B * T * C), lse((size_t)B * NH * T), scratch(attention_lse_scratch_size(B, T, NH)), dqkv(qkv.size(), 0.0);
        icl::attention_forward_lse(out.data(), lse.data(), scratch.data(), qkv.data(), B, T, C, NH);
        icl::attention_backward_lse(dqkv.data(), scratch.data(), dout.data(), out.data(), qkv.data(), lse.data(), B, T, C, NH);
        auto gqkv = up(qkv), gdout = up(dout);
        set_tf32(true);
        auto gout = poisoned((size_t)B * T * C), glse = poisoned((size_t)B * NH * T), gd = up(Vec(qkv.size(), 0.0));
        op::attention_forward_lse<float>(GPU, gout.ptr, glse.ptr, nullptr, gqkv.ptr, B, T, C, NH);
        op::attention_backward_lse<float>(GPU, gd.ptr, nullptr, gdout.ptr, gout.ptr, gqkv.ptr, glse.ptr, B, T, C, NH);
        set_tf32(false);
        const double e_out = rel_norm_err(out, down(gout, out.size())), e_d = rel_norm_err(dqkv, down(gd, dqkv.size()));
        MESSAGE("tf32 attention T=" << T << " C=" << C << ": out rel. error " << e_out << ", dqkv " << e_d);
        CHECK(e_out < 2e-3);
        CHECK(e_d < 2e-3);
        // and the tensor cores were used (plain fp32 lands near 1e-7): at T = 243 (measured 2.8e-4 on an H200); at head
        // size 6 cuBLAS kept fp32 there (measured 1e-7), which is its choice, not checked
        if (T == 243) CHECK(e_out > 1e-5);
    }
    // an LM-head-like product: logits (N, V) = x (N, C) · wteᵀ with V odd, and its backward
    const int N = 96, C = 64, V = 1001;
    Rng r(808);
    const Vec x = rnd((size_t)N * C, r), w = rnd((size_t)V * C, r), dout = rnd((size_t)N * V, r);
    Vec out((size_t)N * V), dx(x.size(), 0.0), dw(w.size(), 0.0);
    icl::matmul_forward(out.data(), x.data(), w.data(), (const double*)nullptr, N, C, V);
    icl::matmul_backward(dx.data(), dw.data(), (double*)nullptr, dout.data(), x.data(), w.data(), N, C, V);
    auto gx = up(x), gw = up(w), gdout = up(dout), gout = poisoned(out.size()), gdx = up(Vec(x.size(), 0.0)), gdw = up(Vec(w.size(), 0.0));
    set_tf32(true);
    op::matmul_forward<float>(GPU, gout.ptr, gx.ptr, gw.ptr, nullptr, N, C, V);
    op::matmul_backward<float>(GPU, gdx.ptr, gdw.ptr, nullptr, gdout.ptr, gx.ptr, gw.ptr, N, C, V);
    set_tf32(false);
    const double e_out = rel_norm_err(out, down(gout, out.size())), e_dx = rel_norm_err(dx, down(gdx, dx.size())),
                 e_dw = rel_norm_err(dw, down(gdw, dw.size()));
    MESSAGE("tf32 LM head V=" << V << ": logits rel. error " << e_out << ", dx " << e_dx << ", dwte " << e_dw);
    CHECK(e_out < 2e-3);
    CHECK(e_dx < 2e-3);
    CHECK(e_dw < 2e-3);
    CHECK(e_out > 1e-5);  // TF32 was used for the odd-width product (measured 2.6e-4; plain fp32 ~1e-7)
}

TEST_CASE("cuda kernels: attention modifications (regularized, negative all / lowsim / random), forward and backward (I19)" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    // every variant of spec/duallens.md §4 the layer has, including k >= T (the whole window) and α with β
    struct V { const char* name; AttnMods m; };
    std::vector<V> vs;
    AttnMods m;
    m.alpha = 0.3;
    vs.push_back({"regularized a=0.3", m});
    m = AttnMods();
    m.beta = 0.7;
    m.rule = NegRule::all;
    vs.push_back({"negative all b=0.7", m});
    m.rule = NegRule::lowsim;
    m.sim = NegSim::key;
    m.k = 3;
    vs.push_back({"negative lowsim-3 key", m});
    m.sim = NegSim::score;
    m.k = 2;
    vs.push_back({"negative lowsim-2 score", m});
    m.sim = NegSim::input;
    m.k = 4;
    vs.push_back({"negative lowsim-4 input", m});
    m.sim = NegSim::key;
    m.k = 64;
    vs.push_back({"negative lowsim-64 key (every visible token)", m});
    m.rule = NegRule::random;
    m.k = 3;
    vs.push_back({"negative random-3", m});
    m.k = 5;
    m.alpha = 0.2;
    vs.push_back({"negative random-5 + regularized a=0.2", m});
    struct Shape4 { int B, T, C, NH; };
    for (Shape4 sh : {Shape4{2, 37, 48, 3}, Shape4{3, 20, 40, 2}}) {
        const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH, Cs = 7;
        for (const V& v : vs) {
            CAPTURE(T);
            CAPTURE(v.name);
            Rng r(1111 + T);
            const uint64_t seed = 0xABCDEF + (uint64_t)T;
            // inputs rounded to float: the neighbour similarities (double sums of exact float products) and the random
            // priorities are then bit-identical on both devices, so both pick the same neighbours
            const Vec qkv = rnd((size_t)B * T * 3 * C, r, -1.5, 1.5), xs = rnd((size_t)B * T * Cs, r), dout = rnd((size_t)B * T * C, r);
            Vec out((size_t)B * T * C), att((size_t)B * NH * T * T), scratch(attention_scratch_size(B, T, C, NH));
            icl::attention_mod_forward(out.data(), att.data(), scratch.data(), qkv.data(), xs.data(), v.m, seed, B, T, C, NH, Cs);
            auto gqkv = up(qkv), gxs = up(xs), gdout = up(dout);
            auto gout = poisoned(out.size()), gatt = poisoned(att.size());
            op::attention_mod_forward<float>(GPU, gout.ptr, gatt.ptr, nullptr, gqkv.ptr, gxs.ptr, v.m, seed, B, T, C, NH, Cs);
            const Vec got = down(gout, out.size());
            check_close("attention_mod_forward out", out, got);
            check_close("attention_mod_forward att", att, down(gatt, att.size()));
            // deterministic: the same bits again
            auto gout2 = poisoned(out.size()), gatt2 = poisoned(att.size());
            op::attention_mod_forward<float>(GPU, gout2.ptr, gatt2.ptr, nullptr, gqkv.ptr, gxs.ptr, v.m, seed, B, T, C, NH, Cs);
            CHECK(down(gout2, out.size()) == got);
            // backward from the CPU's saved probabilities; accumulates into random dqkv
            const Vec att32 = f32(att);
            auto satt = up(att32);
            Vec dqkv = rnd(qkv.size(), r);
            auto gdqkv = up(dqkv);
            icl::attention_mod_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att32.data(), xs.data(), v.m, seed, B, T, C, NH, Cs);
            op::attention_mod_backward<float>(GPU, gdqkv.ptr, nullptr, gdout.ptr, gqkv.ptr, satt.ptr, gxs.ptr, v.m, seed, B, T, C, NH, Cs);
            check_close("attention_mod_backward dqkv", dqkv, down(gdqkv, dqkv.size()));
        }
    }
    // the random rule really depends on the seed on the GPU too (another seed, another output)
    AttnMods rm;
    rm.beta = 1.0;
    rm.rule = NegRule::random;
    rm.k = 2;
    const int B = 1, T = 16, C = 8, NH = 2;
    Rng r(1212);
    const Vec qkv = rnd((size_t)B * T * 3 * C, r);
    auto gqkv = up(qkv);
    auto o1 = poisoned((size_t)B * T * C), o2 = poisoned((size_t)B * T * C), a = poisoned((size_t)B * NH * T * T);
    op::attention_mod_forward<float>(GPU, o1.ptr, a.ptr, nullptr, gqkv.ptr, nullptr, rm, 1, B, T, C, NH, 0);
    op::attention_mod_forward<float>(GPU, o2.ptr, a.ptr, nullptr, gqkv.ptr, nullptr, rm, 2, B, T, C, NH, 0);
    CHECK(down(o1, (size_t)B * T * C) != down(o2, (size_t)B * T * C));
}

TEST_CASE("cuda kernels: augmented attention's qkv adapters (keys and values), forward and backward (I19)" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    const int N = 37, Cin = 45, C = 24, dh = 7;
    const double c = 0.7;
    for (int slot = 1; slot <= 2; slot++) {
        CAPTURE(slot);
        Rng r(1313 + slot);
        const Vec inp = rnd((size_t)N * Cin, r), A = rnd((size_t)dh * Cin, r), Bw = rnd((size_t)C * dh, r), dqkv = rnd((size_t)N * 3 * C, r);
        // forward: qkv's slot third is updated in place (the other two must stay as they are); z, u are set
        Vec qkv = rnd((size_t)N * 3 * C, r), z((size_t)N * dh), u((size_t)N * dh);
        auto gqkv = up(qkv), ginp = up(inp), gA = up(A), gB = up(Bw), gdqkv = up(dqkv);
        auto gz = poisoned(z.size()), gu = poisoned(u.size());
        icl::qkv_adapter_forward(qkv.data(), z.data(), u.data(), inp.data(), A.data(), Bw.data(), c, slot, N, Cin, C, dh);
        op::qkv_adapter_forward<float>(GPU, gqkv.ptr, gz.ptr, gu.ptr, ginp.ptr, gA.ptr, gB.ptr, c, slot, N, Cin, C, dh);
        check_close("qkv_adapter_forward qkv", qkv, down(gqkv, qkv.size()));
        check_close("qkv_adapter_forward z", z, down(gz, z.size()));
        check_close("qkv_adapter_forward u", u, down(gu, u.size()));
        // backward from the CPU's z, u; dinp, dA, dB accumulate into random values; dz is zero on entry (the contract)
        const Vec z32 = f32(z), u32 = f32(u);
        auto sz = up(z32), su = up(u32);
        Vec dinp = rnd(inp.size(), r), dA = rnd(A.size(), r), dB = rnd(Bw.size(), r), dz(z.size(), 0.0);
        auto gdinp = up(dinp), gdA = up(dA), gdB = up(dB), gdz = up(dz);
        icl::qkv_adapter_backward(dinp.data(), dA.data(), dB.data(), dz.data(), dqkv.data(), inp.data(), z32.data(), u32.data(), A.data(),
                                  Bw.data(), c, slot, N, Cin, C, dh);
        op::qkv_adapter_backward<float>(GPU, gdinp.ptr, gdA.ptr, gdB.ptr, gdz.ptr, gdqkv.ptr, ginp.ptr, sz.ptr, su.ptr, gA.ptr, gB.ptr, c, slot, N,
                                        Cin, C, dh);
        check_close("qkv_adapter_backward dinp", dinp, down(gdinp, dinp.size()));
        check_close("qkv_adapter_backward dA", dA, down(gdA, dA.size()));
        check_close("qkv_adapter_backward dB", dB, down(gdB, dB.size()));
        check_close("qkv_adapter_backward dz", dz, down(gdz, dz.size()));
        // dinp null (M1: the input is data): the same dA, dB, dz
        Vec dA2 = rnd(A.size(), r), dB2 = rnd(Bw.size(), r), dz2(z.size(), 0.0);
        auto gdA2 = up(dA2), gdB2 = up(dB2), gdz2 = up(dz2);
        icl::qkv_adapter_backward((double*)nullptr, dA2.data(), dB2.data(), dz2.data(), dqkv.data(), inp.data(), z32.data(), u32.data(),
                                  A.data(), Bw.data(), c, slot, N, Cin, C, dh);
        op::qkv_adapter_backward<float>(GPU, (float*)nullptr, gdA2.ptr, gdB2.ptr, gdz2.ptr, gdqkv.ptr, ginp.ptr, sz.ptr, su.ptr, gA.ptr, gB.ptr, c,
                                        slot, N, Cin, C, dh);
        check_close("qkv_adapter_backward dA (dinp null)", dA2, down(gdA2, dA2.size()));
        check_close("qkv_adapter_backward dB (dinp null)", dB2, down(gdB2, dB2.size()));
        check_close("qkv_adapter_backward dz (dinp null)", dz2, down(gdz2, dz2.size()));
    }
}

TEST_CASE("cuda kernels: single-query attention against a KV cache (decoding step)" * GPU_CASE) {
    REQUIRE_GPU();
    struct Shape3 { int n, C, NH; };
    for (Shape3 s : {Shape3{1, 12, 3}, Shape3{37, 48, 3}, Shape3{300, 64, 4}, Shape3{129, 256, 2}}) {
        const int n = s.n, C = s.C, NH = s.NH;
        CAPTURE(n);
        Rng r(707 + n);
        const Vec cache = rnd((size_t)n * 3 * C, r, -1.5, 1.5);
        Vec out(C), att((size_t)NH * n);
        icl::kv_attention_step(out.data(), att.data(), cache.data(), n, C, NH);
        auto gcache = up(cache);
        auto gout = poisoned(out.size()), gatt = poisoned(att.size());
        op::kv_attention_step<float>(GPU, gout.ptr, gatt.ptr, gcache.ptr, n, C, NH);
        check_close("kv_attention_step out", out, down(gout, out.size()));
        check_close("kv_attention_step att", att, down(gatt, att.size()));
    }
}

TEST_CASE("cuda kernels: softmax cross-entropy (ignored rows, masked weights) and MSE" * GPU_CASE) {
    REQUIRE_GPU();
    const int N = 37, V = 301, D = 5;
    Rng r(606);
    const Vec logits = rnd((size_t)N * V, r, -6, 6);
    std::vector<int> tgt(N);
    for (int n = 0; n < N; n++) tgt[n] = n % 7 == 3 ? -1 : (int)r.below(V);  // some rows ignored
    Vec dl = rnd(N, r, 0.1, 1.0);
    for (int n = 0; n < N; n += 4) dl[n] = 0.0;  // masked rows
    Vec losses(N), probs((size_t)N * V);
    icl::crossentropy_forward(losses.data(), probs.data(), logits.data(), tgt.data(), N, V);
    auto glog = up(logits), gdl = up(dl);
    auto gtgt = up(tgt);
    auto gl = poisoned(N), gp = poisoned(probs.size());
    op::crossentropy_forward(GPU, gl.ptr, gp.ptr, glog.ptr, gtgt.ptr, N, V);
    check_close("crossentropy_forward losses", losses, down(gl, N));
    check_close("crossentropy_forward probs", probs, down(gp, probs.size()), 1e-7, 1e-4);
    const Vec p32 = f32(probs);
    auto sp = up(p32);
    Vec dlog = rnd(logits.size(), r);
    auto gdlog = up(dlog);
    icl::crossentropy_backward(dlog.data(), dl.data(), p32.data(), tgt.data(), N, V);
    op::crossentropy_backward(GPU, gdlog.ptr, gdl.ptr, sp.ptr, gtgt.ptr, N, V);
    check_close("crossentropy_backward dlogits", dlog, down(gdlog, dlog.size()));
    // the forward alone on other rows: CPU (fp64) vs GPU, every loss and probability
    auto ce_forward_matches = [&](const std::string& what, const Vec& lg, const std::vector<int>& tg, int Nr, int Vr) {
        Vec l(Nr), p((size_t)Nr * Vr);
        icl::crossentropy_forward(l.data(), p.data(), lg.data(), tg.data(), Nr, Vr);
        auto glg = up(lg);
        auto gtg = up(tg);
        auto gl = poisoned(Nr), gp = poisoned(p.size());
        op::crossentropy_forward(GPU, gl.ptr, gp.ptr, glg.ptr, gtg.ptr, Nr, Vr);
        check_close("crossentropy_forward losses (" + what + ")", l, down(gl, Nr));
        check_close("crossentropy_forward probs (" + what + ")", p, down(gp, p.size()), 1e-7, 1e-4);
    };
    {  // a vocabulary smaller than the block (idle threads and warps) with −∞ logits (a masked vocabulary)
        Vec lg = rnd((size_t)4 * 20, r, -3, 3);
        for (int n = 0; n < 4; n++)
            for (int v = n; v < 20; v += 3) lg[(size_t)n * 20 + v] = -INFINITY;
        ce_forward_matches("V 20, -inf logits", lg, {1, 2, -1, 4}, 4, 20);  // targets never a −∞ entry (v ≡ n mod 3 from v = n)
    }
    {  // GPT-2's vocabulary: ~200 logits per thread, each row's largest placed late so the online sums rescale often
        Vec lg = rnd((size_t)5 * 50257, r, -30, 30);
        for (int n = 0; n < 5; n++) lg[(size_t)n * 50257 + 50256 - 97 * n] = 40.0 + n;
        ce_forward_matches("V 50257", lg, {7, -1, 50256, 123, 40000}, 5, 50257);
    }
    // MSE
    const Vec pred = rnd((size_t)N * D, r), target = rnd((size_t)N * D, r);
    icl::mse_forward(losses.data(), pred.data(), target.data(), N, D);
    auto gpred = up(pred), gtarget = up(target), gml = poisoned(N);
    op::mse_forward(GPU, gml.ptr, gpred.ptr, gtarget.ptr, N, D);
    check_close("mse_forward losses", losses, down(gml, N));
    Vec dpred = rnd(pred.size(), r);
    auto gdpred = up(dpred);
    icl::mse_backward(dpred.data(), dl.data(), pred.data(), target.data(), N, D);
    op::mse_backward(GPU, gdpred.ptr, gdl.ptr, gpred.ptr, gtarget.ptr, N, D);
    check_close("mse_backward dpred", dpred, down(gdpred, dpred.size()));
}

TEST_CASE("cuda kernels: AdamW, global gradient norm, scaling" * GPU_CASE) {
    REQUIRE_GPU();
    const int64_t n = 10007;
    Rng r(707);
    Vec p = rnd(n, r), g = rnd(n, r), m = rnd(n, r, -0.1, 0.1), v = rnd(n, r, 0.01, 0.1);
    auto gp = up(p), gg = up(g), gm = up(m), gv = up(v);
    icl::adamw_update(p.data(), g.data(), m.data(), v.data(), (size_t)n, 1e-2, 0.9, 0.95, 1e-8, 0.1, 3);
    op::adamw_update(GPU, gp.ptr, gg.ptr, gm.ptr, gv.ptr, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
    check_close("adamw params", p, down(gp, n), 1e-6, 1e-5);
    check_close("adamw m", m, down(gm, n), 1e-7, 1e-5);
    check_close("adamw v", v, down(gv, n), 1e-8, 1e-5);
    const double ref = icl::grad_norm_squared(g.data(), (size_t)n);
    const double got = op::grad_norm_squared(GPU, gg.ptr, n);
    CHECK(std::fabs(got - ref) <= 1e-10 * ref);  // both sum float squares in double (in different orders)
    CHECK(op::grad_norm_squared(GPU, gg.ptr, n) == got);  // deterministic: the same bits again
    icl::scale(g.data(), (size_t)n, 0.37);
    op::scale(GPU, gg.ptr, n, 0.37);
    check_close("scale", g, down(gg, n), 0, 3e-7);  // float(0.37) and one float rounding
}

TEST_CASE("cuda kernels: CGT weight generator (tanh and softmax mixing), forward and backward" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    const int N = 37, C = 20, Dy = 6, M = 3, r = 2, Mr = M * r;
    for (MixFn h : {MixFn::tanh, MixFn::softmax}) {
        CAPTURE((int)h);
        Rng rg(808 + (int)h);
        const Vec u = rnd((size_t)N * C, rg), y = rnd((size_t)N * Dy, rg), S = rnd((size_t)M * (Dy + 1), rg), Lw = rnd((size_t)C * Mr, rg),
                  Rw = rnd((size_t)(C + 1) * Mr, rg), dout = rnd((size_t)N * C, rg);
        Vec out((size_t)N * C), c((size_t)N * M), P((size_t)N * Mr), z((size_t)N * r), G((size_t)N * Mr);
        icl::generator_forward(out.data(), c.data(), P.data(), z.data(), G.data(), u.data(), y.data(), S.data(), Lw.data(), Rw.data(), N, C,
                               Dy, M, r, h);
        auto gu = up(u), gy = up(y), gS = up(S), gL = up(Lw), gR = up(Rw), gdout = up(dout);
        auto gout = poisoned(out.size()), gc = poisoned(c.size()), gP = poisoned(P.size()), gz = poisoned(z.size()), gG = poisoned(G.size());
        op::generator_forward(GPU, gout.ptr, gc.ptr, gP.ptr, gz.ptr, gG.ptr, gu.ptr, gy.ptr, gS.ptr, gL.ptr, gR.ptr, N, C, Dy, M, r, h);
        check_close("generator out", out, down(gout, out.size()));
        check_close("generator c", c, down(gc, c.size()));
        check_close("generator P", P, down(gP, P.size()));
        check_close("generator z", z, down(gz, z.size()));
        check_close("generator G", G, down(gG, G.size()));
        const Vec c32 = f32(c), P32 = f32(P), z32 = f32(z), G32 = f32(G);
        auto sc = up(c32), sP = up(P32), sz = up(z32), sG = up(G32);
        Vec du = rnd(u.size(), rg), dy = rnd(y.size(), rg), dS = rnd(S.size(), rg), dL = rnd(Lw.size(), rg), dR = rnd(Rw.size(), rg);
        auto gdu = up(du), gdy = up(dy), gdS = up(dS), gdL = up(dL), gdR = up(dR);
        Vec scratch(generator_scratch_size(N, M, r));
        auto gscratch = poisoned(scratch.size());
        icl::generator_backward(du.data(), dy.data(), dS.data(), dL.data(), dR.data(), scratch.data(), dout.data(), u.data(), y.data(),
                                c32.data(), P32.data(), z32.data(), G32.data(), S.data(), Lw.data(), Rw.data(), N, C, Dy, M, r, h);
        op::generator_backward(GPU, gdu.ptr, gdy.ptr, gdS.ptr, gdL.ptr, gdR.ptr, gscratch.ptr, gdout.ptr, gu.ptr, gy.ptr, sc.ptr, sP.ptr, sz.ptr,
                               sG.ptr, gS.ptr, gL.ptr, gR.ptr, N, C, Dy, M, r, h);
        check_close("generator du", du, down(gdu, du.size()));
        check_close("generator dy", dy, down(gdy, dy.size()));
        check_close("generator dS", dS, down(gdS, dS.size()));
        check_close("generator dL", dL, down(gdL, dL.size()));
        check_close("generator dR", dR, down(gdR, dR.size()));
    }
}

TEST_CASE("cuda kernels: CGT ops (concat, gather, R_C, R_D, GP KL, reparameterization)" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    Rng r(909);
    // concat
    const int N = 37, Ca = 11, Cb = 6;
    const Vec a = rnd((size_t)N * Ca, r), b = rnd((size_t)N * Cb, r), dcat = rnd((size_t)N * (Ca + Cb), r);
    Vec cat((size_t)N * (Ca + Cb));
    icl::concat_forward(cat.data(), a.data(), b.data(), N, Ca, Cb);
    auto ga = up(a), gb = up(b), gdcat = up(dcat), gcat = poisoned(cat.size());
    op::concat_forward(GPU, gcat.ptr, ga.ptr, gb.ptr, N, Ca, Cb);
    check_close("concat_forward", cat, down(gcat, cat.size()), 0, 0);
    Vec da = rnd(a.size(), r), db = rnd(b.size(), r);
    auto gda = up(da), gdb = up(db);
    icl::concat_backward(da.data(), db.data(), dcat.data(), N, Ca, Cb);
    op::concat_backward(GPU, gda.ptr, gdb.ptr, gdcat.ptr, N, Ca, Cb);
    check_close("concat_backward da", da, down(gda, da.size()));
    check_close("concat_backward db", db, down(gdb, db.size()));
    // gather (repeated source rows: the backward scatter-adds)
    const int Ns = 9, D = 13;
    std::vector<int> idx(N);
    for (int n = 0; n < N; n++) idx[n] = (int)r.below(Ns);
    const Vec src = rnd((size_t)Ns * D, r), dg = rnd((size_t)N * D, r);
    Vec gout((size_t)N * D);
    icl::gather_rows_forward(gout.data(), src.data(), idx.data(), N, D);
    auto gsrc = up(src), gdg = up(dg), ggout = poisoned(gout.size());
    auto gidx = up(idx);
    op::gather_rows_forward(GPU, ggout.ptr, gsrc.ptr, gidx.ptr, N, D);
    check_close("gather_rows_forward", gout, down(ggout, gout.size()), 0, 0);
    Vec dsrc = rnd(src.size(), r);
    auto gdsrc = up(dsrc);
    icl::gather_rows_backward(dsrc.data(), dg.data(), idx.data(), N, D);
    op::gather_rows_backward(GPU, gdsrc.ptr, gdg.ptr, gidx.ptr, N, D);
    check_close("gather_rows_backward", dsrc, down(gdsrc, dsrc.size()));
    // regularizers on y (B,T,Dy)
    const int B = 3, T = 11, Dy = 7;
    const Vec y = rnd((size_t)B * T * Dy, r);
    auto gy = up(y);
    for (double zp : {0.0, 2.0}) {  // uniform ζ and the quadratic profile
        CAPTURE(zp);
        const double rc = icl::continuity_reg_forward(y.data(), B, T, Dy, zp), rc_g = op::continuity_reg_forward(GPU, gy.ptr, B, T, Dy, zp);
        CHECK(std::fabs(rc_g - rc) <= 1e-5 * std::fabs(rc) + 1e-7);
        const double rd = icl::decorrelation_reg_forward(y.data(), B, T, Dy, zp), rd_g = op::decorrelation_reg_forward(GPU, gy.ptr, B, T, Dy, zp);
        CHECK(std::fabs(rd_g - rd) <= 1e-5 * std::fabs(rd) + 1e-7);
        Vec dy1 = rnd(y.size(), r), dy2 = rnd(y.size(), r);
        auto gdy1 = up(dy1), gdy2 = up(dy2);
        icl::continuity_reg_backward(dy1.data(), y.data(), 0.7, B, T, Dy, zp);
        op::continuity_reg_backward(GPU, gdy1.ptr, gy.ptr, 0.7, B, T, Dy, zp);
        check_close("continuity_reg_backward", dy1, down(gdy1, dy1.size()));
        icl::decorrelation_reg_backward(dy2.data(), y.data(), 0.4, B, T, Dy, zp);
        op::decorrelation_reg_backward(GPU, gdy2.ptr, gy.ptr, 0.4, B, T, Dy, zp);
        check_close("decorrelation_reg_backward", dy2, down(gdy2, dy2.size()));
    }
    // R_P with 𝒦 on the device
    {
        std::vector<double> Kinv_, K_;
        gp_kernel_inverse(T, 0.03, 0.1 * T, Kinv_, &K_);
        const Vec K32 = f32(K_);
        auto gK_ = up(K32);
        const double rp = icl::prior_reg_forward(y.data(), K32.data(), B, T, Dy), rp_g = op::prior_reg_forward(GPU, gy.ptr, gK_.ptr, B, T, Dy);
        CHECK(std::fabs(rp_g - rp) <= 1e-5 * std::fabs(rp) + 1e-7);
        Vec dy3 = rnd(y.size(), r);
        auto gdy3 = up(dy3);
        icl::prior_reg_backward(dy3.data(), y.data(), K32.data(), 0.6, B, T, Dy);
        op::prior_reg_backward(GPU, gdy3.ptr, gy.ptr, gK_.ptr, 0.6, B, T, Dy);
        check_close("prior_reg_backward", dy3, down(gdy3, dy3.size()));
    }
    // GP KL with 𝒦⁻¹ on the device
    std::vector<double> Kinv;
    const double logdet = gp_kernel_inverse(T, 0.03, 0.1 * T, Kinv);
    const Vec Kinv32 = f32(Kinv), mu = rnd(y.size(), r), lv = rnd(y.size(), r, -1, 0.5);
    auto gK = up(Kinv32), gmu = up(mu), glv = up(lv);
    const double kl = icl::gp_kl_forward(mu.data(), lv.data(), Kinv32.data(), logdet, B, T, Dy);
    const double kl_g = op::gp_kl_forward(GPU, gmu.ptr, glv.ptr, gK.ptr, logdet, B, T, Dy);
    CHECK(std::fabs(kl_g - kl) <= 1e-5 * std::fabs(kl) + 1e-6);
    Vec dmu = rnd(mu.size(), r), dlv = rnd(lv.size(), r);
    auto gdmu = up(dmu), gdlv = up(dlv);
    icl::gp_kl_backward(dmu.data(), dlv.data(), mu.data(), lv.data(), Kinv32.data(), 0.3, B, T, Dy);
    op::gp_kl_backward(GPU, gdmu.ptr, gdlv.ptr, gmu.ptr, glv.ptr, gK.ptr, 0.3, B, T, Dy);
    check_close("gp_kl_backward dmu", dmu, down(gdmu, dmu.size()));
    check_close("gp_kl_backward dlogv", dlv, down(gdlv, dlv.size()));
    // reparameterization
    const Vec eps = rnd(y.size(), r);
    auto geps = up(eps);
    Vec yr(y.size());
    icl::reparam_forward(yr.data(), mu.data(), lv.data(), eps.data(), (int64_t)yr.size());
    auto gyr = poisoned(yr.size());
    op::reparam_forward(GPU, gyr.ptr, gmu.ptr, glv.ptr, geps.ptr, (int64_t)yr.size());
    check_close("reparam_forward", yr, down(gyr, yr.size()));
    Vec dmu2 = rnd(mu.size(), r), dlv2 = rnd(lv.size(), r), dyr = rnd(y.size(), r);
    auto gdmu2 = up(dmu2), gdlv2 = up(dlv2), gdyr = up(dyr);
    icl::reparam_backward(dmu2.data(), dlv2.data(), dyr.data(), lv.data(), eps.data(), (int64_t)yr.size());
    op::reparam_backward(GPU, gdmu2.ptr, gdlv2.ptr, gdyr.ptr, glv.ptr, geps.ptr, (int64_t)yr.size());
    check_close("reparam_backward dmu", dmu2, down(gdmu2, dmu2.size()));
    check_close("reparam_backward dlogv", dlv2, down(gdlv2, dlv2.size()));
}

TEST_CASE("cuda kernels: kernel attention (RoPE, ICLCA biases) forward, backward and streaming step" * GPU_CASE) {
    REQUIRE_GPU();
    const int B = 2, T = 70, C = 24, NH = 2, hs = C / NH, m = hs;
    Rng r(1010);
    std::vector<int> pos(B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) pos[b * T + t] = 5 + 2 * t + b;  // explicit, non-contiguous positions
    const Vec qkv = rnd((size_t)B * T * 3 * C, r, -1.5, 1.5), bkv = rnd((size_t)NH * m * hs, r, -0.2, 0.2),
              bd = rnd((size_t)NH * m, r, 0.5, 1.0), dout = rnd((size_t)B * T * C, r);
    auto gqkv = up(qkv), gbkv = up(bkv), gbd = up(bd), gdout = up(dout);
    auto gpos = up(pos);
    const KattnForm form0 = kernel_attention_form();  // ICL_KATTN_FORM's, put back at the end
    for (int form = 0; form < 3; form++)              // KattnForm: chunked (3 chunks, the last partial), scan, scan-shared
    for (int variant = 0; variant < 2; variant++) {  // 0: explicit positions + biases; 1: 0..T−1, no biases
        CAPTURE(form);
        CAPTURE(variant);
        set_kernel_attention_form((KattnForm)form);
        const int* hp = variant == 0 ? pos.data() : nullptr;
        const int* gp = variant == 0 ? gpos.ptr : nullptr;
        const double* hb = variant == 0 ? bkv.data() : nullptr;
        const double* hd = variant == 0 ? bd.data() : nullptr;
        const float* gbk = variant == 0 ? gbkv.ptr : nullptr;
        const float* gbdd = variant == 0 ? gbd.ptr : nullptr;
        const double eps = variant == 0 ? 1e-6 : 1.0;  // with no bias, a larger eps keeps the denominators away from 0
        const size_t nf = (size_t)B * NH * T * m;
        Vec out((size_t)B * T * C), pq(nf), pk(nf), rq(nf), rk(nf), den((size_t)B * NH * T);
        Vec scratch(kernel_attention_scratch_size(B, T, C, NH));
        icl::kernel_attention_forward(out.data(), pq.data(), pk.data(), rq.data(), rk.data(), den.data(), scratch.data(), qkv.data(), hp, hb,
                                      hd, B, T, C, NH, eps);
        auto gout = poisoned(out.size()), gpq = poisoned(nf), gpk = poisoned(nf), grq = poisoned(nf), grk = poisoned(nf),
             gden = poisoned(den.size());
        op::kernel_attention_forward<float>(GPU, gout.ptr, gpq.ptr, gpk.ptr, grq.ptr, grk.ptr, gden.ptr, nullptr, gqkv.ptr, gp, gbk, gbdd, B, T,
                                            C, NH, eps);
        check_close("kernel_attention_forward out", out, down(gout, out.size()));
        check_close("kernel_attention_forward phiq", pq, down(gpq, nf));
        check_close("kernel_attention_forward phik", pk, down(gpk, nf));
        check_close("kernel_attention_forward rphiq", rq, down(grq, nf));
        check_close("kernel_attention_forward rphik", rk, down(grk, nf));
        check_close("kernel_attention_forward den", den, down(gden, den.size()));
        // backward from the CPU's saved tensors
        const Vec out32 = f32(out), pq32 = f32(pq), pk32 = f32(pk), rq32 = f32(rq), rk32 = f32(rk), den32 = f32(den);
        auto so = up(out32), spq = up(pq32), spk = up(pk32), srq = up(rq32), srk = up(rk32), sden = up(den32);
        Vec dqkv = rnd(qkv.size(), r), dbkv = rnd(bkv.size(), r), dbd = rnd(bd.size(), r);
        auto gdqkv = up(dqkv), gdbkv = up(dbkv), gdbd = up(dbd);
        icl::kernel_attention_backward(dqkv.data(), variant == 0 ? dbkv.data() : nullptr, variant == 0 ? dbd.data() : nullptr, scratch.data(),
                                       dout.data(), out32.data(), pq32.data(), pk32.data(), rq32.data(), rk32.data(), den32.data(), qkv.data(),
                                       hp, hb, hd, B, T, C, NH);
        op::kernel_attention_backward<float>(GPU, gdqkv.ptr, variant == 0 ? gdbkv.ptr : nullptr, variant == 0 ? gdbd.ptr : nullptr, nullptr,
                                             gdout.ptr, so.ptr, spq.ptr, spk.ptr, srq.ptr, srk.ptr, sden.ptr, gqkv.ptr, gp, gbk, gbdd, B, T, C,
                                             NH);
        check_close("kernel_attention_backward dqkv", dqkv, down(gdqkv, dqkv.size()), 1e-5, 2e-4);
        check_close("kernel_attention_backward dbkv", dbkv, down(gdbkv, dbkv.size()), 1e-5, 2e-4);
        check_close("kernel_attention_backward dbd", dbd, down(gdbd, dbd.size()), 1e-5, 2e-4);
    }
    // streaming step: three tokens from the biases, state updated in place
    Vec S = bkv, z = bd;
    auto gS = up(S), gz = up(z);
    for (int t = 0; t < 3; t++) {
        Vec o(C);
        const Vec row(qkv.begin() + (size_t)t * 3 * C, qkv.begin() + (size_t)(t + 1) * 3 * C);
        auto grow = up(row), go = poisoned(C);
        icl::kernel_attention_step(o.data(), S.data(), z.data(), row.data(), 7 + t, C, NH, 1e-6);
        op::kernel_attention_step(GPU, go.ptr, gS.ptr, gz.ptr, grow.ptr, 7 + t, C, NH, 1e-6);
        check_close("kernel_attention_step out", o, down(go, C));
    }
    check_close("kernel_attention_step S", S, down(gS, S.size()));
    check_close("kernel_attention_step z", z, down(gz, z.size()));
    set_kernel_attention_form(form0);
}

TEST_CASE("cuda kernels: kernel attention at head size 64 and 128 (> one warp of channels), chunked and scanned (state in global or shared memory)" * GPU_CASE) {
    REQUIRE_GPU();
    // head size 64: the scan's state (m,hs) fits the default 48 KiB of shared memory, the chunked backward needs the
    // opt-in limit; 128: both need it. T = 67: three chunks, the last partial; T = 300 (chunked): ten.
    const KattnForm form0 = kernel_attention_form();  // ICL_KATTN_FORM's, put back at the end
    struct Shape { int C; KattnForm form; int T; };
    for (Shape sp : {Shape{128, KattnForm::chunked, 67}, Shape{128, KattnForm::chunked, 300}, Shape{128, KattnForm::scan, 67},
                     Shape{128, KattnForm::scan_shared, 67}, Shape{256, KattnForm::chunked, 67}, Shape{256, KattnForm::chunked, 300},
                     Shape{256, KattnForm::scan, 67}, Shape{256, KattnForm::scan_shared, 67}}) {
        CAPTURE(sp.C);
        CAPTURE((int)sp.form);
        CAPTURE(sp.T);
        set_kernel_attention_form(sp.form);
        const int B = 2, T = sp.T, C = sp.C, NH = 2, hs = C / NH, m = hs;
        Rng r(2020 + C);
        const Vec qkv = rnd((size_t)B * T * 3 * C, r, -1.0, 1.0), bkv = rnd((size_t)NH * m * hs, r, -0.2, 0.2), bd = rnd((size_t)NH * m, r, 0.5, 1.0),
                  dout = rnd((size_t)B * T * C, r);
        auto gqkv = up(qkv), gbkv = up(bkv), gbd = up(bd), gdout = up(dout);
        const size_t nf = (size_t)B * NH * T * m;
        Vec out((size_t)B * T * C), pq(nf), pk(nf), rq(nf), rk(nf), den((size_t)B * NH * T);
        Vec scratch(kernel_attention_scratch_size(B, T, C, NH));
        icl::kernel_attention_forward(out.data(), pq.data(), pk.data(), rq.data(), rk.data(), den.data(), scratch.data(), qkv.data(), nullptr,
                                      bkv.data(), bd.data(), B, T, C, NH, 1e-6);
        auto gout = poisoned(out.size()), gpq = poisoned(nf), gpk = poisoned(nf), grq = poisoned(nf), grk = poisoned(nf), gden = poisoned(den.size());
        op::kernel_attention_forward<float>(GPU, gout.ptr, gpq.ptr, gpk.ptr, grq.ptr, grk.ptr, gden.ptr, nullptr, gqkv.ptr, nullptr, gbkv.ptr,
                                            gbd.ptr, B, T, C, NH, 1e-6);
        check_close("kernel_attention_forward out", out, down(gout, out.size()));
        check_close("kernel_attention_forward den", den, down(gden, den.size()));
        const Vec out32 = f32(out), pq32 = f32(pq), pk32 = f32(pk), rq32 = f32(rq), rk32 = f32(rk), den32 = f32(den);
        auto so = up(out32), spq = up(pq32), spk = up(pk32), srq = up(rq32), srk = up(rk32), sden = up(den32);
        Vec dqkv = rnd(qkv.size(), r), dbkv = rnd(bkv.size(), r), dbd = rnd(bd.size(), r);
        auto gdqkv = up(dqkv), gdbkv = up(dbkv), gdbd = up(dbd);
        icl::kernel_attention_backward(dqkv.data(), dbkv.data(), dbd.data(), scratch.data(), dout.data(), out32.data(), pq32.data(), pk32.data(),
                                       rq32.data(), rk32.data(), den32.data(), qkv.data(), nullptr, bkv.data(), bd.data(), B, T, C, NH);
        op::kernel_attention_backward<float>(GPU, gdqkv.ptr, gdbkv.ptr, gdbd.ptr, nullptr, gdout.ptr, so.ptr, spq.ptr, spk.ptr, srq.ptr, srk.ptr,
                                             sden.ptr, gqkv.ptr, nullptr, gbkv.ptr, gbd.ptr, B, T, C, NH);
        check_close("kernel_attention_backward dqkv", dqkv, down(gdqkv, dqkv.size()), 1e-5, 2e-4);
        check_close("kernel_attention_backward dbkv", dbkv, down(gdbkv, dbkv.size()), 1e-5, 2e-4);
        check_close("kernel_attention_backward dbd", dbd, down(gdbd, dbd.size()), 1e-5, 2e-4);
    }
    set_kernel_attention_form(form0);
}

TEST_CASE("cuda kernels: ICLAA hybrid attention (softmax or feature similarity, FAVOR+ or elu+1, with and without a prompt term) and the streaming EMA" * GPU_CASE) {
    REQUIRE_GPU();
    Rng r(3030);
    struct Variant { bool favor, bias; int kernel_sim; };
    // a small shape, and one past a block of 128 threads in keys, features and channels (T = 300, m = 160, hs = 64)
    struct Shape { int T, C, NH, m; };
    for (const Shape sh : {Shape{37, 24, 3, 20}, Shape{300, 128, 2, 160}})
    for (const Variant v : {Variant{true, true, 0}, Variant{true, false, 1}, Variant{true, true, 1}, Variant{false, true, 0}, Variant{false, false, 0},
                            Variant{false, false, 1}}) {
        const int T = sh.T, C = sh.C, NH = sh.NH, hs = C / NH;
        CAPTURE(T);
        CAPTURE(v.favor);
        CAPTURE(v.bias);
        CAPTURE(v.kernel_sim);
        const Vec qkv = rnd((size_t)T * 3 * C, r, -1.5, 1.5);
        auto gqkv = up(qkv);
        const int m = v.favor ? sh.m : hs;
        const Vec omega = rnd((size_t)NH * m * hs, r, -1.5, 1.5), bkv = rnd((size_t)NH * m * hs, r), bd = rnd((size_t)NH * m, r, 0.5, 1.0),
                  kappa = rnd(NH, r, -1.0, 1.0);
        Vec out((size_t)T * C), lphi(iclaa_attention_scratch_size(T, NH, m, v.kernel_sim));
        icl::iclaa_attention_forward(out.data(), lphi.data(), qkv.data(), v.favor ? omega.data() : nullptr, v.bias ? bkv.data() : nullptr, bd.data(),
                                     kappa.data(), v.kernel_sim, T, C, NH, m);
        auto gout = poisoned(out.size());
        auto glphi = up64(Vec(lphi.size(), 0.0)), gom = up64(omega), gbkv = up64(bkv), gbd = up64(bd), gkap = up64(kappa);
        op::iclaa_attention_forward<float>(GPU, gout.ptr, glphi.ptr, gqkv.ptr, v.favor ? gom.ptr : nullptr, v.bias ? gbkv.ptr : nullptr, gbd.ptr,
                                           gkap.ptr, v.kernel_sim, T, C, NH, m);
        // both compute in double from the same float inputs (only the summation order of ‖x‖² and of the sums
        // differs, ~1e-15 relative); the GPU then rounds to float: at most 2⁻²⁴ ≈ 6e-8 of each value
        check_close("iclaa_attention_forward out", out, down(gout, out.size()), 1e-9, 1.2e-7);
    }
    // the EMA of y^ℓ: u = (1−γ)u + γy in double, y_used = (float)u
    const int n = 13;
    Vec u = rnd(n, r), y = rnd(n, r), yuse(n);
    auto gu = up64(u);
    auto gy = up(y), gyuse = poisoned(n);
    icl::ema_step(u.data(), yuse.data(), y.data(), 0.3, n);
    op::ema_step<float>(GPU, gu.ptr, gyuse.ptr, gy.ptr, 0.3, n);
    check_close("ema_step u", u, down64(gu, n), 1e-15, 1e-15);  // one fused multiply-add at most apart
    check_close("ema_step y_used", yuse, down(gyuse, n), 1e-9, 1.2e-7);
}

TEST_CASE("cuda kernels: TinT ops (H-split split-wise and dimension-wise, position terms, attention every mask, gate, blocks, loss gradient)" * GPU_CASE) {
    REQUIRE_GPU();
    Rng r(930);
    const int B = 2, K = 5, T = 9, N = K + T, D = 24, Hd = 4, Taux = 12;
    const int rows = B * N;
    // split-wise: a random sparse block-diagonal pattern (some coordinates without entries), CSR by output
    {
        const int H = 3, c = D / H;
        std::vector<int> rowptr(D + 1, 0), col;
        Vec w;
        for (int o = 0; o < D; o++) {
            const int h = o / c;
            for (int i = 0; i < c; i++)
                if (r.below(3) == 0) { col.push_back(h * c + i); w.push_back((double)(float)r.normal()); }
            rowptr[o + 1] = (int)col.size();
        }
        const Vec x = rnd((size_t)rows * D, r), b = rnd(D, r);
        Vec ref((size_t)rows * D);
        icl::hsplit_split_forward(ref.data(), x.data(), rowptr.data(), col.data(), w.data(), b.data(), rows, D);
        auto gx = up(x), gw = up(w), gb = up(b), gout = poisoned(ref.size());
        auto grp = up(rowptr);
        auto gcol = up(col);
        op::hsplit_split_forward<float>(GPU, gout.ptr, gx.ptr, grp.ptr, gcol.ptr, gw.ptr, gb.ptr, rows, D);
        check_close("hsplit split", ref, down(gout, ref.size()));
    }
    {
        const int H = 4, c = D / H;
        const Vec x = rnd((size_t)rows * D, r), W = rnd((size_t)H * H * c, r), b = rnd(D, r);
        std::vector<uint8_t> live(H * H);
        for (auto& l : live) l = r.below(2);
        Vec ref((size_t)rows * D);
        icl::hsplit_dim_forward(ref.data(), x.data(), W.data(), live.data(), b.data(), rows, D, H);
        auto gx = up(x), gW = up(W), gb = up(b), gout = poisoned(ref.size());
        Buffer<uint8_t> gl(GPU, live.size());
        device_copy(GPU, gl.ptr, live.data(), live.size(), Copy::host_to_device);
        op::hsplit_dim_forward<float>(GPU, gout.ptr, gx.ptr, gW.ptr, gl.ptr, gb.ptr, rows, D, H);
        check_close("hsplit dim", ref, down(gout, ref.size()));
    }
    // masks and positions of two sequences
    std::vector<int> pos((size_t)B * T);
    for (auto& p : pos) p = (int)r.below(Taux);
    std::vector<uint8_t> train((size_t)B * T), icl((size_t)B * T * T);
    for (auto& t : train) t = r.below(2);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++) icl[((size_t)b * T + i) * T + j] = j == i || (j < i && r.below(3) != 0);
    auto gpos = up(pos);
    Buffer<uint8_t> gtrain(GPU, train.size()), gicl(GPU, icl.size());
    device_copy(GPU, gtrain.ptr, train.data(), train.size(), Copy::host_to_device);
    device_copy(GPU, gicl.ptr, icl.data(), icl.size(), Copy::host_to_device);
    {
        const int k = D / Hd, Ts = Taux + K;
        Vec Y = rnd((size_t)rows * D, r);
        const Vec P = rnd((size_t)k * Ts, r);
        const std::vector<uint8_t> lam = {1, 0, 1, 1};
        auto gY = up(Y), gP = up(P);
        Buffer<uint8_t> glam(GPU, lam.size());
        device_copy(GPU, glam.ptr, lam.data(), lam.size(), Copy::host_to_device);
        icl::tint_add_position(Y.data(), P.data(), lam.data(), pos.data(), B, K, T, D, Hd, Taux);
        op::tint_add_position<float>(GPU, gY.ptr, gP.ptr, glam.ptr, gpos.ptr, B, K, T, D, Hd, Taux);
        check_close("tint position", Y, down(gY, Y.size()));
    }
    for (TintMask mask : {TintMask::data_to_prefix, TintMask::prefix_to_train, TintMask::causal_data, TintMask::loss_self, TintMask::loss_next})
        for (bool softmax : {false, true})
            for (bool transpose : {false, true}) {
                if (transpose && mask != TintMask::causal_data) continue;
                CAPTURE((int)mask); CAPTURE(softmax); CAPTURE(transpose);
                const Vec Q = rnd((size_t)rows * D, r), Kx = rnd((size_t)rows * D, r), Vx = rnd((size_t)rows * D, r);
                Vec ref((size_t)rows * D), a((size_t)B * Hd * N * N);
                const bool use_icl = mask == TintMask::causal_data;
                icl::tint_attention_forward(ref.data(), a.data(), Q.data(), Kx.data(), Vx.data(), train.data(), use_icl ? icl.data() : nullptr, B, K, T, D,
                                            Hd, mask, softmax, 0.8, transpose);
                auto gQ = up(Q), gK = up(Kx), gV = up(Vx), gO = poisoned(ref.size()), ga = poisoned(a.size());
                op::tint_attention_forward<float>(GPU, gO.ptr, ga.ptr, gQ.ptr, gK.ptr, gV.ptr, gtrain.ptr, use_icl ? gicl.ptr : nullptr, B, K, T, D, Hd,
                                                  mask, softmax, 0.8f, transpose);
                check_close("tint attention", ref, down(gO, ref.size()));
            }
    for (int gw : {1, D}) {  // one gate per position, or per (position, coordinate)
        CAPTURE(gw);
        Vec X = rnd((size_t)rows * D, r);
        const Vec e = rnd((size_t)rows * D, r), ao = rnd((size_t)(Taux + K) * gw, r, -3, 3), an = rnd((size_t)(Taux + K) * gw, r, -3, 3);
        auto gX = up(X), ge = up(e), gao = up(ao), gan = up(an);
        icl::tint_gate_forward(X.data(), e.data(), ao.data(), an.data(), 0.5, -0.25, gw, pos.data(), B, K, T, D, Taux);
        op::tint_gate_forward<float>(GPU, gX.ptr, ge.ptr, gao.ptr, gan.ptr, 0.5f, -0.25f, gw, gpos.ptr, B, K, T, D, Taux);
        check_close("tint gate", X, down(gX, X.size()));
    }
    {
        const Vec src = rnd(400, r);  // read up to 7 + 150 + 5·30 + 11 = 318
        Vec dst = rnd(300, r);
        auto gs = up(src), gd = up(dst);
        icl::copy_block(dst.data() + 3, 140, 20, src.data() + 7, 150, 30, 2, 6, 11);
        icl::fill_block(dst.data() + 14, 140, 20, 2, 6, 4, 0.5);
        op::copy_block<float>(GPU, gd.ptr + 3, 140, 20, gs.ptr + 7, 150, 30, 2, 6, 11);
        op::fill_block<float>(GPU, gd.ptr + 14, 140, 20, 2, 6, 4, 0.5f);
        check_close("copy/fill block", dst, down(gd, dst.size()), 0, 0);  // copies: exact
    }
    {
        const int d = 16, V = 37, R = B * T;
        const Vec logits = rnd((size_t)R * V, r, -4, 4), E = rnd((size_t)V * d, r);
        std::vector<int> ids(R);
        for (auto& t : ids) t = (int)r.below(V);
        std::vector<uint8_t> m(R);
        for (int i = 0; i < R; i++) m[i] = (i % T) + 1 < T && r.below(4) != 0;
        Vec ref((size_t)R * d);
        icl::tint_loss_gradient(ref.data(), logits.data(), E.data(), ids.data(), m.data(), R, d, V);
        auto gl = up(logits), gE = up(E), gout = poisoned(ref.size());
        auto gids = up(ids);
        Buffer<uint8_t> gm(GPU, m.size());
        device_copy(GPU, gm.ptr, m.data(), m.size(), Copy::host_to_device);
        op::tint_loss_gradient<float>(GPU, gout.ptr, gl.ptr, gE.ptr, gids.ptr, gm.ptr, R, d, V);
        check_close("tint loss gradient", ref, down(gout, ref.size()));
    }
}

// ================================ whole models (need a GPU) ================================

TEST_CASE("cuda models: the CGT's parallel inference modes (frozen, frozen with context, EMA, transplanted y) and --fold from a GPU model" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    CGTConfig cc;
    cc.L = 4; cc.ell = 2; cc.dx = 24; cc.NHx = 3; cc.dy = 8; cc.NHy = 2; cc.r = 2; cc.M = 3; cc.V = ARITH_VOCAB; cc.maxT = 40;
    CGT<double> ref(cc, Device::cpu, 3);
    CGT<float> gpu(cc, GPU, 3);
    same_params(ref, gpu, 71, param_std(cc.dx));
    ref.train_mode = gpu.train_mode = false;
    const Batch bt = arith_window(3, 33, 19);
    const std::vector<int> p = {4, 9, 15};
    Rng r(72);
    const Vec yinit = rnd((size_t)bt.B * cc.dy, r), yfix = rnd((size_t)bt.B * cc.dy, r);
    auto modes = [&](auto& m) {
        using real = std::remove_reference_t<decltype(*m.s.params.ptr)>;
        Vec all;
        auto add = [&](const std::vector<real>& v) { all.insert(all.end(), v.begin(), v.end()); };
        int Ta = 0;
        add(m.dynamic_y(bt));
        add(m.frozen_outputs(bt, p, &Ta));
        add(m.frozen_ctx_outputs(bt, p));
        add(m.ema_outputs(bt, std::vector<real>(yinit.begin(), yinit.end()), 0.3));
        add(m.transplant_outputs(bt, std::vector<real>(yfix.begin(), yfix.end())));
        // folding for one ỹ: the x-only GPT's logits
        GPT<real> g(m.cfg.x_config(), m.s.dev, 1);
        m.fold_into(g, std::vector<real>(yfix.begin(), yfix.begin() + cc.dy));
        g.forward(bt);
        add(g.outputs());
        return all;
    };
    check_close("CGT modes and the folded GPT (dynamic y, frozen, frozen+ctx, EMA, transplant, folded logits)", modes(ref), modes(gpu), 1e-5, 1e-3);
}

TEST_CASE("cuda models: streaming on the GPU = the same stream on the CPU (CGT's five inference modes, the kernel LM's recurrent form), "
          "and ICLAA's hybrid forward and conversion on a GPU GPT" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    // ---- CGT: dynamic, frozen, frozen with context, EMA, transplanted y (spec §1.9), one sequence each
    CGTConfig cc;
    cc.L = 4; cc.ell = 2; cc.dx = 24; cc.NHx = 3; cc.dy = 8; cc.NHy = 2; cc.r = 2; cc.M = 3; cc.V = ARITH_VOCAB; cc.maxT = 40; cc.vae = true; cc.ln_gen = true;
    CGT<double> cref(cc, Device::cpu, 3);
    CGT<float> cgpu(cc, GPU, 3);
    same_params(cref, cgpu, 31, param_std(cc.dx));
    cref.train_mode = cgpu.train_mode = false;  // inference: the VAE's y = μ
    const Batch bt = arith_window(1, 30, 17);
    Rng r(32);
    const Vec yinit = rnd(cc.dy, r), yfix = rnd(cc.dy, r);
    auto five_modes = [&](auto& model) {
        using real = std::remove_reference_t<decltype(*model.s.params.ptr)>;
        CGTStream<real> st(model);
        Vec rows;
        auto feed = [&](int t0, int t1) {
            for (int t = t0; t < t1; t++) {
                const real* o = st.step(bt.tokens[t]);
                rows.insert(rows.end(), o, o + cc.V);
            }
        };
        st.reset(); feed(0, bt.T);                                  // 1 dynamic
        st.reset(); feed(0, 7); st.freeze(false); feed(7, bt.T);    // 2 frozen after 7, prefix out of the context
        st.reset(); feed(0, 7); st.freeze(true); feed(7, bt.T);     // 3 frozen, prefix kept
        st.reset(); st.set_ema(std::vector<real>(yinit.begin(), yinit.end()), 0.3); feed(0, bt.T);  // 4 EMA
        st.reset(); st.set_fixed_y(std::vector<real>(yfix.begin(), yfix.end())); feed(0, bt.T);      // 5 transplanted
        const std::vector<real> yu = st.y_used();
        rows.insert(rows.end(), yu.begin(), yu.end());
        return rows;
    };
    const Vec cgt_cpu = five_modes(cref), cgt_gpu = five_modes(cgpu);
    check_close("CGT streaming, five modes (logits rows, then y_used)", cgt_cpu, cgt_gpu, 1e-5, 1e-3);
    // a vector-input CGT with a vector head (step_vector: the input row crosses each step), dynamic and frozen
    CGTConfig cv = cc;
    cv.V = 0; cv.d_in = 5; cv.d_out = 2; cv.ln_gen = false;
    CGT<double> vref(cv, Device::cpu, 4);
    CGT<float> vgpu(cv, GPU, 4);
    same_params(vref, vgpu, 33, param_std(cv.dx));
    vref.train_mode = vgpu.train_mode = false;
    const Vec xin = rnd((size_t)20 * cv.d_in, r);
    auto vstream = [&](auto& model) {
        using real = std::remove_reference_t<decltype(*model.s.params.ptr)>;
        CGTStream<real> st(model);
        Vec rows;
        for (int t = 0; t < 20; t++) {
            if (t == 9) st.freeze(true);
            const std::vector<real> x(xin.begin() + (size_t)t * cv.d_in, xin.begin() + (size_t)(t + 1) * cv.d_in);
            const real* o = st.step_vector(x.data());
            rows.insert(rows.end(), o, o + cv.d_out);
        }
        return rows;
    };
    check_close("CGT streaming, vector inputs and head (dynamic, then frozen with context)", vstream(vref), vstream(vgpu), 1e-5, 1e-3);
    // ---- kernel LM: 20 tokens from position 3 through the recurrent form, logits of every step and the final state
    KernelLMConfig kc;
    kc.L = 2; kc.C = 24; kc.NH = 2; kc.V = 19;
    KernelLM<double> kref(kc, Device::cpu, 9);
    KernelLM<float> kgpu(kc, GPU, 9);
    same_params(kref, kgpu, 41, param_std(kc.C), [](const TensorSpec& sp, double* x) {
        if (sp.name.find("attn.bd") != std::string::npos)  // b_D positive, as Σφ(k): denominators away from 0
            for (int64_t k = 0; k < sp.numel(); k++) x[k] = 0.5 + std::fabs(x[k]) * 3;
    });
    std::vector<int> toks;
    for (int i = 0; i < 20; i++) toks.push_back((int)r.below(kc.V));
    auto kstream = [&](auto& model) {
        using real = std::remove_reference_t<decltype(*model.s.params.ptr)>;
        auto st = model.stream_start(3);
        Vec rows;
        for (int t : toks) {
            const std::vector<real> lg = model.stream_step(st, t);
            rows.insert(rows.end(), lg.begin(), lg.end());
        }
        std::vector<real> S, z;
        model.stream_state(st, S, z);
        rows.insert(rows.end(), S.begin(), S.end());
        rows.insert(rows.end(), z.begin(), z.end());
        return rows;
    };
    check_close("kernel LM streaming logits and state", kstream(kref), kstream(kgpu), 1e-5, 1e-3);
    // ---- ICLAA on a GPT: the prompt folded into Performer bias terms on each device, then the input's logits
    GPTConfig gc;
    gc.L = 2; gc.C = 24; gc.NH = 3; gc.V = 30; gc.maxT = 64;
    GPT<double> gref(gc, Device::cpu, 5);
    GPT<float> ggpu(gc, GPU, 5);
    same_params(gref, ggpu, 51, 0.3);
    std::vector<int> prompt, input;
    for (int i = 0; i < 12; i++) prompt.push_back((int)r.below(gc.V));
    for (int i = 0; i < 9; i++) input.push_back((int)r.below(gc.V));
    for (AttnSim sim : {AttnSim::softmax, AttnSim::kernel}) {
        CAPTURE((int)sim);
        const PerformerFeatures f(gc.L, gc.NH, gc.C / gc.NH, 32, FeatureKind::favor, true, 61);
        IclaaBias bc(f), bg(f);
        iclaa_convert(gref, f, bc, sim, prompt, 0);
        iclaa_convert(ggpu, f, bg, sim, prompt, 0);
        // kv sums terms of both signs (elements near 0 carry the fp32 error of log φ unscaled): compared as a whole
        CHECK(relerr(bc.kv, bg.kv) < 1e-4);
        CHECK(relerr(bc.d, bg.d) < 1e-4);
        const std::vector<double> lc = iclaa_logits(gref, f, &bc, sim, input, 12);
        const std::vector<float> lg = iclaa_logits(ggpu, f, &bg, sim, input, 12);
        check_close("ICLAA logits with the prompt's bias terms", lc, Vec(lg.begin(), lg.end()), 1e-5, 1e-3);
    }
}


TEST_CASE("cuda models: GPT forward + backward, CPU fp64 vs GPU fp32, every activation and gradient" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    GPTConfig cfg;
    cfg.L = 2; cfg.C = 48; cfg.NH = 4; cfg.V = ARITH_VOCAB; cfg.maxT = 64;
    const Batch bt = arith_window(3, 45, 11);
    GPT<double> ref(cfg, Device::cpu, 5);
    GPT<float> gpu(cfg, GPU, 5);
    check_rows(compare_devices(ref, gpu, bt, 6, param_std(cfg.C), 1e-5, 1e-3), 1e-5, 1e-3);
    set_fused_attention(true);  // the same through the fused attention kernels (cuda/attention_fused.cu)
    check_rows(compare_devices(ref, gpu, bt, 6, param_std(cfg.C), 1e-5, 1e-3), 1e-5, 1e-3);
    set_fused_attention(false);
}

TEST_CASE("cuda models: GPT vector task (MSE head) and a training step on the GPU" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    GPTConfig cfg;
    cfg.L = 2; cfg.C = 32; cfg.NH = 2; cfg.V = 0; cfg.d_in = 5; cfg.d_out = 2; cfg.maxT = 20;
    Rng r(12);
    Batch bt;
    bt.B = 3; bt.T = 20; bt.D = 5; bt.Dout = 2;
    for (int i = 0; i < bt.B * bt.T; i++) {
        for (int d = 0; d < 5; d++) bt.vectors.push_back((float)r.uniform(-1, 1));
        for (int d = 0; d < 2; d++) bt.target_vecs.push_back((float)r.uniform(-1, 1));
        bt.mask.push_back(i % 3 == 0 ? 1.0f : 0.0f);
    }
    GPT<double> ref(cfg, Device::cpu, 7);
    GPT<float> gpu(cfg, GPU, 7);
    check_rows(compare_devices(ref, gpu, bt, 8, param_std(cfg.C), 1e-5, 1e-3), 1e-5, 1e-3);
    // one AdamW step on each side (clipping included): parameters stay close
    AdamWConfig adam;
    adam.weight_decay = 0.1f;
    const double lr = 1e-3;
    const std::vector<double> g_ref = ref.s.to_host(ref.s.grads, 0, ref.s.ptable.total);
    const double n_ref = ref.s.update(adam, lr), n_gpu = gpu.s.update(adam, lr);
    CHECK(std::fabs(n_gpu - n_ref) <= 1e-4 * n_ref);
    std::vector<double> pr = ref.s.to_host(ref.s.params, 0, ref.s.ptable.total);
    std::vector<float> pg = gpu.s.to_host(gpu.s.params, 0, gpu.s.ptable.total);
    // AdamW's first step moves each parameter by lr·g/(|g| + eps) (+ decay): about ±lr whatever |g|, so where a
    // gradient is tiny (|g| ~ eps after clipping, or an fp32 rounding of ~0) fp32 and fp64 may move it by different
    // fractions of lr. Those parameters are held to that bound; every other one to fp32 rounding.
    double gmax = 0;
    for (double g : g_ref) gmax = std::max(gmax, std::fabs(g));
    Vec big_ref, big_got;
    int small_bad = 0;
    for (size_t i = 0; i < pr.size(); i++) {
        if (std::fabs(g_ref[i]) >= 1e-4 * gmax) { big_ref.push_back(pr[i]); big_got.push_back(pg[i]); }
        else small_bad += std::fabs((double)pg[i] - pr[i]) > 2 * lr + 1e-6;
    }
    check_close("parameters after one AdamW step (gradients >= 1e-4·max)", big_ref, big_got, 1e-6, 1e-4);
    CHECK(small_bad == 0);
}

TEST_CASE("cuda models: GPT with --act relu over five AdamW steps (losses and gradient norms), and greedy sampling" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    GPTConfig cfg;
    cfg.L = 2; cfg.C = 32; cfg.NH = 2; cfg.V = ARITH_VOCAB; cfg.maxT = 40; cfg.act = "relu";
    GPT<double> ref(cfg, Device::cpu, 3);
    GPT<float> gpu(cfg, GPU, 3);
    randomize_params(ref, 4, param_std(cfg.C));
    share_parameters(ref, gpu);
    AdamWConfig adam;
    adam.weight_decay = 0.1f;
    for (int step = 0; step < 5; step++) {
        CAPTURE(step);
        const Batch bt = arith_window(3, 33, 100 + step);
        const double lr_ = ref.forward(bt), lg = gpu.forward(bt);
        CHECK(std::fabs(lg - lr_) <= 1e-4 * std::fabs(lr_));
        ref.backward();
        gpu.backward();
        const double nr = ref.s.update(adam, 1e-3), ng = gpu.s.update(adam, 1e-3);
        CHECK(std::fabs(ng - nr) <= 1e-3 * nr);  // fp32 rounding of five steps' gradients; AdamW rescales tiny ones
    }
    // greedy sampling (temperature 0) from the same fp32 parameters on both devices: the same tokens (random weights
    // with std 0.5 keep the logits far apart, so fp32 rounding cannot flip an argmax)
    GPT<float> c32(cfg, Device::cpu, 9), g32(cfg, GPU, 9);
    randomize_params(c32, 10, 0.5);
    share_parameters(c32, g32);
    Rng r1(1), r2(1);
    const std::vector<int> prompt = {1, 2, 3, 4};
    CHECK(c32.sample(prompt, 20, 0.0, r1) == g32.sample(prompt, 20, 0.0, r2));
}

TEST_CASE("cuda models: CGT (aux pass, R_C, R_D, VAE + KL) and the kernel LM, CPU fp64 vs GPU fp32" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    CGTConfig cc;
    cc.L = 3; cc.ell = 1; cc.dx = 24; cc.dy = 8; cc.NHx = 3; cc.NHy = 2; cc.r = 2; cc.M = 3; cc.V = ARITH_VOCAB; cc.maxT = 40; cc.vae = true;
    const Batch bt = arith_window(3, 33, 13);
    CGTLoss loss;
    loss.eta = 0.5; loss.horizon = 6; loss.wC = 0.3; loss.wD = 0.2; loss.beta = 0.1;
    auto setup = [&](auto& m) {
        m.loss = loss;
        m.set_aux_positions({5, 17, 26});
        m.hold_random = true;
    };
    CGT<double> ref(cc, Device::cpu, 3);
    setup(ref);
    CGT<float> gpu(cc, GPU, 3);
    setup(gpu);
    check_rows(compare_devices(ref, gpu, bt, 4, param_std(cc.dx), 1e-5, 1e-3), 1e-5, 1e-3);

    KernelLMConfig kc;
    kc.L = 2; kc.C = 24; kc.NH = 2; kc.V = 19;
    Batch kb;
    kb.B = 2; kb.T = 40;
    Rng r(14);
    for (int i = 0; i < kb.B * kb.T; i++) {
        kb.tokens.push_back((int)r.below(kc.V));
        kb.targets.push_back((int)r.below(kc.V));
        kb.mask.push_back(1.0f);  // required with targets (data/batch.h)
        kb.pos.push_back(3 + i % kb.T);
    }
    KernelLM<double> kref(kc, Device::cpu, 9);
    KernelLM<float> kgpu(kc, GPU, 9);
    check_rows(compare_devices(kref, kgpu, kb, 10, param_std(kc.C), 1e-5, 1e-3), 1e-5, 1e-3);
}

TEST_CASE("cuda models: GPT and CGT with --attn-mod (regularized, negative, augmented), CPU fp64 vs GPU fp32, every activation and gradient" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    // Negative-sample rules whose neighbour choice does not depend on the activations (all, random): the fp64 and fp32
    // models compute slightly different keys, which could flip a near-tie of the lowsim rule; lowsim is compared on
    // identical inputs in the kernel test above.
    std::vector<AttnMods> mods(4);
    mods[0].alpha = 0.2;
    mods[1].beta = 0.6;
    mods[1].rule = NegRule::all;
    mods[1].alpha = 0.1;
    mods[2].beta = 0.5;
    mods[2].rule = NegRule::random;
    mods[2].k = 3;
    mods[3].g1 = mods[3].g2 = true;
    mods[3].c = 0.7;
    mods[3].dh = 5;
    for (const AttnMods& mod : mods) {
        CAPTURE(attn_mods_describe(mod));
        GPTConfig cfg;
        cfg.L = 2; cfg.C = 48; cfg.NH = 4; cfg.V = ARITH_VOCAB; cfg.maxT = 64;
        cfg.mod = mod;
        const Batch bt = arith_window(3, 45, 11);
        GPT<double> ref(cfg, Device::cpu, 5);
        GPT<float> gpu(cfg, GPU, 5);
        check_rows(compare_devices(ref, gpu, bt, 6, param_std(cfg.C), 1e-5, 1e-3), 1e-5, 1e-3);  // randomized: adapter B != 0 too
    }
    // the CGT's x stream takes the same modifications (main pass, aux pass and generators around them)
    for (int which : {2, 3}) {
        CAPTURE(attn_mods_describe(mods[which]));
        CGTConfig cc;
        cc.L = 3; cc.ell = 1; cc.dx = 24; cc.dy = 8; cc.NHx = 3; cc.NHy = 2; cc.r = 2; cc.M = 3; cc.V = ARITH_VOCAB; cc.maxT = 40;
        cc.mod = mods[which];
        const Batch bt = arith_window(3, 33, 13);
        CGTLoss loss;
        loss.eta = 0.5; loss.horizon = 6;
        CGT<double> ref(cc, Device::cpu, 3);
        CGT<float> gpu(cc, GPU, 3);
        ref.loss = loss;
        ref.set_aux_positions({5, 17, 26});
        gpu.loss = loss;
        gpu.set_aux_positions({5, 17, 26});
        check_rows(compare_devices(ref, gpu, bt, 4, param_std(cc.dx), 1e-5, 1e-3), 1e-5, 1e-3);
    }
}

TEST_CASE("cuda models: a checkpoint saved on one device loads on the other" * GPU_CASE) {
    REQUIRE_GPU();
    GPTConfig cfg;
    cfg.L = 2; cfg.C = 32; cfg.NH = 4; cfg.V = ARITH_VOCAB; cfg.maxT = 32;
    icl_test::TmpDir tmp;
    const std::string dir = tmp.path;
    const Batch bt = arith_window(2, 30, 15);
    // GPU -> CPU: the CPU model gets the GPU's parameters bit for bit and computes the same outputs
    GPT<float> gpu(cfg, GPU, 21);
    randomize_params(gpu, 22, 0.1);
    gpu.s.save(dir + "/gpu.safetensors");
    GPT<float> cpu(cfg, Device::cpu, 99);
    cpu.s.load(dir + "/gpu.safetensors");
    std::vector<float> pg = gpu.s.to_host(gpu.s.params, 0, gpu.s.ptable.total), pc = cpu.s.to_host(cpu.s.params, 0, cpu.s.ptable.total);
    CHECK(pg == pc);
    gpu.forward(bt);
    cpu.forward(bt);
    std::vector<float> og = gpu.outputs(), oc = cpu.outputs();
    check_close("logits, GPU model vs CPU model loaded from the GPU's checkpoint", Vec(oc.begin(), oc.end()), Vec(og.begin(), og.end()));
    // CPU -> GPU
    GPT<float> cpu2(cfg, Device::cpu, 31);
    randomize_params(cpu2, 32, 0.1);
    cpu2.s.save(dir + "/cpu.safetensors");
    GPT<float> gpu2(cfg, GPU, 98);
    gpu2.s.load(dir + "/cpu.safetensors");
    CHECK(gpu2.s.to_host(gpu2.s.params, 0, gpu2.s.ptable.total) == cpu2.s.to_host(cpu2.s.params, 0, cpu2.s.ptable.total));
    std::filesystem::remove_all(dir);
}

TEST_CASE("cuda models: TinT (the fp32 simulator on the GPU vs the fp64 simulator on the CPU): logits before/after and decoded weights" * GPU_CASE) {
    REQUIRE_GPU();
    set_tf32(false);
    GPTConfig g;
    g.L = 2; g.C = 24; g.NH = 3; g.V = 20; g.maxT = 16; g.act = "gelu";
    TintConfig c = TintConfig::from_aux(g);
    c.eta = 0.05;
    c.gate_scale = 20;  // tanh(20) rounds to 1 in fp32 and fp64: exact gates on both sides
    GPT<double> aux64(g, Device::cpu, 1);
    tint_random_aux(aux64, 931, 0.3);
    std::vector<double> p64 = aux64.s.to_host(aux64.s.params, 0, aux64.s.ptable.total);
    for (auto& v : p64) v = (double)(float)v;  // the same numbers on both sides
    aux64.s.upload(aux64.s.params, 0, p64.data(), p64.size());
    GPT<float> aux32(g, Device::cpu, 1);
    const std::vector<float> p32(p64.begin(), p64.end());
    aux32.s.upload(aux32.s.params, 0, p32.data(), p32.size());
    GPT<float> aux_gpu(g, GPU, 1);
    aux_gpu.s.upload(aux_gpu.s.params, 0, p32.data(), p32.size());
    // two sequences, one with the block ICL mask, so the batched masks and positions are exercised
    TintInput in;
    in.B = 2; in.T = 12;
    Rng r(932);
    for (int b = 0; b < in.B; b++)
        for (int t = 0; t < in.T; t++) { in.ids.push_back((int)r.below(g.V)); in.train.push_back(t < 7); in.pos.push_back(t % 6 + b); }
    in.icl.assign((size_t)in.B * in.T * in.T, 0);
    for (int b = 0; b < in.B; b++)
        for (int i = 0; i < in.T; i++)
            for (int j = 0; j <= i; j++) in.icl[((size_t)b * in.T + i) * in.T + j] = b == 0 || (i / 6 == j / 6);
    // β-only LayerNorm descent (the paper), with the γ descent (per-coordinate gates), and with App. G's loss head as
    // TinT layers (--loss-layers: the vocabulary softmax layer and the self / shift-by-one heads)
    for (int variant : {0, 1, 2}) {
        const bool lg = variant == 1;
        CAPTURE(variant);
        c.ln_gamma = lg;
        c.loss_layers = variant == 2;
        const TintOutput<double> ref = Tint<double>(c, Device::cpu).run(aux64, in, 2, 1);
        const TintOutput<float> cpu = Tint<float>(c, Device::cpu).run(aux32, in, 2, 1);
        // the simulator on the GPU, driven once by a CPU auxiliary model and once by a GPU one: the same result
        const TintOutput<float> gpu = Tint<float>(c, GPU).run(aux32, in, 2, 1);
        const TintOutput<float> gpu2 = Tint<float>(c, GPU).run(aux_gpu, in, 2, 1);
        CHECK(gpu.logits1 == gpu2.logits1);
        CHECK(gpu.params == gpu2.params);
        // fp32 error on the GPU no larger than a small multiple of the CPU fp32 simulator's own (the finite differences
        // of the LayerNorm / activation backward amplify rounding by ~1/ε, so fp32 has a visible error on both devices)
        auto relerr = [](const auto& a, const std::vector<double>& b) {
            double n = 0, z = 0;
            for (size_t i = 0; i < b.size(); i++) { n += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); z += b[i] * b[i]; }
            return std::sqrt(n / std::max(z, 1e-300));
        };
        struct Row { const char* what; double cpu, gpu; };
        const Row rows[] = {{"logits0", relerr(cpu.logits0, ref.logits0), relerr(gpu.logits0, ref.logits0)},
                            {"logits1", relerr(cpu.logits1, ref.logits1), relerr(gpu.logits1, ref.logits1)},
                            {"weights seq 0", relerr(cpu.params[0], ref.params[0]), relerr(gpu.params[0], ref.params[0])},
                            {"weights seq 1", relerr(cpu.params[1], ref.params[1]), relerr(gpu.params[1], ref.params[1])}};
        for (const Row& rw : rows) {
            INFO(std::string(rw.what) << ": CPU fp32 rel. err " << rw.cpu << ", GPU fp32 " << rw.gpu);
            CHECK(rw.gpu <= std::max(4 * rw.cpu, 1e-6));
        }
        CHECK(gpu.fwd_blocks == ref.fwd_blocks);
        CHECK(gpu.bwd_blocks == ref.bwd_blocks);
    }
}

TEST_CASE("cuda binaries: gradcheck --devices cpu,cuda passes on the GPT and the CGT" * GPU_CASE) {
    REQUIRE_GPU();
    Run g = run_bin("gradcheck --devices cpu,cuda --width 48 --heads 4 --batch 3 --seq 40");
    CAPTURE(g.out);
    CAPTURE(g.err);
    CHECK(g.code == 0);
    CHECK(g.out.find("all ") != std::string::npos);
    Run c = run_bin("gradcheck --devices cpu,cuda --model cgt --layers 3 --ell 1 --width 24 --dy 8 --seq 30 --batch 3 --vae --horizon 5");
    CAPTURE(c.out);
    CHECK(c.code == 0);
}

// ================================ the comparison machinery (CPU) ================================

TEST_CASE("compare_devices on the CPU: fp32 vs fp64 is within tolerance, and a wrong parameter is caught") {
    GPTConfig cfg;
    cfg.L = 2; cfg.C = 12; cfg.NH = 3; cfg.V = ARITH_VOCAB; cfg.maxT = 16;
    const Batch bt = arith_window(2, 9, 17);
    GPT<double> ref(cfg, Device::cpu, 1);
    randomize_params(ref, 2, 0.3);
    GPT<float> f(cfg, Device::cpu, 1);
    share_parameters(ref, f);
    // same parameters on both sides (the reference took the float-rounded values)
    std::vector<double> pr = ref.s.to_host(ref.s.params, 0, ref.s.ptable.total);
    std::vector<float> pf = f.s.to_host(f.s.params, 0, f.s.ptable.total);
    for (size_t i = 0; i < pr.size(); i++) REQUIRE(pr[i] == (double)pf[i]);
    const std::vector<TensorDiff> rows = compare_forward_backward(ref, f, bt, 1e-5, 1e-3);
    check_rows(rows, 1e-5, 1e-3);
    // every block's own activation gradients were compared, not views of block 0's (models/block.h)
    CHECK(ref.s.gtable.aliases == 0);
    CHECK(f.s.gtable.aliases == 0);
    CHECK(rows.size() == 1 + ref.s.atable.size() + ref.s.ptable.size() + ref.s.gtable.size());
    // a 10% change of one weight on the compared side shows up in the rows downstream of it
    const size_t off = f.s.ptable.offset("h.1.mlp.fc.w");
    float w = f.s.to_host(f.s.params, off, 1)[0] * 1.1f;
    f.s.upload(f.s.params, off, &w, 1);
    const std::vector<TensorDiff> bad = compare_forward_backward(ref, f, bt, 1e-5, 1e-3);
    int failed = 0;
    bool fch_failed = false;
    for (auto& r : bad) {
        failed += !r.pass;
        if (r.name == "h.1.fch") fch_failed = !r.pass;
    }
    CHECK(failed > 0);
    CHECK(fch_failed);
}

TEST_CASE("npydiff: identical dumps pass; a perturbed, a missing, an extra and a re-shaped tensor are reported") {
    GPTConfig cfg;
    cfg.L = 1; cfg.C = 12; cfg.NH = 3; cfg.V = ARITH_VOCAB; cfg.maxT = 16;
    const Batch bt = arith_window(2, 9, 19);
    GPT<float> m(cfg, Device::cpu, 3);
    m.forward(bt);
    m.backward();
    icl_test::TmpDir ta, tb;
    const std::string a = ta.path, b = tb.path;
    m.s.dump_npy(a, 0);
    m.s.dump_npy(b, 0);
    std::FILE* sink = std::fopen("/dev/null", "w");
    NpyDiffResult same = npydiff_dirs(a, b, 0, 0, sink);
    CHECK(same.ok());
    CHECK(same.compared == (int)(m.s.atable.size() + 2 * m.s.ptable.size() + m.s.gtable.size()));
    // perturb one activation by far more than the tolerance
    NpyArray qkv = npy_load(b + "/h.0.qkv.npy");
    std::vector<float> v = qkv.as<float>();
    v[5] += 0.01f;
    npy_save(b + "/h.0.qkv.npy", v.data(), qkv.shape);
    NpyDiffResult pert = npydiff_dirs(a, b, 1e-5, 1e-3, sink);
    CHECK(pert.failed == 1);
    CHECK(!pert.ok());
    // missing in B, extra in B, different shape
    std::filesystem::remove(b + "/wpe.npy");
    std::filesystem::copy_file(a + "/lnf.npy", b + "/extra.npy");
    {  // an extra tensor only counts when it is listed: rewrite B's index with it
        std::ifstream f(b + "/index.json");
        nlohmann::json j = nlohmann::json::parse(f);
        j["tensors"].push_back({{"name", "extra"}, {"file", "extra.npy"}, {"kind", "activation"}});
        for (auto it = j["tensors"].begin(); it != j["tensors"].end(); ++it)
            if ((*it)["name"] == "wpe") { j["tensors"].erase(it); break; }
        std::ofstream(b + "/index.json") << j.dump(2);
    }
    NpyArray lnfw = npy_load(b + "/lnf.w.npy");
    std::vector<float> lw = lnfw.as<float>();
    npy_save(b + "/lnf.w.npy", lw.data(), Shape{3, 4});
    NpyDiffResult all = npydiff_dirs(a, b, 1e-5, 1e-3, sink);
    std::fclose(sink);
    CHECK(all.missing == std::vector<std::string>{"wpe"});
    CHECK(all.extra == std::vector<std::string>{"extra"});
    REQUIRE(all.mismatched.size() == 1);
    CHECK(all.mismatched[0].find("lnf.w") == 0);
    CHECK(all.failed == 1);  // qkv still perturbed
    // the command line: exit 0 for identical dumps, 1 otherwise
    {
        Run ok = run_bin("npydiff " + a + " " + a);
        CHECK(ok.code == 0);
        CHECK(ok.out.find("within tolerance") != std::string::npos);
        Run bad = run_bin("npydiff " + a + " " + b);
        CHECK(bad.code == 1);
        CHECK(bad.out.find("missing from B") != std::string::npos);
        CHECK(bad.out.find("h.0.qkv") != std::string::npos);
        Run none = run_bin("npydiff " + a + " /nonexistent_dir");
        CHECK(none.code == 1);
        CHECK(none.err.find("not a directory") != std::string::npos);
    }
    std::filesystem::remove_all(a);
    std::filesystem::remove_all(b);
}

TEST_CASE("gradcheck --devices: cpu,cpu passes; cpu,cuda without a GPU or CUDA says why") {
    Run r = run_bin("gradcheck --devices cpu,cpu");
    CAPTURE(r.out);
    CAPTURE(r.err);
    CHECK(r.code == 0);
    CHECK(r.out.find("reference: CPU fp64") != std::string::npos);
    CHECK(r.out.find("grad.h.1.attn.qkv.w") != std::string::npos);
    Run bad = run_bin("gradcheck --devices gpu,cpu");
    CHECK(bad.code == 2);
    CHECK(bad.err.find("--devices: expected") != std::string::npos);
    if (!cuda_device_present()) {
        Run c = run_bin("gradcheck --devices cpu,cuda");
        CHECK(c.code != 0);
        CHECK((c.err.find("built without CUDA") != std::string::npos || c.err.find("no usable CUDA device") != std::string::npos));
    }
}

}  // TEST_SUITE("cuda")
