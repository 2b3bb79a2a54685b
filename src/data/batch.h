// batch.h — one training/evaluation batch, on the host, as every model consumes it, and the contract it must meet.
//
// Inputs are either token ids (language tasks) or real vectors (linear regression). Targets are either
// next-token ids (softmax cross-entropy) or vectors (MSE head). `mask` weights each position's loss; the loss is
// Σ w·loss / Σ w with w = mask, and 0 where the target is ignored.
//
// The contract (check_batch; every model calls it through models/lm_io.h's DeviceBatch):
//   * B >= 1 and T >= 1; without positions, T <= the model's max_T (positions are 0..T-1);
//   * a token model gets B·T token ids in [0, V); a vector model B·T·D values;
//   * pos is empty or holds B·T positions in [0, max_T);
//   * targets are optional; when present they are B·T ids (LM head: each in [0, V), or negative = an ignored
//     position) or B·T·Dout values (vector head), and mask then holds B·T finite weights >= 0;
//   * a batch without targets runs forward only (the outputs, no loss).
// Whether any position is scored at all is the loss's check (models/lm_io.h masked_mean), not this one.
#pragma once
#include <vector>

namespace icl {

struct Batch {
    int B = 0, T = 0;
    std::vector<int> tokens;          // (B,T)       token ids            (token input)
    int D = 0;
    std::vector<float> vectors;       // (B,T,D)     input vectors        (vector input)
    std::vector<int> targets;         // (B,T)       next-token ids; < 0 = ignored    (cross-entropy)
    int Dout = 0;
    std::vector<float> target_vecs;   // (B,T,Dout)  regression targets   (MSE)
    std::vector<float> mask;          // (B,T)       loss weight per position (required with targets)
    std::vector<int> pos;             // (B,T)       absolute positions; empty = 0..T-1

    bool vector_input() const { return D > 0; }
    bool vector_target() const { return Dout > 0; }
};

// What a model accepts: V > 0 token inputs (and an LM head over V) or D > 0 vector inputs; Dout > 0 a vector head
// (else the LM head over V); positions below max_T.
struct BatchSpec {
    int V = 0;      // vocabulary of token inputs and of the LM head
    int D = 0;      // > 0: vector inputs of this width
    int Dout = 0;   // > 0: vector targets of this width
    int max_T = 0;  // positions accepted: [0, max_T)
    const char* model = "model";  // for messages: "this GPT takes tokens, …"
};

// Next-token batches of token sequences (every generator of src/data builds its batches with these two):
// next_token_batch(B, T) is B rows of T inputs, every position scored (mask 1); set_next_token_row(bt, b, seq)
// fills row b with inputs seq[0..T−1] and targets seq[1..T] (seq holds at least T+1 tokens).
Batch next_token_batch(int B, int T);
void set_next_token_row(Batch& bt, int b, const int* seq);

// The weight of each position in the loss (B·T): mask, 0 where a token target is ignored (< 0); empty without
// targets. batch_loss_weight = their sum, the loss's denominator.
std::vector<double> loss_weights(const Batch& bt);
double batch_loss_weight(const Batch& bt);

// Check `bt` against the contract above; fails (icl::Error) with one line naming the problem. Returns whether
// the batch has targets.
bool check_batch(const Batch& bt, const BatchSpec& spec);

}  // namespace icl
