// gpt.h — the baseline: a pre-LN GPT-2 (L blocks, width C, NH heads, learned positions).
//
//   tokens (B,T) ──wte+wpe──> x ──[ block ]×L──> LN_f ──> logits = x·wteᵀ (tied)  ──> softmax CE
//   vectors (B,T,D) ─pad+wpe─┘                          └─> pred = x·Wheadᵀ + b (D_out) ──> MSE
//
//   block:  x = x + attn(LN1(x))      attn: qkv = LN1(x)·Wqkvᵀ + b; causal softmax MHA; ·Woᵀ + b
//           x = x + mlp(LN2(x))       mlp:  GELU(LN2(x)·W1ᵀ + b1)·W2ᵀ + b2
//
// One definition for both devices (every layer call goes through src/layers/dispatch.h) and both
// precisions (GPT<float> trains; GPT<double> is what the whole-model gradient check runs).
#pragma once
#include <initializer_list>
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

struct GPTConfig {
    int L = 4;        // blocks
    int C = 128;      // width
    int NH = 4;       // heads (C % NH == 0)
    int V = 16;       // vocabulary (token input / tied LM head)
    int maxT = 256;   // positions
    int d_in = 0;     // > 0: vector input of this width, zero-padded to C (no token table)
    int d_out = 0;    // > 0: linear read-out head of this width with an MSE loss (instead of the tied LM head)
    std::string act = "gelu";  // MLP nonlinearity: gelu (GPT-2) | relu (OPT; the TinT auxiliary model, spec/tint.md §9)
    AttnMods mod;              // attention modifications of every block (spec/duallens.md §4, models/attn_mod.h); none by default

    nlohmann::json to_json() const;
    static GPTConfig from_json(const nlohmann::json& j);  // refuses missing/bad fields
    void validate() const;                                // one-line errors for impossible configs
    int64_t num_params() const;
};

// The parameter registry: every tensor of the model, once, as (name, shape, init, doc).
TensorTable gpt_parameters(const GPTConfig& c);

// The GPT's flags, spelled the same in every binary that builds one (the CGT's x stream is one): --layers --width
// --heads, and the attention modifications (models/attn_mod.h) unless attn_mods is false.
struct GPTFlagDefaults {
    std::string layers = "4", width = "128", heads = "4";
    bool attn_mods = true;
};
void add_gpt_flags(Cli& cli, const GPTFlagDefaults& d = {});
// `base` (the task's V, d_in, d_out, maxT: Task::configure) with L, C, NH and the modifications from the flags.
GPTConfig gpt_config_from_cli(const Cli& cli, GPTConfig base);
// The architecture flags given on the command line (refused beside --load: the checkpoint holds the architecture).
std::vector<std::string> given_arch_flags(const Cli& cli, std::initializer_list<const char*> own);

template <typename real>
struct GPT {
    GPTConfig cfg;
    ModelState<real> s;
    int B = 0, T = 0;              // shape the activation table is laid out for

    GPT(const GPTConfig& cfg, Device dev, uint64_t seed);

    // Forward pass; returns the masked mean loss Σ mask·loss / Σ mask (and keeps every activation), times
    // scale.ce (gradient accumulation, models/lm_io.h; 1 otherwise).
    double forward(const Batch& batch);
    LossScale scale;
    // Data-parallel training (models/trainer.h, engine/comm.h): a micro-batch another rank runs moves this model's
    // random state as its forward would (the random-neighbour draw count), so every rank stays in step.
    void skip_forward(const Batch&) { forwards_++; }
    // Backward pass of the last forward. Zeroes what it adds to first, then fills every parameter and activation
    // gradient (each block's own ones only with keep_all_activation_gradients(true), below).
    void backward();
    // Inference-only logits (B,T,V) or predictions (B,T,d_out) of the last forward, on the host.
    std::vector<real> outputs();
    // Sample `n` tokens after `prompt` (token models only); temperature 0 = argmax. v_limit > 0: only ids below it
    // (a tokenizer smaller than the model's padded vocabulary).
    std::vector<int> sample(const std::vector<int>& prompt, int n, double temperature, Rng& rng, int v_limit = 0);

    // Activation gradients: by default (L >= 2) laid out in one block's memory (share_block_gradients, models/block.h):
    // after backward only block 0's own (not the residual stream's, one buffer with d(encoded)) and the tensors outside
    // the blocks hold that step's values. on = every block's own, as --dump-npy and the device comparison need; takes
    // effect at the next forward.
    void keep_all_activation_gradients(bool on) { keep_all_dacts_ = on; }

    // Inference only: when set, every block's softmax attention is this function of (activation prefix "h.<l>.", qkv,
    // atty) — ICLAA's hybrid attention (models/iclca/iclaa.h). backward() refuses a forward that used it.
    std::function<void(const std::string& h, const real* qkv, real* atty)> attention_override;

    BatchSpec batch_spec() const;   // what forward accepts (data/batch.h)
    // What moves between steps besides the parameters (resumable checkpoints): the random-neighbour draw count.
    RandomState random_state() { return {{}, {{"gpt.forwards", &forwards_}}}; }

private:
    void layout(int B, int T);      // the activation table for (B,T)
    BlockRun<real> block_run();     // every block's shape and buffers for the current (B,T)
    DeviceBatch<real> in_;          // the last forward's batch on the device (models/lm_io.h)
    LMHead<real> head_;             // LN_f, tied or vector head, masked-mean loss
    Buffer<real> scratch_;
    uint64_t seed_ = 0, forwards_ = 0;  // attention mods, random neighbours: a fresh draw per forward
    bool keep_all_dacts_ = false, shared_dacts_ = false;  // asked for; how the current table is laid out
    bool overridden_ = false;       // the last forward ran attention_override
};

}  // namespace icl
