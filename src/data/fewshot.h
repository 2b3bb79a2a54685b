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
//
// With a pretrained model (tint fewshot --load-hf DIR --dataset FILE) the task is real text instead: a labelled
// dataset read from a file, shown through one of the paper's templates (spec §7.2, template_id 0):
//
//   sst2    Review: {text}\nSentiment:{ Negative| Positive}                                 (SST-2, CR, MR, MPQA, Amazon)
//   agnews  Article: {text}\nWhat is the article about? Answer:{ World| Sports| Business| Technology}
//   subj    {text} This is{ objective| subjective}
//
// demonstrations joined by "\n\n"; the calibration (SFC) prompt is the template's text after {text}
// ("\nSentiment:", " Answer:", " This is") followed by the label.
#pragma once
#include <string>
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

// ---- real text ----

struct FewshotTemplate {
    std::string name;
    std::string before, after;        // prompt = before + text + after; the label word follows
    std::string sep = "\n\n";        // between demonstrations (Multi format)
    std::vector<std::string> labels;  // class c's label word, with its leading space (one token of the tokenizer)
};
// sst2 | agnews | subj (above); `label_words` (comma list, without the leading space; empty = the template's own)
// replaces the label words. A usage error (exit 2) names an unknown template or a list of fewer than two words.
FewshotTemplate fewshot_template(const std::string& name, const std::vector<std::string>& label_words);

struct LabeledText {
    int cls = 0;
    std::string text;
    int line = 0;  // 1-based line of the file (provenance of each example in the run's summary)
};
// A labelled dataset: one example per line, "LABEL<TAB>TEXT", LABEL the class index 0..n_classes−1 (a trailing \r
// is dropped, empty lines skipped). Refused with one line naming the file and line: no tab, a label that is not an
// integer in range, an empty text, no example at all (file errors exit 1).
std::vector<LabeledText> read_labeled_text(const std::string& path, int n_classes);

}  // namespace icl
