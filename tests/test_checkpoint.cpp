// test_checkpoint.cpp — .safetensors files (src/engine/safetensors.h) and model checkpoints on top of them
// (src/engine/checkpoint.h): bit-exact round trips, layout rules, a Python/NumPy reading of our files,
// one test per corruption the reader must refuse, atomic saves, and kind/config/version/tensor mismatches.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/checkpoint.h"
#include "engine/rng.h"
#include "engine/safetensors.h"

#include "file_util.h"
#include "skip.h"

namespace {

using icl_test::slurp;
using icl_test::spit;
using icl_test::TmpDir;  // a fresh /tmp directory, removed with its contents at the end of the test

uint64_t header_len(const std::string& file) {
    uint64_t n = 0;
    for (int k = 0; k < 8; k++) n |= (uint64_t)(unsigned char)file[k] << (8 * k);
    return n;
}
// A .safetensors file from a header text (padded with spaces to 8) and a data section.
std::string make_st(const std::string& header, const std::string& data) {
    std::string h = header;
    h.append((8 - h.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    for (int k = 0; k < 8; k++) out[k] = (char)((uint64_t)h.size() >> (8 * k));
    return out + h + data;
}

using icl_test::run_python;

template <class T> std::vector<T> random_values(size_t n, uint64_t seed) {
    icl::Rng rng(seed);
    std::vector<T> v(n);
    for (auto& x : v) x = (T)rng.normal();
    return v;
}
std::vector<int32_t> random_ints(size_t n, uint64_t seed) {
    icl::Rng rng(seed);
    std::vector<int32_t> v(n);
    for (auto& x : v) x = (int32_t)(uint32_t)rng.next_u64();
    return v;
}

// Opening must throw icl::Error whose one-line message names the file and contains `problem`.
void check_open_refused(const std::string& path, const char* problem) {
    std::string what = problem;
    CAPTURE(what);
    CHECK_THROWS_WITH_AS(icl::safetensors_open(path), doctest::Contains(problem), icl::Error);
    try {
        icl::safetensors_open(path);
    } catch (const icl::Error& e) {
        std::string m = e.what();
        CHECK(m.find(path) != std::string::npos);
        CHECK(m.find('\n') == std::string::npos);
    }
}

// The message of the icl::Error `f` throws ("" if it throws none).
template <class F> std::string error_of(F&& f) {
    try {
        f();
    } catch (const icl::Error& e) {
        return e.what();
    }
    return "";
}

icl::TensorSpec spec(const std::string& name, const icl::Shape& shape) {
    icl::TensorSpec s;
    s.name = name;
    s.shape = shape;
    return s;
}

// A small parameter registry with odd shapes, a 0-d and a 1-d tensor.
icl::TensorTable small_table(int64_t c = 5) {
    icl::TensorTable t;
    t.add(spec("wte", {7, c}));
    t.add(spec("h.0.attn.w", {8, c}));
    t.add(spec("h.0.ln.g", {c}));
    t.add(spec("scale", {}));
    t.add(spec("odd", {3, 1, 2}));
    return t;
}
const char* kConfig = "{\"n_layer\": 1, \"n_embd\": 5, \"opt\": {\"eps\": 1e-5, \"tied\": true}}";

template <class real> std::vector<real> filled(const icl::TensorTable& t, uint64_t seed, real pad) {
    std::vector<real> p(t.total, pad);
    auto v = random_values<real>(t.total, seed);
    for (size_t i = 0; i < t.size(); i++)
        for (int64_t k = 0; k < t.specs[i].numel(); k++) p[t.offsets[i] + (size_t)k] = v[t.offsets[i] + (size_t)k];
    return p;
}

}  // namespace

TEST_SUITE("checkpoint") {

TEST_CASE("safetensors round trip: bit-exact F32/F64/I32, metadata, 8-byte aligned header") {
    TmpDir dir;
    auto a = random_values<float>(35, 1);
    auto b = random_values<double>(7, 2);
    auto c = random_ints(6, 3);
    auto s = random_values<float>(1, 4);
    std::vector<icl::StEntry> entries = {
        {"a.weight", {5, 7}, a.data()}, {"b", {7}, b.data()}, {"c", {2, 1, 3}, c.data()},
        {"scalar", {}, s.data()},       {"empty", {0, 4}, a.data()},
    };
    std::map<std::string, std::string> md = {{"step", "12"}, {"note", "quotes \" and \\ and unicode \xc3\xa9"}};
    const std::string p = dir / "x.safetensors";
    icl::safetensors_save(p, entries, md);

    const std::string file = slurp(p);
    uint64_t n = header_len(file);
    CHECK(n % 8 == 0);
    CHECK(file[8] == '{');
    CHECK(file.size() == 8 + n + 35 * 4 + 7 * 8 + 6 * 4 + 4);
    CHECK(nlohmann::json::parse(file.substr(8, n))["b"]["data_offsets"] == nlohmann::json::array({0, 56}));  // F64 first

    icl::SafetensorsFile f = icl::safetensors_open(p);
    CHECK(f.metadata() == md);
    CHECK(f.names() == std::vector<std::string>{"b", "a.weight", "c", "scalar", "empty"});
    for (auto& name : f.names()) CHECK(f.info(name).begin % icl::st_dtype_size(f.info(name).dtype) == 0);
    CHECK(f.info("c").dtype == icl::StDtype::I32);
    CHECK(f.info("scalar").shape.empty());
    std::vector<float> ra(35), rs(1);
    std::vector<double> rb(7);
    std::vector<int32_t> rc(6);
    f.read("a.weight", {5, 7}, ra.data());
    f.read("b", {7}, rb.data());
    f.read("c", {2, 1, 3}, rc.data());
    f.read("scalar", {}, rs.data());
    f.read("empty", {0, 4}, (float*)nullptr);
    CHECK(std::memcmp(ra.data(), a.data(), 35 * 4) == 0);
    CHECK(std::memcmp(rb.data(), b.data(), 7 * 8) == 0);
    CHECK(rc == c);
    CHECK(rs == s);

    // An empty file: no tensors, no metadata.
    icl::safetensors_save(dir / "e.safetensors", {});
    icl::SafetensorsFile e = icl::safetensors_open(dir / "e.safetensors");
    CHECK(e.names().empty());
    CHECK(e.metadata().empty());
}

TEST_CASE("safetensors read: F32 <-> F64 conversion, and refusals of name, shape and dtype") {
    TmpDir dir;
    std::vector<float> f = {1.5f, -0.1f, 3e38f};
    std::vector<double> d = {0.1, -2.0, 1e300};
    std::vector<int32_t> i = {1, 2, 3};
    const std::string p = dir / "x.safetensors";
    icl::safetensors_save(p, {{"f", {3}, f.data()}, {"d", {3}, d.data()}, {"i", {3}, i.data()}});
    icl::SafetensorsFile st = icl::safetensors_open(p);
    std::vector<double> fd(3);
    st.read("f", {3}, fd.data());
    CHECK(fd == std::vector<double>{1.5, (double)-0.1f, (double)3e38f});
    std::vector<float> df(3);
    st.read("d", {3}, df.data());
    CHECK(df[0] == 0.1f);
    CHECK(df[1] == -2.0f);
    CHECK(std::isinf(df[2]));
    CHECK_THROWS_WITH_AS(st.read("i", {3}, df.data()), doctest::Contains("tensor 'i' is I32, cannot read it as float"), icl::Error);
    CHECK_THROWS_WITH_AS(st.read("i", {3}, fd.data()), doctest::Contains("cannot read it as double"), icl::Error);
    std::vector<int32_t> ii(3);
    CHECK_THROWS_WITH_AS(st.read("f", {3}, ii.data()), doctest::Contains("tensor 'f' is F32, cannot read it as int32"), icl::Error);
    st.read("i", {3}, ii.data());
    CHECK(ii == i);
    CHECK_THROWS_WITH_AS(st.read("nope", {3}, df.data()), doctest::Contains("no tensor named 'nope'"), icl::Error);
    CHECK_THROWS_WITH_AS(st.read("f", {1, 3}, df.data()), doctest::Contains("tensor 'f' has shape (3,), expected (1,3)"), icl::Error);
    CHECK_THROWS_AS(st.info("nope"), icl::Error);
    CHECK(st.has("d"));
    CHECK_FALSE(st.has("x"));
}

TEST_CASE("python (json + numpy) reads our safetensors files" * NUMPY_CASE) {
    TmpDir dir;
    auto a = random_values<float>(15, 11);
    auto b = random_values<double>(4, 12);
    auto c = random_ints(3, 13);
    icl::safetensors_save(dir / "x.safetensors", {{"a", {3, 5}, a.data()}, {"b", {2, 2}, b.data()}, {"c", {3}, c.data()}},
                          {{"format", "icl.cpp"}, {"k", "v"}});
    spit(dir / "a.raw", std::string((const char*)a.data(), 60));
    spit(dir / "b.raw", std::string((const char*)b.data(), 32));
    spit(dir / "c.raw", std::string((const char*)c.data(), 12));
    // An independent reader written from the format description (the safetensors package itself is used
    // as well when it happens to be installed).
    std::string script =
        "import json, struct, numpy as np\n"
        "D = '" + dir.path + "/'\n"
        "buf = open(D + 'x.safetensors', 'rb').read()\n"
        "(n,) = struct.unpack('<Q', buf[:8])\n"
        "assert n % 8 == 0\n"
        "h = json.loads(buf[8:8 + n].decode('utf-8'))\n"
        "data = buf[8 + n:]\n"
        "assert h.pop('__metadata__') == {'format': 'icl.cpp', 'k': 'v'}\n"
        "dt = {'F32': '<f4', 'F64': '<f8', 'I32': '<i4'}\n"
        "spans = sorted(tuple(v['data_offsets']) for v in h.values())\n"
        "pos = 0\n"
        "for b_, e_ in spans: assert b_ == pos; pos = e_\n"
        "assert pos == len(data)\n"
        "want = {'a': ((3, 5), 'F32'), 'b': ((2, 2), 'F64'), 'c': ((3,), 'I32')}\n"
        "assert set(h) == set(want)\n"
        "for name, (shape, dtype) in want.items():\n"
        "    v = h[name]\n"
        "    assert v['dtype'] == dtype and tuple(v['shape']) == shape, (name, v)\n"
        "    b_, e_ = v['data_offsets']\n"
        "    arr = np.frombuffer(data[b_:e_], dtype=dt[dtype]).reshape(shape)\n"
        "    assert arr.tobytes() == open(D + name + '.raw', 'rb').read(), name\n"
        "try:\n"
        "    from safetensors.numpy import load_file\n"
        "except ImportError:\n"
        "    load_file = None\n"
        "if load_file:\n"
        "    t = load_file(D + 'x.safetensors')\n"
        "    for name in want: assert t[name].tobytes() == open(D + name + '.raw', 'rb').read(), name\n";
    CHECK(run_python(dir, script));
}

TEST_CASE("safetensors refusals: header length, truncation, trailing garbage") {
    TmpDir dir;
    auto a = random_values<float>(12, 21);
    const std::string p = dir / "good.safetensors";
    icl::safetensors_save(p, {{"a", {3, 4}, a.data()}, {"b", {2}, a.data()}}, {{"m", "1"}});
    const std::string good = slurp(p);
    const uint64_t n = header_len(good);
    REQUIRE(good.size() == 8 + n + 56);

    CHECK_THROWS_WITH_AS(icl::safetensors_open(dir / "missing.safetensors"), doctest::Contains("cannot open"), icl::Error);
    CHECK_THROWS_WITH_AS(icl::safetensors_open(dir.path), doctest::Contains("it is a directory"), icl::Error);
    spit(dir / "empty", "");
    check_open_refused(dir / "empty", "shorter than the 8-byte header length");
    spit(dir / "seven", good.substr(0, 7));
    check_open_refused(dir / "seven", "shorter than the 8-byte header length");

    std::string b = good;
    b[7] = (char)0x7f;
    spit(dir / "absurd", b);
    check_open_refused(dir / "absurd", "absurd header length");
    b = good;
    b[0] = 0;
    b[1] = 0;
    b[2] = 0x10;  // 1 MB: plausible, but past the end of this file
    spit(dir / "past", b);
    check_open_refused(dir / "past", "runs past the end of the file");
    // Every single-byte corruption of the length field is refused.
    for (int k = 0; k < 8; k++)
        for (int flip : {0x01, 0x08, 0x80, 0xff}) {
            CAPTURE(k);
            CAPTURE(flip);
            b = good;
            b[k] = (char)(b[k] ^ flip);
            spit(dir / "flip", b);
            CHECK_THROWS_AS(icl::safetensors_open(dir / "flip"), icl::Error);
        }
    // Truncation anywhere: inside the length, inside the header, inside the data.
    for (size_t cut : {(size_t)3, (size_t)8, (size_t)9, (size_t)(8 + n / 2), (size_t)(8 + n - 1), (size_t)(8 + n),
                       (size_t)(8 + n + 1), good.size() - 4, good.size() - 1}) {
        CAPTURE(cut);
        spit(dir / "cut", good.substr(0, cut));
        CHECK_THROWS_AS(icl::safetensors_open(dir / "cut"), icl::Error);
    }
    spit(dir / "short", good.substr(0, good.size() - 1));
    check_open_refused(dir / "short", "truncated safetensors file: the header describes 56 data bytes, the file holds 55");
    spit(dir / "long", good + "garbage!");
    check_open_refused(dir / "long", "8 bytes of trailing garbage");
    // A header length 8 larger than written: the JSON swallows the first data bytes.
    b = good;
    b[0] = (char)(b[0] + 8);
    spit(dir / "longer", b);
    CHECK_THROWS_AS(icl::safetensors_open(dir / "longer"), icl::Error);
}

TEST_CASE("safetensors: F16 and BF16 tensors (PyTorch's half types) read as float and double, exactly") {
    // bit patterns and their values worked out from the formats' definitions (sign, exponent bias 15 / 127, mantissa)
    const uint16_t h[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x3555, 0x0000, 0x8000, 0x7C00};
    const float hv[] = {1.0f, -2.0f, 65504.0f, 5.9604644775390625e-08f /* 2^-24 */, 0.333251953125f /* 1365/4096 */, 0.0f, -0.0f,
                        std::numeric_limits<float>::infinity()};
    const uint16_t b[] = {0x3F80, 0xC040, 0x4049, 0x0080};
    const float bv[] = {1.0f, -3.0f, 3.140625f, 1.1754943508222875e-38f /* 2^-126 */};
    std::string hdr = "{\"h\": {\"dtype\": \"F16\", \"shape\": [8], \"data_offsets\": [0, 16]}, "
                      "\"b\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [16, 24]}, "
                      "\"i\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [24, 32]}}";
    while (hdr.size() % 8) hdr += ' ';
    std::string file(8, '\0');
    const uint64_t n = hdr.size();
    std::memcpy(&file[0], &n, 8);
    file += hdr + std::string((const char*)h, 16) + std::string((const char*)b, 8) + std::string(8, '\0');
    TmpDir dir;
    spit(dir / "half.safetensors", file);
    icl::SafetensorsFile f = icl::safetensors_open(dir / "half.safetensors");
    float x[8];
    double y[8];
    f.read("h", {8}, x);
    f.read("h", {8}, y);
    for (int i = 0; i < 8; i++) {
        CAPTURE(i);
        CHECK(x[i] == hv[i]);
        CHECK(y[i] == (double)hv[i]);
    }
    CHECK(std::signbit(x[6]));
    f.read("b", {4}, x);
    for (int i = 0; i < 4; i++) CHECK(x[i] == bv[i]);
    CHECK(f.info("i").dtype == icl::StDtype::I64);  // validated, listed, never read
    CHECK_THROWS_WITH_AS(f.read("i", {1}, x), doctest::Contains("tensor 'i' is I64, cannot read it as float"), icl::Error);
}

TEST_CASE("safetensors refusals: malformed JSON headers, dtypes, shapes and offsets") {
    TmpDir dir;
    const std::string d16(16, 'x');  // 16 data bytes: room for a (4,) F32 tensor
    struct Case {
        std::string header;
        std::string data;
        const char* problem;
    };
    const std::vector<Case> cases = {
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}", d16, "not valid JSON"},
        {"not json at all", d16, "not valid JSON"},
        {"", "", "not valid JSON"},
        {"[1, 2]", "", "not a JSON object"},
        {"\"text\"", "", "not a JSON object"},
        {"{\"a\": 5}", "", "entry 'a' is not a JSON object"},
        {"{\"a\": {\"shape\": [4], \"data_offsets\": [0, 16]}}", d16, "tensor 'a' has no dtype"},
        {"{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 16]}}", d16, "tensor 'a' has no shape"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4]}}", d16, "tensor 'a' has no data_offsets"},
        {"{\"a\": {\"dtype\": \"F8_E4M3\", \"shape\": [16], \"data_offsets\": [0, 16]}}", d16, "unsupported dtype F8_E4M3"},
        {"{\"a\": {\"dtype\": \"C64\", \"shape\": [2], \"data_offsets\": [0, 16]}}", d16, "unsupported dtype C64"},
        {"{\"a\": {\"dtype\": \"F16\", \"shape\": [4], \"data_offsets\": [0, 16]}}", d16, "but F16 (4,) needs 8"},
        {"{\"a\": {\"dtype\": 32, \"shape\": [4], \"data_offsets\": [0, 16]}}", d16, "unsupported dtype 32"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [-4], \"data_offsets\": [0, 16]}}", d16, "shape must hold non-negative integers"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2.0, 2], \"data_offsets\": [0, 16]}}", d16, "shape must hold non-negative integers"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": 4, \"data_offsets\": [0, 16]}}", d16, "shape is not a list"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [18446744073709551615], \"data_offsets\": [0, 16]}}", d16, "absurd dimension"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4], \"data_offsets\": [0, 16]}}", d16, "needs more than 2^64"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0]}}", d16, "data_offsets is not a list [begin, end]"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16, 32]}}", d16, "data_offsets is not a list"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, -16]}}", d16, "data_offsets must hold non-negative"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [16, 0]}}", d16, "end before begin"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [5], \"data_offsets\": [0, 16]}}", d16, "span 16 bytes, but F32 (5,) needs 20"},
        {"{\"a\": {\"dtype\": \"F64\", \"shape\": [4], \"data_offsets\": [0, 16]}}", d16, "but F64 (4,) needs 32"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", d16 + d16, "16 bytes of trailing garbage"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [16, 32]}}", d16 + d16, "hole of 16 bytes"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
         " \"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 24]}}", d16 + d16, "tensors 'a' and 'b' overlap"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
         " \"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", d16, "overlap"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
         " \"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [16, 32]}}", d16 + d16, "lists 'a' twice"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 32]}}", d16, "span 32 bytes"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [8], \"data_offsets\": [0, 32]}}", d16, "the header describes 32 data bytes, the file holds 16"},
        {"{\"__metadata__\": {\"step\": 5}}", "", "__metadata__ value of 'step' is not a string"},
        {"{\"__metadata__\": [\"a\"]}", "", "__metadata__ is not a JSON object"},
    };
    for (size_t k = 0; k < cases.size(); k++) {
        CAPTURE(cases[k].header);
        std::string p = dir / ("bad" + std::to_string(k));
        spit(p, make_st(cases[k].header, cases[k].data));
        check_open_refused(p, cases[k].problem);
    }
    // What the rules allow: no padding, metadata anywhere, zero-sized tensors sharing an offset.
    spit(dir / "ok", make_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},\"z\":{\"dtype\":\"F64\",\"shape\":[0,3],"
                             "\"data_offsets\":[16,16]},\"__metadata__\":{\"x\":\"y\"}}",
                             d16));
    icl::SafetensorsFile ok = icl::safetensors_open(dir / "ok");
    CHECK(ok.names() == std::vector<std::string>{"a", "z"});
    CHECK(ok.metadata().at("x") == "y");
}

