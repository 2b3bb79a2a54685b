// fileio.h — the one way icl.cpp writes a file, and the one way it opens a file to read.
//
// Writing (every checkpoint, .npy, .json, .csv, .md and .png the project writes goes through here):
//
//   write_file_atomic(path, bytes)
//     1. refuse a directory, device, FIFO or socket at <path> (a symlink there is replaced, never followed);
//     2. create a temporary file with a unique name in <path>'s directory, exclusively (O_CREAT|O_EXCL|
//        O_NOFOLLOW: an existing file or symlink of that name is never opened or followed);
//     3. write every byte, checking every write; fsync the file; close it, checking the close;
//     4. rename it over <path>; fsync the directory, so the rename itself survives a crash.
//   On any failure the temporary file is removed, <path> is left byte-identical, and icl::Error names <path>
//   and the reason. Temporary files are named ".<name>.tmp-<pid>-<k>"; one left behind by a killed process
//   (its pid no longer running) is removed by the next write of the same <path>.
//
//   check_writable(path)    before a long run: <path>'s directory exists and accepts a new file there, and
//                           nothing special sits at <path> (one line naming the problem otherwise).
//
// Reading:
//
//   open_for_reading(path, max_bytes, what)   open without blocking (a FIFO never hangs), refuse anything
//                                             that is not a regular file or is larger than max_bytes; the
//                                             error names the file, `what` it was supposed to be, and the
//                                             reason. Returns a descriptor the caller owns (FileFd closes it).
//   read_file(path, max_bytes, what)          the whole file as bytes, through open_for_reading.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace icl {

// Hard limits on the size of a file the project reads (checked before anything is allocated).
constexpr uint64_t kMaxDataFileBytes = 1ull << 38;  // checkpoints, .npy: 256 GiB
constexpr uint64_t kMaxTextFileBytes = 1ull << 30;  // text corpora, tokenizer files, JSON: 1 GiB

struct ByteSpan {
    const void* data;
    size_t size;
};

// Write the concatenation of `parts` to `path` atomically (see above).
void write_file_atomic(const std::string& path, const std::vector<ByteSpan>& parts);
void write_file_atomic(const std::string& path, const std::string& bytes);

// A text file (a CSV table, a report) built in memory and written by write_file_atomic at every commit() — the whole
// text so far, so a table that grows row by row is on disk after each row, and an interrupted run leaves the last
// complete version, never a torn line.
class TextOut {
public:
    // Checks now that the file can be written; the text starts with `first` (e.g. a CSV's provenance comment).
    explicit TextOut(std::string path, std::string first = "");
    void printf(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
    void commit() const { write_file_atomic(path_, text_); }
    const std::string& path() const { return path_; }
    const std::string& text() const { return text_; }

private:
    std::string path_, text_;
};

// Fail (icl::Error, exit 1) unless a file could be written at `path` now.
void check_writable(const std::string& path);

// An open, read-only descriptor of a regular file; closes itself.
struct FileFd {
    int fd = -1;
    uint64_t size = 0;  // st_size when opened
    FileFd() = default;
    FileFd(const FileFd&) = delete;
    FileFd& operator=(const FileFd&) = delete;
    FileFd(FileFd&& o) noexcept : fd(o.fd), size(o.size) { o.fd = -1; }
    FileFd& operator=(FileFd&& o) noexcept;
    ~FileFd();
    // Read exactly n bytes at offset `at` (fails naming `path` on a short read or an error).
    void pread_exact(void* dst, size_t n, uint64_t at, const std::string& path) const;
};

FileFd open_for_reading(const std::string& path, uint64_t max_bytes, const std::string& what);
std::string read_file(const std::string& path, uint64_t max_bytes, const std::string& what);

}  // namespace icl
