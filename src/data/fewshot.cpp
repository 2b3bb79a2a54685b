// fewshot.cpp — see fewshot.h.
#include "data/fewshot.h"

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

}  // namespace icl