TEST_CASE("safetensors saves are atomic: a failed save leaves the previous file intact") {
    TmpDir dir;
    const std::string p = dir / "m.safetensors";
    std::vector<float> v1 = {1, 2, 3}, v2 = {4, 5, 6};
    icl::safetensors_save(p, {{"w", {3}, v1.data()}});
    auto still_v1 = [&] {
        std::vector<float> r(3);
        icl::safetensors_open(p).read("w", {3}, r.data());
        CHECK(r == v1);
    };
    std::vector<float> big(4096, 7.0f);  // disk full during the save (tests/test_fileio.cpp checks the writer)
    const std::string err = icl_test::in_child_with_file_limit(1024, [&] { icl::safetensors_save(p, {{"w", {4096}, big.data()}}); });
    CHECK(err.find("cannot write " + p + ": File too large") != std::string::npos);
    still_v1();
    CHECK(icl_test::list_dir(dir.path) == std::vector<std::string>{"m.safetensors"});
    icl::safetensors_save(p, {{"w", {3}, v2.data()}});
    std::vector<float> r(3);
    icl::safetensors_open(p).read("w", {3}, r.data());
    CHECK(r == v2);
    CHECK_THROWS_WITH_AS(icl::safetensors_save(dir / "nodir/m.safetensors", {}), doctest::Contains("nodir/m.safetensors"), icl::Error);
}

