// test_npy.cpp — the .npy writer/reader (src/engine/npy.h): exact header bytes, bit-exact round trips,
// interoperability with NumPy (when /usr/bin/python3 has numpy), one test per refusal, atomic writes,
// and the npyinspect tool (found beside the test binary, tests/run_binary.h).
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "engine/npy.h"
#include "engine/rng.h"

#include "file_util.h"
#include "skip.h"
#include "run_binary.h"

namespace {

using icl_test::slurp;
using icl_test::spit;
using icl_test::TmpDir;  // a fresh /tmp directory, removed with its contents at the end of the test
using icl_test::run_python;

// A .npy file with an arbitrary dict text and payload, padded like NumPy does (for corrupt-file tests).
std::string make_npy(const std::string& dict, const std::string& payload, int major = 1) {
    size_t prefix = major == 1 ? 10 : 12;
    size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
    size_t hlen = total - prefix;
    std::string h = "\x93NUMPY";
    h += (char)major;
    h += (char)0;
    for (size_t i = 0; i < prefix - 8; i++) h += (char)((hlen >> (8 * i)) & 0xff);
    h += dict;
    h.append(total - h.size() - 1, ' ');
    return h + "\n" + payload;
}

// Load must throw icl::Error whose one-line message names the file and contains `problem`.
void check_refused(const std::string& path, const char* problem) {
    std::string what = problem;
    CAPTURE(what);
    CHECK_THROWS_WITH_AS(icl::npy_load(path), doctest::Contains(problem), icl::Error);
    try {
        icl::npy_load(path);
    } catch (const icl::Error& e) {
        std::string m = e.what();
        CHECK(m.find(path) != std::string::npos);
        CHECK(m.find('\n') == std::string::npos);
    }
}

// Random bit patterns (NaNs with payloads, infinities, denormals, -0 included) for bit-exact checks.
template <class T> std::vector<T> random_bits(size_t n, uint64_t seed) {
    icl::Rng rng(seed);
    std::vector<T> v(n);
    for (size_t i = 0; i < n; i++) {
        uint64_t bits = rng.next_u64();
        std::memcpy(&v[i], &bits, sizeof(T));
    }
    return v;
}

}  // namespace

