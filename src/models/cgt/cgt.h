// cgt.h — the Contextually Guided Transformer (spec/cgt.md): a GPT-2 whose blocks 1..ℓ carry a second residual
// stream y (width d_y) next to x (width d_x), and whose blocks ℓ+1..L see y^ℓ (y after block ℓ) only through
// the low-rank template generator T^κ(u; y^ℓ) = u + L(y)R(y)ᵀ[u;1] placed between each layer norm and the
// QKV / FC1 projection.
//
//   tokens ──wte|wte_y + wpe|wpe_y──> x⁰ (B,n,d_x), y⁰ (B,n,d_y)
//   blocks 0..ℓ−1 (dual):   x = GPT block(x)                       (x never reads y)
//                           y = y + Wo_y·MHA_y([LN1x(x), LN1y(y)]);  y = y + MLP_y([LN2x(x), LN2y(y)])
//   y^ℓ = y  ──(VAE: μ = y^ℓ, y_used = μ + e^{½logv}ε)──> y_used (B,n,d_y)
//   blocks ℓ..L−1 (modulated): x = x + Attn(T^att(LN1(x); y_used)) ;  x = x + MLP(T^mlp(LN2(x); y_used))
//   LN_f ──> logits = x·wteᵀ (tied to the x slice)  |  pred = x·Wheadᵀ + b (vector tasks)
//
// Parameters: the x stream uses EXACTLY gpt_parameters() of the x-only GPT (same names, shapes, init), so a
// folded CGT (spec §1.6) is an ordinary GPT checkpoint and L = ℓ or ℓ = 0 is the baseline GPT. The y stream
// adds wte_y/wpe_y (the y slice of the (d_x+d_y)-wide embedding) and h.<b>.y.*; blocks ≥ ℓ add
// h.<b>.gen.{att,mlp}.{S,L,R}; the VAE adds vae.logv.{w,b}.
//
// Loss (spec §2, §3): L = η·CE + (1−η)·L_aux + w_C·R_C + w_D·R_D (+ β·KL for the VAE). The aux pass runs the
// x-only model on each sample's remainder t_s.. (truncated: the prefix is not computed at all; absolute
// positions kept; with horizon Δ exactly Δ inputs), with y frozen to ỹ_b = y_used[b, p_b−1] — gathered from the
// main pass, so its gradient is scattered back into dy_used[b, p_b−1] (op::gather_rows_backward).
//
// Index convention: p_b is the 0-indexed position of the first remainder input (spec's 1-indexed s = p_b + 1);
// p ∈ [2, T−1], or [2, T−Δ] with horizon Δ (T = number of model inputs = n − 1).
#pragma once
#include <deque>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/batch.h"
#include "engine/rng.h"
#include "layers/generator.h"
#include "models/block.h"
#include "models/gpt.h"
#include "models/lm_io.h"
#include "models/state.h"

namespace icl {

struct CGTConfig {
    int L = 4, ell = 3;         // blocks; y^ℓ = y after block ℓ (blocks 1..ℓ dual, ℓ+1..L modulated)
    int dx = 64, dy = 32;       // stream widths
    int NHx = 4, NHy = 2;       // heads
    int r = 4, M = 8;           // generator rank and templates per operator
    MixFn h = MixFn::tanh;      // mixing nonlinearity
    int V = 16, maxT = 256;     // vocabulary, positions
    int d_in = 0, d_out = 0;    // vector tasks (linear regression): input width, MSE head width
    bool vae = false;           // log-variance head + reparameterized y (spec §3.2)
    bool ln_gen = false;        // y^ℓ = LN(y) (own gain and bias) instead of the raw residual (spec §1.4's option flag)
    AttnMods mod;               // attention modifications of the x stream's blocks (--attn-mod, spec/duallens.md §4);
                                // the y stream's attention stays plain

