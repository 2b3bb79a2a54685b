// simd.h — the project's one include of <immintrin.h> (include it only where __AVX2__ is defined);
// transpose8x8, the 8×8 float transpose that the GEMM's packing and kernel attention's chunks share (and its
// register form transpose8x8_regs, for kernel attention's per-row dot products), and the
// 4- and 2-row versions the GEMM's A packing also uses; and F8 / F16, one float vector register (ymm / zmm)
// behind one set of names, so that a kernel written once as a template runs 8 or 16 lanes wide with the same
// operations lane for lane (the GEMM's micro-kernel, GELU, kernel attention's tiles and backward per-row step).
// GCC 12 warns, falsely, that the AVX-512 intrinsics' own "undefined" pass-through operand is uninitialized
// (-Wuninitialized / -Wmaybe-uninitialized, reported at lines of avx512fintrin.h once they are inlined into our
// code). The warnings are switched off for the intrinsic headers only: the pragma state applies by location.
#pragma once
#include <cstddef>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#ifdef __AVX2__
namespace icl {
// col[j] = column j of src (8,8) (rows at stride lds): the 8×8 transpose, left in eight ymm registers.
inline void transpose8x8_regs(__m256 (&col)[8], const float* src, size_t lds) {
    const __m256 r0 = _mm256_loadu_ps(src + 0 * lds), r1 = _mm256_loadu_ps(src + 1 * lds);
    const __m256 r2 = _mm256_loadu_ps(src + 2 * lds), r3 = _mm256_loadu_ps(src + 3 * lds);
    const __m256 r4 = _mm256_loadu_ps(src + 4 * lds), r5 = _mm256_loadu_ps(src + 5 * lds);
    const __m256 r6 = _mm256_loadu_ps(src + 6 * lds), r7 = _mm256_loadu_ps(src + 7 * lds);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);  // interleave row pairs
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);  // 4-row columns
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    col[0] = _mm256_permute2f128_ps(u0, u4, 0x20);  // join the two 128-bit halves
    col[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    col[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    col[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    col[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    col[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    col[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    col[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}
// dst (8,8) = src (8,8)ᵀ through eight ymm registers: src rows at stride lds, dst rows at stride ldd (floats).
// Used by the GEMM's packing of a transposed B and by kernel attention's chunk transposes.
inline void transpose8x8(float* dst, size_t ldd, const float* src, size_t lds) {
    __m256 col[8];
    transpose8x8_regs(col, src, lds);
    for (int j = 0; j < 8; j++) _mm256_storeu_ps(dst + j * ldd, col[j]);
}

// dst (8,4) = src (4,8)ᵀ: four rows of 8 floats -> eight rows of 4 (the same unpack/shuffle steps, 128-bit stores).
// dst (8,2) = src (2,8)ᵀ: two rows of 8 floats -> eight rows of 2 (64-bit stores).
// With transpose8x8 they pack the GEMM's A panels: 12 rows as 8 + 4 (AVX-512), 6 rows as 4 + 2 (AVX2).
inline void transpose4x8(float* dst, size_t ldd, const float* src, size_t lds) {
    const __m256 r0 = _mm256_loadu_ps(src + 0 * lds), r1 = _mm256_loadu_ps(src + 1 * lds);
    const __m256 r2 = _mm256_loadu_ps(src + 2 * lds), r3 = _mm256_loadu_ps(src + 3 * lds);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);  // columns 0,4 | 1,5
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);  // columns 2,6 | 3,7
    _mm_storeu_ps(dst + 0 * ldd, _mm256_castps256_ps128(u0));
    _mm_storeu_ps(dst + 1 * ldd, _mm256_castps256_ps128(u1));
    _mm_storeu_ps(dst + 2 * ldd, _mm256_castps256_ps128(u2));
    _mm_storeu_ps(dst + 3 * ldd, _mm256_castps256_ps128(u3));
    _mm_storeu_ps(dst + 4 * ldd, _mm256_extractf128_ps(u0, 1));
    _mm_storeu_ps(dst + 5 * ldd, _mm256_extractf128_ps(u1, 1));
    _mm_storeu_ps(dst + 6 * ldd, _mm256_extractf128_ps(u2, 1));
    _mm_storeu_ps(dst + 7 * ldd, _mm256_extractf128_ps(u3, 1));
}

inline void transpose2x8(float* dst, size_t ldd, const float* src, size_t lds) {
    const __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + lds);
    const __m256 lo = _mm256_unpacklo_ps(r0, r1), hi = _mm256_unpackhi_ps(r0, r1);  // column pairs 0,1 4,5 | 2,3 6,7
    const __m128 c01 = _mm256_castps256_ps128(lo), c45 = _mm256_extractf128_ps(lo, 1);
    const __m128 c23 = _mm256_castps256_ps128(hi), c67 = _mm256_extractf128_ps(hi, 1);
    _mm_storel_pi(reinterpret_cast<__m64*>(dst + 0 * ldd), c01);
    _mm_storeh_pi(reinterpret_cast<__m64*>(dst + 1 * ldd), c01);
    _mm_storel_pi(reinterpret_cast<__m64*>(dst + 2 * ldd), c23);
    _mm_storeh_pi(reinterpret_cast<__m64*>(dst + 3 * ldd), c23);
    _mm_storel_pi(reinterpret_cast<__m64*>(dst + 4 * ldd), c45);
    _mm_storeh_pi(reinterpret_cast<__m64*>(dst + 5 * ldd), c45);
    _mm_storel_pi(reinterpret_cast<__m64*>(dst + 6 * ldd), c67);
    _mm_storeh_pi(reinterpret_cast<__m64*>(dst + 7 * ldd), c67);
}

#ifdef __FMA__
// F::V the register, F::L its lanes; aligned load, unaligned loadu / storeu, and the lane-wise operations
// (fmadd(a, b, c) = a·b + c rounded once); for RoPE's pairs swap_pairs and dup_half (L/2 floats, each twice), and
// select_gt0(g, a, b) = g > 0 ? a : b lane by lane.
struct F8 {
    using V = __m256;
    static constexpr int L = 8;
    static V zero() { return _mm256_setzero_ps(); }
    static V set1(float x) { return _mm256_set1_ps(x); }
    static V load(const float* p) { return _mm256_load_ps(p); }
    static V loadu(const float* p) { return _mm256_loadu_ps(p); }
    static void storeu(float* p, V x) { _mm256_storeu_ps(p, x); }
    static V add(V a, V b) { return _mm256_add_ps(a, b); }
    static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
    static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
    static V div(V a, V b) { return _mm256_div_ps(a, b); }
    static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
    static V swap_pairs(V x) { return _mm256_permute_ps(x, 0xB1); }  // (x1, x0, x3, x2, …)
    static V dup_half(const float* p) {  // (p0, p0, p1, p1, …): L/2 floats, each twice
        return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)),
                                        _mm256_set_epi32(3, 3, 2, 2, 1, 1, 0, 0));
    }
    static V select_gt0(V g, V a, V b) {  // g > 0 ? a : b (NaN: b)
        return _mm256_blendv_ps(b, a, _mm256_cmp_ps(g, zero(), _CMP_GT_OQ));
    }
};
#endif
#ifdef __AVX512F__  // AVX-512F has its own fma instructions: F16 needs no -mfma
struct F16 {
    using V = __m512;
    static constexpr int L = 16;
    static V zero() { return _mm512_setzero_ps(); }
    static V set1(float x) { return _mm512_set1_ps(x); }
    static V load(const float* p) { return _mm512_load_ps(p); }
    static V loadu(const float* p) { return _mm512_loadu_ps(p); }
    static void storeu(float* p, V x) { _mm512_storeu_ps(p, x); }
    static V add(V a, V b) { return _mm512_add_ps(a, b); }
    static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
    static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
    static V div(V a, V b) { return _mm512_div_ps(a, b); }
    static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
    static V swap_pairs(V x) { return _mm512_permute_ps(x, 0xB1); }
    static V dup_half(const float* p) {
        return _mm512_permutexvar_ps(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0),
                                     _mm512_castps256_ps512(_mm256_loadu_ps(p)));
    }
    static V select_gt0(V g, V a, V b) { return _mm512_mask_mov_ps(b, _mm512_cmp_ps_mask(g, zero(), _CMP_GT_OQ), a); }
};
#endif
}  // namespace icl
#endif
