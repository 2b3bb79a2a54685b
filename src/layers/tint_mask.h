// tint_mask.h — which state rows a TinT attention may read (spec/tint.md §2.1, §4), written once for both devices:
// src/layers/tint_ops.h (the CPU ops) and cuda/tint_ops.cu (their CUDA twins) include it. Plain C++ with no
// dependencies; under nvcc every function here is also a __device__ function.
//
//   TintMask                            the five masks of the simulator's attentions
//   tint_detail::row_position           the one-hot position of state row i (prefix j at Taux + j, data t at pos[t])
//   tint_detail::allowed                may row i read column j (before any transpose)?
//   tint_detail::column_range           the columns [j0, j1) row i may read; inside, allowed() has the last word
#pragma once
#include <cstddef>
#include <cstdint>

#include "layers/host_device.h"

namespace icl {

// Which (row i, column j) pairs a TinT attention may use, in state rows (prefixes 0..K−1, data K..).
enum class TintMask : int {
    data_to_prefix = 0,   // data rows read prefix columns (Linear Forward / Backward)
    prefix_to_train = 1,  // prefix rows read the training data columns, bidirectionally (Linear Descent)
    causal_data = 2,      // data rows read earlier data columns (and the ICL mask); never prefixes (softmax modules)
    // the loss head of App. G, where `train` is the loss weight m_t (1 = the loss at t counts):
    loss_self = 3,        // data row t reads itself, if m_t
    loss_next = 4,        // data row t reads row t+1, if m_t (the shift-by-one head)
};

namespace tint_detail {
// the one-hot position of state row i (prefix j at Taux + j, data t at pos[t])
ICL_HOST_DEVICE inline int row_position(const int* pos, int K, int Taux, int i) { return i < K ? Taux + i : pos[i - K]; }
// may row i read column j (before any transpose)? train (T), icl (T,T) or null, of this sequence
ICL_HOST_DEVICE inline bool allowed(TintMask m, const uint8_t* train, const uint8_t* icl, int K, int T, int i, int j) {
    switch (m) {
        case TintMask::data_to_prefix: return i >= K && j < K;
        case TintMask::prefix_to_train: return i < K && j >= K && train[j - K];
        case TintMask::causal_data: return i >= K && j >= K && j <= i && (!icl || icl[(size_t)(i - K) * T + (j - K)]);
        case TintMask::loss_self: return i >= K && j == i && train[i - K];
        case TintMask::loss_next: return i >= K && j == i + 1 && j < K + T && train[i - K];
    }
    return false;
}
// the columns row i may read lie in [j0, j1); inside, allowed() has the last word
ICL_HOST_DEVICE inline void column_range(TintMask m, int K, int N, int i, int& j0, int& j1) {
    j0 = j1 = 0;
    if (m == TintMask::data_to_prefix && i >= K) { j0 = 0; j1 = K; }
    if (m == TintMask::prefix_to_train && i < K) { j0 = K; j1 = N; }
    if (m == TintMask::causal_data && i >= K) { j0 = K; j1 = i + 1; }
    if (m == TintMask::loss_self && i >= K) { j0 = i; j1 = i + 1; }
    if (m == TintMask::loss_next && i >= K) { j0 = i + 1 < N ? i + 1 : N; j1 = i + 2 < N ? i + 2 : N; }
}
}  // namespace tint_detail

}  // namespace icl
