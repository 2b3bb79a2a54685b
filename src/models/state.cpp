// state.cpp — see state.h.
#include "models/state.h"

#include <cmath>

#include "engine/checkpoint.h"
#include "engine/npy.h"
#include "engine/rng.h"
#include "engine/run.h"
#include "layers/dispatch.h"

namespace icl {

template <typename real>
void ModelState<real>::create(Device d, const std::string& model_kind, const nlohmann::json& cfg, TensorTable table, uint64_t seed) {
    dev = d;
    kind = model_kind;
    config = cfg;
    ptable = std::move(table);
    alloc_params();
    init_params(seed);
}

template <typename real>
void ModelState<real>::set_activations(TensorTable acts_table, TensorTable grads_table) {
    atable = std::move(acts_table);
    gtable = std::move(grads_table);
    alloc_acts();
}

template <typename real>
void ModelState<real>::alloc_params() {
    params = Buffer<real>(dev, ptable.total);
    grads = Buffer<real>(dev, ptable.total);
    adam_m = Buffer<real>(dev, ptable.total);
    adam_v = Buffer<real>(dev, ptable.total);
    opt_step = 0;
}

template <typename real>
void ModelState<real>::init_params(uint64_t seed) {
    // On the host, in registry order, one child stream per tensor: adding a tensor to the registry
    // does not change the init of the others, and both devices start from identical numbers.
    std::vector<real> host(ptable.total, real(0));
    Rng root(seed);
    for (size_t i = 0; i < ptable.size(); i++) {
        const TensorSpec& s = ptable.specs[i];
        Rng rng = root.split(i + 1);
        real* p = host.data() + ptable.offsets[i];
        int64_t n = s.numel();
        switch (s.init) {
            case Init::none:
            case Init::zeros: for (int64_t k = 0; k < n; k++) p[k] = real(0); break;
            case Init::ones: for (int64_t k = 0; k < n; k++) p[k] = real(1); break;
            case Init::normal: fill_normal(p, (size_t)n, rng, 0.0, s.std); break;
        }
    }
    upload(params, 0, host.data(), host.size());
    adam_m.zero();
    adam_v.zero();
    opt_step = 0;
}

template <typename real>
void ModelState<real>::randomize_params(uint64_t seed, double std) {
    std::vector<double> p(ptable.total);
    Rng r(seed);
    fill_normal(p.data(), p.size(), r, 0.0, std);
    for (size_t i = 0; i < ptable.size(); i++)
        if (ptable.specs[i].init == Init::ones)
            for (int64_t k = 0; k < ptable.specs[i].numel(); k++) p[ptable.offsets[i] + k] += 1;
    const std::vector<real> q(p.begin(), p.end());
    upload(params, 0, q.data(), q.size());
}

template <typename real>
void ModelState<real>::alloc_acts() {
    ensure_size(acts, dev, atable.total);
    ensure_size(dacts, dev, gtable.total);
}

template <typename real>
void ModelState<real>::zero_grad() {
    grads.zero();
    if (dacts.ptr) device_zero(dev, dacts.ptr, gtable.total * sizeof(real));
}

template <typename real>
double ModelState<real>::grad_norm() {
    return std::sqrt(op::grad_norm_squared(dev, grads.ptr, (int64_t)ptable.total));
}

template <typename real>
double ModelState<real>::update(const AdamWConfig& cfg, double lr) {
    double norm = grad_norm();
    if (!std::isfinite(norm)) return norm;  // the caller stops training and names the tensor
    if (cfg.grad_clip > 0 && norm > cfg.grad_clip) op::scale(dev, grads.ptr, (int64_t)ptable.total, cfg.grad_clip / norm);
    opt_step++;
    for (size_t i = 0; i < ptable.size(); i++) {
        const TensorSpec& s = ptable.specs[i];
        size_t off = ptable.offsets[i];
        op::adamw_update(dev, params.ptr + off, grads.ptr + off, adam_m.ptr + off, adam_v.ptr + off, s.numel(), (float)lr,
                         cfg.beta1, cfg.beta2, cfg.eps, s.decay ? cfg.weight_decay : 0.0f, (int)opt_step);
    }
    return norm;
}

template <typename real>
std::string ModelState<real>::first_nonfinite_grad() {
    std::vector<real> g = to_host(grads, 0, ptable.total);
    for (size_t i = 0; i < ptable.size(); i++) {
        const real* p = g.data() + ptable.offsets[i];
        for (int64_t k = 0; k < ptable.specs[i].numel(); k++)
            if (!std::isfinite((double)p[k])) return ptable.specs[i].name;
    }
    return "";
}

template <typename real>
std::vector<real> ModelState<real>::to_host(const Buffer<real>& buf, size_t offset, size_t n) const {
    std::vector<real> h(n);
    ICL_ASSERT(offset + n <= buf.n);
    device_copy(buf.dev, h.data(), buf.ptr + offset, n * sizeof(real), Copy::device_to_host);
    return h;
}

template <typename real>
std::vector<real> ModelState<real>::fetch_act(const std::string& name) {
    size_t i = atable.find(name);
    return to_host(acts, atable.offsets[i], (size_t)atable.specs[i].numel());
}

template <typename real>
void ModelState<real>::upload(Buffer<real>& buf, size_t offset, const real* host, size_t n) {
    ICL_ASSERT(offset + n <= buf.n);
    device_copy(buf.dev, buf.ptr + offset, host, n * sizeof(real), Copy::host_to_device);
}

template <typename real>
void ModelState<real>::save(const std::string& path, const std::map<std::string, std::string>& extra_meta) {
    std::vector<real> host = to_host(params, 0, ptable.total);
    auto meta = extra_meta;
    meta["opt_step"] = std::to_string(opt_step);
    save_checkpoint<real>(path, kind, config.dump(), ptable, host.data(), meta);
}

template <typename real>
void ModelState<real>::load(const std::string& path) {
    std::vector<real> host(ptable.total, real(0));
    load_checkpoint<real>(path, kind, config.dump(), ptable, host.data());
    upload(params, 0, host.data(), host.size());
}

template <typename real>
void ModelState<real>::dump_npy(const std::string& dir, int step) {
    make_dirs(dir);
    nlohmann::json index = nlohmann::json::array();
    auto dump_table = [&](const TensorTable& table, const Buffer<real>& buf, const std::string& prefix, const char* what) {
        std::vector<real> host = to_host(buf, 0, table.total);
        for (size_t i = 0; i < table.size(); i++) {
            const TensorSpec& s = table.specs[i];
            std::string name = prefix + s.name;
            npy_save(dir + "/" + name + ".npy", host.data() + table.offsets[i], s.shape);
            index.push_back({{"name", name}, {"file", name + ".npy"}, {"kind", what}, {"shape", s.shape},
                             {"dtype", sizeof(real) == 4 ? "<f4" : "<f8"}, {"doc", s.doc}});
        }
    };
    dump_table(ptable, params, "", "parameter");
    dump_table(atable, acts, "", "activation");
    dump_table(ptable, grads, "grad.", "parameter gradient");
    dump_table(gtable, dacts, "grad.", "activation gradient");
    nlohmann::json j = {{"model", kind}, {"config", config}, {"step", step}, {"device", device_name(dev)},
                        {"dtype", sizeof(real) == 4 ? "float32" : "float64"}, {"tensors", index}};
    write_json(dir + "/index.json", j);
}

template struct ModelState<float>;
template struct ModelState<double>;

}  // namespace icl
