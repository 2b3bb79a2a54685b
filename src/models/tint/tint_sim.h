// tint.h — TinT (spec/tint.md): a simulator transformer that runs, back-propagates and fine-tunes a small
// auxiliary transformer whose weights live in K prefix tokens, in one forward pass.
//
// The auxiliary model is the engine's GPT (src/models/gpt.h) with act = relu (OPT-style) or gelu (GPT-2 style):
// a pre-LN decoder with learned positions, final LN and a head tied to the token embedding. Nothing of it is
// re-implemented here: TinT reads its weights, writes them into prefix tokens, and decodes them back.
//
// The simulator is built from five generic primitives, each a plain function of a state X (K+T, D):
//   HSplit   one H-split linear op (spec §2.2): split-wise (block-diagonal over H chunks) or dimension-wise
//            (an H×H mixing of the chunks at every coordinate), with a bias
//   TAttn    TinT attention (§2.1): content maps (chains of HSplit ops) plus one-hot position terms λ_h·P p_t,
//            linear (a = <q,k>·mask) or softmax, optionally transposed (the backward's a_{j,t})
//   MLP      token-wise H-split fc -> aux activation -> H-split proj (§2.5)
//   norm     group normalisation of the signal coordinates [0,d) (§2.4)
//   Gate     tanh gates read from the one-hot position: replace-data or prefix-residual (§2.3)
// "Constructor" functions fill these with hand-derived weights (0, ±1, ±η, ±1/ε, identity blocks) to make
// the modules of §3–§4: Linear Forward / Backward / Descent, LayerNorm forward / backward / descent,
// activation forward / backward, softmax self-attention forward / value-only backward. An orchestrator
// (Tint::run) strings them together by the whole-model schedule of §4.7, with explicit stacks of stored
// memory regions re-injected before every backward module (the stand-in for "copying through residual
// connections", §11.3), as the official code does.
//
// Layout (D = d(S+1), K = d/S prefixes, blocks of d coordinates numbered 0..S):
//   data token   [0,d) signal | block S−2: attn memory q | block S−1: k or x̂ | block S: the module input x
//   prefix j     rows jS..jS+S−1 of a d×d map in blocks 0..S−1, the bias in block S (only prefix 0's is read)
// Everything is templated on the scalar type: the tests run the simulator in fp64 against the oracles.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/device.h"
#include "layers/tint_ops.h"
#include "models/block.h"
#include "models/gpt.h"

namespace icl {

// The simulator's configuration: the auxiliary model's shape plus TinT's own choices (spec §1, §9).
struct TintConfig {
    // auxiliary model
    int d = 48, n_h = 3, L = 2, V = 64, T = 32;  // width, heads, blocks, vocabulary, max positions
    ActKind act = ActKind::relu;
    // simulator
    int S = 3;                  // weight rows per prefix token (K = d/S prefixes, D = d(S+1))
    int H_sim = 12;             // heads of the softmax modules (head dim D/H_sim)
    double eps = 1e-3;          // finite-difference step ε = 1/N of the LayerNorm and activation backward
    double eta = 1e-2;          // inner SGD learning rate, on the SUMMED loss (spec §11.7)
    double gate_scale = 10;     // sharpness of the tanh gates (tanh(10) = 1 − 4e-9; the fp64 tests use 20)
    bool ln_gamma = false;      // also descend the LayerNorm gains γ (exact diagonal update); the paper: β only
    bool loss_layers = false;   // the loss gradient as App. G's TinT layers (tint::loss_head) instead of the op

