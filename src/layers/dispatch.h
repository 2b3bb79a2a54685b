// dispatch.h — the thin seam between model code and the two implementations of every layer.
//
// Model code (src/models/) calls op::xxx(dev, ...) with the CPU layer's exact arguments. On the CPU it
// runs the OpenMP reference template in src/layers/xxx.h (any scalar type: float for training, double
// for tests); on the GPU the CUDA kernel of the same name in cuda/ (fp32 only). A build without nvcc
// compiles the CUDA branch away; device.cpp already refused --device cuda with "built without CUDA".
// No model is written twice: this file is the only place that knows there are two devices.
//
// Profiling: with op_profile().enabled, every op:: call adds its wall time (after a device sync) to a
// per-kind total, e.g. "matmul bwd" — `bench model` prints the breakdown.
#pragma once
#include <map>
#include <string>
#include <type_traits>

#include "engine/device.h"
#include "layers/adamw.h"
#include "layers/attention.h"
#include "layers/attention_mods.h"
#include "layers/cgt_ops.h"
#include "layers/generator.h"
#include "layers/embedding.h"
#include "layers/gelu.h"
#include "layers/iclaa_attention.h"
#include "layers/kernel_attention.h"
#include "layers/kv_attention.h"
#include "layers/layernorm.h"
#include "layers/linear_attention.h"
#include "layers/loss.h"
#include "layers/matmul.h"
#include "layers/relu.h"
#include "layers/residual.h"
#include "layers/tint_ops.h"
#ifdef ICL_CUDA
#include "cuda/layers.h"
#endif

namespace icl::op {

struct Profile {
    bool enabled = false;
    std::map<std::string, double> seconds;
    std::map<std::string, long> calls;
    void reset() { seconds.clear(); calls.clear(); }
};
inline Profile& op_profile() {
    static Profile p;
    return p;
}
// Times one op:: call when profiling is on (a scope guard, so early returns are counted too).
struct OpTimer {
    const char* kind;
    Device dev;
    double t0 = 0;
    OpTimer(const char* k, Device d) : kind(k), dev(d) {
        if (op_profile().enabled) { device_sync(dev); t0 = now_seconds(); }
    }
    ~OpTimer() {
        if (!op_profile().enabled) return;
        device_sync(dev);
        op_profile().seconds[kind] += now_seconds() - t0;
        op_profile().calls[kind]++;
    }
};

// ON_GPU(fn(args...)): on a CUDA device, call icl::cuda::fn(args...) and return.
#ifdef ICL_CUDA
#define ON_GPU(call)                                                                  \
    do {                                                                              \
        if (dev == Device::cuda) {                                                    \
            if constexpr (std::is_same_v<real, float>) { cuda::call; return; }        \
            else ICL_ASSERT_MSG(false, "the CUDA backend runs fp32 only");            \
        }                                                                             \
    } while (0)
#define ON_GPU_RET(call)                                                              \
    do {                                                                              \
        if (dev == Device::cuda) {                                                    \
            if constexpr (std::is_same_v<real, float>) return cuda::call;             \
            else ICL_ASSERT_MSG(false, "the CUDA backend runs fp32 only");            \
        }                                                                             \
    } while (0)
#else
#define ON_GPU(call) ICL_ASSERT_MSG(dev == Device::cpu, "built without CUDA")
#define ON_GPU_RET(call) ICL_ASSERT_MSG(dev == Device::cpu, "built without CUDA")
#endif

template <typename real>
void encoder_forward(Device dev, real* out, const int* inp, const int* pos, const real* wte, const real* wpe, int B, int T, int C, int V, int maxT) {
    OpTimer timer_("encoder fwd", dev);
    ON_GPU(encoder_forward(out, inp, pos, wte, wpe, B, T, C, V, maxT));
    icl::encoder_forward(out, inp, pos, wte, wpe, B, T, C, V, maxT);
}
template <typename real>
void encoder_backward(Device dev, real* dwte, real* dwpe, const real* dout, const int* inp, const int* pos, int B, int T, int C, int V, int maxT) {
    OpTimer timer_("encoder bwd", dev);
    ON_GPU(encoder_backward(dwte, dwpe, dout, inp, pos, B, T, C, V, maxT));
    icl::encoder_backward(dwte, dwpe, dout, inp, pos, B, T, C, V, maxT);
}
template <typename real>
void vector_embed_forward(Device dev, real* out, const real* inp, const int* pos, const real* wpe, int B, int T, int C, int D, int maxT) {
    OpTimer timer_("vector_embed fwd", dev);
    ON_GPU(vector_embed_forward(out, inp, pos, wpe, B, T, C, D, maxT));
    icl::vector_embed_forward(out, inp, pos, wpe, B, T, C, D, maxT);
}
template <typename real>
void vector_embed_backward(Device dev, real* dwpe, const real* dout, const int* pos, int B, int T, int C, int maxT) {
    OpTimer timer_("vector_embed bwd", dev);
    ON_GPU(vector_embed_backward(dwpe, dout, pos, B, T, C, maxT));
    icl::vector_embed_backward(dwpe, dout, pos, B, T, C, maxT);
}
template <typename real>
void matmul_forward(Device dev, real* out, const real* inp, const real* weight, const real* bias, int N, int C, int OC) {
    OpTimer timer_("matmul fwd", dev);
    ON_GPU(matmul_forward(out, inp, weight, bias, N, C, OC));
    icl::matmul_forward(out, inp, weight, bias, N, C, OC);
}
// GradWrite::set on the GPU: its kernels only accumulate, so the buffer is zeroed first (the same values). Returns
// the write mode the kernel then gets.
template <typename real>
GradWrite gpu_write(Device dev, GradWrite w, real* dinp, size_t n) {
    if (dev == Device::cpu || w == GradWrite::add || !dinp) return w;
    device_zero(dev, dinp, n * sizeof(real));
    return GradWrite::add;
}
template <typename real>
void matmul_backward(Device dev, real* dinp, real* dweight, real* dbias, const real* dout, const real* inp, const real* weight, int N, int C, int OC,
                     GradWrite dinp_write = GradWrite::add) {
    OpTimer timer_("matmul bwd", dev);
    dinp_write = gpu_write(dev, dinp_write, dinp, (size_t)N * C);
    ON_GPU(matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC));
    icl::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, dinp_write);
}
template <typename real>
void layernorm_forward(Device dev, real* out, real* mean, real* rstd, const real* inp, const real* weight, const real* bias, int N, int C) {
    OpTimer timer_("layernorm fwd", dev);
    ON_GPU(layernorm_forward(out, mean, rstd, inp, weight, bias, N, C));
    icl::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
}
template <typename real>
void layernorm_backward(Device dev, real* dinp, real* dweight, real* dbias, const real* dout, const real* inp, const real* weight,
                        const real* mean, const real* rstd, int N, int C) {
    OpTimer timer_("layernorm bwd", dev);
    ON_GPU(layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C));
    icl::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
