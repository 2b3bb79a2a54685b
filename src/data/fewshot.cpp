// fewshot.cpp — see fewshot.h.
#include "data/fewshot.h"

#include "engine/common.h"
#include "engine/fileio.h"

namespace icl {

FewshotExample fewshot_example(int cls, int label, Rng& rng, double p_key) {
    FewshotExample e;
    e.cls = cls;
    const int n = 4 + (int)rng.below(4);
    int keys = 0;
    for (int i = 0; i < n; i++) {
        // at least one keyword, so that every review carries its class
        if (rng.uniform() < p_key || (i == n - 1 && keys == 0)) {
            e.tokens.push_back((cls ? FS_KEY1 : FS_KEY0) + (int)rng.below(FS_KEY1 - FS_KEY0));
            keys++;
        } else {
            e.tokens.push_back(FS_NEUTRAL + (int)rng.below(FEWSHOT_VOCAB - FS_NEUTRAL));
        }
    }
    e.tokens.push_back(FS_MARK);
    e.tokens.push_back(label);
    return e;
}

Batch fewshot_batch(int B, int T, Rng& rng) {
    Batch bt = next_token_batch(B, T);
    for (int b = 0; b < B; b++) {
        std::vector<int> seq;
        while ((int)seq.size() < T + 1) {
            const int cls = (int)rng.below(2);
            FewshotExample e = fewshot_example(cls, FS_LABEL0 + cls, rng);
            seq.insert(seq.end(), e.tokens.begin(), e.tokens.end());
            seq.push_back(FS_SEP);
        }
        set_next_token_row(bt, b, seq.data());
    }
    return bt;
}

FewshotTemplate fewshot_template(const std::string& name, const std::vector<std::string>& label_words) {
    FewshotTemplate t;
    t.name = name;
    if (name == "sst2") {
        t.before = "Review: ";
        t.after = "\nSentiment:";
        t.labels = {" Negative", " Positive"};
    } else if (name == "agnews") {
        t.before = "Article: ";
        t.after = "\nWhat is the article about? Answer:";
        t.labels = {" World", " Sports", " Business", " Technology"};
    } else if (name == "subj") {
        t.after = " This is";
        t.labels = {" objective", " subjective"};
    } else {
        fail_usage("--template: '" + name + "' is not one of sst2, agnews, subj");
    }
    if (!label_words.empty()) {
        if (label_words.size() < 2) fail_usage("--label-words: give at least two words, one per class");
        t.labels.clear();
        for (const std::string& w : label_words) {
            if (w.empty()) fail_usage("--label-words: an empty word");
            t.labels.push_back(" " + w);
        }
    }
    return t;
}

std::vector<LabeledText> read_labeled_text(const std::string& path, int n_classes) {
    const std::string s = read_file(path, kMaxTextFileBytes, "labelled dataset");
    std::vector<LabeledText> out;
    size_t at = 0;
    for (int line = 1; at < s.size(); line++) {
        size_t end = s.find('\n', at);
        if (end == std::string::npos) end = s.size();
        std::string l = s.substr(at, end - at);
        at = end + 1;
        if (!l.empty() && l.back() == '\r') l.pop_back();
        if (l.empty()) continue;
        const std::string where = strfmt("%s:%d: ", path.c_str(), line);
        const size_t tab = l.find('\t');
        if (tab == std::string::npos) fail(where + "expected LABEL<TAB>TEXT (no tab on the line)");
        const std::string lab = l.substr(0, tab);
        int cls = -1;
        if (!lab.empty() && lab.size() <= 3 && lab.find_first_not_of("0123456789") == std::string::npos) cls = std::stoi(lab);
        if (cls < 0 || cls >= n_classes)
            fail(where + strfmt("label %s is not a class index 0..%d (the template has %d label words)", quote_text(lab).c_str(), n_classes - 1, n_classes));
        LabeledText e;
        e.cls = cls;
        e.text = l.substr(tab + 1);
        e.line = line;
        if (e.text.empty()) fail(where + "empty text");
        out.push_back(std::move(e));
    }
    if (out.empty()) fail(path + ": no LABEL<TAB>TEXT example in the file");
    return out;
}

}  // namespace icl