    int K() const { return d / S; }                 // prefix tokens
    int D() const { return d * (S + 1); }           // simulator width
    int H_lin() const { return D() / K(); }         // heads of the linear modules (head dim K)
    int T_sim() const { return T + K(); }           // one-hot position size: data 0..T−1, prefix j at T+j
    int ffn_chunks() const { return 4; }            // the 4d FFN as 4 sub-FFNs of width d (spec §4.5)
    void validate() const;                          // the sizing rules of §1, one-line errors
    static TintConfig from_aux(const GPTConfig& g); // aux shape from a GPT config (act must be relu|gelu)
};

namespace tint {

// ---- primitives ------------------------------------------------------------------------------------------

// One H-split linear op on D-wide rows: view e as M (H, c), c = D/H.
//   split-wise:     M'[h,:] = W_h M[h,:] + b_h            W (H,c,c)  — D²/H parameters
//   dimension-wise: M'[:,x] = W_x M[:,x] + b_x            W (c,H,H)  — D·H parameters
template <typename real>
struct HSplit {
    bool dimwise = false;
    int D = 0, H = 0, c = 0;
    std::vector<real> W, b;                  // see above; b (D)
    std::vector<uint8_t> live;               // split-wise: block h has a non-zero; dim-wise: (o,i) pair has one
    static HSplit split(int D, int H);       // zero ops
    static HSplit dim(int D, int H);
    void set(int h, int o, int i, double v);     // split-wise: W_h[o][i]
    void set_all(int o, int i, double v);        // dimension-wise: W_x[o][i] for every coordinate x
    void apply(real* out, const real* in, int N) const;   // out (N,D) = op(in (N,D)) on the CPU (op:: layers); out != in
    int64_t params() const { return (int64_t)W.size() + (int64_t)b.size(); }
    int64_t nonzeros() const;

