// The doctest runner: every tests/*.cpp suite links into one binary, build/test_icl.
// Run one suite with  build/test_icl -ts="npy"   (list them with -lts).
//
// Cases that cannot run on this machine carry a doctest::skip decorator (tests/skip.h): doctest counts them as
// skipped in its summary line. Before running, this prints why each kind of case is skipped here.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "skip.h"

int main(int argc, char** argv) {
    const std::string gpu = icl_test::gpu_skip_reason();
    if (!gpu.empty()) std::printf("[icl] skipping the GPU test cases: %s\n", gpu.c_str());
    if (icl_test::expect_gpu() && !icl_test::gpu_present())
        std::printf("[icl] ICL_EXPECT_GPU=1 and no usable GPU (%s): every GPU test case will fail\n", icl::cuda_status().c_str());
    if (!icl_test::have_numpy()) std::printf("[icl] skipping the NumPy cross-checks: /usr/bin/python3 with numpy not found\n");
    const std::string tiktoken = icl_test::tiktoken_skip_reason();
    if (!tiktoken.empty()) std::printf("[icl] skipping the GPT-2 tokenizer cross-check with js-tiktoken: %s\n", tiktoken.c_str());
    const std::string mpi = icl_test::mpi_skip_reason();
    if (!mpi.empty()) std::printf("[icl] skipping the multi-process (mpirun) test cases: %s\n", mpi.c_str());
    if (!icl_test::have_private_tmpfs())
        std::printf("[icl] skipping the full-tmpfs fault test: `unshare -rm` cannot mount a tmpfs here (no root, no user namespaces)\n");
    std::fflush(stdout);
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
