// block.h — the pre-LN transformer block, written once for GPT, the kernel LM and both CGT streams.
//
//   x_mid = x + attn(mix(LN1(x)))·Woᵀ + bo          attn: qkv = u·Wqkvᵀ + bqkv, then causal softmax MHA
//   x_out = x_mid + GELU(mix(LN2(x_mid))·W1ᵀ + b1)·W2ᵀ + b2       or kernel attention with (b_KV, b_D)
//                                                                   (ReLU instead of GELU with act = relu)
//
// What differs between the models is a few choices, carried by BlockShape:
//   attn  softmax  op::attention_*          (GPT, CGT)
//         kernel   op::kernel_attention_*  (kernel LM: φ = elu+1, RoPE, optional h.<l>.attn.bkv / attn.bd)
//         linear   op::linear_attention_*  (kernel LM --attention linear: Theorem 4.1's φ = I, D = 1, no mask; bkv only)
//   mix   what sits between each LN and the projection that reads it (u = LN(x)):
//         none       the projection reads u                                    (GPT, kernel LM, CGT blocks < ℓ)
//         generator  T^κ(u; y) = u + L(y)R(y)ᵀ[u;1]   (CGT modulated blocks; params gen.{att,mlp}.{S,L,R})
//         concat     [u_x, u], u_x the x stream's LN output at the same site   (CGT dual blocks, y stream)
//   mod   the attention modifications of spec/duallens.md §4 (layers/attention_mods.h; softmax attention only):
//         regularized / negative replace op::attention_* by op::attention_mod_*; augmented adds parallel adapters
//         qkv[k|v] += c·ReLU(u·Aᵀ)·Bᵀ (params <p>attn.adk.{A,B} keys, attn.adv.{A,B} values; B = 0 at init).
//         All off (the default) = the block above, bit for bit.
//
// Names: activations are "<h>ln1", "<h>qkv", …, "<h>res3" under a prefix h ("h.3.", "aux.h.3.", "h.0.y."),
// parameters "<p>ln1.w", "<p>attn.qkv.w", … under p ("h.3.", "h.0.y."); the block's output is <h>res3.
// Every layer call goes through src/layers/dispatch.h.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "layers/attention_mods.h"
#include "layers/generator.h"
#include "models/state.h"

