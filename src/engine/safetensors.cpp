// safetensors.cpp — the .safetensors writer and validating reader declared in safetensors.h.
#include "engine/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/fileio.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "icl.cpp file formats assume a little-endian host (x86-64, ARM64)"
#endif

namespace icl {

using ojson = nlohmann::ordered_json;

// The reference implementation refuses headers over 100 MB; so do we (a corrupted length field would
// otherwise make us allocate gigabytes).
static const uint64_t kMaxHeader = 100000000;

struct DtypeRow { StDtype d; const char* name; size_t size; bool is_float; };
static const DtypeRow kDtypes[] = {
    {StDtype::F32, "F32", 4, true},  {StDtype::F64, "F64", 8, true}, {StDtype::I32, "I32", 4, false},
    {StDtype::F16, "F16", 2, true},  {StDtype::BF16, "BF16", 2, true}, {StDtype::I64, "I64", 8, false},
    {StDtype::I16, "I16", 2, false}, {StDtype::I8, "I8", 1, false},    {StDtype::U8, "U8", 1, false},
    {StDtype::BOOL, "BOOL", 1, false},
};
static const DtypeRow& dtype_row(StDtype d) {
    for (const DtypeRow& r : kDtypes)
        if (r.d == d) return r;
    ICL_ASSERT(false);
    return kDtypes[0];
}
const char* st_dtype_name(StDtype d) { return dtype_row(d).name; }
size_t st_dtype_size(StDtype d) { return dtype_row(d).size; }
bool st_dtype_is_float(StDtype d) { return dtype_row(d).is_float; }

// half: 1 sign, 5 exponent (bias 15), 10 mantissa bits; subnormals are m·2^-24, exponent 31 is inf/NaN.
float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v;
    if (e == 0) v = std::ldexp((float)m, -24);
    else if (e == 31) v = m ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    else v = std::ldexp((float)(m | 0x400), (int)e - 25);
    return sign ? -v : v;
}
// bfloat16 is the top half of a float's bits.
float bfloat16_to_float(uint16_t b) {
    const uint32_t bits = (uint32_t)b << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
}

// ---- writing -------------------------------------------------------------------------------------------

void safetensors_save(const std::string& path, const std::vector<StEntry>& entries,
                      const std::map<std::string, std::string>& metadata) {
    // 8-byte dtypes first (stable), so every tensor starts at a multiple of its element size.
    std::vector<size_t> order(entries.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return st_dtype_size(entries[a].dtype) > st_dtype_size(entries[b].dtype);
    });

    ojson header = ojson::object();
    if (!metadata.empty()) {
        ojson m = ojson::object();
        for (auto& kv : metadata) m[kv.first] = kv.second;
        header["__metadata__"] = m;
    }
    std::vector<ByteSpan> parts;
    parts.push_back({nullptr, 8});   // header length, filled in below
    parts.push_back({nullptr, 0});   // header
    uint64_t offset = 0;
    std::set<std::string> seen;
    for (size_t i : order) {
        const StEntry& e = entries[i];
        ICL_ASSERT_MSG(!e.name.empty() && e.name != "__metadata__", "bad safetensors tensor name '" + e.name + "'");
        ICL_ASSERT_MSG(seen.insert(e.name).second, "tensor '" + e.name + "' given twice");
        for (int64_t d : e.shape) ICL_ASSERT_MSG(d >= 0, e.name + " " + shape_str(e.shape));
        uint64_t nbytes = (uint64_t)numel(e.shape) * st_dtype_size(e.dtype);
        ICL_ASSERT_MSG(nbytes == 0 || e.data != nullptr, e.name);
        ojson t = ojson::object();
        t["dtype"] = st_dtype_name(e.dtype);
        t["shape"] = ojson::array();
        for (int64_t d : e.shape) t["shape"].push_back((uint64_t)d);
        t["data_offsets"] = ojson::array({offset, offset + nbytes});
        header[e.name] = t;
        parts.push_back({e.data, (size_t)nbytes});
        offset += nbytes;
    }
    std::string text;
    try {
        text = header.dump();
    } catch (const nlohmann::json::exception&) {
        fail(strfmt("cannot write %s: a tensor name or metadata value is not valid UTF-8", path.c_str()));
    }
    text.append((8 - text.size() % 8) % 8, ' ');
    unsigned char len[8];
    for (int k = 0; k < 8; k++) len[k] = (unsigned char)((uint64_t)text.size() >> (8 * k));
    parts[0].data = len;
    parts[1] = {text.data(), text.size()};
    write_file_atomic(path, parts);
}

