// text.h — byte-level text: any file, split into train and validation parts, random windows.
//
// Tokens are the file's bytes (vocabulary 256). The last `val_fraction` of the file is validation.
#pragma once
#include <string>
#include <vector>

#include "data/batch.h"
#include "engine/rng.h"

namespace icl {

constexpr int BYTE_VOCAB = 256;

struct TextData {
    std::string path;
    std::vector<int> train, val;  // byte ids
};

// Load `path`; fails with a message if it is missing, unreadable or too short for windows of T+1 tokens.
TextData text_load(const std::string& path, double val_fraction, int T);
// The same split of token ids `all` read from `path` (a tokenized text: --task text --tokenizer DIR).
TextData text_split(const std::string& path, std::vector<int> all, double val_fraction, int T, const char* unit = "bytes");

// B random windows of T+1 bytes from `split` (train or val): inputs = window[0..T-1], targets = window[1..T].
Batch text_batch(const std::vector<int>& split, int B, int T, Rng& rng);

// Bytes -> printable string (non-printable bytes as '?', newlines kept).
std::string bytes_to_text(const int* ids, int n);

}  // namespace icl
