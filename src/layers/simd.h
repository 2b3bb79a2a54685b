// simd.h — the project's one include of <immintrin.h>.
// GCC 12 warns, falsely, that the AVX-512 intrinsics' own "undefined" pass-through operand is uninitialized
// (-Wuninitialized / -Wmaybe-uninitialized, reported at lines of avx512fintrin.h once they are inlined into our
// code). The warnings are switched off for the intrinsic headers only: the pragma state applies by location.
#pragma once
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
