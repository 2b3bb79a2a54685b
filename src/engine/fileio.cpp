// fileio.cpp — see fileio.h.
#include "engine/fileio.h"

#include "engine/comm.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cerrno>
#include <cstring>

#include "engine/common.h"

namespace icl {

namespace {

// "dir/name" -> {"dir", "name"}; "name" -> {".", "name"}
std::pair<std::string, std::string> split_path(const std::string& path) {
    size_t k = path.find_last_of('/');
    if (k == std::string::npos) return {".", path};
    return {k == 0 ? "/" : path.substr(0, k), path.substr(k + 1)};
}

const char* kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

// Refuse what must never be replaced: a directory or a special file at `path` (also behind a symlink).
void refuse_special_target(const std::string& path) {
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) return;  // nothing there yet
    if (S_ISLNK(st.st_mode)) {
        if (stat(path.c_str(), &st) != 0) return;  // a dangling link: the rename replaces it
    }
    if (!S_ISREG(st.st_mode)) fail(strfmt("cannot write %s: it is %s; refusing to replace it", path.c_str(), kind_of(st.st_mode)));
}

// Remove ".<name>.tmp-<pid>-<k>" files in `dir` whose process is gone (killed during an earlier write).
void remove_stale_temps(const std::string& dir, const std::string& name) {
    const std::string prefix = "." + name + ".tmp-";
    DIR* d = opendir(dir.c_str());
    if (!d) return;
    while (struct dirent* e = readdir(d)) {
        const char* n = e->d_name;
        if (std::strncmp(n, prefix.c_str(), prefix.size()) != 0) continue;
        char* end = nullptr;
        long pid = std::strtol(n + prefix.size(), &end, 10);
        if (pid <= 0 || !end || *end != '-') continue;
        if (pid == (long)getpid()) continue;  // ours: another thread's write in progress
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;  // still running (or not ours to judge)
        unlinkat(dirfd(d), n, 0);
    }
    closedir(d);
}

void fsync_dir(const std::string& dir) {
    int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    fsync(fd);  // best effort: some file systems refuse fsync on directories
    close(fd);
}

int write_all(int fd, const void* data, size_t n) {
    const char* p = (const char*)data;
    while (n > 0) {
        ssize_t w = ::write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno;
        if (w == 0) return EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

}  // namespace

void write_file_atomic(const std::string& path, const std::vector<ByteSpan>& parts) {
    if (!comm_root()) return;  // several processes (engine/comm.h): rank 0 alone writes
    if (path.empty()) fail("cannot write a file with an empty name");
    refuse_special_target(path);
    const auto [dir, name] = split_path(path);
    if (name.empty()) fail(strfmt("cannot write %s: it names a directory", path.c_str()));
    remove_stale_temps(dir, name);
    static std::atomic<unsigned> counter{0};
    std::string tmp;
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        tmp = (dir == "." && path.find('/') == std::string::npos ? "" : dir + "/") + "." + name + ".tmp-" +
              std::to_string((long)getpid()) + "-" + std::to_string(counter++);
        fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) fail(strfmt("cannot write %s: cannot create a temporary file in %s: %s", path.c_str(), dir.c_str(), std::strerror(errno)));
    int err = 0;
    for (const ByteSpan& p : parts)
        if (p.size && (err = write_all(fd, p.data, p.size)) != 0) break;
    // fsync, so that a crash right after the rename cannot leave an empty file under the final name.
    // Some file systems do not support it (EINVAL, ENOTSUP, EROFS); that is not a write error.
    if (!err && ::fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP && errno != EROFS) err = errno;
    if (::close(fd) != 0 && !err) err = errno ? errno : EIO;
    if (!err) {
        refuse_special_target(path);  // still nothing special there (a race with another program)
        if (std::rename(tmp.c_str(), path.c_str()) != 0) err = errno ? errno : EIO;
    }
    if (err) {
        ::unlink(tmp.c_str());
        fail(strfmt("cannot write %s: %s", path.c_str(), std::strerror(err)));
    }
    fsync_dir(dir);
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
    write_file_atomic(path, std::vector<ByteSpan>{{bytes.data(), bytes.size()}});
}

TextOut::TextOut(std::string path, std::string first) : path_(std::move(path)), text_(std::move(first)) { check_writable(path_); }

void TextOut::printf(const char* fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    const int n = std::vsnprintf(nullptr, 0, fmt, ap);
    va_end(ap);
    if (n > 0) {
        const size_t old = text_.size();
        text_.resize(old + (size_t)n + 1);
        std::vsnprintf(&text_[old], (size_t)n + 1, fmt, ap2);
        text_.resize(old + (size_t)n);
    }
    va_end(ap2);
}

void check_writable(const std::string& path) {
    if (path.empty()) fail("cannot write a file with an empty name");
    refuse_special_target(path);
    const auto [dir, name] = split_path(path);
    struct stat st;
    if (stat(dir.c_str(), &st) != 0) fail(strfmt("cannot write %s: directory %s: %s", path.c_str(), dir.c_str(), std::strerror(errno)));
    if (!S_ISDIR(st.st_mode)) fail(strfmt("cannot write %s: %s is not a directory", path.c_str(), dir.c_str()));
    // Writable is what the kernel says when we try, not what the mode bits say (root, read-only mounts, ACLs).
    const std::string probe = dir + "/." + name + ".tmp-" + std::to_string((long)getpid()) + "-probe";
    int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) fail(strfmt("cannot write %s: %s", path.c_str(), std::strerror(errno)));
    ::close(fd);
    ::unlink(probe.c_str());
}

// ---- reading ---------------------------------------------------------------------------------------------

FileFd& FileFd::operator=(FileFd&& o) noexcept {
    if (this != &o) {
        if (fd >= 0) ::close(fd);
        fd = o.fd;
        size = o.size;
        o.fd = -1;
    }
    return *this;
}

FileFd::~FileFd() {
    if (fd >= 0) ::close(fd);
}

void FileFd::pread_exact(void* dst, size_t n, uint64_t at, const std::string& path) const {
    size_t done = 0;
    while (done < n) {
        ssize_t r = ::pread(fd, (char*)dst + done, n - done, (off_t)(at + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) fail(strfmt("%s: read error: %s", path.c_str(), r < 0 ? std::strerror(errno) : "unexpected end of file"));
        done += (size_t)r;
    }
}

FileFd open_for_reading(const std::string& path, uint64_t max_bytes, const std::string& what) {
    // O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting forever.
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) fail(strfmt("cannot open %s %s: %s", what.c_str(), path.c_str(), std::strerror(errno)));
    FileFd f;
    f.fd = fd;
    struct stat st;
    if (fstat(fd, &st) != 0) fail(strfmt("cannot read %s %s: %s", what.c_str(), path.c_str(), std::strerror(errno)));
    if (!S_ISREG(st.st_mode)) fail(strfmt("cannot read %s %s: it is %s", what.c_str(), path.c_str(), kind_of(st.st_mode)));
    f.size = (uint64_t)st.st_size;
    if (f.size > max_bytes)
        fail(strfmt("%s: %s of %llu bytes is larger than the %llu bytes accepted", path.c_str(), what.c_str(),
                    (unsigned long long)f.size, (unsigned long long)max_bytes));
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return f;
}

std::string read_file(const std::string& path, uint64_t max_bytes, const std::string& what) {
    FileFd f = open_for_reading(path, max_bytes, what);
    std::string s((size_t)f.size, '\0');
    f.pread_exact(&s[0], s.size(), 0, path);
    return s;
}

}  // namespace icl