TEST_SUITE("npy") {

TEST_CASE("header is byte-exact NumPy format 1.0, 64-byte aligned, ends with newline") {
    // Exactly what np.save writes (NumPy 1.24) for a float32 array of shape (3, 4).
    std::string h = icl::npy_header("<f4", {3, 4});
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";
    CHECK(h == std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + std::string(128 - 11 - dict.size(), ' ') + "\n");
    CHECK(icl::npy_header("<f8", {}).find("'shape': (), }") != std::string::npos);
    CHECK(icl::npy_header("<i4", {7}).find("'descr': '<i4', 'fortran_order': False, 'shape': (7,), }") != std::string::npos);
    CHECK(icl::npy_header("<f4", {2, 0, 3}).find("'shape': (2, 0, 3), }") != std::string::npos);
    for (const icl::Shape& s : {icl::Shape{}, icl::Shape{1}, icl::Shape{123456789, 7}, icl::Shape(30, 1000000)}) {
        std::string hh = icl::npy_header("<f8", s);
        CAPTURE(icl::shape_str(s));
        CHECK(hh.size() % 64 == 0);
        CHECK(hh.back() == '\n');
        size_t len = (unsigned char)hh[8] | ((size_t)(unsigned char)hh[9] << 8);
        CHECK(len + 10 == hh.size());
    }
}

TEST_CASE("round trips are bit-exact for every dtype and odd shapes") {
    TmpDir dir;
    const std::vector<icl::Shape> shapes = {{}, {1}, {7}, {3, 5}, {2, 3, 5}, {1, 1, 1, 1, 1}, {0}, {4, 0, 3}, {13, 1, 17}};
    for (size_t k = 0; k < shapes.size(); k++) {
        const icl::Shape& s = shapes[k];
        CAPTURE(icl::shape_str(s));
        size_t n = (size_t)icl::numel(s);
        auto f = random_bits<float>(n, 10 + k);
        auto d = random_bits<double>(n, 20 + k);
        auto i = random_bits<int32_t>(n, 30 + k);
        icl::npy_save(dir / "f.npy", f.data(), s);
        icl::npy_save(dir / "d.npy", d.data(), s);
        icl::npy_save(dir / "i.npy", i.data(), s);
        icl::NpyArray af = icl::npy_load(dir / "f.npy"), ad = icl::npy_load(dir / "d.npy"), ai = icl::npy_load(dir / "i.npy");
        CHECK(af.descr == "<f4");
        CHECK(ad.descr == "<f8");
        CHECK(ai.descr == "<i4");
        CHECK(af.shape == s);
        CHECK(ad.shape == s);
        CHECK(ai.shape == s);
        CHECK(af.size() == (int64_t)n);
        CHECK(ad.itemsize() == 8);
        auto rf = af.as<float>();
        auto rd = ad.as<double>();
        auto ri = ai.as<int32_t>();
        REQUIRE(rf.size() == n);
        REQUIRE(rd.size() == n);
        REQUIRE(ri.size() == n);
        CHECK((n == 0 || std::memcmp(rf.data(), f.data(), n * 4) == 0));
        CHECK((n == 0 || std::memcmp(rd.data(), d.data(), n * 8) == 0));
        CHECK((n == 0 || std::memcmp(ri.data(), i.data(), n * 4) == 0));
        std::string bytes = slurp(dir / "f.npy");
        CHECK((bytes.size() - 4 * n) % 64 == 0);
        CHECK(bytes[bytes.size() - 4 * n - 1] == '\n');
    }
}

TEST_CASE("typed access checks the dtype; to_double converts exactly") {
    TmpDir dir;
    float f[3] = {1.5f, -2.25f, 1e-30f};
    int32_t i[3] = {-7, 0, 2147483647};
    icl::npy_save(dir / "f.npy", f, {3});
    icl::npy_save(dir / "i.npy", i, {3});
    icl::NpyArray a = icl::npy_load(dir / "f.npy");
    CHECK_THROWS_WITH_AS(a.as<double>(), doctest::Contains("'<f4'"), icl::Error);
    CHECK_THROWS_AS(a.as<int32_t>(), icl::Error);
    auto v = a.to_double();
    CHECK(v == std::vector<double>{1.5, -2.25, (double)1e-30f});
    auto w = icl::npy_load(dir / "i.npy").to_double();
    CHECK(w == std::vector<double>{-7.0, 0.0, 2147483647.0});
    CHECK_THROWS_AS(icl::npy_save(dir / "neg.npy", f, {-1, 3}), icl::Error);
}

TEST_CASE("numpy.load reads our files bit-exactly" * NUMPY_CASE) {
    TmpDir dir;
    auto f = random_bits<float>(15, 1);
    auto d = random_bits<double>(7, 2);
    auto i = random_bits<int32_t>(1, 3);
    icl::npy_save(dir / "f.npy", f.data(), {3, 5});
    icl::npy_save(dir / "d.npy", d.data(), {7});
    icl::npy_save(dir / "i.npy", i.data(), {});
    icl::npy_save(dir / "e.npy", f.data(), {2, 0, 3});
    spit(dir / "f.raw", std::string((const char*)f.data(), 60));
    spit(dir / "d.raw", std::string((const char*)d.data(), 56));
    spit(dir / "i.raw", std::string((const char*)i.data(), 4));
    std::string script =
        "import numpy as np, sys\n"
        "D = '" + dir.path + "/'\n"
        "def check(name, dtype, shape):\n"
        "    a = np.load(D + name + '.npy', allow_pickle=False)\n"
        "    assert a.dtype == np.dtype(dtype), (name, a.dtype)\n"
        "    assert a.shape == shape, (name, a.shape)\n"
        "    assert a.flags['C_CONTIGUOUS']\n"
        "    if shape != (2, 0, 3):\n"
        "        assert a.tobytes() == open(D + name + '.raw', 'rb').read(), name\n"
        "check('f', '<f4', (3, 5))\n"
        "check('d', '<f8', (7,))\n"
        "check('i', '<i4', ())\n"
        "check('e', '<f4', (2, 0, 3))\n"
        "import io\n"
        "if hasattr(np.lib.format, 'GROWTH_AXIS_MAX_DIGITS'):  # NumPy >= 1.23: our files are byte-identical\n"
        "    for name in 'fdie':\n"
        "        b = io.BytesIO(); np.save(b, np.load(D + name + '.npy'))\n"
        "        assert b.getvalue() == open(D + name + '.npy', 'rb').read(), name\n";
    CHECK(run_python(dir, script));
}

TEST_CASE("we read files numpy wrote, and refuse the ones we do not support" * NUMPY_CASE) {
    TmpDir dir;
    std::string script =
        "import numpy as np\n"
        "D = '" + dir.path + "/'\n"
        "rng = np.random.default_rng(5)\n"
        "a = rng.standard_normal((3, 4)).astype(np.float32); np.save(D + 'f.npy', a); a.tofile(D + 'f.raw')\n"
        "b = rng.standard_normal((2, 3, 5)); np.save(D + 'd.npy', b); b.tofile(D + 'd.raw')\n"
        "c = np.arange(-3, 8, dtype=np.int32); np.save(D + 'i.npy', c); c.tofile(D + 'i.raw')\n"
        "np.save(D + 's.npy', np.float64(2.5))\n"
        "np.save(D + 'z.npy', np.zeros((2, 0, 3), np.float32))\n"
        "with open(D + 'v2.npy', 'wb') as fh: np.lib.format.write_array(fh, a, version=(2, 0))\n"
        "with open(D + 'v3.npy', 'wb') as fh: np.lib.format.write_array(fh, a, version=(3, 0))\n"
        "np.save(D + 'fortran.npy', np.asfortranarray(rng.standard_normal((3, 4))))\n"
        "np.save(D + 'big.npy', a.astype('>f4'))\n"
        "np.save(D + 'half.npy', a.astype(np.float16))\n"
        "np.save(D + 'bool.npy', a > 0)\n"
        "np.save(D + 'i8.npy', c.astype(np.int64))\n";
    REQUIRE(run_python(dir, script));
    for (std::string name : {"f", "d", "i"}) {
        CAPTURE(name);
        icl::NpyArray a = icl::npy_load(dir / (std::string(name) + ".npy"));
        std::string raw = slurp(dir / (std::string(name) + ".raw"));
        REQUIRE(a.bytes.size() == raw.size());
        CHECK(std::memcmp(a.bytes.data(), raw.data(), raw.size()) == 0);
    }
    CHECK(icl::npy_load(dir / "f.npy").shape == icl::Shape{3, 4});
    CHECK(icl::npy_load(dir / "d.npy").shape == icl::Shape{2, 3, 5});
    CHECK(icl::npy_load(dir / "i.npy").as<int32_t>() == std::vector<int32_t>{-3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7});
    icl::NpyArray s = icl::npy_load(dir / "s.npy");
    CHECK(s.shape.empty());
    CHECK(s.as<double>() == std::vector<double>{2.5});
    CHECK(icl::npy_load(dir / "z.npy").shape == icl::Shape{2, 0, 3});
    CHECK(icl::npy_load(dir / "v2.npy").bytes == icl::npy_load(dir / "f.npy").bytes);
    CHECK(icl::npy_load(dir / "v3.npy").bytes == icl::npy_load(dir / "f.npy").bytes);
    check_refused(dir / "fortran.npy", "Fortran order");
    check_refused(dir / "big.npy", "unsupported .npy dtype '>f4'");
    check_refused(dir / "half.npy", "unsupported .npy dtype '<f2'");
    check_refused(dir / "bool.npy", "unsupported .npy dtype '|b1'");
    check_refused(dir / "i8.npy", "unsupported .npy dtype '<i8'");
}

TEST_CASE("refusals: not a file, bad magic, version, header length") {
    TmpDir dir;
    CHECK_THROWS_WITH_AS(icl::npy_load(dir / "missing.npy"), doctest::Contains("cannot open"), icl::Error);
    CHECK_THROWS_WITH_AS(icl::npy_load(dir.path), doctest::Contains("it is a directory"), icl::Error);
    spit(dir / "empty.npy", "");
    check_refused(dir / "empty.npy", "not a .npy file");
    float x[12] = {};
    icl::npy_save(dir / "good.npy", x, {3, 4});
    std::string good = slurp(dir / "good.npy");

    std::string b = good;
    b[1] = 'X';
    spit(dir / "magic.npy", b);
    check_refused(dir / "magic.npy", "bad magic");
    spit(dir / "text.npy", "hello, this is not an array at all\n");
    check_refused(dir / "text.npy", "bad magic");

    b = good;
    b[6] = 4;
    spit(dir / "v4.npy", b);
    check_refused(dir / "v4.npy", "unsupported .npy format version 4.0");
    b = good;
    b[7] = 1;
    spit(dir / "v11.npy", b);
    check_refused(dir / "v11.npy", "unsupported .npy format version 1.1");

    b = good;
    b[8] = (char)0xff;
    b[9] = (char)0xff;
    spit(dir / "hlen.npy", b);
    check_refused(dir / "hlen.npy", "header length 65535 runs past the end of the file");
    // Version 2.0 with a 4 GB header length: must be refused without allocating it.
    std::string v2 = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", std::string(4, '\0'), 2);
    v2[8] = v2[9] = v2[10] = v2[11] = (char)0xff;
    spit(dir / "hlen2.npy", v2);
    check_refused(dir / "hlen2.npy", "header length 4294967295 runs past");
}

TEST_CASE("refusals: unparsable header dicts") {
    TmpDir dir;
    const std::string pay(48, '\0');
    struct Case {
        const char* dict;
        const char* problem;
    };
    const Case cases[] = {
        {"hello world", "unparsable .npy header"},
        {"", "unparsable .npy header"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), ", "unparsable .npy header"},
        {"{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'"},
        {"{'fortran_order': False, 'shape': (3, 4)}", "missing key 'descr'"},
        {"{'descr': '<f4', 'shape': (3, 4)}", "missing key 'fortran_order'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), 'extra': 1}", "unknown key 'extra'"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3, 4)}", "duplicate key 'descr'"},
        {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (3, 4)}", "expected True or False"},
        {"{'descr': <f4, 'fortran_order': False, 'shape': (3, 4)}", "expected a quoted string"},
        {"{'descr': '<f4, 'fortran_order': False, 'shape': (3, 4)}", "unparsable .npy header"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, a)}", "non-negative integer"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3 4)}", "expected ',' or ')'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [3, 4]}", "expected '('"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (12)}", "must be written (n,)"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3.0, 4)}", "expected ',' or ')'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4)} junk", "unexpected text after the dict"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-3, -4)}", "negative dimension"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 1)}", "absurd dimension"},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4)}", "Fortran order"},
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (3, 4)}", "unsupported .npy dtype '>f4'"},
        {"{'descr': '<f2', 'fortran_order': False, 'shape': (3, 4)}", "unsupported .npy dtype '<f2'"},
        {"{'descr': '|b1', 'fortran_order': False, 'shape': (3, 4)}", "unsupported .npy dtype '|b1'"},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3, 4)}", "expected a quoted string"},
    };
    int k = 0;
    for (const Case& c : cases) {
        std::string p = dir / ("bad" + std::to_string(k++) + ".npy");
        spit(p, make_npy(c.dict, pay));
        check_refused(p, c.problem);
    }
    // Accepted variations: any key order, double quotes, no trailing comma, extra spaces.
    spit(dir / "ok.npy", make_npy("{ \"shape\" : ( 3 , 4 , ) , 'fortran_order':False,'descr':'<f4'}", pay));
    CHECK(icl::npy_load(dir / "ok.npy").shape == icl::Shape{3, 4});
}

