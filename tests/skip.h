// skip.h — test cases that cannot run on this machine are SKIPPED, visibly: a doctest::skip decorator on the
// case, so doctest counts it under "skipped" in its summary (and `make test`'s last line), never as passed.
// tests/main.cpp prints why at the start of the run.
//
//   TEST_CASE("cuda kernels: ..." * GPU_CASE) { REQUIRE_GPU(); ... }
//   TEST_CASE("numpy reads our files" * NUMPY_CASE) { ... }
//
// ICL_EXPECT_GPU=1 (the GPU acceptance run) turns every GPU skip into a run, and REQUIRE_GPU() then fails on a
// machine without a usable GPU: a GPU machine cannot pass by skipping.
#pragma once
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "engine/device.h"

namespace icl_test {

inline bool expect_gpu() {
    const char* e = std::getenv("ICL_EXPECT_GPU");
    return e && std::string(e) == "1";
}
inline bool gpu_present() {
    static const int ok = icl::cuda_device_present() ? 1 : 0;
    return ok == 1;
}
// Why the GPU cases do not run here ("" when they do).
inline std::string gpu_skip_reason() {
    if (gpu_present() || expect_gpu()) return "";
    return icl::cuda_built() ? "no usable CUDA device on this machine (" + icl::cuda_status() + ")"
                             : "built without CUDA (run `make test-cuda` on a machine with nvcc and a GPU)";
}
// Interoperability checks run the system's Python (/usr/bin/python3: Debian's python3-numpy lives there).
inline bool have_numpy() {
    static int ok = -1;
    if (ok < 0) ok = std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
    return ok == 1;
}

// A real full disk for the fault tests: a small tmpfs mounted in a private mount namespace (`unshare -rm`: as
// root, or as a user where the kernel allows user namespaces), so nothing is left mounted if a test dies.
inline bool have_private_tmpfs() {
    static int ok = -1;
    if (ok < 0) ok = std::system("unshare -rm sh -c 'mount -t tmpfs -o size=64k tmpfs /tmp' >/dev/null 2>&1") == 0;
    return ok == 1;
}

}  // namespace icl_test

#define GPU_CASE doctest::skip(!icl_test::gpu_skip_reason().empty())
#define NUMPY_CASE doctest::skip(!icl_test::have_numpy())
#define TMPFS_CASE doctest::skip(!icl_test::have_private_tmpfs())
#define REQUIRE_GPU()                                                                                      \
    do {                                                                                                   \
        if (!icl_test::gpu_present()) FAIL("ICL_EXPECT_GPU=1 but no usable GPU: " << icl::cuda_status()); \
    } while (0)
