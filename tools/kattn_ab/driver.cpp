// The driver of tools/kattn_ab.sh: two versions of kernel attention's parallel (chunked) form
// (kernel_attention_forward / kernel_attention_backward with the tiles, φ, RoPE and SIMD helpers they call), compiled
// into the namespaces ka_a and ka_b by the script, timed side by side in one process: each round runs a's forward and
// backward, then b's, on the same inputs (B, T, C, NH from the command line, with both bias terms; FLUSH MiB written
// between calls, 0 = none, so that the operands come from memory or stay in cache). Prints the medians of each, b/a,
// the causal GFLOP/s of `iclca bench` (its flop count per head and token), and whether a and b give the same bits
// (out, the four saved feature arrays, den, dqkv, dbkv, dbd).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/rng.h"
#include "layers/kernel_attention.h"
#include "kattn_a.h"
#include "kattn_b.h"

using namespace icl;

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
    if (argc != 7) {
        std::fprintf(stderr, "usage: driver B T C NH ROUNDS FLUSH_MIB\n");
        return 2;
    }
    const int B = std::atoi(argv[1]), T = std::atoi(argv[2]), C = std::atoi(argv[3]), NH = std::atoi(argv[4]), rounds = std::atoi(argv[5]),
              flush_mib = std::atoi(argv[6]);
    if (B < 1 || T < 1 || NH < 1 || C < NH || C % NH || (C / NH) % 2 || C / NH > 512 || rounds < 1 || flush_mib < 0) {
        std::fprintf(stderr, "driver: B, T, ROUNDS >= 1, NH dividing C into even head sizes of at most 512, FLUSH_MIB >= 0\n");
        return 2;
    }
    const int hs = C / NH, m = hs;
    const double eps = 1e-6;
    Rng rng(7);
    std::vector<float> qkv((size_t)B * T * 3 * C), dout((size_t)B * T * C), bkv((size_t)NH * m * hs), bd((size_t)NH * m),
        flush((size_t)flush_mib << 18);
    fill_uniform(qkv.data(), qkv.size(), rng, -2.0, 2.0);
    fill_uniform(dout.data(), dout.size(), rng, -1.0, 1.0);
    fill_uniform(bkv.data(), bkv.size(), rng, -0.5, 0.5);
    fill_uniform(bd.data(), bd.size(), rng, 0.0, 1.0);
    // each version's own buffers (its scratch size from its own function)
    struct Bufs {
        std::vector<float> out, f[4], den, dqkv, dbkv, dbd, scratch;
    } va, vb;
    for (Bufs* v : {&va, &vb}) {
        v->out.resize(dout.size());
        for (auto& f : v->f) f.resize((size_t)B * NH * T * m);
        v->den.resize((size_t)B * NH * T);
        v->dqkv.assign(qkv.size(), 0.0f);
        v->dbkv.assign(bkv.size(), 0.0f);
        v->dbd.assign(bd.size(), 0.0f);
    }
    va.scratch.resize(ka_a::kernel_attention_scratch_size(B, T, C, NH));
    vb.scratch.resize(ka_b::kernel_attention_scratch_size(B, T, C, NH));
    auto do_flush = [&] { for (size_t i = 0; i < flush.size(); i += 16) flush[i] += 1.0f; };
    std::vector<double> fa, ba, fb, bb;
    float sink = 0;
    for (int r = 0; r < rounds; r++)
        for (int which = 0; which < 2; which++) {
            Bufs& v = which ? vb : va;
            do_flush();
            std::fill(v.dqkv.begin(), v.dqkv.end(), 0.0f);
            std::fill(v.dbkv.begin(), v.dbkv.end(), 0.0f);
            std::fill(v.dbd.begin(), v.dbd.end(), 0.0f);
            double t0 = now();
            if (which)
                ka_b::kernel_attention_forward(v.out.data(), v.f[0].data(), v.f[1].data(), v.f[2].data(), v.f[3].data(), v.den.data(),
                                               v.scratch.data(), qkv.data(), nullptr, bkv.data(), bd.data(), B, T, C, NH, eps);
            else
                ka_a::kernel_attention_forward(v.out.data(), v.f[0].data(), v.f[1].data(), v.f[2].data(), v.f[3].data(), v.den.data(),
                                               v.scratch.data(), qkv.data(), nullptr, bkv.data(), bd.data(), B, T, C, NH, eps);
            double t1 = now();
            do_flush();
            double t2 = now();
            if (which)
                ka_b::kernel_attention_backward(v.dqkv.data(), v.dbkv.data(), v.dbd.data(), v.scratch.data(), dout.data(), v.out.data(),
                                                v.f[0].data(), v.f[1].data(), v.f[2].data(), v.f[3].data(), v.den.data(), qkv.data(),
                                                nullptr, bkv.data(), bd.data(), B, T, C, NH);
            else
                ka_a::kernel_attention_backward(v.dqkv.data(), v.dbkv.data(), v.dbd.data(), v.scratch.data(), dout.data(), v.out.data(),
                                                v.f[0].data(), v.f[1].data(), v.f[2].data(), v.f[3].data(), v.den.data(), qkv.data(),
                                                nullptr, bkv.data(), bd.data(), B, T, C, NH);
            double t3 = now();
            (which ? fb : fa).push_back(t1 - t0);
            (which ? bb : ba).push_back(t3 - t2);
            sink += v.dqkv[0];
        }
    auto same = [](const std::vector<float>& x, const std::vector<float>& y) { return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0; };
    bool bits = same(va.out, vb.out) && same(va.den, vb.den) && same(va.dqkv, vb.dqkv) && same(va.dbkv, vb.dbkv) && same(va.dbd, vb.dbd);
    for (int i = 0; i < 4; i++) bits = bits && same(va.f[i], vb.f[i]);
    // iclca bench's causal flop count per head and token (models/iclca/iclca_experiments.cpp, m = hs): forward
    // 2·(CH+1)·hs + 4·hs², backward 6·(CH+1)·hs + 10·hs²
    const double CH = ka_a::KA_CHUNK, tok = (double)B * NH * T;
    const double ffl = tok * (2.0 * (CH + 1) * hs + 4.0 * hs * hs), bfl = tok * (6.0 * (CH + 1) * hs + 10.0 * hs * hs);
    std::printf("B=%d T=%d C=%d NH=%d (heads of %d), %d rounds: forward a %.3f ms, b %.3f ms, b/a %.3f (b %.1f GFLOP/s) | backward a %.3f ms, "
                "b %.3f ms, b/a %.3f (b %.1f GFLOP/s) | bits %s%s\n",
                B, T, C, NH, hs, rounds, median(fa) * 1e3, median(fb) * 1e3, median(fb) / median(fa), ffl / median(fb) * 1e-9,
                median(ba) * 1e3, median(bb) * 1e3, median(bb) / median(ba), bfl / median(bb) * 1e-9, bits ? "the same" : "DIFFER",
                sink == 12345.0f ? " " : "");
    return bits ? 0 : 1;
}
