// common.h — errors, formatting, timing and small helpers shared by every part of icl.cpp.
//
// Two kinds of failure:
//   * icl::Error      — bad input from a user (a flag, a file, a shape). Thrown with a one-line message
//                       that names the problem; binaries catch it in main(), print "error: <msg>" and exit
//                       non-zero. Tests use CHECK_THROWS on it.
//   * ICL_ASSERT(c)   — a broken invariant inside the engine (a bug, not bad input): prints file:line and
//                       aborts, like llm.c's xxxCheck macros.
#pragma once
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace icl {

struct Error : std::runtime_error {
    int exit_code;  // 2 = bad command-line usage, 1 = anything else (bad file, NaN, ...)
    explicit Error(const std::string& msg, int code = 1) : std::runtime_error(msg), exit_code(code) {}
};

// printf-style formatting into a std::string.
inline std::string strfmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string strfmt(const char* fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = std::vsnprintf(nullptr, 0, fmt, ap);
    va_end(ap);
    std::string s(n > 0 ? (size_t)n : 0, '\0');
    if (n > 0) std::vsnprintf(&s[0], (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return s;
}

// User text inside an error message, quoted on one line: control bytes escaped as \xNN, cut at 60 characters.
inline std::string quote_text(const std::string& v) {
    std::string q = "'";
    for (size_t i = 0; i < v.size() && i < 60; i++) {
        unsigned char c = (unsigned char)v[i];
        q += c < 0x20 || c == 0x7f ? strfmt("\\x%02x", c) : std::string(1, (char)c);
    }
    return q + (v.size() > 60 ? "...'" : "'");
}

// Throw a user-facing error (one line, no file:line).
[[noreturn]] inline void fail(const std::string& msg, int code = 1) { throw Error(msg, code); }
// Throw a command-line usage error (exit code 2).
[[noreturn]] inline void fail_usage(const std::string& msg) { throw Error(msg, 2); }

[[noreturn]] inline void assert_fail(const char* cond, const char* file, int line, const std::string& msg) {
    std::fprintf(stderr, "[icl internal error] %s:%d: assertion `%s` failed%s%s\n", file, line, cond,
                 msg.empty() ? "" : ": ", msg.c_str());
    std::fflush(stderr);
    std::abort();
}

// Wall-clock seconds since an arbitrary origin.
inline double now_seconds() {
    using clk = std::chrono::steady_clock;
    return std::chrono::duration<double>(clk::now().time_since_epoch()).count();
}

// How a backward writes an activation gradient. add (the default, the engine's convention): += into a buffer the
// caller zeroed, so several ops can contribute. set: = , for an op that is the buffer's only writer in the step, so
// nobody zeroes it first (models/block.cpp's plain block in the shared layout). The same values either way
// (0 + x = x; only a zero's sign may differ). Parameter gradients always accumulate.
enum class GradWrite { add, set };

}  // namespace icl

// Internal invariant (a bug if it fires). Optional message: ICL_ASSERT(c) or ICL_ASSERT_MSG(c, "...").
#define ICL_ASSERT(cond) \
    do { if (!(cond)) ::icl::assert_fail(#cond, __FILE__, __LINE__, ""); } while (0)
#define ICL_ASSERT_MSG(cond, msg) \
    do { if (!(cond)) ::icl::assert_fail(#cond, __FILE__, __LINE__, (msg)); } while (0)
