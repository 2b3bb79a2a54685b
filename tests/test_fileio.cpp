// The one atomic writer and the one way files are opened for reading (engine/fileio.h): a failed write keeps
// the previous file byte-identical and leaves no temporary behind; special files are refused, links never
// followed; readers never block on a FIFO and refuse what is not a regular file.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <map>

#include <string>
#include <vector>

#include "engine/common.h"
#include "engine/fileio.h"
#include "engine/rng.h"
#include "engine/run.h"
#include "engine/safetensors.h"
#include "file_util.h"

using icl_test::list_dir;
using icl_test::slurp;
using icl_test::spit;
using icl_test::TmpDir;

TEST_SUITE("fileio") {

TEST_CASE("write_file_atomic: the file appears whole, replaces the old one, and no temporary stays") {
    TmpDir dir;
    const std::string p = dir / "f.bin";
    icl::write_file_atomic(p, std::string("first"));
    CHECK(slurp(p) == "first");
    std::string a = "abc", b(100000, 'x');
    icl::write_file_atomic(p, {{a.data(), a.size()}, {b.data(), b.size()}});
    CHECK(slurp(p) == a + b);
    CHECK(list_dir(dir.path) == std::vector<std::string>{"f.bin"});
    // a relative path in the current directory works too
    char cwd[4096];
    REQUIRE(getcwd(cwd, sizeof cwd));
    REQUIRE(chdir(dir.path.c_str()) == 0);
    icl::write_file_atomic("rel.txt", std::string("r"));
    REQUIRE(chdir(cwd) == 0);
    CHECK(slurp(dir / "rel.txt") == "r");
}

TEST_CASE("write_file_atomic: a failed write (disk full) keeps the previous file byte-identical") {
    TmpDir dir;
    const std::string p = dir / "ckpt";
    const std::string old = "the previous, complete file";
    icl::write_file_atomic(p, old);
    std::string big(1 << 16, 'n');
    const std::string err = icl_test::in_child_with_file_limit(4096, [&] { icl::write_file_atomic(p, big); });
    CHECK(err == "cannot write " + p + ": File too large");
    CHECK(slurp(p) == old);
    CHECK(list_dir(dir.path) == std::vector<std::string>{"ckpt"});
}

TEST_CASE("write_file_atomic: special files and directories at the target are refused, not replaced") {
    TmpDir dir;
    REQUIRE(mkdir((dir / "d").c_str(), 0755) == 0);
    CHECK_THROWS_WITH_AS(icl::write_file_atomic(dir / "d", std::string("x")),
                         ("cannot write " + (dir / "d") + ": it is a directory; refusing to replace it").c_str(), icl::Error);
    REQUIRE(mkfifo((dir / "fifo").c_str(), 0644) == 0);
    CHECK_THROWS_WITH_AS(icl::write_file_atomic(dir / "fifo", std::string("x")), doctest::Contains("it is a FIFO"), icl::Error);
    struct stat st;
    REQUIRE(lstat((dir / "fifo").c_str(), &st) == 0);
    CHECK(S_ISFIFO(st.st_mode));
    // a symlink to a special file is refused too; /dev/null is a character device on every Linux
    REQUIRE(stat("/dev/null", &st) == 0);
    if (S_ISCHR(st.st_mode)) {
        REQUIRE(symlink("/dev/null", (dir / "null-link").c_str()) == 0);
        CHECK_THROWS_WITH_AS(icl::write_file_atomic(dir / "null-link", std::string("x")), doctest::Contains("character device"), icl::Error);
        REQUIRE(stat("/dev/null", &st) == 0);
        CHECK(S_ISCHR(st.st_mode));
    }
    CHECK_THROWS_WITH_AS(icl::write_file_atomic(dir / "no/such/dir/f", std::string("x")), doctest::Contains("no/such/dir/f"), icl::Error);
    CHECK(list_dir(dir.path) == std::vector<std::string>{"d", "fifo", "null-link"});
}

TEST_CASE("write_file_atomic: links at temporary names are never followed; a link at the target is replaced") {
    TmpDir dir;
    const std::string p = dir / "m.safetensors", victim = dir / "victim";
    spit(victim, "must survive");
    icl::write_file_atomic(p, std::string("v1"));
    // The old writer's fixed name, and a run of this process's unique names, all point at the victim.
    REQUIRE(symlink(victim.c_str(), (p + ".tmp").c_str()) == 0);
    std::vector<std::string> links;
    for (int k = 0; k < 2000; k++) {
        links.push_back(dir / (".m.safetensors.tmp-" + std::to_string((long)getpid()) + "-" + std::to_string(k)));
        REQUIRE(symlink(victim.c_str(), links.back().c_str()) == 0);
    }
    try {
        icl::write_file_atomic(p, std::string("v2"));
        CHECK(slurp(p) == "v2");  // it found a free name
    } catch (const icl::Error& e) {
        CHECK(std::string(e.what()).find("cannot create a temporary file") != std::string::npos);  // or gave up cleanly
        CHECK(slurp(p) == "v1");
    }
    CHECK(slurp(victim) == "must survive");
    for (auto& l : links) unlink(l.c_str());
    // A symlink at the target itself is replaced by the new file; what it pointed to is not written.
    REQUIRE(unlink(p.c_str()) == 0);
    REQUIRE(symlink(victim.c_str(), p.c_str()) == 0);
    icl::write_file_atomic(p, std::string("v3"));
    struct stat st;
    REQUIRE(lstat(p.c_str(), &st) == 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK(slurp(p) == "v3");
    CHECK(slurp(victim) == "must survive");
}

TEST_CASE("write_file_atomic: a temporary left by a killed process is removed by the next write") {
    TmpDir dir;
    const std::string p = dir / "model.safetensors";
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) _exit(0);
    int st;
    waitpid(child, &st, 0);  // `child` is now a pid that runs nothing (reuse within this test is vanishingly rare)
    const std::string stale = dir / (".model.safetensors.tmp-" + std::to_string((long)child) + "-0");
    spit(stale, std::string(1000, 'g'));
    const std::string live = dir / (".model.safetensors.tmp-1-0");  // pid 1 runs: its temporary is not ours to remove
    spit(live, "in progress");
    icl::write_file_atomic(p, std::string("new"));
    CHECK(list_dir(dir.path) == std::vector<std::string>{".model.safetensors.tmp-1-0", "model.safetensors"});
}

TEST_CASE("kill -9 during saves: the checkpoint on disk is always a complete old or new one (24 trials)") {
    // A child saves generation 1, 2, 3, … of a 2 MB checkpoint (every value = its generation, also in the
    // metadata) over the same path as fast as it can; the parent kills it with SIGKILL after a random delay.
    TmpDir dir;
    const std::string p = dir / "ckpt.safetensors";
    const int64_t n = 1 << 19;
    auto save_gen = [&](int g) {
        std::vector<float> x((size_t)n, (float)g);
        icl::safetensors_save(p, {icl::StEntry("w", {n}, x.data())}, {{"gen", std::to_string(g)}});
    };
    // The kill delays scale with the time a child needs here to get from fork to its first completed save (a slow
    // disk's fsync, a sanitizer build, or the fork of a large test process can make that tens of ms, where fixed
    // delays would kill nearly every child before its first save; an earlier version scaled with one in-process save,
    // the best of three, and failed once in a fresh chroot where a forked child's first save took longer): trial i
    // waits (i + 0.5)/24 · 4 · t_first, ±25% at random — from trial 8 on at least 1.06 · t_first, so at least 16 of
    // the 24 kills come after the child replaced the file once, the rest before or during its first save.
    save_gen(0);
    double t_first = 0;  // the slower of two measurements
    for (int k = 0; k < 2; k++) {
        const double t0 = icl::now_seconds();
        pid_t c = fork();
        REQUIRE(c >= 0);
        if (c == 0) {
            save_gen(0);
            _exit(0);
        }
        int st;
        waitpid(c, &st, 0);
        t_first = std::max(t_first, icl::now_seconds() - t0);
    }
    MESSAGE("fork + one 2 MB save takes " << t_first * 1e3 << " ms here");
    icl::Rng rng(20261125);
    int interrupted_after_a_save = 0;
    for (int trial = 0; trial < 24; trial++) {
        pid_t child = fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            for (int g = 1;; g++) save_gen(trial * 100000 + g);
        }
        const double delay = 4 * t_first * (trial + 0.5) / 24 * (0.75 + 0.5 * rng.uniform());  // before, during or between saves
        usleep((useconds_t)(1e6 * delay));
        kill(child, SIGKILL);
        int st;
        waitpid(child, &st, 0);
        CHECK(WIFSIGNALED(st));
        // the file at `p` opens, validates and holds one generation throughout, the one its metadata names
        icl::SafetensorsFile f = icl::safetensors_open(p);
        const int g = std::stoi(f.metadata().at("gen"));
        std::vector<float> x((size_t)n);
        f.read("w", {n}, x.data());
        bool uniform = true;
        for (float v : x) uniform &= v == (float)g;
        CAPTURE(trial);
        CHECK(uniform);
        interrupted_after_a_save += g >= trial * 100000 + 1;
    }
    CHECK(interrupted_after_a_save >= 12);  // most kills came after the child had replaced the file at least once (16 expected)
    // the killed children's temporaries are removed by the next save
    save_gen(7);
    CHECK(list_dir(dir.path) == std::vector<std::string>{"ckpt.safetensors"});
}

