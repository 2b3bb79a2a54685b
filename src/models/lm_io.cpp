// lm_io.cpp — the batch/head/loss contract; see lm_io.h.
#include "models/lm_io.h"

#include <cmath>

#include "engine/common.h"
#include "layers/dispatch.h"

namespace icl {

void lm_head_parameters(TensorTable& t, int C, int d_out) {
    t.add({"lnf.w", {C}, Init::ones, 0, "final layer-norm gain", false});
    t.add({"lnf.b", {C}, Init::zeros, 0, "final layer-norm bias", false});
    if (d_out > 0) {
        t.add({"head.w", {d_out, C}, Init::normal, 0.02f, "vector read-out head (D_out,C)", true});
        t.add({"head.b", {d_out}, Init::zeros, 0, "vector read-out bias", false});
    }
}

void lm_head_activations(ActTable& t, const std::string& pre, int64_t B, int64_t T, const HeadSpec& h) {
    t.add(pre + "lnf", {B, T, h.C}, "final LN", true);
    t.add(pre + "lnf.mean", {B, T}, "final LN mean", false);
    t.add(pre + "lnf.rstd", {B, T}, "final LN 1/std", false);
    if (h.vector()) {
        t.add(pre + "pred", {B, T, h.d_out}, "vector predictions", true);
    } else {
        t.add(pre + "logits", {B, T, h.V}, "logits", true);
        t.add(pre + "probs", {B, T, h.V}, "softmax(logits)", false);
    }
    t.add(pre + "losses", {B, T}, "per-position loss", false);
}

BatchSpec lm_batch_spec(int V, int d_in, int d_out, int maxT, const char* model) {
    BatchSpec b;
    b.V = d_in > 0 ? 0 : V;
    b.D = d_in;
    b.Dout = d_out;
    b.max_T = maxT;
    b.model = model;
    return b;
}

// ---- the batch on the device ----------------------------------------------------------------------------

template <typename real, typename src>
static void copy_up(Device dev, Buffer<real>& dst, const std::vector<src>& host) {
    std::vector<real> v(host.begin(), host.end());
    ensure_size(dst, dev, v.size());
    device_copy(dev, dst.ptr, v.data(), v.size() * sizeof(real), Copy::host_to_device);
}

template <typename real>
void DeviceBatch<real>::upload(Device dev, const Batch& bt, const BatchSpec& spec) {
    has_targets = check_batch(bt, spec);
    B = bt.B;
    T = bt.T;
    has_pos = !bt.pos.empty();
    if (has_pos) copy_up(dev, pos, bt.pos);
    if (spec.D > 0) copy_up(dev, vectors, bt.vectors);
    else copy_up(dev, tokens, bt.tokens);
    weight.clear();
    if (!has_targets) return;
    if (spec.Dout > 0) copy_up(dev, target_vecs, bt.target_vecs);
    else copy_up(dev, targets, bt.targets);
    weight = loss_weights(bt);  // mask, 0 where the target is ignored (data/batch.h)
}

// ---- the loss --------------------------------------------------------------------------------------------

std::vector<LossScale> plain_accumulation_scales(const std::vector<Batch>& micro) {
    std::vector<LossScale> sc(micro.size());
    double W = 0, Bs = 0;
    std::vector<double> Wi(micro.size());
    for (size_t i = 0; i < micro.size(); i++) {
        W += Wi[i] = batch_loss_weight(micro[i]);
        Bs += micro[i].B;
    }
    for (size_t i = 0; i < micro.size(); i++) {
        sc[i].ce = W > 0 ? Wi[i] / W : 0.0;
        sc[i].seq = Bs > 0 ? micro[i].B / Bs : 0.0;
    }
    return sc;
}

template <typename real>
double masked_mean(ModelState<real>& s, const std::string& losses, const std::vector<double>& w, double weight,
                   std::vector<real>& dloss_host, bool allow_unscored) {
    const std::vector<real> l = s.fetch_act(losses);
    ICL_ASSERT(l.size() >= w.size());
    double wsum = 0, lsum = 0;
    for (size_t i = 0; i < w.size(); i++) {
        wsum += w[i];
        lsum += w[i] * (double)l[i];
    }
    dloss_host.assign(w.size(), real(0));
    if (wsum <= 0) {
        if (!allow_unscored && weight != 0) fail("batch mask is all zero: no position is scored");
        return 0.0;
    }
    for (size_t i = 0; i < w.size(); i++) dloss_host[i] = (real)(weight * w[i] / wsum);
    return lsum / wsum;
}

// ---- the head --------------------------------------------------------------------------------------------

template <typename real>
void LMHead<real>::forward_outputs(ModelState<real>& s, const real* x, const DeviceBatch<real>& in) {
    const Device dev = s.dev;
    const int N = in.B * in.T, C = spec.C;
    N_ = N;
    // lnf = LN_f(x)
    op::layernorm_forward(dev, s.act(pre + "lnf"), s.act(pre + "lnf.mean"), s.act(pre + "lnf.rstd"), x, s.param("lnf.w"), s.param("lnf.b"), N, C);
    if (spec.vector()) {
        // pred = lnf·Wheadᵀ + b
        op::matmul_forward(dev, s.act(pre + "pred"), s.act(pre + "lnf"), s.param("head.w"), s.param("head.b"), N, C, spec.d_out);
    } else {
        // logits = lnf·wteᵀ (tied)
        op::matmul_forward(dev, s.act(pre + "logits"), s.act(pre + "lnf"), s.param("wte"), (const real*)nullptr, N, C, spec.V);
    }
    dloss_host_.clear();
}

template <typename real>
double LMHead<real>::forward(ModelState<real>& s, const real* x, const DeviceBatch<real>& in, double weight, bool allow_unscored) {
    forward_outputs(s, x, in);
    const Device dev = s.dev;
    const int N = N_;
    if (!in.has_targets) {
        dloss_host_.clear();
        return NAN;
    }
    if (spec.vector()) op::mse_forward(dev, s.act(pre + "losses"), s.act(pre + "pred"), in.target_vecs.ptr, N, spec.d_out);
    else op::crossentropy_forward(dev, s.act(pre + "losses"), s.act(pre + "probs"), s.act(pre + "logits"), in.targets.ptr, N, spec.V);
    return masked_mean(s, pre + "losses", in.weight, weight, dloss_host_, allow_unscored);
}

template <typename real>
void LMHead<real>::backward(ModelState<real>& s, const std::string& x_name, const DeviceBatch<real>& in) {
    if (dloss_host_.empty()) fail("backward() needs a forward() with targets first");
    const Device dev = s.dev;
    const int N = N_, C = spec.C;
    ensure_size(dloss_, dev, N);
    s.upload(dloss_, 0, dloss_host_.data(), N);
    if (spec.vector()) {
        // losses = MSE(pred, target_vecs) ;  pred = lnf·Wheadᵀ + b
        op::mse_backward(dev, s.dact(pre + "pred"), dloss_.ptr, s.act(pre + "pred"), in.target_vecs.ptr, N, spec.d_out);
        op::matmul_backward(dev, s.dact(pre + "lnf"), s.grad("head.w"), s.grad("head.b"), s.dact(pre + "pred"), s.act(pre + "lnf"),
                            s.param("head.w"), N, C, spec.d_out);
    } else {
        // losses = CE(logits, targets) ;  logits = lnf·wteᵀ (tied: wte also gets the embedding's gradient)
        op::crossentropy_backward(dev, s.dact(pre + "logits"), dloss_.ptr, s.act(pre + "probs"), in.targets.ptr, N, spec.V);
        op::matmul_backward(dev, s.dact(pre + "lnf"), s.grad("wte"), (real*)nullptr, s.dact(pre + "logits"), s.act(pre + "lnf"),
                            s.param("wte"), N, C, spec.V);
    }
    // lnf = LN_f(x)
    op::layernorm_backward(dev, s.dact(x_name), s.grad("lnf.w"), s.grad("lnf.b"), s.dact(pre + "lnf"), s.act(x_name), s.param("lnf.w"),
                           s.act(pre + "lnf.mean"), s.act(pre + "lnf.rstd"), N, C);
}

template struct DeviceBatch<float>;
template struct DeviceBatch<double>;
template struct LMHead<float>;
template struct LMHead<double>;
template double masked_mean(ModelState<float>&, const std::string&, const std::vector<double>&, double, std::vector<float>&, bool);
template double masked_mean(ModelState<double>&, const std::string&, const std::vector<double>&, double, std::vector<double>&, bool);

}  // namespace icl