    // Split-wise: the non-zero entries of W as CSR by output coordinate (rowptr (D+1), col and w (nnz)), the form
    // op::hsplit_split_forward runs. Built by prepare() (apply() and compile() call it when needed).
    void prepare() const;
    mutable std::vector<int> rowptr, col;
    mutable std::vector<real> w;
    mutable bool built = false;
};

// A chain of H-split ops applied in order. zero = contributes nothing; empty and not zero = identity.
template <typename real>
struct Chain {
    bool zero = true;
    std::vector<HSplit<real>> ops;
    static Chain none() { return Chain(); }
    static Chain identity() { Chain c; c.zero = false; return c; }
    static Chain of(std::vector<HSplit<real>> ops) { Chain c; c.zero = false; c.ops = std::move(ops); return c; }
    int64_t params() const;
    int64_t nonzeros() const;
};

// Position term of q, k or v: head h adds lam[h] · P[:, p_t] (P (k, T_sim), shared by the heads).
template <typename real>
struct PosTerm {
    std::vector<real> P;
    std::vector<uint8_t> lam;
    bool used() const { return !P.empty(); }
};

// Which (row i, column j) pairs a TinT attention may use (layers/tint_ops.h): data_to_prefix (Linear Forward /
// Backward), prefix_to_train (Linear Descent), causal_data (the softmax modules, with the ICL mask).
using MaskKind = TintMask;

template <typename real>
struct TAttn {
    int H = 0;                     // heads; head dim k = D/H
    bool softmax = false;          // false: a = <q,k>·mask (no normalisation); true: softmax(scale·<q,k>) over the mask
    bool transpose = false;        // use a[j][i] instead of a[i][j], kept only where j trains or j == i (spec §4.3)
    double scale = 1;
    MaskKind mask = MaskKind::data_to_prefix;
    Chain<real> q, k, v, o;        // content maps (o acts on the concatenated heads)
    PosTerm<real> pq, pk, pv;
};

enum class GateKind { none, replace_data, prefix_residual };
// out = tanh(a_old[p] + b_old)·e_in + tanh(a_new[p] + b_new)·e_new  (p = the token's one-hot position); with width D
// the tables hold one gate per (position, coordinate): the γ descent keeps only the diagonal of each prefix's rows.
template <typename real>
struct Gate {
    GateKind kind = GateKind::none;
    int width = 1;                    // 1 or D
    std::vector<real> a_old, a_new;   // (T_sim, width)
    double b_old = 0, b_new = 0;
    int64_t params() const { return kind == GateKind::none ? 0 : (int64_t)(a_old.size() + a_new.size() + 2); }
};

enum class LayerKind { attention, mlp, norm, linear, vocab_softmax };

// One TinT layer: e_new = f(e_in) + skip(e_in), then the gate. f is the attention (then o), the MLP, the group
// norm of [0,d) (other coordinates 0), a token-wise H-split chain, or App. G's feed-forward layer with a softmax
// activation over V hidden units, [0,d) = Eᵀ softmax(E·e_in[0,d)) (other coordinates 0).
template <typename real>
struct TLayer {
    LayerKind kind = LayerKind::linear;
    TAttn<real> attn;
    Chain<real> fc, proj;              // mlp
    ActKind act = ActKind::relu;       // mlp
    Chain<real> map;                   // linear
    std::vector<real> E;               // vocab_softmax: the hidden weights E (V,d); the output weights are Eᵀ
    int V = 0;
    Chain<real> skip;                  // memory routing: input blocks copied into the new value
    Gate<real> gate;
    int64_t params() const;
    int64_t nonzeros() const;
};

template <typename real> struct Compiled;

template <typename real>
struct Module {
    std::string name;
    std::vector<TLayer<real>> layers;
    mutable int64_t runs = 0;          // times module_forward has run it, every sequence counted (the work done)
    std::shared_ptr<const Compiled<real>> compiled;  // the weights on a device (compile()); const, shared by copies
    int64_t params() const;
    int64_t nonzeros() const;
};

// A module's weights flattened onto one device for the op:: layers: every real (H-split values and biases,
// position tables, gate tables) in one buffer, the CSR indices in another, the 0/1 flags (live chunk pairs, λ) in a
// third; the layers keep offsets into them. Built once, read-only afterwards (runs on many threads share it).
template <typename real>
struct Compiled {
    struct Op { bool dimwise = false; int H = 0; size_t w = 0, b = 0, rowptr = 0, col = 0, live = 0; };
    struct Chain { bool zero = true; std::vector<Op> ops; };
    struct Pos { bool used = false; size_t P = 0, lam = 0; };
    struct Layer {
        LayerKind kind = LayerKind::linear;
        int H = 0;
        bool softmax = false, transpose = false;
        double scale = 1;
        MaskKind mask = MaskKind::data_to_prefix;
        Chain q, k, v, o, fc, proj, map, skip;
        Pos pq, pk, pv;
        ActKind act = ActKind::relu;
        GateKind gate = GateKind::none;
        size_t a_old = 0, a_new = 0;
        double b_old = 0, b_new = 0;
        int gate_w = 1;
        size_t E = 0, Et = 0;          // vocab_softmax: E (V,d) and Eᵀ (d,V) in reals
        int V = 0;
    };
    Device dev = Device::cpu;
    std::vector<Layer> layers;
    Buffer<real> reals;
    Buffer<int> ints;
    Buffer<uint8_t> flags;
};
template <typename real>
void compile(Module<real>& m, Device dev);   // sets m.compiled

// The masks and scratch of one call on B sequences of T data rows (state X (B, K+T, D) on `dev`).
template <typename real>
struct Work {
    Device dev = Device::cpu;
    int B = 0, K = 0, T = 0, N = 0, D = 0, d = 0, Taux = 0;
    Buffer<int> pos;                   // (B,T)
    Buffer<uint8_t> train, icl;        // (B,T), (B,T,T) or empty
    bool has_icl = false;
    Buffer<real> Q, Kx, Vx, O, e, u, v, sk, ta, tb;   // (B,N,D) each
    Buffer<real> att;                  // (B, H_max, N, N)
    Buffer<real> lnin, lnout, mean, rstd, ones, zeros;  // the group norm: (B·N, d), (B·N), (d)
    Buffer<real> vlogits, vprobs, vloss;   // vocab_softmax: (B·N, V), (B·N, V), (B·N); allocated by its first run
    Buffer<int> vnone;                     // (B·N) targets −1: the cross-entropy op's probabilities without a loss
    void vocab(int V);                     // make the vocab_softmax buffers V wide
    // pos/train (B,T) and icl (B,T,T) or null, on the host
    Work(Device dev, const TintConfig& c, int B, int T, const int* pos, const uint8_t* train, const uint8_t* icl);
    size_t bytes() const;
};

// What the masks and position terms of one sequence depend on.
struct Seq {
    int K = 0, T = 0;                  // prefix rows, data rows
    const int* pos = nullptr;          // (T) data positions, each < cfg.T
    const uint8_t* train = nullptr;    // (T) 1 = training token (the bidirection mask)
    const uint8_t* icl = nullptr;      // (T,T) 1 = token t may attend to token j <= t; null = plain causal
};

// Run one module on X (B, K+T, D) in place, on w.dev, through op:: calls (m compiled for w.dev).
template <typename real>
void module_forward(const Module<real>& m, real* X, Work<real>& w);
// The same for one sequence on the CPU (the module tests): X (K+T, D) on the host; compiles m on the fly if needed.
template <typename real>
void module_forward(const Module<real>& m, real* X, const Seq& s, const TintConfig& c);

// ---- module constructors (spec §3, §4) --------------------------------------------------------------------
// keep: (source block, destination block) pairs of d-coordinate blocks copied from the input into the output
// of the data rows (the memory the backward modules need later).
template <typename real> Module<real> linear_forward(const TintConfig& c, const std::vector<std::pair<int, int>>& keep);
template <typename real> Module<real> linear_backward(const TintConfig& c);
// W −= η Σ_train g xᵀ (x read from block S), b −= η·bias_scale Σ_train g; bias_only: the LayerNorm β descent.
// x_block: the block x is read from (default S; the LayerNorm γ descent reads x̂ from S−1).
template <typename real> Module<real> linear_descent(const TintConfig& c, bool bias_only, double bias_scale, int x_block = -1);
// β only (the paper), or with c.ln_gamma also the exact diagonal γ update (a per-coordinate gate).
template <typename real> Module<real> ln_descent(const TintConfig& c);
template <typename real> Module<real> ln_forward(const TintConfig& c);
template <typename real> Module<real> ln_backward(const TintConfig& c);
template <typename real> Module<real> act_forward(const TintConfig& c);
template <typename real> Module<real> act_backward(const TintConfig& c);
template <typename real> Module<real> attn_forward(const TintConfig& c);   // the softmax layer after Q, K, V
template <typename real> Module<real> attn_backward(const TintConfig& c);
// App. G's loss head: the gradient of the summed cross-entropy at the output, grad_t = m_t (Eᵀ softmax(E h_t) −
// e_{x_{t+1}}), as three TinT layers on a state whose data rows hold h_t in block 0 and the token embedding e_{x_t}
// in block 1, run with the loss weights m as its `train` flags (E = wte (V,d), the tied head). The result is in
// block 0 of the data rows; prefix rows stay 0.
template <typename real> Module<real> loss_head(const TintConfig& c, const real* E);

// ---- prefix tokens (spec §1) ---------------------------------------------------------------------------
// A d×d map W (row i at W + i·ldw) and bias b, as K prefix rows of width D: prefix j holds rows jS..jS+S−1 in
// blocks 0..S−1 and b·bias_scale in block S (written into every prefix; only prefix 0's copy is read).
template <typename real>
std::vector<real> encode_linear(const TintConfig& c, const real* W, int ldw, const real* b, double bias_scale = 1);
// Inverse of encode_linear (the bias from prefix 0, unscaled).
template <typename real>
void decode_linear(const TintConfig& c, const real* prefix, real* W, int ldw, real* b);

}  // namespace tint

// One batch of TinT inputs. Each sequence b gets its own copy of the auxiliary weights, updated only by its
// own training tokens, and starts from the original weights (no state is carried between calls).
struct TintInput {
    int B = 1, T = 0;
    std::vector<int> ids;          // (B,T) tokens
    std::vector<int> pos;          // (B,T) positions; empty = 0..T−1 (Single format resets them per demo)
    std::vector<uint8_t> train;    // (B,T) 1 = training token (bidirection mask); the loss at t needs train[t+1]
    std::vector<uint8_t> label;    // (B,T) label-only loss: gradient at t only if label[t+1]; empty = full context
    std::vector<uint8_t> icl;      // (B,T,T) block ICL mask (1 = may attend); empty = plain causal
    void validate(const TintConfig& c) const;
    // The loss weight m_t = train[t+1]·label[t+1] (0 at the last position) of sequence b, as 0/1.
    std::vector<uint8_t> loss_mask(int b) const;
};

template <typename real>
struct TintOutput {
    std::vector<real> logits0, logits1;      // (B,T,V) before and after the simulated update(s)
    std::vector<std::vector<real>> params;   // per sequence: the aux parameter registry decoded from the prefixes
    int fwd_blocks = 0, bwd_blocks = 0;      // simulated aux blocks per sequence: L + s·k forward, s·k backward
    size_t state_bytes = 0;                  // simulator memory per sequence: state, prefixes, stored memory
};

// Parameter count of a constructed simulator, split as in the paper's Table 1.
struct TintCount {
    int64_t fwd = 0, bwd = 0, desc = 0;      // dense sizes of every constructed tensor
    int64_t fwd_nz = 0, bwd_nz = 0, desc_nz = 0;  // structurally non-zero entries
    int64_t total() const { return fwd + bwd + desc; }
    int64_t total_nz() const { return fwd_nz + bwd_nz + desc_nz; }
};

template <typename real>
struct Tint {
    TintConfig cfg;
    // The constructed modules (the simulator's parameters). Modules with the same weights are shared, as with
    // the code's reuse_* flags: one Linear Forward for Q, K, V, one for out_proj / fc1 / fc2 (memory), etc.
    tint::Module<real> lin_fwd, lin_fwd_mem, ln_fwd, act_fwd, attn_fwd;
    tint::Module<real> lin_bwd, ln_bwd, act_bwd, attn_bwd;
    tint::Module<real> lin_desc, lin_desc_fc2, ln_desc;

