// lm_io.h — the one batch/head/loss contract (DESIGN.md seam 5), written once for every model: GPT, the kernel LM,
// both passes of the CGT and the duallens one-head model.
//
//   DeviceBatch   a Batch checked against the model (check_batch, data/batch.h) and copied to the device: tokens or
//                 vectors, positions, targets; plus the host-side loss weight of every position (its mask, 0 where
//                 the target is ignored).
//   masked_mean   loss = Σ_i w_i·losses_i / Σ_i w_i   and the gradient it starts from, dlosses_i = weight·w_i / Σ w.
//   LMHead        the final layer norm and the head, forward and backward:
//
//       lnf    = LN_f(x)                                  x (N,C), lnf.w / lnf.b (C)
//       logits = lnf·wteᵀ            (tied LM head, V)     losses = CE(logits, targets)     ignored targets: 0
//       pred   = lnf·Wheadᵀ + b      (vector head, d_out)  losses = MSE(pred, target_vecs)
//
// Activation names (for dumps and tests) carry the pass's prefix: <pre>lnf, <pre>lnf.mean, <pre>lnf.rstd,
// <pre>logits + <pre>probs or <pre>pred, and <pre>losses.
#pragma once
#include <string>
#include <vector>

#include "data/batch.h"
#include "engine/device.h"
#include "models/block.h"
#include "models/state.h"

namespace icl {

// Gradient accumulation (models/trainer.h, --grad-accum K): the factors that make a micro-batch's loss its share of
// the whole batch's, so that K micro-batches give the whole batch's loss and gradient. ce = W_i/W (the main pass's
// scored weight, the masked mean's denominator), aux = A_i/A (the CGT's aux pass), seq = B_i/B (terms that are
// means over sequences: the CGT's R_C and VAE KL). All 1 for a whole batch. A model's forward returns its loss
// multiplied by these (its share), and its backward the gradient of that share.
struct LossScale {
    double ce = 1, aux = 1, seq = 1;
};
// ce = W_i/W and seq = B_i/B of each micro-batch (aux = 1): the scales of a model whose loss is one masked mean.
std::vector<LossScale> plain_accumulation_scales(const std::vector<Batch>& micro);

// The parameters of the head: lnf.w, lnf.b and, for a vector head, head.w (d_out,C), head.b. (The tied head's
// wte is the token embedding, listed by the model itself.)
void lm_head_parameters(TensorTable& t, int C, int d_out);

// What a model's head is: width C, and either a tied LM head over V tokens or a vector head of d_out.
struct HeadSpec {
    int C = 0, V = 0, d_out = 0;
    bool vector() const { return d_out > 0; }
};
// The head's activations for N = B·T rows at prefix pre.
void lm_head_activations(ActTable& t, const std::string& pre, int64_t B, int64_t T, const HeadSpec& h);

// The BatchSpec of a model with V tokens (or d_in-wide vector inputs), a tied LM head over V (or a d_out-wide
// vector head) and positions below maxT.
BatchSpec lm_batch_spec(int V, int d_in, int d_out, int maxT, const char* model);

template <typename real>
struct DeviceBatch {
    int B = 0, T = 0;
    bool has_pos = false, has_targets = false;
    Buffer<int> tokens, targets, pos;  // (B,T) each; grow-only, reused from step to step
    Buffer<real> vectors, target_vecs; // (B,T,D), (B,T,Dout)
    std::vector<double> weight;        // (B·T) on the host: mask, 0 where the target is ignored (empty without targets)

    // check_batch(bt, spec), then copy what the batch holds to `dev`.
    void upload(Device dev, const Batch& bt, const BatchSpec& spec);
    const int* pos_ptr() const { return has_pos ? pos.ptr : nullptr; }
};

// The masked mean of the per-position losses s.act(losses) (B·T) with the batch's weights, and dloss_host =
// weight·w/Σw. No scored position: an error, or (allow_unscored, the CGT's aux pass over padding; or weight 0, a
// micro-batch with no share of an accumulated batch's loss) 0 with a zero gradient.
template <typename real>
double masked_mean(ModelState<real>& s, const std::string& losses, const std::vector<double>& w, double weight,
                   std::vector<real>& dloss_host, bool allow_unscored = false);

template <typename real>
struct LMHead {
    HeadSpec spec;
    std::string pre;  // activation-name prefix of this pass ("" or "aux.")

    // lnf = LN_f(x), then the logits or predictions; when the batch has targets, the per-position losses and their
    // masked mean, which it returns (NaN without targets), keeping dlosses = weight·w/Σw for backward.
    double forward(ModelState<real>& s, const real* x, const DeviceBatch<real>& in, double weight = 1.0, bool allow_unscored = false);
    void forward_outputs(ModelState<real>& s, const real* x, const DeviceBatch<real>& in);  // LN_f and the head only
    // From the kept dloss back through the head and LN_f into d(x_name) (accumulated, like every backward).
    void backward(ModelState<real>& s, const std::string& x_name, const DeviceBatch<real>& in);
    bool ready() const { return !dloss_host_.empty(); }  // a forward with targets happened
    void clear() { dloss_host_.clear(); }
    std::vector<real> outputs(ModelState<real>& s) const { return s.fetch_act(pre + (spec.vector() ? "pred" : "logits")); }

private:
    int N_ = 0;
    std::vector<real> dloss_host_;
    Buffer<real> dloss_;
};

}  // namespace icl
