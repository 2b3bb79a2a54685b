// performer.cpp — FAVOR+ features, the hybrid (exact softmax + approximate prompt bias) GPT forward and the
// ICLAA conversion. See performer.h.
#include "models/iclca/iclaa.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/common.h"
#include "engine/rng.h"
#include "layers/dispatch.h"
#include "layers/iclaa_attention.h"

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
    iclaa_log_phi(lphi, x, kind == FeatureKind::elu1 ? nullptr : &omega[((size_t)l * NH + h) * m * hs], hs, m);
}

IclaaBias::IclaaBias(const PerformerFeatures& f) : L(f.L), NH(f.NH), hs(f.hs), m(f.m) {
    kv.assign((size_t)L * NH * m * hs, 0.0);
    d.assign((size_t)L * NH * m, 0.0);
    kappa.assign((size_t)L * NH, kNegInf);
}

template <typename real>
std::vector<real> iclaa_logits(GPT<real>& g, const PerformerFeatures& f, const IclaaBias* bias, AttnSim sim,
                               const std::vector<int>& tokens, int p0, std::vector<std::vector<double>>* capture) {
    const GPTConfig& c = g.cfg;
    if (c.d_in > 0 || c.d_out > 0) fail("ICLAA needs a token GPT with its tied LM head");
    if (f.L != c.L || f.NH != c.NH || f.hs != c.C / c.NH)
        fail(strfmt("ICLAA: features for L=%d NH=%d hs=%d do not fit the GPT (L=%d NH=%d hs=%d)", f.L, f.NH, f.hs, c.L, c.NH, c.C / c.NH));
    if (bias && (bias->L != f.L || bias->NH != f.NH || bias->m != f.m)) fail("ICLAA: bias terms and features disagree in shape");
    const int T = (int)tokens.size(), C = c.C, V = c.V, NH = c.NH, hs = C / NH, m = f.m;
    if (T < 1) fail("ICLAA: empty sequence");
    if (p0 < 0 || p0 + T > c.maxT) fail(strfmt("ICLAA: positions %d..%d outside the GPT's [0, %d)", p0, p0 + T - 1, c.maxT));
    for (int t : tokens) if (t < 0 || t >= V) fail(strfmt("token id %d outside the vocabulary [0, %d)", t, V));
    const Device dev = g.s.dev;
    const bool use_bias = bias && !bias->empty(), favor = f.kind == FeatureKind::favor;
    const size_t per_om = (size_t)NH * m * hs;
    // the GPT's own forward, its softmax attention replaced by the hybrid one; one layer's features and prompt
    // terms at a time on g's device
    Buffer<double> lphi(dev, iclaa_attention_scratch_size(T, NH, m, sim == AttnSim::kernel ? 1 : 0)), om(dev, favor ? per_om : 0),
        bkv(dev, use_bias ? per_om : 0), bd(dev, use_bias ? (size_t)NH * m : 0), kap(dev, use_bias ? NH : 0);
    auto up = [&](Buffer<double>& dst, const std::vector<double>& src, size_t off) {
        if (dst.n) device_copy(dev, dst.ptr, src.data() + off * dst.n, dst.n * sizeof(double), Copy::host_to_device);
    };
    if (capture) capture->assign(c.L, {});
    struct Reset {  // the override ends with this call, whatever happens
        GPT<real>& g;
        ~Reset() { g.attention_override = nullptr; }
    } reset{g};
    g.attention_override = [&](const std::string& h, const real* qkv, real* atty) {
        const int l = std::stoi(h.substr(2));  // "h.<l>."
        if (capture) {
            std::vector<real> q((size_t)T * 3 * C);
            device_copy(dev, q.data(), qkv, q.size() * sizeof(real), Copy::device_to_host);
            (*capture)[l].assign(q.begin(), q.end());
        }
        // atty = exact softmax among the current tokens + the prompt's random-feature term (layers/iclaa_attention.h)
        up(om, f.omega, l);
        if (use_bias) { up(bkv, bias->kv, l); up(bd, bias->d, l); up(kap, bias->kappa, l); }
        op::iclaa_attention_forward(dev, atty, lphi.ptr, qkv, favor ? om.ptr : nullptr, use_bias ? bkv.ptr : nullptr, bd.ptr, kap.ptr,
                                    sim == AttnSim::kernel ? 1 : 0, T, C, NH, m);
    };
    Batch bt;
    bt.B = 1;
    bt.T = T;
    bt.tokens = tokens;
    for (int t = 0; t < T; t++) bt.pos.push_back(p0 + t);
    g.forward(bt);  // no targets: logits only
    return g.outputs();
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
