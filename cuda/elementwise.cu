// elementwise.cu — GELU (tanh approximation), ReLU and the residual connection, forward and backward.
// CPU references: src/layers/gelu.h, src/layers/relu.h, src/layers/residual.h. Any shape, flattened to n elements.
//
//   gelu(x) = 0.5·x·(1 + tanh(u)) = x·σ(2u),   u = sqrt(2/π)·(x + 0.044715·x³),   σ(z) = 1/(1 + e^(−z))
//   gelu'(x) = σ + x · 2σ(1 − σ) · du/dx,      du/dx = sqrt(2/π)·(1 + 3·0.044715·x²)
//   relu(x) = max(x, 0),   relu'(x) = 1[x > 0]
//   residual: out = inp1 + inp2
//
// Parallelization: one thread per element, grid-stride loops; memory-bound (bench --device cuda reports
// their GB/s against the device's copy bandwidth).
#include "cuda/common.cuh"
#include "cuda/layers.h"

namespace icl::cuda {

constexpr float GELU_S = 0.7978845608028654f;  // sqrt(2/π)
constexpr float GELU_A = 0.044715f;

// out (n) = gelu(inp (n))
__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = inp[i];
        const float u = GELU_S * (x + GELU_A * x * x * x);
        out[i] = x / (1.0f + expf(-2.0f * u));  // x·σ(2u)
    }
}

// dinp (n) += gelu'(inp) ⊙ dout
__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = inp[i];
        const float u = GELU_S * (x + GELU_A * x * x * x);
        const float dudx = GELU_S * (1.0f + 3.0f * GELU_A * x * x);
        const float sg = 1.0f / (1.0f + expf(-2.0f * u));
        // out = x * σ(2u)   =>   d out/dx = σ + x · σ'(2u)·2·du/dx = σ + x · 2σ(1−σ) · du/dx
        dinp[i] += (sg + x * 2.0f * sg * (1.0f - sg) * dudx) * dout[i];
    }
}

void gelu_forward(float* out, const float* inp, int64_t n) {
    gelu_forward_kernel<<<grid_for(n), 256>>>(out, inp, n);
    launchCheck("gelu_forward_kernel");
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
    gelu_backward_kernel<<<grid_for(n), 256>>>(dinp, inp, dout, n);
    launchCheck("gelu_backward_kernel");
}

// out (n) = relu(inp (n))
__global__ void relu_forward_kernel(float* out, const float* inp, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

// out[i] = inp[i] > 0 ? inp[i] : 0   =>   dinp[i] += inp[i] > 0 ? dout[i] : 0
__global__ void relu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
}

void relu_forward(float* out, const float* inp, int64_t n) {
    relu_forward_kernel<<<grid_for(n), 256>>>(out, inp, n);
    launchCheck("relu_forward_kernel");
}

void relu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
    relu_backward_kernel<<<grid_for(n), 256>>>(dinp, inp, dout, n);
    launchCheck("relu_backward_kernel");
}

// out (n) = inp1 + inp2   (out may alias an input: each thread reads before it writes its own element)
__global__ void residual_forward_kernel(float* out, const float* inp1, const float* inp2, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) out[i] = inp1[i] + inp2[i];
}

// out[i] = inp1[i] + inp2[i]   =>   dinp1[i] += dout[i],  dinp2[i] += dout[i]   (either may be nullptr)
__global__ void residual_backward_kernel(float* dinp1, float* dinp2, const float* dout, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = dout[i];
        if (dinp1) dinp1[i] += g;
        if (dinp2) dinp2[i] += g;
    }
}

void residual_forward(float* out, const float* inp1, const float* inp2, int64_t n) {
    residual_forward_kernel<<<grid_for(n), 256>>>(out, inp1, inp2, n);
    launchCheck("residual_forward_kernel");
}

void residual_backward(float* dinp1, float* dinp2, const float* dout, int64_t n) {
    if (!dinp1 && !dinp2) return;
    residual_backward_kernel<<<grid_for(n), 256>>>(dinp1, dinp2, dout, n);
    launchCheck("residual_backward_kernel");
}

}  // namespace icl::cuda