TEST_CASE("refusals: data size must match the shape (truncation at every kind of cut point, trailing bytes)") {
    TmpDir dir;
    auto d = random_bits<double>(30, 9);
    icl::npy_save(dir / "good.npy", d.data(), {5, 6});
    const std::string good = slurp(dir / "good.npy");
    REQUIRE(good.size() == 128 + 240);
    for (size_t cut : {(size_t)0, (size_t)3, (size_t)6, (size_t)8, (size_t)9, (size_t)10, (size_t)40, (size_t)127,
                       (size_t)128, (size_t)129, (size_t)200, good.size() - 8, good.size() - 1}) {
        CAPTURE(cut);
        std::string p = dir / ("cut" + std::to_string(cut) + ".npy");
        spit(p, good.substr(0, cut));
        CHECK_THROWS_AS(icl::npy_load(p), icl::Error);
    }
    spit(dir / "short.npy", good.substr(0, good.size() - 1));
    check_refused(dir / "short.npy", "truncated .npy file: shape (5,6) <f8 needs 240 data bytes, the file has 239");
    spit(dir / "hdr.npy", good.substr(0, 40));
    check_refused(dir / "hdr.npy", "runs past the end of the file");
    spit(dir / "long.npy", good + "x");
    check_refused(dir / "long.npy", "trailing bytes in .npy file");
    // A huge shape is compared with the file size before anything is allocated.
    spit(dir / "huge.npy", make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000, 1000000000, 1000000000), }", "abcd"));
    check_refused(dir / "huge.npy", "truncated .npy file");
    spit(dir / "zero.npy", make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 99999999999), }", "x"));
    check_refused(dir / "zero.npy", "trailing bytes");
}

