// iclca.h — exact conversion of an in-context prompt into the kernel LM's bias terms (spec/iclca.md §2.5–2.8),
// the induction-head task of the experiments (§4.2, §7), and the helpers the `iclca` binary and the tests share.
//
// ICLCA (Algorithm 1 with the printed typos fixed, §7): ONE ordinary causal forward over the prompt X' (M
// tokens, positions p0..p0+M−1) with the CURRENT (old) biases; then for every layer l and head h
//     b'_KV = R_{−M} ( b_KV + Σ_j R_{p0+j} φ(K'_j) V'_jᵀ )      rotate the m axis (row pairs) by −M
//     b'_D  = b_D + Σ_j φ(K'_j)                                 never rotated
// The converted model runs the input from the SAME start position p0 (not p0+M): the prompt then sits at
// the virtual positions p0−M..p0−1 and every input logit equals the prompted model's (up to rounding).
// Converting A then B equals converting [A;B] (§2.8); converting the empty prompt changes nothing.
#pragma once
#include <string>
#include <vector>

#include "engine/rng.h"
#include "layers/linear_attention.h"
#include "models/iclca/kernel_lm.h"

namespace icl {

enum class IclcaVariant {
    exact,            // the corrected algorithm (old biases while propagating the prompt)
    new_bias_typo,    // NEGATIVE CONTROL (spec §6.15): Algorithm 1 step (d) as printed — deeper layers see the
                      // prompt propagated through the already-converted (new) biases of the layers below
};

// Convert `prompt` into m's biases, in place. p0 = position of the first prompt token (the converted model
// must number its input from p0 too). Refuses a model built without bias parameters.
template <typename real>
void iclca_convert(KernelLM<real>& m, const std::vector<int>& prompt, int p0 = 0, IclcaVariant v = IclcaVariant::exact);

// Theorem 4.1 (spec §2.2), the special case the paper proves first: for the linear attention of
// layers/linear_attention.h (φ = I, D = 1, no RoPE, no mask) and ONE layer, fold a prompt into the bias, in place:
//     b'_KV[h] = b_KV[h] + Σ_{j<M} k'_j v'_jᵀ            k'_j, v'_j = the prompt's rows of qkv (M,3C)
// (= b_KV + W_Kᵀ X'ᵀ X' W_V when qkv = X W_QKV). The input alone with b' then gives the prompted outputs at its
// rows. No mask means the prompt's own outputs depend on the input, so a deeper layer cannot be folded this way.
template <typename real>
void linear_attention_fold(real* bkv,               // (NH,hs,hs)  updated
                           const real* qkv_prompt,  // (M,3C)
                           int M, int C, int NH) {
    const int hs = C / NH;
    std::vector<double> S;
    for (int h = 0; h < NH; h++) {
        linear_attention_state(S, qkv_prompt, bkv, 0, h, M, C, NH);  // b_KV[h] + Σ_j k'_j v'_jᵀ
        for (size_t i = 0; i < S.size(); i++) bkv[(size_t)h * hs * hs + i] = (real)S[i];
    }
}

// Logits (T,V) of one sequence through the parallel form, positions p0..p0+T−1.
template <typename real>
std::vector<real> kernel_lm_logits(KernelLM<real>& m, const std::vector<int>& tokens, int p0 = 0);

// ‖a − b‖_F / ‖a‖_F  (spec §6).
template <typename real>
double relerr(const std::vector<real>& a, const std::vector<real>& b);

// ---- the induction-head task (Bietti et al. as simplified by the paper; spec §4.2, §7) ----------------
// 52 tokens; triggers 0..4 ('a'..'e'). The first token is uniform; after a non-trigger the next token is
// uniform; a trigger's first occurrence draws its follower uniformly and every later occurrence repeats it.
struct InductionSeq {
    std::vector<int> tokens;  // (T+1): inputs are tokens[0..T-1], next-token targets tokens[1..T]
};
constexpr int INDUCTION_VOCAB = 52, INDUCTION_TRIGGERS = 5;
InductionSeq induction_sequence(int T, Rng& rng);
// A (B,T) training batch (next-token targets on every position).
struct Batch;
Batch induction_batch(int B, int T, Rng& rng);
// Scored positions of the ICL evaluation (spec §7): in the input part (t >= M) of a length-(M+N) chain, the
// positions whose token is a trigger committed inside the prompt and not yet seen in the input before t.
// `all` = true gives the broader "every occurrence of a prompt-committed trigger" metric.
std::vector<int> induction_scored(const InductionSeq& s, int M, bool all = false);

}  // namespace icl
