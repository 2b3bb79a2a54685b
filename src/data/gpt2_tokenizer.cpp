// gpt2_tokenizer.cpp — see gpt2_tokenizer.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/gpt2_tokenizer.h"

#include <pcre2.h>
#include <sys/stat.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <queue>

#include "engine/common.h"
#include "engine/fileio.h"

namespace icl {

namespace {

// ---- GPT-2's byte alphabet (bytes_to_unicode) ----------------------------------------------------------------------

bool printable_byte(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct ByteAlphabet {
    static constexpr uint32_t kEnd = 0x100 + 68;  // the 68 non-printable bytes use U+0100..U+0143
    uint32_t symbol[256];                         // byte -> code point
    int byte_of[kEnd];                            // code point -> byte, or -1
    ByteAlphabet() {
        std::fill(byte_of, byte_of + kEnd, -1);
        uint32_t next = 0x100;
        for (int b = 0; b < 256; b++) {
            symbol[b] = printable_byte(b) ? (uint32_t)b : next++;
            byte_of[symbol[b]] = b;
        }
        ICL_ASSERT(next == kEnd);
    }
};
const ByteAlphabet& alphabet() {
    static const ByteAlphabet a;
    return a;
}

// Decode one UTF-8 character of s at i (strictly: no overlong forms, no surrogates, nothing above U+10FFFF).
// Returns its length and sets *cp, or returns 0 when the bytes at i are not valid UTF-8.
size_t utf8_char(const std::string& s, size_t i, uint32_t* cp) {
    const unsigned char c = (unsigned char)s[i];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) { *cp = c; return 1; }
    else if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if (i + len > s.size()) return 0;
    for (size_t k = 1; k < len; k++) {
        const unsigned char d = (unsigned char)s[i + k];
        if ((d & 0xC0) != 0x80) return 0;
        v = (v << 6) | (d & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

// A token or merge-file symbol for a one-line message: quoted, control and invalid bytes escaped, at most ~40 bytes.
std::string shown(const std::string& s) {
    std::string o = "'";
    for (size_t i = 0; i < s.size();) {
        if (o.size() > 40) { o += "..."; break; }
        uint32_t cp;
        const size_t len = utf8_char(s, i, &cp);
        if (len == 0 || cp < 0x20 || cp == 0x7F) {
            o += strfmt("\\x%02x", (unsigned char)s[i]);
            i++;
        } else {
            o += s.substr(i, len);
            i += len;
        }
    }
    return o + "'";
}

// A token written in the byte alphabet -> its bytes. On failure returns false and says why in *why.
bool unmap_symbol(const std::string& sym, std::string* bytes, std::string* why) {
    const ByteAlphabet& a = alphabet();
    bytes->clear();
    for (size_t i = 0; i < sym.size();) {
        uint32_t cp;
        const size_t len = utf8_char(sym, i, &cp);
        if (len == 0) {
            *why = strfmt("%s is not valid UTF-8 (byte %zu)", shown(sym).c_str(), i);
            return false;
        }
        if (cp >= ByteAlphabet::kEnd || a.byte_of[cp] < 0) {
            *why = strfmt("%s holds U+%04X, which is not one of GPT-2's 256 byte symbols", shown(sym).c_str(), cp);
            return false;
        }
        bytes->push_back((char)a.byte_of[cp]);
        i += len;
    }
    return true;
}

// ---- vocab.json / encoder.json, read as a stream of JSON events -------------------------------------------------
//
// A SAX reader rather than a parsed document: it sees a key listed twice (a parsed object keeps only the last one)
// and stops at the first problem.
struct VocabReader : nlohmann::json_sax<nlohmann::json> {
    std::vector<std::pair<std::string, int64_t>> entries;  // (token bytes, id) in file order
    std::vector<std::string> names;                         // the token as written, for messages
    std::string error;                                      // the first refusal, "" while all is well
    int depth = 0;
    bool have_key = false;

    bool refuse(const std::string& why) {
        if (error.empty()) error = why;
        return false;
    }
    bool not_an_id(const char* what) {
        if (depth == 0) return refuse(strfmt("not a JSON object of token ids (the file is %s)", what));
        return refuse(strfmt("the value of %s is %s, not an integer token id", shown(names.back()).c_str(), what));
    }
    bool id(int64_t v) {
        if (depth != 1 || !have_key) return not_an_id("a number");
        have_key = false;
        if (v < 0) return refuse(strfmt("token %s has the negative id %lld", shown(names.back()).c_str(), (long long)v));
        entries.back().second = v;
        return true;
    }

    bool null() override { return not_an_id("null"); }
    bool boolean(bool) override { return not_an_id("a boolean"); }
    bool number_integer(number_integer_t v) override { return id((int64_t)v); }
    bool number_unsigned(number_unsigned_t v) override { return id(v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v); }
    bool number_float(number_float_t, const string_t&) override { return not_an_id("a fractional number"); }
    bool string(string_t&) override { return not_an_id("a string"); }
    bool binary(binary_t&) override { return not_an_id("binary data"); }
    bool start_array(std::size_t) override { return not_an_id("an array"); }
    bool end_array() override { return not_an_id("an array"); }
    bool start_object(std::size_t) override {
        if (depth != 0) return not_an_id("an object");
        depth = 1;
        return true;
    }
    bool end_object() override {
        depth = 0;
        return true;
    }
    bool key(string_t& k) override {
        if ((int64_t)entries.size() >= GPT2Tokenizer::kMaxVocab)
            return refuse(strfmt("more than %d tokens", GPT2Tokenizer::kMaxVocab));
        if (k.empty()) return refuse("an empty token");
        if (k.size() > 2 * (size_t)GPT2Tokenizer::kMaxTokenBytes + 2)  // 2 UTF-8 bytes per symbol at most
            return refuse(strfmt("a token of more than %d bytes", GPT2Tokenizer::kMaxTokenBytes));
        std::string bytes, why;
        if (!unmap_symbol(k, &bytes, &why)) return refuse("token " + why);
        if (bytes.size() > (size_t)GPT2Tokenizer::kMaxTokenBytes)
            return refuse(strfmt("token %s has %zu bytes (at most %d)", shown(k).c_str(), bytes.size(), GPT2Tokenizer::kMaxTokenBytes));
        entries.push_back({std::move(bytes), -1});
        names.push_back(k);
        have_key = true;
        return true;
    }
    bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) override {
        // "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error ..." -> from "parse error"
        std::string m = ex.what();
        const size_t b = m.find("] ");
        if (b != std::string::npos) m = m.substr(b + 2);
        std::replace(m.begin(), m.end(), '\n', ' ');
        if (m.size() > 200) m = m.substr(0, 200) + "...";
        if (m.compare(0, 11, "parse error") != 0) m = strfmt("at byte %zu: ", position) + m;  // e.g. a number overflow
        return refuse("not valid JSON (" + m + ")");
    }
};

uint64_t pair_key(int a, int b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

bool exists(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;  // anything there (a FIFO too: read_file refuses it with a message)
}

// ---- GPT-2's pre-tokenization pattern, compiled once ---------------------------------------------------------------

const char* const kPattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    const int n = pcre2_get_error_message(code, buf, sizeof buf);
    return n < 0 ? strfmt("PCRE2 error %d", code) : std::string((const char*)buf);
}

class Pattern {
public:
    Pattern() {
        int err = 0;
        PCRE2_SIZE at = 0;
        code_ = pcre2_compile((PCRE2_SPTR)kPattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                              &err, &at, nullptr);
        if (!code_)  // e.g. a libpcre2-8 built without Unicode support
            fail(strfmt("GPT-2 tokenizer: PCRE2 %d.%d cannot compile GPT-2's pre-tokenization pattern (at offset %zu): %s",
                        PCRE2_MAJOR, PCRE2_MINOR, (size_t)at, pcre2_message(err).c_str()));
        // The JIT is an optional speed-up: where PCRE2 has none (PCRE2_ERROR_JIT_BADOPTION), or it cannot allocate
        // executable memory (PCRE2_ERROR_NOMEMORY), pcre2_match() runs the interpreter on the same compiled pattern.
        const int rc = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
        ICL_ASSERT_MSG(rc == 0 || rc == PCRE2_ERROR_JIT_BADOPTION || rc == PCRE2_ERROR_NOMEMORY, pcre2_message(rc));
    }
    ~Pattern() { pcre2_code_free(code_); }
    Pattern(const Pattern&) = delete;
    Pattern& operator=(const Pattern&) = delete;

    // Calls emit(begin, end) for each pre-token of s, in order, covering every byte of s.
    void split(const std::string& s, const std::function<void(size_t, size_t)>& emit) const {
        std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
            pcre2_match_data_create_from_pattern(code_, nullptr), pcre2_match_data_free);
        if (!md) throw std::bad_alloc();
        const size_t n = s.size();
        size_t pos = 0;
        while (pos < n) {
            const int rc = pcre2_match(code_, (PCRE2_SPTR)s.data(), n, pos, 0, md.get(), nullptr);
            if (rc == PCRE2_ERROR_NOMATCH) {  // only invalid UTF-8 is left
                emit(pos, n);
                break;
            }
            if (rc < 0)  // e.g. a resource limit; not expected for this pattern, but never ignored
                fail(strfmt("GPT-2 tokenizer: PCRE2 failed to match at byte %zu of a %zu-byte text: %s", pos, n,
                            pcre2_message(rc).c_str()));
            ICL_ASSERT(rc > 0);  // 0: ovector too small, impossible with match data sized from the pattern
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
            const size_t b = ov[0], e = ov[1];
            ICL_ASSERT(b >= pos && e > b && e <= n);  // every alternative consumes at least one character
            if (b > pos) emit(pos, b);                 // a run of invalid UTF-8 that no alternative matches
            emit(b, e);
            pos = e;
        }
    }

private:
    pcre2_code* code_ = nullptr;
};

const Pattern& pattern() {
    static const Pattern p;  // thread-safe initialization (C++11); compiled on first use
    return p;
}

}  // namespace

// ---- loading -------------------------------------------------------------------------------------------------------

GPT2Tokenizer GPT2Tokenizer::load(const std::string& dir) {
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        fail(strfmt("%s: not a directory (a GPT-2 tokenizer folder holds vocab.json + merges.txt, or encoder.json + vocab.bpe)",
                    dir.c_str()));
    std::string vpath, mpath;
    if (exists(dir + "/vocab.json") || exists(dir + "/merges.txt")) {  // Hugging Face's names
        vpath = dir + "/vocab.json";
        mpath = dir + "/merges.txt";
    } else if (exists(dir + "/encoder.json") || exists(dir + "/vocab.bpe")) {  // OpenAI's names
        vpath = dir + "/encoder.json";
        mpath = dir + "/vocab.bpe";
    } else {
        fail(strfmt("%s: no GPT-2 tokenizer files: looked for vocab.json + merges.txt (Hugging Face) and encoder.json + "
                    "vocab.bpe (OpenAI)", dir.c_str()));
    }
    const std::string vtext = read_file(vpath, kMaxTextFileBytes, "GPT-2 vocabulary");
    const std::string mtext = read_file(mpath, kMaxTextFileBytes, "GPT-2 merges file");
    const char* vp = vpath.c_str();
    const char* mp = mpath.c_str();

    // The vocabulary: token -> id, ids numbering the tokens 0..n-1.
    VocabReader r;
    const bool ok = nlohmann::json::sax_parse(vtext, &r, nlohmann::json::input_format_t::json, true);
    if (!r.error.empty()) fail(strfmt("%s: GPT-2 vocabulary: %s", vp, r.error.c_str()));
    ICL_ASSERT(ok);
    const int n = (int)r.entries.size();
    if (n == 0) fail(strfmt("%s: GPT-2 vocabulary: no tokens", vp));
    GPT2Tokenizer t;
    t.bytes_.resize(n);
    std::vector<int> from(n, -1);  // id -> its entry, to name both tokens of a repeated id
    std::unordered_map<std::string, int> id_of;
    id_of.reserve(n);
    for (int k = 0; k < n; k++) {
        const std::string& name = r.names[k];
        const int64_t id = r.entries[k].second;
        if (id >= n)
            fail(strfmt("%s: GPT-2 vocabulary: token %s has the id %lld, out of range: the %d tokens must have the ids 0..%d",
                        vp, shown(name).c_str(), (long long)id, n, n - 1));
        if (from[id] >= 0)
            fail(strfmt("%s: GPT-2 vocabulary: the id %lld is given to both %s and %s", vp, (long long)id,
                        shown(r.names[from[id]]).c_str(), shown(name).c_str()));
        auto ins = id_of.emplace(r.entries[k].first, (int)id);
        if (!ins.second) fail(strfmt("%s: GPT-2 vocabulary: token %s is listed twice", vp, shown(name).c_str()));
        from[id] = k;
        t.bytes_[id] = r.entries[k].first;
    }
    const ByteAlphabet& a = alphabet();
    for (int b = 0; b < 256; b++) {
        auto it = id_of.find(std::string(1, (char)b));
        if (it == id_of.end()) {
            std::string sym;  // the missing symbol, UTF-8 encoded, for the message
            const uint32_t cp = a.symbol[b];
            if (cp < 0x80) sym = std::string(1, (char)cp);
            else sym = {(char)(0xC0 | (cp >> 6)), (char)(0x80 | (cp & 0x3F))};
            fail(strfmt("%s: GPT-2 vocabulary: no token for the byte 0x%02x ('%s'); all 256 single bytes must be tokens",
                        vp, b, sym.c_str()));
        }
        t.byte_id_[b] = it->second;
    }
    auto eot = id_of.find("<|endoftext|>");
    t.eot_ = eot == id_of.end() ? -1 : eot->second;

    // The merges, in rank order.
    std::vector<char> made(n, 0);  // made[id]: some merge produces the token
    std::vector<int> line_of;      // rank -> line number, to name the first of two equal merges
    size_t pos = 0;
    for (int line = 1; pos < mtext.size(); line++) {
        size_t eol = mtext.find('\n', pos);
        if (eol == std::string::npos) eol = mtext.size();  // a last line without a newline is a merge like any other
        std::string l = mtext.substr(pos, eol - pos);
        pos = eol + 1;
        if (!l.empty() && l.back() == '\r') l.pop_back();  // CRLF ('\r' is never part of a symbol: it is 'č')
        if (line == 1 && l.compare(0, 8, "#version") == 0) continue;
        const size_t sp = l.find(' ');
        if (l.empty() || sp == 0 || sp == std::string::npos || sp + 1 == l.size() || l.find(' ', sp + 1) != std::string::npos)
            fail(strfmt("%s line %d: GPT-2 merges: %s is not two symbols separated by one space", mp, line, shown(l).c_str()));
        if ((int64_t)t.merges_.size() >= kMaxMerges) fail(strfmt("%s: GPT-2 merges: more than %d merges", mp, kMaxMerges));
        int part[2];
        std::string joined;
        for (int k = 0; k < 2; k++) {
            const std::string sym = k == 0 ? l.substr(0, sp) : l.substr(sp + 1);
            std::string bytes, why;
            if (!unmap_symbol(sym, &bytes, &why)) fail(strfmt("%s line %d: GPT-2 merges: %s", mp, line, why.c_str()));
            auto it = id_of.find(bytes);
            if (it == id_of.end())
                fail(strfmt("%s line %d: GPT-2 merges: %s is not a token of %s (vocabulary and merges do not match)", mp,
                            line, shown(sym).c_str(), vp));
            part[k] = it->second;
            joined += bytes;
        }
        auto res = id_of.find(joined);
        if (res == id_of.end())
            fail(strfmt("%s line %d: GPT-2 merges: the merge %s is not a token of %s (vocabulary and merges do not match)",
                        mp, line, shown(l).c_str(), vp));
        const int rank = (int)t.merges_.size();
        auto ins = t.merges_.emplace(pair_key(part[0], part[1]), Merge{rank, res->second});
        if (!ins.second)
            fail(strfmt("%s line %d: GPT-2 merges: %s repeats the merge of line %d", mp, line, shown(l).c_str(),
                        line_of[ins.first->second.rank]));
        line_of.push_back(line);
        made[res->second] = 1;
    }
    // A multi-byte token that no merge makes can never be produced; only special tokens ("<|endoftext|>") may be
    // such. Anything else means a merges file cut short (at a line boundary) or one from another vocabulary.
    for (int id = 0; id < n; id++) {
        const std::string& s = t.bytes_[id];
        if (s.size() > 1 && !made[id] && !(s.front() == '<' && s.back() == '>'))
            fail(strfmt("%s: GPT-2 merges: no merge makes the token %s (id %d) of %s: the merges file is truncated or "
                        "belongs to another vocabulary", mp, shown(r.names[from[id]]).c_str(), id, vp));
    }
    return t;
}

// ---- encoding and decoding -----------------------------------------------------------------------------------------

std::vector<std::string> GPT2Tokenizer::pretokenize(const std::string& text) {
    std::vector<std::string> out;
    pattern().split(text, [&](size_t b, size_t e) { out.push_back(text.substr(b, e - b)); });
    return out;
}

// BPE inside one pre-token: the symbols form a linked list; a min-heap holds every adjacent pair that is a merge,
// ordered by (rank, position). Popping in that order joins the lowest-ranked pair first and, among equal ranks
// (the same pair), the leftmost first — GPT-2's "merge every occurrence, left to right" — in O(n log n) rather
// than GPT-2's O(n^2) rescans (a pre-token can be a long run of spaces or letters). An entry whose two symbols
// have changed since it was pushed is stale and skipped.
void GPT2Tokenizer::bpe(const char* piece, size_t n, std::vector<int>& out) const {
    if (n == 1) {
        out.push_back(byte_id_[(unsigned char)piece[0]]);
        return;
    }
    struct Cand {
        int rank, pos, a, b;
        bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::vector<int> id(n), next(n), prev(n);
    for (size_t i = 0; i < n; i++) {
        id[i] = byte_id_[(unsigned char)piece[i]];
        next[i] = i + 1 < n ? (int)i + 1 : -1;
        prev[i] = (int)i - 1;
    }
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto consider = [&](int p) {  // the pair starting at symbol p, if p and its successor exist and form a merge
        if (p < 0 || next[p] < 0) return;
        auto it = merges_.find(pair_key(id[p], id[next[p]]));
        if (it != merges_.end()) heap.push(Cand{it->second.rank, p, id[p], id[next[p]]});
    };
    for (size_t i = 0; i + 1 < n; i++) consider((int)i);
    while (!heap.empty()) {
        const Cand c = heap.top();
        heap.pop();
        const int q = next[c.pos];
        if (id[c.pos] != c.a || q < 0 || id[q] != c.b) continue;  // stale (a merged-away symbol has id -1)
        id[c.pos] = merges_.find(pair_key(c.a, c.b))->second.result;
        id[q] = -1;
        next[c.pos] = next[q];
        if (next[q] >= 0) prev[next[q]] = c.pos;
        consider(prev[c.pos]);
        consider(c.pos);
    }
    for (int p = 0; p >= 0; p = next[p]) out.push_back(id[p]);
}

std::vector<int> GPT2Tokenizer::encode(const std::string& text) const {
    std::vector<int> out;
    out.reserve(text.size() / 3 + 1);
    pattern().split(text, [&](size_t b, size_t e) { bpe(text.data() + b, e - b, out); });
    return out;
}

const std::string& GPT2Tokenizer::token_bytes(int id) const {
    if (id < 0 || id >= size()) fail(strfmt("GPT-2 tokenizer: token id %d is outside the vocabulary [0, %d)", id, size()));
    return bytes_[id];
}

std::string GPT2Tokenizer::decode(const int* ids, int n) const {
    std::string s;
    for (int i = 0; i < n; i++) s += token_bytes(ids[i]);
    return s;
}

std::string GPT2Tokenizer::decode(const std::vector<int>& ids) const { return decode(ids.data(), (int)ids.size()); }

}  // namespace icl