    bool has_y() const { return ell > 0 && dy > 0; }
    bool modulated(int b) const { return has_y() && b >= ell; }  // 0-indexed block b
    GPTConfig x_config() const;  // the x-only GPT (same x weights; the folding target)
    BlockShape x_block(int b) const;  // x block b: a GPT block of width d_x; blocks >= ℓ put T^κ(u; y) after each LN
    BlockShape y_block() const;       // y blocks (< ℓ): width d_y, the projections read [LN_x(x), LN_y(y)]
    nlohmann::json to_json() const;
    static CGTConfig from_json(const nlohmann::json& j);
    void validate() const;
    int64_t num_params() const;
};

TensorTable cgt_parameters(const CGTConfig& c);

// Training-loss settings (not part of the architecture/checkpoint).
struct CGTLoss {
    double eta = 1.0;     // weight of the main CE; 1−η on the aux loss
    int horizon = 0;      // Δ; 0 = the whole remainder
    double wC = 0, wD = 0;  // R_C, R_D weights
    double zeta_power = 0;  // ζ_s = (s+1)^p in R_C and R_D (0 = uniform, the paper's setting; 2 = quadratic)
    bool aux_masked = false;  // the aux pass as the full-length masked pass of spec §2.3 (key start s_b per sequence)
                              // instead of the truncated remainder (the default; same loss and gradient, §7.8(b))
    double wP = 0;          // R_P weight (App. A.2: batch mean and covariance of y^ℓ matched to the GP prior 𝒦)
    double beta = 0;      // VAE KL weight
    int beta_warmup = 0;  // KL annealing: β·min(1, step/N) over the first N training steps (0 = β throughout)
    double free_bits = 0; // free nats: the KL term is β·max(KL, this), so no pull on y while KL < this (nats per position)
    double nu_K = 0.03, lambda = 0.1;  // GP prior: 𝒦 = ν_K·I + (1−ν_K)·RBF(λ·T tokens)
};

// The CGT's flags, spelled the same in every binary (train_cgt, gradcheck, bench): the x stream's GPT flags
// (--layers --width --heads and the attention modifications, models/gpt.h), then --ell --dy --heads-y --rank
// --templates --mix --vae --ln-gen and the loss: --eta --horizon --wc --wd --zeta-power --wp --beta --nu-K --lambda. The old spellings
// (--dx, --wC, --wD) are refused with a line naming the new one.
struct CGTFlagDefaults {
    std::string layers = "4", ell = "3", width = "64", dy = "32", heads = "4", heads_y = "2", rank = "4", templates = "8";
    std::string eta = "0.5", horizon = "0", wc = "0.08", wd = "0.04", beta = "0.01";
    bool attn_mods = true;  // the --attn-* flags of the x stream
};
void add_cgt_flags(Cli& cli, const CGTFlagDefaults& d = {});
// `base` (the task's V, d_in, d_out, maxT) with the architecture from the flags; not validated (the caller may
// still replace it with a checkpoint's).
CGTConfig cgt_config_from_cli(const Cli& cli, CGTConfig base);
CGTLoss cgt_loss_from_cli(const Cli& cli, const CGTConfig& cfg);
// R_P forms a (T·d_y)² matrix: refuses (usage error naming --wp) T·d_y > 8192 when w_P > 0.
void check_prior_reg_size(const CGTLoss& loss, int T, int dy);
// The CGT's architecture flags (refused beside --load).
std::initializer_list<const char*> cgt_arch_flag_names();

// FLOPs of one training step (forward + backward ≈ 3× forward for the matmul/attention work), by part.
struct CGTFlops {
    double x_fwd = 0;       // main pass, x stream: projections, causal attention, head (= the x-only GPT's forward)
    double y_fwd = 0;       // main pass, y stream: [x,y] projections and y attention of the dual blocks, VAE head
    double gen_fwd = 0;     // main pass, the 2(L−ℓ) generators T^κ
    double main_fwd = 0;    // x + y + gen
    double aux_fwd = 0;     // aux pass: the x-only model (generators included) on B·Ta rows (Ta = Δ, or E[T − p])
    double aux_gen_fwd = 0; // of which generators
    double reg_fwd = 0;     // R_C, R_D (and the VAE KL) on y^ℓ, when their weights are > 0
    double total_step = 0;  // 3·(main + aux) + 3·reg
};

template <typename real>
struct CGT {
    CGTConfig cfg;
    CGTLoss loss;
    ModelState<real> s;
    int B = 0, T = 0, Ta = 0;    // main (B,T) and aux (B,Ta) shapes the activation table is laid out for
    bool train_mode = true;      // VAE: sample y (train) or y = μ (eval)
    bool hold_random = false;    // reuse the last aux positions, VAE noise and random attention neighbours (finite-difference checks)
    std::vector<int> aux_p;      // (B) first remainder position of the last forward's aux pass (-1 = none)
    // the loss parts of the last forward
    double last_ce = 0, last_aux = 0, last_rc = 0, last_rd = 0, last_rp = 0, last_kl = 0;
    int64_t last_aux_targets = 0;

