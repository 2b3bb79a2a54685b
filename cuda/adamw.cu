// adamw.cu — the optimizer step and its helpers: AdamW, the global gradient norm, scaling (clipping).
// CPU reference: src/layers/adamw.h.
//
//   m = β1·m + (1−β1)·g          v = β2·v + (1−β2)·g²
//   p = p − lr·( m/(1−β1^t) / (sqrt(v/(1−β2^t)) + eps) + wd·p )          t = 1, 2, … (bias correction)
//   clipping:  norm = sqrt(grad_norm_squared(g)),  scale(g, clip_factor(norm, max_norm))
//
// Parallelization: AdamW and scale are elementwise (one thread per parameter). The squared norm is summed
// in double with the deterministic reduce_sum of cuda/common.cuh (fixed grid, fixed order): the same bits
// on every run; the total comes back to the host (the trainer logs it and decides on clipping).
#include "cuda/common.cuh"
#include "cuda/layers.h"

namespace icl::cuda {

// params, m, v (n) updated in place from grads (n); c1 = 1/(1−β1^t), c2 = 1/(1−β2^t) computed on the host in double
__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float b1, float b2, float c1,
                             float c2, float eps, float wd) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = grads[i];
        const float mi = b1 * m[i] + (1.0f - b1) * g;
        const float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        params[i] -= lr * ((mi * c1) / (sqrtf(vi * c2) + eps) + wd * params[i]);
    }
}

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int t) {
    if (n == 0) return;
    const float c1 = (float)(1.0 / (1.0 - std::pow(beta1, t)));  // 1 / (1 − β1^t)
    const float c2 = (float)(1.0 / (1.0 - std::pow(beta2, t)));  // 1 / (1 − β2^t)
    adamw_kernel<<<grid_for(n), 256>>>(params, grads, m, v, n, (float)lr, (float)beta1, (float)beta2, c1, c2, (float)eps,
                                       (float)weight_decay);
    launchCheck("adamw_kernel");
}

// The element function reduce_sum adds up: g_i² in double.
struct SquareOf {
    const float* x;
    __device__ double operator()(int64_t i) const { return (double)x[i] * (double)x[i]; }
};

double grad_norm_squared(const float* grads, int64_t n) {
    if (n == 0) return 0.0;
    return reduce_sum(SquareOf{grads}, n);
}

// x (n) *= factor
__global__ void scale_kernel(float* x, int64_t n, float f) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) x[i] *= f;
}

void scale(float* x, int64_t n, double factor) {
    if (n == 0) return;
    scale_kernel<<<grid_for(n), 256>>>(x, n, (float)factor);
    launchCheck("scale_kernel");
}

}  // namespace icl::cuda
