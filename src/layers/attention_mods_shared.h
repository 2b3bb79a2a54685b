// attention_mods_shared.h — what the CPU (src/layers/attention_mods.h) and CUDA (cuda/attention_mods.cu)
// versions of the attention modifications share, written once: the options struct, and the negative-sample
// neighbour choice (spec/duallens.md §4.3), so the random rule draws the same neighbours for the same seed and
// the k-lowest selection breaks ties the same way on both devices. Plain C++ with no dependencies (nvcc compiles
// it too); under nvcc every function here is also a __device__ function.
//
//   AttnMods                            the options of one attention layer (all zero/false = plain attention)
//   random_priority(seed, b, h, i, j)   the random rule's priority of neighbour j for token i in (b, h):
//                                       uniform in [0, 1), a pure function of its arguments (SplitMix64)
//   KLowest                             the k candidates with the lowest score seen so far, ascending; with the
//                                       candidates inserted in increasing j, ties go to the smaller j
#pragma once
#include <cstdint>

#include "layers/host_device.h"

namespace icl {

enum class NegRule { all, lowsim, random };
enum class NegSim { key, score, input };

inline const char* neg_rule_name(NegRule r) { return r == NegRule::all ? "all" : r == NegRule::lowsim ? "lowsim" : "random"; }
inline const char* neg_sim_name(NegSim s) { return s == NegSim::key ? "key" : s == NegSim::score ? "score" : "input"; }

// The options of one attention layer. All zero/false = plain softmax attention.
struct AttnMods {
    double alpha = 0;                // regularized: O −= α v_t
    double beta = 0;                 // negative: v_i → v_i − β·mean_{N_t(i)} v_j
    NegRule rule = NegRule::lowsim;  // negative: neighbour rule
    int k = 3;                       // negative lowsim / random: neighbours per token
    NegSim sim = NegSim::key;        // negative lowsim: similarity
    bool g1 = false, g2 = false;     // augmented: adapter on the values (g1) / keys (g2)
    double c = 1;                    // augmented: adapter scale
    int dh = 16;                     // augmented: adapter hidden width

    bool attention_active() const { return alpha != 0 || beta != 0; }  // the attention op differs from plain
    bool adapters_active() const { return (g1 || g2) && c != 0; }
    bool any() const { return attention_active() || adapters_active(); }
    bool needs_sim_src() const { return beta != 0 && rule == NegRule::lowsim && sim == NegSim::input; }
};

namespace attnmod_detail {

constexpr int KLOWEST_MAX = 64;  // the largest k (--attn-k is checked against it)

ICL_HOST_DEVICE inline uint64_t mix64(uint64_t x) {  // SplitMix64 finalizer
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// The random rule's priority of neighbour j for token i in (b,h): uniform in [0,1), a pure function of its
// arguments (the same in forward and backward, on every machine and on both devices).
ICL_HOST_DEVICE inline double random_priority(uint64_t seed, int b, int h, int i, int j) {
    const uint64_t key = mix64(mix64(mix64(mix64(seed) ^ (uint64_t)b) ^ (uint64_t)h) ^ (uint64_t)i) ^ (uint64_t)j;
    return (double)(mix64(key) >> 11) * 0x1.0p-53;
}

// The k candidates with the lowest score seen so far, ascending (ties: the earlier insert, i.e. the smaller j,
// since candidates arrive in increasing j).
struct KLowest {
    int k = 0, n = 0;
    double s[KLOWEST_MAX];
    int j[KLOWEST_MAX];
    ICL_HOST_DEVICE void reset(int k_) { k = k_; n = 0; }
    ICL_HOST_DEVICE void insert(double score, int idx) {
        if (n == k && !(score < s[n - 1])) return;
        int p = n < k ? n++ : n - 1;  // the slot freed (or the worst, dropped)
        while (p > 0 && score < s[p - 1]) { s[p] = s[p - 1]; j[p] = j[p - 1]; p--; }
        s[p] = score;
        j[p] = idx;
    }
};

// s(i,j) = Σ_e a[e]·c[e] in double, e in order (the lowsim similarities; both devices sum the same exact
// float×float products in the same order, so the scores — and the chosen neighbours — are bit-identical).
template <typename real>
ICL_HOST_DEVICE inline double dot_double(const real* a, const real* c, int n) {
    double d = 0;
    for (int e = 0; e < n; e++) d += (double)a[e] * (double)c[e];
    return d;
}

}  // namespace attnmod_detail
}  // namespace icl
