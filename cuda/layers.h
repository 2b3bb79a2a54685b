// layers.h — the CUDA backend's layer functions: the same names, argument order and meaning as the CPU
// layers in src/layers/*.h, instantiated for float. src/layers/dispatch.h calls them for Device::cuda, so a
// model never sees which device runs it. Every pointer is a DEVICE pointer (from device_alloc(Device::cuda)).
//
// Plain C++ (no CUDA types): g++ compiles the rest of the engine against this header; nvcc compiles the
// definitions in cuda/*.cu. One .cu file per layer family, forward and backward side by side, each kernel
// with its shapes and how it is parallelized.
//
// Semantics are exactly the CPU's, including the engine-wide GRADIENT CONVENTION: every backward
// ACCUMULATES (+=) into every gradient it writes; nullptr gradients are skipped where the CPU allows it.
// Where the CPU takes a `scratch` buffer sized for its OpenMP threads, the CUDA version ignores it and uses
// the backend's own grow-only scratch (cuda/common.cuh), sized for the whole batch.
//
// Reproducibility: every kernel is deterministic (fixed reduction orders) except the scatter-adds into
// embedding tables (encoder_backward's dwte and, with explicit positions, dwpe; vector_embed_backward with
// explicit positions), which use float atomics: their last bits can vary from run to run.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace icl {
enum class MixFn;  // src/layers/generator.h: tanh = 0, softmax = 1
struct AttnMods;   // src/layers/attention_mods_shared.h
}

namespace icl::cuda {

// ---- embedding.cu: token + position embedding, vector inputs --------------------------------------------
void encoder_forward(float* out, const int* inp, const int* pos, const float* wte, const float* wpe, int B, int T, int C, int V, int maxT);
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, const int* pos, int B, int T, int C, int V, int maxT);
void vector_embed_forward(float* out, const float* inp, const int* pos, const float* wpe, int B, int T, int C, int D, int maxT);
void vector_embed_backward(float* dwpe, const float* dout, const int* pos, int B, int T, int C, int maxT);

// ---- matmul.cu: the linear layer through cuBLAS ----------------------------------------------------------
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC);
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight, int N, int C,
                     int OC);

// ---- layernorm.cu ----------------------------------------------------------------------------------------
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int N, int C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                        const float* mean, const float* rstd, int N, int C);

// ---- elementwise.cu: GELU, ReLU and the residual connection -----------------------------------------------
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);
void relu_forward(float* out, const float* inp, int64_t n);
void relu_backward(float* dinp, const float* inp, const float* dout, int64_t n);
void residual_forward(float* out, const float* inp1, const float* inp2, int64_t n);
void residual_backward(float* dinp1, float* dinp2, const float* dout, int64_t n);

// ---- attention.cu: causal softmax multi-head attention ---------------------------------------------------
void attention_forward(float* out, float* att, float* scratch, const float* qkv, int B, int T, int C, int NH,
                       const int* kstart = nullptr);  // (B) on the device: first key per sequence (layers/attention.h)
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att, int B, int T, int C, int NH);
// the O(T)-memory form: saves the row log-sum-exp lse (B,NH,T); the backward recomputes the probabilities
void attention_forward_lse(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, const int* kstart = nullptr);
void attention_backward_lse(float* dqkv, const float* dout, const float* out, const float* qkv, const float* lse, int B, int T, int C, int NH,
                            const int* kstart = nullptr);
// attention_fused.cu: the same two, fused (online softmax, no T×T buffer), for head sizes up to 128; the two above
// use them when fused_attention_enabled() (engine/device.h) and attention_fused_fits (head size <= 128, B·NH <= 65535)
bool attention_fused_fits(int B, int T, int C, int NH);
void attention_fused_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, const int* kstart);
void attention_fused_backward(float* dqkv, const float* dout, const float* out, const float* qkv, const float* lse, int B, int T, int C, int NH,
                              const int* kstart);
