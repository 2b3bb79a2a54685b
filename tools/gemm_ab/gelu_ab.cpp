// gelu_ab.cpp — the GPT block's MLP around GELU as separate ops (a, the way before 2026-12-07) against the fused ops
// that run GELU in the GEMM's store (b), at bench model's shapes (N = B·T = 2048, C = 384, 4·C = 1536):
//   forward:  a = matmul_forward (fc, with its bias), then gelu_forward   b = matmul_gelu_forward
//   backward: a = matmul_backward (fcproj) sets d(post), then gelu_backward sets d(pre)   b = matmul_gelu_backward
// (the backward's dW and db, the same in both, are part of both timings). Alternating call by call in one process,
// 64 MB written before each call; medians, b/a, whether every output agrees to the bit.
// Build and run from the repository root, after make (one command line):
//   g++ -std=c++17 -fopenmp -ffp-contract=off -O3 -march=native -Isrc tools/gemm_ab/gelu_ab.cpp build/libicl.a
//       -o /tmp/gelu_ab -lpcre2-8 && OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive /tmp/gelu_ab 21
// Exit 1 if any output's bits differ.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "layers/matmul.h"
using namespace icl;
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
static bool same(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
int main(int argc, char** argv) {
    const int N = 2048, C = 384, H = 4 * C, reps = argc > 1 ? std::max(1, atoi(argv[1])) : 21;
    std::vector<float> flush(16u << 20, 1.0f);
    auto fill = [](std::vector<float>& v, unsigned seed, float lo, float hi) {
        for (size_t i = 0; i < v.size(); i++) v[i] = lo + (hi - lo) * (float)(((i + 1) * 2654435761u * seed) % 10007) / 10007.0f;
    };
    // forward: pre (N,H) = x (N,C) · W1 (H,C)ᵀ + b1, post = GELU(pre)
    std::vector<float> x((size_t)N * C), W1((size_t)H * C), b1(H);
    fill(x, 3, -1.0f, 1.0f); fill(W1, 5, -0.2f, 0.2f); fill(b1, 7, -0.5f, 0.5f);
    std::vector<float> pre_a((size_t)N * H), post_a(pre_a.size()), pre_b(pre_a.size()), post_b(pre_a.size());
    // backward: out (N,C) = post (N,H) · W2 (C,H)ᵀ + b2
    std::vector<float> dout((size_t)N * C), W2((size_t)C * H);
    fill(dout, 11, -0.5f, 0.5f); fill(W2, 13, -0.2f, 0.2f);
    std::vector<float> dpost((size_t)N * H), dpre_a(dpost.size()), dpre_b(dpost.size()), dW_a((size_t)C * H, 0.0f), dW_b = dW_a,
        db_a(C, 0.0f), db_b = db_a;
    std::vector<double> fa, fb, ba, bb;
    auto timed = [&](std::vector<double>& t, auto f) {
        for (float& v : flush) v += 1.0f;  // the operands out of cache, as in a step
        const double t0 = now();
        f();
        t.push_back(now() - t0);
    };
    for (int r = 0; r < reps; r++) {
        timed(fa, [&] {
            matmul_forward<float>(pre_a.data(), x.data(), W1.data(), b1.data(), N, C, H);
            gelu_forward<float>(post_a.data(), pre_a.data(), pre_a.size());
        });
        timed(fb, [&] { matmul_gelu_forward<float>(pre_b.data(), post_b.data(), x.data(), W1.data(), b1.data(), N, C, H); });
        timed(ba, [&] {
            matmul_backward<float>(dpost.data(), dW_a.data(), db_a.data(), dout.data(), post_a.data(), W2.data(), N, H, C, GradWrite::set);
            gelu_backward<float>(dpre_a.data(), pre_a.data(), dpost.data(), dpost.size(), GradWrite::set);
        });
        timed(bb, [&] {
            matmul_gelu_backward<float>(dpre_b.data(), dpost.data(), dW_b.data(), db_b.data(), dout.data(), pre_b.data(), post_b.data(),
                                        W2.data(), N, H, C);
        });
    }
    const bool fwd_same = same(pre_a, pre_b) && same(post_a, post_b), bwd_same = same(dpre_a, dpre_b) && same(dW_a, dW_b) && same(db_a, db_b);
    printf("%d calls each, medians (ms)      a (two ops)   b (fused)     b/a   bits\n", reps);
    printf("forward  fc + GELU            %10.3f  %10.3f  %6.3f   %s\n", median(fa) * 1e3, median(fb) * 1e3, median(fb) / median(fa),
           fwd_same ? "same" : "DIFFER");
    printf("backward fcproj + GELU        %10.3f  %10.3f  %6.3f   %s\n", median(ba) * 1e3, median(bb) * 1e3, median(bb) / median(ba),
           bwd_same ? "same" : "DIFFER");
    printf("both, x 6 layers: a %.2f ms, b %.2f ms a step\n", 6e3 * (median(fa) + median(ba)), 6e3 * (median(fb) + median(bb)));
    return fwd_same && bwd_same ? 0 : 1;
}