    CGT(const CGTConfig& cfg, Device dev, uint64_t seed);

    // Training forward: the total loss (and every activation). aux positions are sampled unless hold_random
    // or set_aux_positions() fixed them.
    double forward(const Batch& batch);
    void backward();
    void set_aux_positions(const std::vector<int>& p) { aux_p = p; hold_random = true; }
    // The training step (0-based; models/trainer.h calls it before each step): the VAE's β warm-up reads it.
    void set_train_step(int step) { train_step_ = step; }
    double beta_now() const;  // β of the current step (warm-up applied; β outside training)
    // Gradient accumulation (models/trainer.h): each term of the loss scaled to its share of the whole batch
    // (η·CE by ce, (1−η)·L_aux by aux, the regularizers and the KL by seq; models/lm_io.h). R_D and R_P are
    // statistics of the batch: under accumulation each micro-batch has its own (spec §3.5: "R_D depends on
    // micro-batch composition").
    LossScale scale;
    // The scales of K micro-batches that make them one batch: draws each micro-batch's aux positions now, as the
    // forwards would in turn (so the whole batch's draws), queues them for the next K forwards, and returns
    // ce = W_i/W, aux = A_i/A (A: the aux pass's scored weight), seq = B_i/B.
    std::vector<LossScale> accumulation_scales(const std::vector<Batch>& micro);
    // Data-parallel training (models/trainer.h, engine/comm.h): a micro-batch another rank runs moves the random state
    // as its forward would — its queued aux draw is dropped, the random-neighbour count moves, the VAE's noise is
    // drawn and thrown away — so every rank's stream stays where one process's would be.
    void skip_forward(const Batch& bt);

    // ---- inference (spec §1.9); outputs are logits (…,V) or predictions (…,d_out), on the host ----
    std::vector<real> outputs();                        // main-pass outputs of the last forward (B,T,·)
    std::vector<real> dynamic_y(const Batch& batch);    // y_used of a dynamic pass, (B,T,d_y) (eval: μ)
    // The x-only model on `batch` with the generator reading y_pos (B,T,d_y) at each position (no y stream
    // computed): frozen (constant rows), frozen-with-context, EMA and transplant modes are all this call.
    std::vector<real> forward_with_y(const Batch& batch, const std::vector<real>& y_pos);
    // Mode 2: ỹ_b = y_used[b, p_b−1] from the full dynamic pass; the x-only model on inputs p_b..T−1 alone
    // (absolute positions). Returns (B, T−min p, ·), rows left-aligned (row t = position p_b + t).
    std::vector<real> frozen_outputs(const Batch& batch, const std::vector<int>& p, int* Ta_out);
    // Mode 3: full sequence; positions < p_b use their own y, positions ≥ p_b use ỹ_b.
    std::vector<real> frozen_ctx_outputs(const Batch& batch, const std::vector<int>& p);
    // Mode 4: the batch alone, y_used_t = (1−γ)·y_used_{t−1} + γ·y_dyn_t, y_used_{−1} = y_init (B,d_y).
    std::vector<real> ema_outputs(const Batch& batch, const std::vector<real>& y_init, double gamma);
    // Mode 5: one y (B,d_y) for every position (taken from another document).
    std::vector<real> transplant_outputs(const Batch& batch, const std::vector<real>& y_fixed);

