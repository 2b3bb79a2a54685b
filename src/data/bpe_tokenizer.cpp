// bpe_tokenizer.cpp — see bpe_tokenizer.h.
#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "engine/common.h"
#include "engine/fileio.h"
#include "engine/run.h"

namespace icl {

namespace {

enum class Cls { letter, digit, space, white, other };
Cls cls(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 128) return Cls::letter;
    if (c >= '0' && c <= '9') return Cls::digit;
    if (c == ' ') return Cls::space;
    if (c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f') return Cls::white;
    return Cls::other;
}
uint64_t key(int a, int b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

}  // namespace

BPE::BPE() {
    for (int i = 0; i < 256; i++) bytes_.push_back(std::string(1, (char)i));
}

void BPE::add_merge(int a, int b) {
    merges_.push_back({a, b});
    bytes_.push_back(bytes_[a] + bytes_[b]);
}

std::vector<std::string> BPE::chunks(const std::string& s) {
    std::vector<std::string> out;
    const size_t n = s.size();
    size_t i = 0;
    auto at = [&](size_t k) { return cls((unsigned char)s[k]); };
    while (i < n) {
        size_t j = i;
        Cls c = at(i);
        if (c == Cls::space && i + 1 < n && (at(i + 1) == Cls::letter || at(i + 1) == Cls::digit)) {
            c = at(i + 1);  // " word" / " 123": the space joins the run after it
            j = i + 1;
        }
        if (c == Cls::letter || c == Cls::digit || c == Cls::other) {
            while (j < n && at(j) == c) j++;
        } else {  // whitespace run; a final space before a letter/digit is left for the next chunk
            while (j < n && (at(j) == Cls::space || at(j) == Cls::white)) j++;
            if (j < n && j - i > 1 && s[j - 1] == ' ' && (at(j) == Cls::letter || at(j) == Cls::digit)) j--;
        }
        out.push_back(s.substr(i, j - i));
        i = j;
    }
    return out;
}

BPE BPE::train(const std::string& text, int vocab_size) {
    if (vocab_size < 256) fail_usage(strfmt("--vocab: must be >= 256 (the bytes), got %d", vocab_size));
    BPE t;
    // unique chunks with their counts, as symbol sequences
    std::unordered_map<std::string, int64_t> cnt;
    for (auto& c : chunks(text)) cnt[c]++;
    std::vector<std::vector<int>> words;
    std::vector<int64_t> freq;
    std::vector<std::string> keys;
    for (auto& kv : cnt) keys.push_back(kv.first);
    std::sort(keys.begin(), keys.end());  // deterministic order
    for (auto& k : keys) {
        std::vector<int> w;
        for (unsigned char ch : k) w.push_back(ch);
        words.push_back(std::move(w));
        freq.push_back(cnt[k]);
    }
    std::unordered_map<uint64_t, int64_t> pc;               // pair -> count
    std::unordered_map<uint64_t, std::vector<int>> where;   // pair -> words that (may) contain it
    for (size_t w = 0; w < words.size(); w++)
        for (size_t i = 0; i + 1 < words[w].size(); i++) {
            const uint64_t k = key(words[w][i], words[w][i + 1]);
            pc[k] += freq[w];
            where[k].push_back((int)w);
        }
    // max-heap of (count, pair); stale entries (count changed since) are skipped when popped
    auto cmp = [](const std::pair<int64_t, uint64_t>& a, const std::pair<int64_t, uint64_t>& b) {
        return a.first != b.first ? a.first < b.first : a.second > b.second;  // ties: the smaller pair first
    };
    std::priority_queue<std::pair<int64_t, uint64_t>, std::vector<std::pair<int64_t, uint64_t>>, decltype(cmp)> heap(cmp);
    for (auto& kv : pc) heap.push({kv.second, kv.first});
    std::vector<int> seen(words.size(), -1);
    while (t.size() < vocab_size && !heap.empty()) {
        const auto [c, k] = heap.top();
        heap.pop();
        auto it = pc.find(k);
        if (it == pc.end() || it->second != c) continue;  // stale
        if (c < 2) break;
        const int a = (int)(k >> 32), b = (int)(k & 0xffffffffu), z = t.size(), mi = (int)t.merges_.size();
        t.add_merge(a, b);
        std::vector<uint64_t> touched;
        std::vector<int> ws = std::move(where[k]);
        where.erase(k);
        for (int w : ws) {
            if (seen[w] == mi) continue;
            seen[w] = mi;
            std::vector<int>& s = words[w];
            bool has = false;
            for (size_t i = 0; i + 1 < s.size(); i++) has |= s[i] == a && s[i + 1] == b;
            if (!has) continue;
            for (size_t i = 0; i + 1 < s.size(); i++) {
                const uint64_t q = key(s[i], s[i + 1]);
                pc[q] -= freq[w];
                touched.push_back(q);
            }
            std::vector<int> m;
            for (size_t i = 0; i < s.size(); i++) {
                if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) { m.push_back(z); i++; }
                else m.push_back(s[i]);
            }
            s = std::move(m);
            for (size_t i = 0; i + 1 < s.size(); i++) {
                const uint64_t q = key(s[i], s[i + 1]);
                pc[q] += freq[w];
                touched.push_back(q);
                if (s[i] == z || s[i + 1] == z) where[q].push_back(w);
            }
        }
        std::sort(touched.begin(), touched.end());
        touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
        for (uint64_t q : touched) {
            auto p = pc.find(q);
            if (p->second <= 0) pc.erase(p);
            else heap.push({p->second, q});
        }
    }
    return t;
}

std::vector<int> BPE::encode(const std::string& text) const {
    std::unordered_map<uint64_t, int> rank;
    for (size_t i = 0; i < merges_.size(); i++) rank[key(merges_[i].first, merges_[i].second)] = (int)i;
    std::unordered_map<std::string, std::vector<int>> cache;
    std::vector<int> out;
    for (const std::string& c : chunks(text)) {
        auto hit = cache.find(c);
        if (hit == cache.end()) {
            std::vector<int> s;
            for (unsigned char ch : c) s.push_back(ch);
            while (s.size() > 1) {  // merge the lowest-ranked adjacent pair everywhere, until none is a merge
                int best = -1;
                for (size_t i = 0; i + 1 < s.size(); i++) {
                    auto r = rank.find(key(s[i], s[i + 1]));
                    if (r != rank.end() && (best < 0 || r->second < best)) best = r->second;
                }
                if (best < 0) break;
                const int a = merges_[best].first, b = merges_[best].second;
                std::vector<int> m;
                for (size_t i = 0; i < s.size(); i++) {
                    if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) { m.push_back(256 + best); i++; }
                    else m.push_back(s[i]);
                }
                s = std::move(m);
            }
            hit = cache.emplace(c, std::move(s)).first;
        }
        out.insert(out.end(), hit->second.begin(), hit->second.end());
    }
    return out;
}

