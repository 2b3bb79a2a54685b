// compare_devices.h — one model, two devices: the same parameters and the same batch, one forward + backward
// on each, compared tensor by tensor (DESIGN.md seam 4). What `gradcheck --compare cpu,cuda` prints and what
// tests/test_cuda.cpp asserts.
//
//   reference   the model on the CPU, usually in fp64 (its rounding is then negligible: the table shows the
//               other side's error alone)
//   compared    the same model in fp32 on Device::cuda (or on the CPU: `--compare cpu,cpu` measures plain fp32
//               rounding, which is also how the comparison itself is tested on a machine without a GPU)
//
// Rows, in this order: the loss; every activation of the last forward (kind "act"); every parameter gradient
// ("grad"); every activation gradient ("dact") — all in registry order, so the table reads top to bottom like
// the model. Pass/fail per tensor: max |a − ref| / (atol + rtol·|ref|) <= 1 (engine/compare.h).
#pragma once
#include <type_traits>
#include <vector>

#include "data/batch.h"
#include "engine/compare.h"
#include "engine/rng.h"
#include "models/state.h"

namespace icl {

// Random parameters instead of the model's init, so that every path carries a sizeable gradient (zero-initialized
// tensors like the CGT generator's L would otherwise make whole gradient paths trivially zero): N(0, std²) from the
// stream seed + 11, plus 1 on the layer-norm gains (the Init::ones tensors). gradcheck's finite-difference check uses
// it too.
template <typename Model>
void randomize_params(Model& model, uint64_t seed, double std = 0.3) {
    using real = std::remove_reference_t<decltype(*model.s.params.ptr)>;
    std::vector<real> p(model.s.ptable.total);
    Rng prng(seed + 11);
    fill_normal(p.data(), p.size(), prng, 0.0, std);
    for (size_t i = 0; i < model.s.ptable.size(); i++)
        if (model.s.ptable.specs[i].init == Init::ones)
            for (int64_t k = 0; k < model.s.ptable.specs[i].numel(); k++) p[model.s.ptable.offsets[i] + k] += 1.0;
    model.s.upload(model.s.params, 0, p.data(), p.size());
}

// Give `cmp` the reference's parameters rounded to its precision, and give the reference those rounded values
// too, so that both sides start from bit-identical numbers ("same parameters").
template <typename RefModel, typename CmpModel>
void share_parameters(RefModel& ref, CmpModel& cmp) {
    using R = typename std::remove_reference_t<decltype(*ref.s.params.ptr)>;
    using F = typename std::remove_reference_t<decltype(*cmp.s.params.ptr)>;
    ICL_ASSERT_MSG(ref.s.ptable.total == cmp.s.ptable.total, "share_parameters: the two models have different registries");
    std::vector<R> p = ref.s.to_host(ref.s.params, 0, ref.s.ptable.total);
    std::vector<F> pc(p.begin(), p.end());
    cmp.s.upload(cmp.s.params, 0, pc.data(), pc.size());
    std::vector<R> back(pc.begin(), pc.end());
    ref.s.upload(ref.s.params, 0, back.data(), back.size());
}

namespace compare_detail {
template <typename real>
std::vector<double> host_table(ModelState<real>& s, const Buffer<real>& buf, const TensorTable& t) {
    std::vector<real> h = s.to_host(buf, 0, t.total);
    return std::vector<double>(h.begin(), h.end());
}
}  // namespace compare_detail

// One forward + backward on each model (parameters already shared), then the rows described above.
template <typename RefModel, typename CmpModel>
std::vector<TensorDiff> compare_forward_backward(RefModel& ref, CmpModel& cmp, const Batch& batch, double atol, double rtol) {
    keep_all_activation_gradients(ref, true, 0);  // every block's activation gradients, not views of one block's
    keep_all_activation_gradients(cmp, true, 0);
    const double loss_ref = ref.forward(batch);
    ref.backward();
    const double loss_cmp = cmp.forward(batch);
    cmp.backward();
    std::vector<TensorDiff> rows;
    rows.push_back(compare_tensor("loss", "loss", Shape{}, &loss_ref, &loss_cmp, atol, rtol));
    auto table_rows = [&](const TensorTable& t, const std::vector<double>& a, const std::vector<double>& b, const char* kind,
                          const std::string& prefix) {
        for (size_t i = 0; i < t.size(); i++)
            rows.push_back(compare_tensor(prefix + t.specs[i].name, kind, t.specs[i].shape, a.data() + t.offsets[i], b.data() + t.offsets[i],
                                          atol, rtol));
    };
    ICL_ASSERT_MSG(ref.s.atable.total == cmp.s.atable.total && ref.s.gtable.total == cmp.s.gtable.total,
                   "compare_forward_backward: the two models laid out different activation tables");
    using compare_detail::host_table;
    table_rows(ref.s.atable, host_table(ref.s, ref.s.acts, ref.s.atable), host_table(cmp.s, cmp.s.acts, cmp.s.atable), "act", "");
    table_rows(ref.s.ptable, host_table(ref.s, ref.s.grads, ref.s.ptable), host_table(cmp.s, cmp.s.grads, cmp.s.ptable), "grad", "grad.");
    table_rows(ref.s.gtable, host_table(ref.s, ref.s.dacts, ref.s.gtable), host_table(cmp.s, cmp.s.dacts, cmp.s.gtable), "dact", "grad.");
    return rows;
}

// The whole comparison: random parameters on the reference (randomize_params), the same values on `cmp`
// (share_parameters), one forward + backward on each, the rows.
template <typename RefModel, typename CmpModel>
std::vector<TensorDiff> compare_devices(RefModel& ref, CmpModel& cmp, const Batch& batch, uint64_t seed, double std, double atol,
                                        double rtol) {
    randomize_params(ref, seed, std);
    share_parameters(ref, cmp);
    return compare_forward_backward(ref, cmp, batch, atol, rtol);
}

}  // namespace icl
