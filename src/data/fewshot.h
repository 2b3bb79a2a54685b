// fewshot.h — the synthetic labelled task of the TinT few-shot experiment (spec/tint.md §7.2, CPU-sized).
//
// A "review" is 4–7 word tokens, then the marker token ("Sentiment:") and a label word:
//
//   w w w w w  MARK  LABEL          e.g.  [17 25 9 30 22] 1 2
//
// Its class c ∈ {0,1} shows in its keywords: each word is a class-c keyword with probability p_key (class-0
// keywords 6..13, class-1 keywords 14..21; at least one per review), else a neutral word (22..31).
// Pretraining sequences join reviews by SEP with the fixed label words LABEL0 + c, so the model learns to read
// the class. The few-shot episodes then use two NEW label words (NEW0, NEW1, never seen in pretraining), with a
// per-episode coin deciding which one names which class: the mapping has to be learned from the k
// demonstrations (chance = 50% by construction) — in context (ICL), or by TinT's simulated update.
#pragma once
#include <vector>

#include "data/batch.h"
#include "engine/rng.h"

namespace icl {

constexpr int FS_SEP = 0, FS_MARK = 1, FS_LABEL0 = 2, FS_LABEL1 = 3, FS_NEW0 = 4, FS_NEW1 = 5;
constexpr int FS_KEY0 = 6, FS_KEY1 = 14, FS_NEUTRAL = 22, FEWSHOT_VOCAB = 32;

struct FewshotExample {
    std::vector<int> tokens;  // words..., MARK, label word
    int cls = 0;              // the class
};

// One review of class `cls` ending in the label word `label`.
FewshotExample fewshot_example(int cls, int label, Rng& rng, double p_key = 0.5);
// B pretraining sequences of T tokens (next-token targets, every position scored): reviews with the fixed
// label words LABEL0 + class, joined by SEP.
Batch fewshot_batch(int B, int T, Rng& rng);

}  // namespace icl
