// mixture.h — a categorized text corpus and the text-mixture task (spec/cgt.md §4.3).
//
// Corpus: one text file per category (the category's name is the file name without its extension). Inside a
// file, a line holding only '%' separates documents (the fortune(6) format that tools/prep_fortunes writes);
// a file without such lines is one long text. A category's pieces are tokenized (bytes, or a BPE from
// tools/bpe) and joined with "\n" into one token stream; the last `val_fraction` of its pieces (at least one)
// is validation. A "document" of a category is the stream from a random piece start on: consecutive pieces
// of one category (for fortunes: a page of fortunes on one topic or in one language).
//
// Mixture sample (training and the paper's evaluation): document 1 is cut at a uniform position in
// [l_start, l_finish] and document 2 (a random category) follows, truncated to T+1 tokens; with probability
// 1 − two_texts a sample is a single document. `mixture_sequence` makes any number of joins (3-text
// transition plots).
#pragma once
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/bpe_tokenizer.h"
#include "engine/rng.h"

namespace icl {

struct Corpus {
    std::vector<std::string> names;                   // (C) category names
    std::vector<std::vector<int>> train, val;         // (C) token streams
    std::vector<std::vector<size_t>> train_starts, val_starts;  // (C) document (piece) start offsets
    int V = 256;                                      // vocabulary (256 bytes or the BPE's size)
    const BPE* bpe = nullptr;                         // null: bytes
    int categories() const { return (int)names.size(); }
    std::string decode(const int* ids, int n) const;  // tokens → text
};

// `data`: a directory (every <name>.txt file in it, sorted by name, is category <name>; other files are not
// categories) or a comma-separated list of files (any names). Fails with a message if a category has no validation document or a stream shorter than min_tokens.
Corpus corpus_load(const std::string& data, const BPE* bpe, double val_fraction, int min_tokens);

struct MixConfig {
    int T = 128;              // inputs per sequence (T+1 tokens)
    int l_start = 48, l_finish = 80;  // cut range of document 1
    double two_texts = 0.5;   // probability that a training sample is a two-text mixture
};

// Where the joins of a sample are (input positions of document k's first token) and their categories.
struct MixSample {
    std::vector<int> cats;    // category of each part
    std::vector<int> starts;  // first position of each part (starts[0] = 0)
};

// T+1 tokens of category c's document starting at a random piece (wrapping around the stream).
std::vector<int> corpus_document(const Corpus& cp, bool val, int c, int len, Rng& rng);

// A sequence of parts with given categories, joined at the given cut positions (cuts.size() = cats.size() − 1,
// increasing, in (0, T)).
std::vector<int> mixture_sequence(const Corpus& cp, bool val, const std::vector<int>& cats, const std::vector<int>& cuts, int T, Rng& rng);

// A training/validation batch of mixture samples; `info` (optional) receives each sample's parts.
Batch mixture_batch(const Corpus& cp, bool val, const MixConfig& mc, int B, Rng& rng, std::vector<MixSample>* info = nullptr);

// Sequences (B = cats.size()) each made of ONE document of the given category (the split evaluation, t-SNE).
Batch document_batch(const Corpus& cp, bool val, const std::vector<int>& cats, int T, Rng& rng);

}  // namespace icl
