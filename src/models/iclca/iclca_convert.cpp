// iclca.cpp — ICLCA conversion and the induction task. See iclca.h.
#include "models/iclca/iclca_convert.h"

#include <cmath>

#include "data/batch.h"
#include "engine/common.h"
#include "layers/rope.h"

namespace icl {

template <typename real>
std::vector<real> kernel_lm_logits(KernelLM<real>& m, const std::vector<int>& tokens, int p0) {
    Batch bt;
    bt.B = 1;
    bt.T = (int)tokens.size();
    bt.tokens = tokens;
    for (int t = 0; t < bt.T; t++) bt.pos.push_back(p0 + t);
    m.forward(bt);
    return m.outputs();
}

template <typename real>
double relerr(const std::vector<real>& a, const std::vector<real>& b) {
    ICL_ASSERT(a.size() == b.size());
    long double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) {
        long double d = (long double)a[i] - (long double)b[i];
        num += d * d;
        den += (long double)a[i] * (long double)a[i];
    }
    return den > 0 ? (double)std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

// One layer's update: captured c = φ(K') (NH,M,m), ĉ = R_p φ(K') (NH,M,m), V' from qkv (M,3C).
//   b'_KV[h] = R_{−M}(b_KV[h] + Σ_j ĉ_j v_jᵀ),  b'_D[h] = b_D[h] + Σ_j c_j     (sums in double)
template <typename real>
static void convert_layer(KernelLM<real>& m, int l, int M) {
    const int C = m.cfg.C, NH = m.cfg.NH, hs = m.cfg.hs(), mf = hs;
    const std::string h = "h." + std::to_string(l) + ".";
    const size_t nS = (size_t)NH * mf * hs, nz = (size_t)NH * mf;
    std::vector<real> bkv = m.s.to_host(m.s.params, m.s.ptable.offset(h + "attn.bkv"), nS);
    std::vector<real> bd = m.s.to_host(m.s.params, m.s.ptable.offset(h + "attn.bd"), nz);
    std::vector<double> S(nS), z(nz);
    for (size_t i = 0; i < nS; i++) S[i] = (double)bkv[i];
    for (size_t i = 0; i < nz; i++) z[i] = (double)bd[i];
    if (M > 0) {
        std::vector<real> c = m.s.fetch_act(h + "phik"), ch = m.s.fetch_act(h + "rphik"), qkv = m.s.fetch_act(h + "qkv");
        for (int hh = 0; hh < NH; hh++)
            for (int j = 0; j < M; j++) {
                const real* cj = &c[((size_t)hh * M + j) * mf];
                const real* chj = &ch[((size_t)hh * M + j) * mf];
                const real* vj = &qkv[(size_t)j * 3 * C + 2 * C + hh * hs];
                for (int a = 0; a < mf; a++) {
                    z[(size_t)hh * mf + a] += (double)cj[a];
                    double* Srow = &S[((size_t)hh * mf + a) * hs];
                    for (int d = 0; d < hs; d++) Srow[d] += (double)chj[a] * (double)vj[d];
                }
            }
    }
    for (int hh = 0; hh < NH; hh++) rope_rows(&S[(size_t)hh * mf * hs], mf, hs, -(double)M);  // R_{−M}, exact identity at M = 0
    for (size_t i = 0; i < nS; i++) bkv[i] = (real)S[i];
    for (size_t i = 0; i < nz; i++) bd[i] = (real)z[i];
    m.s.upload(m.s.params, m.s.ptable.offset(h + "attn.bkv"), bkv.data(), nS);
    m.s.upload(m.s.params, m.s.ptable.offset(h + "attn.bd"), bd.data(), nz);
}

// Theorem 4.1's fold for a model with --attention linear: b'_KV = b_KV + Σ_j k'_j v'_jᵀ per layer, k', v' = the
// prompt's rows of that layer's qkv in a forward over the prompt ALONE. Exact for one layer; for deeper models the
// joint run's prompt rows (no mask: they read the input) differ from these, so only layer 0 is exact.
template <typename real>
static void convert_layer_linear(KernelLM<real>& m, int l, int M) {
    const int C = m.cfg.C, NH = m.cfg.NH, hs = m.cfg.hs();
    const std::string h = "h." + std::to_string(l) + ".";
    const size_t nS = (size_t)NH * hs * hs;
    std::vector<real> bkv = m.s.to_host(m.s.params, m.s.ptable.offset(h + "attn.bkv"), nS);
    std::vector<real> qkv = m.s.fetch_act(h + "qkv");  // (1, M, 3C)
    linear_attention_fold(bkv.data(), qkv.data(), M, C, NH);
    m.s.upload(m.s.params, m.s.ptable.offset(h + "attn.bkv"), bkv.data(), nS);
}

template <typename real>
void iclca_convert(KernelLM<real>& m, const std::vector<int>& prompt, int p0, IclcaVariant v) {
    if (!m.cfg.bias) fail("ICLCA needs a kernel LM with bias terms (this one was built with --bias 0)");
    const int M = (int)prompt.size();
    if (p0 < 0) fail("ICLCA: the start position must be >= 0");
    if (m.cfg.linear()) {  // Theorem 4.1 (no positions: p0 plays no part)
        if (v != IclcaVariant::exact) fail("ICLCA: the printed-typo variant is defined for the kernel attention only");
        if (M == 0) return;
        kernel_lm_logits(m, prompt, p0);
        for (int l = 0; l < m.cfg.L; l++) convert_layer_linear(m, l, M);
        return;
    }
    if (v == IclcaVariant::exact) {
        if (M > 0) kernel_lm_logits(m, prompt, p0);  // one forward over the prompt with the OLD biases
        for (int l = 0; l < m.cfg.L; l++) convert_layer(m, l, M);
    } else {
        // the printed Algorithm 1 step (d): layer l's prompt activations come from layers < l already converted
        for (int l = 0; l < m.cfg.L; l++) {
            if (M > 0) kernel_lm_logits(m, prompt, p0);
            convert_layer(m, l, M);
        }
    }
}

// ------------------------------------------------------------------------------------------------------
// induction task

InductionSeq induction_sequence(int T, Rng& rng) {
    InductionSeq s;
    int commit[INDUCTION_TRIGGERS];
    for (int& c : commit) c = -1;
    int tok = (int)rng.below(INDUCTION_VOCAB);
    s.tokens.push_back(tok);
    for (int t = 1; t <= T; t++) {
        int next;
        if (tok < INDUCTION_TRIGGERS) {
            if (commit[tok] < 0) commit[tok] = (int)rng.below(INDUCTION_VOCAB);
            next = commit[tok];
        } else {
            next = (int)rng.below(INDUCTION_VOCAB);
        }
        s.tokens.push_back(next);
        tok = next;
    }
    return s;
}

Batch induction_batch(int B, int T, Rng& rng) {
    Batch bt = next_token_batch(B, T);
    for (int b = 0; b < B; b++) set_next_token_row(bt, b, induction_sequence(T, rng).tokens.data());
    return bt;
}

std::vector<int> induction_scored(const InductionSeq& s, int M, bool all) {
    const int T = (int)s.tokens.size() - 1;
    bool committed[INDUCTION_TRIGGERS] = {false}, seen_in_input[INDUCTION_TRIGGERS] = {false};
    // committed inside the prompt: the trigger occurs at some t < M with its follower t+1 also < M
    for (int t = 0; t + 1 < M; t++)
        if (s.tokens[t] < INDUCTION_TRIGGERS) committed[s.tokens[t]] = true;
    std::vector<int> out;
    for (int t = M; t < T; t++) {
        int tok = s.tokens[t];
        if (tok >= INDUCTION_TRIGGERS) continue;
        if (committed[tok] && (all || !seen_in_input[tok])) out.push_back(t);
        seen_in_input[tok] = true;
    }
    return out;
}

template void iclca_convert<float>(KernelLM<float>&, const std::vector<int>&, int, IclcaVariant);
template void iclca_convert<double>(KernelLM<double>&, const std::vector<int>&, int, IclcaVariant);
template std::vector<float> kernel_lm_logits<float>(KernelLM<float>&, const std::vector<int>&, int);
template std::vector<double> kernel_lm_logits<double>(KernelLM<double>&, const std::vector<int>&, int);
template double relerr<float>(const std::vector<float>&, const std::vector<float>&);
template double relerr<double>(const std::vector<double>&, const std::vector<double>&);

}  // namespace icl
