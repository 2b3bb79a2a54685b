// cgt_stream.cpp — token-by-token streaming decode of the CGT with KV caches (CGTStream, see cgt.h): every
// inference mode of spec §1.9 one token at a time, equal to the parallel forms (spec §7 invariant 11).
#include "models/cgt/cgt.h"

#include <algorithm>
#include <cmath>

#include "engine/common.h"
#include "layers/dispatch.h"
#include "layers/kv_attention.h"
#include "models/block.h"

namespace icl {

// ------------------------------------------------------------------------------------------------------
// streaming decode (CGTStream, see cgt.h): the blocks on one row, attention against the KV caches

template <typename real>
CGTStream<real>::CGTStream(CGT<real>& model) : m_(model) {
    const CGTConfig& c = m_.cfg;
    if (c.mod.any()) fail("streaming decode: the attention modifications (--attn-mod) have no single-token path; use the parallel forward");
    const Device dev = m_.s.dev;
    const size_t T = (size_t)c.maxT, W = (size_t)std::max(c.dx, c.dy), Wu = (size_t)c.dx + std::max(c.dy, 0);
    const size_t M = std::max(c.M, 1), r = std::max(c.r, 1);
    auto buf = [&](size_t n) { return Buffer<real>(dev, n); };  // zero-filled, on the model's device
    auto site = [&](Site& s) {
        s.ln = buf(W); s.mean = buf(1); s.rstd = buf(1); s.mix = buf(Wu); s.c = buf(M); s.P = buf(M * r); s.z = buf(r); s.G = buf(M * r);
    };
    for (int b = 0; b < c.L; b++) xcache_.push_back(buf(T * 3 * c.dx));
    xs1_.resize(c.L); xs2_.resize(c.L);
    for (int b = 0; b < c.L; b++) { site(xs1_[b]); site(xs2_[b]); }
    if (c.has_y())
        for (int b = 0; b < c.ell; b++) ycache_.push_back(buf(T * 3 * c.dy));
    site(ys1_); site(ys2_);
    const size_t dy = std::max(c.dy, 1), nout = c.d_out > 0 ? c.d_out : c.V;
    x_ = buf(c.dx); y_ = buf(dy); yuse_ = buf(dy); lnf_ = buf(c.dx); mean_ = buf(1); rstd_ = buf(1); out_ = buf(nout);
    atty_ = buf(W); proj_ = buf(W); fch_ = buf(4 * W); fchg_ = buf(4 * W);
    att_ = buf((size_t)std::max(c.NHx, c.NHy) * T);
    yl_ = buf(dy); yl_stat_ = buf(2); vin_ = buf(std::max(c.d_in, 1));
    ema_ = Buffer<double>(dev, dy);
    ids_ = Buffer<int>(dev, 2);
}

template <typename real>
void CGTStream<real>::reset() {
    nx_ = ny_ = next_pos_ = 0;
    src_ = YSource::dynamic;
}

template <typename real>
void CGTStream<real>::set_ema(const std::vector<real>& y_init, double gamma) {
    if (!m_.cfg.has_y()) fail("stream: this CGT has no y stream");
    if (y_init.size() != (size_t)m_.cfg.dy) fail("stream: y_init must have d_y elements");
    src_ = YSource::ema;
    gamma_ = gamma;
    const std::vector<double> u(y_init.begin(), y_init.end());  // u_{−1} = y_init
    device_copy(m_.s.dev, ema_.ptr, u.data(), u.size() * sizeof(double), Copy::host_to_device);
}

template <typename real>
void CGTStream<real>::set_fixed_y(const std::vector<real>& y) {
    if (y.size() != (size_t)std::max(m_.cfg.dy, 0)) fail("stream: y must have d_y elements");
    src_ = YSource::fixed;
    if (!y.empty()) device_copy(m_.s.dev, yuse_.ptr, y.data(), y.size() * sizeof(real), Copy::host_to_device);
}

template <typename real>
void CGTStream<real>::freeze(bool keep_context) {
    if (!m_.cfg.has_y()) fail("stream: this CGT has no y stream");
    if (ny_ == 0 || src_ == YSource::fixed) fail("stream: freeze needs at least one step with a computed y");
    src_ = YSource::fixed;  // ỹ = yuse_ of the last token
    if (!keep_context) nx_ = 0;
}

template <typename real>
std::vector<real> CGTStream<real>::y_used() const {
    return m_.s.to_host(yuse_, 0, (size_t)std::max(m_.cfg.dy, 0));
}

// u = LN(x) at site 1 (attention) or 2 (MLP), then the mix → what the projection reads (one row).
template <typename real>
void CGTStream<real>::site_step(const std::string& p, const BlockShape& k, int site, const real* x, const real* y, const real* ux, Site& st) {
    const Device dev = m_.s.dev;
    auto P = [&](const std::string& n) { return m_.s.param(p + n); };
    const std::string ln = site == 1 ? "ln1." : "ln2.";
    op::layernorm_forward(dev, st.ln.ptr, st.mean.ptr, st.rstd.ptr, x, P(ln + "w"), P(ln + "b"), 1, k.C);
    if (k.mix == MixKind::generator) {
        const std::string g = site == 1 ? "gen.att." : "gen.mlp.";
        op::generator_forward(dev, st.mix.ptr, st.c.ptr, st.P.ptr, st.z.ptr, st.G.ptr, st.ln.ptr, y, P(g + "S"), P(g + "L"), P(g + "R"), 1, k.C,
                              k.Dy, k.M, k.r, k.h);
    } else if (k.mix == MixKind::concat) {
        op::concat_forward(dev, st.mix.ptr, ux, st.ln.ptr, 1, k.Cx, k.C);
    } else {
        device_copy(dev, st.mix.ptr, st.ln.ptr, (size_t)k.C * sizeof(real), Copy::device_to_device);
    }
}

// block_forward (models/block.cpp) on the token's row x (C), in place; its [q|k|v] row goes to cache row n−1.
template <typename real>
void CGTStream<real>::block_step(const std::string& p, const BlockShape& k, real* x, real* cache, int n, const real* y, const real* ux1,
                                 const real* ux2, Site& s1, Site& s2) {
    const Device dev = m_.s.dev;
    const int C = k.C, Cu = k.in_width();
    auto P = [&](const std::string& nm) { return m_.s.param(p + nm); };
    // x_mid = x + attn(mix(LN1(x)))·Woᵀ + bo      (the query row attends to cache rows 0..n−1)
    site_step(p, k, 1, x, y, ux1, s1);
    real* row = cache + (size_t)(n - 1) * 3 * C;
    op::matmul_forward(dev, row, s1.mix.ptr, P("attn.qkv.w"), P("attn.qkv.b"), 1, Cu, 3 * C);
    op::kv_attention_step(dev, atty_.ptr, att_.ptr, cache, n, C, k.NH);
    op::matmul_forward(dev, proj_.ptr, atty_.ptr, P("attn.proj.w"), P("attn.proj.b"), 1, C, C);
    op::residual_forward(dev, x, x, proj_.ptr, (int64_t)C);
    // x_out = x_mid + GELU(mix(LN2(x_mid))·W1ᵀ + b1)·W2ᵀ + b2
    site_step(p, k, 2, x, y, ux2, s2);
    op::matmul_forward(dev, fch_.ptr, s2.mix.ptr, P("mlp.fc.w"), P("mlp.fc.b"), 1, Cu, 4 * C);
    op::gelu_forward(dev, fchg_.ptr, fch_.ptr, (int64_t)4 * C);
    op::matmul_forward(dev, proj_.ptr, fchg_.ptr, P("mlp.proj.w"), P("mlp.proj.b"), 1, 4 * C, C);
    op::residual_forward(dev, x, x, proj_.ptr, (int64_t)C);
}

template <typename real>
const real* CGTStream<real>::step(int token, int pos) {
    if (m_.cfg.d_in > 0) fail("stream: this CGT takes vector inputs (step_vector)");
    if (token < 0 || token >= m_.cfg.V) fail(strfmt("token id %d outside the vocabulary [0, %d)", token, m_.cfg.V));
    return run(&token, nullptr, pos);
}

template <typename real>
const real* CGTStream<real>::step_vector(const real* v, int pos) {
    if (m_.cfg.d_in == 0) fail("stream: this CGT takes tokens (step)");
    return run(nullptr, v, pos);
}

// x_pass_forward + head_forward (cgt.cpp) for one token, with the caches as the attention context.
template <typename real>
const real* CGTStream<real>::run(const int* token, const real* v, int pos) {
    const CGTConfig& c = m_.cfg;
    ModelState<real>& s = m_.s;
    const Device dev = s.dev;
    if (pos < 0) pos = next_pos_;
    if (pos >= c.maxT) fail(strfmt("stream: position %d exceeds the model's max-T %d", pos, c.maxT));
    if (nx_ >= c.maxT) fail("stream: the KV cache is full (max-T tokens in context)");
    const bool ystream = c.has_y() && src_ != YSource::fixed;
    // what crosses to the device: [token, pos] (and the input vector of a d_in model)
    const int ids[2] = {token ? *token : 0, pos};
    device_copy(dev, ids_.ptr, ids, sizeof(ids), Copy::host_to_device);
    if (v) device_copy(dev, vin_.ptr, v, (size_t)c.d_in * sizeof(real), Copy::host_to_device);
    const int* d_tok = ids_.ptr;
    const int* d_pos = ids_.ptr + 1;
    // encoded = wte[token] + wpe[pos]  (x and y slices)
    if (c.d_in > 0) op::vector_embed_forward(dev, x_.ptr, vin_.ptr, d_pos, s.param("wpe"), 1, 1, c.dx, c.d_in, c.maxT);
    else op::encoder_forward(dev, x_.ptr, d_tok, d_pos, s.param("wte"), s.param("wpe"), 1, 1, c.dx, c.V, c.maxT);
    if (ystream) {
        if (c.d_in > 0) op::vector_embed_forward(dev, y_.ptr, vin_.ptr, d_pos, s.param("wpe_y"), 1, 1, c.dy, 0, c.maxT);
        else op::encoder_forward(dev, y_.ptr, d_tok, d_pos, s.param("wte_y"), s.param("wpe_y"), 1, 1, c.dy, c.V, c.maxT);
        ny_++;
    }
    nx_++;
    for (int b = 0; b < c.L; b++) {
        const std::string ph = "h." + std::to_string(b) + ".";
        // x = x + Attn(T^att(LN1(x); y)) ;  x = x + MLP(T^mlp(LN2(x); y))   (no T^κ in blocks < ℓ)
        block_step(ph, c.x_block(b), x_.ptr, xcache_[b].ptr, nx_, c.modulated(b) ? yuse_.ptr : nullptr, nullptr, nullptr, xs1_[b], xs2_[b]);
        if (ystream && b < c.ell) {
            // y = y + Attn_y([LN1x(x), LN1y(y)]) ;  y = y + MLP_y([LN2x(x), LN2y(y)])
            block_step(ph + "y.", c.y_block(), y_.ptr, ycache_[b].ptr, ny_, nullptr, xs1_[b].ln.ptr, xs2_[b].ln.ptr, ys1_, ys2_);
            if (b == c.ell - 1) {
                // y^ℓ = y, or LN(y) with --ln-gen; eval VAE: y_used = μ = y^ℓ.
                // EMA: u_t = (1−γ) u_{t−1} + γ y^ℓ_t (in double, as ema_outputs)
                const size_t ybytes = (size_t)c.dy * sizeof(real);
                const real* yl = y_.ptr;
                if (c.ln_gen) {
                    op::layernorm_forward(dev, yl_.ptr, yl_stat_.ptr, yl_stat_.ptr + 1, y_.ptr, s.param("yl_ln.w"), s.param("yl_ln.b"), 1, c.dy);
                    yl = yl_.ptr;
                }
                if (src_ == YSource::ema) op::ema_step(dev, ema_.ptr, yuse_.ptr, yl, gamma_, c.dy);
                else device_copy(dev, yuse_.ptr, yl, ybytes, Copy::device_to_device);
            }
        }
    }
    // out = LN_f(x)·Wᵀ (+ b): the tied LM head, or the vector head
    op::layernorm_forward(dev, lnf_.ptr, mean_.ptr, rstd_.ptr, x_.ptr, s.param("lnf.w"), s.param("lnf.b"), 1, c.dx);
    if (c.d_out > 0) op::matmul_forward(dev, out_.ptr, lnf_.ptr, s.param("head.w"), s.param("head.b"), 1, c.dx, c.d_out);
    else op::matmul_forward(dev, out_.ptr, lnf_.ptr, s.param("wte"), (const real*)nullptr, 1, c.dx, c.V);
    next_pos_ = pos + 1;
    out_host_.resize(out_.n);  // allocated at the first step only
    device_copy(dev, out_host_.data(), out_.ptr, out_.n * sizeof(real), Copy::device_to_host);
    return out_host_.data();
}

template struct CGTStream<float>;
template struct CGTStream<double>;


}  // namespace icl
