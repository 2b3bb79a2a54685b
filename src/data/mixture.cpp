// mixture.cpp — see mixture.h.
#include "engine/fileio.h"
#include "data/mixture.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/common.h"

namespace icl {

namespace fs = std::filesystem;

std::string Corpus::decode(const int* ids, int n) const {
    if (bpe) return bpe->decode(ids, n);
    std::string s;
    for (int i = 0; i < n; i++) s += (char)ids[i];
    return s;
}

namespace {

// The file's documents: text between lines holding only '%'.
std::vector<std::string> read_pieces(const std::string& path) {
    std::istringstream f(read_file(path, kMaxTextFileBytes, "--data corpus file"));  // no FIFO, bounded
    std::vector<std::string> out;
    std::string line, cur;
    auto flush = [&]() {
        while (!cur.empty() && (cur.back() == '\n' || cur.back() == ' ')) cur.pop_back();
        if (!cur.empty()) out.push_back(cur);
        cur.clear();
    };
    while (std::getline(f, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line == "%") { flush(); continue; }
        cur += line + "\n";
    }
    flush();
    return out;
}

}  // namespace

Corpus corpus_load(const std::string& data, const BPE* bpe, double val_fraction, int min_tokens) {
    std::vector<std::string> files;
    std::error_code ec;
    if (fs::is_directory(data, ec)) {
        // a category is a <name>.txt file; anything else in the folder (a tokenizer, notes, a sub-folder) is not one
        std::string other;
        for (auto& e : fs::directory_iterator(data, ec)) {
            const std::string name = e.path().filename().string();
            if (name[0] == '.') continue;
            if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path().string());
            else if (other.empty()) other = name;
        }
        std::sort(files.begin(), files.end());
        if (files.empty())
            fail("--data: the directory '" + data + "' holds no <category>.txt files" + (other.empty() ? "" : " (it holds '" + other + "', …)"));
    } else {
        std::stringstream ss(data);
        std::string f;
        while (std::getline(ss, f, ','))
            if (!f.empty()) files.push_back(f);
        if (files.empty()) fail_usage("--data: name a directory of <category>.txt files or a comma-separated list of files");
    }
    Corpus cp;
    cp.bpe = bpe;
    cp.V = bpe ? bpe->size() : 256;
    for (const std::string& path : files) {
        std::vector<std::string> pieces = read_pieces(path);
        if (pieces.empty()) fail("--data: '" + path + "' holds no text");
        std::string name = fs::path(path).stem().string();
        std::vector<int> tr, va;
        std::vector<size_t> trs, vas;
        auto tok = [&](const std::string& s) {
            if (bpe) return bpe->encode(s);
            std::vector<int> v;
            for (unsigned char c : s) v.push_back(c);
            return v;
        };
        if (pieces.size() == 1) {  // one long text: the last part is validation; documents start anywhere
            std::vector<int> all = tok(pieces[0]);
            const size_t nv = std::max<size_t>(1, (size_t)(all.size() * val_fraction));
            tr.assign(all.begin(), all.end() - nv);
            va.assign(all.end() - nv, all.end());
        } else {
            const size_t nvp = std::max<size_t>(1, (size_t)(pieces.size() * val_fraction + 0.5));
            for (size_t i = 0; i < pieces.size(); i++) {
                std::vector<int>& s = i + nvp < pieces.size() ? tr : va;
                std::vector<size_t>& st = i + nvp < pieces.size() ? trs : vas;
                if (!s.empty()) s.push_back('\n');  // pieces joined by a newline
                st.push_back(s.size());
                std::vector<int> t = tok(pieces[i]);
                s.insert(s.end(), t.begin(), t.end());
            }
        }
        if ((int)tr.size() < min_tokens || (int)va.size() < min_tokens)
            fail(strfmt("--data: category '%s' (%s) has %zu training and %zu validation tokens; need at least %d each", name.c_str(),
                        path.c_str(), tr.size(), va.size(), min_tokens));
        cp.names.push_back(name);
        cp.train.push_back(std::move(tr));
        cp.val.push_back(std::move(va));
        cp.train_starts.push_back(std::move(trs));
        cp.val_starts.push_back(std::move(vas));
    }
    return cp;
}

std::vector<int> corpus_document(const Corpus& cp, bool val, int c, int len, Rng& rng) {
    const std::vector<int>& s = val ? cp.val[c] : cp.train[c];
    const std::vector<size_t>& st = val ? cp.val_starts[c] : cp.train_starts[c];
    const size_t start = st.empty() ? (size_t)rng.below(s.size()) : st[(size_t)rng.below(st.size())];
    std::vector<int> d(len);
    for (int i = 0; i < len; i++) d[i] = s[(start + i) % s.size()];  // wraps around a short stream
    return d;
}

std::vector<int> mixture_sequence(const Corpus& cp, bool val, const std::vector<int>& cats, const std::vector<int>& cuts, int T, Rng& rng) {
    if (cats.empty() || cuts.size() + 1 != cats.size()) fail("mixture_sequence: need one cut fewer than categories");
    std::vector<int> seq;
    for (size_t k = 0; k < cats.size(); k++) {
        const int end = k < cuts.size() ? cuts[k] : T + 1;
        if (end <= (int)seq.size() || end > T + 1) fail("mixture_sequence: cuts must increase inside (0, T]");
        std::vector<int> d = corpus_document(cp, val, cats[k], end - (int)seq.size(), rng);
        seq.insert(seq.end(), d.begin(), d.end());
    }
    return seq;
}


Batch mixture_batch(const Corpus& cp, bool val, const MixConfig& mc, int B, Rng& rng, std::vector<MixSample>* info) {
    if (mc.l_start < 1 || mc.l_finish < mc.l_start || mc.l_finish >= mc.T)
        fail_usage(strfmt("--l-start/--l-finish: need 1 <= l_start <= l_finish < T=%d, got %d and %d", mc.T, mc.l_start, mc.l_finish));
    Batch bt = next_token_batch(B, mc.T);
    if (info) info->clear();
    for (int b = 0; b < B; b++) {
        MixSample ms;
        ms.cats.push_back((int)rng.below(cp.categories()));
        ms.starts.push_back(0);
        std::vector<int> cuts;
        if (rng.uniform() < mc.two_texts) {
            cuts.push_back(mc.l_start + (int)rng.below((uint64_t)(mc.l_finish - mc.l_start + 1)));
            ms.cats.push_back((int)rng.below(cp.categories()));
            ms.starts.push_back(cuts[0]);
        }
        set_next_token_row(bt, b, mixture_sequence(cp, val, ms.cats, cuts, mc.T, rng).data());
        if (info) info->push_back(ms);
    }
    return bt;
}

Batch document_batch(const Corpus& cp, bool val, const std::vector<int>& cats, int T, Rng& rng) {
    Batch bt = next_token_batch((int)cats.size(), T);
    for (size_t b = 0; b < cats.size(); b++) set_next_token_row(bt, (int)b, corpus_document(cp, val, cats[b], T + 1, rng).data());
    return bt;
}

}  // namespace icl
