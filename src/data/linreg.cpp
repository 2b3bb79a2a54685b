// linreg.cpp — see linreg.h.
#include "data/linreg.h"

namespace icl {

Batch linreg_batch(const LinRegConfig& cfg, int B, Rng& rng, std::vector<float>* clean) {
    Batch bt;
    bt.B = B;
    bt.T = cfg.seq_len();
    bt.D = cfg.width();
    bt.Dout = cfg.d_out;
    bt.vectors.assign((size_t)B * bt.T * bt.D, 0.0f);
    bt.target_vecs.assign((size_t)B * bt.T * bt.Dout, 0.0f);
    bt.mask.assign((size_t)B * bt.T, 0.0f);
    if (clean) clean->assign((size_t)B * bt.T * bt.Dout, 0.0f);
    std::vector<double> U((size_t)cfg.d_out * cfg.d_in), bias(cfg.d_out), u(cfg.d_in);
    for (int s = 0; s < B; s++) {
        for (auto& x : U) x = rng.normal();
        for (auto& x : bias) x = rng.normal();
        for (int k = 0; k < cfg.pairs; k++) {
            int tu = 2 * k, tv = 2 * k + 1;
            for (auto& x : u) x = rng.normal();
            float* xu = &bt.vectors[((size_t)s * bt.T + tu) * bt.D];
            float* xv = &bt.vectors[((size_t)s * bt.T + tv) * bt.D];
            for (int i = 0; i < cfg.d_in; i++) xu[i] = (float)u[i];
            for (int o = 0; o < cfg.d_out; o++) {
                double v = bias[o];
                for (int i = 0; i < cfg.d_in; i++) v += U[(size_t)o * cfg.d_in + i] * u[i];
                double noisy = v + cfg.noise * rng.normal();
                xv[o] = (float)noisy;
                bt.target_vecs[((size_t)s * bt.T + tu) * bt.Dout + o] = (float)noisy;
                if (clean) (*clean)[((size_t)s * bt.T + tu) * bt.Dout + o] = (float)v;
            }
            bt.mask[(size_t)s * bt.T + tu] = 1.0f;
        }
    }
    return bt;
}

}  // namespace icl
