// bias_ab.cpp — matmul_forward's bias added by a pass over the output after gemm_f32 (a, the way before 2026-12-07)
// against gemm_f32_bias, which adds it in the micro-kernel's store (b): the GPT block's four forward products
// (bench model's shapes, B·T = 2048, C = 384), alternating call by call in one process, 64 MB written between calls;
// medians, b/a, whether the outputs' bits agree. Build and run from the repository root, after make:
//   g++ -std=c++17 -fopenmp -ffp-contract=off -O3 -march=native -Isrc tools/gemm_ab/bias_ab.cpp build/libicl.a \
//       -o /tmp/bias_ab -lpcre2-8 && OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive /tmp/bias_ab 21
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include <omp.h>
#include "layers/matmul.h"
using namespace icl;
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main(int argc, char** argv) {
    const int calls = argc > 1 ? atoi(argv[1]) : 21;
    struct S { int N, C, OC, per_step; const char* name; };
    const S shapes[] = {{2048, 384, 1152, 6, "qkv"}, {2048, 384, 384, 6, "attproj"}, {2048, 384, 1536, 6, "fc"}, {2048, 1536, 384, 6, "fcproj"}};
    std::vector<float> flush(16u << 20, 1.0f);
    double ta_sum = 0, tb_sum = 0;
    for (const S& s : shapes) {
        std::vector<float> inp((size_t)s.N * s.C), w((size_t)s.OC * s.C), bias(s.OC), oa((size_t)s.N * s.OC), ob(oa.size());
        for (size_t i = 0; i < inp.size(); i++) inp[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        for (size_t i = 0; i < w.size(); i++) w[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
        for (int i = 0; i < s.OC; i++) bias[i] = 0.01f * i;
        std::vector<double> ta, tb;
        for (int c = 0; c < 2 * calls; c++) {
            for (auto& f : flush) f += 1.0f;
            const bool a = c % 2 == 0;
            double t0 = now();
            if (a) {
                gemm_f32(false, true, s.N, s.OC, s.C, 1.0f, inp.data(), s.C, w.data(), s.C, 0.0f, oa.data(), s.OC);
#pragma omp parallel for schedule(static)
                for (int n = 0; n < s.N; n++) {
                    float* row = oa.data() + (size_t)n * s.OC;
#pragma omp simd
                    for (int o = 0; o < s.OC; o++) row[o] += bias[o];
                }
            } else {
                gemm_f32_bias(false, true, s.N, s.OC, s.C, 1.0f, inp.data(), s.C, w.data(), s.C, 0.0f, ob.data(), s.OC, bias.data());
            }
            (a ? ta : tb).push_back(now() - t0);
        }
        std::sort(ta.begin(), ta.end()); std::sort(tb.begin(), tb.end());
        const double ma = ta[ta.size() / 2] * 1e3, mb = tb[tb.size() / 2] * 1e3;
        printf("%-8s N=%d C=%d OC=%d  a %.3f ms  b %.3f ms  b/a %.3f  bits %s\n", s.name, s.N, s.C, s.OC, ma, mb, mb / ma,
               memcmp(oa.data(), ob.data(), oa.size() * 4) ? "DIFFER" : "same");
        ta_sum += s.per_step * ma; tb_sum += s.per_step * mb;
    }
    printf("a step's 24 block forward products with their bias: a %.1f ms, b %.1f ms, b/a %.3f\n", ta_sum, tb_sum, tb_sum / ta_sum);
}
