// benchmarks.cpp — the measurements behind `bench` (see benchmarks.h and src/bench.cpp).
//
//
//   bench [SUBCOMMAND]... [--device cpu|cuda] [--tf32] [--threads N] [--reps N]
//
// Subcommands (none given: run them all, in table order):
//   model   ms per train_gpt step (forward + backward + AdamW) and tokens/s at --layers/--width/--heads/
//           --seq/--batch/--vocab (default: L=6, C=384, NH=6, T=256, B=8, V=256), the step's analytic FLOPs
//           as GFLOP/s and % of the FMA peak, and the time per layer kind (matmul, attention, ...).
//   cgt     ms per train_cgt step (main pass + aux pass + R_C/R_D + backward + AdamW) at the model flags plus
//           --ell/--dy/--heads-y/--rank/--templates/--horizon (default: L=6, ℓ=4, d_x=384, d_y=128, NH_x=6, NH_y=2, r=4,
//           M=16, T=256, B=8, Δ=64, η=0.5, w_C=0.08, w_D=0.04), analytic FLOPs per part (x stream, y stream, generators,
//           aux pass, regularizers), GFLOP/s, time per layer kind, and — timed in the same run, steps interleaved —
//           the baseline GPT step at the same x width (L, d_x, NH_x, V, B, T) and the ratio of the two GFLOP/s.
//   gemm    GFLOP/s of the fp32 GEMM at 1024³ (all four transpose combinations) and at the GPT model's own
//           linear-layer shapes (forward, backward dinp, backward dweight), beside the machine's measured FP32
//           FMA peak and the fraction of it reached. --device cuda: cuBLAS TFLOP/s at 4096³ and the model's shapes,
//           fp32 and TF32 side by side, beside the GPU's measured FP32 FMA peak and its datasheet TF32 peak.
//   kernels the bandwidth-bound layers (residual, GELU, layernorm, cross-entropy, AdamW, embedding) at the model's
//           activation shapes: GB/s moved (a minimal-traffic count) against the device's measured copy bandwidth.
// --device cuda runs every subcommand on the GPU (model and cgt: the same models on Device::cuda, timed with
// device synchronization); --tf32 lets cuBLAS use TF32 tensor cores in model/cgt/kernels. Preset gpt2-small:
// the GPT-2 small shape (L=12, C=768, NH=12, V=50257, T=1024, B=8), the PyTorch comparison of tools/gpu_acceptance.sh.
//
// Every number is the median of --reps timed runs (the `best` column: the fastest run, for noisy machines);
// each run repeats the kernel until it has taken at least MIN_RUN_SECONDS, so short kernels are not swamped
// by timer noise.
//
// To add a benchmark (e.g. `bench model`: train-step ms and tokens/s), write `int bench_xxx(const BenchOptions&)`
// and add a row to kSubcommands; --help, the subcommand check and "no subcommand = run all" follow from the table.
#include <algorithm>
#include <cmath>
#include <map>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include "layers/simd.h"
#endif

#include "engine/common.h"
#include "engine/rng.h"
#include "layers/attention.h"
#include "layers/dispatch.h"
#include "layers/matmul.h"
#include "models/cgt/cgt.h"
#include "models/gpt.h"

#include "models/benchmarks.h"

