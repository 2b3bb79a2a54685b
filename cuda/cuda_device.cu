// cuda_device.cu — the CUDA side of src/engine/device.h (memory, copies, synchronization, "is there a GPU"),
// plus what every kernel file shares at run time: the cuBLAS handle, the row-major GEMM wrappers, and
// the grow-only scratch buffers (declared in cuda/common.cuh).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/common.cuh"
#include "cuda/layers.h"
#include "engine/comm.h"
#include "engine/common.h"
#include "engine/device.h"

// ---- engine/device.cpp's hooks (namespace icl) ------------------------------------------------------------
namespace icl {

// Why no GPU can be used here, in one line ("" when one can): the CUDA error of cudaGetDeviceCount (with the
// usual cause of the common ones), or "no CUDA device found".
std::string cuda_status() {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        const char* hint = e == cudaErrorInsufficientDriver ? "; the NVIDIA driver is older than this CUDA runtime"
                           : e == cudaErrorNoDevice          ? "; no NVIDIA GPU is visible to this process"
                                                             : "";
        return strfmt("cudaGetDeviceCount: %s (%s)%s", cudaGetErrorString(e), cudaGetErrorName(e), hint);
    }
    if (n == 0) return "no CUDA device found on this machine";
    return "";
}

// --device cuda on a machine without a usable GPU: a usage error (exit 2), like --device cuda in a CPU-only build.
void cuda_require() {
    const std::string why = cuda_status();
    if (!why.empty()) fail("--device cuda: no usable CUDA device: " + why, 2);
    const Comm& c = comm();
    if (c.size > 1) {  // one process per GPU: the launcher's local rank picks it, before anything is allocated
        int n = 0, local = c.rank;
        cudaCheck(cudaGetDeviceCount(&n));
        for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
            if (const char* s = std::getenv(v)) { local = std::atoi(s); break; }
        if (local >= n)
            fail(strfmt("process %d of %d is local rank %d on its node, which has %d visible GPU%s: one process per GPU (NCCL refuses two on one)",
                        c.rank, c.size, local, n, n == 1 ? "" : "s"), 2);
        cudaCheck(cudaSetDevice(local));
    }
}

void* cuda_alloc(size_t bytes) {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();  // clear the (non-sticky) error
        size_t free_b = 0, total_b = 0;
        cudaCheck(cudaMemGetInfo(&free_b, &total_b));
        fail(strfmt("out of GPU memory allocating %.1f MiB (%.1f of %.1f MiB free)", bytes / 1048576.0, free_b / 1048576.0,
                    total_b / 1048576.0));
    }
    cudaCheck(e);
    cudaCheck(cudaMemset(p, 0, bytes));  // device_alloc's contract: zero-filled
    return p;
}

void cuda_free(void* p) {
    const cudaError_t e = cudaFree(p);
    if (e == cudaErrorCudartUnloading) return;  // a buffer outliving the runtime at process exit: nothing left to free
    cudaCheck(e);
}
void cuda_zero(void* p, size_t bytes) { cudaCheck(cudaMemset(p, 0, bytes)); }

void cuda_copy(void* dst, const void* src, size_t bytes, int kind) {
    if (bytes == 0) return;
    // the order of engine/device.h's Copy enum: host_to_device, device_to_host, device_to_device
    const cudaMemcpyKind k = kind == 0 ? cudaMemcpyHostToDevice : kind == 1 ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
    cudaCheck(cudaMemcpy(dst, src, bytes, k));
}

void cuda_sync() { cudaCheck(cudaDeviceSynchronize()); }

}  // namespace icl

// ---- backend ---------------------------------------------------------------------------------------------
namespace icl::cuda {

bool sync_after_launch() {
    static const bool on = [] {
        const char* s = std::getenv("ICL_CUDA_SYNC");
        return s && std::strcmp(s, "0") != 0 && *s;
    }();
    return on;
}

std::string device_description() {
    int dev = 0;
    cudaDeviceProp p;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&p, dev));
    return strfmt("%s (sm_%d%d, %d SMs, %.1f GiB)", p.name, p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem / 1073741824.0);
}