    // Activation patching (the task-vector baseline, models/cgt/cgt_eval.h): forward_with_y overwrites row `row`
    // (= b·T + t) of the x residual after block `block` (aux.h.<block>.res3) with `value` (d_x) before the next
    // block reads it. Only forward_with_y (and the modes built on it) applies patches; training never does.
    struct Patch {
        int block = 0;
        int64_t row = 0;
        std::vector<real> value;  // (d_x)
    };
    std::vector<Patch> patches;

    // Folding (spec §1.6): the x-only GPT with Wqkv' = Wqkv(I + D_w), bqkv' = bqkv + Wqkv·d_b (same for W1)
    // for one frozen ỹ (d_y).
    void fold_into(GPT<real>& gpt, const std::vector<real>& ytilde);

    CGTFlops flops(int B, int T) const;
    // What moves between steps besides the parameters (resumable checkpoints): the aux-position / VAE-noise stream
    // and the random-neighbour draw count.
    RandomState random_state() { return {{{"cgt.rng", &rng_}}, {{"cgt.forwards", &forwards_}}}; }
    // The key starts (host) of the blocks at prefix h in the last forward: the masked aux pass's p_b, else null
    // (the dump's rebuilt attention probabilities, models/block.h).
    const int* dump_kstart(const std::string& h) const {
        return loss.aux_masked && h.compare(0, 4, "aux.") == 0 && !aux_p.empty() ? aux_p.data() : nullptr;
    }

private:
    void layout(int B, int T, int Ta);
    BlockRun<real> x_block_run(int b, int Bp, int Tp, const real* ygen, real* dygen);  // models/block.h
    BlockRun<real> y_block_run(const std::string& h, int Bp, int Tp);
    real* x_pass_forward(const std::string& pre, int Bp, int Tp, const int* tokens, const real* vectors, const int* pos,
                         const real* ygen, bool with_y_stream);
    void x_pass_backward(const std::string& pre, int Bp, int Tp, const int* tokens, const int* pos, const real* ygen, real* dygen,
                         bool with_y_stream);
    BatchSpec batch_spec() const;