namespace icl {

namespace {

constexpr double MIN_RUN_SECONDS = 0.05;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Timing {
    double median;  // seconds per call, median over the timed runs (the number reported)
    double best;    // fastest run (less sensitive to other processes on a noisy machine)
};

// Seconds per call of fn(): one warm-up call, then calibrate how many calls make one timed run last at least
// MIN_RUN_SECONDS, then `reps` timed runs. On the GPU, each timed run ends with a device synchronization, so
// asynchronous kernels are counted in full.
template <typename F>
Timing time_calls(F&& fn, int reps, Device dev = Device::cpu) {
    fn();
    device_sync(dev);
    int inner = 1;
    for (;;) {
        double t0 = now_seconds();
        for (int i = 0; i < inner; i++) fn();
        device_sync(dev);
        double dt = now_seconds() - t0;
        if (dt >= MIN_RUN_SECONDS || inner >= (1 << 20)) break;
        inner = std::max(inner * 2, (int)(inner * MIN_RUN_SECONDS / std::max(dt, 1e-9) * 1.2));
    }
    std::vector<double> runs;
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        for (int i = 0; i < inner; i++) fn();
        device_sync(dev);
        runs.push_back((now_seconds() - t0) / inner);
    }
    return {median(runs), *std::min_element(runs.begin(), runs.end())};
}

// ---------------------------------------------------------------------------------------------------------
// FP32 FMA peak: every thread runs a loop of independent multiply-adds (ACC accumulators, more than FMA
// latency × FMA ports, so the units never wait on a result), no memory traffic, in the widest vector ISA the
// binary was built for. Returns GFLOP/s (1 FMA = 2 flops).
constexpr int PEAK_ACC = 12;

#if defined(__AVX512F__)
float fma_loop(long iters, float seed) {
    __m512 acc[PEAK_ACC];
    for (int a = 0; a < PEAK_ACC; a++) acc[a] = _mm512_set1_ps(seed + 0.001f * a);
    const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
    for (long i = 0; i < iters; i++)
#pragma GCC unroll 16
        for (int a = 0; a < PEAK_ACC; a++) acc[a] = _mm512_fmadd_ps(acc[a], mul, add);
    __m512 s = acc[0];
    for (int a = 1; a < PEAK_ACC; a++) s = _mm512_add_ps(s, acc[a]);
    alignas(64) float out[16];
    _mm512_store_ps(out, s);
    return out[0] + out[15];
}
constexpr int PEAK_LANES = 16;
constexpr const char* PEAK_KIND = "FP32 FMA peak (AVX-512, 16 lanes)";
#elif defined(__AVX2__) && defined(__FMA__)
float fma_loop(long iters, float seed) {
    __m256 acc[PEAK_ACC];
    for (int a = 0; a < PEAK_ACC; a++) acc[a] = _mm256_set1_ps(seed + 0.001f * a);
    const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
    for (long i = 0; i < iters; i++)
#pragma GCC unroll 16
        for (int a = 0; a < PEAK_ACC; a++) acc[a] = _mm256_fmadd_ps(acc[a], mul, add);
    __m256 s = acc[0];
    for (int a = 1; a < PEAK_ACC; a++) s = _mm256_add_ps(s, acc[a]);
    alignas(32) float out[8];
    _mm256_store_ps(out, s);
    return out[0] + out[7];
}
constexpr int PEAK_LANES = 8;
constexpr const char* PEAK_KIND = "FP32 FMA peak (AVX2, 8 lanes)";
#else
// Portable (no AVX2/FMA at compile time): 4-wide GCC/Clang vector types, a multiply and an add per lane.
constexpr int PEAK_LANES = 4;
constexpr const char* PEAK_KIND = "FP32 mul+add peak (built without AVX2/FMA: 4 lanes)";
float fma_loop(long iters, float seed) {
    typedef float v4 __attribute__((vector_size(16)));
    v4 acc[PEAK_ACC];
    for (int a = 0; a < PEAK_ACC; a++) acc[a] = v4{seed, seed, seed, seed} + 0.001f * a;
    const v4 mul = {0.999999f, 0.999999f, 0.999999f, 0.999999f}, add = {1e-7f, 1e-7f, 1e-7f, 1e-7f};
    for (long i = 0; i < iters; i++)
#pragma GCC unroll 16
        for (int a = 0; a < PEAK_ACC; a++) acc[a] = acc[a] * mul + add;
    v4 s = acc[0];
    for (int a = 1; a < PEAK_ACC; a++) s += acc[a];
    return s[0] + s[3];
}
#endif

// Each timed run lasts at least 200 ms (the iteration count doubles until it does, which also wakes the threads
// and the clocks); the best of `reps` (at least 3) runs is the peak — a busy machine only ever makes a run slower.
double measure_fma_peak(int threads, int reps) {
    volatile float sink = 0;
    auto once = [&](long iters) {
        double t0 = now_seconds();
#pragma omp parallel num_threads(threads)
        {
            float r = fma_loop(iters, 1.0f);
            if (r == 12345.0f) sink = r;  // keep the result alive
        }
        return now_seconds() - t0;
    };
    long iters = 1 << 20;
    while (once(iters) < 0.2) iters *= 2;
    double best = 0;
    for (int r = 0; r < std::max(3, reps); r++)
        best = std::max(best, 2.0 * PEAK_ACC * PEAK_LANES * (double)iters * threads / once(iters) * 1e-9);
    (void)sink;
    return best;
}

// One GEMM shape of `bench gemm` (both devices).
struct GemmCase {
    std::string name;
    bool transA, transB;
    int M, N, K;
    float beta;
};

// ---------------------------------------------------------------------------------------------------------
// The peak a measurement is compared with: the CPU's measured FMA peak; on the GPU the measured FP32 FMA peak,
// or with --tf32 the datasheet TF32 tensor-core peak (when the GPU is in the table of cuda/bench_kernels.cu).
struct Peak {
    double gflops = 0;
    std::string kind;
};

Peak device_peak(const BenchOptions& opt) {
    if (opt.dev == Device::cpu) return {measure_fma_peak(opt.threads, opt.reps), PEAK_KIND};
#ifdef ICL_CUDA
    const double fp32 = cuda::fma_peak_tflops(opt.reps) * 1e3, tf32 = cuda::spec_tf32_peak_tflops() * 1e3;
    if (tf32_enabled() && tf32 > 0) return {tf32, strfmt("TF32 tensor-core peak (datasheet; FP32 FMA measured: %.1f TFLOP/s)", fp32 * 1e-3)};
    return {fp32, tf32_enabled() ? "FP32 FMA peak, measured (TF32 peak of this GPU unknown)" : "FP32 FMA peak, measured"};
#else
    require_device(opt.dev);
    return {};
#endif
}

std::string device_line(const BenchOptions& opt) {
    if (opt.dev == Device::cpu) return strfmt("CPU, %d thread%s", opt.threads, opt.threads == 1 ? "" : "s");
    return device_description(opt.dev) + (tf32_enabled() ? ", TF32 allowed" : ", TF32 off");
}

// ---------------------------------------------------------------------------------------------------------
// bench gemm --device cuda: cuBLAS at 4096³ and at the GPT's shapes, fp32 and TF32 side by side

#ifdef ICL_CUDA
int bench_gemm_gpu(const BenchOptions& opt) {
    const double fp32_peak = cuda::fma_peak_tflops(opt.reps), tf32_peak = cuda::spec_tf32_peak_tflops();
    std::vector<GemmCase> cases;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            if (!(ta && tb)) cases.push_back({strfmt("4096^3 %s%s", ta ? "T" : "N", tb ? "T" : "N"), (bool)ta, (bool)tb, 4096, 4096, 4096, 0.0f});
    const int rows = opt.batch * opt.seq, C = opt.model.C;
    const int shapes[][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, opt.model.V}};
    for (auto& sh : shapes) {
        const int c = sh[0], oc = sh[1];
        cases.push_back({strfmt("gpt fwd     C=%d OC=%d", c, oc), false, true, rows, oc, c, 0.0f});
        cases.push_back({strfmt("gpt bwd-dx  C=%d OC=%d", c, oc), false, false, rows, c, oc, 1.0f});
        cases.push_back({strfmt("gpt bwd-dW  C=%d OC=%d", c, oc), true, false, oc, c, rows, 1.0f});
    }
    std::printf("bench gemm: cuBLAS C(M,N) = op(A)·op(B), %s; ms = median of %d runs (CUDA events)\n", device_description(opt.dev).c_str(),
                opt.reps);
    std::printf("FP32 FMA peak, measured: %.1f TFLOP/s;  TF32 tensor-core peak (datasheet, dense): %s\n\n", fp32_peak,
                tf32_peak > 0 ? strfmt("%.1f TFLOP/s", tf32_peak).c_str() : "unknown for this GPU");
    std::printf("%-26s %4s %6s %6s %6s | %9s %9s %6s | %9s %9s %6s\n", "case", "op", "M", "N", "K", "fp32 ms", "TFLOP/s", "%FP32", "tf32 ms",
                "TFLOP/s", "%TF32");
    std::fflush(stdout);
    for (const GemmCase& c : cases) {
        const double flops = 2.0 * c.M * c.N * c.K;
        const double ms32 = cuda::time_gemm_ms(c.transA, c.transB, c.M, c.N, c.K, false, opt.reps);
        const double ms19 = cuda::time_gemm_ms(c.transA, c.transB, c.M, c.N, c.K, true, opt.reps);
        const double t32 = flops / (ms32 * 1e-3) * 1e-12, t19 = flops / (ms19 * 1e-3) * 1e-12;
        std::printf("%-26s %3s%s %6d %6d %6d | %9.3f %9.1f %5.1f%% | %9.3f %9.1f %s\n", c.name.c_str(), c.transA ? "T" : "N",
                    c.transB ? "T" : "N", c.M, c.N, c.K, ms32, t32, 100.0 * t32 / fp32_peak, ms19, t19,
                    tf32_peak > 0 ? strfmt("%5.1f%%", 100.0 * t19 / tf32_peak).c_str() : "     -");
        std::fflush(stdout);
    }
    return 0;
}
#else
int bench_gemm_gpu(const BenchOptions& opt) {
    require_device(opt.dev);  // "built without CUDA"
    return 1;
}
#endif