template <typename real>
void gelu_forward(Device dev, real* out, const real* inp, int64_t n) {
    OpTimer timer_("gelu fwd", dev);
    ON_GPU(gelu_forward(out, inp, n));
    icl::gelu_forward(out, inp, n);
}
template <typename real>
void gelu_backward(Device dev, real* dinp, const real* inp, const real* dout, int64_t n, GradWrite write = GradWrite::add) {
    OpTimer timer_("gelu bwd", dev);
    write = gpu_write(dev, write, dinp, (size_t)n);
    ON_GPU(gelu_backward(dinp, inp, dout, n));
    icl::gelu_backward(dinp, inp, dout, n, write);
}
// ReLU (the OPT-style auxiliary model of TinT, src/layers/relu.h).
template <typename real>
void relu_forward(Device dev, real* out, const real* inp, int64_t n) {
    OpTimer timer_("relu fwd", dev);
    ON_GPU(relu_forward(out, inp, n));
    icl::relu_forward(out, inp, n);
}
template <typename real>
void relu_backward(Device dev, real* dinp, const real* inp, const real* dout, int64_t n, GradWrite write = GradWrite::add) {
    OpTimer timer_("relu bwd", dev);
    write = gpu_write(dev, write, dinp, (size_t)n);
    ON_GPU(relu_backward(dinp, inp, dout, n));
    icl::relu_backward(dinp, inp, dout, n, write);
}
template <typename real>
void residual_forward(Device dev, real* out, const real* inp1, const real* inp2, int64_t n) {
    OpTimer timer_("residual fwd", dev);
    ON_GPU(residual_forward(out, inp1, inp2, n));
    icl::residual_forward(out, inp1, inp2, n);
}
template <typename real>
void residual_backward(Device dev, real* dinp1, real* dinp2, const real* dout, int64_t n) {
    OpTimer timer_("residual bwd", dev);
    ON_GPU(residual_backward(dinp1, dinp2, dout, n));
    icl::residual_backward(dinp1, dinp2, dout, n);
}
template <typename real>
void attention_forward(Device dev, real* out, real* att, real* scratch, const real* qkv, int B, int T, int C, int NH,
                       const int* kstart = nullptr) {  // (B) on dev: each sequence's first key (layers/attention.h)
    OpTimer timer_("attention fwd", dev);
    ON_GPU(attention_forward(out, att, scratch, qkv, B, T, C, NH, kstart));
    icl::attention_forward(out, att, scratch, qkv, B, T, C, NH, kstart);
}
template <typename real>
void attention_backward(Device dev, real* dqkv, real* scratch, const real* dout, const real* qkv, const real* att, int B, int T, int C, int NH) {
    OpTimer timer_("attention bwd", dev);
    ON_GPU(attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH));
    icl::attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
}
// The O(T)-memory form (layers/attention.h): saves lse (B,NH,T), the backward recomputes the probabilities.
template <typename real>
void attention_forward_lse(Device dev, real* out, real* lse, real* scratch, const real* qkv, int B, int T, int C, int NH,
                           const int* kstart = nullptr) {  // (B) on dev: each sequence's first key, or null
    OpTimer timer_("attention fwd", dev);
    ON_GPU(attention_forward_lse(out, lse, qkv, B, T, C, NH, kstart));
    icl::attention_forward_lse(out, lse, scratch, qkv, B, T, C, NH, kstart);
}
template <typename real>
void attention_backward_lse(Device dev, real* dqkv, real* scratch, const real* dout, const real* out, const real* qkv, const real* lse, int B,
                            int T, int C, int NH, const int* kstart = nullptr, GradWrite write = GradWrite::add) {
    OpTimer timer_("attention bwd", dev);
    write = gpu_write(dev, write, dqkv, (size_t)B * T * 3 * C);
    ON_GPU(attention_backward_lse(dqkv, dout, out, qkv, lse, B, T, C, NH, kstart));
    icl::attention_backward_lse(dqkv, scratch, dout, out, qkv, lse, B, T, C, NH, kstart, write);
}
template <typename real>
void crossentropy_forward(Device dev, real* losses, real* probs, const real* logits, const int* targets, int N, int V) {
    OpTimer timer_("crossentropy fwd", dev);
    ON_GPU(crossentropy_forward(losses, probs, logits, targets, N, V));
    icl::crossentropy_forward(losses, probs, logits, targets, N, V);
}
template <typename real>
void crossentropy_backward(Device dev, real* dlogits, const real* dlosses, const real* probs, const int* targets, int N, int V) {
    OpTimer timer_("crossentropy bwd", dev);
    ON_GPU(crossentropy_backward(dlogits, dlosses, probs, targets, N, V));
    icl::crossentropy_backward(dlogits, dlosses, probs, targets, N, V);
}
template <typename real>
void mse_forward(Device dev, real* losses, const real* pred, const real* target, int N, int D) {
    OpTimer timer_("mse fwd", dev);
    ON_GPU(mse_forward(losses, pred, target, N, D));
    icl::mse_forward(losses, pred, target, N, D);
}
template <typename real>
void mse_backward(Device dev, real* dpred, const real* dlosses, const real* pred, const real* target, int N, int D) {
    OpTimer timer_("mse bwd", dev);
    ON_GPU(mse_backward(dpred, dlosses, pred, target, N, D));
    icl::mse_backward(dpred, dlosses, pred, target, N, D);
}
template <typename real>
void adamw_update(Device dev, real* params, const real* grads, real* m, real* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int t) {
    OpTimer timer_("adamw", dev);
    ON_GPU(adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t));
    icl::adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
}
template <typename real>
double grad_norm_squared(Device dev, const real* grads, int64_t n) {
    OpTimer timer_("grad norm/clip", dev);
    ON_GPU_RET(grad_norm_squared(grads, n));
    return icl::grad_norm_squared(grads, n);
}
template <typename real>
void scale(Device dev, real* x, int64_t n, double factor) {
    OpTimer timer_("grad norm/clip", dev);
    ON_GPU(scale(x, n, factor));
    icl::scale(x, n, (real)factor);
}