// one query row against a KV cache (decoding; src/layers/kv_attention.h)
void kv_attention_step(float* out, float* att, const float* cache, int n, int C, int NH);

// ---- attention_mods.cu: regularized / negative-sample attention, the augmented model's qkv adapters -------
// (spec/duallens.md §4; src/layers/attention_mods.h)
void attention_mod_forward(float* out, float* att, float* scratch, const float* qkv, const float* sim_src, const AttnMods& m, uint64_t seed,
                           int B, int T, int C, int NH, int Cs);
void attention_mod_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att, const float* sim_src,
                            const AttnMods& m, uint64_t seed, int B, int T, int C, int NH, int Cs);
void qkv_adapter_forward(float* qkv, float* z, float* u, const float* inp, const float* A, const float* Bw, double c, int slot, int N,
                         int Cin, int C, int dh);
void qkv_adapter_backward(float* dinp, float* dA, float* dB, float* dz, const float* dqkv, const float* inp, const float* z, const float* u,
                          const float* A, const float* Bw, double c, int slot, int N, int Cin, int C, int dh);

// ---- loss.cu: fused softmax + cross-entropy, MSE ---------------------------------------------------------
void crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets, int N, int V);
void crossentropy_backward(float* dlogits, const float* dlosses, const float* probs, const int* targets, int N, int V);
void mse_forward(float* losses, const float* pred, const float* target, int N, int D);
void mse_backward(float* dpred, const float* dlosses, const float* pred, const float* target, int N, int D);

// ---- adamw.cu: optimizer step, global gradient norm, scaling ---------------------------------------------
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int t);
double grad_norm_squared(const float* grads, int64_t n);  // Σ g², in double; returned on the host
void scale(float* x, int64_t n, double factor);

// ---- generator.cu: the CGT template low-rank weight generator --------------------------------------------
void generator_forward(float* out, float* c, float* P, float* z, float* G, const float* u, const float* y, const float* S,
                       const float* Lw, const float* Rw, int N, int C, int Dy, int M, int r, MixFn h);
void generator_backward(float* du, float* dy, float* dS, float* dL, float* dR, float* scratch, const float* dout, const float* u,
                        const float* y, const float* c, const float* P, const float* z, const float* G, const float* S, const float* Lw,
                        const float* Rw, int N, int C, int Dy, int M, int r, MixFn h);

// ---- cgt_ops.cu: concat, gather, the CGT regularizers, the VAE's KL and reparameterization ---------------
void ema_step(double* u, float* yuse, const float* y, double gamma, int n);
void concat_forward(float* out, const float* a, const float* b, int N, int Ca, int Cb);
void concat_backward(float* da, float* db, const float* dout, int N, int Ca, int Cb);
void gather_rows_forward(float* out, const float* src, const int* idx, int N, int D);
void gather_rows_backward(float* dsrc, const float* dout, const int* idx, int N, int D);
double continuity_reg_forward(const float* y, int B, int T, int D, double zp);  // ζ_s = (s+1)^zp
void continuity_reg_backward(float* dy, const float* y, double w, int B, int T, int D, double zp);
double decorrelation_reg_forward(const float* y, int B, int T, int D, double zp);
void decorrelation_reg_backward(float* dy, const float* y, double w, int B, int T, int D, double zp);
double prior_reg_forward(const float* y, const float* K, int B, int T, int D);  // 𝒦 (T,T) on the device
void prior_reg_backward(float* dy, const float* y, const float* K, double w, int B, int T, int D);
double gp_kl_forward(const float* mu, const float* logv, const float* Kinv, double logdetK, int B, int T, int D);
void gp_kl_backward(float* dmu, float* dlogv, const float* mu, const float* logv, const float* Kinv, double w, int B, int T, int D);
void reparam_forward(float* y, const float* mu, const float* logv, const float* eps, int64_t n);
void reparam_backward(float* dmu, float* dlogv, const float* dy, const float* logv, const float* eps, int64_t n);