namespace icl {

// softmax: causal softmax attention; kernel: ICLCA's causal kernel attention (φ = elu+1, RoPE, b_KV and b_D);
// linear: Theorem 4.1's linear attention (φ = I, no denominator, no RoPE, NO mask; b_KV only) — CPU only
enum class AttnKind { softmax, kernel, linear };
enum class ActKind { gelu, relu };  // the MLP nonlinearity: GPT-2's tanh-GELU, or OPT's ReLU (TinT's auxiliary model)
enum class MixKind { none, generator, concat };

// What one block's activation table and its computation depend on, besides the batch shape.
struct BlockShape {
    int C = 0, NH = 0;                  // width, heads
    AttnKind attn = AttnKind::softmax;
    ActKind act = ActKind::gelu;        // MLP nonlinearity
    MixKind mix = MixKind::none;
    int M = 0, r = 0, Dy = 0;           // generator: templates, rank, width of the y it reads
    MixFn h = MixFn::tanh;              // generator: mixing nonlinearity
    int Cx = 0;                         // concat: width of the x-stream part (the projections read Cx + C)
    char stream = 'x';                  // the stream's letter, for the activations' docs only
    AttnMods mod;                       // attention modifications (default: none)
    int in_width() const { return mix == MixKind::concat ? Cx + C : C; }  // what the QKV / FC projections read
};

// One block's parameters at prefix p ("h.3."), in registry order. GPT-2 init: N(0, 0.02), the residual
// projections N(0, 0.02/√(2L)), biases 0, LN gains 1. kernel_bias: the ICLCA b_KV, b_D (zero) after the QKV bias.
void block_parameters(TensorTable& t, const std::string& p, const BlockShape& k, int L, bool kernel_bias = false);

// The activation table under construction: every entry in `acts`, the differentiable ones also in `grads`.
struct ActTable {
    TensorTable acts, grads;
    void add(const std::string& name, Shape shape, const std::string& doc, bool grad);
};

// The entries of one block at prefix h for a (B,T) batch.
void block_activations(ActTable& t, const std::string& h, int64_t B, int64_t T, const BlockShape& k);

// Elements of the scratch (BlockRun::scratch) a block of this shape needs for a (B,T) batch on `nthreads` threads:
// plain softmax attention's O(T) panels, the modifications' T×T slices, or kernel attention's tables. None on the
// GPU: its attention kernels take their buffers from the backend's own scratch (cuda/common.cuh).
size_t block_scratch_size(const BlockShape& k, int B, int T, int nthreads, Device dev);

// --dump-npy and the analyses: the attention probabilities <h>att (B,NH,T,T) of every plain-softmax block, rebuilt on
// the host from its <h>qkv and saved <h>lse (layers/attention.h). kstart_of(h): that block's key starts on the host
// (B), or null.
template <typename real>
std::vector<typename ModelState<real>::RealArray> attention_probability_dumps(ModelState<real>& s,
                                                                              const std::function<const int*(const std::string&)>& kstart_of);
// The same for one block: <h>att, (B,NH,T,T) flattened.
template <typename real>
std::vector<real> attention_probabilities_of(ModelState<real>& s, const std::string& h, const int* kstart = nullptr);

// One call's buffers and inputs besides the activation table.
template <typename real>
struct BlockRun {
    BlockShape k;
    int B = 0, T = 0;
    real* scratch = nullptr;            // attention_scratch_size / kernel_attention_scratch_size(B,T,C,NH)
    uint64_t mod_seed = 0;              // attention mods, random neighbours: this forward's draw (the same in its backward)
    const int* kstart = nullptr;        // softmax attention: (B) first key of each sequence (layers/attention.h), or null
    // kernel attention
    const int* pos = nullptr;           // (B,T) positions, or null: 0..T-1
    bool bias = false;                  // <p>attn.bkv / attn.bd exist
    double eps = 0;                     // added to every denominator
    // generator: the y each position's generators read, and its gradient (ACCUMULATED)
    const real* y = nullptr;            // (B,T,Dy)
    real* dy = nullptr;                 // (B,T,Dy)
    real* gscratch = nullptr;           // generator_scratch_size(B*T, M, r)
    // concat: the x stream's LN1 and LN2 outputs (B,T,Cx) and their gradients (ACCUMULATED)
    const real* ux1 = nullptr;
    const real* ux2 = nullptr;
    real* dux1 = nullptr;
    real* dux2 = nullptr;
    // blocks_backward: the activation gradients are laid out by share_block_gradients (set or zeroed block by block)
    bool shared_grads = false;
    // Inference only: replaces the softmax attention of every block, atty (B,T,C) from qkv (B,T,3C) of the block at
    // activation prefix h (ICLAA's hybrid attention, models/iclca/iclaa.h). block_backward refuses a run with it.
    std::function<void(const std::string& h, const real* qkv, real* atty)> attention;
};

// Forward of one block from x (B,T,C); returns <h>res3.
template <typename real>
real* block_forward(ModelState<real>& s, const std::string& h, const std::string& p, const real* x, const BlockRun<real>& b);

// Backward of block_forward from d<h>res3. ACCUMULATES into dx (B,T,C) and into the parameter gradients.
template <typename real>
void block_backward(ModelState<real>& s, const std::string& h, const std::string& p, const real* x, real* dx, const BlockRun<real>& b);

// The stack of L blocks every model runs (GPT, kernel LM, the CGT's x-only passes): x_L = block_{L−1}(… block_0(x_0)),
// activations "h.<l>.*"; returns x_L. blocks_backward runs from d(x_L) down to d(x0), the activation x_0 was read
// from (ACCUMULATED, like every backward). blocks_output names x_L ("h.<L−1>.res3", or x0 when L = 0).
std::string blocks_output(int L, const std::string& x0);
template <typename real>
real* blocks_forward(ModelState<real>& s, int L, real* x, const BlockRun<real>& b);
template <typename real>
void blocks_backward(ModelState<real>& s, int L, const std::string& x0, const BlockRun<real>& b);

// The activation-gradient table of a stack of L >= 2 blocks laid out in one block's memory instead of L. Backward
// needs one block's gradients at a time: block l's own (h.l.ln1 … h.l.fch_gelu) are dead once its backward is done.
// So every block's own gradients are views of block 0's. The residual stream's — d(h.l.res3), d(h.l.res2),
// d(h.l.attproj), d(h.l.fcproj) of every block — are all views of d(x0) (x0 the stack's input, e.g. "encoded", listed
// before the blocks): x = a + b passes d(x) on unchanged to both, and block_backward reads d(fcproj) once d(res3) is
// complete and before LN2's backward adds to the buffer, and d(attproj) once d(res2) is complete (after LN2's) and
// before LN1's; so one buffer carries the stream from d(x_L) down to d(x0) and the residual backward has nothing to do. Block l's own views are set by
// their first writer (block_sets_own_gradients) or zeroed by blocks_backward before it runs. After the backward,
// only block 0's own gradients, d(x0) and the tensors outside the blocks hold that step's values — so a dump or a
// device comparison asks for the full table (GPT::keep_all_activation_gradients).
TensorTable share_block_gradients(const TensorTable& grads, int L, const std::string& x0);
// Whether each of a block's own activation gradients has one writer in block_backward, which then SETS it in the
// shared layout (GradWrite::set, so nothing zeroes them): softmax attention, no mix, no attention modifications (no
// adapter declared either).
bool block_sets_own_gradients(const BlockShape& k);

}  // namespace icl
