// bench_kernels.cu — the GPU measurements `bench --device cuda` prints beside its kernel timings (declared in
// cuda/layers.h): cuBLAS GEMM time, device copy bandwidth, the FP32 FMA throughput of the whole GPU, and the
// datasheet TF32 peak of known GPUs. Everything is timed with CUDA events on the device (median of reps).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/layers.h"
#include "engine/device.h"

namespace icl::cuda {

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double time_ms(void (*fn)(void*), void* arg, int reps) {
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    fn(arg);  // warm-up (allocations, cuBLAS heuristics, clocks)
    cudaCheck(cudaDeviceSynchronize());
    std::vector<double> ms;
    for (int r = 0; r < std::max(1, reps); r++) {
        cudaCheck(cudaEventRecord(a));
        fn(arg);
        cudaCheck(cudaEventRecord(b));
        cudaCheck(cudaEventSynchronize(b));
        float t = 0.0f;
        cudaCheck(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
    }
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
    return median(ms);
}

// x (n) = a small pseudo-random value per index (no host round trip; values in [−1, 1))
__global__ void fill_pattern_kernel(float* x, int64_t n, uint32_t seed) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = (float)(h & 0xffff) / 32768.0f - 1.0f;
    }
}

struct GemmArgs {
    bool ta, tb;
    int M, N, K;
    float *A, *B, *C;
};

double time_gemm_ms(bool transA, bool transB, int M, int N, int K, bool use_tf32, int reps) {
    GemmArgs g{transA, transB, M, N, K, nullptr, nullptr, nullptr};
    cudaCheck(cudaMalloc(&g.A, (size_t)M * K * sizeof(float)));
    cudaCheck(cudaMalloc(&g.B, (size_t)K * N * sizeof(float)));
    cudaCheck(cudaMalloc(&g.C, (size_t)M * N * sizeof(float)));
    fill_pattern_kernel<<<grid_for((int64_t)M * K), 256>>>(g.A, (int64_t)M * K, 1u);
    launchCheck("fill_pattern_kernel");
    fill_pattern_kernel<<<grid_for((int64_t)K * N), 256>>>(g.B, (int64_t)K * N, 2u);
    launchCheck("fill_pattern_kernel");
    const bool saved = icl::tf32_enabled();
    icl::set_tf32(use_tf32);
    const double ms = time_ms(
        [](void* p) {
            GemmArgs& a = *(GemmArgs*)p;
            // A (M,K) or stored (K,M); B (K,N) or stored (N,K); C (M,N)
            gemm(a.ta, a.tb, a.M, a.N, a.K, 1.0f, a.A, a.ta ? a.M : a.K, a.B, a.tb ? a.K : a.N, 0.0f, a.C, a.N);
        },
        &g, reps);
    icl::set_tf32(saved);
    cudaCheck(cudaFree(g.A));
    cudaCheck(cudaFree(g.B));
    cudaCheck(cudaFree(g.C));
    return ms;
}

struct CopyArgs { void *dst, *src; size_t bytes; };

double copy_bandwidth_gbs(size_t bytes, int reps) {
    CopyArgs c{nullptr, nullptr, bytes};
    cudaCheck(cudaMalloc(&c.src, bytes));
    cudaCheck(cudaMalloc(&c.dst, bytes));
    cudaCheck(cudaMemset(c.src, 1, bytes));
    const double ms = time_ms(
        [](void* p) {
            CopyArgs& a = *(CopyArgs*)p;
            cudaCheck(cudaMemcpy(a.dst, a.src, a.bytes, cudaMemcpyDeviceToDevice));
        },
        &c, reps);
    cudaCheck(cudaFree(c.src));
    cudaCheck(cudaFree(c.dst));
    return 2.0 * (double)bytes / (ms * 1e-3) * 1e-9;  // each byte is read once and written once
}

// Independent FMA chains per thread (more than the FMA latency × issue rate), no memory traffic; the result
// is stored only if impossible-looking, so the compiler cannot drop the loop.
constexpr int PEAK_ACC = 8, PEAK_ITERS = 1 << 12;  // ~0.3 s per run on an H100
__global__ void fma_peak_kernel(float* sink, float seed) {
    float acc[PEAK_ACC];
    for (int a = 0; a < PEAK_ACC; a++) acc[a] = seed + 0.001f * a + threadIdx.x * 1e-7f;
    const float mul = 0.999999f, add = 1e-7f;
    for (int i = 0; i < PEAK_ITERS; i++)
#pragma unroll
        for (int a = 0; a < PEAK_ACC; a++) acc[a] = fmaf(acc[a], mul, add);
    float s = 0.0f;
    for (int a = 0; a < PEAK_ACC; a++) s += acc[a];
    if (s == 12345.0f) sink[0] = s;
}

struct PeakArgs { float* sink; int blocks, threads; };

double fma_peak_tflops(int reps) {
    int dev = 0, sms = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    PeakArgs p{nullptr, sms * 8, 256};
    cudaCheck(cudaMalloc(&p.sink, sizeof(float)));
    const double ms = time_ms(
        [](void* q) {
            PeakArgs& a = *(PeakArgs*)q;
            fma_peak_kernel<<<a.blocks, a.threads>>>(a.sink, 1.0f);
            launchCheck("fma_peak_kernel");
        },
        &p, reps);
    cudaCheck(cudaFree(p.sink));
    const double flops = 2.0 * PEAK_ACC * (double)PEAK_ITERS * p.blocks * p.threads;
    return flops / (ms * 1e-3) * 1e-12;
}

// Dense (no sparsity) TF32 tensor-core peaks from NVIDIA's datasheets, TFLOP/s. 0 = not in the table.
double spec_tf32_peak_tflops() {
    int dev = 0;
    cudaDeviceProp p;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&p, dev));
    const std::string n = p.name;
    auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
    if (has("H200")) return 494.7;                       // H200 SXM
    if (has("H100") && has("PCIe")) return 378.0;        // H100 PCIe
    if (has("H100") && has("NVL")) return 417.5;         // H100 NVL (per GPU)
    if (has("H100")) return 494.7;                       // H100 SXM5 (e.g. "H100 80GB HBM3")
    if (has("A100")) return 156.0;                       // A100 (SXM and PCIe)
    return 0.0;
}

}  // namespace icl::cuda