// ---------------------------------------------------------------------------------------------------------
// bench gemm

}  // namespace

int bench_gemm(const BenchOptions& opt) {
    if (opt.dev == Device::cuda) return bench_gemm_gpu(opt);
    const int threads = opt.threads;
    const double peak = measure_fma_peak(threads, opt.reps);

    std::vector<GemmCase> cases;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            cases.push_back({strfmt("1024^3 %s%s", ta ? "T" : "N", tb ? "T" : "N"), (bool)ta, (bool)tb, 1024, 1024,
                             1024, 0.0f});
    // The GPT model's linear layers: N = B*T = 8*256 rows, (C, OC) per layer (qkv, attn proj, fc, fc proj, lm head).
    const int rows = 2048;
    const int shapes[][2] = {{384, 1152}, {384, 384}, {384, 1536}, {1536, 384}, {384, 256}};
    for (auto& s : shapes) {
        int C = s[0], OC = s[1];
        cases.push_back({strfmt("gpt fwd     C=%d OC=%d", C, OC), false, true, rows, OC, C, 0.0f});   // out = inp·Wᵀ
        cases.push_back({strfmt("gpt bwd-dx  C=%d OC=%d", C, OC), false, false, rows, C, OC, 1.0f});  // dinp += dout·W
        cases.push_back({strfmt("gpt bwd-dW  C=%d OC=%d", C, OC), true, false, OC, C, rows, 1.0f});   // dW += doutᵀ·inp
    }

    std::printf("bench gemm: fp32 C(M,N) = op(A)·op(B) (+ C), %d thread%s; ms, GFLOP/s and %%peak are medians of %d "
                "runs, best = fastest run (GFLOP/s)\n",
                threads, threads == 1 ? "" : "s", opt.reps);
    std::printf("%s, measured on %d thread%s: %.1f GFLOP/s;  GEMM kernel: %s\n\n", PEAK_KIND, threads, threads == 1 ? "" : "s", peak,
                gemm_isa());
    std::printf("%-26s %5s %5s %5s %5s %9s %9s %7s %9s %6s\n", "case", "op", "M", "N", "K", "ms", "GFLOP/s", "%peak",
                "best", "grid");
    std::fflush(stdout);

    Rng rng(1234);
    std::vector<double> all;
    for (const GemmCase& c : cases) {
        // A is (M,K) or stored (K,M); B is (K,N) or stored (N,K); C (M,N).
        const int lda = c.transA ? c.M : c.K, ldb = c.transB ? c.K : c.N;
        std::vector<float> A((size_t)c.M * c.K), B((size_t)c.K * c.N), C((size_t)c.M * c.N);
        fill_normal(A.data(), A.size(), rng);
        fill_normal(B.data(), B.size(), rng);
        fill_normal(C.data(), C.size(), rng, 0.0, 1e-3);
        Timing t = time_calls(
            [&] {
                gemm<float>(c.transA, c.transB, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, c.beta, C.data(), c.N);
            },
            opt.reps);
        const double flops = 2.0 * c.M * c.N * c.K;
        const double gf = flops / t.median * 1e-9;
        all.push_back(gf);
        int tm, tn;  // how the threads split C: tm row blocks × tn column blocks
        gemm_thread_grid(c.M, c.N, threads, tm, tn);
        std::printf("%-26s %4s%s %5d %5d %5d %9.3f %9.1f %6.1f%% %9.1f %6s\n", c.name.c_str(), c.transA ? "T" : "N",
                    c.transB ? "T" : "N", c.M, c.N, c.K, t.median * 1e3, gf, 100.0 * gf / peak, flops / t.best * 1e-9,
                    strfmt("%dx%d", tm, tn).c_str());
        std::fflush(stdout);
    }
    double mn = *std::min_element(all.begin(), all.end());
    std::printf("\nmin over cases: %.1f GFLOP/s (%.1f%% of peak)\n", mn, 100.0 * mn / peak);
    return 0;
}

