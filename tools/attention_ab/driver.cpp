// The driver of tools/attention_ab.sh: two versions of the O(T) softmax attention (attention_forward_lse /
// attention_backward_lse with the vmath exponentials they call), compiled into the namespaces att_a and att_b by the
// script, timed side by side in one process: each round runs a's forward and backward, then b's (b's first in every
// other round), on the same inputs (B, T, C, NH from the command line; 64 MB written between calls so that the operands
// come from memory as in a training step). Prints the medians of each, b/a, the median of each round's own b/a
// ("paired"), and whether a and b give the same bits (out, lse, dqkv).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/rng.h"
#include "layers/attention.h"
#include "attention_a.h"
#include "attention_b.h"

using namespace icl;

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: driver B T C NH ROUNDS\n");
        return 2;
    }
    const int B = std::atoi(argv[1]), T = std::atoi(argv[2]), C = std::atoi(argv[3]), NH = std::atoi(argv[4]), rounds = std::atoi(argv[5]);
    if (B < 1 || T < 1 || NH < 1 || C < NH || C % NH || rounds < 1) {
        std::fprintf(stderr, "driver: B, T, ROUNDS >= 1 and NH dividing C\n");
        return 2;
    }
    Rng rng(7);
    std::vector<float> qkv((size_t)B * T * 3 * C), dout((size_t)B * T * C), flush((size_t)16 << 20);
    fill_uniform(qkv.data(), qkv.size(), rng, -2.0, 2.0);
    fill_uniform(dout.data(), dout.size(), rng, -1.0, 1.0);
    // each version's own buffers (its scratch size from its own function)
    struct Bufs {
        std::vector<float> out, lse, dqkv, scratch;
    } va, vb;
    for (Bufs* v : {&va, &vb}) {
        v->out.resize(dout.size());
        v->lse.resize((size_t)B * NH * T);
        v->dqkv.assign(qkv.size(), 0.0f);
    }
    va.scratch.resize(att_a::attention_lse_scratch_size(B, T, NH));
    vb.scratch.resize(att_b::attention_lse_scratch_size(B, T, NH));
    std::vector<double> fa, ba, fb, bb;
    float sink = 0;
    for (int r = 0; r < rounds; r++)
        for (int w = 0; w < 2; w++) {
            const int which = w ^ (r & 1);  // a then b in even rounds, b then a in odd ones: the second of a pair ran
                                             // 2-6% slower than the first with the same code (a Zen 3, 2026-12-07)
            Bufs& v = which ? vb : va;
            for (size_t i = 0; i < flush.size(); i += 16) flush[i] += 1.0f;
            std::fill(v.dqkv.begin(), v.dqkv.end(), 0.0f);
            double t0 = now();
            if (which) att_b::attention_forward_lse(v.out.data(), v.lse.data(), v.scratch.data(), qkv.data(), B, T, C, NH);
            else att_a::attention_forward_lse(v.out.data(), v.lse.data(), v.scratch.data(), qkv.data(), B, T, C, NH);
            double t1 = now();
            for (size_t i = 0; i < flush.size(); i += 16) flush[i] += 1.0f;
            double t2 = now();
            if (which)
                att_b::attention_backward_lse(v.dqkv.data(), v.scratch.data(), dout.data(), v.out.data(), qkv.data(), v.lse.data(), B, T, C, NH);
            else
                att_a::attention_backward_lse(v.dqkv.data(), v.scratch.data(), dout.data(), v.out.data(), qkv.data(), v.lse.data(), B, T, C, NH);
            double t3 = now();
            (which ? fb : fa).push_back(t1 - t0);
            (which ? bb : ba).push_back(t3 - t2);
            sink += v.dqkv[0];
        }
    auto same = [](const std::vector<float>& x, const std::vector<float>& y) { return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0; };
    const bool bits = same(va.out, vb.out) && same(va.lse, vb.lse) && same(va.dqkv, vb.dqkv);
    // b/a: the ratio of the medians; paired: the median of each round's own b/a (a and b ran back to back, so a
    // drift of the host's speed over the run cancels in it)
    auto paired = [](const std::vector<double>& x, const std::vector<double>& y) {
        std::vector<double> r(x.size());
        for (size_t i = 0; i < x.size(); i++) r[i] = y[i] / x[i];
        return median(r);
    };
    std::printf("B=%d T=%d C=%d NH=%d, %d rounds: forward a %.3f ms, b %.3f ms, b/a %.3f (paired %.3f) | backward a %.3f ms, b %.3f ms, "
                "b/a %.3f (paired %.3f) | bits %s%s\n",
                B, T, C, NH, rounds, median(fa) * 1e3, median(fb) * 1e3, median(fb) / median(fa), paired(fa, fb), median(ba) * 1e3,
                median(bb) * 1e3, median(bb) / median(ba), paired(ba, bb), bits ? "the same" : "DIFFER", sink == 12345.0f ? " " : "");
    return bits ? 0 : 1;
}
