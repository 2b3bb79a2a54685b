// fdcheck.h — whole-model gradient check: fp64 central finite differences of the model's loss against
// its hand-written backward, for every element of every parameter (or a strided subset of large ones).
//
//   ∂L/∂θ_i ≈ (L(θ + h·e_i) − L(θ − h·e_i)) / 2h        truncation O(h²), round-off O(ε_64·L/h)
//   h = 1e-5 balances the two at ~1e-10 relative for losses of order 1.
//
// The tests call it as fd_check_params(m, batch, 1e-5, 1e-8, 1e-6): an element passes when |analytic − numeric|
// ≤ atol + rtol·|numeric| = 1e-8 + 1e-6·|numeric|. Measured worst |d| / tol over every tensor, the same tiny models
// (`gradcheck --model gpt|cgt [--task linreg] [--vae] --atol 1e-8 --rtol 1e-6 --threads 1`, commit f8853e0,
// 2026-11-26): 0.037 (GPT), 0.020 (GPT, linreg), 0.019 (CGT), 0.013 (CGT, linreg), 0.039 (CGT VAE) — the
// ~1e-10 above with a margin of ~25, while a wrong backward term is off by O(|gradient|), i.e. 1e2–1e6 × tol.
#pragma once
#include <algorithm>
#include <vector>

#include "data/batch.h"
#include "engine/compare.h"
#include "models/state.h"

namespace icl {

// Model: double forward(const Batch&), void backward(), ModelState<double> s (on the CPU).
// max_per_tensor > 0 checks at most that many evenly spaced elements of each tensor.
template <typename Model>
std::vector<TensorDiff> fd_check_params(Model& m, const Batch& batch, double h, double atol, double rtol, int64_t max_per_tensor = 0) {
    m.forward(batch);
    m.backward();
    std::vector<double> grads = m.s.to_host(m.s.grads, 0, m.s.ptable.total);
    std::vector<TensorDiff> rows;
    for (size_t t = 0; t < m.s.ptable.size(); t++) {
        const TensorSpec& spec = m.s.ptable.specs[t];
        const size_t off = m.s.ptable.offsets[t];
        const int64_t n = spec.numel();
        const int64_t stride = (max_per_tensor > 0 && n > max_per_tensor) ? (n + max_per_tensor - 1) / max_per_tensor : 1;
        std::vector<double> analytic, numeric;
        for (int64_t i = 0; i < n; i += stride) {
            double orig = m.s.to_host(m.s.params, off + i, 1)[0];
            double plus = orig + h, minus = orig - h;
            m.s.upload(m.s.params, off + i, &plus, 1);
            double lp = m.forward(batch);
            m.s.upload(m.s.params, off + i, &minus, 1);
            double lm = m.forward(batch);
            m.s.upload(m.s.params, off + i, &orig, 1);
            numeric.push_back((lp - lm) / (2 * h));
            analytic.push_back(grads[off + i]);
        }
        Shape sh = stride == 1 ? spec.shape : Shape{(int64_t)numeric.size()};
        rows.push_back(compare_tensor(spec.name, stride == 1 ? "grad" : strfmt("grad 1/%lld", (long long)stride), sh, numeric.data(),
                                      analytic.data(), atol, rtol));
    }
    return rows;
}

}  // namespace icl
