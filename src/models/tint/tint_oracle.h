// tint_oracle.h — the two references the TinT simulator is measured against (spec/tint.md §9):
//
//   oracle A  "TinT-equivalent SGD": the auxiliary model's forward, written out plainly (with the ICL mask and
//             positions TinT takes), and a hand-written backward with exactly TinT's approximations — finite-
//             difference LayerNorm and activation backward with the same ε, the value-only attention backward
//             with its mask rule, W_Q, W_K, b_Q, b_K, every γ (unless TintConfig::ln_gamma), the embeddings and
//             the layers below L−k frozen, weight gradients summed over the training tokens — then s plain SGD
//             steps. TinT must equal it to rounding (fp64 <= 1e-9).
//   oracle B  exact SGD: the engine's own GPT forward/backward (validated by gradcheck), on the summed masked
//             cross-entropy, restricted to TinT's trainable set or on all parameters. This is dynamic evaluation
//             (Krause et al. 2019), the paper's baseline.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "data/batch.h"
#include "models/gpt.h"
#include "models/tint/tint_sim.h"

namespace icl {

template <typename real>
struct OracleOutput {
    std::vector<real> logits0, logits1;  // (T,V) of one sequence (oracle A) or (B,T,V) of a batch (oracle B)
    std::vector<real> params;            // the auxiliary registry after the s steps
    double loss0 = 0, loss1 = 0;         // the summed masked CE before / after (oracle A, of its own approximations' target)
};

// Oracle A on sequence b of `in`: k top layers, s steps, with c.eps and c.eta (spec §9 step 4).
template <typename real>
OracleOutput<real> oracle_a(const GPT<real>& aux, const TintConfig& c, const TintInput& in, int b, int k, int s);

// Oracle A's one-step parameter gradient (registry layout, the summed loss; zero outside the trainable set) at
// the model's current weights — what TinT's descent modules subtract, divided by η.
template <typename real>
std::vector<real> oracle_a_gradient(const GPT<real>& aux, const TintConfig& c, const TintInput& in, int b, int k);

// TinT's trainable set for the top k layers (spec §11.6): per layer l >= L−k ln1.b, the value rows of attn.qkv
// (W_V, b_V), attn.proj.{w,b}, ln2.b, mlp.{fc,proj}.{w,b}; plus lnf.b; with gamma (TintConfig::ln_gamma) also
// ln1.w, ln2.w and lnf.w. As [begin, end) element ranges.
std::vector<std::pair<size_t, size_t>> tint_trainable(const TensorTable& ptable, const GPTConfig& g, int k, bool gamma = false);

// Sequence b of a TinT input as a GPT batch of one: targets ids[t+1], loss weights m_t (train[t+1]·label[t+1]);
// no targets at all when every m_t is 0 (a forward-only batch).
Batch tint_batch(const TintInput& in, int b);

// A random auxiliary model for checks: every parameter N(0, std), the LayerNorm gains 1 + N(0, std) (nontrivial
// gradients and attention patterns, unlike the GPT-2 init's near-uniform attention).
template <typename real>
void tint_random_aux(GPT<real>& m, uint64_t seed, double std);

// Oracle B: s steps of exact SGD with learning rate eta on the summed masked CE of `batch` (all its sequences
// share one update), on TinT's trainable set for k layers (all = false; gamma: with the LayerNorm gains) or on every
// parameter. The model's parameters are restored afterwards.
template <typename real>
OracleOutput<real> oracle_b(GPT<real>& aux, const Batch& batch, double eta, int k, int s, bool all, bool gamma = false);

}  // namespace icl
