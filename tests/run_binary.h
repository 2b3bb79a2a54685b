// run_binary.h — running the project's binaries from the tests. `make test` sets ICL_BIN_DIR to the build folder;
// run("train_gpt --steps 1 …") returns the exit code, stdout and stderr of one command line (stdin is /dev/null).
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
    return d ? d : "";
}

inline Result run(const std::string& args) {
    static int k = 0;
    std::string o = "/tmp/icl_bin_out_" + std::to_string(getpid()) + "_" + std::to_string(k);
    std::string e = "/tmp/icl_bin_err_" + std::to_string(getpid()) + "_" + std::to_string(k++);
    int st = std::system((bin_dir() + "/" + args + " >" + o + " 2>" + e + " </dev/null").c_str());
    Result r{WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(o), slurp(e)};
    std::remove(o.c_str());
    std::remove(e.c_str());
    return r;
}

}  // namespace icl_test