// --- CGT (spec/cgt.md): the weight generator T^κ and the CGT-only small ops (src/layers/generator.h, cgt_ops.h) ---
template <typename real>
void generator_forward(Device dev, real* out, real* c, real* P, real* z, real* G, const real* u, const real* y, const real* S,
                       const real* Lw, const real* Rw, int N, int C, int Dy, int M, int r, MixFn h) {
    OpTimer timer_("generator fwd", dev);
    ON_GPU(generator_forward(out, c, P, z, G, u, y, S, Lw, Rw, N, C, Dy, M, r, h));
    icl::generator_forward(out, c, P, z, G, u, y, S, Lw, Rw, N, C, Dy, M, r, h);
}
template <typename real>
void generator_backward(Device dev, real* du, real* dy, real* dS, real* dL, real* dR, real* scratch, const real* dout, const real* u,
                        const real* y, const real* c, const real* P, const real* z, const real* G, const real* S, const real* Lw,
                        const real* Rw, int N, int C, int Dy, int M, int r, MixFn h) {
    OpTimer timer_("generator bwd", dev);
    ON_GPU(generator_backward(du, dy, dS, dL, dR, scratch, dout, u, y, c, P, z, G, S, Lw, Rw, N, C, Dy, M, r, h));
    icl::generator_backward(du, dy, dS, dL, dR, scratch, dout, u, y, c, P, z, G, S, Lw, Rw, N, C, Dy, M, r, h);
}
template <typename real>
void ema_step(Device dev, double* u, real* yuse, const real* y, double gamma, int n) {
    OpTimer timer_("ema step", dev);
    ON_GPU(ema_step(u, yuse, y, gamma, n));
    icl::ema_step(u, yuse, y, gamma, n);
}
template <typename real>
void concat_forward(Device dev, real* out, const real* a, const real* b, int N, int Ca, int Cb) {
    OpTimer timer_("concat fwd", dev);
    ON_GPU(concat_forward(out, a, b, N, Ca, Cb));
    icl::concat_forward(out, a, b, N, Ca, Cb);
}
template <typename real>
void concat_backward(Device dev, real* da, real* db, const real* dout, int N, int Ca, int Cb) {
    OpTimer timer_("concat bwd", dev);
    ON_GPU(concat_backward(da, db, dout, N, Ca, Cb));
    icl::concat_backward(da, db, dout, N, Ca, Cb);
}
template <typename real>
void gather_rows_forward(Device dev, real* out, const real* src, const int* idx, int N, int D) {
    OpTimer timer_("gather fwd", dev);
    ON_GPU(gather_rows_forward(out, src, idx, N, D));
    icl::gather_rows_forward(out, src, idx, N, D);
}
template <typename real>
void gather_rows_backward(Device dev, real* dsrc, const real* dout, const int* idx, int N, int D) {
    OpTimer timer_("gather bwd", dev);
    ON_GPU(gather_rows_backward(dsrc, dout, idx, N, D));
    icl::gather_rows_backward(dsrc, dout, idx, N, D);
}
template <typename real>
double continuity_reg_forward(Device dev, const real* y, int B, int T, int D, double zp) {
    OpTimer timer_("cgt reg fwd", dev);
    ON_GPU_RET(continuity_reg_forward(y, B, T, D, zp));
    return icl::continuity_reg_forward(y, B, T, D, zp);
}
template <typename real>
void continuity_reg_backward(Device dev, real* dy, const real* y, double w, int B, int T, int D, double zp) {
    OpTimer timer_("cgt reg bwd", dev);
    ON_GPU(continuity_reg_backward(dy, y, w, B, T, D, zp));
    icl::continuity_reg_backward(dy, y, w, B, T, D, zp);
}
template <typename real>
double prior_reg_forward(Device dev, const real* y, const real* K, int B, int T, int D) {
    OpTimer timer_("cgt reg fwd", dev);
    ON_GPU_RET(prior_reg_forward(y, K, B, T, D));
    return icl::prior_reg_forward(y, K, B, T, D);
}
template <typename real>
void prior_reg_backward(Device dev, real* dy, const real* y, const real* K, double w, int B, int T, int D) {
    OpTimer timer_("cgt reg bwd", dev);
    ON_GPU(prior_reg_backward(dy, y, K, w, B, T, D));
    icl::prior_reg_backward(dy, y, K, w, B, T, D);
}
template <typename real>
double decorrelation_reg_forward(Device dev, const real* y, int B, int T, int D, double zp) {
    OpTimer timer_("cgt reg fwd", dev);
    ON_GPU_RET(decorrelation_reg_forward(y, B, T, D, zp));
    return icl::decorrelation_reg_forward(y, B, T, D, zp);
}
template <typename real>
void decorrelation_reg_backward(Device dev, real* dy, const real* y, double w, int B, int T, int D, double zp) {
    OpTimer timer_("cgt reg bwd", dev);
    ON_GPU(decorrelation_reg_backward(dy, y, w, B, T, D, zp));
    icl::decorrelation_reg_backward(dy, y, w, B, T, D, zp);
}
template <typename real>
double gp_kl_forward(Device dev, const real* mu, const real* logv, const real* Kinv, double logdetK, int B, int T, int D) {
    OpTimer timer_("vae kl fwd", dev);
    ON_GPU_RET(gp_kl_forward(mu, logv, Kinv, logdetK, B, T, D));
    return icl::gp_kl_forward(mu, logv, Kinv, logdetK, B, T, D);
}
template <typename real>
void gp_kl_backward(Device dev, real* dmu, real* dlogv, const real* mu, const real* logv, const real* Kinv, double w, int B, int T, int D) {
    OpTimer timer_("vae kl bwd", dev);
    ON_GPU(gp_kl_backward(dmu, dlogv, mu, logv, Kinv, w, B, T, D));
    icl::gp_kl_backward(dmu, dlogv, mu, logv, Kinv, w, B, T, D);
}
template <typename real>
void reparam_forward(Device dev, real* y, const real* mu, const real* logv, const real* eps, int64_t n) {
    OpTimer timer_("vae reparam fwd", dev);
    ON_GPU(reparam_forward(y, mu, logv, eps, n));
    icl::reparam_forward(y, mu, logv, eps, n);
}
template <typename real>
void reparam_backward(Device dev, real* dmu, real* dlogv, const real* dy, const real* logv, const real* eps, int64_t n) {
    OpTimer timer_("vae reparam bwd", dev);
    ON_GPU(reparam_backward(dmu, dlogv, dy, logv, eps, n));
    icl::reparam_backward(dmu, dlogv, dy, logv, eps, n);
}