// ---- reading -------------------------------------------------------------------------------------------

std::vector<std::string> SafetensorsFile::names() const {
    std::vector<std::string> r;
    for (auto& t : tensors_) r.push_back(t.name);
    return r;
}

const StTensorInfo& SafetensorsFile::info(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) fail(strfmt("%s: no tensor named '%s'", path_.c_str(), name.c_str()));
    return tensors_[it->second];
}

void SafetensorsFile::read_bytes(const StTensorInfo& t, void* dst) const {
    file_->pread_exact(dst, (size_t)(t.end - t.begin), data_start_ + t.begin, path_ + ": tensor '" + t.name + "'");
}

const StTensorInfo& SafetensorsFile::checked(const std::string& name, const Shape& expected) const {
    const StTensorInfo& t = info(name);
    if (t.shape != expected)
        fail(strfmt("%s: tensor '%s' has shape %s, expected %s", path_.c_str(), name.c_str(), shape_str(t.shape).c_str(),
                    shape_str(expected).c_str()));
    return t;
}

// F16 / BF16 bits into float or double.
template <typename real>
static void widen_half(StDtype d, const std::vector<uint16_t>& h, real* dst) {
    for (size_t i = 0; i < h.size(); i++) dst[i] = (real)(d == StDtype::F16 ? half_to_float(h[i]) : bfloat16_to_float(h[i]));
}

void SafetensorsFile::read(const std::string& name, const Shape& expected, float* dst) const {
    const StTensorInfo& t = checked(name, expected);
    if (t.dtype == StDtype::F32) return read_bytes(t, dst);
    if (t.dtype == StDtype::F16 || t.dtype == StDtype::BF16) {
        std::vector<uint16_t> tmp((size_t)numel(t.shape));
        read_bytes(t, tmp.data());
        return widen_half(t.dtype, tmp, dst);
    }
    if (t.dtype == StDtype::F64) {
        std::vector<double> tmp((size_t)numel(t.shape));
        read_bytes(t, tmp.data());
        for (size_t i = 0; i < tmp.size(); i++) dst[i] = (float)tmp[i];
        return;
    }
    fail(strfmt("%s: tensor '%s' is %s, cannot read it as float", path_.c_str(), name.c_str(), st_dtype_name(t.dtype)));
}

void SafetensorsFile::read(const std::string& name, const Shape& expected, double* dst) const {
    const StTensorInfo& t = checked(name, expected);
    if (t.dtype == StDtype::F64) return read_bytes(t, dst);
    if (t.dtype == StDtype::F16 || t.dtype == StDtype::BF16) {
        std::vector<uint16_t> tmp((size_t)numel(t.shape));
        read_bytes(t, tmp.data());
        return widen_half(t.dtype, tmp, dst);
    }
    if (t.dtype == StDtype::F32) {
        std::vector<float> tmp((size_t)numel(t.shape));
        read_bytes(t, tmp.data());
        for (size_t i = 0; i < tmp.size(); i++) dst[i] = (double)tmp[i];
        return;
    }
    fail(strfmt("%s: tensor '%s' is %s, cannot read it as double", path_.c_str(), name.c_str(), st_dtype_name(t.dtype)));
}