TEST_CASE("writes are atomic: a failed write leaves the earlier file intact") {
    TmpDir dir;
    const std::string p = dir / "a.npy";
    float before[4] = {1, 2, 3, 4}, after[4] = {5, 6, 7, 8};
    icl::npy_save(p, before, {4});
    auto still_before = [&] { CHECK(icl::npy_load(p).as<float>() == std::vector<float>{1, 2, 3, 4}); };

    // Disk full during the write (engine/fileio.h's writer; tests/test_fileio.cpp checks the rest).
    std::vector<float> big(4096, 9.0f);
    const std::string err = icl_test::in_child_with_file_limit(1024, [&] { icl::npy_save(p, big.data(), {4096}); });
    CHECK(err.find("cannot write " + p + ": File too large") != std::string::npos);
    still_before();
    CHECK(icl_test::list_dir(dir.path) == std::vector<std::string>{"a.npy"});  // the failed temporary is gone
    icl::npy_save(p, after, {4});
    CHECK(icl::npy_load(p).as<float>() == std::vector<float>{5, 6, 7, 8});
    // Unwritable destinations are refused by name.
    CHECK_THROWS_WITH_AS(icl::npy_save(dir / "no/such/dir/x.npy", after, {4}), doctest::Contains("no/such/dir/x.npy"), icl::Error);
    REQUIRE(mkdir((dir / "isdir.npy").c_str(), 0755) == 0);
    CHECK_THROWS_WITH_AS(icl::npy_save(dir / "isdir.npy", after, {4}), doctest::Contains("isdir.npy: it is a directory"), icl::Error);
}

