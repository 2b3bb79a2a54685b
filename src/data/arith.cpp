// arith.cpp — see arith.h.
#include "data/arith.h"

#include <cmath>

#include "engine/common.h"

namespace icl {

static const char kVocab[ARITH_VOCAB + 1] = "0123456789*=+-|#";

int arith_token(char c) {
    for (int i = 0; i < ARITH_VOCAB; i++)
        if (kVocab[i] == c) return i;
    fail(strfmt("arithmetic task: character '%c' is not in the vocabulary \"%s\"", c, kVocab));
}

char arith_char(int id) {
    ICL_ASSERT(id >= 0 && id < ARITH_VOCAB);
    return kVocab[id];
}

std::string arith_decode(const int* ids, int n) {
    std::string s;
    for (int i = 0; i < n; i++) s += arith_char(ids[i]);
    return s;
}

std::string arith_example(int64_t A, int64_t Bv, double a, double b, int digits) {
    // C = trunc(a·A + b·B): toward zero, as the paper's worked example (-28.5 -> "-00028") requires.
    double c = std::trunc(a * (double)A + b * (double)Bv);
    int64_t C = (int64_t)c;
    int64_t absC = C < 0 ? -C : C;
    std::string s = strfmt("%0*lld*%0*lld=%c%0*lld|", digits, (long long)A, digits, (long long)Bv, C >= 0 ? '+' : '-',
                           digits + 2, (long long)absC);
    ICL_ASSERT_MSG((int)s.size() == 3 * digits + 6, "answer needs more than d+2 digits: " + s);
    return s;
}

ArithSample arith_sample(const ArithConfig& cfg, Rng& rng) {
    ArithSample s;
    int64_t top = 1;
    for (int i = 0; i < cfg.digits; i++) top *= 10;
    int d = cfg.digits;
    for (int ti = 0; ti < cfg.n_tasks; ti++) {
        double a = rng.uniform(0.0, 10.0);                  // a ~ U[0,10)
        double b;
        do { b = rng.uniform(-10.0, 10.0); } while (b == -10.0);  // b ~ U(-10,10)
        s.a.push_back(a);
        s.b.push_back(b);
        for (int ei = 0; ei < cfg.n_ex; ei++) {
            int64_t A = (int64_t)rng.below((uint64_t)top), Bv = (int64_t)rng.below((uint64_t)top);
            std::string ex = arith_example(A, Bv, a, b, d);
            for (int k = 0; k < (int)ex.size(); k++) {
                ArithRole r;
                if (k < d || (k > d && k < 2 * d + 1)) r = ArithRole::operand;
                else if (k == d) r = ArithRole::op;
                else if (k == 2 * d + 1) r = ArithRole::equals;
                else if (k == 2 * d + 2) r = ArithRole::sign;
                else if (k < (int)ex.size() - 1) r = ArithRole::answer_digit;
                else r = ArithRole::sep;
                s.text += ex[k];
                s.role.push_back(r);
                s.task.push_back(ti);
                s.example.push_back(ei);
            }
        }
        s.text += '#';
        s.role.push_back(ArithRole::task_end);
        s.task.push_back(ti);
        s.example.push_back(-1);
    }
    for (char c : s.text) s.tokens.push_back(arith_token(c));
    ICL_ASSERT((int)s.text.size() == cfg.seq_len());
    return s;
}

Batch arith_batch(const ArithConfig& cfg, int B, Rng& rng, std::vector<ArithSample>* samples) {
    Batch bt;
    bt.B = B;
    bt.T = cfg.seq_len() - 1;
    bt.tokens.resize((size_t)B * bt.T);
    bt.targets.resize((size_t)B * bt.T);
    bt.mask.assign((size_t)B * bt.T, 1.0f);
    if (samples) samples->clear();
    for (int b = 0; b < B; b++) {
        ArithSample s = arith_sample(cfg, rng);
        for (int t = 0; t < bt.T; t++) {
            bt.tokens[(size_t)b * bt.T + t] = s.tokens[t];
            bt.targets[(size_t)b * bt.T + t] = s.tokens[t + 1];
        }
        if (samples) samples->push_back(std::move(s));
    }
    return bt;
}

std::vector<float> arith_answer_mask(const ArithSample& s, int first_example, bool digits_only) {
    int n = (int)s.tokens.size();
    std::vector<float> m(n - 1, 0.0f);
    for (int t = 0; t + 1 < n; t++) {
        ArithRole r = s.role[t + 1];
        bool ans = r == ArithRole::answer_digit || (!digits_only && r == ArithRole::sign);
        if (ans && s.example[t + 1] >= first_example) m[t] = 1.0f;
    }
    return m;
}

}  // namespace icl