// ---- kernel_attention.cu: kernel (linearized) attention with RoPE and the ICLCA biases --------------------
void kernel_attention_forward(float* out, float* phiq, float* phik, float* rphiq, float* rphik, float* den, float* scratch,
                              const float* qkv, const int* pos, const float* bkv, const float* bd, int B, int T, int C, int NH, double eps);
void kernel_attention_backward(float* dqkv, float* dbkv, float* dbd, float* scratch, const float* dout, const float* out,
                               const float* phiq, const float* phik, const float* rphiq, const float* rphik, const float* den,
                               const float* qkv, const int* pos, const float* bkv, const float* bd, int B, int T, int C, int NH);
void kernel_attention_step(float* out, float* S, float* z, const float* qkv, int pos, int C, int NH, double eps);

// ---- iclaa_attention.cu: ICLAA's hybrid attention (exact softmax + random-feature prompt term), in double ----------
void iclaa_attention_forward(float* out, double* lphi, const float* qkv, const double* omega, const double* bkv, const double* bd,
                             const double* kappa, int kernel_sim, int T, int C, int NH, int m);

// ---- tint_ops.cu: the TinT simulator's layers, batched over sequences (forward only; src/layers/tint_ops.h) ------------
void hsplit_split_forward(float* out, const float* in, const int* rowptr, const int* col, const float* w, const float* b, int N, int D);
void hsplit_dim_forward(float* out, const float* in, const float* W, const uint8_t* live, const float* b, int N, int D, int H);
void tint_add_position(float* Y, const float* P, const uint8_t* lam, const int* pos, int B, int K, int T, int D, int H, int Taux);
void tint_attention_forward(float* O, float* a, const float* Q, const float* Kx, const float* Vx, const uint8_t* train, const uint8_t* icl,
                            int B, int K, int T, int D, int H, int mask, bool softmax, float scale, bool transpose);  // mask: TintMask
void tint_gate_forward(float* X, const float* e, const float* a_old, const float* a_new, float b_old, float b_new, int gw, const int* pos,
                       int B, int K, int T, int D, int Taux);
void copy_block(float* dst, int64_t dbs, int64_t dld, const float* src, int64_t sbs, int64_t sld, int B, int rows, int cols);
void fill_block(float* dst, int64_t dbs, int64_t dld, int B, int rows, int cols, float v);
void tint_loss_gradient(float* grad, const float* logits, const float* E, const int* ids, const uint8_t* m, int T, int d, int V);

// ---- nccl_comm.cu: the device half of engine/comm.h (one process per GPU) -------------------------------------------
bool nccl_built();                                       // compiled with NCCL (ICL_NCCL)?
void nccl_sum(float* buf, size_t n);                     // in place: Σ over the ranks (ncclAllReduce), same bits everywhere
void nccl_broadcast(void* buf, size_t bytes, int root);  // root's bytes to every rank
void nccl_finalize();                                    // the communicator destroyed (comm_finalize)

// ---- backend utilities (cuda_device.cu, bench_kernels.cu) ---------------------------------------------------------
std::string device_description();   // "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)"
// Row-major C (M,N) = op(A)·op(B) (+ C with beta), the wrapper every layer uses (for benchmarks and tests).
void gemm_f32(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb, float beta,
              float* C, int ldc);

// Benchmarks (bench.cu), timed with CUDA events on the device:
double time_gemm_ms(bool transA, bool transB, int M, int N, int K, bool tf32, int reps);  // median ms of one GEMM
double copy_bandwidth_gbs(size_t bytes, int reps);  // device-to-device cudaMemcpy, (read + write) bytes / s, GB/s
double fma_peak_tflops(int reps);                   // measured FP32 FMA throughput of the whole GPU, TFLOP/s
double spec_tf32_peak_tflops();                     // datasheet dense TF32 tensor-core peak for known GPUs, else 0
// Milliseconds per call of fn (median of reps runs, CUDA events around each).
double time_ms(void (*fn)(void*), void* arg, int reps);

}  // namespace icl::cuda