// ---- kernel (linearized) attention with RoPE and ICLCA biases (src/layers/kernel_attention.h) ----
template <typename real>
void kernel_attention_forward(Device dev, real* out, real* phiq, real* phik, real* rphiq, real* rphik, real* den, real* scratch,
                              const real* qkv, const int* pos, const real* bkv, const real* bd, int B, int T, int C, int NH, double eps) {
    OpTimer timer_("kernel attention fwd", dev);
    ON_GPU(kernel_attention_forward(out, phiq, phik, rphiq, rphik, den, scratch, qkv, pos, bkv, bd, B, T, C, NH, eps));
    icl::kernel_attention_forward(out, phiq, phik, rphiq, rphik, den, scratch, qkv, pos, bkv, bd, B, T, C, NH, eps);
}
template <typename real>
void kernel_attention_backward(Device dev, real* dqkv, real* dbkv, real* dbd, real* scratch, const real* dout, const real* out,
                               const real* phiq, const real* phik, const real* rphiq, const real* rphik, const real* den,
                               const real* qkv, const int* pos, const real* bkv, const real* bd, int B, int T, int C, int NH) {
    OpTimer timer_("kernel attention bwd", dev);
    ON_GPU(kernel_attention_backward(dqkv, dbkv, dbd, scratch, dout, out, phiq, phik, rphiq, rphik, den, qkv, pos, bkv, bd, B, T, C, NH));
    icl::kernel_attention_backward(dqkv, dbkv, dbd, scratch, dout, out, phiq, phik, rphiq, rphik, den, qkv, pos, bkv, bd, B, T, C, NH);
}
template <typename real>
void kernel_attention_step(Device dev, real* out, real* S, real* z, const real* qkv, int pos, int C, int NH, double eps) {
    OpTimer timer_("kernel attention step", dev);
    ON_GPU(kernel_attention_step(out, S, z, qkv, pos, C, NH, eps));
    icl::kernel_attention_step(out, S, z, qkv, pos, C, NH, eps);
}
// ---- Theorem 4.1's linear attention (φ = I, D = 1, no RoPE, no mask; src/layers/linear_attention.h): CPU only ----
template <typename real>
void linear_attention_forward(Device dev, real* out, const real* qkv, const real* bkv, int B, int T, int C, int NH) {
    OpTimer timer_("linear attention fwd", dev);
    ICL_ASSERT_MSG(dev == Device::cpu, "linear attention (Theorem 4.1's case) has no CUDA kernel: KernelLM refuses it on the GPU");
    icl::linear_attention_forward(out, qkv, bkv, B, T, C, NH);
}
template <typename real>
void linear_attention_backward(Device dev, real* dqkv, real* dbkv, const real* dout, const real* qkv, const real* bkv, int B, int T, int C, int NH) {
    OpTimer timer_("linear attention bwd", dev);
    ICL_ASSERT_MSG(dev == Device::cpu, "linear attention (Theorem 4.1's case) has no CUDA kernel: KernelLM refuses it on the GPU");
    icl::linear_attention_backward(dqkv, dbkv, dout, qkv, bkv, B, T, C, NH);
}
// ---- ICLAA's hybrid attention: exact softmax + the prompt's random-feature term (src/layers/iclaa_attention.h) ----
template <typename real>
void iclaa_attention_forward(Device dev, real* out, double* lphi, const real* qkv, const double* omega, const double* bkv, const double* bd,
                             const double* kappa, int kernel_sim, int T, int C, int NH, int m) {
    OpTimer timer_("iclaa attention fwd", dev);
    ON_GPU(iclaa_attention_forward(out, lphi, qkv, omega, bkv, bd, kappa, kernel_sim, T, C, NH, m));
    icl::iclaa_attention_forward(out, lphi, qkv, omega, bkv, bd, kappa, kernel_sim, T, C, NH, m);
}
// ---- single-query softmax attention against a KV cache (token-by-token decoding; src/layers/kv_attention.h) ----
template <typename real>
void kv_attention_step(Device dev, real* out, real* att, const real* cache, int n, int C, int NH) {
    OpTimer timer_("kv attention step", dev);
    ON_GPU(kv_attention_step(out, att, cache, n, C, NH));
    icl::kv_attention_step(out, att, cache, n, C, NH);
}
// ---- attention modifications of the representation-learning lens (src/layers/attention_mods.h) ----
template <typename real>
void attention_mod_forward(Device dev, real* out, real* att, real* scratch, const real* qkv, const real* sim_src, const AttnMods& m,
                           uint64_t seed, int B, int T, int C, int NH, int Cs) {
    OpTimer timer_("attention mod fwd", dev);
    ON_GPU(attention_mod_forward(out, att, scratch, qkv, sim_src, m, seed, B, T, C, NH, Cs));
    icl::attention_mod_forward(out, att, scratch, qkv, sim_src, m, seed, B, T, C, NH, Cs);
}
template <typename real>
void attention_mod_backward(Device dev, real* dqkv, real* scratch, const real* dout, const real* qkv, const real* att, const real* sim_src,
                            const AttnMods& m, uint64_t seed, int B, int T, int C, int NH, int Cs) {
    OpTimer timer_("attention mod bwd", dev);
    ON_GPU(attention_mod_backward(dqkv, scratch, dout, qkv, att, sim_src, m, seed, B, T, C, NH, Cs));
    icl::attention_mod_backward(dqkv, scratch, dout, qkv, att, sim_src, m, seed, B, T, C, NH, Cs);
}
template <typename real>
void qkv_adapter_forward(Device dev, real* qkv, real* z, real* u, const real* inp, const real* A, const real* Bw, double c, int slot, int N,
                         int Cin, int C, int dh) {
    OpTimer timer_("attention adapter fwd", dev);
    ON_GPU(qkv_adapter_forward(qkv, z, u, inp, A, Bw, c, slot, N, Cin, C, dh));
    icl::qkv_adapter_forward(qkv, z, u, inp, A, Bw, c, slot, N, Cin, C, dh);
}
template <typename real>
void qkv_adapter_backward(Device dev, real* dinp, real* dA, real* dB, real* dz, const real* dqkv, const real* inp, const real* z, const real* u,
                          const real* A, const real* Bw, double c, int slot, int N, int Cin, int C, int dh) {
    OpTimer timer_("attention adapter bwd", dev);
    ON_GPU(qkv_adapter_backward(dinp, dA, dB, dz, dqkv, inp, z, u, A, Bw, c, slot, N, Cin, C, dh));
    icl::qkv_adapter_backward(dinp, dA, dB, dz, dqkv, inp, z, u, A, Bw, c, slot, N, Cin, C, dh);
}
// ---- TinT's simulator layers, batched over sequences (src/layers/tint_ops.h; forward only) ----
template <typename real>
void hsplit_split_forward(Device dev, real* out, const real* in, const int* rowptr, const int* col, const real* w, const real* b, int N, int D) {
    OpTimer timer_("tint hsplit", dev);
    ON_GPU(hsplit_split_forward(out, in, rowptr, col, w, b, N, D));
    icl::hsplit_split_forward(out, in, rowptr, col, w, b, N, D);
}
template <typename real>
void hsplit_dim_forward(Device dev, real* out, const real* in, const real* W, const uint8_t* live, const real* b, int N, int D, int H) {
    OpTimer timer_("tint hsplit", dev);
    ON_GPU(hsplit_dim_forward(out, in, W, live, b, N, D, H));
    icl::hsplit_dim_forward(out, in, W, live, b, N, D, H);
}
template <typename real>
void tint_add_position(Device dev, real* Y, const real* P, const uint8_t* lam, const int* pos, int B, int K, int T, int D, int H, int Taux) {
    OpTimer timer_("tint position", dev);
    ON_GPU(tint_add_position(Y, P, lam, pos, B, K, T, D, H, Taux));
    icl::tint_add_position(Y, P, lam, pos, B, K, T, D, H, Taux);
}
template <typename real>
void tint_attention_forward(Device dev, real* O, real* a, const real* Q, const real* Kx, const real* Vx, const uint8_t* train, const uint8_t* icl,
                            int B, int K, int T, int D, int H, TintMask mask, bool softmax, real scale, bool transpose) {
    OpTimer timer_("tint attention", dev);
    ON_GPU(tint_attention_forward(O, a, Q, Kx, Vx, train, icl, B, K, T, D, H, (int)mask, softmax, scale, transpose));
    icl::tint_attention_forward(O, a, Q, Kx, Vx, train, icl, B, K, T, D, H, mask, softmax, scale, transpose);
}
template <typename real>
void tint_gate_forward(Device dev, real* X, const real* e, const real* a_old, const real* a_new, real b_old, real b_new, int gw, const int* pos,
                       int B, int K, int T, int D, int Taux) {
    OpTimer timer_("tint gate", dev);
    ON_GPU(tint_gate_forward(X, e, a_old, a_new, b_old, b_new, gw, pos, B, K, T, D, Taux));
    icl::tint_gate_forward(X, e, a_old, a_new, b_old, b_new, gw, pos, B, K, T, D, Taux);
}
template <typename real>
void copy_block(Device dev, real* dst, int64_t dbs, int64_t dld, const real* src, int64_t sbs, int64_t sld, int B, int rows, int cols) {
    OpTimer timer_("copy block", dev);
    ON_GPU(copy_block(dst, dbs, dld, src, sbs, sld, B, rows, cols));
    icl::copy_block(dst, dbs, dld, src, sbs, sld, B, rows, cols);
}
template <typename real>
void fill_block(Device dev, real* dst, int64_t dbs, int64_t dld, int B, int rows, int cols, real v) {
    OpTimer timer_("copy block", dev);
    ON_GPU(fill_block(dst, dbs, dld, B, rows, cols, v));
    icl::fill_block(dst, dbs, dld, B, rows, cols, v);
}
template <typename real>
void tint_loss_gradient(Device dev, real* grad, const real* logits, const real* E, const int* ids, const uint8_t* m, int T, int d, int V) {
    OpTimer timer_("tint loss gradient", dev);
    ON_GPU(tint_loss_gradient(grad, logits, E, ids, m, T, d, V));
    icl::tint_loss_gradient(grad, logits, E, ids, m, T, d, V);
}
#undef ON_GPU
#undef ON_GPU_RET
}  // namespace icl::op
