// state.cpp — see state.h.
#include "models/state.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "data/batch.h"
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
    if (dev == Device::cpu)  // the whole estimate before any of it is allocated
        check_host_memory(((double)atable.total + gtable.total) * sizeof(real), strfmt("the activations and their gradients (%s model)", kind.c_str()));
    ensure_size(acts, dev, atable.total);
    ensure_size(dacts, dev, gtable.total);
}

template <typename real>
void ModelState<real>::zero_grad() {
    if (!accumulate_grads) grads.zero();
    if (dacts.ptr) device_zero(dev, dacts.ptr, gtable.total * sizeof(real));
}

template <typename real>
void ModelState<real>::zero_grad(const std::function<bool(size_t)>& set_by_writer) {
    if (!accumulate_grads) grads.zero();
    if (!dacts.ptr) return;
    // the element ranges to zero, each buffer once (views share an offset), then runs of them one memset each
    std::vector<std::pair<size_t, size_t>> r;
    for (size_t i = 0; i < gtable.size(); i++)
        if (!set_by_writer(i)) r.push_back({gtable.offsets[i], gtable.offsets[i] + (size_t)gtable.specs[i].numel()});
    std::sort(r.begin(), r.end());
    for (size_t i = 0; i < r.size();) {
        size_t a = r[i].first, b = r[i].second;
        for (i++; i < r.size() && r[i].first <= b; i++) b = std::max(b, r[i].second);
        device_zero(dev, dacts.ptr + a, (b - a) * sizeof(real));
    }
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

// The first tensor of `table` with a NaN/Inf in `host` (laid out as the table says), or "".
template <typename real>
static std::string first_nonfinite(const TensorTable& table, const std::vector<real>& host) {
    for (size_t i = 0; i < table.size(); i++) {
        const real* p = host.data() + table.offsets[i];
        for (int64_t k = 0; k < table.specs[i].numel(); k++)
            if (!std::isfinite((double)p[k])) return table.specs[i].name;
    }
    return "";
}

template <typename real>
std::string ModelState<real>::first_nonfinite_param() { return first_nonfinite(ptable, to_host(params, 0, ptable.total)); }

template <typename real>
std::string ModelState<real>::first_nonfinite_grad() { return first_nonfinite(ptable, to_host(grads, 0, ptable.total)); }

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
void ModelState<real>::save_resumable(const std::string& path, const std::map<std::string, std::string>& extra_meta) {
    std::vector<real> p = to_host(params, 0, ptable.total), m = to_host(adam_m, 0, ptable.total), v = to_host(adam_v, 0, ptable.total);
    auto meta = extra_meta;
    meta["opt_step"] = std::to_string(opt_step);
    save_checkpoint<real>(path, kind, config.dump(), ptable, p.data(), meta,
                          {{std::string(kOptimizerPrefix) + "m.", m.data()}, {std::string(kOptimizerPrefix) + "v.", v.data()}});
}

template <typename real>
void ModelState<real>::load_resumable(const std::string& path) {
    std::vector<real> p(ptable.total), m(ptable.total), v(ptable.total);
    load_checkpoint<real>(path, kind, config.dump(), ptable, p.data());
    load_checkpoint_companions<real>(path, ptable, {{std::string(kOptimizerPrefix) + "m.", m.data()}, {std::string(kOptimizerPrefix) + "v.", v.data()}});
    CheckpointInfo ci = read_checkpoint_metadata(path);
    auto it = ci.metadata.find("opt_step");
    char* end = nullptr;
    const long long t = it == ci.metadata.end() ? -1 : std::strtoll(it->second.c_str(), &end, 10);
    if (it == ci.metadata.end() || end == it->second.c_str() || *end || t < 1 || t > (1ll << 40))
        fail("checkpoint " + path + ": not resumable (no valid 'opt_step' in its metadata)");
    upload(params, 0, p.data(), p.size());
    upload(adam_m, 0, m.data(), m.size());
    upload(adam_v, 0, v.data(), v.size());
    opt_step = t;
}

template <typename real>
void ModelState<real>::dump_npy(const std::string& dir, int step, const Batch* batch, const std::vector<IntArray>& extra_ints,
                                const std::vector<RealArray>& extra_reals) {
    // a view shares its memory with another tensor: written under its own name it would be that tensor's values
    if (atable.aliases || gtable.aliases)
        fail("dump: this model's activation gradients share memory between blocks (keep_all_activation_gradients(true) before the forward)");
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
            if (&table == &ptable && prefix.empty()) index.back()["decay"] = s.decay;  // parameters: AdamW weight decay applies
        }
    };
    dump_table(ptable, params, "", "parameter");
    dump_table(atable, acts, "", "activation");
    for (const RealArray& a : extra_reals) {  // derived activations (recomputed for the dump)
        const std::vector<real> values = a.compute();
        ICL_ASSERT((int64_t)values.size() == numel(a.shape));
        npy_save(dir + "/" + a.name + ".npy", values.data(), a.shape);
        index.push_back({{"name", a.name}, {"file", a.name + ".npy"}, {"kind", "activation"}, {"shape", a.shape},
                         {"dtype", sizeof(real) == 4 ? "<f4" : "<f8"}, {"doc", a.doc}});
    }
    dump_table(ptable, grads, "grad.", "parameter gradient");
    dump_table(gtable, dacts, "grad.", "activation gradient");
    auto dump_ints = [&](const std::string& name, const Shape& shape, const std::vector<int>& v, const std::string& doc) {
        std::vector<int32_t> x(v.begin(), v.end());
        npy_save(dir + "/" + name + ".npy", x.data(), shape);
        index.push_back({{"name", name}, {"file", name + ".npy"}, {"kind", "batch"}, {"shape", shape}, {"dtype", "<i4"}, {"doc", doc}});
    };
    auto dump_floats = [&](const std::string& name, const Shape& shape, const std::vector<float>& v, const std::string& doc) {
        npy_save(dir + "/" + name + ".npy", v.data(), shape);
        index.push_back({{"name", name}, {"file", name + ".npy"}, {"kind", "batch"}, {"shape", shape}, {"dtype", "<f4"}, {"doc", doc}});
    };
    if (batch) {
        const Batch& b = *batch;
        const Shape bt = {b.B, b.T};
        if (!b.tokens.empty()) dump_ints("batch.tokens", bt, b.tokens, "input token ids (B,T)");
        if (!b.vectors.empty()) dump_floats("batch.vectors", {b.B, b.T, b.D}, b.vectors, "input vectors (B,T,D)");
        if (!b.targets.empty()) dump_ints("batch.targets", bt, b.targets, "next-token targets (B,T); negative = ignored");
        if (!b.target_vecs.empty()) dump_floats("batch.target_vecs", {b.B, b.T, b.Dout}, b.target_vecs, "regression targets (B,T,Dout)");
        if (!b.mask.empty()) dump_floats("batch.mask", bt, b.mask, "loss weight per position (B,T): loss = sum(w*l)/sum(w)");
        std::vector<int> pos = b.pos;
        if (pos.empty())
            for (int i = 0; i < b.B; i++)
                for (int t = 0; t < b.T; t++) pos.push_back(t);
        dump_ints("batch.pos", bt, pos, "absolute position of each input (B,T)");
    }
    for (const IntArray& a : extra_ints) dump_ints(a.name, a.shape, a.values, a.doc);
    nlohmann::json j = {{"model", kind}, {"config", config}, {"step", step}, {"device", device_name(dev)},
                        {"dtype", sizeof(real) == 4 ? "float32" : "float64"}, {"tensors", index}};
    write_json(dir + "/index.json", j);
}

template struct ModelState<float>;
template struct ModelState<double>;

}  // namespace icl
