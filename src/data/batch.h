// batch.h — one training/evaluation batch, on the host, as every model consumes it.
//
// Inputs are either token ids (language tasks) or real vectors (linear regression). Targets are either
// next-token ids (softmax cross-entropy) or vectors (MSE head). `mask` weights each position's loss
// (0 = not scored); the loss is Σ mask·loss / Σ mask.
#pragma once
#include <vector>

namespace icl {

struct Batch {
    int B = 0, T = 0;
    std::vector<int> tokens;          // (B,T)       token ids            (token input)
    int D = 0;
    std::vector<float> vectors;       // (B,T,D)     input vectors        (vector input)
    std::vector<int> targets;         // (B,T)       next-token ids       (cross-entropy)
    int Dout = 0;
    std::vector<float> target_vecs;   // (B,T,Dout)  regression targets   (MSE)
    std::vector<float> mask;          // (B,T)       loss weight per position
    std::vector<int> pos;             // (B,T)       absolute positions; empty = 0..T-1

    bool vector_input() const { return D > 0; }
    bool vector_target() const { return Dout > 0; }
};

}  // namespace icl
