// run_binary.h — running the project's binaries from the tests. They are found beside the test binary itself
// (build/test_icl and build/train_gpt …), or in ICL_BIN_DIR when it is set; run("train_gpt --steps 1 …") returns
// the exit code, stdout and stderr of one command line (stdin is /dev/null).
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "file_util.h"

namespace icl_test {

struct Result { int code; std::string out, err; };

inline std::string bin_dir() {
    const char* d = std::getenv("ICL_BIN_DIR");
    if (d && *d) return d;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    REQUIRE_MESSAGE(n > 0, "cannot find the test binary's folder (/proc/self/exe); set ICL_BIN_DIR");
    std::string p(exe, (size_t)n);
    return p.substr(0, p.find_last_of('/'));
}

// The repository's root (README.md, src/): the working directory when it is one, else the folder above the
// binaries (build/ and build-cmake/ sit in the root).
inline std::string repo_root() {
    for (const std::string& d : {std::string("."), bin_dir() + "/.."})
        if (access((d + "/README.md").c_str(), R_OK) == 0 && access((d + "/src/engine").c_str(), R_OK) == 0) return d;
    FAIL("cannot find the repository root (README.md, src/) in the working directory or above " << bin_dir());
    return "";
}


// A shell command line as it is (not a binary of ours), same capture.
inline Result run_shell(const std::string& cmd) {
    static int k = 0;
    std::string o = "/tmp/icl_sh_out_" + std::to_string(getpid()) + "_" + std::to_string(k);
    std::string e = "/tmp/icl_sh_err_" + std::to_string(getpid()) + "_" + std::to_string(k++);
    int st = std::system((cmd + " >" + o + " 2>" + e + " </dev/null").c_str());
    Result r{WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(o), slurp(e)};
    std::remove(o.c_str());
    std::remove(e.c_str());
    return r;
}

inline Result run(const std::string& args) { return run_shell(bin_dir() + "/" + args); }

}  // namespace icl_test
