// driver.cpp — two builds of src/layers/gemm.cpp in one process, timed call by call (tools/gemm_ab.sh builds it).
//
// gemm_a::gemm_f32 and gemm_b::gemm_f32 are the same file at two commits, each compiled into its own namespace.
// For every product of `bench model`'s GPT (L=6, C=384, V=256, B·T = 2048 rows: forward, backward-dx, backward-dW)
// and 1024³, the two run alternately (a, b, then b, a, …), CALLS calls each; before every call all threads write a
// FLUSH_MB buffer once, so that the operands come from memory as they do in a training step. Medians are compared.
// Separate processes on a shared 2-core machine move by more than the few percent a GEMM change is worth; alternating
// in one process puts both versions under the same noise. Also checks that both give the same bits.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace gemm_a {
void gemm_f32(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int);
}
namespace gemm_b {
void gemm_f32(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int);
}

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Case {
    const char* name;
    bool ta, tb;
    int M, N, K;
    float beta;
    int per_step;  // how many times one `bench model` step runs this product
};
}  // namespace

int main(int argc, char** argv) {
    const int calls = argc > 1 ? std::atoi(argv[1]) : 31;
    const int flush_mb = argc > 2 ? std::atoi(argv[2]) : 64;
    if (calls < 1 || flush_mb < 0) {
        std::fprintf(stderr, "usage: driver [CALLS >= 1] [FLUSH_MB >= 0]\n");
        return 2;
    }
    const int L = 6, R = 2048;  // layers, rows B·T
    std::vector<Case> cases = {{"1024^3 NN", false, false, 1024, 1024, 1024, 0.0f, 0}};
    const int shapes[][2] = {{384, 1152}, {384, 384}, {384, 1536}, {1536, 384}, {384, 256}};  // (C, OC)
    static char names[15][48];
    int n = 0;
    for (auto& s : shapes) {
        const int C = s[0], OC = s[1], per = OC == 256 ? 1 : L;  // the head (OC = V = 256) once, the others per layer
        std::snprintf(names[n], 48, "fwd    C=%d OC=%d", C, OC);
        cases.push_back({names[n++], false, true, R, OC, C, 0.0f, per});   // out = inp·Wᵀ
        std::snprintf(names[n], 48, "bwd-dx C=%d OC=%d", C, OC);
        cases.push_back({names[n++], false, false, R, C, OC, 1.0f, per});  // dinp += dout·W
        std::snprintf(names[n], 48, "bwd-dW C=%d OC=%d", C, OC);
        cases.push_back({names[n++], true, false, OC, C, R, 1.0f, per});   // dW += doutᵀ·inp
    }
    std::vector<float> flush((size_t)flush_mb << 18);
    std::printf("%d threads, %d calls of each version per case, %d MB written between calls; ms are medians\n",
                omp_get_max_threads(), calls, flush_mb);
    std::printf("%-20s %3s %5s %5s %5s %9s %9s %7s %s\n", "case", "op", "M", "N", "K", "a ms", "b ms", "b/a", "bits");
    double sum_a = 0, sum_b = 0;
    bool all_equal = true;
    for (const Case& c : cases) {
        const int lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
        std::vector<float> A((size_t)c.M * c.K), B((size_t)c.K * c.N), Ca((size_t)c.M * c.N), Cb;
        unsigned s = 12345;
        auto rnd = [&] { s = s * 1664525u + 1013904223u; return (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f; };
        for (float& x : A) x = rnd();
        for (float& x : B) x = rnd();
        for (float& x : Ca) x = rnd();
        Cb = Ca;
        std::vector<double> ta, tb;
        for (int i = 0; i < 2 * calls; i++) {
            const bool a_turn = (i % 2 == 0) == (i / 2 % 2 == 0);  // a b, b a, a b, …
#pragma omp parallel for schedule(static)
            for (size_t j = 0; j < flush.size(); j++) flush[j] += 1.0f;
            const double t0 = now();
            if (a_turn) gemm_a::gemm_f32(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, c.beta, Ca.data(), c.N);
            else gemm_b::gemm_f32(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, c.beta, Cb.data(), c.N);
            (a_turn ? ta : tb).push_back(now() - t0);
        }
        std::sort(ta.begin(), ta.end());
        std::sort(tb.begin(), tb.end());
        const double ma = ta[ta.size() / 2], mb = tb[tb.size() / 2];
        const bool equal = std::memcmp(Ca.data(), Cb.data(), Ca.size() * sizeof(float)) == 0;
        all_equal = all_equal && equal;
        sum_a += c.per_step * ma;
        sum_b += c.per_step * mb;
        std::printf("%-20s %2s%s %5d %5d %5d %9.3f %9.3f %7.3f %s\n", c.name, c.ta ? "T" : "N", c.tb ? "T" : "N", c.M, c.N,
                    c.K, ma * 1e3, mb * 1e3, mb / ma, equal ? "same" : "DIFFER");
    }
    std::printf("one bench model step's %d linear-layer products (per-step counts x medians; attention's own small products "
                "not included): a %.1f ms, b %.1f ms, b/a %.3f\n",
                3 * (4 * L + 1), sum_a * 1e3, sum_b * 1e3, sum_b / sum_a);
    return all_equal ? 0 : 1;
}
