// common.cuh — what every CUDA file of the backend shares: error checks, launch helpers, warp/block
// reductions, the cuBLAS handle and the row-major GEMM wrapper, grow-only scratch buffers, and the
// deterministic reductions (column sums, a double-precision total).
//
// Conventions of the whole cuda/ folder
//   * Every CUDA runtime call is wrapped in cudaCheck(...), every cuBLAS call in cublasCheck(...), and every
//     kernel launch is followed by launchCheck(): a failure prints ONE line naming file:line and the call,
//     then exits with status 1 (llm.c's xxxCheck). Set ICL_CUDA_SYNC=1 in the environment to synchronize
//     after every launch, so an asynchronous fault (bad address, device assert) is reported at the launch
//     that caused it instead of at the next synchronizing call.
//   * One stream (the legacy default stream): kernels, cuBLAS and cudaMemcpy run in issue order, so a
//     scratch buffer can be reused by the next call without further synchronization.
//   * Row-major everywhere, exactly like the CPU layers (src/layers/*.h). cuBLAS is column-major; gemm()
//     below does the usual transposition trick so callers never think about it.
//   * fp32 storage and arithmetic; reductions that the CPU does in double (grad norm, regularizer sums)
//     are done in double here too.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "engine/common.h"  // ICL_ASSERT, fail(), strfmt

namespace icl::cuda {

// ---- error checks ---------------------------------------------------------------------------------------

[[noreturn]] inline void fatal(const char* what, const char* call, const char* file, int line) {
    std::fflush(stdout);
    std::fprintf(stderr, "[icl CUDA error] %s:%d: %s failed: %s\n", file, line, call, what);
    std::fflush(stderr);
    std::exit(1);
}
inline void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
    if (e != cudaSuccess) {
        char buf[256];
        std::snprintf(buf, sizeof buf, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        fatal(buf, call, file, line);
    }
}
inline void check_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS) fatal(cublasGetStatusString(s), call, file, line);
}
bool sync_after_launch();  // ICL_CUDA_SYNC=1 (read once; cuda_device.cu)
inline void check_launch(const char* kernel, const char* file, int line) {
    check_cuda(cudaGetLastError(), kernel, file, line);
    if (sync_after_launch()) check_cuda(cudaDeviceSynchronize(), kernel, file, line);
}

}  // namespace icl::cuda

#define cudaCheck(call) ::icl::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define cublasCheck(call) ::icl::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// After every kernel<<<...>>>(...): launchCheck("kernel_name");
#define launchCheck(kernel) ::icl::cuda::check_launch("launch of " kernel, __FILE__, __LINE__)

