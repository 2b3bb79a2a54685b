// bpe_tokenizer.h — a byte-level BPE tokenizer (Sennrich et al. 2016) that the project trains itself (tools/bpe), for
// paper-like text runs (spec/cgt.md §4.3: 8000 subwords). Ids 0..255 are the bytes; id 256+i is merge i.
//
// Pre-tokenization: the text is cut into chunks — an optional single space followed by a run of letters
// (ASCII letters and every byte ≥ 128, so UTF-8 letters stay together), an optional space followed by a run
// of digits, a run of other printable characters, or a run of whitespace. Merges never cross a chunk
// boundary. Encoding applies the merges inside each chunk in the order they were learned (lowest rank
// first). Every byte string round-trips: decode(encode(s)) == s.
//
// File format (text): "icl-bpe 1 <vocab size>\n" then one merge per line, "a b\n" (the ids it joins).
//
//   BPE t = BPE::train(text, 8000);  t.save("data/fortunes.bpe");
//   BPE u = BPE::load("data/fortunes.bpe");  std::vector<int> ids = u.encode("Hello world");
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace icl {

class BPE {
public:
    BPE();  // bytes only (vocabulary 256)

    // Learn merges on `text` until the vocabulary has `vocab_size` tokens (or no pair occurs twice).
    static BPE train(const std::string& text, int vocab_size);
    // Refuses a malformed file with a one-line message, and one beyond the limits below.
    static BPE load(const std::string& path);
    static constexpr int kMaxVocab = 1 << 22, kMaxTokenBytes = 1 << 16;
    void save(const std::string& path) const;

    int size() const { return 256 + (int)merges_.size(); }
    std::vector<int> encode(const std::string& text) const;
    std::string decode(const std::vector<int>& ids) const;
    std::string decode(const int* ids, int n) const;
    const std::string& token_bytes(int id) const { return bytes_[id]; }
    const std::vector<std::pair<int, int>>& merges() const { return merges_; }

    // The chunks of pre-tokenization (exposed for tests).
    static std::vector<std::string> chunks(const std::string& text);

private:
    void add_merge(int a, int b);
    std::vector<std::pair<int, int>> merges_;
    std::vector<std::string> bytes_;  // (size) the bytes each token stands for
};

}  // namespace icl