TEST_CASE("checkpoint round trip (float and double), metadata, F32 into a double model") {
    TmpDir dir;
    icl::TensorTable t = small_table();
    auto pf = filled<float>(t, 31, 0.0f);
    auto pd = filled<double>(t, 32, 0.0);
    icl::save_checkpoint(dir / "f.safetensors", "gpt", kConfig, t, pf.data(), {{"step", "100"}, {"val_loss", "2.5"}});
    icl::save_checkpoint(dir / "d.safetensors", "gpt", kConfig, t, pd.data());

    std::vector<float> lf(t.total, -7.0f);
    icl::load_checkpoint(dir / "f.safetensors", "gpt", kConfig, t, lf.data());
    std::vector<double> ld(t.total, -7.0);
    icl::load_checkpoint(dir / "d.safetensors", "gpt", kConfig, t, ld.data());
    for (size_t i = 0; i < t.size(); i++)
        for (int64_t k = 0; k < t.specs[i].numel(); k++) {
            size_t j = t.offsets[i] + (size_t)k;
            CHECK(std::memcmp(&lf[j], &pf[j], 4) == 0);
            CHECK(std::memcmp(&ld[j], &pd[j], 8) == 0);
        }
    size_t pad = t.offsets[1] - 1;  // padding after "wte" (7*5 = 35 elements, next at 48) is untouched
    REQUIRE(pad >= 35);
    CHECK(lf[pad] == -7.0f);
    CHECK(ld[pad] == -7.0);

    icl::CheckpointInfo ci = icl::read_checkpoint_metadata(dir / "f.safetensors");
    CHECK(ci.model == "gpt");
    CHECK(ci.config == kConfig);
    CHECK(ci.format_version == "1");
    CHECK(ci.metadata.at("step") == "100");
    CHECK(ci.metadata.at("format") == "icl.cpp");
    CHECK(icl::safetensors_open(dir / "f.safetensors").info("wte").dtype == icl::StDtype::F32);
    CHECK(icl::safetensors_open(dir / "d.safetensors").info("wte").dtype == icl::StDtype::F64);

    // A float checkpoint loads into a double model (exactly), and a double one into a float model.
    std::vector<double> fd(t.total, 0.0);
    icl::load_checkpoint(dir / "f.safetensors", "gpt", kConfig, t, fd.data());
    CHECK(fd[t.offset("h.0.attn.w") + 3] == (double)pf[t.offset("h.0.attn.w") + 3]);
    std::vector<float> df(t.total, 0.0f);
    icl::load_checkpoint(dir / "d.safetensors", "gpt", kConfig, t, df.data());
    CHECK(df[t.offset("scale")] == (float)pd[t.offset("scale")]);
    // The same config with another key order and 1 written as 1.0 is the same config.
    icl::load_checkpoint(dir / "f.safetensors", "gpt", "{\"opt\": {\"tied\": true, \"eps\": 0.00001}, \"n_embd\": 5, \"n_layer\": 1.0}", t,
                         lf.data());
}

