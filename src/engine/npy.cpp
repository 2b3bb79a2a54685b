// npy.cpp — the .npy writer and reader declared in npy.h.
#include "engine/npy.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "icl.cpp file formats assume a little-endian host (x86-64, ARM64)"
#endif

namespace icl {

// ---- writing -----------------------------------------------------------------------------------------------

static std::string shape_repr(const Shape& shape) {  // Python's repr of a tuple: (), (5,), (3, 4)
    std::string s = "(";
    for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
    if (shape.size() == 1) s += ",";
    return s + ")";
}

std::string npy_header(const std::string& descr, const Shape& shape) {
    ICL_ASSERT_MSG(descr == "<f4" || descr == "<f8" || descr == "<i4", descr);
    for (int64_t d : shape) ICL_ASSERT_MSG(d >= 0, shape_str(shape));
    std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_repr(shape) + ", }";
    // Like NumPy (>= 1.23), leave room for the first axis to grow to 21 digits in place.
    if (!shape.empty()) dict.append(21 - std::to_string(shape[0]).size(), ' ');
    // Then pad with spaces and a final '\n' to a multiple of 64 bytes; NumPy pads by a whole 64 when the
    // length is already aligned, and so do we, so that our headers are byte-identical to np.save's.
    // Version 1.0 has a 2-byte length; a header too long for it (thousands of dims) needs version 2.0.
    size_t prefix = 10;
    size_t hlen = dict.size() + 1;
    hlen += 64 - (prefix + hlen) % 64;
    if (hlen > 65535) {
        prefix = 12;
        hlen = dict.size() + 1;
        hlen += 64 - (prefix + hlen) % 64;
    }
    std::string h = "\x93NUMPY";
    h += (char)(prefix == 10 ? 1 : 2);
    h += (char)0;
    for (size_t i = 0; i < prefix - 8; i++) h += (char)((hlen >> (8 * i)) & 0xff);
    h += dict;
    h.append(prefix + hlen - h.size() - 1, ' ');
    h += '\n';
    return h;
}

static void save_raw(const std::string& path, const char* descr, const void* data, size_t itemsize, const Shape& shape) {
    for (int64_t d : shape)
        if (d < 0) fail(strfmt("cannot write %s: negative dimension in shape %s", path.c_str(), shape_str(shape).c_str()));
    std::string h = npy_header(descr, shape);
    size_t nbytes = (size_t)numel(shape) * itemsize;
    ICL_ASSERT(nbytes == 0 || data != nullptr);
    write_file_atomic(path, {{h.data(), h.size()}, {data, nbytes}});
}

void npy_save(const std::string& path, const float* data, const Shape& shape) { save_raw(path, "<f4", data, 4, shape); }
void npy_save(const std::string& path, const double* data, const Shape& shape) { save_raw(path, "<f8", data, 8, shape); }
void npy_save(const std::string& path, const int32_t* data, const Shape& shape) { save_raw(path, "<i4", data, 4, shape); }

// ---- reading -----------------------------------------------------------------------------------------------

void NpyArray::check_dtype(const char* want) const {
    if (descr != want) fail(strfmt("npy array has dtype '%s', but '%s' was asked for", descr.c_str(), want));
}

std::vector<double> NpyArray::to_double() const {
    std::vector<double> out((size_t)size());
    const unsigned char* p = bytes.data();
    for (size_t i = 0; i < out.size(); i++) {
        if (descr == "<f4") { float v; std::memcpy(&v, p + 4 * i, 4); out[i] = v; }
        else if (descr == "<f8") { std::memcpy(&out[i], p + 8 * i, 8); }
        else { int32_t v; std::memcpy(&v, p + 4 * i, 4); out[i] = v; }
    }
    return out;
}

namespace {

// A parser for the one Python literal a .npy header holds: a dict with string keys whose values are
// strings, True/False or tuples of non-negative integers. Key order, spacing and trailing commas are free.
struct HeaderParser {
    const std::string& s;
    const std::string& path;
    size_t i = 0;

    [[noreturn]] void bad(const std::string& what) const {
        fail(strfmt("%s: unparsable .npy header (%s): %s", path.c_str(), what.c_str(), printable().c_str()));
    }
    std::string printable() const {  // the dict, trimmed and with control bytes escaped, for messages
        std::string r;
        size_t end = s.find_last_not_of(" \n\r\t");
        for (size_t k = 0; end != std::string::npos && k <= end && r.size() < 120; k++) {
            unsigned char c = (unsigned char)s[k];
            r += (c >= 32 && c < 127) ? std::string(1, (char)c) : strfmt("\\x%02x", c);
        }
        return r;
    }
    void ws() { while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++; }
    bool eat(char c) {
        ws();
        if (i < s.size() && s[i] == c) { i++; return true; }
        return false;
    }
    void expect(char c) { if (!eat(c)) bad(strfmt("expected '%c'", c)); }
    std::string str() {
        ws();
        if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) bad("expected a quoted string");
        char q = s[i++];
        size_t b = i;
        while (i < s.size() && s[i] != q) {
            if (s[i] == '\\' || s[i] == '\n') bad("unsupported character in string");
            i++;
        }
        if (i >= s.size()) bad("unterminated string");
        return s.substr(b, i++ - b);
    }
    bool boolean() {
        ws();
        if (s.compare(i, 4, "True") == 0) { i += 4; return true; }
        if (s.compare(i, 5, "False") == 0) { i += 5; return false; }
        bad("expected True or False");
    }
    Shape tuple() {
        Shape shape;
        expect('(');
        if (eat(')')) return shape;
        for (;;) {
            ws();
            if (i < s.size() && s[i] == '-') fail(strfmt("%s: negative dimension in .npy shape: %s", path.c_str(), printable().c_str()));
            if (i >= s.size() || s[i] < '0' || s[i] > '9') bad("expected a non-negative integer in the shape");
            int64_t v = 0;
            while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
                if (v > (INT64_MAX - 9) / 10) fail(strfmt("%s: absurd dimension in .npy shape: %s", path.c_str(), printable().c_str()));
                v = v * 10 + (s[i++] - '0');
            }
            shape.push_back(v);
            bool comma = eat(',');
            if (eat(')')) {
                // Python: (n) is just n, not a tuple; NumPy always writes (n,).
                if (shape.size() == 1 && !comma) bad("1-d shape must be written (n,)");
                return shape;
            }
            if (!comma) bad("expected ',' or ')' in the shape");
        }
    }
};

}  // namespace