bool tf32() { return icl::tf32_enabled(); }

int shared_memory_optin() {
    static int optin = -1;
    if (optin < 0) {
        int dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    }
    return optin;
}

cublasHandle_t cublas() {
    static cublasHandle_t h = [] {
        cublasHandle_t x;
        cublasCheck(cublasCreate(&x));
        // Pointer mode host: alpha/beta are host floats. Math mode is chosen per call (compute type below).
        cublasCheck(cublasSetPointerMode(x, CUBLAS_POINTER_MODE_HOST));
        return x;
    }();
    return h;
}

// fp32 products and accumulation (CUBLAS_COMPUTE_32F: cuBLAS uses TF32 only when asked, and the handle's
// math mode stays CUBLAS_DEFAULT_MATH), or TF32 tensor-core products with fp32 accumulation when --tf32 allows it —
// for every product, whatever its alignment: cuBLAS picks a kernel that handles operands that are not 16-byte
// aligned (the LM head's V = 50257 columns, the arithmetic task's T = 243). An earlier version ran such products
// in plain fp32, which left GPT-2's LM head — a third of its matmul flops — at the fp32 rate (bench model
// --preset gpt2-small --tf32 on an H200: 94.9 ms per step that way; docs/benchmarks.md has the measurement).
static cublasComputeType_t compute_type() { return tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; }

// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: pass B first, swap M and N. A row-major
// (R,K) matrix with leading dimension ld IS a column-major (K,R) matrix with the same ld, so the transpose
// flags carry over unchanged.
void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float beta,
          float* C, int ldc) {
    if (M == 0 || N == 0) return;
    cublasCheck(cublasGemmEx(cublas(), transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
                             CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc,
                             compute_type(),
                             CUBLAS_GEMM_DEFAULT));
}

void gemm_strided(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, int64_t strideA, const float* B,
                  int ldb, int64_t strideB, float beta, float* C, int ldc, int64_t strideC, int count) {
    if (M == 0 || N == 0 || count == 0) return;
    cublasCheck(cublasGemmStridedBatchedEx(cublas(), transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                                           &alpha, B, CUDA_R_32F, ldb, strideB, A, CUDA_R_32F, lda, strideA, &beta, C, CUDA_R_32F, ldc,
                                           strideC, count,
                                           compute_type(),
                                           CUBLAS_GEMM_DEFAULT));
}

void gemm_batched(bool transA, bool transB, int M, int N, int K, float alpha, const float* const* A, int lda, const float* const* B,
                  int ldb, float beta, float* const* C, int ldc, int count) {
    if (M == 0 || N == 0 || count == 0) return;
    cublasCheck(cublasGemmBatchedEx(cublas(), transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                                    (const void* const*)B, CUDA_R_32F, ldb, (const void* const*)A, CUDA_R_32F, lda, &beta,
                                    (void* const*)C, CUDA_R_32F, ldc, count,
                                    compute_type(), CUBLAS_GEMM_DEFAULT));
}

void gemm_f32(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float beta,
              float* C, int ldc) {
    gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void* scratch(Scratch slot, size_t bytes) {
    struct Buf { void* p = nullptr; size_t bytes = 0; };
    static Buf bufs[(int)Scratch::count_];
    Buf& b = bufs[(int)slot];
    if (bytes > b.bytes) {
        if (b.p) cudaCheck(cudaFree(b.p));  // synchronizes: no pending kernel still reads the old buffer
        b.bytes = std::max(bytes, b.bytes + b.bytes / 2);  // grow by >= 1.5x: few reallocations
        cudaCheck(cudaMalloc(&b.p, b.bytes));
    }
    return b.p;
}

}  // namespace icl::cuda