TEST_CASE("kill -9 during a run's log writes: log.csv is always its header and whole rows, never fewer than a resumed run kept (20 trials)") {
    // A resumed run rewrites its log with the rows up to the checkpoint (`earlier`) before appending: a child does
    // that with 5000 earlier rows (step, 2*step, 3*step), then appends and flushes after each row as fast as it
    // can; the parent kills it after a random delay. The file must then hold the header and rows 1..k, k >= 5000,
    // every line whole (a log truncated and rewritten in place would lose the earlier rows to such a kill).
    TmpDir dir;
    const std::string p = dir / "log.csv";
    const int kept = 5000;
    auto row = [](int s) { return std::map<std::string, double>{{"step", s}, {"a", 2.0 * s}, {"b", 3.0 * s}}; };
    std::vector<std::map<std::string, double>> earlier;
    for (int s = 1; s <= kept; s++) earlier.push_back(row(s));
    // the kill delays scale with the time a child needs to rewrite the log and append its first row here (fsync-bound:
    // a slow disk or a sanitizer build stretches it): trial i waits (i + 0.5)/20 · 6 · t_first, ±25% at random
    double t_first = 1e9;
    for (int k = 0; k < 3; k++) {
        const double t0 = icl::now_seconds();
        icl::CsvLog log(p, {"step", "a", "b"}, earlier);
        log.row(row(kept + 1));
        log.flush();
        t_first = std::min(t_first, icl::now_seconds() - t0);
    }
    MESSAGE("rewriting the 5000-row log and appending one row takes " << t_first * 1e3 << " ms here");
    { icl::CsvLog log(p, {"step", "a", "b"}, earlier); }  // back to the 5000 earlier rows
    const std::string base = slurp(p);
    REQUIRE(std::count(base.begin(), base.end(), '\n') == 2 + kept);
    icl::Rng rng(20261126);
    int appended = 0;
    for (int trial = 0; trial < 20; trial++) {
        pid_t child = fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            icl::CsvLog log(p, {"step", "a", "b"}, earlier);
            for (int s = kept + 1;; s++) {
                log.row(row(s));
                log.flush();
            }
        }
        usleep((useconds_t)(1e6 * 6 * t_first * (trial + 0.5) / 20 * (0.75 + 0.5 * rng.uniform())));
        kill(child, SIGKILL);
        int st;
        waitpid(child, &st, 0);
        CHECK(WIFSIGNALED(st));
        const std::string text = slurp(p);
        CAPTURE(trial);
        REQUIRE(!text.empty());
        CHECK(text.back() == '\n');
        std::vector<std::string> lines;
        size_t b = 0;
        for (size_t e; (e = text.find('\n', b)) != std::string::npos; b = e + 1) lines.push_back(text.substr(b, e - b));
        REQUIRE(lines.size() >= 2 + kept);
        CHECK(lines[0].rfind("# icl.cpp", 0) == 0);  // the provenance comment
        CHECK(lines[1] == "step,a,b");
        int bad = 0;
        for (size_t i = 2; i < lines.size(); i++) {
            const int s = (int)(i - 1);
            bad += lines[i] != std::to_string(s) + "," + std::to_string(2 * s) + "," + std::to_string(3 * s);
        }
        CHECK(bad == 0);
        appended += lines.size() > 2 + kept;
    }
    CHECK(appended >= 5);  // some kills came after the child had appended rows
    // the killed children's temporaries are removed by the next write
    { icl::CsvLog log(p, {"step"}); }
    CHECK(list_dir(dir.path) == std::vector<std::string>{"log.csv"});
}

