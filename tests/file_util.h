// file_util.h — files in the tests: a fresh temporary directory removed (with everything in it) at the end of
// the test, and whole-file reads and writes (binary, so bytes round-trip exactly).
#pragma once
#include <doctest/doctest.h>
#include <dirent.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <functional>
#include <string>
#include <vector>

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

// A results CSV or log.csv as the project writes it: a first line "# icl.cpp <commit>, <compiler>, <cpu> (<isa>), …"
// (engine/provenance.h), then the table. Checks the comment is there and returns the table.
inline std::string csv_body(const std::string& text) {
    REQUIRE_MESSAGE(text.rfind("# icl.cpp ", 0) == 0, "no provenance line at the top of the CSV");
    return text.substr(text.find('\n') + 1);
}

// The names in a directory (without . and ..), sorted.
inline std::vector<std::string> list_dir(const std::string& dir) {
    std::vector<std::string> names;
    if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d))
            if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.push_back(e->d_name);
        closedir(d);
    }
    std::sort(names.begin(), names.end());
    return names;
}

// A full disk without needing one: run fn() in a child process whose file-size limit is `limit` bytes
// (RLIMIT_FSIZE, SIGXFSZ ignored), so every write past it fails with EFBIG, as a write to a full disk fails
// with ENOSPC. Returns what fn threw ("" if it returned normally, "crashed" if the child died).
inline std::string in_child_with_file_limit(size_t limit, const std::function<void()>& fn) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {(rlim_t)limit, (rlim_t)limit};
        setrlimit(RLIMIT_FSIZE, &rl);
        std::string msg;
        try { fn(); } catch (const std::exception& e) { msg = e.what(); if (msg.empty()) msg = "?"; }
        ssize_t w = write(fds[1], msg.data(), msg.size());
        (void)w;
        _exit(0);
    }
    close(fds[1]);
    std::string msg;
    char buf[512];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, (size_t)n);
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st)) return "crashed";
    return msg;
}

// Run a Python script (written to a file in `dir`) with /usr/bin/python3; true on exit status 0.
inline bool run_python(const TmpDir& dir, const std::string& script) {
    const std::string py = dir / "script.py";
    spit(py, script);
    return std::system(("/usr/bin/python3 " + py).c_str()) == 0;
}

}  // namespace icl_test
