// benchmarks.h — what `bench` measures (src/bench.cpp holds its flags and subcommand table): GEMM GFLOP/s beside the
// measured FMA peak, train-step time of the GPT and the CGT with a per-layer-kind profile, and GB/s of the
// bandwidth-bound kernels beside the measured copy bandwidth. Each returns the process exit code.
#pragma once
#include "engine/device.h"
#include "models/cgt/cgt.h"
#include "models/gpt.h"

namespace icl {

// What every benchmark reads (from bench's flags).
struct BenchOptions {
    Device dev = Device::cpu;
    int threads = 1;  // OpenMP threads in use (after --threads is applied)
    int reps = 7;     // timed runs per measurement
    GPTConfig model;  // `bench model`: the GPT whose train step is timed
    int batch = 8, seq = 256;
    CGTConfig cgt;    // `bench cgt`: the CGT (its x stream = `model`)
    CGTLoss cgt_loss;
};

int bench_gemm(const BenchOptions& opt);     // fp32 GEMM at 1024³ and the GPT's shapes (cuBLAS fp32/TF32 on the GPU)
int bench_model(const BenchOptions& opt);    // train_gpt step: ms, tokens/s, GFLOP/s vs peak, time per layer kind
int bench_cgt(const BenchOptions& opt);      // train_cgt step vs the same-width GPT step, FLOPs per part
int bench_kernels(const BenchOptions& opt);  // bandwidth-bound layers: GB/s vs the measured copy bandwidth
int bench_attention(const BenchOptions& opt);  // the CPU softmax attention: materialising vs O(T) form, fwd/bwd ms

}  // namespace icl
