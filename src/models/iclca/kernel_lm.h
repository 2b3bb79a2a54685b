// kernel_lm.h — the ICLCA model (spec/iclca.md §1.7, §7): a pre-LN GPT-2 style LM whose attention is causal
// kernel attention (φ = elu+1, RoPE after φ in the numerator only, unrotated denominator) with the two
// per-layer, per-head bias terms b_KV (NH,m,hs) and b_D (NH,m). No absolute position embedding: positions
// enter only through RoPE, so a prompt can be moved into the biases exactly (src/models/iclca/iclca_convert.h).
//
//   tokens (B,T) ──wte──> x ──[ block ]×L──> LN_f ──> logits = x·wteᵀ (tied)  ──> softmax CE
//
//   block:  x = x + kattn(LN1(x))    kattn: qkv = LN1(x)·Wqkvᵀ + b; kernel attention with (b_KV, b_D); ·Woᵀ + b
//           x = x + mlp(LN2(x))      mlp:   GELU(LN2(x)·W1ᵀ + b1)·W2ᵀ + b2
//
// Two execution forms share the weights: forward()/backward() (the parallel, chunked training form over a
// Batch, positions from Batch::pos or 0..T-1) and the streaming form (stream_start / stream_step: one token
// at a time with the recurrent state (S, z) per layer, started from the biases).
// cfg.bias = 0 builds the same model without b_KV/b_D parameters (the "no bias" arm of experiment E3).
// cfg.attn = "linear" (--attention linear) swaps the kernel attention for Theorem 4.1's linear attention (spec §2.2;
// layers/linear_attention.h): φ = I, no denominator, no RoPE and NO mask — every token reads the whole sequence — with
// b_KV (NH,hs,hs) and no b_D. Not a language model (a token sees its successors); it exists so that the theorem's
// case runs through the model, iclca_convert and `iclca e1 --attention linear` (exact for one layer, not beyond: the
// spec's caveat). CPU only; no streaming form.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/batch.h"
#include "engine/cli.h"
#include "engine/rng.h"
#include "models/block.h"
#include "models/lm_io.h"
#include "models/state.h"

namespace icl {

struct KernelLMConfig {
    int L = 4;          // blocks
    int C = 128;        // width
    int NH = 8;         // heads (C % NH == 0, head size even: RoPE pairs)
    int V = 52;         // vocabulary
    int maxT = 1 << 20; // largest position accepted (RoPE needs no table; this only validates input)
    int bias = 1;       // 1: b_KV, b_D are parameters (zero-initialised, trainable); 0: none
    double eps = 1e-6;  // added to every denominator (same in prompted and converted runs)
    std::string attn = "kernel";  // "kernel" (the ICLCA model) or "linear" (Theorem 4.1's case, above)

    nlohmann::json to_json() const;
    static KernelLMConfig from_json(const nlohmann::json& j);
    void validate() const;
    int64_t num_params() const;
    int hs() const { return C / NH; }
    bool linear() const { return attn == "linear"; }
};

// The kernel LM's flags, spelled as in every binary: --layers --width --heads (the GPT's spelling) and --bias --eps.
struct KernelLMFlagDefaults {
    std::string layers = "2", width = "64", heads = "4";
};
void add_kernel_lm_flags(Cli& cli, const KernelLMFlagDefaults& d = {});
KernelLMConfig kernel_lm_config_from_cli(const Cli& cli, int V);  // validated

// The parameter registry: every tensor once. Names as gpt_parameters() plus h.<l>.attn.bkv / attn.bd.
TensorTable kernel_lm_parameters(const KernelLMConfig& c);

template <typename real>
struct KernelLM {
    KernelLMConfig cfg;
    ModelState<real> s;
    int B = 0, T = 0;

    KernelLM(const KernelLMConfig& cfg, Device dev, uint64_t seed);

    // Parallel form. Returns the masked mean loss (NaN when the batch has no targets) times scale.ce (gradient
    // accumulation, models/lm_io.h); keeps activations.
    double forward(const Batch& batch);
    LossScale scale;
    void backward();
    std::vector<real> outputs();  // logits (B,T,V) of the last forward, on the host

    // Streaming (recurrent) form: per-layer state S (L,NH,m,hs), z (L,NH,m) in the model's device buffers, next
    // position. A step moves one token id to the device and its V logits back; nothing else crosses.
    struct Stream {
        Buffer<real> S, z;  // (L,NH,m,hs), (L,NH,m) on the model's device
        Buffer<int> ids;    // (2): [the token being fed, 0] — the encoder's token and (zero) position row
        int pos = 0;
    };
    Stream stream_start(int p0 = 0);                     // S = b_KV, z = b_D (zeros without biases)
    std::vector<real> stream_step(Stream& st, int token);  // feeds one token, returns its logits (V)
    void stream_state(const Stream& st, std::vector<real>& S, std::vector<real>& z) const;  // the state, on the host
    // Greedy continuation of `prompt` by n tokens with the streaming form, positions from p0.
    std::vector<int> generate(const std::vector<int>& prompt, int n, int p0 = 0);

    BatchSpec batch_spec() const;   // what forward accepts (data/batch.h)
    RandomState random_state() { return {}; }  // nothing random moves between steps (resumable checkpoints)

private:
    void layout(int B, int T);
    BlockRun<real> block_run(const int* pos);    // every block's shape and buffers for the current (B,T) and positions
    DeviceBatch<real> in_;                       // the last forward's batch on the device (models/lm_io.h)
    LMHead<real> head_;                          // LN_f, tied head, masked-mean loss
    Buffer<int> d_zero_pos_;
    Buffer<real> zero_wpe_, scratch_, step_buf_;
};

}  // namespace icl