namespace {

// ---------------------------------------------------------------------------------------------------------
// bench model

// Where the time of one step goes: one more profiled run of step() per rep, per layer kind (op:: dispatch
// timers, median over reps), largest first.
template <typename Step>
void print_profile(Step& step, int reps) {
    std::map<std::string, std::vector<double>> per_kind;
    std::vector<double> totals;
    op::Profile& prof = op::op_profile();
    for (int r = 0; r < reps; r++) {
        prof.reset();
        prof.enabled = true;
        double t0 = now_seconds();
        step();
        totals.push_back(now_seconds() - t0);
        prof.enabled = false;
        double sum = 0;
        for (auto& kv : prof.seconds) { per_kind[kv.first].push_back(kv.second); sum += kv.second; }
        per_kind["(other: zeroing, host loss, copies)"].push_back(totals.back() - sum);
    }
    const double total = median(totals);
    std::printf("  %-38s %9s %7s\n", "time per layer kind (median)", "ms", "share");
    std::vector<std::pair<double, std::string>> rows;
    for (auto& kv : per_kind) rows.push_back({median(kv.second), kv.first});
    std::sort(rows.rbegin(), rows.rend());
    for (auto& r : rows) std::printf("  %-38s %9.2f %6.1f%%\n", r.second.c_str(), r.first * 1e3, 100.0 * r.first / total);
    std::printf("  %-38s %9.2f\n", "total (profiled step)", total * 1e3);
}

// FLOPs of one GPT train step, counted analytically: every matmul 2·M·N·K; causal attention counts only the
// (T+1)/2 keys each query sees, for QKᵀ and P·V; backward = 2× forward for both. Elementwise work is left out.
double gpt_step_flops(const GPTConfig& c, int B, int T) {
    const double N = (double)B * T, C = c.C;
    double fwd = c.L * 2.0 * N * (C * 3 * C + C * C + 2 * C * 4 * C);        // qkv, proj, fc, fc proj
    fwd += c.L * 2.0 * 2.0 * B * (double)T * (T + 1) / 2.0 * C;              // QKᵀ and P·V over the heads
    fwd += 2.0 * N * C * (c.d_out > 0 ? c.d_out : c.V);                      // LM head
    return 3.0 * fwd;
}

}  // namespace

