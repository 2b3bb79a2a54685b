// linreg.h — in-context linear regression sequences (spec/cgt.md §4.2).
//
// Per sequence: U ∈ R^{d_out×d_in}, b ∈ R^{d_out}, u_k, q_k all iid N(0,1);  v_k = U u_k + b + ε q_k.
// Tokens alternate u_1, v_1, …, u_N, v_N (n = 2N); each is zero-padded to D = max(d_in, d_out) and fed
// as a vector. The model predicts v_k at the u_k position (MSE); mask = 1 on u positions only.
#pragma once
#include <vector>

#include "data/batch.h"
#include "engine/rng.h"

namespace icl {

struct LinRegConfig {
    int d_in = 16, d_out = 1, pairs = 64;
    double noise = 0.1;  // ε
    int seq_len() const { return 2 * pairs; }
    int width() const { return d_in > d_out ? d_in : d_out; }
};

// `clean` (optional) receives the noise-free targets U u_k + b at each u position, (B,T,d_out).
Batch linreg_batch(const LinRegConfig& cfg, int B, Rng& rng, std::vector<float>* clean = nullptr);

}  // namespace icl