    Rng rng_;
    uint64_t seed_ = 0, forwards_ = 0;  // attention mods, random neighbours: a fresh draw per forward (held with hold_random)
    DeviceBatch<real> in_, ain_;     // the main and aux passes' batches on the device (models/lm_io.h)
    LMHead<real> head_, ahead_;      // their LN_f, head and masked-mean loss ("" and "aux." activations)
    Buffer<int> a_idx_;
    Buffer<real> scratch_, gscratch_, d_kinv_, d_k_;  // 𝒦⁻¹ (VAE KL) and 𝒦 (R_P) of the GP prior, (T,T)
    std::vector<real> eps_host_;
    double logdetK_ = 0;
    int kinv_T_ = -1, k_T_ = -1;
    int train_step_ = -1;     // set_train_step
    double kl_weight_ = 0;    // the KL's gradient weight in the last forward (β_now·scale, 0 under the free bits)
    Buffer<int> a_kstart_;                 // the masked aux pass: each sequence's first key p_b (on the device)
    std::deque<std::vector<int>> queued_aux_p_;  // accumulation_scales' draws, one per coming forward
    std::vector<int> draw_aux_positions(const Batch& bt);  // p_b in [2, hi] for each sequence, from rng_
    int aux_hi(const Batch& bt) const;                     // the last aux start a sequence of bt.T admits
    const int* pass_kstart_ = nullptr;     // the key starts of the pass being run (x_block_run), or null
    bool has_aux_ = false, patch_now_ = false;
    Batch aux_batch_;
};

// ---- token-by-token streaming decode with KV caches (spec §1.9, §7 invariant 11: streaming = parallel) ----
//
// One sequence, one token per step(): every x block keeps the [q|k|v] rows of the tokens in its context
// (x cache, (maxT,3d_x) per block), every dual block the y stream's (y cache, (maxT,3d_y)); a step appends the
// token's rows and attends with one query against the cache (layers/kv_attention.h). Everything else is the
// existing layers (layernorm, matmul, generator, concat, gelu, residual) on one row, through op:: on the model's
// device: the caches, the EMA state and every row live there, and a step moves only its token id and position in
// (a d_in vector for step_vector) and its output row out. Inference: the VAE's y_used = μ = y^ℓ (eval).
//
// What the generators read (the y "source") selects the inference mode:
//   dynamic     y_used of the token's own y stream                                 mode 1
//   ema         u_t = (1−γ)·u_{t−1} + γ·y_dyn_t, u_{−1} = y_init (set_ema)         mode 4
//   fixed       one ỹ for every later token; the y stream is no longer computed    modes 2, 3, 5
// freeze(keep_context) switches a dynamic stream to fixed at ỹ = the last token's y_used:
//   keep_context = false → the x caches are emptied (the prefix leaves the context; positions stay absolute)
//                          = frozen_outputs (mode 2);   true → frozen_ctx_outputs (mode 3).
// set_fixed_y(y) from the start = transplant_outputs (mode 5).
template <typename real>
struct CGTStream {
    enum class YSource { dynamic, ema, fixed };

    explicit CGTStream(CGT<real>& model);
    void reset();                                           // empty caches, position 0, dynamic y
    void set_ema(const std::vector<real>& y_init, double gamma);
    void set_fixed_y(const std::vector<real>& y);           // (d_y)
    void freeze(bool keep_context);
    // One input (a token id, or a d_in vector) at position pos (−1: the next position). Returns the output row
    // (V logits or d_out predictions), valid until the next step.
    const real* step(int token, int pos = -1);
    const real* step_vector(const real* v, int pos = -1);

    YSource source() const { return src_; }
    int position() const { return next_pos_; }             // the next step's default position
    int context() const { return nx_; }                     // tokens in the x caches
    std::vector<real> y_used() const;                      // what the last step's generators read (d_y), on the host

private:
    struct Site { Buffer<real> ln, mean, rstd, mix, c, P, z, G; };  // one LN + mix site, one row
    const real* run(const int* token, const real* v, int pos);
    void block_step(const std::string& p, const BlockShape& k, real* x, real* cache, int n, const real* y, const real* ux1,
                    const real* ux2, Site& s1, Site& s2);
    void site_step(const std::string& p, const BlockShape& k, int site, const real* x, const real* y, const real* ux, Site& st);

    CGT<real>& m_;
    YSource src_ = YSource::dynamic;
    double gamma_ = 0;
    int nx_ = 0, ny_ = 0, next_pos_ = 0;
    std::vector<Buffer<real>> xcache_, ycache_;             // per block (maxT,3d_x) / per dual block (maxT,3d_y)
    std::vector<Site> xs1_, xs2_;                           // per x block: its LN1/LN2 sites (the y stream reads them)
    Site ys1_, ys2_;
    Buffer<real> x_, y_, yuse_, lnf_, mean_, rstd_, out_, atty_, att_, proj_, fch_, fchg_, vin_;
    Buffer<real> yl_, yl_stat_;  // y^ℓ of this token (--ln-gen: LN(y)) and its mean, rstd
    Buffer<double> ema_;         // the EMA state u (d_y), in double
    Buffer<int> ids_;            // (2): this step's [token, position]
    std::vector<real> out_host_; // the output row of the last step, on the host
};

}  // namespace icl