std::string BPE::decode(const int* ids, int n) const {
    std::string s;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= size()) fail(strfmt("bpe: token id %d outside the vocabulary [0, %d)", ids[i], size()));
        s += bytes_[ids[i]];
    }
    return s;
}

std::string BPE::decode(const std::vector<int>& ids) const { return decode(ids.data(), (int)ids.size()); }

void BPE::save(const std::string& path) const {
    std::string s = strfmt("icl-bpe 1 %d\n", size());
    for (auto& m : merges_) s += strfmt("%d %d\n", m.first, m.second);
    write_file_atomic(path, s);
}

BPE BPE::load(const std::string& path) {
    // Opened without blocking (a FIFO is refused), at most 1 GiB; every merge checked before it is applied.
    std::istringstream f(read_file(path, kMaxTextFileBytes, "--tokenizer file"));
    std::string magic;
    int version = 0, n = 0;
    if (!(f >> magic >> version >> n) || magic != "icl-bpe" || version != 1 || n < 256)
        fail("--tokenizer: '" + path + "' is not an icl-bpe version 1 file (tools/bpe writes them)");
    if (n > kMaxVocab) fail(strfmt("--tokenizer: '%s' declares %d tokens (at most %d)", path.c_str(), n, kMaxVocab));
    BPE t;
    for (int i = 256; i < n; i++) {
        int a = -1, b = -1;
        if (!(f >> a >> b)) fail(strfmt("--tokenizer: '%s' ends after %d of %d merges", path.c_str(), i - 256, n - 256));
        if (a < 0 || b < 0 || a >= i || b >= i) fail(strfmt("--tokenizer: '%s': merge %d joins ids %d and %d, not earlier tokens", path.c_str(), i - 256, a, b));
        // merging a token with itself doubles its length: 40 merges would make a 1 TB token
        if (t.bytes_[a].size() + t.bytes_[b].size() > kMaxTokenBytes)
            fail(strfmt("--tokenizer: '%s': merge %d makes a token of %zu bytes (at most %d)", path.c_str(), i - 256,
                        t.bytes_[a].size() + t.bytes_[b].size(), kMaxTokenBytes));
        t.add_merge(a, b);
    }
    std::string extra;
    if (f >> extra) fail("--tokenizer: '" + path + "' has data after its last merge");
    return t;
}

}  // namespace icl
