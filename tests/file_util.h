// file_util.h — files in the tests: a fresh temporary directory removed (with everything in it) at the end of
// the test, and whole-file reads and writes (binary, so bytes round-trip exactly).
#pragma once
#include <doctest/doctest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace icl_test {

struct TmpDir {
    std::string path;
    explicit TmpDir(const std::string& prefix = "icl_test") {
        std::string tmpl = "/tmp/" + prefix + "_XXXXXX";
        char* p = mkdtemp(tmpl.data());
        REQUIRE(p != nullptr);
        path = p;
    }
    ~TmpDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TmpDir(const TmpDir&) = delete;
    TmpDir& operator=(const TmpDir&) = delete;
    std::string operator/(const std::string& name) const { return path + "/" + name; }
};

inline std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

inline void spit(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), (std::streamsize)bytes.size());
}

// Interoperability checks run the system's Python (/usr/bin/python3: Debian's python3-numpy lives there) where
// it has NumPy, and skip otherwise.
inline bool have_numpy() {
    static int ok = -1;
    if (ok < 0) ok = std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
    return ok == 1;
}
// Run a Python script (written to a file in `dir`) with /usr/bin/python3; true on exit status 0.
inline bool run_python(const TmpDir& dir, const std::string& script) {
    const std::string py = dir / "script.py";
    spit(py, script);
    return std::system(("/usr/bin/python3 " + py).c_str()) == 0;
}

}  // namespace icl_test