// Bytes of the attention activations the blocks keep between forward and backward (<h>lse, or <h>att with modifications).
static double attention_bytes(const ModelState<float>& s) {
    double n = 0;
    for (const TensorSpec& t : s.atable.specs) {
        const std::string& nm = t.name;
        if ((nm.size() >= 3 && nm.compare(nm.size() - 3, 3, "lse") == 0) || (nm.size() >= 4 && nm.compare(nm.size() - 4, 4, ".att") == 0))
            n += t.numel() * 4.0;
    }
    return n;
}

int bench_model(const BenchOptions& opt) {
    const GPTConfig& cfg = opt.model;
    const int B = opt.batch, T = opt.seq;
    const Peak peak = device_peak(opt);
    GPT<float> m(cfg, opt.dev, 1);
    Rng rng(7);
    Batch bt;
    bt.B = B;
    bt.T = T;
    for (int i = 0; i < B * T; i++) {
        bt.tokens.push_back((int)rng.below(cfg.V));
        bt.targets.push_back((int)rng.below(cfg.V));
        bt.mask.push_back(1.0f);
    }
    AdamWConfig adam;
    auto step = [&] {
        m.forward(bt);
        m.backward();
        m.s.update(adam, 1e-4);
        device_sync(opt.dev);  // the GPU's last kernels are part of the step
    };
    step();  // warm-up: allocates the activations
    std::vector<double> times;
    for (int r = 0; r < opt.reps; r++) {
        double t0 = now_seconds();
        step();
        times.push_back(now_seconds() - t0);
    }
    const double t = median(times), best = *std::min_element(times.begin(), times.end());
    const double flops = gpt_step_flops(cfg, B, T);
    std::printf("bench model: train_gpt step (forward + backward + AdamW), fp32, %s\n", device_line(opt).c_str());
    std::printf("  GPT L=%d C=%d NH=%d V=%d, B=%d T=%d: %lld parameters, %.1f GFLOP per step (analytic)\n", cfg.L, cfg.C, cfg.NH,
                cfg.V, B, T, (long long)cfg.num_params(), flops * 1e-9);
    std::printf("  %s: %.1f GFLOP/s;  GEMM kernel: %s\n", peak.kind.c_str(), peak.gflops, opt.dev == Device::cpu ? gemm_isa() : "cuBLAS");
    std::printf("  step: median %.1f ms (best %.1f ms) over %d steps; %.0f tokens/s; %.1f GFLOP/s = %.1f%% of peak\n", t * 1e3,
                best * 1e3, opt.reps, B * T / t, flops / t * 1e-9, 100.0 * flops / t * 1e-9 / peak.gflops);
    // memory: the activation table, their gradients, and the parameter-sized buffers (params, grads, AdamW m, v)
    const double act = m.s.atable.total * 4.0, dact = m.s.gtable.total * 4.0, par = m.s.ptable.total * 4.0 * 4;
    std::printf("  memory: activations %.1f MB (attention: %.1f MB, row log-sum-exp only), activation gradients %.1f MB, parameters + "
                "gradients + AdamW moments %.1f MB, %s\n\n", act / 1e6, attention_bytes(m.s) / 1e6, dact / 1e6, par / 1e6,
                opt.dev == Device::cpu ? strfmt("attention scratch %.1f MB + packed operands %.1f MB a thread", attention_lse_scratch_size(B, T, cfg.NH) * 4.0 / 1e6,
                                                attention_detail::attention_pack_floats(T, cfg.C / cfg.NH) * 4.0 / 1e6).c_str()
                                       : "attention scratch: the CUDA backend's own (cuda/common.cuh)");
    print_profile(step, opt.reps);
    return 0;
}

namespace {

// ---------------------------------------------------------------------------------------------------------
// bench cgt

Batch random_token_batch(int B, int T, int V, uint64_t seed) {
    Rng rng(seed);
    Batch bt;
    bt.B = B;
    bt.T = T;
    for (int i = 0; i < B * T; i++) {
        bt.tokens.push_back((int)rng.below(V));
        bt.targets.push_back((int)rng.below(V));
        bt.mask.push_back(1.0f);
    }
    return bt;
}

}  // namespace

