// residual.h — the residual connection: out = inp1 + inp2, elementwise over n values.
//
// GRADIENT CONVENTION (whole engine): every backward ACCUMULATES (+=) into every gradient it writes, parameter
// and activation gradients alike; callers zero the gradient buffers once per step (a few can SET instead, where
// the caller says so: GradWrite, engine/common.h). For a residual stream that is exactly what is wanted: the skip
// branch and the block branch both add their share into the same buffer. (The GPT's shared layout makes d(out) and
// d(inp) one buffer instead, and calls nothing: models/block.h.)
#pragma once
#include "layers/parallel.h"
#include <cstddef>

#ifdef _OPENMP
#include <omp.h>
#endif
namespace icl {

namespace residual_detail {
using par::use_threads;
}  // namespace residual_detail

template <typename real>
void residual_forward(real* out,         // (n)
                      const real* inp1,  // (n)
                      const real* inp2,  // (n)
                      size_t n) {
#pragma omp parallel for simd schedule(static) if (residual_detail::use_threads((double)n))
    for (size_t i = 0; i < n; i++) out[i] = inp1[i] + inp2[i];
}

// Backward of residual_forward. ACCUMULATES into dinp1 and dinp2 (either may be nullptr).
template <typename real>
void residual_backward(real* dinp1,       // (n)
                       real* dinp2,       // (n)
                       const real* dout,  // (n)
                       size_t n) {
    // out[i] = inp1[i] + inp2[i]   =>   dinp1[i] += dout[i],  dinp2[i] += dout[i]
    if (dinp1) {
#pragma omp parallel for simd schedule(static) if (residual_detail::use_threads((double)n))
        for (size_t i = 0; i < n; i++) dinp1[i] += dout[i];
    }
    if (dinp2) {
#pragma omp parallel for simd schedule(static) if (residual_detail::use_threads((double)n))
        for (size_t i = 0; i < n; i++) dinp2[i] += dout[i];
    }
}

}  // namespace icl
