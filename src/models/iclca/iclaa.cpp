// performer.cpp — FAVOR+ features, the hybrid (exact softmax + approximate prompt bias) GPT forward and the
// ICLAA conversion. See performer.h.
#include "models/iclca/iclaa.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/common.h"
#include "engine/rng.h"
#include "layers/embedding.h"
#include "layers/gelu.h"
#include "layers/layernorm.h"
#include "layers/matmul.h"

namespace icl {

static const double kNegInf = -std::numeric_limits<double>::infinity();

PerformerFeatures::PerformerFeatures(int L_, int NH_, int hs_, int m_, FeatureKind kind_, bool orth, uint64_t seed)
    : L(L_), NH(NH_), hs(hs_), m(kind_ == FeatureKind::elu1 ? hs_ : m_), kind(kind_), orthogonal(orth) {
    if (L < 1 || NH < 1 || hs < 1 || m < 1) fail(strfmt("Performer features: bad shape L=%d NH=%d hs=%d m=%d", L, NH, hs, m));
    if (kind != FeatureKind::favor) return;
    omega.assign((size_t)L * NH * m * hs, 0.0);
    Rng rng(seed * 0x9E3779B97F4A7C15ull + 17);
    for (int lh = 0; lh < L * NH; lh++) {
        double* W = &omega[(size_t)lh * m * hs];  // (m,hs)
        if (!orthogonal) {
            fill_normal(W, (size_t)m * hs, rng);
            continue;
        }
        // ORF: blocks of hs mutually orthogonal directions (Gram–Schmidt of a Gaussian block), each rescaled to
        // the norm of an independent Gaussian vector (χ(hs)), so every ω_r is still marginally N(0, I).
        for (int r0 = 0; r0 < m; r0 += hs) {
            const int nb = std::min(hs, m - r0);
            std::vector<double> G((size_t)hs * hs);
            fill_normal(G.data(), G.size(), rng);
            for (int i = 0; i < hs; i++) {
                double* gi = &G[(size_t)i * hs];
                for (int j = 0; j < i; j++) {
                    const double* gj = &G[(size_t)j * hs];
                    double dot = 0;
                    for (int k = 0; k < hs; k++) dot += gi[k] * gj[k];
                    for (int k = 0; k < hs; k++) gi[k] -= dot * gj[k];
                }
                double nrm = 0;
                for (int k = 0; k < hs; k++) nrm += gi[k] * gi[k];
                nrm = std::sqrt(nrm);
                for (int k = 0; k < hs; k++) gi[k] /= nrm;
            }
            for (int i = 0; i < nb; i++) {
                double chi = 0;
                for (int k = 0; k < hs; k++) { double z = rng.normal(); chi += z * z; }
                chi = std::sqrt(chi);
                for (int k = 0; k < hs; k++) W[(size_t)(r0 + i) * hs + k] = chi * G[(size_t)i * hs + k];
            }
        }
    }
}

void PerformerFeatures::log_phi(double* lphi, const double* x, int l, int h) const {
    if (kind == FeatureKind::elu1) {  // log(elu(x)+1): log(1+x) for x > 0, x otherwise
        for (int r = 0; r < m; r++) lphi[r] = x[r] > 0 ? std::log1p(x[r]) : x[r];
        return;
    }
    // log φ_r(x) = ω_r·x' − ‖x'‖²/2 − ½ log m,   x' = x / hs^{1/4}
    const double sc = std::pow((double)hs, -0.25);
    double n2 = 0;
    for (int k = 0; k < hs; k++) n2 += (x[k] * sc) * (x[k] * sc);
    const double base = -0.5 * n2 - 0.5 * std::log((double)m);
    const double* W = &omega[((size_t)l * NH + h) * m * hs];
    for (int r = 0; r < m; r++) {
        double dot = 0;
        for (int k = 0; k < hs; k++) dot += W[(size_t)r * hs + k] * x[k];
        lphi[r] = dot * sc + base;
    }
}

IclaaBias::IclaaBias(const PerformerFeatures& f) : L(f.L), NH(f.NH), hs(f.hs), m(f.m) {
    kv.assign((size_t)L * NH * m * hs, 0.0);
    d.assign((size_t)L * NH * m, 0.0);
    kappa.assign((size_t)L * NH, kNegInf);
}

namespace {

// One layer's hybrid causal attention for one sequence. qkv (T,3C) → out (T,C). Per head h and query i:
//   μ = max( max_{j<=i} s_ij , κ + max_r log φ_r(q_i) )
//   out_i = [Σ_j e^{s_ij−μ} v_j + Σ_r e^{log φ_r(q_i)+κ−μ} kv_r] / [Σ_j e^{s_ij−μ} + Σ_r e^{log φ_r(q_i)+κ−μ} d_r]
// with s_ij = q_i·k_j/√hs (softmax) or log Σ_r φ_r(q_i)φ_r(k_j) (kernel: the approximated model).
template <typename real>
void hybrid_attention(real* out, const real* qkv, const PerformerFeatures& f, const IclaaBias* bias, AttnSim sim, int l, int T,
                      int C, int NH) {
    const int hs = C / NH, m = f.m;
    const bool use_bias = bias && !bias->empty();
    const bool need_phi = use_bias || sim == AttnSim::kernel;
#pragma omp parallel for schedule(static) if (par::use_threads((double)NH * T * T * (need_phi ? m : hs)))
    for (int h = 0; h < NH; h++) {
        std::vector<double> q((size_t)T * hs), k((size_t)T * hs), v((size_t)T * hs), lq, lk, s(T), num(hs);
        for (int t = 0; t < T; t++)
            for (int c = 0; c < hs; c++) {
                q[(size_t)t * hs + c] = (double)qkv[(size_t)t * 3 * C + h * hs + c];
                k[(size_t)t * hs + c] = (double)qkv[(size_t)t * 3 * C + C + h * hs + c];
                v[(size_t)t * hs + c] = (double)qkv[(size_t)t * 3 * C + 2 * C + h * hs + c];
            }
        if (need_phi) {
            lq.resize((size_t)T * m);
            for (int t = 0; t < T; t++) f.log_phi(&lq[(size_t)t * m], &q[(size_t)t * hs], l, h);
        }
        if (sim == AttnSim::kernel) {
            lk.resize((size_t)T * m);
            for (int t = 0; t < T; t++) f.log_phi(&lk[(size_t)t * m], &k[(size_t)t * hs], l, h);
        }
        const double scale = 1.0 / std::sqrt((double)hs);
        const double kap = use_bias ? bias->kappa[(size_t)l * NH + h] : kNegInf;
        const double* bkv = use_bias ? &bias->kv[((size_t)l * NH + h) * m * hs] : nullptr;
        const double* bd = use_bias ? &bias->d[((size_t)l * NH + h) * m] : nullptr;
        for (int i = 0; i < T; i++) {
            const double* qi = &q[(size_t)i * hs];
            double mu = kNegInf;
            for (int j = 0; j <= i; j++) {
                double sij;
                if (sim == AttnSim::softmax) {
                    sij = 0;
                    for (int c = 0; c < hs; c++) sij += qi[c] * k[(size_t)j * hs + c];
                    sij *= scale;
                } else {  // log Σ_r exp(lq_r + lk_r)
                    const double* a = &lq[(size_t)i * m];
                    const double* b = &lk[(size_t)j * m];
                    double mx = kNegInf;
                    for (int r = 0; r < m; r++) mx = std::max(mx, a[r] + b[r]);
                    double acc = 0;
                    for (int r = 0; r < m; r++) acc += std::exp(a[r] + b[r] - mx);
                    sij = mx + std::log(acc);
                }
                s[j] = sij;
                mu = std::max(mu, sij);
            }
            const double* lqi = need_phi ? &lq[(size_t)i * m] : nullptr;
            if (use_bias) {
                double mx = kNegInf;
                for (int r = 0; r < m; r++) mx = std::max(mx, lqi[r]);
                mu = std::max(mu, mx + kap);
            }
            std::fill(num.begin(), num.end(), 0.0);
            double den = 0;
            for (int j = 0; j <= i; j++) {
                const double w = std::exp(s[j] - mu);
                den += w;
                for (int c = 0; c < hs; c++) num[c] += w * v[(size_t)j * hs + c];
            }
            if (use_bias)
                for (int r = 0; r < m; r++) {
                    const double w = std::exp(lqi[r] + kap - mu);
                    den += w * bd[r];
                    for (int c = 0; c < hs; c++) num[c] += w * bkv[(size_t)r * hs + c];
                }
            for (int c = 0; c < hs; c++) out[(size_t)i * C + h * hs + c] = (real)(num[c] / den);
        }
    }
}

}  // namespace

template <typename real>
std::vector<real> iclaa_logits(GPT<real>& g, const PerformerFeatures& f, const IclaaBias* bias, AttnSim sim,
                               const std::vector<int>& tokens, int p0, std::vector<std::vector<double>>* capture) {
    const GPTConfig& c = g.cfg;
    if (g.s.dev != Device::cpu) fail("ICLAA: the hybrid forward runs on the CPU only");
    if (c.d_in > 0 || c.d_out > 0) fail("ICLAA needs a token GPT with its tied LM head");
    if (f.L != c.L || f.NH != c.NH || f.hs != c.C / c.NH)
        fail(strfmt("ICLAA: features for L=%d NH=%d hs=%d do not fit the GPT (L=%d NH=%d hs=%d)", f.L, f.NH, f.hs, c.L, c.NH, c.C / c.NH));
    if (bias && (bias->L != f.L || bias->NH != f.NH || bias->m != f.m)) fail("ICLAA: bias terms and features disagree in shape");
    const int T = (int)tokens.size(), C = c.C, V = c.V;
    if (T < 1) fail("ICLAA: empty sequence");
    if (p0 < 0 || p0 + T > c.maxT) fail(strfmt("ICLAA: positions %d..%d outside the GPT's [0, %d)", p0, p0 + T - 1, c.maxT));
    for (int t : tokens) if (t < 0 || t >= V) fail(strfmt("token id %d outside the vocabulary [0, %d)", t, V));
    std::vector<int> pos(T);
    for (int t = 0; t < T; t++) pos[t] = p0 + t;
    std::vector<real> x((size_t)T * C), u((size_t)T * C), qkv((size_t)T * 3 * C), atty((size_t)T * C), tmp((size_t)T * C),
        fch((size_t)T * 4 * C), fg((size_t)T * 4 * C), mean(T), rstd(T), logits((size_t)T * V);
    auto P = [&](const std::string& n) { return (const real*)g.s.param(n); };
    auto add = [&](const std::vector<real>& y) { for (size_t i = 0; i < x.size(); i++) x[i] += y[i]; };
    // x = wte[tok] + wpe[pos]
    encoder_forward(x.data(), tokens.data(), pos.data(), P("wte"), P("wpe"), 1, T, C, V, c.maxT);
    if (capture) capture->assign(c.L, {});
    for (int l = 0; l < c.L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        // x = x + attn(LN1(x))·Woᵀ + bo     (attention: exact softmax + approximate prompt bias)
        layernorm_forward(u.data(), mean.data(), rstd.data(), x.data(), P(h + "ln1.w"), P(h + "ln1.b"), T, C);
        matmul_forward(qkv.data(), u.data(), P(h + "attn.qkv.w"), P(h + "attn.qkv.b"), T, C, 3 * C);
        if (capture) (*capture)[l].assign(qkv.begin(), qkv.end());
        hybrid_attention(atty.data(), qkv.data(), f, bias, sim, l, T, C, c.NH);
        matmul_forward(tmp.data(), atty.data(), P(h + "attn.proj.w"), P(h + "attn.proj.b"), T, C, C);
        add(tmp);
        // x = x + GELU(LN2(x)·W1ᵀ + b1)·W2ᵀ + b2
        layernorm_forward(u.data(), mean.data(), rstd.data(), x.data(), P(h + "ln2.w"), P(h + "ln2.b"), T, C);
        matmul_forward(fch.data(), u.data(), P(h + "mlp.fc.w"), P(h + "mlp.fc.b"), T, C, 4 * C);
        gelu_forward(fg.data(), fch.data(), (size_t)T * 4 * C);
        matmul_forward(tmp.data(), fg.data(), P(h + "mlp.proj.w"), P(h + "mlp.proj.b"), T, 4 * C, C);
        add(tmp);
    }
    layernorm_forward(u.data(), mean.data(), rstd.data(), x.data(), P("lnf.w"), P("lnf.b"), T, C);
    matmul_forward(logits.data(), u.data(), P("wte"), (const real*)nullptr, T, C, V);  // tied head
    return logits;
}

template <typename real>
void iclaa_convert(GPT<real>& g, const PerformerFeatures& f, IclaaBias& bias, AttnSim sim, const std::vector<int>& prompt, int p0) {
    const int M = (int)prompt.size(), C = g.cfg.C, NH = g.cfg.NH, hs = C / NH, m = f.m;
    if (bias.L != f.L || bias.NH != f.NH || bias.m != f.m) fail("ICLAA: bias terms and features disagree in shape");
    if (M == 0) return;
    // one forward over the prompt with the CURRENT bias (exact softmax among the prompt tokens)
    std::vector<std::vector<double>> cap;
    iclaa_logits(g, f, &bias, sim, prompt, p0, &cap);
    std::vector<double> lk((size_t)M * m), kj(hs);
    for (int l = 0; l < g.cfg.L; l++)
        for (int h = 0; h < NH; h++) {
            const std::vector<double>& qkv = cap[l];
            for (int j = 0; j < M; j++) {
                for (int c = 0; c < hs; c++) kj[c] = qkv[(size_t)j * 3 * C + C + h * hs + c];
                f.log_phi(&lk[(size_t)j * m], kj.data(), l, h);
            }
            // new log scale κ' = max(κ, max log φ(k')): rescale the old sums, then add the prompt's
            double& kap = bias.kappa[(size_t)l * NH + h];
            const double knew = std::max(kap, *std::max_element(lk.begin(), lk.end()));
            double* kv = &bias.kv[((size_t)l * NH + h) * m * hs];
            double* d = &bias.d[((size_t)l * NH + h) * m];
            const double rs = std::isfinite(kap) ? std::exp(kap - knew) : 0.0;
            for (size_t i = 0; i < (size_t)m * hs; i++) kv[i] *= rs;
            for (int r = 0; r < m; r++) d[r] *= rs;
            for (int j = 0; j < M; j++) {
                const double* vj = &qkv[(size_t)j * 3 * C + 2 * C + h * hs];
                for (int r = 0; r < m; r++) {
                    const double w = std::exp(lk[(size_t)j * m + r] - knew);  // φ_r(k'_j) e^{−κ'}
                    d[r] += w;
                    for (int c = 0; c < hs; c++) kv[(size_t)r * hs + c] += w * vj[c];
                }
            }
            kap = knew;
        }
    bias.M += M;
}

template std::vector<float> iclaa_logits<float>(GPT<float>&, const PerformerFeatures&, const IclaaBias*, AttnSim, const std::vector<int>&, int,
                                                std::vector<std::vector<double>>*);
template std::vector<double> iclaa_logits<double>(GPT<double>&, const PerformerFeatures&, const IclaaBias*, AttnSim, const std::vector<int>&,
                                                  int, std::vector<std::vector<double>>*);
template void iclaa_convert<float>(GPT<float>&, const PerformerFeatures&, IclaaBias&, AttnSim, const std::vector<int>&, int);
template void iclaa_convert<double>(GPT<double>&, const PerformerFeatures&, IclaaBias&, AttnSim, const std::vector<int>&, int);

}  // namespace icl