int bench_cgt(const BenchOptions& opt) {
    const CGTConfig& cfg = opt.cgt;
    const GPTConfig gcfg = cfg.x_config();
    const int B = opt.batch, T = opt.seq;
    const Peak pk = device_peak(opt);
    const double peak = pk.gflops;
    CGT<float> m(cfg, opt.dev, 1);
    m.loss = opt.cgt_loss;
    GPT<float> g(gcfg, opt.dev, 1);
    const Batch bt = random_token_batch(B, T, cfg.V, 7);
    AdamWConfig adam;
    auto cgt_step = [&] {
        m.forward(bt);
        m.backward();
        m.s.update(adam, 1e-4);
        device_sync(opt.dev);
    };
    auto gpt_step = [&] {
        g.forward(bt);
        g.backward();
        g.s.update(adam, 1e-4);
        device_sync(opt.dev);
    };
    cgt_step();  // warm-up: allocates the activations
    gpt_step();
    // interleaved, so both see the same machine load
    std::vector<double> tc, tg;
    for (int r = 0; r < opt.reps; r++) {
        double t0 = now_seconds();
        cgt_step();
        double t1 = now_seconds();
        gpt_step();
        tc.push_back(t1 - t0);
        tg.push_back(now_seconds() - t1);
    }
    const CGTFlops f = m.flops(B, T);
    const double fg = gpt_step_flops(gcfg, B, T);
    const double t_c = median(tc), t_g = median(tg);
    const double gf_c = f.total_step / t_c * 1e-9, gf_g = fg / t_g * 1e-9;
    const CGTLoss& ls = m.loss;
    std::printf("bench cgt: train_cgt step (main + aux pass, regularizers, backward, AdamW) vs the x-only GPT step, fp32, %s\n",
                device_line(opt).c_str());
    std::printf("  CGT L=%d ell=%d d_x=%d d_y=%d NH_x=%d NH_y=%d r=%d M=%d V=%d, B=%d T=%d, eta=%g horizon=%d w_C=%g w_D=%g: %lld parameters "
                "(GPT %lld)\n",
                cfg.L, cfg.ell, cfg.dx, cfg.dy, cfg.NHx, cfg.NHy, cfg.r, cfg.M, cfg.V, B, T, ls.eta, ls.horizon, ls.wC, ls.wD,
                (long long)cfg.num_params(), (long long)gcfg.num_params());
    std::printf("  %s: %.1f GFLOP/s;  GEMM kernel: %s\n", pk.kind.c_str(), peak, opt.dev == Device::cpu ? gemm_isa() : "cuBLAS");
    std::printf("  analytic FLOPs per step (forward; a step counts 3x):\n");
    auto row = [&](const char* name, double fwd) {
        std::printf("    %-34s %9.3f GFLOP fwd  %6.1f%%\n", name, fwd * 1e-9, 100.0 * 3 * fwd / f.total_step);
    };
    row("main pass, x stream + head", f.x_fwd);
    row("main pass, y stream (dual blocks)", f.y_fwd);
    row("main pass, generators T^k", f.gen_fwd);
    row("aux pass, x-only model", f.aux_fwd - f.aux_gen_fwd);
    row("aux pass, generators T^k", f.aux_gen_fwd);
    row("regularizers R_C, R_D", f.reg_fwd);
    std::printf("    %-34s %9.3f GFLOP per step (GPT: %.3f)\n", "total (3x forward)", f.total_step * 1e-9, fg * 1e-9);
    std::printf("  CGT step: median %.1f ms (best %.1f ms) over %d steps; %.0f tokens/s; %.1f GFLOP/s = %.1f%% of peak\n", t_c * 1e3,
                *std::min_element(tc.begin(), tc.end()) * 1e3, opt.reps, B * T / t_c, gf_c, 100.0 * gf_c / peak);
    std::printf("  GPT step: median %.1f ms (best %.1f ms) over %d steps; %.0f tokens/s; %.1f GFLOP/s = %.1f%% of peak\n", t_g * 1e3,
                *std::min_element(tg.begin(), tg.end()) * 1e3, opt.reps, B * T / t_g, gf_g, 100.0 * gf_g / peak);
    std::printf("  CGT / GPT: %.1f%% of the baseline's GFLOP/s (target >= 90%%), step time x%.2f\n\n", 100.0 * gf_c / gf_g, t_c / t_g);
    std::printf("  CGT step:\n");
    print_profile(cgt_step, opt.reps);
    std::printf("\n  GPT step:\n");
    print_profile(gpt_step, opt.reps);
    return 0;
}

namespace {

// ---------------------------------------------------------------------------------------------------------
// bench kernels: the bandwidth-bound layers at the model's activation shapes, GB/s against the copy bandwidth

// Bytes per second of a large copy: cudaMemcpy device-to-device on the GPU; on the CPU the threads copy
// their own slices (each byte counted once read and once written).
double copy_bandwidth_gbs(const BenchOptions& opt, size_t bytes) {
#ifdef ICL_CUDA
    if (opt.dev == Device::cuda) return cuda::copy_bandwidth_gbs(bytes, opt.reps);
#endif
    std::vector<char> a(bytes, 1), b(bytes);
    const int nchunk = 64;
    Timing t = time_calls(
        [&] {
#pragma omp parallel for schedule(static)
            for (int k = 0; k < nchunk; k++) {
                const size_t i0 = bytes * k / nchunk, i1 = bytes * (k + 1) / nchunk;
                std::memcpy(b.data() + i0, a.data() + i0, i1 - i0);
            }
        },
        opt.reps);
    return 2.0 * (double)bytes / t.median * 1e-9;
}

}  // namespace

