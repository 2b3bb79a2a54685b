// state.h — what every model owns besides its forward/backward: the parameter registry and its flat
// buffers (params, grads, AdamW m and v), the activation table and its buffers, and the operations that
// only need those tables: init, zero_grad, AdamW step with clipping, NaN hunting, checkpoints, dumps.
//
// A model (src/models/gpt.h, cgt/cgt.h, iclca/kernel_lm.h, duallens/dual_model.h) fills `ptable` and `atable` once from its
// registry function, then calls alloc_params() / alloc_acts(). Nothing here knows which model it is.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/device.h"
#include "engine/tensor.h"

namespace icl {

struct Batch;  // data/batch.h

struct AdamWConfig {
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
    float grad_clip = 1.0f;  // max global gradient norm; <= 0 disables clipping
};

template <typename real>
struct ModelState {
    Device dev = Device::cpu;
    std::string kind;            // "gpt", "cgt", … (checkpoint metadata)
    nlohmann::json config;       // the model's config (checkpoint metadata, dumps)

    TensorTable ptable;          // parameters: the registry
    Buffer<real> params, grads, adam_m, adam_v;
    int64_t opt_step = 0;        // AdamW steps taken

    TensorTable atable;          // activations of the last forward, laid out for (B,T)
    TensorTable gtable;          // gradients of the differentiable activations
    Buffer<real> acts, dacts;

    // --- allocation and init ---
    // What every model's constructor does with its registry: set the device, kind and config, lay out `table`,
    // allocate params/grads/m/v in one buffer each, and initialise by each spec's Init from `seed`.
    void create(Device d, const std::string& model_kind, const nlohmann::json& cfg, TensorTable table, uint64_t seed);
    // The activation table for the current (B,T) and the gradient table of the tensors that get one, then their buffers.
    void set_activations(TensorTable acts_table, TensorTable grads_table);
    void alloc_params();                     // params, grads, m, v for ptable (zeroed)
    void init_params(uint64_t seed);         // by each spec's Init; computed on the host, then uploaded
    // For tests and checks that need every parameter to matter: N(0, std²) everywhere, plus 1 on the
    // parameters whose Init is ones (layer-norm gains around 1). Drawn in double, then rounded to real.
    void randomize_params(uint64_t seed, double std);
    void alloc_acts();                       // (re)allocate acts/dacts for the current atable if it grew

    // --- named views (device pointers) ---
    real* param(const std::string& name) { return params.ptr + ptable.offset(name); }
    real* grad(const std::string& name) { return grads.ptr + ptable.offset(name); }
    real* act(const std::string& name) { return acts.ptr + atable.offset(name); }
    real* dact(const std::string& name) { return dacts.ptr + gtable.offset(name); }

    // --- training ---
    void zero_grad();                        // parameter grads (unless accumulate_grads) and activation grads
    // The same, leaving the activation gradients `set_by_writer` names (gtable index) as they are: their first writer
    // sets them (GradWrite::set). Every view of one buffer must get the same answer.
    void zero_grad(const std::function<bool(size_t)>& set_by_writer);
    bool accumulate_grads = false;           // gradient accumulation: backward adds to the parameter grads
    double grad_norm();                      // global L2 norm of the parameter gradients
    // Clip to cfg.grad_clip, then one AdamW step at learning rate lr. Returns the norm before clipping.
    double update(const AdamWConfig& cfg, double lr);
    // Name of the first parameter whose gradient holds a NaN/Inf ("" if none).
    std::string first_nonfinite_grad();
    // Name of the first parameter holding a NaN/Inf ("" if none): checked before every save, since a parameter
    // the loss does not read (position rows beyond T) can hold one without the loss showing it.
    std::string first_nonfinite_param();

    // --- host transfer ---
    std::vector<real> to_host(const Buffer<real>& buf, size_t offset, size_t n) const;
    std::vector<real> fetch_act(const std::string& name);   // one activation, on the host
    void upload(Buffer<real>& buf, size_t offset, const real* host, size_t n);

    // --- files ---
    void save(const std::string& path, const std::map<std::string, std::string>& extra_meta = {});
    void load(const std::string& path);      // refuses another kind/config/shape (see checkpoint.h)
    // Resumable: the parameters plus AdamW's m and v (as adamw.m.<name>, adamw.v.<name>) and opt_step.
    void save_resumable(const std::string& path, const std::map<std::string, std::string>& extra_meta);
    void load_resumable(const std::string& path);  // parameters, m, v, opt_step; refuses a weights-only file
    // Every parameter, activation and gradient as DIR/<name>.npy plus DIR/index.json; with `batch`, the batch too
    // (batch.tokens / batch.vectors, batch.targets / batch.target_vecs, batch.mask, batch.pos), and `extra_ints`
    // (name, shape, values; e.g. CGT's aux start positions) as int32 arrays.
    struct IntArray {
        std::string name, doc;
        Shape shape;
        std::vector<int> values;
    };
    struct RealArray {  // a derived tensor a dump adds (the attention probabilities rebuilt from lse), computed
        std::string name, doc;  // only when it is written, one at a time (at long T each is the (B,NH,T,T) memory
        Shape shape;            // the O(T) attention saves)
        std::function<std::vector<real>()> compute;
    };
    void dump_npy(const std::string& dir, int step, const Batch* batch = nullptr, const std::vector<IntArray>& extra_ints = {},
                  const std::vector<RealArray>& extra_reals = {});
};

// A model whose blocks' activation gradients share memory (GPT, models/block.h: share_block_gradients) keeps every
// one of them when asked — for a dump or a device comparison; other models always do. Takes effect at the next forward.
template <typename Model>
auto keep_all_activation_gradients(Model& m, bool on, int) -> decltype(m.keep_all_activation_gradients(on)) {
    m.keep_all_activation_gradients(on);
}
template <typename Model>
void keep_all_activation_gradients(Model&, bool, long) {}

}  // namespace icl