TEST_CASE("checkpoint refusals: another program, format version, model kind, config") {
    TmpDir dir;
    icl::TensorTable t = small_table();
    auto p = filled<float>(t, 41, 0.0f);
    const std::string good = dir / "good.safetensors";
    icl::save_checkpoint(good, "gpt", kConfig, t, p.data());
    std::vector<float> dst(t.total, 0.0f);
    auto load = [&](const std::string& path, const char* kind, const std::string& config) {
        icl::load_checkpoint(path, kind, config, t, dst.data());
    };

    // A plain safetensors file (someone else's) is not an icl.cpp checkpoint.
    const std::string plain = dir / "plain.safetensors";
    icl::safetensors_save(plain, {{"wte", {7, 5}, p.data()}}, {{"format", "pt"}});
    CHECK_THROWS_WITH_AS(load(plain, "gpt", kConfig), doctest::Contains("not an icl.cpp checkpoint"), icl::Error);
    CHECK_THROWS_WITH_AS(icl::read_checkpoint_metadata(plain), doctest::Contains("not an icl.cpp checkpoint"), icl::Error);
    icl::safetensors_save(plain, {});
    CHECK_THROWS_WITH_AS(load(plain, "gpt", kConfig), doctest::Contains("not an icl.cpp checkpoint"), icl::Error);
    spit(dir / "garbage", "definitely not a checkpoint");
    CHECK_THROWS_AS(icl::read_checkpoint_metadata(dir / "garbage"), icl::Error);

    // Metadata edits go through the generic writer: rewrite the file with one metadata key changed.
    auto rewrite = [&](const std::string& key, const std::string& value, bool erase = false) {
        icl::SafetensorsFile f = icl::safetensors_open(good);
        auto md = f.metadata();
        if (erase) md.erase(key);
        else md[key] = value;
        std::vector<icl::StEntry> e;
        for (size_t i = 0; i < t.size(); i++) e.emplace_back(t.specs[i].name, t.specs[i].shape, p.data() + t.offsets[i]);
        std::string out = dir / ("edited_" + key + ".safetensors");
        icl::safetensors_save(out, e, md);
        return out;
    };
    CHECK_THROWS_WITH_AS(load(rewrite("format_version", "2"), "gpt", kConfig),
                         doctest::Contains("format version '2' is not supported (this build reads version 1)"), icl::Error);
    CHECK_THROWS_WITH_AS(icl::read_checkpoint_metadata(rewrite("format_version", "", true)), doctest::Contains("format version '(none)'"),
                         icl::Error);
    CHECK_THROWS_WITH_AS(load(rewrite("model", "", true), "gpt", kConfig), doctest::Contains("no 'model' in its metadata"), icl::Error);
    CHECK_THROWS_WITH_AS(load(rewrite("config", "{not json"), "gpt", kConfig), doctest::Contains("checkpoint config is not valid JSON"),
                         icl::Error);

    std::string m = error_of([&] { load(good, "cgt", kConfig); });
    CHECK(m == "checkpoint " + good + " holds a 'gpt' model, this run builds 'cgt'");

    m = error_of([&] { load(good, "gpt", "{\"n_layer\": 2, \"n_embd\": 5, \"opt\": {\"eps\": 1e-5, \"tied\": true}}"); });
    CHECK(m == "checkpoint " + good + ": config differs at 'n_layer': 1 in the checkpoint, 2 in this run");
    m = error_of([&] { load(good, "gpt", "{\"n_layer\": 1, \"n_embd\": 5, \"opt\": {\"eps\": 1e-5, \"tied\": false}}"); });
    CHECK(m.find("config differs at 'opt.tied': true in the checkpoint, false in this run") != std::string::npos);
    m = error_of([&] { load(good, "gpt", "{\"n_layer\": 1, \"n_embd\": 5, \"vocab\": 64, \"opt\": {\"eps\": 1e-5, \"tied\": true}}"); });
    CHECK(m.find("'vocab' is missing in the checkpoint, 64 in this run") != std::string::npos);
    m = error_of([&] { load(good, "gpt", "{\"n_layer\": 1, \"n_embd\": 5}"); });
    CHECK(m.find("'opt': {\"eps\":1e-05,\"tied\":true} in the checkpoint, missing in this run") != std::string::npos);
    m = error_of([&] { load(good, "gpt", "{\"n_layer\": \"1\", \"n_embd\": 5, \"opt\": {\"eps\": 1e-5, \"tied\": true}}"); });
    CHECK(m.find("'n_layer': 1 in the checkpoint, \"1\" in this run") != std::string::npos);
    CHECK_THROWS_WITH_AS(load(good, "gpt", "{oops"), doctest::Contains("model config is not valid JSON"), icl::Error);
    CHECK(icl::config_difference("[1, 2]", "[1, 3]") == "'(whole config)': [1,2] in the checkpoint, [1,3] in this run");
    CHECK(icl::config_difference("{\"a\": 1}", "{\"a\": 1.0}").empty());
    CHECK(std::all_of(dst.begin(), dst.end(), [](float x) { return x == 0.0f; }));  // nothing was loaded
}