TEST_CASE("npyinspect prints stats and refuses bad files") {
    const std::string exe = icl_test::bin_dir() + "/npyinspect";
    TmpDir dir;
    float v[6] = {1, 2, 3, 4, NAN, INFINITY};
    icl::npy_save(dir / "v.npy", v, {2, 3});
    std::string out = dir / "out.txt";
    CHECK(std::system((exe + " " + (dir / "v.npy") + " > " + out + " 2>&1").c_str()) == 0);
    std::string text = slurp(out);
    CHECK(text.find("<f4") != std::string::npos);
    CHECK(text.find("(2, 3)") != std::string::npos);
    CHECK(text.find("nan=1") != std::string::npos);
    CHECK(text.find("inf=1") != std::string::npos);
    CHECK(text.find("mean=2.5") != std::string::npos);
    spit(dir / "bad.npy", "garbage");
    int rc = std::system((exe + " " + (dir / "bad.npy") + " > " + out + " 2>&1").c_str());
    CHECK(WIFEXITED(rc));
    CHECK(WEXITSTATUS(rc) == 1);
    CHECK(slurp(out).find("error: ") != std::string::npos);
    CHECK(std::system((exe + " --help > " + out + " 2>&1").c_str()) == 0);
    CHECK(slurp(out).find("usage") != std::string::npos);
}

}  // TEST_SUITE