NpyArray npy_load(const std::string& path) {
    const FileFd f = open_for_reading(path, kMaxDataFileBytes, ".npy file");
    const uint64_t fsize = f.size;
    uint64_t at = 0;
    auto read_exact = [&](void* dst, size_t n) {  // the next n bytes
        f.pread_exact(dst, n, at, path);
        at += n;
    };

    unsigned char pre[12];
    if (fsize < 10) fail(strfmt("%s: not a .npy file (only %llu bytes)", path.c_str(), (unsigned long long)fsize));
    read_exact(pre, 8);
    if (std::memcmp(pre, "\x93NUMPY", 6) != 0) fail(strfmt("%s: not a .npy file (bad magic string)", path.c_str()));
    const int major = pre[6], minor = pre[7];
    if (!((major == 1 || major == 2 || major == 3) && minor == 0))
        fail(strfmt("%s: unsupported .npy format version %d.%d (this reader handles 1.0, 2.0, 3.0)", path.c_str(), major, minor));
    const size_t lenbytes = major == 1 ? 2 : 4;
    if (fsize < 8 + lenbytes) fail(strfmt("%s: truncated .npy file (no header length)", path.c_str()));
    read_exact(pre + 8, lenbytes);
    uint64_t hlen = 0;
    for (size_t k = 0; k < lenbytes; k++) hlen |= (uint64_t)pre[8 + k] << (8 * k);
    const uint64_t data_start = 8 + lenbytes + hlen;
    if (data_start > fsize)
        fail(strfmt("%s: .npy header length %llu runs past the end of the file (%llu bytes)", path.c_str(),
                    (unsigned long long)hlen, (unsigned long long)fsize));
    std::string header((size_t)hlen, '\0');
    read_exact(&header[0], header.size());

    // Parse the dict.
    HeaderParser p{header, path};
    std::string descr;
    Shape shape;
    bool have_descr = false, have_fortran = false, have_shape = false, fortran = false;
    p.expect('{');
    while (!p.eat('}')) {
        std::string key = p.str();
        p.expect(':');
        bool* seen = key == "descr" ? &have_descr : key == "fortran_order" ? &have_fortran : key == "shape" ? &have_shape : nullptr;
        if (!seen) p.bad("unknown key '" + key + "'");
        if (*seen) p.bad("duplicate key '" + key + "'");
        *seen = true;
        if (key == "descr") descr = p.str();
        else if (key == "fortran_order") fortran = p.boolean();
        else shape = p.tuple();
        if (!p.eat(',')) { p.expect('}'); break; }
    }
    p.ws();
    if (p.i != header.size()) p.bad("unexpected text after the dict");
    if (!have_descr || !have_fortran || !have_shape)
        p.bad(std::string("missing key '") + (!have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape") + "'");
    if (descr != "<f4" && descr != "<f8" && descr != "<i4")
        fail(strfmt("%s: unsupported .npy dtype '%s' (supported: '<f4', '<f8', '<i4')", path.c_str(), descr.c_str()));
    if (fortran) fail(strfmt("%s: .npy array is in Fortran order (only C order is supported)", path.c_str()));

    // Check the shape against the bytes actually present before allocating anything.
    const uint64_t itemsize = descr == "<f8" ? 8 : 4;
    const uint64_t avail = fsize - data_start;
    // numel * itemsize, saturating at UINT64_MAX (no real file is that large).
    const uint64_t kMax = UINT64_MAX;
    uint64_t need = itemsize;
    bool zero = false;
    for (int64_t d : shape) {
        zero |= d == 0;
        need = (d != 0 && need > kMax / (uint64_t)d) ? kMax : need * (uint64_t)d;
    }
    if (zero) need = 0;
    if (need != avail)
        fail(strfmt("%s: %s .npy file: shape %s %s needs %s data bytes, the file has %llu", path.c_str(),
                    need > avail ? "truncated" : "trailing bytes in", shape_str(shape).c_str(), descr.c_str(),
                    need == kMax ? "more than 2^64" : std::to_string(need).c_str(), (unsigned long long)avail));

    NpyArray a;
    a.descr = descr;
    a.shape = shape;
    a.bytes.resize((size_t)need);
    read_exact(a.bytes.data(), a.bytes.size());
    return a;
}

}  // namespace icl