// Inside kernels: a broken invariant (e.g. a token id out of range) prints where and traps; the host then
// fails at the next check with "unspecified launch failure" (run with ICL_CUDA_SYNC=1 to see which launch).
#define DEVICE_ASSERT(cond)                                                                                 \
    do {                                                                                                    \
        if (!(cond)) {                                                                                      \
            printf("[icl CUDA device assert] %s:%d: `%s` failed (block %d, thread %d)\n", __FILE__, __LINE__, \
                   #cond, (int)blockIdx.x, (int)threadIdx.x);                                               \
            __trap();                                                                                       \
        }                                                                                                   \
    } while (0)

namespace icl::cuda {

// ---- launch helpers -------------------------------------------------------------------------------------

inline int ceil_div(int64_t a, int64_t b) { return (int)((a + b - 1) / b); }
// Blocks of `per` threads (or rows) covering n items — at least one, so an empty problem is still a legal launch
// (every kernel checks its index against n).
inline int blocks(int64_t n, int64_t per) { return n > 0 ? ceil_div(n, per) : 1; }
constexpr int WARP = 32;
// Grid of `threads`-wide blocks covering n elements, capped so the grid stays legal; elementwise kernels
// then loop grid-stride (i += gridDim.x·blockDim.x), so any n works.
inline int grid_for(int64_t n, int threads = 256) {
    int64_t g = (n + threads - 1) / threads;
    if (g < 1) g = 1;
    return (int)(g > 65535LL * 32 ? 65535LL * 32 : g);
}

// ---- warp and block reductions ----------------------------------------------------------------------------

__device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;  // every lane holds the sum (fixed butterfly order: deterministic)
}
__device__ inline double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` needs 32 elements. Contains __syncthreads(): call it from every thread of the block.
template <typename T>
__device__ inline T block_sum(T v, T* shared) {
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nwarps = blockDim.x / WARP;
    v = warp_sum(v);
    __syncthreads();  // `shared` may still be read by a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    T r = lane < nwarps ? shared[lane] : T(0);
    return warp_sum(r);
}
__device__ inline float block_max(float v, float* shared) {
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nwarps = blockDim.x / WARP;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? shared[lane] : -INFINITY;
    return warp_max(r);
}

// ---- cuBLAS ---------------------------------------------------------------------------------------------

cublasHandle_t cublas();        // the process-wide handle (created on first use; cuda_device.cu)
bool tf32();                    // icl::tf32_enabled(): --tf32 given (engine/device.h)

// Row-major C (M,N) = alpha·op(A)·op(B) + beta·C, op(X) = X or Xᵀ, leading dimensions lda/ldb/ldc — the
// same contract as the CPU gemm() of src/layers/matmul.h (beta == 0: C is never read, NaN there is fine).
// cuBLAS sees the column-major view Cᵀ (N,M) = op(B)ᵀ·op(A)ᵀ, i.e. the operands swapped. Computes in
// fp32, or with TF32 tensor cores when --tf32 allowed it.
void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float beta,
          float* C, int ldc);
// The same for `count` independent products whose operands sit at fixed strides (in elements) from the first.
void gemm_strided(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, int64_t strideA,
                  const float* B, int ldb, int64_t strideB, float beta, float* C, int ldc, int64_t strideC, int count);
// The same with arbitrary per-product pointers: device arrays of `count` pointers each.
void gemm_batched(bool transA, bool transB, int M, int N, int K, float alpha, const float* const* A, int lda,
                  const float* const* B, int ldb, float beta, float* const* C, int ldc, int count);

// The largest dynamic shared memory one block may opt into on the current device (cudaDevAttrMaxSharedMemoryPerBlockOptin),
// read once.
int shared_memory_optin();

// ---- scratch --------------------------------------------------------------------------------------------

// Grow-only device buffers reused by every call, one per purpose so that one op can hold several at once.
// Growing frees the old buffer (cudaFree synchronizes the device first, so no pending kernel still uses it).
enum class Scratch { attn_grad, attn_ptrs, attn_fused_d, colsum, reduce, gen_dz, cgt_a, cgt_b, cgt_c, kattn_dd, kattn_red, kattn_u, kattn_tot,
                     amod_w, amod_dp, amod_d, amod_score, tint_loss, embed_chain, count_ };
void* scratch(Scratch slot, size_t bytes);
template <typename T>
T* scratch_as(Scratch slot, size_t count) { return (T*)scratch(slot, count * sizeof(T)); }

// ---- deterministic reductions (reduce.cu) -----------------------------------------------------------------

// out[c·out_stride] += Σ_n inp[n·ld + c]   for c < C, n < N   (a column sum, e.g. a bias gradient).
// Rows are split into a FIXED number of chunks (independent of the GPU), each chunk summed in order by one
// thread per column, and the chunk sums added in order: the same bits on every run.
void column_sum_accumulate(float* out, int out_stride, const float* inp, int ld, int N, int C);

// Σ_i f(i) for i < n, in double, deterministically: a fixed grid of REDUCE_BLOCKS blocks, each thread
// grid-striding in a fixed pattern, block sums in a fixed tree, partial sums added in order by one thread.
// Returns the total on the host (one 8-byte copy: synchronizes).
constexpr int REDUCE_BLOCKS = 264, REDUCE_THREADS = 256;
template <typename F>
__global__ void reduce_partial_kernel(double* partial, F f, int64_t n) {
    __shared__ double sh[32];
    double s = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) s += f(i);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
double finish_reduce(const double* partial, int nblocks);  // reduce.cu: adds the partials in order, copies to host
template <typename F>
double reduce_sum(F f, int64_t n) {
    double* partial = scratch_as<double>(Scratch::reduce, REDUCE_BLOCKS + 1);  // + 1: the total (finish_reduce)
    reduce_partial_kernel<<<REDUCE_BLOCKS, REDUCE_THREADS>>>(partial, f, n);
    launchCheck("reduce_partial_kernel");
    return finish_reduce(partial, REDUCE_BLOCKS);
}

}  // namespace icl::cuda