TEST_CASE("check_writable: refuses a missing directory, a read-only directory, a special file") {
    TmpDir dir;
    CHECK_NOTHROW(icl::check_writable(dir / "new.json"));
    CHECK(list_dir(dir.path).empty());  // the probe is gone
    CHECK_THROWS_WITH_AS(icl::check_writable(dir / "nodir/x.json"), doctest::Contains("nodir/x.json"), icl::Error);
    REQUIRE(mkdir((dir / "ro").c_str(), 0555) == 0);
    if (geteuid() != 0) {  // root writes into a 0555 directory anyway
        CHECK_THROWS_WITH_AS(icl::check_writable(dir / "ro/x.json"), doctest::Contains("Permission denied"), icl::Error);
    }
    REQUIRE(mkfifo((dir / "p").c_str(), 0644) == 0);
    CHECK_THROWS_WITH_AS(icl::check_writable(dir / "p"), doctest::Contains("it is a FIFO"), icl::Error);
}

TEST_CASE("open_for_reading: a FIFO is refused at once (no hang), so are directories, devices and oversized files") {
    TmpDir dir;
    REQUIRE(mkfifo((dir / "fifo").c_str(), 0644) == 0);
    const double t0 = icl::now_seconds();
    CHECK_THROWS_WITH_AS(icl::open_for_reading(dir / "fifo", 100, "checkpoint"),
                         ("cannot read checkpoint " + (dir / "fifo") + ": it is a FIFO").c_str(), icl::Error);
    CHECK(icl::now_seconds() - t0 < 5.0);
    CHECK_THROWS_WITH_AS(icl::open_for_reading(dir.path, 100, "checkpoint"), doctest::Contains("it is a directory"), icl::Error);
    struct stat st;
    if (stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode))
        CHECK_THROWS_WITH_AS(icl::read_file("/dev/null", 100, "text file"), doctest::Contains("character device"), icl::Error);
    CHECK_THROWS_WITH_AS(icl::open_for_reading(dir / "missing", 100, "text file"),
                         ("cannot open text file " + (dir / "missing") + ": No such file or directory").c_str(), icl::Error);
    spit(dir / "f", "0123456789");
    CHECK(icl::read_file(dir / "f", 10, "text file") == "0123456789");
    CHECK_THROWS_WITH_AS(icl::read_file(dir / "f", 9, "text file"), doctest::Contains("larger than the 9 bytes accepted"), icl::Error);
    icl::FileFd f = icl::open_for_reading(dir / "f", 100, "text file");
    char buf[4];
    f.pread_exact(buf, 4, 6, dir / "f");
    CHECK(std::string(buf, 4) == "6789");
    CHECK_THROWS_WITH_AS(f.pread_exact(buf, 4, 8, dir / "f"), doctest::Contains("unexpected end of file"), icl::Error);
}

}  // TEST_SUITE
