// relu.h — ReLU, the activation of OPT's feed-forward layers (the TinT auxiliary model's default, spec/tint.md §9):
//
//   relu(x) = max(x, 0),   relu'(x) = 1[x > 0]   (the derivative at exactly 0 is taken as 0)
//
// GRADIENT CONVENTION (whole engine): every backward ACCUMULATES (+=) into every gradient it writes, parameter
// and activation gradients alike; callers zero the gradient buffers once per step. relu_backward can SET dinp
// instead (GradWrite::set, engine/common.h) when it is that buffer's only writer.
#pragma once
#include "engine/common.h"
#include "layers/parallel.h"
#include <cstddef>

#ifdef _OPENMP
#include <omp.h>
#endif
namespace icl {

namespace relu_detail {
using par::use_threads;
}  // namespace relu_detail

// out (n) = relu(inp (n)), elementwise; any shape flattened to n elements.
template <typename real>
void relu_forward(real* out, const real* inp, size_t n) {
#pragma omp parallel for simd schedule(static) if (relu_detail::use_threads((double)n))
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > real(0) ? inp[i] : real(0);
}

// Backward of relu_forward. ACCUMULATES: dinp (n) += 1[inp > 0] ⊙ dout (n); with write = set, dinp = … (GradWrite).
template <typename real>
void relu_backward(real* dinp, const real* inp, const real* dout, size_t n, GradWrite write = GradWrite::add) {
    // out[i] = inp[i] > 0 ? inp[i] : 0   =>   dinp[i] += inp[i] > 0 ? dout[i] : 0
    if (write == GradWrite::set) {
#pragma omp parallel for simd schedule(static) if (relu_detail::use_threads((double)n))
        for (size_t i = 0; i < n; i++) dinp[i] = inp[i] > real(0) ? dout[i] : real(0);
        return;
    }
#pragma omp parallel for simd schedule(static) if (relu_detail::use_threads((double)n))
    for (size_t i = 0; i < n; i++) dinp[i] += inp[i] > real(0) ? dout[i] : real(0);
}

}  // namespace icl
