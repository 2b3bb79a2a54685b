// reduce.cu — the two deterministic reductions the layers share (declared in cuda/common.cuh):
//   column_sum_accumulate   out[c] += Σ_n inp[n, c]          bias gradients (matmul, generator, CGT)
//   finish_reduce           the last step of reduce_sum()     grad norm, regularizer and KL totals
//
// Why not atomics: float addition is not associative, so atomicAdd makes the result depend on the order
// in which blocks happen to run. Here every sum has a fixed shape (chunks, then a fixed tree, then chunks in
// order): the same inputs give the same bits on every run.
#include "cuda/common.cuh"

namespace icl::cuda {

constexpr int COLSUM_ROWS = 8;     // threads per column inside a block (blockDim.y)
constexpr int COLSUM_CHUNKS = 32;  // row chunks (gridDim.y): enough blocks to fill a GPU for C >= ~256

// partial (nchunk, C): block (column tile of 32, chunk) — thread (tx, ty) sums rows chunk_start+ty,
// chunk_start+ty+8, ... of column c; the 8 row-lanes are then added in order by ty = 0.
__global__ void column_sum_partial_kernel(float* partial, const float* inp, int ld, int N, int C, int rows_per_chunk) {
    __shared__ float sh[COLSUM_ROWS][WARP + 1];
    const int c = blockIdx.x * WARP + threadIdx.x;
    const int n0 = blockIdx.y * rows_per_chunk, n1 = min(N, n0 + rows_per_chunk);
    float s = 0.0f;
    if (c < C)
        for (int n = n0 + threadIdx.y; n < n1; n += COLSUM_ROWS) s += inp[(size_t)n * ld + c];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0.0f;
        for (int k = 0; k < COLSUM_ROWS; k++) t += sh[k][threadIdx.x];
        partial[(size_t)blockIdx.y * C + c] = t;
    }
}

// out[c·stride] += Σ_chunk partial[chunk, c]   (chunks in order; one thread per column)
__global__ void column_sum_finish_kernel(float* out, int out_stride, const float* partial, int nchunk, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float t = 0.0f;
    for (int k = 0; k < nchunk; k++) t += partial[(size_t)k * C + c];
    out[(size_t)c * out_stride] += t;
}

void column_sum_accumulate(float* out, int out_stride, const float* inp, int ld, int N, int C) {
    if (N <= 0 || C <= 0) return;
    const int nchunk = std::min(COLSUM_CHUNKS, ceil_div(N, COLSUM_ROWS));
    const int rows_per_chunk = ceil_div(N, nchunk);
    float* partial = scratch_as<float>(Scratch::colsum, (size_t)nchunk * C);
    column_sum_partial_kernel<<<dim3(ceil_div(C, WARP), nchunk), dim3(WARP, COLSUM_ROWS)>>>(partial, inp, ld, N, C, rows_per_chunk);
    launchCheck("column_sum_partial_kernel");
    column_sum_finish_kernel<<<blocks(C, 256), 256>>>(out, out_stride, partial, nchunk, C);
    launchCheck("column_sum_finish_kernel");
}

// total[0] = Σ partial[k] in order (one thread: a few hundred numbers)
__global__ void finish_reduce_kernel(double* total, const double* partial, int n) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    double t = 0.0;
    for (int k = 0; k < n; k++) t += partial[k];
    total[0] = t;
}

double finish_reduce(const double* partial, int nblocks) {
    // the total goes right after the partials in the same scratch slot (reduce_sum sized it for nblocks + 1)
    double* total = scratch_as<double>(Scratch::reduce, (size_t)nblocks + 1) + nblocks;
    finish_reduce_kernel<<<1, 32>>>(total, partial, nblocks);
    launchCheck("finish_reduce_kernel");
    double h = 0.0;
    cudaCheck(cudaMemcpy(&h, total, sizeof(double), cudaMemcpyDeviceToHost));
    return h;
}

}  // namespace icl::cuda
