// batch.cpp — check_batch, the one check of a batch against a model (see batch.h).
#include "data/batch.h"

#include <cmath>

#include "engine/common.h"

namespace icl {

Batch next_token_batch(int B, int T) {
    Batch bt;
    bt.B = B;
    bt.T = T;
    bt.tokens.assign((size_t)B * T, 0);
    bt.targets.assign((size_t)B * T, 0);
    bt.mask.assign((size_t)B * T, 1.0f);
    return bt;
}

void set_next_token_row(Batch& bt, int b, const int* seq) {
    for (int t = 0; t < bt.T; t++) {
        bt.tokens[(size_t)b * bt.T + t] = seq[t];
        bt.targets[(size_t)b * bt.T + t] = seq[t + 1];
    }
}

bool check_batch(const Batch& bt, const BatchSpec& spec) {
    const char* m = spec.model;
    if (bt.B < 1 || bt.T < 1) fail(strfmt("empty batch (B=%d, T=%d)", bt.B, bt.T));
    const size_t n = (size_t)bt.B * (size_t)bt.T;
    // inputs
    if (spec.D > 0) {
        if (!bt.vector_input()) fail(strfmt("this %s takes vector inputs, the batch has tokens", m));
        if (bt.D != spec.D) fail(strfmt("batch vectors have width %d, the %s expects %d", bt.D, m, spec.D));
        if (bt.vectors.size() != n * (size_t)bt.D) fail("batch vectors do not have B*T*D entries");
    } else {
        if (bt.vector_input()) fail(strfmt("this %s takes tokens, the batch has vectors", m));
        if (bt.tokens.size() != n) fail("batch tokens do not have B*T entries");
        for (int t : bt.tokens)
            if (t < 0 || t >= spec.V) fail(strfmt("token id %d outside the vocabulary [0, %d)", t, spec.V));
    }
    // positions
    if (!bt.pos.empty()) {
        if (bt.pos.size() != n) fail("batch positions do not have B*T entries");
        for (int p : bt.pos)
            if (p < 0 || p >= spec.max_T) fail(strfmt("position %d outside [0, %d)", p, spec.max_T));
    } else if (bt.T > spec.max_T) {
        fail(strfmt("sequence length %d exceeds the model's max-T %d", bt.T, spec.max_T));
    }
    // targets and mask
    bool has_targets;
    if (spec.Dout > 0) {
        has_targets = !bt.target_vecs.empty();
        if (has_targets && bt.Dout != spec.Dout) fail(strfmt("batch targets have width %d, the %s predicts %d", bt.Dout, m, spec.Dout));
        if (has_targets && bt.target_vecs.size() != n * (size_t)spec.Dout) fail("batch target vectors do not have B*T*Dout entries");
    } else {
        has_targets = !bt.targets.empty();
        if (has_targets && bt.targets.size() != n) fail("batch targets do not have B*T entries");
        for (int t : bt.targets)
            if (t >= spec.V) fail(strfmt("target id %d outside the vocabulary [0, %d)", t, spec.V));
    }
    if (has_targets) {
        if (bt.mask.size() != n) fail(strfmt("batch mask has %zu entries, the batch B*T = %zu", bt.mask.size(), n));
        for (float w : bt.mask)
            if (!std::isfinite(w) || w < 0) fail(strfmt("batch mask weight %g: must be finite and >= 0", (double)w));
    }
    return has_targets;
}

std::vector<double> loss_weights(const Batch& bt) {
    if (bt.targets.empty() && bt.target_vecs.empty()) return {};
    std::vector<double> w(bt.mask.begin(), bt.mask.end());
    if (bt.Dout == 0)
        for (size_t i = 0; i < w.size() && i < bt.targets.size(); i++)
            if (bt.targets[i] < 0) w[i] = 0;  // an ignored position counts for nothing, whatever its mask says
    return w;
}

double batch_loss_weight(const Batch& bt) {
    double s = 0;
    for (double w : loss_weights(bt)) s += w;
    return s;
}

}  // namespace icl