    Device dev = Device::cpu;            // where the modules' weights and every run's state live

    explicit Tint(const TintConfig& c, Device dev = Device::cpu);
    // The whole-model schedule of spec §4.7: forward of all L layers, then s times (backward + descent of the top
    // k layers, re-forward of those k layers), reading the auxiliary weights from `aux` (on any device; its weights
    // are read once into the prefixes). Every step is an op:: call on `dev`, all B sequences at once.
    // Batches larger than about 1 GiB of simulator state per chunk run in chunks of sequences (each sequence's result
    // is independent of the others, so the chunking changes no bit).
    TintOutput<real> run(const GPT<real>& aux, const TintInput& in, int k, int s) const;
    int chunk = 0;                       // sequences per chunk; 0 = by memory (tests set it to check the chunking)
    // Parameter count of the simulator for L forward blocks and k backward/descent blocks (+ ln_f), counting each
    // module instance of the official construction once per role (spec §6; see docs/tint.md).
    TintCount count(int k) const;

private:
    TintOutput<real> run_batch(const GPT<real>& aux, const TintInput& in, int k, int s) const;  // one chunk, all at once
};

// The loss gradient at the output (spec §4.4; a dedicated non-transformer module, as in the official code) is the op
// tint_loss_gradient (layers/tint_ops.h), shared by the simulator and oracle A: grad_t = (Eᵀ softmax(E h_t) −
// E[ids_{t+1}])·m_t, the gradient w.r.t. h_t of the SUMMED cross-entropy Σ_t m_t CE_t (m_t = train[t+1]·label[t+1]).
// Σ_t m_t CE_t of the same logits (the loss the inner step descends).
template <typename real>
double tint_loss(const real* logits, const int* ids, const uint8_t* m, int T, int V);

// The reconstructed Table-1 formula of spec §6 for an OPT model (D = 4d, T_sim = T + d/4), in parameters.
struct TintFormula { double fwd, bwd, desc, total; };
TintFormula tint_formula(int d, int L, int T, int H);

}  // namespace icl
