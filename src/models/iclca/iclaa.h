// performer.h — approximate conversion of an in-context prompt for SOFTMAX-attention models (ICLAA,
// spec/iclca.md §3, experiment E4), applied to the engine's own GPT (models/gpt.h).
//
// The paper runs this on pretrained GPT-2; GPT-2 weights cannot be downloaded on this machine, so it runs on
// any GPT<real> the engine has: random-init (attention logits scaled to O(1)) or a checkpoint from train_gpt
// (`iclca e4 --load CKPT`). Nothing here is specific to a size.
//
// What is approximated (§3.1): only the cross terms between the input queries and the prompt keys,
//     Σ_{j∈prompt} exp(q_i·k'_j/√hs) v'_j ≈ φ(q_i)ᵀ Σ_j φ(k'_j) v'_jᵀ = φ(q_i)ᵀ b_KV,   Σ_j exp(…) ≈ φ(q_i)ᵀ b_D
// inside the otherwise exact causal softmax over the input tokens (the hybrid Eq. 17, R = I: GPT has no RoPE):
//     O_i = [ Σ_{j<=i} e^{s_ij} v_j + φ(q_i)ᵀ b_KV ] / [ Σ_{j<=i} e^{s_ij} + φ(q_i)ᵀ b_D ],   s_ij = q_i·k_j/√hs
// b_KV (NH,m,hs) and b_D (NH,m) per layer (Eq. 18), from ONE exact forward over the prompt (Algorithm 2 with
// the rotation typos moot).
//
// Features (§3.3), per layer and head, ω_r ∈ R^hs (r < m):
//   favor  FAVOR+ positive random features  φ(x) = m^{-1/2} exp(ωᵣ·x' − ‖x'‖²/2),  x' = x / hs^{1/4}, so
//          E[φ(q)ᵀφ(k)] = exp(q·k/√hs) (unbiased). ω ~ N(0, I) (PRF) or orthogonal blocks with χ(hs) norms (ORF).
//   elu1   φ(x) = elu(x)+1 (m = hs): an exact finite kernel, for the "softmax-free" model of invariant 22.
// Numerics (§3.3 pitfall): φ is kept in log space; the bias readout and the exact softmax terms share one
// row shift μ_i, and the biases carry their own log scale κ (b stored as Σ e^{log φ(k') − κ} …). No
// Performer stabilizer that would not cancel in the hybrid formula.
//
// Two attention kinds for the same weights:
//   Sim::softmax  the GPT as trained: exact exp(q·k/√hs) between input tokens (+ the approximate bias term)
//   Sim::kernel   the APPROXIMATED model: sim(q,k) = φ(q)ᵀφ(k) for every pair. For it the conversion is
//                 EXACT (with the input positions offset by M): the check that the bias algebra is right.
#pragma once
#include <vector>

#include "models/gpt.h"

namespace icl {

enum class FeatureKind { favor, elu1 };
enum class AttnSim { softmax, kernel };

struct PerformerFeatures {
    int L = 0, NH = 0, hs = 0, m = 0;
    FeatureKind kind = FeatureKind::favor;
    bool orthogonal = true;
    std::vector<double> omega;  // (L,NH,m,hs) random directions (favor only)

    PerformerFeatures() = default;
    // m = number of features (ignored for elu1: m = hs). Same seed ⇒ same ω.
    PerformerFeatures(int L, int NH, int hs, int m, FeatureKind kind, bool orthogonal, uint64_t seed);
    // lphi (m) = log φ(x) for one raw query/key x (hs) of layer l, head h.
    void log_phi(double* lphi, const double* x, int l, int h) const;
};

// The prompt folded into per-layer, per-head terms: b_KV = e^{κ} kv, b_D = e^{κ} d (κ per (l,h)).
struct IclaaBias {
    int L = 0, NH = 0, hs = 0, m = 0;
    int M = 0;                       // prompt tokens absorbed so far
    std::vector<double> kv;          // (L,NH,m,hs)
    std::vector<double> d;           // (L,NH,m)
    std::vector<double> kappa;       // (L,NH) log scale; -inf while empty
    IclaaBias() = default;
    explicit IclaaBias(const PerformerFeatures& f);
    bool empty() const { return M == 0; }
};

// Logits (T,V) of one token sequence through g's weights with the hybrid attention, positions p0..p0+T−1
// (absolute, into g's position table). bias may be nullptr (= none: with Sim::softmax this is g's own forward).
// capture (optional): per layer the (T,3C) [q|k|v] rows, for the conversion.
template <typename real>
std::vector<real> iclaa_logits(GPT<real>& g, const PerformerFeatures& f, const IclaaBias* bias, AttnSim sim,
                               const std::vector<int>& tokens, int p0, std::vector<std::vector<double>>* capture = nullptr);

// Fold `prompt` (positions p0..p0+M−1) into `bias`: one forward over the prompt with the CURRENT bias, then
// per layer/head b_KV += Σ_j φ(k'_j) v'_jᵀ, b_D += Σ_j φ(k'_j). No rotation (absolute positions).
template <typename real>
void iclaa_convert(GPT<real>& g, const PerformerFeatures& f, IclaaBias& bias, AttnSim sim, const std::vector<int>& prompt, int p0);

}  // namespace icl
