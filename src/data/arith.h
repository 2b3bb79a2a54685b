// arith.h — the synthetic in-context-learning arithmetic task (spec/cgt.md §4.1).
//
// One sequence = n_tasks tasks; task i has hidden reals a_i ~ U[0,10), b_i ~ U(-10,10) and n_ex examples
//     A*B=±C|      A,B ~ UniformInt{0..10^d-1} printed with d digits, C = trunc(a_i·A + b_i·B) with d+2 digits
// and ends with '#'. d=3, 4 tasks × 4 examples → 15-char examples, 61-char tasks, 244 tokens.
// Character vocabulary (16): 0-9 * = + - | #  → ids 0..9, 10..15.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/batch.h"
#include "engine/rng.h"

namespace icl {

struct ArithConfig {
    int n_tasks = 4, n_ex = 4, digits = 3;
    int example_len() const { return 3 * digits + 6; }              // "012*023=+00035|"
    int task_len() const { return n_ex * example_len() + 1; }        // + '#'
    int seq_len() const { return n_tasks * task_len(); }             // 244 for the paper's config
};

constexpr int ARITH_VOCAB = 16;
int arith_token(char c);       // char -> id; throws on a character outside the vocabulary
char arith_char(int id);       // id -> char
std::string arith_decode(const int* ids, int n);

// The printed example for given operands and task parameters, e.g. (12, 23, 0.5, -1.5, 3) -> "012*023=-00028|".
std::string arith_example(int64_t A, int64_t Bv, double a, double b, int digits);

// Role of each character of a generated sequence.
enum class ArithRole : uint8_t { operand, op, equals, sign, answer_digit, sep, task_end };

struct ArithSample {
    std::string text;                 // (n)  the characters
    std::vector<int> tokens;          // (n)  ids
    std::vector<ArithRole> role;      // (n)
    std::vector<int> task, example;   // (n)  0-based task / example index of each character (-1 for '#')
    std::vector<double> a, b;         // (n_tasks) hidden task parameters
};

ArithSample arith_sample(const ArithConfig& cfg, Rng& rng);

// Next-token training batch: inputs = seq[0..n-2], targets = seq[1..n-1] (T = n-1), mask = 1 everywhere
// (spec: CE on all next tokens).  `samples` (optional) receives the generated sequences.
Batch arith_batch(const ArithConfig& cfg, int B, Rng& rng, std::vector<ArithSample>* samples = nullptr);

// The spec's accuracy positions: mask over input positions t (target = seq[t+1]) whose target is one of
// the answer characters (sign + digits; `digits_only` drops the sign) of examples ≥ first_example (0-based;
// the paper scores examples 3 and 4, i.e. first_example = 2).
std::vector<float> arith_answer_mask(const ArithSample& s, int first_example, bool digits_only);

}  // namespace icl