TEST_CASE("checkpoint refusals: missing, extra, mis-shaped and integer tensors") {
    TmpDir dir;
    icl::TensorTable t = small_table();
    auto p = filled<float>(t, 51, 0.0f);
    const std::string path = dir / "c.safetensors";
    icl::save_checkpoint(path, "gpt", kConfig, t, p.data());
    std::vector<float> dst(t.total, 9.0f);

    // The model grew a tensor the checkpoint lacks.
    icl::TensorTable more = small_table();
    more.add(spec("lm_head", {5, 7}));
    std::vector<float> big(more.total, 9.0f);
    std::string m = error_of([&] { icl::load_checkpoint(path, "gpt", kConfig, more, big.data()); });
    CHECK(m == "checkpoint " + path + ": tensor 'lm_head' (5,7) is missing");
    // The checkpoint has a tensor the model lacks.
    icl::TensorTable fewer;
    fewer.add(spec("wte", {7, 5}));
    fewer.add(spec("h.0.attn.w", {8, 5}));
    fewer.add(spec("h.0.ln.g", {5}));
    fewer.add(spec("scale", {}));
    m = error_of([&] { icl::load_checkpoint(path, "gpt", kConfig, fewer, dst.data()); });
    CHECK(m == "checkpoint " + path + ": tensor 'odd' is not part of this 'gpt' model");
    // Same names, another shape.
    icl::TensorTable wide = small_table(4);
    m = error_of([&] { icl::load_checkpoint(path, "gpt", kConfig, wide, dst.data()); });
    CHECK(m == "checkpoint " + path + ": tensor 'wte' has shape (7,5), model expects (7,4)");
    icl::TensorTable t2;
    t2.add(spec("wte", {7, 5}));
    t2.add(spec("h.0.attn.w", {8, 4}));
    auto p2 = filled<float>(t2, 52, 0.0f);
    icl::save_checkpoint(dir / "x.safetensors", "gpt", kConfig, t2, p2.data());
    icl::TensorTable t3;
    t3.add(spec("wte", {7, 5}));
    t3.add(spec("h.0.attn.w", {8, 5}));
    std::vector<float> d3(t3.total, 0.0f);
    m = error_of([&] { icl::load_checkpoint(dir / "x.safetensors", "gpt", kConfig, t3, d3.data()); });
    CHECK(m == "checkpoint " + dir / "x.safetensors" + ": tensor 'h.0.attn.w' has shape (8,4), model expects (8,5)");
    CHECK(std::all_of(d3.begin(), d3.end(), [](float x) { return x == 0.0f; }));  // checks come before any read
    // An integer tensor under a parameter's name.
    std::vector<int32_t> ints(35, 1);
    icl::TensorTable t4;
    t4.add(spec("wte", {7, 5}));
    icl::safetensors_save(dir / "i.safetensors", {{"wte", {7, 5}, ints.data()}},
                          {{"format", "icl.cpp"}, {"format_version", "1"}, {"model", "gpt"}, {"config", kConfig}});
    std::vector<float> d4(t4.total, 0.0f);
    CHECK_THROWS_WITH_AS(icl::load_checkpoint(dir / "i.safetensors", "gpt", kConfig, t4, d4.data()),
                         doctest::Contains("tensor 'wte' has dtype I32, model expects floating point"), icl::Error);
    // A corrupted checkpoint is refused by the safetensors layer.
    std::string bytes = slurp(path);
    spit(dir / "trunc.safetensors", bytes.substr(0, bytes.size() - 3));
    CHECK_THROWS_WITH_AS(icl::load_checkpoint(dir / "trunc.safetensors", "gpt", kConfig, t, dst.data()),
                         doctest::Contains("truncated safetensors file"), icl::Error);
    CHECK(std::all_of(dst.begin(), dst.end(), [](float x) { return x == 9.0f; }));
}

TEST_CASE("checkpoint saves are atomic: a failed save keeps the previous checkpoint loadable") {
    TmpDir dir;
    icl::TensorTable t = small_table();
    auto p1 = filled<float>(t, 61, 0.0f);
    auto p2 = filled<float>(t, 62, 0.0f);
    const std::string path = dir / "model.safetensors";
    icl::save_checkpoint(path, "gpt", kConfig, t, p1.data(), {{"step", "1"}});
    const std::string err = icl_test::in_child_with_file_limit(256, [&] {  // disk full during the save
        icl::save_checkpoint(path, "gpt", kConfig, t, p2.data(), {{"step", "2"}});
    });
    CHECK(err.find("File too large") != std::string::npos);
    std::vector<float> r(t.total, 0.0f);
    icl::load_checkpoint(path, "gpt", kConfig, t, r.data());
    CHECK(icl::read_checkpoint_metadata(path).metadata.at("step") == "1");
    CHECK(std::memcmp(r.data(), p1.data(), 4 * (size_t)t.specs[0].numel()) == 0);
}

}  // TEST_SUITE
