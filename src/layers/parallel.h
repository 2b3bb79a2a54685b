// parallel.h — the two OpenMP policies every CPU layer shares.
//
// use_threads(work): spawn threads only for enough work (>= 65536 element-operations) and never inside an
//   active parallel region (then the calling thread does it all). Results never depend on this choice.
// thread_columns(C, c0, c1): the channel range [c0,c1) owned by the calling thread of the current team,
//   with boundaries on multiples of 16 elements (64 bytes of floats) so two threads never share a cache
//   line. Parameter-gradient reductions over rows use it: each thread sums ITS columns over all rows in
//   order, so results are bit-identical for any thread count, with no atomics and no scratch.
#pragma once
#ifdef _OPENMP
#include <omp.h>
#endif

namespace icl::par {

inline bool use_threads(double work) {
#ifdef _OPENMP
    return work >= 65536.0 && !omp_in_parallel();
#else
    (void)work;
    return false;
#endif
}

inline void thread_columns(int C, int& c0, int& c1) {
#ifdef _OPENMP
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
#else
    const int nt = 1, tid = 0;
#endif
    auto boundary = [&](int k) {
        const long long b = ((long long)C * k / nt + 15) / 16 * 16;
        return (int)(b < C ? b : C);
    };
    c0 = boundary(tid);
    c1 = boundary(tid + 1);
}

}  // namespace icl::par