void SafetensorsFile::read(const std::string& name, const Shape& expected, int32_t* dst) const {
    const StTensorInfo& t = checked(name, expected);
    if (t.dtype != StDtype::I32)
        fail(strfmt("%s: tensor '%s' is %s, cannot read it as int32", path_.c_str(), name.c_str(), st_dtype_name(t.dtype)));
    read_bytes(t, dst);
}

// A JSON value as a non-negative integer, or fail.
static uint64_t json_uint(const nlohmann::json& v, const std::string& path, const std::string& name, const char* field) {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return (uint64_t)v.get<int64_t>();
    fail(strfmt("%s: tensor '%s': %s must hold non-negative integers, got %s", path.c_str(), name.c_str(), field,
                v.dump().substr(0, 40).c_str()));
}

SafetensorsFile safetensors_open(const std::string& path) {
    SafetensorsFile sf;
    sf.path_ = path;
    sf.file_ = std::make_shared<FileFd>(open_for_reading(path, kMaxDataFileBytes, "safetensors file"));
    const uint64_t fsize = sf.file_->size;
    auto pread_exact = [&](void* dst, size_t n, uint64_t at) { sf.file_->pread_exact(dst, n, at, path); };

    if (fsize < 8)
        fail(strfmt("%s: not a safetensors file (%llu bytes, shorter than the 8-byte header length)", path.c_str(),
                    (unsigned long long)fsize));
    unsigned char len[8];
    pread_exact(len, 8, 0);
    uint64_t n = 0;
    for (int k = 0; k < 8; k++) n |= (uint64_t)len[k] << (8 * k);
    if (n > kMaxHeader)
        fail(strfmt("%s: not a safetensors file (absurd header length %llu)", path.c_str(), (unsigned long long)n));
    if (n > fsize - 8)
        fail(strfmt("%s: safetensors header length %llu runs past the end of the file (%llu bytes)", path.c_str(),
                    (unsigned long long)n, (unsigned long long)fsize));
    std::string text((size_t)n, '\0');
    pread_exact(&text[0], text.size(), 8);
    sf.data_start_ = 8 + n;
    const uint64_t data_size = fsize - 8 - n;

    // Parse, refusing duplicate top-level keys (the JSON library would silently keep the last one).
    nlohmann::json h;
    std::string dup;
    try {
        std::set<std::string> keys;
        h = nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& v) {
            if (depth == 1 && ev == nlohmann::json::parse_event_t::key && !keys.insert(v.get<std::string>()).second && dup.empty())
                dup = v.get<std::string>();
            return true;
        });
    } catch (const nlohmann::json::parse_error& e) {
        fail(strfmt("%s: safetensors header is not valid JSON (error at byte %zu)", path.c_str(), (size_t)e.byte));
    } catch (const nlohmann::json::exception& e) {  // e.g. a number like 1e400 (out_of_range), not a parse error
        fail(strfmt("%s: safetensors header is not usable JSON (%s)", path.c_str(), e.what()));
    }
    if (!h.is_object()) fail(strfmt("%s: safetensors header is not a JSON object", path.c_str()));
    if (!dup.empty()) fail(strfmt("%s: safetensors header lists '%s' twice", path.c_str(), dup.c_str()));

    for (auto it = h.begin(); it != h.end(); ++it) {
        const std::string& name = it.key();
        const nlohmann::json& v = it.value();
        if (name == "__metadata__") {
            if (!v.is_object()) fail(strfmt("%s: __metadata__ is not a JSON object", path.c_str()));
            for (auto m = v.begin(); m != v.end(); ++m) {
                if (!m.value().is_string())
                    fail(strfmt("%s: __metadata__ value of '%s' is not a string", path.c_str(), m.key().c_str()));
                sf.metadata_[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        if (!v.is_object()) fail(strfmt("%s: entry '%s' is not a JSON object", path.c_str(), name.c_str()));
        for (const char* field : {"dtype", "shape", "data_offsets"})
            if (!v.contains(field)) fail(strfmt("%s: tensor '%s' has no %s", path.c_str(), name.c_str(), field));
        StTensorInfo t;
        t.name = name;
        const nlohmann::json& dt = v["dtype"];
        std::string dts = dt.is_string() ? dt.get<std::string>() : dt.dump();
        bool known = false;
        for (const DtypeRow& r : kDtypes)
            if (dts == r.name) { t.dtype = r.d; known = true; }
        if (!known)
            fail(strfmt("%s: tensor '%s' has unsupported dtype %s (supported: F32, F64, F16, BF16, I32, I64, I16, I8, U8, BOOL)",
                        path.c_str(), name.c_str(), dts.substr(0, 40).c_str()));
        const nlohmann::json& sh = v["shape"];
        if (!sh.is_array()) fail(strfmt("%s: tensor '%s': shape is not a list", path.c_str(), name.c_str()));
        // Byte size numel * dtype size, saturating at UINT64_MAX (it is compared with the offsets below).
        uint64_t nbytes = st_dtype_size(t.dtype);
        const uint64_t kMax = std::numeric_limits<uint64_t>::max();
        bool zero = false;
        for (auto& d : sh) {
            uint64_t x = json_uint(d, path, name, "shape");
            if (x > (uint64_t)std::numeric_limits<int64_t>::max())
                fail(strfmt("%s: tensor '%s': absurd dimension %llu", path.c_str(), name.c_str(), (unsigned long long)x));
            t.shape.push_back((int64_t)x);
            zero |= x == 0;
            nbytes = (x != 0 && nbytes > kMax / x) ? kMax : nbytes * x;
        }
        if (zero) nbytes = 0;
        const nlohmann::json& off = v["data_offsets"];
        if (!off.is_array() || off.size() != 2)
            fail(strfmt("%s: tensor '%s': data_offsets is not a list [begin, end]", path.c_str(), name.c_str()));
        t.begin = json_uint(off[0], path, name, "data_offsets");
        t.end = json_uint(off[1], path, name, "data_offsets");
        if (t.end < t.begin)
            fail(strfmt("%s: tensor '%s': data_offsets [%llu, %llu] end before begin", path.c_str(), name.c_str(),
                        (unsigned long long)t.begin, (unsigned long long)t.end));
        if (t.end - t.begin != nbytes)
            fail(strfmt("%s: tensor '%s': data_offsets [%llu, %llu] span %llu bytes, but %s %s needs %s", path.c_str(),
                        name.c_str(), (unsigned long long)t.begin, (unsigned long long)t.end,
                        (unsigned long long)(t.end - t.begin), st_dtype_name(t.dtype), shape_str(t.shape).c_str(),
                        nbytes == kMax ? "more than 2^64" : std::to_string(nbytes).c_str()));
        sf.tensors_.push_back(std::move(t));
    }

    // The tensors must tile [0, data_size) exactly.
    std::sort(sf.tensors_.begin(), sf.tensors_.end(), [](const StTensorInfo& a, const StTensorInfo& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
    });
    uint64_t pos = 0;
    std::string prev;
    for (auto& t : sf.tensors_) {
        if (t.begin < pos)
            fail(strfmt("%s: tensors '%s' and '%s' overlap in the data section", path.c_str(), prev.c_str(), t.name.c_str()));
        if (t.begin > pos)
            fail(strfmt("%s: hole of %llu bytes in the data section before tensor '%s'", path.c_str(),
                        (unsigned long long)(t.begin - pos), t.name.c_str()));
        pos = t.end;
        prev = t.name;
    }
    if (pos > data_size)
        fail(strfmt("%s: truncated safetensors file: the header describes %llu data bytes, the file holds %llu", path.c_str(),
                    (unsigned long long)pos, (unsigned long long)data_size));
    if (pos < data_size)
        fail(strfmt("%s: %llu bytes of trailing garbage after the last tensor", path.c_str(),
                    (unsigned long long)(data_size - pos)));
    for (size_t i = 0; i < sf.tensors_.size(); i++) sf.index_[sf.tensors_[i].name] = i;
    return sf;
}

}  // namespace icl