int bench_kernels(const BenchOptions& opt) {
    const Device dev = opt.dev;
    const GPTConfig& cfg = opt.model;
    const int N = opt.batch * opt.seq, C = cfg.C, V = cfg.V;
    const int64_t nc = (int64_t)N * C, n4 = 4 * nc, nv = (int64_t)N * V, P = cfg.num_params();
    // device buffers with random contents (uploaded once from the host)
    Rng rng(42);
    const int64_t biggest = std::max({n4, nv, P});
    std::vector<float> host((size_t)biggest);
    fill_uniform(host.data(), host.size(), rng, -1.0, 1.0);
    auto buf = [&](int64_t n) {
        Buffer<float> b(dev, (size_t)n);
        device_copy(dev, b.ptr, host.data(), (size_t)n * sizeof(float), Copy::host_to_device);
        return b;
    };
    Buffer<float> a1 = buf(n4), a2 = buf(n4), a3 = buf(n4), a4 = buf(n4);
    Buffer<float> w = buf(C), bias = buf(C), mean = buf(N), rstd = buf(N);
    Buffer<float> logits = buf(nv), probs = buf(nv), dlogits = buf(nv), losses = buf(N), dl = buf(N);
    Buffer<float> wte = buf((int64_t)V * C), wpe = buf((int64_t)opt.seq * C);
    Buffer<float> p = buf(P), g = buf(P), m = buf(P), v = buf(P);
    std::vector<int> tok(N);
    for (auto& t : tok) t = (int)rng.below(V);
    Buffer<int> dtok(dev, N);
    device_copy(dev, dtok.ptr, tok.data(), N * sizeof(int), Copy::host_to_device);
    // layernorm backward reads a consistent mean/rstd: one forward first
    op::layernorm_forward(dev, a2.ptr, mean.ptr, rstd.ptr, a1.ptr, w.ptr, bias.ptr, N, C);

    const double copy = copy_bandwidth_gbs(opt, (size_t)std::max<int64_t>(n4 * 4, (int64_t)1 << (dev == Device::cuda ? 28 : 26)));
    std::printf("bench kernels: bandwidth-bound layers at the model's shapes (N = B*T = %d, C = %d, V = %d, %lld parameters), %s\n", N, C, V,
                (long long)P, device_line(opt).c_str());
    std::printf("bytes = a minimal-traffic count (each input read once, each output written once); copy bandwidth, measured: %.1f GB/s\n\n",
                copy);
    std::printf("%-22s %-12s %10s %10s %9s\n", "kernel", "shape", "ms", "GB/s", "%copy");
    auto row = [&](const char* name, const std::string& shape, double bytes, auto fn) {
        Timing t = time_calls(fn, opt.reps, dev);
        const double gbs = bytes / t.median * 1e-9;
        std::printf("%-22s %-12s %10.3f %10.1f %8.1f%%\n", name, shape.c_str(), t.median * 1e3, gbs, 100.0 * gbs / copy);
        std::fflush(stdout);
    };
    const std::string sNC = strfmt("(%d,%d)", N, C), sN4 = strfmt("(%d,%d)", N, 4 * C), sNV = strfmt("(%d,%d)", N, V);
    row("residual fwd", sNC, 3.0 * nc * 4, [&] { op::residual_forward(dev, a3.ptr, a1.ptr, a2.ptr, nc); });
    row("residual bwd", sNC, 5.0 * nc * 4, [&] { op::residual_backward(dev, a3.ptr, a4.ptr, a1.ptr, nc); });
    row("gelu fwd", sN4, 2.0 * n4 * 4, [&] { op::gelu_forward(dev, a2.ptr, a1.ptr, n4); });
    row("gelu bwd", sN4, 4.0 * n4 * 4, [&] { op::gelu_backward(dev, a3.ptr, a1.ptr, a2.ptr, n4); });
    row("layernorm fwd", sNC, 2.0 * nc * 4, [&] { op::layernorm_forward(dev, a3.ptr, mean.ptr, rstd.ptr, a1.ptr, w.ptr, bias.ptr, N, C); });
    row("layernorm bwd", sNC, 4.0 * nc * 4,
        [&] { op::layernorm_backward(dev, a4.ptr, a2.ptr, a2.ptr + C, a3.ptr, a1.ptr, w.ptr, mean.ptr, rstd.ptr, N, C); });
    row("encoder fwd", sNC, 3.0 * nc * 4,
        [&] { op::encoder_forward(dev, a3.ptr, dtok.ptr, (const int*)nullptr, wte.ptr, wpe.ptr, opt.batch, opt.seq, C, V, opt.seq); });
    row("crossentropy fwd", sNV, 2.0 * nv * 4, [&] { op::crossentropy_forward(dev, losses.ptr, probs.ptr, logits.ptr, dtok.ptr, N, V); });
    row("crossentropy bwd", sNV, 3.0 * nv * 4, [&] { op::crossentropy_backward(dev, dlogits.ptr, dl.ptr, probs.ptr, dtok.ptr, N, V); });
    row("adamw", strfmt("(%lld,)", (long long)P), 7.0 * P * 4,
        [&] { op::adamw_update(dev, p.ptr, g.ptr, m.ptr, v.ptr, P, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1); });
    return 0;
}

