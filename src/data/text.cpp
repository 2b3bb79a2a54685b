// text.cpp — see text.h.
#include "data/text.h"

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>

#include "engine/common.h"
#include "engine/fileio.h"

namespace icl {

TextData text_load(const std::string& path, double val_fraction, int T) {
    const std::string bytes = read_file(path, kMaxTextFileBytes, "--data text file");
    std::vector<int> all(bytes.begin(), bytes.end());
    for (int& b : all) b &= 0xff;  // bytes as token ids 0..255
    return text_split(path, std::move(all), val_fraction, T);
}

TextData text_split(const std::string& path, std::vector<int> all, double val_fraction, int T, const char* unit) {
    size_t nval = (size_t)(all.size() * val_fraction);
    if (all.size() - nval < (size_t)T + 1 || nval < (size_t)T + 1)
        fail(strfmt("--data: '%s' has %zu %s; need at least %zu for train and validation windows of %d+1 %s",
                    path.c_str(), all.size(), unit, (size_t)((T + 1) / std::min(val_fraction, 1 - val_fraction)) + 1, T, unit));
    TextData d;
    d.path = path;
    d.train.assign(all.begin(), all.end() - nval);
    d.val.assign(all.end() - nval, all.end());
    return d;
}

Batch text_batch(const std::vector<int>& split, int B, int T, Rng& rng) {
    ICL_ASSERT(split.size() >= (size_t)T + 1);
    Batch bt = next_token_batch(B, T);
    for (int b = 0; b < B; b++) set_next_token_row(bt, b, split.data() + (size_t)rng.below(split.size() - T));
    return bt;
}

std::string bytes_to_text(const int* ids, int n) {
    std::string s;
    for (int i = 0; i < n; i++) {
        int c = ids[i];
        s += (c == '\n' || c == '\t' || (c >= 32 && c < 127) || c >= 128) ? (char)c : '?';
    }
    return s;
}

}  // namespace icl