// The CPU softmax attention's two forms (layers/attention.h) at the model's B, T, C, NH, one layer: the materialising
// one (forward saves the probabilities att (B,NH,T,T), backward reads them) and the O(T)-memory one the models run
// (forward saves each row's log-sum-exp, backward recomputes the probabilities a block of keys at a time). Issue 15
// asks the second to be no slower at T = 256 and faster at T >= 1024. The four calls alternate round by round,
// each round a run of MIN_RUN_SECONDS or more; medians of --reps rounds, and their ratios.
int bench_attention(const BenchOptions& opt) {
    if (opt.dev != Device::cpu) {
        std::printf("bench attention: skipped on --device %s (it compares the CPU's two attention forms)\n", device_name(opt.dev));
        return 0;
    }
    const int B = opt.batch, T = opt.seq, C = opt.model.C, NH = opt.model.NH, hs = C / NH;
    const double att_bytes = 4.0 * B * NH * T * T;
    if (att_bytes > 8e9) {
        std::fprintf(stderr, "bench attention: the materialising form's probabilities would take %.1f GB (B*NH*T*T floats); lower --seq or --batch\n",
                     att_bytes / 1e9);
        return 2;
    }
    Rng rng(42);
    std::vector<float> qkv((size_t)B * T * 3 * C), out((size_t)B * T * C), dout(out.size()), dqkv(qkv.size()), lse((size_t)B * NH * T);
    fill_uniform(qkv.data(), qkv.size(), rng, -1.0, 1.0);
    fill_uniform(dout.data(), dout.size(), rng, -1.0, 1.0);
    std::vector<float> att((size_t)B * NH * T * T), sc_mat(attention_scratch_size(B, T, C, NH)), sc_lse(attention_lse_scratch_size(B, T, NH));
    std::printf("bench attention: causal softmax attention, one layer, B=%d T=%d C=%d NH=%d (head size %d), %s\n", B, T, C, NH, hs,
                device_line(opt).c_str());
    std::printf("  materialising: saves att (B,NH,T,T), %.1f MB; O(T): saves the row log-sum-exp (B,NH,T), %.2f MB, and recomputes the "
                "probabilities in backward\n",
                att_bytes / 1e6, 4.0 * lse.size() / 1e6);
    std::printf("  medians of %d rounds, the four calls alternating; each round >= %.0f ms of calls\n\n", opt.reps, MIN_RUN_SECONDS * 1e3);
    std::function<void()> fns[4] = {
        [&] { attention_forward(out.data(), att.data(), (float*)nullptr, qkv.data(), B, T, C, NH); },
        [&] { attention_backward(dqkv.data(), sc_mat.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH); },
        [&] { attention_forward_lse(out.data(), lse.data(), sc_lse.data(), qkv.data(), B, T, C, NH); },
        [&] { attention_backward_lse(dqkv.data(), sc_lse.data(), dout.data(), out.data(), qkv.data(), lse.data(), B, T, C, NH); },
    };
    int inner[4];
    for (int f = 0; f < 4; f++) {  // a warm-up call, then the calls per round
        fns[f]();
        const double t0 = now_seconds();
        fns[f]();
        inner[f] = std::max(1, (int)std::ceil(MIN_RUN_SECONDS / std::max(now_seconds() - t0, 1e-9)));
    }
    std::vector<double> runs[4];
    for (int r = 0; r < opt.reps; r++)
        for (int f = 0; f < 4; f++) {
            const double t0 = now_seconds();
            for (int i = 0; i < inner[f]; i++) fns[f]();
            runs[f].push_back((now_seconds() - t0) / inner[f]);
        }
    double ms[4];
    for (int f = 0; f < 4; f++) ms[f] = median(runs[f]) * 1e3;
    std::printf("%-24s %10s %10s %12s\n", "form", "fwd ms", "bwd ms", "fwd+bwd ms");
    std::printf("%-24s %10.3f %10.3f %12.3f\n", "materialising (att)", ms[0], ms[1], ms[0] + ms[1]);
    std::printf("%-24s %10.3f %10.3f %12.3f\n", "O(T) (row lse)", ms[2], ms[3], ms[2] + ms[3]);
    std::printf("%-24s %10.3f %10.3f %12.3f\n", "O(T) / materialising", ms[2] / ms[0], ms[3] / ms[1], (ms[2] + ms[3]) / (ms[0] + ms[1]));
    return 0;
}

}  // namespace icl
